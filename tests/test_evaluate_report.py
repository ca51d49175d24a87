"""``elastico evaluate``'s runner and report writer on a tiny run: results.json has one object
per (cluster, policy, seed) with the simulate metric keys, the PNGs are real PNG images, and
the markdown holds the table, the goal check and the ablation check."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from elastico.sim.clusters import load_cluster
from elastico.sim.evaluate import RunOutput, Settings, run_all, tasks_for
from elastico.sim.report import (PLOTS, SM_GOAL, SM_RATIO_GOAL, UTIL_GOAL, UTIL_RATIO_GOAL,
                                 ablation_check, goal_check, summarise, write_report)
from elastico.sim.simulator import METRIC_KEYS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluation")
    tasks = tasks_for([load_cluster("trace")], [8], ["exclusive", "elastico", "elastico-no-esp"],
                      [0, 1], Settings(jobs_per_gpu=3))
    outs = run_all(tasks, workers=1)
    paths = write_report(outs, out, {"settings": {"seeds": "0, 1"}})
    return out, outs, paths


def test_results_json_schema(tiny):
    out, outs, _ = tiny
    doc = json.loads((out / "results.json").read_text())
    assert list(doc) == ["runs", "load_sweep"]  # no sweep in this run: an empty list
    assert doc["load_sweep"] == []
    runs = doc["runs"]
    assert len(runs) == 3 * 2
    assert {(r["cluster"], r["policy"], r["seed"]) for r in runs} == {
        ("trace-8", p, s) for p in ("exclusive", "elastico", "elastico-no-esp") for s in (0, 1)}
    for r in runs:
        assert r["gpus"] == 8
        assert set(METRIC_KEYS) <= set(r)
        assert isinstance(r["service_bound_violations"], int)
        assert 0.0 <= r["gpu_utilization"] <= r["gpu_allocation"] + 1e-9 <= 1.0 + 1e-9
        assert r["jobs"] == 24
    # the same workload for every policy of a seed
    for s in (0, 1):
        assert len({(r["jobs"], r["load"]) for r in runs if r["seed"] == s}) == 1


def test_pngs_are_valid(tiny):
    out, _, paths = tiny
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC
        # IHDR: width and height are big-endian uint32 at bytes 16..24
        w, h = struct.unpack(">II", data[16:24])
        assert w > 100 and h > 100
        assert data[-8:-4] == b"IEND"
    assert {p.name for p in paths} == {"results.json", "report.md", *PLOTS}


def test_plots_without_a_finished_job_or_a_series_warn_nothing(tiny, tmp_path):
    # a services-only workload finishes no batch job; a run may have no time series: the
    # panels then say so instead of matplotlib's "No artists with labels" warning
    import dataclasses
    import warnings

    _, outs, _ = tiny
    empty = [dataclasses.replace(o, jct=[], series={}, slowdown=[]) for o in outs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_report(empty, tmp_path, {"settings": {"seeds": "0, 1"}})
    for name in PLOTS:
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


def test_a_failed_write_leaves_the_previous_report_whole(tiny, tmp_path, monkeypatch):
    # files are made in a staging folder and moved into place only when all are made
    import elastico.sim.report as report

    _, outs, _ = tiny
    write_report(outs, tmp_path, {"settings": {"seeds": "0, 1"}})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken(*_):
        raise RuntimeError("disk full while plotting")

    monkeypatch.setattr(report, "_plots", broken)
    with pytest.raises(RuntimeError):
        write_report(outs[:2], tmp_path, {"settings": {"seeds": "0"}})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no staging left


def test_non_finite_numbers_are_json_null(tiny, tmp_path):
    # a workload without an arrival window has load inf and no ceiling: strict JSON, as
    # simulate --json writes them (Python's json wrote Infinity and NaN)
    import dataclasses

    _, outs, _ = tiny
    odd = [dataclasses.replace(outs[0], run={**outs[0].run, "load": math.inf,
                                             "gpu_utilization_ceiling": math.nan})]
    write_report(odd, tmp_path, {"settings": {"seeds": "0"}})

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    doc = json.loads((tmp_path / "results.json").read_text(), parse_constant=refuse)
    assert doc["runs"][0]["load"] is None and doc["runs"][0]["gpu_utilization_ceiling"] is None


def test_markdown_has_table_goals_and_ablations(tiny):
    out, outs, _ = tiny
    md = (out / "report.md").read_text()
    assert "## trace-8" in md
    assert "| exclusive |" in md and "| elastico |" in md and "| elastico-no-esp |" in md
    assert "Goals (the paper's headline claims" in md and "Ablations against full elastico" in md
    # out is outside the checkout: no ../metrics.md link that would lead nowhere
    assert "](../metrics.md)" not in md and "docs/metrics.md (in the ElastiCo repository)" in md
    for png in PLOTS:
        assert f"]({png})" in md


def test_metrics_link_is_relative_to_the_report_folder():
    from elastico.sim.report import _metrics_link

    root = Path(__file__).resolve().parents[1]
    assert _metrics_link(root / "docs" / "evaluation") == "[docs/metrics.md](../metrics.md)"
    assert _metrics_link(root / "out" / "ev") == "[docs/metrics.md](../../docs/metrics.md)"
    assert _metrics_link(root) == "[docs/metrics.md](docs/metrics.md)"


def test_summary_is_mean_and_sample_sd():
    runs = [{"cluster": "c", "policy": "p", "seed": s, **{k: 0.0 for k in METRIC_KEYS},
             "batch_bound_violations": 0, "restarts": 0} for s in (0, 1, 2)]
    for r, v in zip(runs, (1.0, 2.0, 6.0)):
        r["avg_jct_s"] = v
    m, sd = summarise(runs)[("c", "p")]["avg_jct_s"]
    # mean 3; sample variance ((-2)^2 + (-1)^2 + 3^2) / 2 = 7
    assert m == pytest.approx(3.0) and sd == pytest.approx(7 ** 0.5)


def _run(policy, seed, jct, tput, util, sv=0, bv=0):
    return {"cluster": "c", "policy": policy, "seed": seed, "avg_jct_s": jct, "jobs_per_hour": tput,
            "gpu_utilization": util, "service_bound_violations": sv, "batch_bound_violations": bv,
            **{k: 0.0 for k in METRIC_KEYS if k not in ("avg_jct_s", "jobs_per_hour",
                                                        "gpu_utilization",
                                                        "service_bound_violations")},
            "restarts": 0}


def test_goal_check_ratios_of_means():
    runs = [_run("exclusive", 0, 300.0, 10.0, 0.25), _run("exclusive", 1, 500.0, 10.0, 0.25),
            _run("elastico", 0, 100.0, 25.0, 0.50), _run("elastico", 1, 100.0, 15.0, 0.40, sv=1)]
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    # JCT: mean 400 / mean 100 = 4x; throughput 20 / 10 = 2x; util 0.45, 0.45 / 0.25 = 1.8x
    assert g["avg JCT, exclusive / elastico"]["measured"] == pytest.approx(4.0)
    assert g["avg JCT, exclusive / elastico"]["met"]
    tp = "throughput (jobs/h in the window), elastico / exclusive"
    assert g[tp]["measured"] == pytest.approx(2.0) and not g[tp]["met"]
    assert not any("sustainable" in k for k in g)          # no sweep ran: no such row
    assert g[UTIL_GOAL]["measured"] == pytest.approx(0.45)
    assert not g[UTIL_GOAL]["met"]
    assert g[UTIL_RATIO_GOAL]["measured"] == pytest.approx(1.8)
    sv = [row for row in g.values() if "service jobs" in row["goal"]][0]
    assert sv["measured"] == 1 and not sv["met"]


def test_goal_check_reads_the_utilization_goals_as_dcgm_sm_activity_too():
    runs = [_run("exclusive", 0, 300.0, 10.0, 0.25), _run("exclusive", 1, 500.0, 10.0, 0.25),
            _run("elastico", 0, 100.0, 25.0, 0.50), _run("elastico", 1, 100.0, 15.0, 0.40)]
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    assert SM_GOAL not in g and SM_RATIO_GOAL not in g  # runs without DCGM metrics
    for r, sm in zip(runs, (0.30, 0.34, 0.40, 0.54)):
        r["dcgm_sm_active"] = sm
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    # elastico (0.40 + 0.54) / 2 = 0.47 >= 46 %; over exclusive's 0.32: 1.47x < 1.8x
    assert g[SM_GOAL]["measured"] == pytest.approx(0.47) and g[SM_GOAL]["met"]
    assert g[SM_RATIO_GOAL]["measured"] == pytest.approx(0.47 / 0.32)
    assert not g[SM_RATIO_GOAL]["met"] and g[SM_RATIO_GOAL]["ceiling"] is None
    # the older metric's rows are unchanged by it
    assert g[UTIL_GOAL]["measured"] == pytest.approx(0.45)


def test_goal_check_compares_sustainable_loads_where_the_sweep_ran():
    runs = [_run("exclusive", 0, 300.0, 10.0, 0.25), _run("elastico", 0, 100.0, 10.0, 0.25)]
    runs[0]["sustainable_load"], runs[1]["sustainable_load"] = 0.5, 1.0
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    row = g["throughput (max sustainable load), elastico / exclusive"]
    assert row["measured"] == pytest.approx(2.0) and not row["met"]     # 1.0 / 0.5 < 2.1
    runs[1]["sustainable_load"] = 1.25
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    assert g["throughput (max sustainable load), elastico / exclusive"]["met"]  # 2.5x


def test_goal_check_carries_the_utilization_ceiling():
    runs = [_run("exclusive", 0, 300.0, 10.0, 0.25), _run("exclusive", 1, 500.0, 10.0, 0.25),
            _run("elastico", 0, 100.0, 25.0, 0.50), _run("elastico", 1, 100.0, 15.0, 0.40)]
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    assert g[UTIL_GOAL]["ceiling"] is None  # runs without one
    for r, c in zip(runs, (0.41, 0.43, 0.40, 0.44)):
        r["gpu_utilization_ceiling"] = c
    g = {row["goal"]: row for row in goal_check(runs, "c")}
    # elastico's seeds: (0.40 + 0.44) / 2 = 0.42; over exclusive's mean 0.25: 1.68x
    assert g[UTIL_GOAL]["ceiling"] == pytest.approx(0.42)
    assert g[UTIL_RATIO_GOAL]["ceiling"] == pytest.approx(1.68)
    assert g["avg JCT, exclusive / elastico"]["ceiling"] is None


def test_results_carry_a_ceiling_no_policy_exceeds(tiny):
    out, _, _ = tiny
    runs = json.loads((out / "results.json").read_text())["runs"]
    for s in (0, 1):
        # elastico's run carries it (the goal check reads it there), the others null
        (c,) = {r["gpu_utilization_ceiling"] for r in runs
                if r["seed"] == s and r["policy"] == "elastico"}
        assert {r["gpu_utilization_ceiling"] for r in runs
                if r["seed"] == s and r["policy"] != "elastico"} == {None}
        assert all(r["gpu_utilization"] <= c + 1e-9 for r in runs if r["seed"] == s)
    assert "ceiling (any policy)" in (out / "report.md").read_text()


def test_ablation_check_needs_every_seed_and_a_measurable_change():
    runs = [_run("elastico", 0, 100.0, 20.0, 0.4), _run("elastico", 1, 100.0, 20.0, 0.4),
            # worse JCT on both seeds, +30 % on average
            _run("elastico-no-rst", 0, 150.0, 20.0, 0.4), _run("elastico-no-rst", 1, 110.0, 20.0, 0.4),
            # worse on one seed only, better on the other: not measurably worse
            _run("elastico-no-esp", 0, 120.0, 20.0, 0.4), _run("elastico-no-esp", 1, 90.0, 22.0, 0.4),
            # worse on both seeds but by 0.5 % on average (< 2 %), yet more bound violations
            # on both seeds: measurably worse by the violations
            _run("elastico-no-iac", 0, 100.5, 20.0, 0.4, bv=3),
            _run("elastico-no-iac", 1, 100.5, 20.0, 0.4, bv=1)]
    ab = {a["ablation"]: a for a in ablation_check(runs, "c")}
    assert ab["elastico-no-rst"]["worse"] and ab["elastico-no-rst"]["jct_worse_seeds"] == 2
    assert ab["elastico-no-rst"]["avg_jct_change"] == pytest.approx((0.5 + 0.1) / 2)
    assert not ab["elastico-no-esp"]["worse"]
    assert ab["elastico-no-iac"]["worse"] and ab["elastico-no-iac"]["extra_bound_violations"] == 4
    runs[-1]["batch_bound_violations"] = 0  # now more violations on one seed only
    ab = {a["ablation"]: a for a in ablation_check(runs, "c")}
    assert not ab["elastico-no-iac"]["worse"]


def test_report_shows_dcgm_metrics_and_each_seeds_sustainable_load(tiny, tmp_path):
    import copy

    _, outs, _ = tiny
    outs = copy.deepcopy(outs)
    for o in outs:  # as elastico evaluate sets them from a sweep on seeds 0 and 1
        o.run["sustainable_load"] = 0.5
        o.run["sustainable_load_by_seed"] = {"0": 0.75, "1": 0.5}
    write_report(outs, tmp_path, {"settings": {"seeds": "0, 1"}})
    text = (tmp_path / "report.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| policy | avg JCT"))
    # the older metric labelled as not DCGM's, DCGM's two beside it
    assert ("GPU util. (busy compute, not DCGM's) | SM active (DCGM) | GPU util. (DCGM)"
            in head)
    # every seed's value (the least of the seeds'), each seed's, their median
    assert "| 0.5 (per seed 0: 0.75, 1: 0.5; median 0.625) |" in text
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert all(r["sustainable_load_by_seed"] == {"0": 0.75, "1": 0.5} for r in runs)
