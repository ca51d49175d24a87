"""Property test: random clusters and random place/release sequences keep every invariant,
checked independently of ClusterState's own bookkeeping."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.model import Configuration, Node
from elastico.mig import MIG_PROFILES
from elastico.placer.placement import ClusterState, Gang
from elastico.predictor import AnalyticSlowdown, JobProfile

A100 = MIG_PROFILES["A100-40GB"]


@st.composite
def clusters(draw):
    nodes, mig = [], set()
    for i in range(draw(st.integers(1, 4))):
        model = draw(st.sampled_from(["V100", "A100-40GB"]))
        g = draw(st.integers(1, 8))
        bad = frozenset(j for j in range(g) if draw(st.integers(0, 5)) == 0)  # unhealthy GPUs
        nodes.append(Node(f"n{i}", model, g, 16.0 if model == "V100" else 40.0,
                          draw(st.sampled_from([4.0, 16.0, 64.0])), draw(st.sampled_from([32.0, 256.0])),
                          unhealthy_gpus=bad))
        if model == "A100-40GB":
            for j in range(g):
                if draw(st.booleans()):
                    mig.add((i, j))
    return nodes, mig


@st.composite
def configs(draw):
    model = draw(st.sampled_from(["V100", "A100-40GB"]))
    cpu = draw(st.sampled_from([0.0, 1.0, 4.0]))
    mem = draw(st.sampled_from([0.0, 8.0, 64.0]))
    kind = draw(st.sampled_from(["mps", "whole", "gang", "mig"]))
    if kind == "mig" and model == "A100-40GB":
        p = A100[draw(st.sampled_from(list(A100)))]
        return Configuration("mig", model, draw(st.integers(1, 2)), p.share,
                             draw(st.sampled_from([1.0, p.memory_gib])), cpu, mem, 1.0, p.name)
    if kind == "gang":
        return Configuration("gang", model, draw(st.integers(2, 4)), draw(st.sampled_from([0.5, 1.0])),
                             draw(st.sampled_from([2.0, 12.0])), cpu, mem, 1.0)
    share = 1.0 if kind == "whole" else draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75]))
    return Configuration(kind, model, 1, share, draw(st.sampled_from([1.0, 6.0, 15.0])), cpu, mem, 1.0)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("place"), configs(), st.floats(0.0, 1.0), st.sampled_from([1.0, 1.2, 1.5, 3.0]),
                  st.sampled_from(["bestfit", "firstfit", "elastico"]),
                  st.sampled_from([Gang(), Gang(), Gang(2), Gang(2, share_gpus=True), Gang(3), Gang(4, share_gpus=True),
                                  Gang(span_nodes=True)])),
        st.tuples(st.just("release"), st.integers(0, 1000)),
        st.tuples(st.just("unhealthy"), st.integers(0, 1000)),
    ),
    min_size=1, max_size=25,
)


def independent_check(cs, nodes, mig, live, kappa):
    offs = [0]
    for n in nodes:
        offs.append(offs[-1] + n.num_gpus)
    share = {}
    mem = {}
    occ = {}
    comp = {}
    cpu = [0.0] * len(nodes)
    hmem = [0.0] * len(nodes)
    act = {}
    whole = {}
    for j, (a, cfg, prof, bound, gang) in live.items():
        # a gang is whole: every GPU of the configuration, its CPU and memory, in its pods
        assert sum(len(pt.gpu_indices) for pt in a.parts) == cfg.num_gpus
        assert math.isclose(sum(pt.cpu for pt in a.parts), cfg.cpu, abs_tol=1e-9)
        assert math.isclose(sum(pt.mem_gib for pt in a.parts), cfg.mem_gib, abs_tol=1e-9)
        if gang.pods > 1:
            assert len(a.parts) == gang.pods
            assert {len(pt.gpu_indices) for pt in a.parts} == {cfg.num_gpus // gang.pods}
        if not gang.share_gpus:
            assert len(set(a.gpus)) == len(a.gpus), "two pods of one job on one GPU"
        if len(a.node_indices) > 1:
            assert gang.pods > 1 or gang.span_nodes, "a plain job split across nodes"
        for pt in a.parts:
            n = nodes[pt.node_index]
            assert pt.node == n.name and len(set(pt.gpu_indices)) == len(pt.gpu_indices)
            assert not pt.gpu_indices or n.gpu_model == cfg.gpu_model
            cpu[pt.node_index] += pt.cpu
            hmem[pt.node_index] += pt.mem_gib
        for (node_index, g), s in zip(a.gpus, [s for pt in a.parts for s in (pt.mig_starts or [None] * len(pt.gpu_indices))]):
            n = nodes[node_index]
            key = (node_index, g)
            assert 0 <= g < n.num_gpus
            if cfg.mig_profile:
                assert key in mig
                p = A100[cfg.mig_profile]
                assert s in p.starts
                m = ((1 << p.memory_slices) - 1) << s
                assert not occ.get(key, 0) & m, "MIG slices overlap"
                occ[key] = occ.get(key, 0) | m
                comp[key] = comp.get(key, 0) + p.compute_slices
                share[key] = share.get(key, 0.0) + p.compute_slices / 7
                mem[key] = mem.get(key, 0.0) + n.gpu_mem_gib * p.memory_slices / 8
                assert cfg.gpu_mem_gib <= n.gpu_mem_gib * p.memory_slices / 8
            else:
                assert key not in mig
                share[key] = share.get(key, 0.0) + cfg.gpu_share
                mem[key] = mem.get(key, 0.0) + cfg.gpu_mem_gib
                act.setdefault(key, []).append((j, prof.gpu_activity))
                if cfg.gpu_share == 1.0:
                    whole[key] = whole.get(key, 0) + 1
    for key in whole:  # a whole GPU has no other resident
        assert len(act[key]) == 1, f"whole GPU {key} shared"
    for key, s in share.items():
        assert s <= 1 + 1e-9, f"GPU {key} compute {s}"
        assert mem[key] <= nodes[key[0]].gpu_mem_gib + 1e-9
        assert comp.get(key, 0) <= 7
    for i, n in enumerate(nodes):
        assert cpu[i] <= n.cpu + 1e-9 and hmem[i] <= n.mem_gib + 1e-9
    sig = {j: 1.0 for j in live}
    for key, lst in act.items():
        total = sum(a for _, a in lst)
        for j, a in lst:
            s = 1.0 + kappa * (total - a) if a > 0 else 1.0
            sig[j] = max(sig[j], s)
    for j, s in sig.items():
        assert s <= live[j][3] + 1e-9, f"{j}: slowdown {s} > {live[j][3]}"
    pred = cs.predicted_slowdowns()
    assert set(pred) == set(live)
    for j in live:
        assert math.isclose(pred[j], sig[j], rel_tol=1e-9)
    assert math.isclose(cs.used_gpus(), sum(share.values()), abs_tol=1e-9)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), ops, st.sampled_from([0.5, 1.8]))
def test_random_place_release_keeps_invariants(cluster, steps, kappa):
    nodes, mig = cluster
    cs = ClusterState(nodes, mig_gpus=mig, slowdown_model=AnalyticSlowdown(kappa))
    live = {}
    unhealthy = {(i, g) for i, n in enumerate(nodes) for g in n.unhealthy_gpus}
    all_gpus = [(i, g) for i, n in enumerate(nodes) for g in range(n.num_gpus)]
    for t, op in enumerate(steps):
        if op[0] == "unhealthy":
            key = all_gpus[op[1] % len(all_gpus)]
            cs.mark_unhealthy(*key)
            unhealthy.add(key)
            assert set(cs.unhealthy_gpus()) == unhealthy
        elif op[0] == "place":
            _, cfg, a, bound, scorer, gang = op
            gang = gang if cfg.num_gpus % gang.pods == 0 else Gang()
            prof = JobProfile("t", "training", a, cfg.gpu_mem_gib)
            before = ({k: v.tolist() for k, v in cs.gpu_usage().items()}, list(map(repr, cs.assignments())),
                      [cs.node_free(i) for i in range(len(nodes))])
            out = cs.place(f"j{t}", cfg, prof, bound, scorer=scorer, gang=gang)
            if out.placed:
                a = out.assignment
                live[f"j{t}"] = (a, cfg, prof, bound, gang)
                # never on an unhealthy GPU (wholeness of gangs: independent_check)
                assert not set(a.gpus) & unhealthy
                # the returned slowdown is within the job's bound
                assert out.slowdown <= bound + 1e-9
            else:
                assert out.reason
                after = ({k: v.tolist() for k, v in cs.gpu_usage().items()}, list(map(repr, cs.assignments())),
                         [cs.node_free(i) for i in range(len(nodes))])
                assert after == before, "failed placement changed the state"
        elif live:
            j = sorted(live)[op[1] % len(live)]
            assert cs.release(j) == live.pop(j)[0]
        cs.check_invariants()
        independent_check(cs, nodes, mig, live, kappa)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), ops, st.sampled_from(["bestfit", "firstfit", "elastico"]))
def test_same_input_twice_gives_the_same_placements(cluster, steps, scorer):
    """Determinism: two fresh states fed the same operations agree on every outcome."""
    nodes, mig = cluster
    outs = []
    for _ in range(2):
        cs = ClusterState(nodes, mig_gpus=mig, slowdown_model=AnalyticSlowdown(1.8))
        seen, placed = [], []
        all_gpus = [(i, g) for i, n in enumerate(nodes) for g in range(n.num_gpus)]
        for t, op in enumerate(steps):
            if op[0] == "place":
                gang = op[5] if op[1].num_gpus % op[5].pods == 0 else Gang()
                out = cs.place(f"j{t}", op[1], JobProfile("t", "training", op[2], op[1].gpu_mem_gib),
                               op[3], scorer=scorer, gang=gang)
                seen.append((out.assignment, out.reason, out.slowdown))
                if out.placed:
                    placed.append(f"j{t}")
            elif op[0] == "release" and placed:
                cs.release(placed.pop(op[1] % len(placed)))
            elif op[0] == "unhealthy":
                cs.mark_unhealthy(*all_gpus[op[1] % len(all_gpus)])
        outs.append(seen)
    assert outs[0] == outs[1]
