"""MIG and MPS on one node, GPU by GPU: ClusterState keeps MIG jobs on the node's MIG-mode GPUs
and MPS jobs on its other GPUs, gangs of either kind included, and the MIG geometry it books is
one the repartition planner accepts as the current state (instances with jobs = busy).

Hand-worked on an H100-80GB node with GPUs 0 and 2 in MIG mode and 1 and 3 in MPS mode."""

from __future__ import annotations

import pytest

from elastico.model import Configuration, Node
from elastico.mig import check_geometry
from elastico.mig_plan import MigInstance, choose_geometry
from elastico.placer.placement import ClusterState
from elastico.predictor import AnalyticSlowdown, JobProfile, NoInterference


def h100(gpus=4):
    return Node("h100", "H100-80GB", gpus, 80.0, 64.0, 512.0)


def mps(share, gpus=1, gmem=8.0):
    return Configuration(f"mps{share}x{gpus}", "H100-80GB", gpus, share, gmem, 1.0, 4.0, 1.0)


def mig(profile, compute, gpus=1, gmem=8.0, model="H100-80GB"):
    return Configuration(f"{profile}x{gpus}", model, gpus, compute, gmem, 1.0, 4.0, 1.0, profile)


def prof(act=0.6):
    return JobProfile("t", "training", act, 4.0)


def mixed(model=NoInterference()):
    return ClusterState([h100()], mig_gpus={(0, 0), (0, 2)}, slowdown_model=model)


def test_each_kind_stays_on_its_gpus():
    cs = mixed()
    assert [cs.is_mig(0, g) for g in range(4)] == [True, False, True, False]
    for i in range(4):
        a = cs.place(f"p{i}", mps(0.5), prof(), 2.0).assignment
        assert a.gpu_indices[0] in (1, 3) and a.mig_profile is None
    assert not cs.place("p4", mps(0.5), prof(), 2.0).placed  # MPS GPUs full, MIG GPUs empty
    for i in range(4):  # 3g.40gb: two per MIG GPU (starts 0 and 4)
        a = cs.place(f"m{i}", mig("3g.40gb", 3 / 7), prof(), 2.0).assignment
        assert a.gpu_indices[0] in (0, 2) and a.mig_starts[0] in (0, 4)
    assert not cs.place("m4", mig("1g.10gb", 1 / 7), prof(), 2.0).placed
    cs.check_invariants()
    for g in (0, 2):
        assert cs.mig_state(0, g).instances == {0: "3g.40gb", 4: "3g.40gb"}
        assert cs.residents(0, g) and all(cs.assignment(j).mig_profile for j in cs.residents(0, g))
    for g in (1, 3):
        assert all(cs.assignment(j).mig_profile is None for j in cs.residents(0, g))
        assert cs.mig_state(0, g) is None


def test_gangs_of_each_kind():
    cs = mixed()
    a = cs.place("mig-gang", mig("4g.40gb", 4 / 7, gpus=2), prof(), 2.0).assignment
    assert a.gpu_indices == (0, 2) and a.mig_starts == (0, 0)
    b = cs.place("mps-gang", mps(1.0, gpus=2), prof(), 2.0).assignment
    assert b.gpu_indices == (1, 3)
    assert not cs.place("mig-gang2", mig("4g.40gb", 4 / 7, gpus=2), prof(), 2.0).placed
    assert cs.place("mig-gang3", mig("3g.40gb", 3 / 7, gpus=2), prof(), 2.0).assignment.mig_starts == (4, 4)
    cs.check_invariants()
    cs.release("mig-gang")
    assert cs.mig_state(0, 0).instances == {4: "3g.40gb"}
    cs.check_invariants()


def test_mps_interference_does_not_reach_mig_jobs():
    cs = mixed(AnalyticSlowdown())
    cs.place("m", mig("7g.80gb", 1.0), prof(0.9), 1.0)
    cs.place("a", mps(0.5), prof(0.9), 3.0)
    cs.place("b", mps(0.5), prof(0.9), 3.0)
    s = cs.predicted_slowdowns()
    assert s["m"] == 1.0
    if cs.assignment("a").gpu_indices == cs.assignment("b").gpu_indices:
        assert s["a"] > 1.0 and s["b"] > 1.0
    cs.check_invariants()


def test_booked_geometry_feeds_the_planner():
    """The geometry of a MIG GPU, with its booked instances busy, is valid, and the chooser
    keeps every booked instance when asked for more."""
    cs = mixed()
    cs.place("x", mig("3g.40gb", 3 / 7), prof(), 2.0)
    cs.place("y", mig("1g.10gb", 1 / 7), prof(), 2.0)
    g = cs.assignment("x").gpu_indices[0]
    state = cs.mig_state(0, g)
    check_geometry("H100-80GB", state.geometry)
    booked = {(cs.assignment(j).mig_profile, cs.assignment(j).mig_starts[0]) for j in cs.residents(0, g)}
    current = [MigInstance(n, s, busy=(n, s) in booked) for n, s in state.geometry]
    c = choose_geometry("H100-80GB", current, ["2g.20gb", "1g.10gb"])
    assert booked <= set(c.geometry) and c.plan.ok


def test_mig_mode_needs_a_table_and_a_capable_model():
    with pytest.raises(Exception, match="mig_gpus"):
        ClusterState([Node("v", "V100", 2, 16.0, 8.0, 64.0)], mig_gpus={(0, 0)})
    ClusterState([Node("h", "H200", 2, 141.0, 8.0, 64.0), Node("a", "A30", 1, 24.0, 8.0, 64.0)],
                 mig_gpus={(0, 1), (1, 0)})


def test_a30_mig_books_its_real_memory():
    cs = ClusterState([Node("a30", "A30", 2, 24.0, 8.0, 64.0)], mig_gpus={(0, 0)}, slowdown_model=NoInterference())
    a = cs.place("j", mig("4g.24gb", 1.0, gmem=20.0, model="A30"), prof(), 2.0).assignment
    assert a is not None and a.gpu_mem_gib == 24.0
