"""Gangs and topology (issue 5 item 4): jobs of several pods, and one-pod jobs larger than any
node, placed all or nothing across nodes, preferring one node, then one topology domain.

Hand-worked cases first, then hypothesis properties on tiny clusters checked against a brute
force that enumerates every way to put the pods on each node's GPUs."""

import math
from itertools import combinations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Node
from elastico.mig import MIG_PROFILES
from elastico.placer.placement import TOPOLOGY_KEY, ClusterState, Gang
from elastico.predictor import AnalyticSlowdown, JobProfile

EPS = 1e-9


def node(name, gpus, zone=None, cpu=32.0, mem=256.0, model="V100", key=TOPOLOGY_KEY):
    labels = ((key, zone),) if zone is not None else ()
    return Node(name, model, gpus, 16.0, cpu, mem, labels=labels)


def cfg(gpus, share=1.0, gmem=4.0, cpu=0.0, mem=0.0, model="V100", mig=None):
    return Configuration("c", model, gpus, share, gmem, cpu, mem, 1.0, mig)


def prof(act=0.5, mem=4.0):
    return JobProfile("t", "training", act, mem)


def usage(cs):
    return ({k: v.tolist() for k, v in cs.gpu_usage().items()},
            [cs.node_free(i) for i in range(len(cs.nodes))], sorted(cs.job_ids()))


# ------------------------------------------------------------------------- hand-worked cases
def test_job_larger_than_any_node_spans_nodes_with_host_resources_split_per_gpu():
    # 6 GPUs, nodes of 4: no node can hold it, so 4 + 2; CPU 12 cores = 2 per GPU -> 8 + 4
    cs = ClusterState([node("n0", 4), node("n1", 4), node("n2", 2)])
    # a plain job stays on one node: refused, as before gangs existed
    out = cs.place("big", cfg(6, cpu=12.0, mem=60.0), prof(), 1.5)
    assert not out.placed and out.reason.startswith("no node with 6 GPU(s)")
    out = cs.place("big", cfg(6, cpu=12.0, mem=60.0), prof(), 1.5, gang=Gang(span_nodes=True))
    a = out.assignment
    assert out.placed and len(a.parts) == 2
    # fewest nodes: n0 (4 GPUs, the largest), then n2 (2 GPUs, the smallest that takes the rest)
    assert [(p.node, p.gpu_indices, p.cpu, p.mem_gib) for p in a.parts] == [
        ("n0", (0, 1, 2, 3), 8.0, 40.0), ("n2", (0, 1), 4.0, 20.0)]
    assert a.cpu == 12.0 and a.mem_gib == 60.0 and len(a.gpus) == 6
    with pytest.raises(ValueError, match="spans nodes n0, n2"):
        a.node
    assert cs.node_free(0) == (24.0, 216.0) and cs.node_free(2) == (28.0, 236.0)
    cs.check_invariants()
    assert cs.release("big") == a
    assert cs.used_gpus() == 0.0 and cs.node_free(0) == (32.0, 256.0)


def test_pods_prefer_one_node_and_never_share_a_gpu_by_default():
    cs = ClusterState([node("n0", 2), node("n1", 4)])
    a = cs.place("g", cfg(4, cpu=4.0), prof(), 1.5, gang=Gang(pods=2)).assignment
    # only n1 holds all four GPUs: both pods there, GPUs dealt in index order, 2 cores each
    assert [(p.node, p.gpu_indices, p.cpu) for p in a.parts] == [("n1", (0, 1), 2.0), ("n1", (2, 3), 2.0)]
    assert a.node == "n1" and a.gpu_indices == (0, 1, 2, 3)
    # two half-GPU pods on a one-GPU node: refused without share_gpus ...
    one = ClusterState([node("n0", 1)])
    out = one.place("h", cfg(2, share=0.5), prof(0.2), 3.0, gang=Gang(pods=2))
    assert not out.placed and "gang" in out.reason and "room for 1 ignoring" in out.reason
    assert one.used_gpus() == 0.0
    # ... and packed onto the same GPU when the gang says so: two residents of one job
    a = one.place("h", cfg(2, share=0.5), prof(0.2), 3.0, gang=Gang(pods=2, share_gpus=True)).assignment
    assert [p.gpu_indices for p in a.parts] == [(0,), (0,)]
    assert one.free_share(0, 0) == 0.0 and one.residents(0, 0) == ["h"]
    # analytic slowdown: 1 + kappa * (other residents' activity) = 1 + kappa * 0.2
    kappa = one.slowdown_model.kappa
    assert math.isclose(one.predicted_slowdowns()["h"], 1 + kappa * 0.2)
    one.check_invariants()
    one.release("h")
    assert one.free_share(0, 0) == 1.0 and one.residents(0, 0) == []


def test_gang_prefers_one_topology_domain():
    # three 1-GPU pods; no node has 3 free GPUs.  Zone a: 2 + 2 free, zone b: 2 + 1 free ->
    # both zones can hold the gang; the tighter zone (b, 3 spare) is chosen, never a mix.
    nodes = [node("a0", 2, "a"), node("a1", 2, "a"), node("b0", 2, "b"), node("b1", 2, "b")]
    cs = ClusterState(nodes)
    cs.rebook(_single(cs, "busy", 3, (0,)), prof(), 1.5)  # b1's GPU 0 taken
    a = cs.place("g", cfg(3), prof(), 1.5, gang=Gang(pods=3)).assignment
    assert {p.node for p in a.parts} == {"b0", "b1"}
    # zone b is now full; a 4-pod gang fits only in zone a
    b = cs.place("h", cfg(4), prof(), 1.5, gang=Gang(pods=4)).assignment
    assert {p.node for p in b.parts} == {"a0", "a1"}
    cs.check_invariants()


def _single(cs, job, n, gpus):
    """An assignment of job on node n's GPUs, built through a throwaway state (rebook input)."""
    other = ClusterState(cs.nodes)
    a = other.place(job, cfg(len(gpus)), prof(), 1.5).assignment
    from dataclasses import replace
    pt = replace(a.parts[0], node=cs.nodes[n].name, node_index=n, gpu_indices=gpus)
    return replace(a, parts=(pt,))


def test_gang_spills_across_domains_only_when_no_domain_can_hold_it():
    nodes = [node("a0", 2, "a"), node("b0", 2, "b"), node("x", 1)]  # x: no zone label
    cs = ClusterState(nodes)
    a = cs.place("g", cfg(4), prof(), 1.5, gang=Gang(pods=4)).assignment
    assert len(a.node_indices) == 2 and len(a.parts) == 4
    # 1 GPU left (x): a 2-pod gang fails and books nothing
    before = usage(cs)
    out = cs.place("h", cfg(2), prof(), 1.5, gang=Gang(pods=2))
    assert not out.placed and usage(cs) == before


def test_topology_key_is_configurable_and_checked():
    key = "example.com/rack"
    nodes = [node("r1a", 2, "r1", key=key), node("r2a", 1, "r2", key=key), node("r1b", 1, "r1", key=key),
             node("r2b", 1, "r2", key=key)]
    # a 2-pod gang: r1a holds both -> one node
    cs = ClusterState(nodes, topology_key=key)
    assert cs.place("one", cfg(2), prof(), 1.5, gang=Gang(pods=2)).assignment.node == "r1a"
    # 2 more pods: rack r1 has 1 GPU left, r2 has 2 -> rack r2, though r1b comes before r2b
    a = cs.place("two", cfg(2), prof(), 1.5, gang=Gang(pods=2)).assignment
    assert {p.node for p in a.parts} == {"r2a", "r2b"}
    # with the default key these nodes have no domain: the same request goes anywhere
    cs2 = ClusterState(nodes)
    cs2.place("one", cfg(2), prof(), 1.5, gang=Gang(pods=2))
    assert {p.node for p in cs2.place("two", cfg(2), prof(), 1.5, gang=Gang(pods=2)).assignment.parts} \
        == {"r2a", "r1b"}  # fill order: largest (all 1), then lowest index
    with pytest.raises(InvalidArgument, match="topology_key"):
        ClusterState(nodes, topology_key="")


def test_bad_gang_input_is_refused_naming_the_field():
    cs = ClusterState([node("n0", 4)])
    with pytest.raises(InvalidArgument, match="gang.pods.*divisor of config.num_gpus=4"):
        cs.place("g", cfg(4), prof(), 1.5, gang=Gang(pods=3))
    with pytest.raises(InvalidArgument, match="gang.pods"):
        cs.place("g", cfg(4), prof(), 1.5, gang=Gang(pods=0))
    with pytest.raises(InvalidArgument, match="gang.share_gpus"):
        cs.place("g", cfg(4), prof(), 1.5, gang=Gang(pods=2, share_gpus="yes"))
    with pytest.raises(InvalidArgument, match="gang.span_nodes"):
        cs.place("g", cfg(4), prof(), 1.5, gang=Gang(pods=2, span_nodes=True))
    with pytest.raises(InvalidArgument, match="gang"):
        cs.place("g", cfg(4), prof(), 1.5, gang=2)
    assert len(cs) == 0


def test_mig_gang_gets_valid_slots_on_distinct_gpus():
    nodes = [Node("m0", "A100-40GB", 2, 40.0, 32.0, 256.0), Node("m1", "A100-40GB", 2, 40.0, 32.0, 256.0)]
    cs = ClusterState(nodes, mig_gpus=[(0, 0), (0, 1), (1, 0), (1, 1)])
    p = MIG_PROFILES["A100-40GB"]["3g.20gb"]
    c = Configuration("mig", "A100-40GB", 4, p.share, 10.0, 0.0, 0.0, 1.0, "3g.20gb")
    a = cs.place("g", c, prof(), 1.5, gang=Gang(pods=4)).assignment
    assert len(a.parts) == 4 and len(set(a.gpus)) == 4
    assert all(s in p.starts for pt in a.parts for s in pt.mig_starts)
    # with share_gpus, 4 pods of 3g fit two per GPU (starts 0 and 4) on one node: m1, since
    # m0 holds another 3g instance and so has room for 3
    cs2 = ClusterState(nodes, mig_gpus=[(0, 0), (0, 1), (1, 0), (1, 1)])
    x = cs2.place("x", Configuration("x", "A100-40GB", 1, p.share, 10.0, 0.0, 0.0, 1.0, "3g.20gb"), prof(), 1.5)
    assert x.assignment.node == "m0"
    a = cs2.place("g", c, prof(), 1.5, gang=Gang(pods=4, share_gpus=True)).assignment
    cs2.check_invariants()
    assert a.node == "m1" and len(a.parts) == 4
    slots = sorted((g, s) for pt in a.parts for g, s in zip(pt.gpu_indices, pt.mig_starts))
    assert slots == [(0, 0), (0, 4), (1, 0), (1, 4)]
    # released and rebooked exactly (two instances of one job on each GPU)
    cs2.release("g")
    assert cs2.mig_state(1, 0).occupied_mask == 0
    assert cs2.rebook(a, prof(), 1.5) == a
    cs2.check_invariants()
    assert cs2.residents(1, 0) == ["g"] and cs2.free_share(1, 0) == 1.0 - 6 / 7


def test_multi_node_assignment_rebooks_and_copies():
    cs = ClusterState([node("n0", 2), node("n1", 2)])
    a = cs.place("g", cfg(3, cpu=3.0), prof(), 1.5, gang=Gang(span_nodes=True)).assignment
    assert len(a.node_indices) == 2
    snap = cs.copy()
    cs.release("g")
    assert cs.rebook(a, prof(), 1.5) == a
    cs.check_invariants()
    assert usage(cs) == usage(snap)


# ------------------------------------------------------------------------- brute force
def node_capacity(cs, n, unit, share_gpus, limit):
    """Most pods of ``unit`` node ``n`` could take, by trying every choice of GPUs for each
    pod in turn (independent of the placer: only its public per-GPU/per-node queries)."""
    nd = cs.nodes[n]
    G = nd.num_gpus
    if unit.num_gpus and nd.gpu_model != unit.gpu_model:
        return 0
    fs = [cs.free_share(n, g) for g in range(G)]
    fm = [cs.free_mem_gib(n, g) for g in range(G)]
    busy = [len(cs.residents(n, g)) > 0 for g in range(G)]
    ok_gpu = [cs.is_healthy(n, g) and not cs.is_mig(n, g) for g in range(G)]
    cpu0, mem0 = cs.node_free(n)
    best = 0

    def rec(count, fs, fm, busy, used, cpu, mem):
        nonlocal best
        best = max(best, count)
        if count >= limit or cpu + EPS < unit.cpu or mem + EPS < unit.mem_gib:
            return
        for comb in combinations(range(G), unit.num_gpus):
            if all(ok_gpu[i] and fs[i] + EPS >= unit.gpu_share and fm[i] + EPS >= unit.gpu_mem_gib
                   and (unit.gpu_share < 1.0 or not busy[i]) and (share_gpus or i not in used)
                   for i in comb):
                fs2, fm2, b2 = list(fs), list(fm), list(busy)
                for i in comb:
                    fs2[i] -= unit.gpu_share
                    fm2[i] -= unit.gpu_mem_gib
                    b2[i] = True
                rec(count + 1, fs2, fm2, b2, used | set(comb), cpu - unit.cpu, mem - unit.mem_gib)
                if best >= limit:
                    return

    rec(0, fs, fm, busy, frozenset(), cpu0, mem0)
    return best


@st.composite
def gang_cases(draw):
    nodes = []
    for i in range(draw(st.integers(2, 4))):
        zone = draw(st.sampled_from([None, "a", "b"]))
        nodes.append(node(f"n{i}", draw(st.integers(1, 3)), zone,
                          cpu=draw(st.sampled_from([2.0, 4.0, 32.0])), mem=256.0))
    pre = draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.25, 0.5, 1.0])), max_size=4))
    pods = draw(st.integers(1, 4))
    per = draw(st.integers(1, 2))
    share = 1.0 if per > 1 else draw(st.sampled_from([0.25, 0.5, 1.0]))
    share_gpus = per == 1 and share < 1.0 and draw(st.booleans())
    k = pods * per if pods > 1 else draw(st.integers(1, 6))
    cpu = draw(st.sampled_from([0.0, 1.0, 2.0])) * max(pods, 1)
    gang = Gang(pods, share_gpus) if pods > 1 else Gang(span_nodes=draw(st.booleans()))
    scorer = draw(st.sampled_from(["bestfit", "firstfit", "elastico"]))
    return nodes, pre, cfg(k, share=share, gmem=2.0, cpu=cpu), gang, scorer


def setup(nodes, pre):
    cs = ClusterState(nodes, slowdown_model=AnalyticSlowdown())
    for t, (_, s) in enumerate(pre):
        cs.place(f"pre{t}", cfg(1, share=s, gmem=2.0), prof(0.3), 100.0)
    return cs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_cases())
def test_gang_is_whole_or_absent_and_honours_node_then_domain_preference(case):
    nodes, pre, c, gang, scorer = case
    cs = setup(nodes, pre)
    k = c.num_gpus
    if gang.pods > 1:
        units = gang.pods
        unit = Configuration("u", c.gpu_model, k // units, c.gpu_share, c.gpu_mem_gib, c.cpu / units, 0.0, 1.0)
    elif gang.span_nodes:
        units = k
        unit = Configuration("u", c.gpu_model, 1, c.gpu_share, c.gpu_mem_gib, c.cpu / k, 0.0, 1.0)
    else:
        units = None  # a one-pod job that fits a node: the one-node placer, not a gang
    before = usage(cs)
    # bound 100: slowdowns never limit, so only capacity decides (what the brute force knows)
    out = cs.place("g", c, prof(0.3), 100.0, scorer=scorer, gang=gang)
    if units is None:
        assert not out.placed or out.assignment.single_node
        return
    cap = [node_capacity(cs if not out.placed else setup(nodes, pre), n, unit, gang.share_gpus, units)
           for n in range(len(nodes))]
    zones = {}
    for i, nd in enumerate(nodes):
        z = dict(nd.labels).get(TOPOLOGY_KEY)
        if z is not None:
            zones.setdefault(z, []).append(i)
    one_node = any(x >= units for x in cap)
    one_zone = [z for z, ns in zones.items() if sum(cap[i] for i in ns) >= units]
    anywhere = sum(cap) >= units
    assert out.placed == anywhere, (cap, units, out.reason)
    event("one node" if one_node else "one zone" if one_zone else "across zones" if anywhere else "no room")
    if not out.placed:
        assert usage(cs) == before, "a failed gang booked something"
        return
    a = out.assignment
    assert sum(len(p.gpu_indices) for p in a.parts) == k
    assert len(a.parts) == (units if gang.pods > 1 else len(a.node_indices))
    if not gang.share_gpus:
        assert len(set(a.gpus)) == len(a.gpus)
    if one_node:
        assert a.single_node
    elif one_zone:
        used = {dict(nodes[n].labels).get(TOPOLOGY_KEY) for n in a.node_indices}
        assert len(used) == 1 and None not in used
    cs.check_invariants()
    # release gives back exactly the state before
    cs.release("g")
    assert usage(cs) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_cases(), st.sampled_from([1.1, 1.5, 100.0]))
def test_gang_placement_is_deterministic(case, bound):
    nodes, pre, c, gang, scorer = case
    outs = []
    for _ in range(2):
        cs = setup(nodes, pre)
        o = cs.place("g", c, prof(0.3), bound, scorer=scorer, gang=gang)
        outs.append((o.assignment, o.reason, o.slowdown))
        cs.check_invariants()
    assert outs[0] == outs[1]
