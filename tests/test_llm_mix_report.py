"""Issue 24's evaluation pieces: the llm-mix report beside the openb one (rendered from a tiny
synthetic results set), the ``workload`` key, the 95 % CI of paired differences against a
hand-computed value, the shadow-price time series and GPU-seconds per pool recorded from the
rounds, the SM-activity series, training jobs' time past their bound, and ``elastico
evaluate``'s default plan covering both workloads."""

from __future__ import annotations

import argparse
import json
import math
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from elastico.sim.evaluate import RoundRecorder, RunOutput
from elastico.sim.report import (EVALUATION_FILES, PLOTS, llm_goal_check, paired_difference,
                                 paired_ratio, write_evaluation)
from elastico.sim.simulator import JobRecord, bound_time_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T975_4 = 2.776  # Student t(0.975, 4): any table (NIST/SEMATECH e-Handbook 1.3.6.7.2)


def _run(policy, seed, jct, p50=None, sm=0.3, workload="llm-mix", cluster="a100h100-64", **kw):
    r = {"workload": workload, "cluster": cluster, "gpus": 64, "policy": policy, "seed": seed,
         "load": 0.5, "jobs": 10, "kinds": {"training": 7, "inference": 3},
         "avg_jct_s": jct, "p50_jct_s": (None if jct is None else jct / 2) if p50 is None else p50,
         "sm_activity": sm,
         "dcgm_sm_active": sm, "gpu_utilization": sm, "jobs_per_hour": 10.0,
         "service_bound_violations": 0, "batch_bound_violations": 0,
         "bound_violation_time_frac": 0.0, "bound_violation_time_frac_max": 0.0,
         "bound_violation_jobs_5pct": 0, "sustainable_load": None}
    r.update(kw)
    return r


# ---- the CI of a paired difference, against a hand computation ---------------------------------

ELASTICO = [100.0, 110.0, 120.0, 130.0, 140.0]
ABLATION = [130.0, 125.0, 150.0, 150.0, 165.0]   # differences 30, 15, 30, 20, 25


def test_paired_difference_ci_matches_a_hand_computation():
    runs = ([_run("elastico", s, v) for s, v in enumerate(ELASTICO)]
            + [_run("elastico-no-esp", s, v) for s, v in enumerate(ABLATION)])
    d = paired_difference(runs, "a100h100-64", "elastico-no-esp", "elastico", "avg_jct_s")
    # mean 24; deviations 6, -9, 6, -4, 1: s^2 = 170 / 4 = 42.5; half-width
    # 2.776 x sqrt(42.5) / sqrt(5) = 8.0934
    half = T975_4 * math.sqrt(42.5) / math.sqrt(5)
    assert d["mean"] == pytest.approx(24.0)
    assert d["low"] == pytest.approx(24.0 - half) and d["high"] == pytest.approx(24.0 + half)
    assert d["low"] == pytest.approx(15.9066, abs=1e-3)
    assert d["relative"] == pytest.approx(24.0 / 120.0)
    assert d["seeds"] == [0, 1, 2, 3, 4] and d["diffs"] == [30.0, 15.0, 30.0, 20.0, 25.0]
    # the goal row reads the CI: it excludes 0 here
    row = next(r for r in llm_goal_check(
        runs + [_run("exclusive", s, 3 * v) for s, v in enumerate(ELASTICO)], "a100h100-64")
        if r["goal"].startswith("elastico-no-esp measurably worse"))
    assert row["met"] is True and "+24 [+16, +32]" in row["measured"]


def test_a_paired_difference_whose_ci_spans_zero_is_not_measurably_worse():
    # differences +50, -40, +10: mean 6.67, the interval spans 0
    runs = ([_run("elastico", s, 100.0) for s in range(3)]
            + [_run("elastico-no-iac", s, v) for s, v in enumerate((150.0, 60.0, 110.0))]
            + [_run("exclusive", s, 300.0) for s in range(3)])
    d = paired_difference(runs, "a100h100-64", "elastico-no-iac", "elastico", "avg_jct_s")
    assert d["mean"] == pytest.approx(20.0 / 3) and d["low"] < 0 < d["high"]
    row = next(r for r in llm_goal_check(runs, "a100h100-64")
               if r["goal"].startswith("elastico-no-iac"))
    assert row["met"] is False
    # a seed only one of the two ran is not paired
    runs.append(_run("elastico-no-iac", 7, 1e6))
    assert paired_difference(runs, "a100h100-64", "elastico-no-iac", "elastico",
                             "avg_jct_s")["seeds"] == [0, 1, 2]


def test_an_ablation_with_more_training_jobs_past_bound_is_measurably_worse():
    # the same JCT spread as above (CI spans 0), but 30, 25, 35 training jobs > 5 % past
    # their bound against elastico's 0: differences mean 30, s = 5, half-width
    # t(0.975, 2) = 4.303 x 5 / sqrt(3) = 12.42 -> [+17.6, +42.4], above 0
    runs = ([_run("elastico", s, 100.0) for s in range(3)]
            + [_run("elastico-no-iac", s, v, bound_violation_jobs_5pct=b)
               for s, (v, b) in enumerate(((150.0, 30), (60.0, 25), (110.0, 35)))]
            + [_run("exclusive", s, 300.0) for s in range(3)])
    row = next(r for r in llm_goal_check(runs, "a100h100-64")
               if r["goal"].startswith("elastico-no-iac"))
    assert row["met"] is True
    assert "jobs past bound +30.0 [+17.6, +42.4]" in row["measured"]
    # fewer violations than elastico (a negative difference) is not "worse"
    for r in runs:
        if r["policy"] == "elastico":
            r["bound_violation_jobs_5pct"] = 60
    row = next(r for r in llm_goal_check(runs, "a100h100-64")
               if r["goal"].startswith("elastico-no-iac"))
    assert row["met"] is False


def test_paired_ratio_and_the_jct_goal_rows():
    runs = ([_run("exclusive", s, v) for s, v in enumerate((300.0, 400.0, 360.0))]
            + [_run("elastico", s, v) for s, v in enumerate((100.0, 100.0, 120.0))])
    q = paired_ratio(runs, "a100h100-64", "exclusive", "elastico", "avg_jct_s")
    # per seed 3, 4, 3: mean 3.333, s = 0.57735, half 4.303 x 0.57735 / sqrt(3) = 1.4343
    assert q["ratios"] == pytest.approx([3.0, 4.0, 3.0])
    assert q["mean"] == pytest.approx(10 / 3) and q["high"] - q["mean"] == pytest.approx(1.4343,
                                                                                       abs=1e-3)
    assert q["of_means"] == pytest.approx(1060 / 320)
    g = {r["goal"]: r for r in llm_goal_check(runs, "a100h100-64")}
    jct = g["avg JCT, exclusive / elastico (per-seed ratio)"]
    assert jct["met"] is True and jct["confident"] is False  # the CI reaches below 3


def test_sm_goal_reads_the_sweep_at_exclusives_saturation_load():
    runs = [_run("exclusive", 0, 300.0, sustainable_load=0.5),
            _run("elastico", 0, 100.0, sustainable_load=1.5)]
    sweep = [_run("exclusive", 0, None, sm=0.25, load_target=0.5),
             _run("elastico", 0, None, sm=0.50, load_target=0.5),
             _run("elastico", 0, None, sm=0.70, load_target=1.5)]
    g = {r["goal"]: r for r in llm_goal_check(runs, "a100h100-64", sweep)}
    assert g["max sustainable load, elastico / exclusive"]["measured"].startswith("3.00x")
    sm = next(v for k, v in g.items() if k.startswith("SM activity of elastico"))
    assert "(0.5)" in next(k for k in g if k.startswith("SM activity of elastico"))
    assert sm["measured"] == "50.0%" and sm["met"] is True
    ratio = g["SM activity, elastico / exclusive, at that load"]
    assert ratio["measured"] == "2.00x" and ratio["met"] is True


# ---- the report, rendered from a tiny synthetic results set ------------------------------------

def _out(run, n=20):
    t = np.linspace(0.0, 7200.0, n).tolist()
    series = {"t": t, "utilization": [0.3] * n, "allocation": [0.4] * n, "queue": [1.0] * n,
              "window_t": t, "sm_activity": [run.get("sm_activity") or 0.0] * n}
    if run["policy"] == "elastico":
        series["prices"] = {"gpu:A100-80GB": [1e-5] * n, "gpumem:A100-80GB": [0.0] * n,
                            "cpu": [0.0] * n}
    return RunOutput(run, [100.0, 200.0, 400.0], series, [1.0, 1.2, 2.0])


def _synthetic():
    llm, openb = [], []
    for s in range(5):
        for pol, jct, sm in (("exclusive", 900.0, 0.25), ("elastico", 300.0 + 10 * s, 0.45),
                             ("elastico-no-esp", 360.0 + 5 * s, 0.40), ("gavel", 700.0, 0.2)):
            r = _run(pol, s, jct, sm=sm, sustainable_load={"exclusive": 0.5}.get(pol, 1.0),
                     evictions=3, shrinks=1, wasted_gpu_s=50.0,
                     mix_window={"inference-llm": {"finished": 4, "avg_jct_s": jct},
                                 "training-llm": {"finished": 1, "avg_jct_s": jct}},
                     gpu_seconds={"inference-llm": {"A100-80GB": 30.0, "H100-80GB MIG": 10.0}},
                     prices_mean={"gpu:A100-80GB": 1e-5, "gpumem:A100-80GB": 0.0}
                     if pol == "elastico" else None)
            llm.append(_out(r))
        for pol in ("exclusive", "elastico"):
            openb.append(_out(_run(pol, s, 500.0, workload="openb", cluster="trace-64")))
    sens = [dict(_run(p, s, j), sensitivity={"parameter": "contention", "value": v})
            for v in ("low", "high") for s in range(3)
            for p, j in (("exclusive", 900.0), ("elastico", 300.0))]
    sweep = [_run(p, 0, None, sm=sm, load_target=0.5, backlog_bounded=True, queue_growth=0.0)
             for p, sm in (("exclusive", 0.3), ("elastico", 0.55))]
    return llm, openb, sens, sweep


def test_both_reports_render_with_every_section_and_plot(tmp_path):
    llm, openb, sens, sweep = _synthetic()
    paths = write_evaluation([
        {"workload": "openb", "outs": openb, "meta": {"settings": {"seeds": "0-4"}}},
        {"workload": "llm-mix", "outs": llm, "meta": {"settings": {"seeds": "0-4"}},
         "sweep": sweep, "sensitivity": sens}], tmp_path)
    assert {str(p.relative_to(tmp_path)) for p in paths} == set(EVALUATION_FILES)
    for sub in ("", "llm-mix/"):
        for name in PLOTS:
            data = (tmp_path / f"{sub}{name}").read_bytes()
            assert data[:8] == PNG_MAGIC and data[-8:-4] == b"IEND"
            w, h = struct.unpack(">II", data[16:24])
            assert w > 100 and h > 100
    doc = json.loads((tmp_path / "results.json").read_text())
    assert set(doc) == {"runs", "load_sweep", "sensitivity"}
    assert {r["workload"] for r in doc["runs"]} == {"openb", "llm-mix"}
    for r in doc["runs"]:
        for key in ("workload", "cluster", "gpus", "policy", "seed", "avg_jct_s", "p50_jct_s",
                    "sustainable_load", "sm_activity", "gpu_utilization",
                    "bound_violation_time_frac"):
            assert key in r, key
    assert len(doc["sensitivity"]) == 12
    md = (tmp_path / "llm-mix" / "report.md").read_text()
    assert md.startswith("# ElastiCo evaluation: llm-mix")
    for words in ("Goals of issue 24", "Paired differences against full elastico",
                  "Shadow prices", "What the prices steered", "## Sensitivity",
                  "## Load sweep", "](../results.json)", "](../report.md)",
                  "| inference-llm | elastico | 75% | 25% |"):
        assert words in md, words
    for name in PLOTS:
        assert f"]({name})" in md
    top = (tmp_path / "report.md").read_text()
    assert top.startswith("# ElastiCo evaluation: openb") and "](llm-mix/report.md)" in top
    assert "Goals of issue 24" not in top  # the openb report keeps its own goal table


# ---- the run record: prices per round, GPU-seconds per pool ------------------------------------

class _Priced:
    """A policy stand-in: round k returns prices[k] and places job a (1 GPU of A100-80GB) and
    b (a MIG instance, 3/7 of an H100) from round 1 on."""

    name = "fake"
    catalog = None

    def __init__(self):
        self.k = 0

    def __call__(self, inp, state):
        from elastico.placer.round import Decision, RoundResult, Status

        cfg_a = SimpleNamespace(is_wait=False, gpu_model="A100-80GB", mig_profile=None,
                                gpus_total=1.0)
        cfg_b = SimpleNamespace(is_wait=False, gpu_model="H100-80GB", mig_profile="3g.40gb",
                                gpus_total=3 / 7)
        prices = ([2.0, 0.0], [4.0, 1.0], [1.0, 1.0])[self.k]
        dec = {"a": Decision("a", Status.PLACED, cfg_a)}
        dec["b"] = (Decision("b", Status.PLACED, cfg_b) if self.k >= 1
                    else Decision("b", Status.WAITING, None))
        self.k += 1
        return RoundResult(dec, state, pricing=SimpleNamespace(prices=np.array(prices)),
                           resource_names=("gpu:A100-80GB", "gpumem:A100-80GB"))


def test_recorder_keeps_the_price_series_and_gpu_seconds_per_pool():
    from elastico.model import JobKind

    jobs = [SimpleNamespace(job=SimpleNamespace(id=i, kind=k))
            for i, k in (("a", JobKind.TRAINING), ("b", JobKind.INFERENCE))]
    edges = np.array([0.0, 10.0, 20.0])
    rec = RoundRecorder(_Priced(), lambda jid, kind: kind, edges)
    assert rec.name == "fake" and rec.catalog is None  # the policy's attributes
    for now in (0.0, 5.0, 15.0):  # rounds at 0, 5 and 15 s; the window ends at 20 s
        rec(SimpleNamespace(now=now, jobs=jobs), None)
    series = rec.price_series()
    # gpu price: 2 on [0, 5), 4 on [5, 15), 1 on [15, 20): bins (2x5 + 4x5)/10 = 3, (4x5 + 1x5)/10
    assert series["gpu:A100-80GB"] == pytest.approx([3.0, 2.5])
    assert series["gpumem:A100-80GB"] == pytest.approx([0.5, 1.0])
    s = rec.summary()
    assert s["prices_mean"] == pytest.approx({"gpu:A100-80GB": 2.75, "gpumem:A100-80GB": 0.75})
    # a: 1 GPU for 20 s; b: 3/7 GPU from 5 s on (15 s) on the H100's MIG pool
    assert s["gpu_seconds"] == {"training": {"A100-80GB": pytest.approx(20.0)},
                                "inference": {"H100-80GB MIG": pytest.approx(15 * 3 / 7)}}


# ---- training jobs' time past their bound ------------------------------------------------------

def test_bound_time_metrics_by_hand():
    def rec(kind, run, over, bound=1.5):
        r = JobRecord("j", kind, 0.0, 1.0, slowdown_bound=bound)
        r.run_s, r.over_s = run, over
        return r

    recs = [rec("training", 100.0, 10.0), rec("training", 300.0, 6.0),
            rec("training", 0.0, 0.0), rec("inference", 50.0, 50.0), rec("service", 9, 9)]
    m = bound_time_metrics(recs)
    assert m["bound_violation_time_frac"] == pytest.approx(16.0 / 400.0)
    assert m["bound_violation_time_frac_max"] == pytest.approx(0.10)
    assert m["bound_violation_jobs_5pct"] == 1  # 10 % > 5 %; 2 % is not
    assert bound_time_metrics([]) == {"bound_violation_time_frac": 0.0,
                                      "bound_violation_time_frac_max": 0.0,
                                      "bound_violation_jobs_5pct": 0}


def test_a_run_records_prices_sm_series_and_bound_time():
    # one small llm-mix replay: the SM-activity series integrates to the run's SM activity
    # (the series meter changes no metric), elastico's prices are a series over the window
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    st = Settings(workload="llm-mix", arrivals="continuous", load=0.4, assume_profiled=True)
    o = run_one(Task(load_cluster("a100-mig"), 16, "elastico", 0, st))
    r = o.run
    assert r["workload"] == "llm-mix" and r["sm_activity"] == r["dcgm_sm_active"]
    assert np.mean(o.series["sm_activity"]) == pytest.approx(r["sm_activity"], rel=1e-6)
    assert len(o.series["window_t"]) == len(o.series["sm_activity"]) == 200
    assert set(o.series["prices"]) == set(r["prices_mean"]) and "gpu:A100-80GB" in r["prices_mean"]
    assert np.mean(o.series["prices"]["gpu:A100-80GB"]) == pytest.approx(
        r["prices_mean"]["gpu:A100-80GB"], rel=1e-9)
    assert 0.0 <= r["bound_violation_time_frac"] <= r["bound_violation_time_frac_max"] <= 1.0 \
        or r["bound_violation_time_frac_max"] == 0.0
    held = sum(v for by in r["gpu_seconds"].values() for v in by.values())
    # GPU-seconds held in the window are at most the cluster's, and what allocation averages
    assert held == pytest.approx(r["gpu_allocation"] * 16 * r["window_s"], rel=0.02)


# ---- the default plan: both workloads ---------------------------------------------------------

def test_the_default_evaluation_plans_both_workloads(tmp_path):
    from elastico.cli import evaluate as cli

    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    args = p.parse_args(["evaluate", "--out", str(tmp_path / "o")])
    plans = {pl["workload"]: pl for pl in cli.plan(args)}
    assert list(plans) == ["openb", "llm-mix"]
    ob, mix = plans["openb"], plans["llm-mix"]
    assert len(ob["main"]) == 2 * 2 * 8 * 3  # unchanged: trace and a100h100 x 64, 512 x 3 seeds
    assert not ob["sensitivity"]
    n64 = len(cli.LLM_MIX_DEFAULTS["policies"].split(","))
    n512 = len(cli.LLM_MIX_DEFAULTS["large_policies"].split(","))
    assert len(mix["main"]) == (n64 + n512) * 5 and {t.settings.workload for t in mix["main"]} \
        == {"llm-mix"}
    assert {t.policy for t in mix["main"] if t.gpus == 512} == set(
        cli.LLM_MIX_DEFAULTS["large_policies"].split(","))
    assert {t.gpus for t in mix["sweep"]} == {64}
    assert {t.policy for t in mix["sweep"]} == set(cli.LLM_MIX_DEFAULTS["sweep_policies"].split(","))
    assert {t.policy for t in ob["sweep"]} == set(cli.DEFAULT_POLICIES)
    # 3 parameters x 3 values x 2 policies x 3 seeds, the middle value the main runs' own
    assert len(mix["sensitivity"]) == 54
    mains = set(mix["main"])
    assert sum(t in mains for t, _, _ in mix["sensitivity"]) == 3 * 2 * 3
