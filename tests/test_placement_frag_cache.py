"""The ``elastico`` scorer's incremental fragmentation cache gives exactly the placements of the
from-scratch path (``ClusterState(frag_cache=False)``, which works every candidate node's
fragmentation out of its GPUs at each placement), on random instances and on a trace round."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico import trace
from elastico.errors import Infeasible
from elastico.mig import MIG_PROFILES
from elastico.model import Configuration, Node
from elastico.placer.fragmentation import FragmentationModel, NodeSummaries, typical_pods
from elastico.placer.placement import ClusterState
from elastico.predictor import AnalyticSlowdown, JobProfile

from test_placement_properties import clusters, configs

shapes = st.lists(st.tuples(st.sampled_from([0, 1000, 4000]), st.sampled_from([0, 250, 300, 500, 1000]),
                            st.sampled_from([0, 1, 2])), min_size=1, max_size=6)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), configs(), st.floats(0.0, 1.0), st.sampled_from([1.05, 1.2, 1.5, 3.0])),
        st.tuples(st.just("release"), st.integers(0, 1000)),
        st.tuples(st.just("unhealthy"), st.integers(0, 1000)),
        st.tuples(st.just("healthy"), st.integers(0, 1000)),
        st.tuples(st.just("copy"),),
        st.tuples(st.just("mig"), st.integers(0, 1000), st.booleans()),
    ),
    min_size=1, max_size=30,
)


def run_steps(states, nodes, ops, on_copy, check):
    """Apply the ``steps`` strategy's operations to every state of ``states`` alike: place with
    the elastico scorer (every state must give the same outcome: assignment, reason and
    slowdown), release a placed job, mark a GPU unhealthy/healthy, put a node's GPUs in or out
    of MIG mode (an empty node: changed; else Infeasible and nothing changed), or ``on_copy(states)``
    (returns the states to go on with); ``check(states)`` after every step."""
    gpus = [(i, g) for i, n in enumerate(nodes) for g in range(n.num_gpus)]
    placed = []
    for t, op in enumerate(ops):
        if op[0] == "place":
            prof = JobProfile("t", "training", op[2], op[1].gpu_mem_gib)
            outs = [cs.place(f"j{t}", op[1], prof, op[3], scorer="elastico") for cs in states]
            assert all(o == outs[0] for o in outs[1:])
            if outs[0].placed:
                placed.append(f"j{t}")
        elif op[0] == "release" and placed:
            j = placed.pop(op[1] % len(placed))
            for cs in states:
                cs.release(j)
        elif op[0] in ("unhealthy", "healthy"):
            for cs in states:
                (cs.mark_unhealthy if op[0] == "unhealthy" else cs.mark_healthy)(*gpus[op[1] % len(gpus)])
        elif op[0] == "copy":
            states = on_copy(states)
        elif op[0] == "mig":  # MIG mode of a whole node: only when it is empty
            n = op[1] % len(nodes)
            if nodes[n].gpu_model in MIG_PROFILES:
                for cs in states:
                    if cs.node_empty(n):
                        cs.set_mig_mode(n, range(nodes[n].num_gpus), op[2])
                        assert all(cs.is_mig(n, g) == op[2] for g in range(nodes[n].num_gpus))
                    else:
                        before = cs.gpu_usage()
                        with pytest.raises(Infeasible):
                            cs.set_mig_mode(n, range(nodes[n].num_gpus), op[2])
                        assert all((before[k] == v).all() for k, v in cs.gpu_usage().items())
        check(states)


def typical(shape_list):
    cpu, gpu, n = zip(*[(c, g if k else 0, k if g else 0) for c, g, k in shape_list])
    return typical_pods(list(cpu), list(gpu), list(n), threshold=1.0)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), shapes, steps)
def test_cached_and_from_scratch_paths_place_identically(cluster, shape_list, ops):
    nodes, mig = cluster
    tp = typical(shape_list)
    states = [ClusterState(nodes, mig_gpus=mig, slowdown_model=AnalyticSlowdown(1.8), frag_cache=c)
              for c in (True, False)]
    for cs in states:
        cs.set_typical_pods(tp)

    def on_copy(states):  # a round's copy carries the cache on; the original keeps its own
        old = states[0]
        states = [old.copy(), states[1]]
        old.place("other", Configuration("o", nodes[0].gpu_model, 1, 0.1, 1.0, 0.0, 0.0, 1.0),
                  JobProfile("t", "training", 0.1, 1.0), 3.0, scorer="elastico")
        return states

    # check_invariants includes: cached rows == rows recomputed from the book
    run_steps(states, nodes, ops, on_copy, lambda states: states[0].check_invariants())


def test_node_summaries_update_equals_a_fresh_computation():
    tp = typical_pods([1000, 2000, 0], [500, 1000, 0], [1, 2, 0], threshold=1.0)
    fm = FragmentationModel(tp, ("V100",))
    rows = np.array([[1000, 1000, 1000], [500, 0, 1000]])
    ns = NodeSummaries(fm, rows, [4000, 1000], [0, 0])
    ns.update(0, [500, 250, 1000], 3000)
    fresh = fm.fragmentation(np.array([3000, 1000]), np.array([[500, 250, 1000], [500, 0, 1000]]), np.array([0, 0]))
    assert np.allclose(ns.F, fresh, rtol=1e-12, atol=0)  # the same up to the order of a float sum
    assert ns.cnt.tolist() == fm.counts(np.array([[500, 250, 1000], [500, 0, 1000]]))[0].tolist()
    # hand-worked for node 0 after the update: L = 1750; pod (1 core, 0.5 GPU, p=1/3) fits on
    # GPUs with >= 500 (500 + 1000 = 1500); pod (2 x 1 GPU, p=1/3) needs 2 whole GPUs: only
    # 1 -> no; the CPU-only pod (p=1/3) counts all L.  F = 1750 - 1500/3 = 1250.
    assert np.isclose(ns.F[0], 1250.0)
    c = ns.copy()
    c.update(1, [0, 0, 0], 0)
    assert ns.rows[1].tolist() == [500, 0, 1000] and c.L[1] == 0


def test_a_trace_round_places_identically_with_and_without_the_cache():
    nodes = trace.sub_cluster(trace.read_nodes(), 128)
    largest = {}
    for n in nodes:
        largest[n.gpu_model] = max(largest.get(n.gpu_model, 0), n.num_gpus)
    pods = [p for p in trace.read_pods() if p.num_gpus > 0][:400]
    reqs = []
    for i, p in enumerate(pods):
        allowed = [m for m in largest if (not p.gpu_models or m in p.gpu_models) and p.num_gpus <= largest[m]]
        if not allowed:
            continue
        m = allowed[i % len(allowed)]
        share = p.gpu_share if p.num_gpus == 1 else 1.0
        c = Configuration("req", m, p.num_gpus, share, 4.0 * share, p.cpu, p.mem_gib, 1.0)
        reqs.append((p.name, c, JobProfile("t", "training", 0.4 * share, c.gpu_mem_gib), 1.5))
    tp = typical_pods([round(c.cpu * 1000) for _, c, _, _ in reqs],
                      [round(c.gpu_share * 1000) for _, c, _, _ in reqs], [c.num_gpus for _, c, _, _ in reqs])
    out = []
    for cache in (True, False):
        cs = ClusterState(nodes, frag_cache=cache)
        cs.set_typical_pods(tp)
        out.append([o.assignment for o in cs.place_many(reqs, scorer="elastico")])
        if cache:
            cs.check_invariants()
    assert out[0] == out[1]
    assert sum(a is not None for a in out[0]) > 100  # the round filled the cluster: a real test


@settings(max_examples=150, deadline=None)
@given(shapes, st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=8), min_size=1, max_size=4),
       st.integers(0, 8000), st.integers(1, 1000), st.sampled_from([0, 1000, 4000]))
def test_node_increase_is_gpu_increase_for_every_gpu_that_can_take_the_pod(shape_list, rows, cpu, m, cpu_m):
    # the one-node Python path against the batched numpy one; GPUs more than a rounding step
    # short of m cannot take the pod and get inf (placement never reads them)
    width = max(len(r) for r in rows)
    grid = np.array([r + [0] * (width - len(r)) for r in rows])
    ns = NodeSummaries(FragmentationModel(typical(shape_list), ("V100",)), grid,
                       [cpu] * len(rows), [0] * len(rows))
    ref = ns.gpu_increase(np.arange(len(rows)), m, cpu_m)
    for n in range(len(rows)):
        got = ns.node_increase(n, m, cpu_m)
        for j, o in enumerate(grid[n].tolist()):
            if o < m - 1:
                assert got[j] == np.inf
            else:
                assert np.isclose(got[j], ref[n, j], rtol=0, atol=1e-9), (n, j)


@settings(max_examples=150, deadline=None)
@given(shapes, st.lists(st.integers(0, 1000), min_size=1, max_size=8), st.integers(0, 8000))
def test_node_summaries_update_counts_exactly_like_counts(shape_list, row, cpu):
    fm = FragmentationModel(typical(shape_list), ("V100",))
    ns = NodeSummaries(fm, np.zeros((2, len(row)), dtype=np.int64), [0, 0], [0, 0])
    assert ns.key(1) == ((0,) * len(row), 0, 0, ns.F[1])
    ns.update(1, row, cpu)
    assert ns.key(1) == (tuple(row), cpu, 0, ns.F[1])  # the state key follows the update
    cnt, S = fm.counts(np.array([row]))
    assert ns.cnt[1].tolist() == cnt[0].tolist() and ns.S[1].tolist() == S[0].tolist()
    assert ns.L[1] == sum(row)
    assert np.isclose(ns.F[1], fm.fragmentation(np.array([cpu]), np.array([row]), np.array([0]))[0],
                      rtol=1e-12, atol=1e-9)


def test_health_changes_reach_the_eligible_gpus_of_a_state_and_not_of_its_copy():
    # the per-model mask of healthy MPS GPUs is kept between placements: a GPU marked
    # unhealthy must leave it at once, in the state marked only
    node = Node("n0", "V100", 2, 16.0, 16.0, 64.0)
    cfg = Configuration("c", "V100", 1, 1.0, 1.0, 0.0, 0.0, 1.0)
    prof = JobProfile("t", "training", 0.5, 1.0)
    for scorer in ("bestfit", "elastico"):
        cs = ClusterState([node])
        assert cs.place("a", cfg, prof, 1.5, scorer=scorer).assignment.gpu_indices == (0,)
        cs.release("a")
        other = cs.copy()
        cs.mark_unhealthy(0, 0)
        assert cs.place("b", cfg, prof, 1.5, scorer=scorer).assignment.gpu_indices == (1,)
        assert not cs.place("c", cfg, prof, 1.5, scorer=scorer).placed  # GPU 0 is out
        assert other.place("b", cfg, prof, 1.5, scorer=scorer).assignment.gpu_indices == (0,)
        cs.mark_healthy(0, 0)
        assert cs.place("c", cfg, prof, 1.5, scorer=scorer).assignment.gpu_indices == (0,)
