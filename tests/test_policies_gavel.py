"""The ``gavel`` baseline: Gavel's heterogeneity-aware max-min fair LP (OSDI'20, section 4.1)
checked against hand-worked optima and a brute-force grid search, its round-based mechanism
against the time shares the LP asks for, and the policy end to end (services never
preempted, every job finishes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.gavel import (RoundMechanism, equal_share_throughput, grant,
                                            max_min_allocation)
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def normalized(T, s, w, C, X):
    """Each job's sum_j T s X / (w P) -- the quantity Gavel's LP maximizes the minimum of."""
    P = equal_share_throughput(np.asarray(T, float), np.asarray(C, float))
    return (np.asarray(T) * X).sum(axis=1) * np.asarray(s) / (np.asarray(w) * P)


def check_feasible(T, s, C, X):
    T, s, C = np.asarray(T, float), np.asarray(s, float), np.asarray(C, float)
    assert np.all(X >= 0)
    assert np.all(X.sum(axis=1) <= 1 + 1e-9)
    assert np.all(s @ X <= C + 1e-9)
    assert np.all(X[T == 0] == 0)


# ---- the LP ------------------------------------------------------------------------------

def test_two_jobs_two_models_hand_worked():
    # Models A and B, one GPU each.  T = [[3, 1], [2, 1]]; equal share P = T @ C / 2 =
    # [2, 1.5].  Job 1 needs 3a1 + b1 >= 2z and a1 + b1 <= 1, so a1 >= (2z - 1)/2; job 2 needs
    # a2 >= 1.5z - 1.  With a1 + a2 <= 1 and b1 + b2 <= 1 the best is z = 1, where
    # a1 >= 1/2 and a2 >= 1/2 force a1 = a2 = 1/2, then b1 >= 1/2, b2 >= 1/2 force b = 1/2.
    T = [[3.0, 1.0], [2.0, 1.0]]
    X, z = max_min_allocation(np.array(T), np.ones(2), np.ones(2), np.array([1.0, 1.0]))
    assert z == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(X, [[0.5, 0.5], [0.5, 0.5]], atol=1e-9)


def test_priority_weights_share_time_in_their_ratio():
    # one model, one GPU, identical jobs, weights 1 and 3: max min(x1 / 1, x2 / 3) with
    # x1 + x2 <= 1 -> x = (1/4, 3/4)
    X, z = max_min_allocation(np.array([[2.0], [2.0]]), np.ones(2), np.array([1.0, 3.0]),
                              np.array([1.0]))
    np.testing.assert_allclose(X[:, 0], [0.25, 0.75], atol=1e-9)
    assert z == pytest.approx(0.25, abs=1e-9)


def test_scale_factor_equalizes_gpu_time():
    # one model with 2 GPUs; job A on 1 GPU (T = 1), job B on 4 GPUs (T = 4, linear).
    # P = T, so the objective is min(x_A, 4 x_B) with x_A + 4 x_B <= 2 and x <= 1: x_A = 1,
    # x_B = 1/4 -- each job gets one GPU's worth of time (LAS counts GPU time).
    X, z = max_min_allocation(np.array([[1.0], [4.0]]), np.array([1.0, 4.0]), np.ones(2),
                              np.array([2.0]))
    np.testing.assert_allclose(X[:, 0], [1.0, 0.25], atol=1e-9)
    assert z == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("T,s,w,C", [
    ([[4.0, 1.0], [2.0, 2.0], [1.0, 3.0]], [1, 1, 1], [1, 1, 1], [1, 1]),
    ([[4.0, 1.0], [3.0, 2.0], [2.0, 0.0]], [1, 2, 1], [1, 2, 1], [2, 2]),
    ([[5.0, 2.0], [1.0, 1.0], [3.0, 1.5]], [1, 1, 1], [1, 1, 3], [1, 2]),
])
def test_three_jobs_two_models_against_grid_search(T, s, w, C):
    # Brute force over every X on a 0.1 grid (per job: a + b <= 1).  The LP's value must beat
    # every feasible grid point, and be beaten by at most what rounding the LP's X down to the
    # grid can lose (0.1 per entry times the job's largest coefficient).
    T, s, w, C = (np.array(v, float) for v in (T, s, w, C))
    X, z = max_min_allocation(T, s, w, C)
    check_feasible(T, s, C, X)
    assert normalized(T, s, w, C, X).min() == pytest.approx(z, abs=1e-7)

    steps = np.round(np.arange(11) * 0.1, 10)
    pairs = np.array([(a, b) for a in steps for b in steps if a + b <= 1 + 1e-9])
    pairs = pairs[:, None, :] * (T[None, :, :] > 0)      # zero where the job cannot run
    P = equal_share_throughput(T, C)
    coef = T * (s / (w * P))[:, None]
    vals = [pairs[:, i, :] @ coef[i] for i in range(3)]  # [K] per job
    idx = np.array(list(itertools.product(range(len(pairs)), repeat=3)))
    use = np.stack([pairs[idx[:, i], i, :] * s[i] for i in range(3)]).sum(axis=0)
    ok = np.all(use <= C + 1e-9, axis=1)
    best = np.min(np.stack([vals[i][idx[:, i]] for i in range(3)]), axis=0)[ok].max()
    assert z >= best - 1e-9
    assert best >= z - 0.1 * coef.sum(axis=1).max() - 1e-9


def test_allocation_respects_capacity_and_time_on_random_cases():
    rng = np.random.default_rng(8)
    for _ in range(30):
        n, m = int(rng.integers(1, 12)), int(rng.integers(1, 5))
        T = rng.uniform(0.1, 5.0, (n, m)) * (rng.random((n, m)) > 0.3)
        T[:, 0] = np.maximum(T[:, 0], 0.1)                 # every job runs somewhere
        s = rng.choice([1, 2, 4, 8], n).astype(float)
        w = rng.uniform(0.5, 2.0, n)
        C = rng.integers(8, 20, m).astype(float)
        X, z = max_min_allocation(T, s, w, C)
        check_feasible(T, s, C, X)
        assert z > 0
        assert normalized(T, s, w, C, X).min() >= z - 1e-7


def test_bad_inputs_name_the_field():
    with pytest.raises(InvalidArgument, match="scale"):
        max_min_allocation(np.ones((1, 1)), np.array([0.0]), np.ones(1), np.ones(1))
    with pytest.raises(InvalidArgument, match="throughputs"):
        max_min_allocation(np.array([[1.0, 0.0]]), np.ones(1), np.ones(1), np.array([0.0, 3.0]))


# ---- the round-based mechanism -----------------------------------------------------------

def _run_mechanism(mech, alloc, scale, free, runs_on, rounds, round_s=360.0):
    jobs = list(alloc)
    for j in jobs:
        mech.add_job(j)
    mech.set_allocation(alloc, 0.0)
    got = {j: dict.fromkeys(mech.models, 0.0) for j in jobs}
    for r in range(rounds):
        g = grant(mech.queue(jobs, runs_on), scale, free)
        mech.credit(g, round_s)
        for j, m in g.items():
            got[j][m] += round_s
    return got


def test_mechanism_gives_time_in_proportion_to_the_hand_worked_allocation():
    # the hand-worked two-model case: each job half its time on A, half on B
    alloc = {"j1": {"A": 0.5, "B": 0.5}, "j2": {"A": 0.5, "B": 0.5}}
    mech = RoundMechanism(["A", "B"])
    got = _run_mechanism(mech, alloc, {"j1": 1, "j2": 1}, {"A": 1, "B": 1},
                         {"j1": frozenset("AB"), "j2": frozenset("AB")}, rounds=200)
    total = 200 * 360.0
    for j in alloc:
        for m in "AB":
            assert got[j][m] / total == pytest.approx(0.5, abs=0.02)


def test_mechanism_rotates_jobs_as_the_lp_asks():
    # 3 identical jobs on 2 GPUs, weights 1, 1, 2: the LP gives x = (1/2, 1/2, 1); over many
    # rounds job 3 always runs and jobs 1 and 2 take turns
    X, _ = max_min_allocation(np.full((3, 1), 1.0), np.ones(3), np.array([1.0, 1.0, 2.0]),
                              np.array([2.0]))
    np.testing.assert_allclose(X[:, 0], [0.5, 0.5, 1.0], atol=1e-9)
    alloc = {f"j{i}": {"A": float(X[i, 0])} for i in range(3)}
    got = _run_mechanism(RoundMechanism(["A"]), alloc, dict.fromkeys(alloc, 1), {"A": 2},
                         dict.fromkeys(alloc, frozenset("A")), rounds=300)
    total = 300 * 360.0
    for i, x in enumerate(X[:, 0]):
        assert got[f"j{i}"]["A"] / total == pytest.approx(x, abs=0.02)


def test_reset_accumulates_deficits_and_restarts_the_shares():
    # one job with x = 1 on A that received nothing for 2000 s: deficit = 1 x 2000 - 0
    mech = RoundMechanism(["A"], reset_s=1920.0)
    mech.add_job("j")
    mech.set_allocation({"j": {"A": 1.0}}, 0.0)   # first allocation: reset at once
    assert mech.last_reset == 0.0
    mech.set_allocation({"j": {"A": 1.0}}, 100.0)  # changed, but 1920 s have not passed
    assert mech.last_reset == 0.0 and mech.pending_reset
    mech.maybe_reset(2000.0)
    assert mech.deficit["j"]["A"] == pytest.approx(2000.0)
    assert mech.job_time["j"]["A"] == pytest.approx(180.0)


# ---- the policy --------------------------------------------------------------------------

def node(name, model, gpus):
    return Node(name, model, gpus, 16.0, 64.0, 256.0)


def job(i, kind=JobKind.TRAINING, gpus=1, arrival=0.0, work=1000.0, share=1.0):
    return Job(f"j{i}", kind, arrival, work, Request(gpus, share, 1.0, 2.0), job_type=JT,
               slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


def env(nodes):
    return PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())


def test_policy_rotates_three_jobs_on_two_gpus_by_rounds():
    # 3 identical 1-GPU training jobs on 2 GPUs: the LP gives each 2/3 of the time; driving
    # the policy round after round (360 s apart), each holds a GPU about 2/3 of the rounds
    nodes = [node("n0", "V100M16", 2)]
    pol = make_policy("gavel", env(nodes))
    jobs = [job(i, work=1e9) for i in range(3)]
    state, configs = ClusterState(nodes), {j.id: None for j in jobs}
    held = dict.fromkeys(configs, 0)
    rounds = 150
    for r in range(rounds):
        res = run_round(pol, RoundInput(r * 360.0, nodes, state,
                                        [ActiveJob(j, configs[j.id]) for j in jobs]))
        state = res.state
        for jid, d in res.decisions.items():
            configs[jid] = d.config if d.status is Status.PLACED else None
            held[jid] += d.status is Status.PLACED
        assert sum(d.status is Status.PLACED for d in res.decisions.values()) == 2
    for jid in held:
        assert held[jid] / rounds == pytest.approx(2 / 3, abs=0.03)


def test_a_job_granted_again_keeps_its_gpus_without_a_restart():
    # 2 jobs, 2 GPUs: every round boundary grants both again; they stay where they are
    nodes = [node("n0", "V100M16", 2)]
    pol = make_policy("gavel", env(nodes))
    jobs = [job(i, work=1e9) for i in range(2)]
    state, configs, first = ClusterState(nodes), {j.id: None for j in jobs}, {}
    for r in range(10):
        res = run_round(pol, RoundInput(r * 400.0, nodes, state,
                                        [ActiveJob(j, configs[j.id]) for j in jobs]))
        state = res.state
        for jid, d in res.decisions.items():
            assert d.status is Status.PLACED
            assert d.changed == (r == 0)
            first.setdefault(jid, d.assignment)
            assert d.assignment == first[jid]
            configs[jid] = d.config


def test_services_are_placed_first_and_never_preempted():
    # 4 GPUs; two 2-GPU training jobs hold them, then services arrive: they take GPUs at the
    # next round boundary, never lose them, and every batch job still finishes
    nodes = [node("n0", "V100M16", 4)]
    jobs = [job(0, gpus=2, work=2000.0), job(1, gpus=2, work=2500.0),
            job(2, JobKind.SERVICE, arrival=10.0, work=50_000.0),
            job(3, JobKind.SERVICE, arrival=20.0, work=50_000.0),
            job(4, JobKind.INFERENCE, gpus=1, share=0.5, arrival=30.0, work=600.0),
            job(5, arrival=400.0, work=300.0)]
    pol = make_policy("gavel", env(nodes))
    res = simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                   validate=True)
    rec = {r.job_id: r for r in res.records}
    for sid in ("j2", "j3"):
        assert rec[sid].first_start_s is not None and rec[sid].restarts == 0
        # the round boundary at 360 s is a round of its own (RoundResult.wake_at_s), though
        # no job arrives or finishes then: the services start at 360 s, not at j5's 400 s
        assert rec[sid].first_start_s == pytest.approx(360.0)
    for jid in ("j0", "j1", "j4", "j5"):
        assert rec[jid].status == "finished"
    assert res.metrics["jobs_unfinished"] == 0
    # the services took 2 GPUs from the two gangs: somebody was preempted and restarted
    assert sum(rec[j].restarts for j in ("j0", "j1")) >= 1


def test_small_heterogeneous_simulation_completes_every_job():
    nodes = [node("v0", "V100M16", 4), node("t0", "T4", 4), node("p0", "P100", 2)]
    rng = np.random.default_rng(5)
    jobs = []
    for i in range(24):
        kind = [JobKind.TRAINING, JobKind.INFERENCE, JobKind.SERVICE][i % 3]
        jobs.append(job(i, kind, gpus=int(rng.choice([1, 1, 2, 4])) if kind is JobKind.TRAINING
                        else 1, arrival=float(rng.uniform(0, 1500)),
                        work=float(rng.uniform(100, 2000)),
                        share=0.5 if kind is JobKind.INFERENCE else 1.0))
    pol = make_policy("gavel", env(nodes))
    res = simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                   validate=True)
    batch = [r for r in res.records if r.kind != "service"]
    assert all(r.status == "finished" for r in batch)
    assert all(r.restarts == 0 for r in res.records if r.kind == "service")
    assert res.metrics["jobs_completed"] == len(batch)
    # whole GPUs only: nothing shares a GPU
    assert res.metrics["service_bound_violations"] == 0
