"""The trace-driven simulator: hand-worked schedules, work conservation, every admitted job
finishing exactly once, no over-commitment in any round, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.round import ActiveJob, RoundInput, run_round
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import METRIC_KEYS, simulate
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def node(name="n0", gpus=1, model="V100M16", cpu=32.0, mem=128.0):
    return Node(name, model, gpus, 16.0, cpu, mem)


def job(i, arrival, work, *, kind=JobKind.TRAINING, gpus=1, share=1.0, jt=JT):
    return Job(f"j{i}", kind, arrival, work, Request(gpus, share, 1.0, 2.0), job_type=jt,
               slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


def run(nodes, jobs, policy="exclusive", restart_s=30.0, **kw):
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), restart_s=restart_s)
    pol = make_policy(policy, env)
    return simulate(nodes, jobs, pol, restart_s=restart_s,
                    activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity, **kw)


def test_exclusive_fifo_hand_worked():
    # One V100M16 (the reference GPU: a whole-GPU request runs at normalized speed 1.0).
    # A (work 100) arrives at 0 and runs 0..100; B (work 100) arrives at 10, waits for the GPU
    # and runs 100..200.  JCT 100 and 190 -> mean 145; queueing 0 and 90 -> mean 45;
    # makespan 200; the GPU is fully allocated over the arrival window [0, 10].
    res = run([node()], [job(0, 0.0, 100.0), job(1, 10.0, 100.0)])
    m = res.metrics
    assert m["jobs_completed"] == 2
    assert m["avg_jct_s"] == pytest.approx(145.0)
    assert m["p50_jct_s"] == pytest.approx(145.0)
    assert m["avg_queue_s"] == pytest.approx(45.0)
    assert m["makespan_s"] == pytest.approx(200.0)
    # throughput counts completions inside the window (the arrival window [0, 10]): none
    assert m["jobs_per_hour"] == pytest.approx(0.0)
    # work in the window: one whole GPU at speed 1 for 10 s = 1 GPU-hour per hour
    assert m["work_per_hour"] == pytest.approx(1.0)
    assert m["gpu_allocation"] == pytest.approx(1.0)
    # utilization = p of the job type (whole GPU, alone): the Amdahl parallel fraction
    assert m["gpu_utilization"] == pytest.approx(MODEL.parallel_fraction(JT))
    by = {r.job_id: r for r in res.records}
    assert (by["j0"].first_start_s, by["j0"].finish_s) == (0.0, pytest.approx(100.0))
    assert (by["j1"].first_start_s, by["j1"].finish_s) == (pytest.approx(100.0), pytest.approx(200.0))


def test_exclusive_rounds_a_sharing_pod_up_to_a_whole_gpu():
    # Two inference pods asking 0.5 GPU each on one GPU: Kubernetes gives each a whole GPU, so
    # they run one after the other, each faster than its trace speed by speed(1)/speed(0.5).
    p = MODEL.parallel_fraction(JT)
    speedup = 1.0 / (1.0 / (p / 0.5 + 1 - p))  # x(1.0) / x(0.5) with x(s) = 1/(p/s + 1 - p)
    jobs = [job(0, 0.0, 100.0, kind=JobKind.INFERENCE, share=0.5),
            job(1, 0.0, 100.0, kind=JobKind.INFERENCE, share=0.5)]
    m = run([node()], jobs).metrics
    assert m["makespan_s"] == pytest.approx(200.0 / speedup, rel=1e-6)


@pytest.mark.parametrize("policy", ["exclusive", "time-slicing"])
def test_a_service_lives_its_lifetime_and_keeps_its_requested_share_busy(policy):
    # A 0.5-GPU service alone on a V100 for a lifetime of 100 s.  `exclusive` gives it the
    # whole GPU, `time-slicing` its 0.5 share; either way it serves the load its request was
    # sized for: it is deleted at t = 100 (not 100 x speed(0.5) earlier) and keeps busy the
    # SMs of a 0.5 share, p x speed(0.5) = p / (p/0.5 + 1 - p) (docs/metrics.md), not p.
    p = MODEL.parallel_fraction(JT)
    res = run([node()], [job(0, 0.0, 100.0, kind=JobKind.SERVICE, share=0.5)], policy)
    (rec,) = res.records
    assert rec.finish_s == pytest.approx(100.0)
    assert rec.max_slowdown == pytest.approx(1.0)
    assert res.metrics["gpu_utilization"] == pytest.approx(p / (p / 0.5 + 1 - p))


def test_a_service_on_a_faster_gpu_does_not_leave_early():
    # A whole-GPU service allowed only on an H100 (3.7x a V100): its lifetime is wall time,
    # so it runs 0..100 and keeps the H100's SMs busy at its Amdahl fraction p (its request
    # is the whole GPU of the model it runs on).  A batch job of the same work would take
    # 100 / 3.7 s there.
    p = MODEL.parallel_fraction(JT)
    h100 = Node("h", "H100-80GB", 1, 80.0, 32.0, 128.0)
    svc = Job("s", JobKind.SERVICE, 0.0, 100.0, Request(1, 1.0, 1.0, 2.0, frozenset({"H100-80GB"})),
              job_type=JT, slowdown_bound=1.1)
    res = run([h100], [svc])
    (rec,) = res.records
    assert rec.finish_s == pytest.approx(100.0)
    assert res.metrics["gpu_utilization"] == pytest.approx(p)


def _random_jobs(rng, n, kinds=(JobKind.TRAINING, JobKind.INFERENCE, JobKind.SERVICE)):
    out = []
    for i in range(n):
        kind = kinds[rng.integers(len(kinds))]
        gpus = int(rng.choice([1, 1, 1, 2, 4]))
        share = float(rng.choice([0.25, 0.5, 1.0])) if gpus == 1 else 1.0
        jt = MODEL.multi_gpu_job_types()[rng.integers(len(MODEL.multi_gpu_job_types()))]
        out.append(job(i, float(rng.uniform(0, 500)), float(rng.uniform(10, 400)), kind=kind,
                       gpus=gpus, share=share, jt=jt))
    return out


@pytest.mark.parametrize("policy", ["exclusive", "elastico"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_job_finishes_once_and_work_is_conserved(policy, seed):
    rng = np.random.default_rng(seed)
    nodes = [node("a", 4), node("b", 4, model="T4"), node("c", 2, model="P100")]
    jobs = _random_jobs(rng, 40, kinds=(JobKind.TRAINING, JobKind.INFERENCE))
    res = run(nodes, jobs, policy, validate=True)
    assert res.metrics["jobs_completed"] == len(jobs)
    assert sorted(r.job_id for r in res.records) == sorted(j.id for j in jobs)
    for r in res.records:
        assert r.status == "finished"
        # the integral of the effective rate equals the work (nothing lost, nothing extra)
        assert r.progress == pytest.approx(r.work, rel=1e-9, abs=1e-6)
        assert r.finish_s >= r.first_start_s >= r.arrival_s
    # the inputs were not mutated
    assert all(j.done == 0.0 for j in jobs)


@pytest.mark.parametrize("policy", ["exclusive", "elastico"])
def test_services_are_censored_when_the_batch_work_is_done(policy):
    nodes = [node("a", 2)]
    jobs = [job(0, 0.0, 1e9, kind=JobKind.SERVICE), job(1, 5.0, 50.0)]
    res = run(nodes, jobs, policy)
    by = {r.job_id: r for r in res.records}
    assert by["j1"].status == "finished"
    assert by["j0"].status == "censored"
    assert res.metrics["jobs_completed"] == 1


@pytest.mark.parametrize("policy", ["exclusive", "elastico"])
def test_deterministic(policy):
    rng = np.random.default_rng(7)
    nodes = [node("a", 4), node("b", 2, model="T4")]
    jobs = _random_jobs(rng, 25)
    a = run(nodes, jobs, policy).metrics
    b = run(nodes, jobs, policy).metrics
    for k in METRIC_KEYS:
        if not k.startswith("round_ms"):
            assert a[k] == b[k], k


def test_unplaceable_job_is_reported_not_retried_forever():
    # 4 GPUs asked on a 2-GPU cluster: no node can ever host it
    res = run([node("a", 2)], [job(0, 0.0, 10.0, gpus=4), job(1, 0.0, 10.0)])
    by = {r.job_id: r for r in res.records}
    assert by["j0"].status == "unplaceable" and "4 GPUs" in by["j0"].reason
    assert by["j1"].status == "finished"
    assert res.metrics["jobs_unfinished"] == 1


def test_elastico_shares_a_gpu_that_exclusive_serialises():
    # Two half-GPU inference pods on one GPU: elastico runs both at once (MPS), so the last
    # one finishes earlier than under exclusive's one-after-the-other.
    jobs = [job(0, 0.0, 300.0, kind=JobKind.INFERENCE, share=0.5),
            job(1, 0.0, 300.0, kind=JobKind.INFERENCE, share=0.5)]
    ex = run([node()], jobs, "exclusive").metrics
    el = run([node()], jobs, "elastico").metrics
    assert el["makespan_s"] < ex["makespan_s"]
    assert el["avg_queue_s"] < ex["avg_queue_s"]


def test_round_commits_all_or_nothing():
    # A policy that raises mid-round leaves the caller's state untouched.
    nodes = [node("a", 2)]
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy("exclusive", env)

    state = ClusterState(nodes)

    class Boom:
        name = "boom"

        def __call__(self, inp, st):
            pol(inp, st)  # books jobs on the private copy ...
            raise RuntimeError("boom")  # ... then fails

    inp = RoundInput(0.0, nodes, state, [ActiveJob(job(0, 0.0, 10.0))])
    with pytest.raises(RuntimeError):
        run_round(Boom(), inp)
    assert len(state) == 0 and state.used_gpus() == 0.0


def test_metrics_keys_and_ranges_on_the_real_trace():
    from elastico import trace
    from elastico.sim import workload

    nodes = trace.sub_cluster(trace.read_nodes(), 64)
    wl = workload.build_workload(trace.read_pods(), nodes, seed=0, load=0.5, model=MODEL, jobs=120)
    for policy in ("exclusive", "elastico"):
        m = run(nodes, wl.jobs, policy).metrics
        assert set(METRIC_KEYS) <= set(m)
        assert 0.0 <= m["gpu_utilization"] <= m["gpu_allocation"] + 1e-9 <= 1.0 + 1e-9
        assert m["p50_jct_s"] <= m["p95_jct_s"] <= m["p99_jct_s"]
        assert m["jobs_completed"] + m["jobs_unfinished"] == sum(1 for j in wl.jobs if j.kind.elastic)
        assert math.isfinite(m["avg_jct_s"]) and m["avg_jct_s"] > 0


def test_huge_clock_values_still_finish():
    # At t ~ 1e11 s a float step is ~1.5e-5 s: a tiny --load stretches arrivals that far.
    # The clock must keep advancing and every job finish (this once looped forever).
    jobs = [job(i, 1e11 + 7.3 * i, 1.0 + 0.37 * i, kind=JobKind.INFERENCE, share=0.5)
            for i in range(6)]
    res = run([node("a", 2)], jobs, "elastico")
    assert res.metrics["jobs_completed"] == 6
    for r in res.records:
        assert r.progress == pytest.approx(r.work, rel=1e-4)


def test_a_job_is_not_restarted_once_its_dwell_time_is_over():
    # A long job alone on a roomy node: the small jobs arriving after its dwell time
    # (10 x restart_s = 10 s) fit beside it even at their largest shape (one replica,
    # MAX_REPLICAS_UP; the job itself at most 2 GPUs), so nothing should ever move it.  (A stale cache
    # once made every post-dwell round "move" it to the same configuration: one restart per
    # round.)
    jobs = [job(0, 0.0, 2000.0)] + [  # the first small job arrives inside the dwell window
        job(i, 5.0 if i == 1 else 100.0 * i, 5.0, kind=JobKind.INFERENCE, share=0.25)
        for i in range(1, 6)]
    res = run([node("a", 8)], jobs, "elastico", restart_s=1.0)
    by = {r.job_id: r for r in res.records}
    assert all(r.status == "finished" for r in res.records)
    assert by["j0"].restarts == 0


def test_utilization_credits_both_co_located_jobs():
    # Two inference pods asking 0.5 GPU each share one V100 under time-slicing.  Time-slicing
    # caps no share (issue 19, finding 5), so each keeps a = p of the GPU's SMs busy when it
    # runs (its whole-GPU activity, Amdahl, docs/metrics.md) and runs slowed by the pair
    # slowdown of two whole-GPU partners, sigma = min(2, 1 + kappa * p) (the analytic model,
    # at most the round-robin 2); the GPU is then 2 a / sigma busy -- more than the p one
    # such job keeps busy alone on a whole GPU.
    from elastico.predictor.analytic import DEFAULT_KAPPA
    p = MODEL.parallel_fraction(JT)
    a = p
    sigma = min(2.0, 1.0 + DEFAULT_KAPPA * a)
    jobs = [job(i, 0.0, 100.0, kind=JobKind.INFERENCE, share=0.5) for i in range(2)]
    res = run([node()], jobs, policy="time-slicing")
    assert res.timeline["allocated"][0] == pytest.approx(1.0)
    assert res.timeline["busy_all"][0] == pytest.approx(2 * a / sigma)
    assert 2 * a / sigma > p


def test_inference_replicas_spread_over_nodes_as_one_gang():
    # One inference job asking 4 replicas of a whole GPU (1 CPU core in all: 0.25 each) on a
    # 4-GPU node with only 0.5 cores and a 2-GPU node: no node holds all four replicas, but
    # they are independent pods, so the job gets its request as one gang, two replicas per
    # node.  (Never more replicas than requested: MAX_REPLICAS_UP = 1, issue 19.)
    nodes = [node("a", 4, cpu=0.5), node("b", 2)]
    j = job(0, 0.0, 1000.0, kind=JobKind.INFERENCE, gpus=4, share=1.0)
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy("elastico", env)
    res = run_round(pol, RoundInput(now=0.0, nodes=nodes, state=ClusterState(nodes),
                                    jobs=[ActiveJob(j, None)]))
    d = res.decisions["j0"]
    assert d.config.num_gpus == 4 and d.config.gpu_share == 1.0
    assert sorted(d.assignment.node_indices) == [0, 1]
    assert sorted(p.node_index for p in d.assignment.parts) == [0, 0, 1, 1]
    assert d.config.throughput == pytest.approx(1.0)


def test_replicas_stay_on_one_node_where_jobs_are_user_pods():
    # The Kubernetes loop's policies (replica_pods=False): one pod cannot become pods on
    # several nodes, so the same job gets at most one node's 2 replicas.
    from elastico.placer.kube.loop import default_policy_factory
    nodes = [node("a", 4, cpu=0.5), node("b", 2)]
    j = job(0, 0.0, 1000.0, kind=JobKind.INFERENCE, gpus=4, share=1.0)
    pol = default_policy_factory(MODEL, AnalyticSlowdown())(nodes)
    assert pol.env.replica_pods is False
    res = run_round(pol, RoundInput(now=0.0, nodes=nodes, state=ClusterState(nodes),
                                    jobs=[ActiveJob(j, None)]))
    d = res.decisions["j0"]
    assert d.config.num_gpus == 2 and len(d.assignment.node_indices) == 1


def test_training_time_past_the_bound_hand_worked():
    # Issue 24's bound_violation_time_frac: one V100 (speed 1.0), exclusive FIFO.  A truth that
    # slows j0 by 2.0 (past its bound 1.5) and j1 not at all: j0 (work 100) runs 0..200, all of
    # it past the bound; j1 (work 100, arrives at 0) waits, then runs 200..300 at 1.0.
    # Training time past bound = 200 / (200 + 100); j0 alone is past 5 % of its run.
    class Truth:
        def slowdowns_of(self, state, live, time_sliced, profile):
            return {jid: (2.0 if jid == "j0" else 1.0) for jid in live}

    res = run([node()], [job(0, 0.0, 100.0), job(1, 0.0, 100.0)], truth=Truth())
    by = {r.job_id: r for r in res.records}
    assert by["j0"].finish_s == pytest.approx(200.0) and by["j1"].finish_s == pytest.approx(300.0)
    assert (by["j0"].run_s, by["j0"].over_s) == (pytest.approx(200.0), pytest.approx(200.0))
    assert (by["j1"].run_s, by["j1"].over_s) == (pytest.approx(100.0), 0.0)
    m = res.metrics
    assert m["bound_violation_time_frac"] == pytest.approx(200.0 / 300.0)
    assert m["bound_violation_time_frac_max"] == pytest.approx(1.0)
    assert m["bound_violation_jobs_5pct"] == 1
