"""The evaluation's metrics (issue 19, findings 1, 3 and 4): windowed throughput and work,
JCT statistics over the measurement window with censored jobs apart, per-job slowdown, the
short/long split, 95 % t-intervals over seeds, the backlog test and the sustainable load of a
load sweep, and continuous arrivals over a window sized from the trace's batch durations.
Every expected value is worked out by hand in the comments (docs/metrics.md defines them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def v100_node(gpus: int) -> Node:
    # V100M16 is the reference GPU: a whole-GPU request runs at normalized speed 1.0, so a
    # job of work W alone takes W seconds
    return Node("n0", "V100M16", gpus, 16.0, 64.0, 256.0)


def job(name: str, arrival: float, work: float, censored: bool = False) -> Job:
    extra = {"censored": True} if censored else {}
    return Job(name, JobKind.TRAINING, arrival, work, Request(1, 1.0, 1.0, 2.0), job_type=JT,
               slowdown_bound=1.5, **extra)


def replay(nodes, jobs, **kw):
    from elastico.sim.simulator import simulate

    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), restart_s=0.0)
    pol = make_policy("exclusive", env)
    return simulate(nodes, jobs, pol, restart_s=0.0,
                    activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity, **kw)


# Four whole-GPU jobs on a 2-GPU V100 node, first come first served (exclusive):
#   A arrives 0, work 100: runs 0..100            JCT 100, alone 100, slowdown 1.0
#   B arrives 0, work 300: runs 0..300            JCT 300, alone 300, slowdown 1.0
#   C arrives 0, work 200: waits, runs 100..300   JCT 300, alone 200, slowdown 1.5
#   D arrives 50, work 100: waits, runs 300..400  JCT 350, alone 100, slowdown 3.5
FOUR = [("A", 0.0, 100.0), ("B", 0.0, 300.0), ("C", 0.0, 200.0), ("D", 50.0, 100.0)]


def test_window_throughput_jct_percentiles_slowdown_and_split_by_hand():
    res = replay([v100_node(2)], [job(*j) for j in FOUR], window=(0.0, 200.0))
    m = res.metrics
    by = {r.job_id: r for r in res.records}
    assert [by[n].finish_s for n in "ABCD"] == pytest.approx([100.0, 300.0, 300.0, 400.0])
    # JCT over the jobs that arrived in [0, 200]: all four
    assert m["avg_jct_s"] == pytest.approx((100 + 300 + 300 + 350) / 4)   # 262.5
    assert m["p50_jct_s"] == pytest.approx(300.0)  # sorted 100, 300, 300, 350: (300+300)/2
    # slowdown = JCT / run time alone at the requested shape: 1, 1, 1.5, 3.5
    assert m["avg_slowdown"] == pytest.approx((1 + 1 + 1.5 + 3.5) / 4)    # 1.75
    assert m["p50_slowdown"] == pytest.approx((1.0 + 1.5) / 2)            # 1.25
    # short = work <= median work (median of 100, 300, 200, 100 = 150): A, D; long: B, C
    assert m["avg_jct_short_s"] == pytest.approx((100 + 350) / 2)
    assert m["avg_jct_long_s"] == pytest.approx((300 + 300) / 2)
    assert (m["jobs_in_jct"], m["jobs_in_jct_short"]) == (4, 2)  # A, B, C, D; A, D
    # throughput in the window [0, 200]: only A finished inside it -> 1 job / (200/3600 h)
    assert m["jobs_per_hour"] == pytest.approx(1 / (200 / 3600))            # 18 jobs/h
    # work in the window: both GPUs run a whole-GPU job at speed 1 for 200 s -> 400
    # requested GPU-seconds in 200 s = 2.0 GPU-hours per hour
    assert m["work_per_hour"] == pytest.approx(2.0)
    assert m["window_s"] == pytest.approx(200.0)
    # the makespan ratio of the old definition would have said 4 jobs / (400/3600 h) = 36
    assert m["jobs_per_hour"] != pytest.approx(4 / (400 / 3600))


def test_throughput_is_not_a_makespan_ratio():
    # the same four jobs with the trace's own arrivals: the window is the arrival window
    # [0, 50], in which no job finishes (A finishes at 100): 0 jobs/h, while both GPUs work
    # the whole 50 s (2.0 GPU-hours per hour).  The makespan ratio said 4 / (400/3600) = 36.
    m = replay([v100_node(2)], [job(*j) for j in FOUR]).metrics
    assert m["jobs_per_hour"] == pytest.approx(0.0)
    assert m.get("work_per_hour") == pytest.approx(2.0)


def test_warm_up_is_excluded_from_jct():
    # window (20, 200]: A, B, C arrived at 0, inside the warm-up; only D (JCT 350) counts
    m = replay([v100_node(2)], [job(*j) for j in FOUR], window=(20.0, 200.0)).metrics
    assert m["avg_jct_s"] == pytest.approx(350.0)
    assert m["p50_jct_s"] == pytest.approx(350.0)
    assert m["avg_slowdown"] == pytest.approx(3.5)
    # A's completion at t = 100 is inside (20, 200]: 1 job in 180 s
    assert m["jobs_per_hour"] == pytest.approx(3600 / 180)
    # D alone is the window's median work (100), so short: no long job, and the long
    # statistics' 0 is no value -- elastico simulate shows it as NaN ("-", null in --json)
    assert (m["jobs_in_jct"], m["jobs_in_jct_short"], m["avg_jct_long_s"]) == (1, 1, 0.0)
    from elastico.cli.simulate import without_empty_statistics

    shown = without_empty_statistics(m)
    assert math.isnan(shown["avg_jct_long_s"]) and math.isnan(shown["p50_slowdown_long"])
    assert shown["avg_jct_short_s"] == pytest.approx(350.0) == shown["avg_jct_s"]
    assert shown["makespan_s"] == m["makespan_s"] == pytest.approx(400.0)


def test_no_job_in_the_window_finished_is_no_value_not_zero():
    # window (60, 200]: no job arrives in it (D at 50), so the JCT statistics are over no job
    # (the simulator's 0); A..D all finish, so the makespan (0..400) stands
    m = replay([v100_node(2)], [job(*j) for j in FOUR], window=(60.0, 200.0)).metrics
    assert (m["jobs_in_jct"], m["avg_jct_s"], m["avg_slowdown"]) == (0, 0.0, 0.0)
    from elastico.cli.simulate import without_empty_statistics

    shown = without_empty_statistics(m)
    for k in ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown",
              "p50_slowdown", "p95_slowdown", "p99_slowdown", "avg_jct_short_s",
              "avg_jct_long_s", "p50_slowdown_short", "p50_slowdown_long"):
        assert math.isnan(shown[k]), k
    assert shown["makespan_s"] == pytest.approx(400.0) and shown["jobs_completed"] == 4
    # a run where no batch job finished has no makespan either
    assert math.isnan(without_empty_statistics({**m, "jobs_completed": 0})["makespan_s"])


def test_censored_jobs_are_replayed_but_kept_out_of_jct_and_counted_apart():
    # C's trace lifetime is cut off (a Running pod): it still occupies a GPU 100..300 (so D
    # still ends at 400), but JCT statistics are over A, B, D: 100, 300, 350
    jobs = [job(n, a, w, censored=(n == "C")) for n, a, w in FOUR]
    res = replay([v100_node(2)], jobs, window=(0.0, 200.0))
    m = res.metrics
    assert {r.job_id: r.finish_s for r in res.records}["D"] == pytest.approx(400.0)
    assert m["avg_jct_s"] == pytest.approx((100 + 300 + 350) / 3)   # 250
    assert m["p50_jct_s"] == pytest.approx(300.0)
    assert m["jobs_censored"] == 1
    assert m["jobs_completed"] == 4  # it did finish: throughput counts it, JCT does not


def test_t_interval_by_hand():
    from elastico.sim.report import t_interval

    # per-seed values 1..5: mean 3, s = sqrt(2.5) = 1.5811, t(0.975, 4) = 2.776
    # half-width 2.776 x 1.5811 / sqrt(5) = 1.9630
    m, lo, hi = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m == pytest.approx(3.0)
    assert lo == pytest.approx(3.0 - 1.9630, abs=1e-3)
    assert hi == pytest.approx(3.0 + 1.9630, abs=1e-3)
    # two seeds: t(0.975, 1) = 12.706; values 10, 20: s = 7.0711, half-width 63.53
    m, lo, hi = t_interval([10.0, 20.0])
    assert (lo, hi) == (pytest.approx(15 - 63.53, abs=0.01), pytest.approx(15 + 63.53, abs=0.01))
    assert t_interval([7.0]) == (7.0, 7.0, 7.0)


def _sweep_run(load: float) -> dict:
    """A D/D/4 queue: one 4-GPU V100 node, whole-GPU jobs of work 100 s arriving every
    100 / (4 load) s.  Capacity 4 jobs per 100 s, so the offered load (requested GPU-seconds
    per second / 4 GPUs) is ``load`` and the backlog is bounded exactly when load <= 1:
    below, a job never waits; above, the queue grows by (load - 1) x 0.04 jobs per second."""
    from elastico.sim.simulator import backlog_bounded
    from elastico.sim.workload import window_demand

    warm, measure, drain = 500.0, 2000.0, 500.0
    gap = 100.0 / (4 * load)
    n = int(math.ceil((warm + measure + drain) / gap))
    jobs = [job(f"j{i}", i * gap, 100.0) for i in range(n)]
    # the demand offered in the window is the load (up to the arrivals' discreteness)
    assert window_demand(jobs, 4, warm, warm + measure) == pytest.approx(load, rel=0.03)
    res = replay([v100_node(4)], jobs, window=(warm, warm + measure),
                 horizon_s=warm + measure + drain)
    m = res.metrics
    return {"cluster": "c", "policy": "exclusive", "load_target": load,
            "backlog_bounded": backlog_bounded(m), "queue_growth": m["queue_growth"]}


def test_load_sweep_finds_the_sustainable_load_known_by_construction():
    from elastico.sim.evaluate import sustainable_loads

    runs = [_sweep_run(x) for x in (0.5, 0.9, 1.2, 1.5)]
    by = {r["load_target"]: r for r in runs}
    assert by[0.5]["queue_growth"] == pytest.approx(0.0, abs=1e-9)
    assert by[0.9]["queue_growth"] == pytest.approx(0.0, abs=1e-9)
    # load 1.2: arrivals every 20.83 s, departures 4 per 100 s: the queue grows by
    # 0.048 - 0.04 = 0.008 jobs/s; the quarter means are 1000 s apart -> ~8 jobs, above the
    # allowed max(1, 0.05 x 48 arrivals in the half window) = 2.4
    assert by[1.2]["queue_growth"] == pytest.approx(8.0, abs=1.0)
    assert [r["backlog_bounded"] for r in runs] == [True, True, False, False]
    assert sustainable_loads(runs) == {("c", "exclusive"): 0.9}
    # below the sweep's range: unbounded at the lowest load -> 0
    assert sustainable_loads([{**by[1.2]}]) == {("c", "exclusive"): 0.0}


def test_horizon_stops_the_replay_and_leaves_jobs_unfinished():
    # one GPU, two jobs of work 100 at 0: the second cannot finish before the horizon 150
    res = replay([v100_node(1)], [job("a", 0.0, 100.0), job("b", 0.0, 100.0)],
                 window=(0.0, 150.0), horizon_s=150.0)
    by = {r.job_id: r for r in res.records}
    assert by["a"].status == "finished" and by["b"].status == "unfinished"
    assert by["b"].reason == "horizon"
    assert res.metrics["avg_jct_s"] == pytest.approx(100.0)
    assert res.metrics["jobs_unfinished"] == 1



# Overrun (docs/metrics.md, "Which jobs count"): one GPU, window [0, 50], horizon 60.
#   a arrives 0,  work 100: runs 0..100 -- in the window, still running at the horizon
#   b arrives 10, work 30:  waits for a, in the window; runs 100..130
#   c arrives 55, work 10:  after the window, before the horizon; waits behind b
#   d arrives 70, work 10:  after the horizon -- never arrives once the horizon is passed
OVERRUN = [("a", 0.0, 100.0), ("b", 10.0, 30.0), ("c", 55.0, 10.0), ("d", 70.0, 10.0)]


def test_overrun_runs_the_window_jobs_to_completion_and_stops_there():
    res = replay([v100_node(1)], [job(*j) for j in OVERRUN], window=(0.0, 50.0),
                 horizon_s=60.0, overrun_s=1000.0)
    by = {r.job_id: r for r in res.records}
    assert by["a"].finish_s == pytest.approx(100.0) and by["b"].finish_s == pytest.approx(130.0)
    # the replay stops when b, the window's last job, is done: c (queued, not a window job)
    # did not finish, d never arrived
    assert (by["c"].status, by["c"].reason) == ("unfinished", "horizon")
    assert by["d"].status == "pending" and by["d"].first_start_s is None
    m = res.metrics
    assert m["avg_jct_s"] == pytest.approx((100.0 + 120.0) / 2)  # b: 130 - 10
    assert m["jobs_in_jct"] == 2 and m["jobs_window_unfinished"] == 0
    # the windowed rows do not move: the window is [0, 50] whatever the replay's end
    assert m["window_s"] == pytest.approx(50.0)


def test_overrun_stops_at_its_cap_and_counts_the_window_jobs_it_misses():
    # cap 60 + 50 = 110: a finishes at 100, b (runs 100..130) does not
    res = replay([v100_node(1)], [job(*j) for j in OVERRUN], window=(0.0, 50.0),
                 horizon_s=60.0, overrun_s=50.0)
    by = {r.job_id: r for r in res.records}
    assert by["a"].status == "finished"
    assert (by["b"].status, by["b"].reason) == ("unfinished", "horizon")
    assert by["b"].progress == pytest.approx(10.0)  # ran 100..110
    assert res.metrics["jobs_window_unfinished"] == 1 and res.metrics["jobs_in_jct"] == 1
    # without overrun the replay stops at the horizon: both window jobs are missed
    base = replay([v100_node(1)], [job(*j) for j in OVERRUN], window=(0.0, 50.0),
                  horizon_s=60.0)
    assert base.metrics["jobs_window_unfinished"] == 2 and base.metrics["jobs_in_jct"] == 0


@pytest.mark.parametrize("kw, match", [
    ({"window": (0.0, 50.0), "horizon_s": 60.0, "overrun_s": -1.0}, "overrun_s"),
    ({"window": (0.0, 50.0), "horizon_s": 60.0, "overrun_s": math.nan}, "overrun_s"),
    ({"window": (0.0, 50.0), "overrun_s": 10.0}, "needs window and horizon_s"),
    ({"horizon_s": 60.0, "overrun_s": 10.0}, "needs window and horizon_s"),
])
def test_overrun_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        replay([v100_node(1)], [job(*j) for j in OVERRUN], **kw)

def test_continuous_arrivals_offer_the_load_in_the_window_and_span_the_horizon():
    from elastico import trace
    from elastico.sim import workload

    pods = trace.read_pods()
    # the batch durations of the bundled trace (BE GPU pods that ran): p90 7,339.8 s and p95
    # 17,219.25 s (numpy linear interpolation over 2,510 pods; docs/model.md)
    d = workload.batch_durations(pods)
    assert d.size == 2510
    assert float(np.quantile(d, 0.9)) == pytest.approx(7339.8, abs=0.5)
    w = workload.default_window(pods, 0.9)
    assert (w.warmup_s, w.measure_s, w.drain_s) == (
        pytest.approx(7339.8, abs=0.5), pytest.approx(14679.6, abs=1), pytest.approx(7339.8, abs=0.5))
    nodes = trace.sub_cluster(trace.read_nodes(), 64)
    wl = workload.build_continuous_workload(pods, nodes, seed=0, load=0.5, model=MODEL, window=w)
    arr = np.array([j.arrival_s for j in wl.jobs])
    assert arr.min() >= 0 and arr.max() < w.horizon
    # arrivals keep coming through the drain (not a burst followed by an empty drain)
    assert (arr > w.hi).sum() > 0 and (arr < w.lo).sum() > 0
    # the demand offered in the window, recomputed here: requested GPU-seconds inside
    # [lo, hi) of each job run from its arrival at its requested speed, / (64 x window)
    g = np.array([j.request.gpus_total for j in wl.jobs])
    wk = np.array([j.work for j in wl.jobs])
    inside = np.clip(np.minimum(arr + wk, w.hi) - np.maximum(arr, w.lo), 0, None)
    assert float((g * inside).sum() / (64 * w.measure_s)) == pytest.approx(0.5, rel=1e-6)
    assert wl.offered_load == pytest.approx(0.5, rel=1e-6)
    # censored = the pod was still Running at the end of the observation
    by_name = {p.name: p for p in pods}
    for j in wl.jobs:
        assert j.censored == (by_name[j.id.rsplit("#", 1)[0]].phase == "Running")
    assert len({j.id for j in wl.jobs}) == len(wl.jobs)


def test_trace_workload_marks_running_pods_censored():
    from elastico import trace
    from elastico.sim import workload

    pods = trace.read_pods()
    nodes = trace.sub_cluster(trace.read_nodes(), 64)
    wl = workload.build_workload(pods, nodes, seed=0, load=None, model=MODEL, jobs=128)
    by_name = {p.name: p for p in pods}
    flags = [j.censored for j in wl.jobs]
    assert flags == [by_name[j.id].phase == "Running" for j in wl.jobs]
    assert any(flags) and not all(flags)


def test_evaluate_refuses_a_bad_sweep_load_naming_the_flag():
    import argparse

    from elastico.errors import InvalidArgument
    from elastico.sim.evaluate import Settings
    from elastico.cli.evaluate import parse_sweep

    s = Settings(arrivals="continuous")
    args = argparse.Namespace(sweep_loads="0.5,-1", sweep_seeds="0", sweep_gpus="64")
    with pytest.raises(InvalidArgument) as e:
        parse_sweep(args, s)
    assert e.value.field == "--sweep-loads" and "(0, 10]" in e.value.allowed
    args = argparse.Namespace(sweep_loads="1,0.5", sweep_seeds="0,1", sweep_gpus="64")
    assert parse_sweep(args, s, [64, 512]) == ([0.5, 1.0], [0, 1], [64])
    with pytest.raises(InvalidArgument) as e:
        parse_sweep(args, s, [512])
    assert e.value.field == "--sweep-gpus" and e.value.value == 64
