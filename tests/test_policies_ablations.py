"""The ablations of ``elastico``: each differs from the full policy in exactly the mechanism
its name says -- ``-no-rst`` only the requested shape, ``-no-esp`` a greedy choice instead of
shadow prices, ``-no-iac`` a placer that predicts no interference."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import POLICIES, PolicyEnv, make_policy
from elastico.placer.policies.pipeline import greedy_choice
from elastico.placer.round import ActiveJob, RoundInput, run_round
from elastico.predictor import AnalyticSlowdown, NoInterference
from elastico.pricing import solve
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"
ABLATIONS = ("elastico-no-rst", "elastico-no-esp", "elastico-no-iac")


def v100(gpus=1):
    return [Node("n0", "V100M16", gpus, 16.0, 32.0, 128.0)]


def job(i, kind=JobKind.INFERENCE, share=0.5, bound=1.5):
    return Job(f"j{i}", kind, 0.0, 1000.0, Request(1, share, 1.0, 2.0), job_type=JT,
               slowdown_bound=bound)


def one_round(policy, nodes, jobs):
    pol = make_policy(policy, PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown()))
    res = run_round(pol, RoundInput(0.0, nodes, ClusterState(nodes), [ActiveJob(j) for j in jobs]))
    return pol, res


def test_registered_with_their_names():
    for name in ABLATIONS:
        assert POLICIES[name].name == name
        assert issubclass(POLICIES[name], POLICIES["elastico"])


def test_no_rst_keeps_the_requested_shape_other_mechanisms_unchanged():
    # idle 2-GPU node, one 1-GPU training job: the full policy stretches it to 2 GPUs; without
    # RST its family is wait + the requested shape, and it gets exactly 1 GPU
    tr = [job(0, JobKind.TRAINING, share=1.0)]
    full, r_full = one_round("elastico", v100(2), tr)
    ab, r_ab = one_round("elastico-no-rst", v100(2), tr)
    assert r_full.decisions["j0"].config.num_gpus == 2
    assert r_ab.decisions["j0"].config.num_gpus == 1
    fam = ab.catalog.family(tr[0])
    assert len(fam) == 2 and fam.configs[0].is_wait
    assert (fam.configs[1].num_gpus, fam.configs[1].gpu_share) == (1, 1.0)
    # pricing and the predictor are the full policy's
    assert r_ab.pricing is not None and r_ab.pricing.iterations >= 1
    assert isinstance(ab.env.slowdown, AnalyticSlowdown)


def test_no_rst_sharing_pod_keeps_its_fraction():
    ab, _ = one_round("elastico-no-rst", v100(), [job(0, share=0.25)])
    fam = ab.catalog.family(job(0, share=0.25))
    assert [c.gpu_share for c in fam.configs[1:]] == [0.25]


def test_greedy_takes_the_best_job_first_where_prices_share():
    # Hand-worked MMKP, 1 GPU.  Job A: wait 0, 1 GPU -> 1.0, 0.5 GPU -> 0.8.  Job B: wait 0,
    # 1 GPU -> 0.9, 0.5 GPU -> 0.7.  Greedy: A (best 1.0) takes its 1-GPU choice, B no longer
    # fits anything: total 1.0.  The optimum, which pricing finds: both halves, 0.8 + 0.7 = 1.5.
    u = np.array([0.0, 1.0, 0.8, 0.0, 0.9, 0.7])
    d = np.array([[0.0], [1.0], [0.5], [0.0], [1.0], [0.5]])
    off = np.array([0, 3, 6])
    cap = np.array([1.0])
    g = greedy_choice(u, d, off, cap, np.array([-1, -1]))
    assert g.choice.tolist() == [1, 0]
    assert g.primal_value == pytest.approx(1.0)
    assert g.prices.tolist() == [0.0] and np.isnan(g.gap)
    assert solve(u, d, off, cap).primal_value == pytest.approx(1.5)


def test_greedy_reports_changed_running_jobs():
    u = np.array([0.0, 1.0, 0.8, 0.0, 0.9, 0.7])
    d = np.array([[0.0], [1.0], [0.5], [0.0], [1.0], [0.5]])
    g = greedy_choice(u, d, np.array([0, 3, 6]), np.array([1.0]), np.array([2, 2]))
    assert g.changed.tolist() == [True, True]  # A 2 -> 1, B 2 -> 0 (preempted)


def test_no_esp_uses_the_greedy_and_nothing_else_changes():
    # two half-GPU inference jobs on one GPU: prices give the first 0.5 GPU (two halves would
    # be worth 2 x 0.78 > 1.0), the greedy its best single choice, the whole GPU
    jobs = [job(0, bound=1.2), job(1, bound=1.2)]
    _, r_full = one_round("elastico", v100(), jobs)
    ab, r_ab = one_round("elastico-no-esp", v100(), jobs)
    assert r_full.decisions["j0"].config.gpu_share == 0.5
    assert r_ab.decisions["j0"].config.gpu_share == 1.0
    assert r_ab.pricing.iterations == 0 and not r_ab.pricing.prices.any()
    assert r_full.pricing.iterations >= 1
    assert isinstance(ab.env.slowdown, AnalyticSlowdown)
    assert len(ab.catalog.family(jobs[0])) == len(make_policy("elastico", ab.env).catalog.family(jobs[0]))


def test_no_iac_co_locates_what_the_predictor_forbids():
    # the same two jobs with bound 1.2: the analytic predictor says ~1.40 each when they
    # share, so the full policy keeps the second waiting; without IAC both share GPU 0
    jobs = [job(0, bound=1.2), job(1, bound=1.2)]
    _, r_full = one_round("elastico", v100(), jobs)
    ab, r_ab = one_round("elastico-no-iac", v100(), jobs)
    assert [r_full.decisions[j.id].status.value for j in jobs] == ["placed", "waiting"]
    assert [r_ab.decisions[j.id].status.value for j in jobs] == ["placed", "placed"]
    assert r_ab.decisions["j1"].assignment.gpu_indices == (0,)
    assert isinstance(ab.env.slowdown, NoInterference)
    assert r_ab.pricing.iterations >= 1
