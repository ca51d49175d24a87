"""MIG lending (elastico/placer/policies/mig_lending.py): an empty node whose home mode is MIG
goes to normal mode while a job waits for whole GPUs of its model, and back when none does;
``ClusterState.set_mig_mode`` changes an empty node's mode and nothing else.  Expected values
are worked out by hand; the property test compares the state after random sequences of
placements, releases and mode changes with one built from scratch in the final mode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.model import (MIG_GPUS_LABEL, WAIT, Configuration, Job, JobKind, Node, Request,
                            ShapeFamily, mig_gpus_of)
from elastico.perf.throughput import ThroughputModel
from elastico.placer.placement import ClusterState, FailedShapes, Gang
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.mig_lending import (lend_mig_nodes, keep_lent_nodes, wants_mig,
                                                  wants_whole)
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.predictor import AnalyticSlowdown, JobProfile

MODEL = ThroughputModel.bundled()
R50 = "ResNet-50 (batch size 64)"
A = "A100-40GB"


def a100(name: str, gpus: int = 8, mig: int = 0) -> Node:
    labels = ((MIG_GPUS_LABEL, str(mig)),) if mig else ()
    return Node(name, A, gpus, 40.0, 64.0, 512.0, labels)


def whole(n: int, model: str = A) -> Configuration:
    return Configuration(f"whole{n}", model, n, 1.0, 40.0, 1.0, 1.0, 1.0)


def mig(profile: str = "3g.20gb") -> Configuration:
    slices, mem = {"1g.5gb": (1, 5.0), "3g.20gb": (3, 20.0)}[profile]
    return Configuration(f"mig-{profile}", A, 1, slices / 7, mem, 1.0, 1.0, 0.5, profile)


PROF = JobProfile("t", "training", 0.5, 1.0)


def test_set_mig_mode_changes_an_empty_nodes_gpus_only():
    nodes = [a100("a0", 8, mig=8), a100("a1", 8)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    before = cs.copy()
    # in MIG mode an 8-GPU whole shape has no node; a 3g instance fits on a0's GPUs
    assert cs.fits(whole(8)) == [(1, tuple(range(8)))]
    assert [n for n, _ in cs.fits(mig())] == [0]
    cs.set_mig_mode(0, range(8), False)
    assert not any(cs.is_mig(0, g) for g in range(8)) and cs.mig_state(0, 0) is None
    assert cs.fits(whole(8)) == [(0, tuple(range(8))), (1, tuple(range(8)))]
    assert cs.fits(mig()) == []
    # a copy made before keeps the old mode (the layout is copied on change, not shared)
    assert all(before.is_mig(0, g) for g in range(8))
    assert [n for n, _ in before.fits(mig())] == [0]
    # back to MIG mode: every GPU's instances start empty
    cs.set_mig_mode(0, range(8), True)
    assert all(cs.is_mig(0, g) for g in range(8))
    assert cs.mig_state(0, 3).geometry == []
    cs.check_invariants()


def test_set_mig_mode_refuses_a_node_with_bookings_and_changes_nothing():
    nodes = [a100("a0", 8, mig=8)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    assert cs.place("j", mig(), PROF, 3.0).placed
    usage = cs.gpu_usage()
    with pytest.raises(Infeasible, match="only on an empty node"):
        cs.set_mig_mode(0, range(8), False)
    assert all(cs.is_mig(0, g) for g in range(8))
    assert all((usage[k] == v).all() for k, v in cs.gpu_usage().items())
    cs.release("j")
    assert cs.node_empty(0)
    cs.set_mig_mode(0, range(8), False)
    assert not cs.is_mig(0, 0)


def test_set_mig_mode_bad_input():
    nodes = [a100("a0", 2), Node("v0", "V100", 4, 16.0, 32.0, 256.0)]
    cs = ClusterState(nodes)
    with pytest.raises(InvalidArgument, match="MIG-capable"):
        cs.set_mig_mode(1, [0], True)
    with pytest.raises(NotFound):
        cs.set_mig_mode(0, [2], True)
    with pytest.raises(NotFound):
        cs.set_mig_mode(5, [0], True)
    assert not cs.is_mig(0, 0) and not cs.is_mig(1, 0)


def test_wants_whole_counts_jobs_only_whole_gpus_of_the_model_serve():
    assert wants_whole([ShapeFamily((WAIT, whole(2)))], A)
    assert not wants_whole([ShapeFamily((WAIT, mig()))], A)
    assert not wants_whole([ShapeFamily((WAIT, mig(), whole(2)))], A)  # a MIG instance serves it
    assert not wants_whole([ShapeFamily((WAIT, whole(1, "V100")))], A)
    assert not wants_whole([ShapeFamily((WAIT,))], A)
    assert not wants_whole([], A)


def test_lend_and_return_by_hand():
    nodes = [a100("a0", 8, mig=8), a100("a1", 8, mig=8), a100("a2", 8)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    home = {0: tuple(range(8)), 1: tuple(range(8))}
    assert cs.place("small", mig(), PROF, 3.0).assignment.parts[0].node_index == 0
    # a job waits with a whole-GPU A100 configuration: a1 (empty) is lent, a0 (busy) is not
    assert lend_mig_nodes(cs, home, [ShapeFamily((WAIT, mig(), whole(8)))]) == []  # MIG serves it
    out = lend_mig_nodes(cs, home, [ShapeFamily((WAIT, whole(8)))])
    assert [(s.node_index, s.on) for s in out] == [(1, False)]
    assert out[0].gpus == tuple(range(8)) and out[0].reason.startswith("lent")
    assert cs.is_mig(0, 0) and not cs.is_mig(1, 0)
    # still waiting: nothing more to do (a1 already lent, a0 busy, a2 not a MIG home node)
    assert lend_mig_nodes(cs, home, [ShapeFamily((WAIT, whole(8)))]) == []
    # only MIG or other-model shapes wait: a1 returns to MIG mode
    out = lend_mig_nodes(cs, home, [ShapeFamily((WAIT, mig(), whole(1, "V100")))])
    assert [(s.node_index, s.on) for s in out] == [(1, True)]
    assert out[0].reason.startswith("returned") and cs.is_mig(1, 0)
    # a lent node with a booking stays lent however the queue looks
    lend_mig_nodes(cs, home, [ShapeFamily((WAIT, whole(8)))])
    assert cs.place("big", whole(8), PROF, 3.0).placed
    assert lend_mig_nodes(cs, home, []) == [] and not cs.is_mig(1, 0)
    cs.check_invariants()


def test_lending_is_sized_to_the_gpus_the_waiting_jobs_need():
    # four empty 2-GPU MIG nodes; jobs wanting whole A100s wait for 3 GPUs in all (2 + 1):
    # two nodes are lent (2 GPUs, then 4 >= 3), in node order
    nodes = [a100(f"a{i}", 2, mig=2) for i in range(4)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    home = {i: (0, 1) for i in range(4)}
    waiting = [ShapeFamily((WAIT, whole(2), whole(4))), ShapeFamily((WAIT, whole(1)))]
    out = lend_mig_nodes(cs, home, waiting)
    assert [(s.node_index, s.on) for s in out] == [(0, False), (1, False)]
    # one GPU wanted now: a1 (empty, the last lent) goes home; a0's 2 free GPUs cover the 1
    out = lend_mig_nodes(cs, home, waiting[1:])
    assert [(s.node_index, s.on) for s in out] == [(1, True)]
    assert "cover" in out[0].reason
    # a job that could use a MIG instance waits: an empty lent node goes home at once, and
    # nothing is lent, though a whole-GPU job waits too
    out = lend_mig_nodes(cs, home, waiting[1:] + [ShapeFamily((WAIT, mig()))])
    assert [(s.node_index, s.on) for s in out] == [(0, True)]
    assert "MIG instance" in out[0].reason and all(cs.is_mig(i, 0) for i in range(4))
    assert lend_mig_nodes(cs, home, [ShapeFamily((WAIT, mig()))]) == []


def test_a_node_with_an_unhealthy_gpu_keeps_its_mode():
    nodes = [a100("a0", 8, mig=8)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    cs.mark_unhealthy(0, 5)
    assert lend_mig_nodes(cs, {0: tuple(range(8))}, [ShapeFamily((WAIT, whole(1)))]) == []
    assert cs.is_mig(0, 0)


def test_elastico_lends_an_empty_mig_node_to_a_waiting_whole_gpu_job():
    # an 8-GPU training job whose 30 GiB per GPU fits no A100-40GB MIG instance (20 GiB at
    # most): with the node in MIG mode it waits; with lending the round puts the node in normal
    # mode and the next round places the job there.  Without lending it waits for ever.
    nodes = [a100("a0", 8, mig=8)]
    job = Job("t", JobKind.TRAINING, 0.0, 3600.0, Request(8, 1.0, 8.0, 64.0, gpu_mem_gib=30.0),
              job_type=R50)
    for lend in (True, False):
        env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(),
                        mig_lending=lend)
        policy = make_policy("elastico", env)
        state = ClusterState(nodes, mig_gpus_of(nodes), slowdown_model=AnalyticSlowdown())
        r1 = run_round(policy, RoundInput(0.0, nodes, state, [ActiveJob(job)]))
        assert r1.decisions["t"].status is Status.WAITING
        assert all(state.is_mig(0, g) for g in range(8))  # the caller's state is untouched
        r2 = run_round(policy, RoundInput(10.0, nodes, r1.state, [ActiveJob(job)]))
        if lend:
            assert [(s.node, s.on) for s in r1.mig_switches] == [("a0", False)]
            d = r2.decisions["t"]
            assert d.status is Status.PLACED and d.config.num_gpus == 8 and d.config.mig_profile is None
            # the job is done: the empty node returns to MIG mode in the next round
            r2.state.release("t")
            r3 = run_round(policy, RoundInput(20.0, nodes, r2.state, []))
            assert [(s.node, s.on) for s in r3.mig_switches] == [("a0", True)]
            assert r3.state.is_mig(0, 0)
        else:
            assert r1.mig_switches == [] and r2.decisions["t"].status is Status.WAITING
            assert r2.state.is_mig(0, 0)


def test_lending_is_on_by_default_and_never_without_mig():
    nodes = [a100("a0", 8, mig=8), a100("a1", 8, mig=4)]
    default = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    # on by default (docs/model.md 5.): the first k GPUs of a node labelled k
    assert make_policy("elastico", default).mig_home == {0: tuple(range(8)), 1: (0, 1, 2, 3)}
    assert make_policy("elastico-no-mig", default).mig_home == {}  # no MIG at all
    off = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), mig_lending=False)
    assert make_policy("elastico", off).mig_home == {}
    # the Kubernetes loop names the home GPUs itself (real indices; nodes whose agent follows)
    live = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(),
                     mig_home={1: (4, 5, 6, 7), 0: ()})
    assert make_policy("elastico", live).mig_home == {1: (4, 5, 6, 7)}
    pools = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), mig_pools=True,
                      mig_lending=True)
    assert make_policy("elastico", pools).mig_home == {}  # the pools' capacity follows labels


def test_no_lending_while_a_waiting_job_could_use_the_mig_instances():
    # a whole-only job waits, but so does one with a MIG configuration of the model: the empty
    # MIG node keeps its mode (its instances can serve the second)
    nodes = [a100("a0", 8, mig=8)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    waiting = [ShapeFamily((WAIT, whole(8))), ShapeFamily((WAIT, mig(), whole(1)))]
    assert lend_mig_nodes(cs, {0: tuple(range(8))}, waiting) == [] and cs.is_mig(0, 0)
    assert wants_mig(waiting, A) and not wants_mig(waiting[:1], A)


# ---- a lent node is kept for the jobs it was lent for (ClusterState.keep_for)

def test_keep_for_keeps_a_nodes_gpus_for_its_jobs_only():
    nodes = [a100("a0", 2), a100("a1", 2)]
    cs = ClusterState(nodes)
    cs.keep_for(1, ["big"])
    assert cs.kept_nodes() == {1: frozenset({"big"})}
    # "other" fills a0, then finds a1 kept for "big": refused, naming a1
    assert cs.place("o1", whole(2), PROF, 3.0).assignment.parts[0].node_index == 0
    out = cs.place("o2", whole(1), PROF, 3.0)
    assert not out.placed and "a1" in out.reason and "kept for other jobs" in out.reason
    # the job it is kept for gets it
    assert cs.place("big", whole(2), PROF, 3.0).assignment.parts[0].node_index == 1
    # with a1 full too, the reason is the plain one: no room even on the kept node
    out = cs.place("o4", whole(1), PROF, 3.0)
    assert not out.placed and "kept" not in out.reason and out.reason.startswith("no node")
    cs.release("big")
    cs.keep_for(1, None)
    assert cs.kept_nodes() == {}
    assert cs.place("o3", whole(1), PROF, 3.0).assignment.parts[0].node_index == 1
    cs.check_invariants()


def test_keep_for_leaves_mig_instances_and_cpu_pods_alone():
    nodes = [a100("a0", 2, mig=2)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    cs.keep_for(0, ["someone-else"])
    assert cs.place("m", mig("1g.5gb"), PROF, 3.0).placed  # a MIG instance is never kept off
    cpu_only = Configuration("cpu", None, 0, 0.0, 0.0, 2.0, 4.0, 1.0)
    assert cs.place("c", cpu_only, PROF, 3.0).placed


def test_a_failure_on_a_kept_node_is_not_recorded_for_other_jobs():
    # "o" finds no room because a1 is kept for "big"; FailedShapes must not remember whole(2)
    # as placing nowhere, or "big" -- who may use a1 -- would be refused without a search
    nodes = [a100("a0", 2), a100("a1", 2)]
    cs = ClusterState(nodes)
    assert cs.place("busy", whole(2), PROF, 3.0).placed  # a0 full
    cs.keep_for(1, ["big"])
    failed = FailedShapes()
    assert not cs.place_unless_dominated("o", whole(2), PROF, 3.0, failed).placed
    assert len(failed) == 0 and cs.job_limited("o", whole(2)) and not cs.job_limited("big", whole(2))
    assert cs.place_unless_dominated("big", whole(2), PROF, 3.0, failed).placed


def test_a_gang_stays_off_a_node_kept_for_other_jobs():
    nodes = [a100("a0", 2), a100("a1", 2), a100("a2", 2)]
    cs = ClusterState(nodes)
    cs.keep_for(1, ["big"])
    out = cs.place("g", whole(4), PROF, 3.0, gang=Gang(pods=2))
    assert out.placed and {p.node_index for p in out.assignment.parts} == {0, 2}
    assert not cs.place("g2", whole(2), PROF, 3.0, gang=Gang(pods=2)).placed
    assert cs.place("big", whole(2), PROF, 3.0).assignment.parts[0].node_index == 1


def test_keep_for_bad_input():
    cs = ClusterState([a100("a0", 2)])
    with pytest.raises(NotFound, match="no node 3"):
        cs.keep_for(3, ["j"])
    with pytest.raises(InvalidArgument, match="job_ids"):
        cs.keep_for(0, "j")  # one string, not a list of ids
    with pytest.raises(InvalidArgument, match="job_ids"):
        cs.keep_for(0, ["j", ""])
    assert cs.kept_nodes() == {}  # nothing half-applied


def test_keep_lent_nodes_by_hand():
    nodes = [a100("a0", 2, mig=2), a100("a1", 2, mig=2), a100("a2", 2)]
    cs = ClusterState(nodes, mig_gpus_of(nodes))
    home = {0: (0, 1), 1: (0, 1)}
    cs.set_mig_mode(1, (0, 1), False)  # a1 lent
    fams = {"w": ShapeFamily((WAIT, whole(2))), "m": ShapeFamily((WAIT, mig(), whole(1))),
            "v": ShapeFamily((WAIT, whole(1, "V100")))}
    assert keep_lent_nodes(cs, home, fams) == {1: frozenset({"w"})}
    assert cs.kept_nodes() == {1: frozenset({"w"})}  # a0 is in MIG mode: not kept
    # a job that could use a MIG instance has no booking: a1 drains (kept for no job)
    assert keep_lent_nodes(cs, home, fams, unplaced=["w", "m"]) == {1: frozenset()}
    assert cs.place("w", whole(2), PROF, 3.0).assignment.parts[0].node_index == 2  # not a1
    assert not cs.place("w2", whole(1), PROF, 3.0).placed  # a2 full, a1 drains
    cs.release("w")
    cs.set_mig_mode(1, (0, 1), True)  # returned: no longer kept for anyone
    assert keep_lent_nodes(cs, home, fams) == {} and cs.kept_nodes() == {}


def test_a_lent_node_drains_for_mig_demand_then_serves_the_job_it_was_lent_for():
    # round 1 lends a0 (one node: 8 GPUs cover the 8-GPU job "t"; a1 stays in MIG mode).
    # Round 2: a small job "s" that a MIG instance can serve arrives: while it has no
    # booking a0 takes no job (it drains), and "s" gets an instance on a1.  Round 3: no MIG
    # demand waits, a0 is kept for "t" and "t" gets it.
    nodes = [a100("a0", 8, mig=8), a100("a1", 8, mig=8)]
    big = Job("t", JobKind.TRAINING, 0.0, 3600.0, Request(8, 1.0, 8.0, 64.0, gpu_mem_gib=30.0),
              job_type=R50)
    small = Job("s", JobKind.TRAINING, 5.0, 600.0, Request(1, 1.0, 2.0, 8.0, gpu_mem_gib=4.0),
                job_type=R50)
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), mig_lending=True)
    policy = make_policy("elastico", env)
    assert wants_mig([policy.catalog.family(small)], A)
    state = ClusterState(nodes, mig_gpus_of(nodes), slowdown_model=AnalyticSlowdown())
    r1 = run_round(policy, RoundInput(1.0, nodes, state, [ActiveJob(big)]))
    assert [(s.node, s.on) for s in r1.mig_switches] == [("a0", False)]
    assert r1.decisions["t"].status is Status.WAITING
    jobs = [ActiveJob(small), ActiveJob(big)]
    r2 = run_round(policy, RoundInput(10.0, nodes, r1.state, jobs))
    assert r2.state.kept_nodes() == {0: frozenset()}
    assert r2.decisions["t"].status is Status.WAITING
    ds = r2.decisions["s"]
    assert ds.status is Status.PLACED and ds.assignment.parts[0].node_index == 1
    assert ds.config.mig_profile is not None and r2.mig_switches == []  # a0 stays lent
    jobs = [ActiveJob(small, ds.config), ActiveJob(big)]  # "s" runs now
    r3 = run_round(policy, RoundInput(20.0, nodes, r2.state, jobs))
    assert r3.state.kept_nodes() == {0: frozenset({"t"})}
    dt = r3.decisions["t"]
    assert dt.status is Status.PLACED and dt.assignment.parts[0].node_index == 0
    # "t" done, "s" done: the empty lent node comes home and is kept for no one
    r3.state.release("t")
    r3.state.release("s")
    r4 = run_round(policy, RoundInput(30.0, nodes, r3.state, []))
    assert [(s.node, s.on) for s in r4.mig_switches] == [("a0", True)]
    assert r4.state.is_mig(0, 0) and r4.state.kept_nodes() == {}


# ---- property: incremental mode changes equal a state built from scratch in that mode

CONFIGS = [whole(1), whole(2), whole(8), mig("1g.5gb"), mig("3g.20gb"),
           Configuration("mps", A, 1, 0.5, 10.0, 1.0, 1.0, 0.7)]
ops = st.lists(st.one_of(
    st.tuples(st.just("place"), st.integers(0, len(CONFIGS) - 1)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("mig"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("copy"),),
), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_mode_changes_equal_a_fresh_state_in_the_final_mode(steps):
    nodes = [a100("a0", 4, mig=4), a100("a1", 4), a100("a2", 2, mig=2)]
    cs = ClusterState(nodes, mig_gpus_of(nodes), slowdown_model=AnalyticSlowdown(1.8))
    placed: list[str] = []
    for t, op in enumerate(steps):
        if op[0] == "place":
            if cs.place(f"j{t}", CONFIGS[op[1]], PROF, 3.0).placed:
                placed.append(f"j{t}")
        elif op[0] == "release" and placed:
            cs.release(placed.pop(op[1] % len(placed)))
        elif op[0] == "mig":
            n = op[1]
            if cs.node_empty(n):
                cs.set_mig_mode(n, range(nodes[n].num_gpus), op[2])
            else:
                with pytest.raises(Infeasible):
                    cs.set_mig_mode(n, range(nodes[n].num_gpus), op[2])
        elif op[0] == "copy":
            cs = cs.copy()
        cs.check_invariants()
        # the same bookings entered into a fresh state with this MIG mode give the same book
        fresh = ClusterState(nodes, cs.layout.mig_gpus(), slowdown_model=AnalyticSlowdown(1.8))
        for a in cs.assignments():
            fresh.rebook(a, cs.profile(a.job_id), cs.slowdown_bound(a.job_id))
        for k, v in cs.gpu_usage().items():
            np.testing.assert_array_equal(v, fresh.gpu_usage()[k], err_msg=k)
        for c in CONFIGS:
            assert cs.fits(c) == fresh.fits(c), c.name
        # a MIG-mode GPU holds only MIG instances, a normal one none
        for a in cs.assignments():
            for p in a.parts:
                for g in p.gpu_indices:
                    assert cs.is_mig(p.node_index, g) == bool(p.mig_starts), (a.job_id, p)


# ---- property: a kept node is the same as the other jobs finding the node's GPUs gone

NAMES = [f"j{i}" for i in range(6)]
rops = st.lists(st.one_of(
    st.tuples(st.just("place"), st.integers(0, 5), st.integers(0, len(CONFIGS) - 1)),
    st.tuples(st.just("release"), st.integers(0, 5)),
    st.tuples(st.just("keep"), st.integers(0, 2),
              st.one_of(st.none(), st.frozensets(st.sampled_from(NAMES), max_size=3))),
    st.tuples(st.just("mig"), st.integers(0, 2), st.booleans()),
), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rops)
def test_keeping_a_node_places_as_if_the_node_were_gone_for_other_jobs(steps):
    """Brute force: every placement with kept nodes equals the same placement on a copy
    where the GPUs of each node kept for other jobs are marked unhealthy (for GPU
    configurations in normal mode; MIG instances and the jobs it is kept for see every node)."""
    nodes = [a100("a0", 4, mig=4), a100("a1", 4), a100("a2", 2, mig=2)]
    cs = ClusterState(nodes, mig_gpus_of(nodes), slowdown_model=AnalyticSlowdown(1.8))
    for op in steps:
        if op[0] == "place":
            job, c = NAMES[op[1]], CONFIGS[op[2]]
            if job in {a.job_id for a in cs.assignments()}:
                continue
            ref = cs.copy()
            for n, ids in cs.kept_nodes().items():
                ref.keep_for(n, None)
                if job not in ids and c.mig_profile is None:
                    for g in range(nodes[n].num_gpus):
                        ref.mark_unhealthy(n, g)
            got, want = cs.place(job, c, PROF, 3.0), ref.place(job, c, PROF, 3.0)
            assert got.placed == want.placed, (got.reason, want.reason)
            if got.placed:
                assert got.assignment.parts == want.assignment.parts
        elif op[0] == "release":
            if NAMES[op[1]] in {a.job_id for a in cs.assignments()}:
                cs.release(NAMES[op[1]])
        elif op[0] == "keep":
            cs.keep_for(op[1], op[2])
            assert cs.kept_nodes().get(op[1]) == op[2]
        elif op[0] == "mig" and cs.node_empty(op[1]) and op[1] != 1:
            cs.set_mig_mode(op[1], range(nodes[op[1]].num_gpus), op[2])
        cs.check_invariants()


def test_the_evaluations_settings_carry_mig_lending_to_the_policy(monkeypatch):
    # bench/mig_lending.py and sustainable_load.py --no-mig-lending set Settings.mig_lending;
    # the run must build its policy with it (on by default, as the evaluation)
    import elastico.placer.policies as policies
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    class Stop(Exception):
        pass

    seen = []

    def capture(name, env):
        seen.append((name, env.mig_lending))
        raise Stop

    monkeypatch.setattr(policies, "make_policy", capture)
    for st in (Settings(jobs_per_gpu=1.0, mig_lending=False), Settings(jobs_per_gpu=1.0)):
        with pytest.raises(Stop):
            run_one(Task(load_cluster("a100-mig"), 16, "elastico", 0, st))
    assert seen == [("elastico", False), ("elastico", True)]
