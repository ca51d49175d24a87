"""The native FGD fragmentation kernel (native/frag.hpp, ``NodeSummaries(native=True)``) gives
bit-identical numbers to the plain-Python reference (``native=False``), and the placer books
exactly the same GPUs with either (``ClusterState(frag_native=...)``).

Bit for bit, not approximately: placements compare costs rounded to 1e-9, so one ulp of
difference could move a cost across a rounding boundary and change a placement."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico import trace
from elastico.errors import InvalidArgument
from elastico.model import Configuration
from elastico.placer.fragmentation import MILLI, FragmentationModel, NodeSummaries, typical_pods
from elastico.placer.placement import ClusterState
from elastico.placer.placement.frag_cache import _round9
from elastico.predictor import AnalyticSlowdown, JobProfile

from test_placement_frag_cache import run_steps, shapes, steps
from test_placement_properties import clusters

MODELS = ("A", "B", "C")

# free milli-GPU values a placer row holds: whole and empty GPUs (unhealthy ones are 0), MPS
# leftovers, MIG-mode GPUs' free slices (round(k / 7 * 1000)) and anything else
free_milli = st.one_of(st.sampled_from([0, 0, 1000, 1000, 143, 286, 429, 571, 714, 857, 500, 250, 1, 999]),
                       st.integers(0, 1000))
gpu_need = st.one_of(st.sampled_from([100, 250, 300, 333, 500, 1000]), st.integers(1, 1000))
pod = st.tuples(st.sampled_from([0, 500, 1000, 2500, 4000, 16000]), gpu_need,
                st.sampled_from([0, 1, 1, 1, 1, 2, 2, 4, 8]), st.sets(st.sampled_from(MODELS), max_size=2))


@st.composite
def workloads(draw):
    """(typical pods, node rows [B, G] with padding, GPUs per node, cpu [B], model [B])."""
    pods = draw(st.lists(pod, min_size=1, max_size=14))
    cpu, gpu, n, types = zip(*[(c, g if k else 0, k, t) for c, g, k, t in pods])
    tp = typical_pods(list(cpu), list(gpu), list(n), list(types), threshold=draw(st.sampled_from([0.8, 1.0, 1.0])))
    B = draw(st.integers(1, 5))
    G = draw(st.integers(1, 8))
    ngpus = draw(st.lists(st.integers(1, G), min_size=B, max_size=B))
    rows = np.zeros((B, G), dtype=np.int64)
    for b, k in enumerate(ngpus):
        rows[b, :k] = draw(st.lists(free_milli, min_size=k, max_size=k))
    node_cpu = draw(st.lists(st.integers(0, 32000), min_size=B, max_size=B))
    model = draw(st.lists(st.integers(0, len(MODELS) - 1), min_size=B, max_size=B))
    return tp, rows, ngpus, np.array(node_cpu, dtype=np.int64), np.array(model, dtype=np.int64)


def pair(tp, rows, cpu, model):
    fm = FragmentationModel(tp, MODELS)
    return NodeSummaries(fm, rows, cpu, model), NodeSummaries(fm, rows, cpu, model, native=True)


def assert_same_summaries(py: NodeSummaries, nat: NodeSummaries) -> None:
    for name in ("rows", "cpu", "cnt", "S", "L"):
        assert getattr(py, name).tolist() == getattr(nat, name).tolist(), name
    # F bit for bit (tobytes: also the sign of a zero)
    assert py.F.tobytes() == nat.F.tobytes(), (py.F.tolist(), nat.F.tolist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.data())
def test_native_summaries_and_increases_equal_the_python_reference_bit_for_bit(wl, data):
    tp, rows, ngpus, cpu, model = wl
    py, nat = pair(tp, rows, cpu, model)
    assert nat.native and not py.native
    B, G = rows.shape
    shapes = data.draw(st.lists(st.tuples(st.integers(1, 1000), st.sampled_from([0, 500, 1000, 8000, 40000])),
                                min_size=1, max_size=4))
    for _ in range(data.draw(st.integers(0, 8))):
        n = data.draw(st.integers(0, B - 1))
        row = [0] * G
        row[:ngpus[n]] = data.draw(st.lists(free_milli, min_size=ngpus[n], max_size=ngpus[n]))
        c = data.draw(st.integers(0, 32000))
        py.update(n, row, c)
        nat.update(n, row, c)
        assert_same_summaries(py, nat)
    for n in range(B):
        for m, cpu_m in shapes:
            a, b = py.node_increase(n, m, cpu_m), nat.node_increase(n, m, cpu_m)
            assert np.array(a).tobytes() == np.array(b).tobytes(), (n, m, cpu_m, a, b)
            # no free milli-GPU to take the pod (padding, unhealthy, too full): inf
            assert [math.isinf(x) for x in b] == [o < m - 1 for o in nat.rows[n].tolist()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(1, 1000), st.sampled_from([0, 1000, 8000]), st.data())
def test_refresh_writes_the_python_branch_numbers_for_stale_nodes_only(wl, m, cpu_m, data):
    tp, rows, ngpus, cpu, model = wl
    py, nat = pair(tp, rows, cpu, model)
    B = rows.shape[0]
    offsets = np.concatenate([[0], np.cumsum(ngpus)]).astype(np.int64)
    nflat = int(offsets[-1])
    version = np.array(data.draw(st.lists(st.integers(0, 3), min_size=B, max_size=B)), dtype=np.int64)
    seen = np.array(data.draw(st.lists(st.integers(0, 3), min_size=B, max_size=B)), dtype=np.int64)
    nodes = np.array(sorted(data.draw(st.sets(st.integers(0, B - 1), min_size=1))), dtype=np.int64)
    d_all, new_all = np.full(nflat + 1, -7.0), np.full(nflat + 1, -7, dtype=np.int64)
    stale = [n for n in nodes.tolist() if seen[n] != version[n]]
    seen0 = seen.copy()
    # over the limit: nothing changes
    if stale:
        assert nat.refresh(nodes, seen, version, offsets, m, cpu_m, d_all, new_all, len(stale) - 1) == len(stale)
        assert seen.tolist() == seen0.tolist() and (d_all == -7.0).all()
    assert nat.refresh(nodes, seen, version, offsets, m, cpu_m, d_all, new_all, 64) == len(stale)
    for n in range(B):
        lo, hi = int(offsets[n]), int(offsets[n + 1])
        if n in stale:
            want = [_round9(d / MILLI) for d in py.node_increase(n, m, cpu_m)][:hi - lo]
            assert np.array(want).tobytes() == d_all[lo:hi].tobytes()
            assert new_all[lo:hi].tolist() == [max(o - m, 0) for o in rows[n, :hi - lo].tolist()]
            assert seen[n] == version[n]
        else:
            assert (d_all[lo:hi] == -7.0).all() and (new_all[lo:hi] == -7).all() and seen[n] == seen0[n]
    assert d_all[nflat] == -7.0  # the spare slot: padding GPUs are never written


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(1, 1000), st.data())
def test_plan_orders_candidates_as_the_numpy_path(wl, m, data):
    tp, rows, ngpus, cpu, model = wl
    _, nat = pair(tp, rows, cpu, model)
    B = rows.shape[0]
    offsets = np.concatenate([[0], np.cumsum(ngpus)]).astype(np.int64)
    nflat = int(offsets[-1])
    gpu_node = np.repeat(np.arange(B), ngpus).astype(np.int64)
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, nflat - 1), min_size=1))), dtype=np.int64)
    seen, version = np.zeros(B, np.int64), np.zeros(B, np.int64)  # nothing stale: d_all as drawn
    # few distinct values, so that ties (also -0.0 against 0.0) and inf occur
    d_all = np.array(data.draw(st.lists(st.sampled_from([0.0, -0.0, 0.001, 0.25, -0.125, 0.003, math.inf]),
                                        min_size=nflat + 1, max_size=nflat + 1)))
    new_all = np.array(data.draw(st.lists(st.sampled_from([0, 100, 500]), min_size=nflat + 1, max_size=nflat + 1)),
                       dtype=np.int64)
    uniq, counts, first, order, d_gpu, new, opt_key, visit = nat.plan(
        idx, gpu_node, seen, version, offsets, m, 0, d_all, new_all, 64, 0.003)
    # ClusterState._place_elastico's numpy path
    node_of = gpu_node[idx]
    per_node = np.bincount(node_of)
    want_uniq = per_node.nonzero()[0]
    assert uniq.tolist() == want_uniq.tolist() and counts.tolist() == per_node[want_uniq].tolist()
    assert first.tolist() == (per_node[want_uniq].cumsum() - per_node[want_uniq]).tolist()
    assert d_gpu.tobytes() == d_all[idx].tobytes() and new.tolist() == new_all[idx].tolist()
    assert order.tolist() == np.lexsort((new_all[idx], d_all[idx], node_of)).tolist()
    want_key = np.round(np.minimum.reduceat(d_all[idx], first) + 0.003 * want_uniq, 9)
    assert opt_key.tolist() == want_key.tolist()  # == on floats: -0.0 and 0.0 compare equal
    assert visit.tolist() == np.lexsort((want_uniq, want_key)).tolist()


def test_hand_worked_node_on_both_paths():
    # native/tests/test_frag.cpp's workload: pods (1000 milli-CPU, 1 x 500, p 1/2), (4000, 2 x
    # 1000, 1/4), (0, 1 x 250, 1/4, model B only); node on model A with free {1000, 1000, 600,
    # 200}, 8000 milli-CPU: F = 0.5 * 200 + 0.25 * 800 + 0.25 * 2800 = 1000 milli-GPU.
    tp = typical_pods([1000, 1000, 4000, 0], [500, 500, 1000, 250], [1, 1, 2, 1],
                      [frozenset(), frozenset(), frozenset(), frozenset({"B"})], threshold=1.0)
    for native in (False, True):
        ns = NodeSummaries(FragmentationModel(tp, ("A", "B")), np.zeros((1, 4), np.int64), [0], [0], native=native)
        ns.update(0, [1000, 1000, 600, 200], 8000)
        assert ns.F[0] == 1000.0 and ns.L[0] == 2800
        # 500 milli-GPU and 2000 milli-CPU on GPU 0 -> F 1250 (+250); on GPU 2 (600 -> 100)
        # -> F 800 (-200); GPU 3 (200 free) cannot take it
        assert ns.node_increase(0, 500, 2000) == [250.0, 250.0, -200.0, math.inf]
        # 3000 milli-CPU free: the 2-GPU pod no longer fits: F = 100 + 700 + 700
        ns.update(0, [1000, 1000, 600, 200], 3000)
        assert ns.F[0] == 1500.0


def test_native_copy_is_independent():
    tp = typical_pods([1000, 0], [500, 1000], [1, 2], threshold=1.0)
    fm = FragmentationModel(tp, ("A",))
    ns = NodeSummaries(fm, np.array([[1000, 1000], [500, 0]]), [4000, 4000], [0, 0], native=True)
    cp = ns.copy()
    cp.update(0, [0, 0], 0)
    assert ns.rows[0].tolist() == [1000, 1000] and ns.F[0] == 0.0 and cp.F[0] == 0.0
    assert cp.L[0] == 0 and ns.L[0] == 2000
    ns.update(1, [1000, 1000], 4000)
    assert cp.rows[1].tolist() == [500, 0] and ns.rows[1].tolist() == [1000, 1000]


def test_native_summaries_survive_pickle_and_deepcopy():
    tp = typical_pods([1000, 0], [500, 1000], [1, 2], threshold=1.0)
    fm = FragmentationModel(tp, ("A",))
    ns = NodeSummaries(fm, np.array([[1000, 1000], [500, 0]]), [4000, 4000], [0, 0], native=True)
    for other in (pickle.loads(pickle.dumps(ns)), copy.deepcopy(ns)):
        assert other.native
        other.update(0, [500, 0], 1000)  # writes into its own arrays, not ns'
        # pods: (1000 milli-CPU, 1 x 500, p 1/2) fits on GPU 0 (S = 500), (0, 2 x 1000, 1/2)
        # does not: F = 500 - 0.5 * 500
        assert other.F[0] == 250.0 and other.rows[0].tolist() == [500, 0]
        assert ns.rows[0].tolist() == [1000, 1000] and ns.F[0] == 0.0


def test_bad_arguments_name_the_array():
    tp = typical_pods([1000], [500], [1], threshold=1.0)
    ns = NodeSummaries(FragmentationModel(tp, ("A",)), np.array([[1000, 500]]), [4000], [0], native=True)
    with pytest.raises(ValueError, match="node: 3 outside 0..0"):
        ns.update(3, [0, 0], 0)
    with pytest.raises(ValueError, match="row: must be 1-D of length G=2"):
        ns.update(0, [0, 0, 0], 0)
    seen = np.zeros(1, np.int32)  # not int64: the kernel never writes into a converted copy
    with pytest.raises(ValueError, match="seen: must have dtype int64"):
        ns.refresh(np.array([0]), seen, np.zeros(1, np.int64), np.array([0, 2]), 500, 0,
                   np.zeros(3), np.zeros(3, np.int64), 64)
    with pytest.raises(ValueError, match="d_all, new_all: need at least"):
        ns.refresh(np.array([0]), np.zeros(1, np.int64), np.ones(1, np.int64), np.array([0, 2]), 500, 0,
                   np.zeros(1), np.zeros(1, np.int64), 64)
    with pytest.raises(ValueError, match="idx: must be increasing flat GPU indices"):
        ns.plan(np.array([1, 0]), np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64),
                np.array([0, 2]), 500, 0, np.zeros(3), np.zeros(3, np.int64), 64, 0.003)
    with pytest.raises(ValueError, match="nodes: entry 0 = 1 outside"):
        ns.refresh(np.array([1]), np.zeros(1, np.int64), np.ones(1, np.int64), np.array([0, 2]), 500, 0,
                   np.zeros(3), np.zeros(3, np.int64), 64)
    py = NodeSummaries(FragmentationModel(tp, ("A",)), np.array([[1000, 500]]), [4000], [0])
    with pytest.raises(InvalidArgument, match="native"):
        py.refresh(np.array([0]), np.zeros(1, np.int64), np.ones(1, np.int64), np.array([0, 2]), 500, 0,
                   np.zeros(3), np.zeros(3, np.int64), 64)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), shapes, steps)
def test_native_and_python_placers_book_the_same_gpus(cluster, shape_list, ops):
    nodes, mig = cluster  # MIG-mode GPUs among them
    cpu, gpu, n = zip(*[(c, g if k else 0, k if g else 0) for c, g, k in shape_list])
    tp = typical_pods(list(cpu), list(gpu), list(n), threshold=1.0)
    states = [ClusterState(nodes, mig_gpus=mig, slowdown_model=AnalyticSlowdown(1.8), frag_native=nat)
              for nat in (True, False)]
    for cs in states:
        cs.set_typical_pods(tp)

    def check(states):
        fcs = [cs._frag_cache for cs in states]
        if fcs[0] is not None:
            assert fcs[0].native and not fcs[1].native
            assert_same_summaries(fcs[1], fcs[0])
        states[0].check_invariants()  # includes: kept rows == rows recomputed from the book

    run_steps(states, nodes, ops, lambda states: [cs.copy() for cs in states], check)


def test_trace_round_places_identically():
    # bench/placement_round.py's round, smaller: 128 GPUs of the trace, 400 GPU pods
    nodes = trace.sub_cluster(trace.read_nodes(), 128)
    models = {nd.gpu_model: nd.gpu_mem_gib for nd in nodes}
    pods = [p for p in trace.read_pods() if p.num_gpus > 0]
    rng = np.random.default_rng(3)
    jobs = []
    for i in np.sort(rng.choice(len(pods), size=400, replace=False)).tolist():
        p = pods[i]
        allowed = [m for m in models if not p.gpu_models or m in p.gpu_models]
        if allowed:
            m = allowed[int(rng.integers(len(allowed)))]
            share = p.gpu_share if p.num_gpus == 1 else 1.0
            cfg = Configuration("req", m, p.num_gpus, share, min(models[m], 16.0 * share), p.cpu, p.mem_gib, 1.0)
            jobs.append((p.name, cfg, JobProfile("t", "training", 0.4 * share, cfg.gpu_mem_gib), 1.5))
    tp = typical_pods([round(c.cpu * 1000) for _, c, _, _ in jobs],
                      [round(c.gpu_share * 1000) for _, c, _, _ in jobs], [c.num_gpus for _, c, _, _ in jobs])
    outs = []
    for native in (True, False):
        cs = ClusterState(nodes, frag_native=native)
        cs.mark_unhealthy(0, 1)
        cs.set_typical_pods(tp)
        outs.append(cs.place_many(jobs, scorer="elastico"))
        assert cs._frag_cache.native == native
    assert outs[0] == outs[1]
    assert sum(o.placed for o in outs[0]) > 100
