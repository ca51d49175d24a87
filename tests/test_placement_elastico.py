"""The ``elastico`` scorer (fragmentation + interference in one cost) and GPU health, on
hand-worked two-node clusters (numbers worked out in the comments)."""

import pytest

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.model import Configuration, Node
from elastico.placer.fragmentation import typical_pods
from elastico.placer.placement import ClusterState, elastico_cost, interference_loss
from elastico.predictor import AnalyticSlowdown, JobProfile, NoInterference

HALF = Configuration("half", "V100", 1, 0.5, 4.0, 1.0, 4.0, 1.0)
WHOLE = Configuration("whole", "V100", 1, 1.0, 4.0, 1.0, 4.0, 1.0)


def cluster(model, unhealthy=()):
    nodes = [Node(f"n{i}", "V100", 2, 16.0, 16.0, 64.0,
                  unhealthy_gpus=frozenset(g for n, g in unhealthy if n == i)) for i in range(2)]
    cs = ClusterState(nodes, slowdown_model=model)
    # typical pods: half a whole GPU and half a 0.5-GPU pod, 1 core each
    cs.set_typical_pods(typical_pods([1000, 1000], [1000, 500], [1, 1], threshold=1.0))
    return cs


def prof(activity):
    return JobProfile("t", "training", activity, 4.0)


def resident(cs, activity):
    """A 0.5-GPU job on n0 GPU0 (firstfit puts it there)."""
    a = cs.place("r", HALF, prof(activity), 3.0, scorer="firstfit").assignment
    assert (a.node_index, a.gpu_indices) == (0, (0,))


# With the resident, n0 = [500, 1000] free milli: whole pod fits (F_w = 500), half pod fits
# (F_h = 0): F = 0.5 x 500 = 250.  Adding a 0.5 job:
#   n0 GPU0 -> [0, 1000]:   F = 0           dF = -0.25 GPU
#   n0 GPU1 -> [500, 500]:  F_w = 1000, F_h = 0 -> F = 500, dF = +0.25
#   n1 GPU0 -> [500, 1000]: F = 250 (n1 was 0), dF = +0.25, plus 0.003 for node position 1


def test_without_interference_the_fragment_is_filled():
    cs = cluster(NoInterference())
    resident(cs, 0.5)
    a = cs.place("j", HALF, prof(0.5), 3.0, scorer="elastico").assignment
    assert (a.node_index, a.gpu_indices) == (0, (0,))


def test_interference_can_outweigh_fragmentation():
    # kappa 1.8, activities 0.5: both slowed to 1 + 1.8 x 0.5 = 1.9;
    #   dI = 2 x 0.5 x (1 - 1/1.9) = 0.4737 -> cost on GPU0 = -0.25 + 0.4737 = 0.2237 < 0.25
    cs = cluster(AnalyticSlowdown(1.8))
    resident(cs, 0.5)
    out = cs.place("j", HALF, prof(0.5), 3.0, scorer="elastico")
    assert (out.assignment.node_index, out.assignment.gpu_indices) == (0, (0,))
    assert out.slowdown == pytest.approx(1.9)
    # activities 1.0: slowed to 2.8, dI = 2 x 0.5 x (1 - 1/2.8) = 0.643 -> 0.393 > 0.25: GPU1
    cs = cluster(AnalyticSlowdown(1.8))
    resident(cs, 1.0)
    out = cs.place("j", HALF, prof(1.0), 3.0, scorer="elastico")
    assert (out.assignment.node_index, out.assignment.gpu_indices) == (0, (1,))
    assert out.slowdown == 1.0


def test_a_bound_is_a_hard_limit_not_a_cost():
    cs = cluster(AnalyticSlowdown(1.8))
    resident(cs, 0.5)
    out = cs.place("j", HALF, prof(0.5), 1.5, scorer="elastico")  # 1.9 > 1.5 on GPU0
    assert (out.assignment.node_index, out.assignment.gpu_indices) == (0, (1,))
    cs.check_invariants()


def test_cost_formula_and_loss():
    assert interference_loss([0.5, 0.5], [1.9, 1.9]) == pytest.approx(1 - 1 / 1.9)
    assert float(elastico_cost(-0.25, 0.4737, 0)) == pytest.approx(0.2237)
    assert float(elastico_cost(0.25, 0.0, 1)) == pytest.approx(0.253)


def test_unhealthy_gpus_are_never_chosen_by_any_scorer():
    for scorer in ("bestfit", "firstfit", "elastico"):
        cs = cluster(NoInterference(), unhealthy=[(0, 0), (0, 1), (1, 0)])
        a = cs.place("j", WHOLE, prof(0.5), 3.0, scorer=scorer).assignment
        assert (a.node_index, a.gpu_indices) == (1, (1,))
        out = cs.place("k", WHOLE, prof(0.5), 3.0, scorer=scorer)
        assert not out.placed and "no node" in out.reason


def test_marking_unhealthy_moves_new_work_away_and_reports_residents():
    cs = cluster(NoInterference())
    resident(cs, 0.5)
    assert cs.mark_unhealthy(0, 0) == ["r"]          # the caller must move "r"
    assert not cs.is_healthy(0, 0) and cs.unhealthy_gpus() == [(0, 0)]
    a = cs.place("j", HALF, prof(0.5), 3.0, scorer="firstfit").assignment
    assert (a.node_index, a.gpu_indices) == (0, (1,))
    old = cs.release("r")
    with pytest.raises(Infeasible, match="unhealthy"):
        cs.rebook(old, prof(0.5), 3.0)
    cs.mark_healthy(0, 0)
    cs.rebook(old, prof(0.5), 3.0)
    with pytest.raises(NotFound):
        cs.mark_unhealthy(0, 5)
    with pytest.raises(InvalidArgument, match="unhealthy_gpus"):
        ClusterState([Node("x", "V100", 2, 16.0, 8.0, 8.0, unhealthy_gpus=frozenset({2}))])


def test_the_scheduling_round_runs_with_the_elastico_scorer():
    """The elastico policy with the elastico scorer: every job finishes, work is conserved
    (the simulator's own validation), and runs are reproducible."""
    import numpy as np

    from elastico.model import Job, JobKind, Request
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.sim.simulator import simulate
    from elastico.perf.throughput import ThroughputModel

    model = ThroughputModel.bundled()
    nodes = [Node("a", "V100M16", 4, 16.0, 32.0, 128.0), Node("b", "T4", 2, 16.0, 32.0, 128.0)]
    rng = np.random.default_rng(3)
    jobs = [Job(f"j{i}", JobKind.TRAINING, float(rng.uniform(0, 600)), float(rng.uniform(50, 400)),
                Request(1, float(rng.choice([0.25, 0.5, 1.0])), 1.0, 2.0),
                job_type="ResNet-50 (batch size 64)", slowdown_bound=1.5) for i in range(20)]
    results = []
    for _ in range(2):
        env = PolicyEnv(nodes=nodes, throughput=model, slowdown=AnalyticSlowdown(), scorer="elastico")
        pol = make_policy("elastico", env)
        res = simulate(nodes, jobs, pol, restart_s=30.0, validate=True,
                       activity=lambda j, c, _p=pol: _p.catalog.profile(j, c).gpu_activity)
        assert res.metrics["jobs_completed"] == len(jobs)
        results.append(res.metrics["avg_jct_s"])
    assert results[0] == results[1]
