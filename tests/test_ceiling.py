"""The GPU-utilization ceiling (elastico.sim.ceiling): hand-worked workloads where the bound is
tight, and random workloads on which no policy's simulated utilization exceeds it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastico.sim.ceiling import JobEnvelope, job_envelope, utilization_ceiling, workload_ceiling
from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.placer.policies import POLICIES, PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"
P = MODEL.parallel_fraction(JT)


def node(name="n0", gpus=1, model="V100M16"):
    return Node(name, model, gpus, 16.0, 32.0, 128.0)


def job(i, arrival, work, *, kind=JobKind.TRAINING, gpus=1, share=1.0, jt=JT):
    return Job(f"j{i}", kind, arrival, work, Request(gpus, share, 1.0, 2.0), job_type=jt,
               slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


def ceiling_of(nodes, jobs):
    """The ceiling over the configurations every policy may use (as elastico.sim.evaluate)."""
    return workload_ceiling(jobs, nodes, MODEL)


def simulated(nodes, jobs, policy):
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy(policy, env)
    return simulate(nodes, jobs, pol, truth=AnalyticSlowdown(),
                    activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity).metrics


def test_tight_for_a_busy_gpu_through_the_window():
    # exclusive FIFO on one V100: A (work 100) runs 0..100, B arrives at 10; the window is
    # [0, 10] and A keeps p of the GPU busy through it: utilization p, and p is also the most
    # any policy could get (one 1-GPU node: no wider gang).
    jobs = [job(0, 0.0, 100.0), job(1, 10.0, 100.0)]
    assert ceiling_of([node()], jobs) == pytest.approx(P)
    assert simulated([node()], jobs, "exclusive")["gpu_utilization"] == pytest.approx(P)


def test_work_bound_a_short_job_cannot_fill_the_window():
    # A (work 5 s) is done long before the window [0, 100] ends: at most 5 x p busy
    # GPU-seconds (n a / x = p on a whole V100, the same p/x at every MPS share), so 5p/100.
    jobs = [job(0, 0.0, 5.0), job(1, 100.0, 100.0)]
    assert ceiling_of([node()], jobs) == pytest.approx(5 * P / 100)
    assert simulated([node()], jobs, "exclusive")["gpu_utilization"] == pytest.approx(5 * P / 100)


def test_a_service_counts_its_requested_share_only():
    # A 0.5-GPU service through the window [0, 10]: whether given the whole GPU or its share
    # it keeps p x speed(0.5) = p / (p/0.5 + 1 - p) busy (docs/metrics.md).
    jobs = [job(0, 0.0, 100.0, kind=JobKind.SERVICE, share=0.5), job(1, 10.0, 100.0)]
    want = P / (P / 0.5 + 1 - P)
    assert ceiling_of([node()], jobs) == pytest.approx(want)
    assert simulated([node()], jobs, "exclusive")["gpu_utilization"] == pytest.approx(want)


def test_wider_gangs_raise_the_ceiling_by_their_lost_speedup():
    # On a 2-GPU node a 1-GPU training job may run on 2 GPUs (MAX_SCALE_UP = 2), keeping 2p
    # busy at speedup S(2) < 2: the work bound grows to work x 2p / S(2).
    jobs = [job(0, 0.0, 5.0, jt="ResNet-18 (batch size 16)"),
            job(1, 100.0, 100.0, jt="ResNet-18 (batch size 16)")]
    jt = "ResNet-18 (batch size 16)"
    p = MODEL.parallel_fraction(jt)
    s2 = MODEL.solo(jt, "V100M16", 2, 1.0) / MODEL.solo(jt, "V100M16", 1, 1.0)
    assert ceiling_of([node(gpus=2)], jobs) == pytest.approx(
        max(p, 2 * p / s2) * 5 / (2 * 100))


@pytest.mark.parametrize("seed", range(6))
def test_no_policy_exceeds_the_ceiling(seed):
    rng = np.random.default_rng(seed)
    nodes = [node("a", 4), node("b", 2, model="T4"), node("c", 2, model="P100")]
    types = MODEL.multi_gpu_job_types()
    jobs = []
    # light load (the ceiling well below 1), so policies come within 7 % of it: a bound a
    # few per cent too low would fail here
    for i in range(15):
        kind = (JobKind.TRAINING, JobKind.INFERENCE, JobKind.SERVICE)[rng.integers(3)]
        gpus = int(rng.choice([1, 1, 1, 2, 4])) if kind is not JobKind.INFERENCE else 1
        share = float(rng.choice([0.25, 0.5, 1.0])) if gpus == 1 else 1.0
        jobs.append(job(i, float(rng.uniform(0, 2000)), float(rng.uniform(10, 300)), kind=kind,
                        gpus=gpus, share=share, jt=types[rng.integers(len(types))]))
    jobs.append(job(99, 2100.0, 50.0, kind=JobKind.SERVICE))  # arrives after the batch work
    ceiling = ceiling_of(nodes, jobs)
    assert 0.0 < ceiling < 1.0
    for policy in sorted(POLICIES):
        u = simulated(nodes, jobs, policy)["gpu_utilization"]
        assert u <= ceiling + 1e-9, (policy, u, ceiling)


def test_bad_inputs_are_refused():
    env = JobEnvelope(0.0, 10.0, 1.0, 1.0)
    with pytest.raises(InvalidArgument, match="gpus"):
        utilization_ceiling([env], 0)
    with pytest.raises(InvalidArgument, match="envelopes"):
        utilization_ceiling([], 4)
    with pytest.raises(InvalidArgument, match="throughput > 0"):
        job_envelope(job(0, 0.0, 1.0), [], lambda c: 1.0)
    # one arrival time: no window to average over
    assert math.isnan(utilization_ceiling([env, JobEnvelope(0.0, 5.0, 1.0, 1.0)], 4))


@pytest.mark.parametrize("policy", ["exclusive", "elastico", "gavel", "time-slicing"])
def test_services_arriving_after_the_batch_work_do_not_shorten_the_window(policy):
    # The only batch job is done at t = 10, a service arrives at 100.  The replay runs to the
    # last arrival, so utilization averages over [0, 100] like the ceiling (it once stopped
    # at 10 and reported 9-18x the ceiling).
    jobs = [job(0, 0.0, 10.0), job(1, 100.0, 100.0, kind=JobKind.SERVICE)]
    nodes = [node(gpus=2)]
    u = simulated(nodes, jobs, policy)["gpu_utilization"]
    assert u <= ceiling_of(nodes, jobs) + 1e-12


def test_a_job_that_fits_nowhere_adds_nothing():
    # 4 GPUs asked on a 1-GPU cluster: never placed, so the ceiling is the other job's
    jobs = [job(0, 0.0, 100.0), job(1, 0.0, 50.0, gpus=4), job(2, 10.0, 100.0)]
    assert ceiling_of([node()], jobs) == pytest.approx(P)
