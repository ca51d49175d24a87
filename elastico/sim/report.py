"""The evaluation report: ``results.json``, ``report.md`` and PNG plots from evaluation runs.

Who calls it: :mod:`elastico.cli.evaluate` (and tests).  Whom it calls: numpy, matplotlib
(Agg backend: no display needed).  It runs nothing: its input is the list of
:class:`elastico.sim.evaluate.RunOutput` the runner returned.  Every number it prints is defined
in docs/metrics.md ("elastico evaluate").

Files written into ``out``:

* ``results.json`` -- ``{"runs": [...]}``, one object per (cluster, policy, seed): ``cluster``,
  ``gpus``, ``policy``, ``seed``, ``load``, ``jobs``, ``kinds``, every simulate metric key,
  ``service_bound_violations``, ``truth_pairs_unmeasured``, ``gpu_utilization_ceiling``
  (:mod:`elastico.sim.ceiling`), ``wall_s``;
* ``report.md`` -- per cluster a table of mean ± standard deviation over seeds per policy,
  the goal check (512-GPU clusters against ``exclusive``) and the ablation check;
* ``jct_cdf.png``, ``gpu_utilization.png``, ``queue_length.png`` -- one panel per cluster.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["write_report", "write_evaluation", "paired_difference", "paired_ratio",
           "llm_goal_check", "LLM_GOALS", "REPORT_DIRS", "EVALUATION_FILES", "summarise", "goal_check", "ablation_check", "TABLE", "PLOTS",
           "GOALS", "UTIL_GOAL", "UTIL_RATIO_GOAL", "SM_GOAL", "SM_RATIO_GOAL"]

#: (metric key, column label, format, lower is better)
TABLE = (
    ("avg_jct_s", "avg JCT (s)", "{:,.0f}", True),
    ("p50_jct_s", "p50 JCT (s)", "{:,.0f}", True),
    ("p95_jct_s", "p95 JCT (s)", "{:,.0f}", True),
    ("p99_jct_s", "p99 JCT (s)", "{:,.0f}", True),
    ("avg_queue_s", "queueing (s)", "{:,.0f}", True),
    ("makespan_s", "makespan (s)", "{:,.0f}", True),
    ("jobs_per_hour", "throughput in window (jobs/h)", "{:,.2f}", False),
    ("work_per_hour", "work in window (GPU-h/h)", "{:,.2f}", False),
    ("p50_slowdown", "p50 slowdown", "{:,.2f}", True),
    ("jobs_censored", "censored jobs", "{:,.1f}", True),
    # the window's jobs the JCT rows miss (docs/metrics.md): 0 = every policy over the same jobs
    ("jobs_window_unfinished", "window jobs unfinished", "{:,.1f}", True),
    ("gpu_allocation", "GPU alloc.", "{:.1%}", False),
    ("gpu_utilization", "GPU util. (busy compute, not DCGM's)", "{:.1%}", False),
    ("dcgm_sm_active", "SM active (DCGM)", "{:.1%}", False),
    ("dcgm_gpu_util", "GPU util. (DCGM)", "{:.1%}", False),
    ("service_bound_violations", "service bound viol.", "{:,.1f}", True),
    ("batch_bound_violations", "batch bound viol.", "{:,.1f}", True),
    ("restarts", "reconfig.", "{:,.0f}", True),
    ("round_ms_p50", "round p50 (ms)", "{:,.1f}", True),
    ("round_ms_p99", "round p99 (ms)", "{:,.1f}", True),
)
PLOTS = ("jct_cdf.png", "slowdown_cdf.png", "gpu_utilization.png", "sm_activity.png",
         "queue_length.png", "load_sweep.png", "prices.png")
#: the folder of each workload's report inside the evaluation's folder (results.json, with
#: every workload's runs, is at its top): the openb report stays where it always was
REPORT_DIRS = {"openb": "", "llm-mix": "llm-mix"}
#: the titles of the reports, one per workload
TITLES = {"openb": "ElastiCo evaluation: openb, the Alibaba GPU production trace",
          "llm-mix": "ElastiCo evaluation: llm-mix, training and bursty offline LLM inference"}
#: the per-cluster table with 95 % confidence intervals over seeds: (key, label, format)
CI_TABLE = (
    ("avg_jct_s", "mean JCT (s)", "{:,.0f}"),
    ("p50_jct_s", "median JCT (s)", "{:,.0f}"),
    ("p95_jct_s", "p95 JCT (s)", "{:,.0f}"),
    ("p99_jct_s", "p99 JCT (s)", "{:,.0f}"),
    ("avg_slowdown", "mean slowdown", "{:,.2f}"),
    ("p50_slowdown", "median slowdown", "{:,.2f}"),
    ("avg_jct_short_s", "mean JCT short (s)", "{:,.0f}"),
    ("avg_jct_long_s", "mean JCT long (s)", "{:,.0f}"),
    ("jobs_per_hour", "jobs/h in window", "{:,.2f}"),
    ("work_per_hour", "GPU-h/h in window", "{:,.2f}"),
)
#: two-sided 95 % Student t quantiles t(0.975, df) for df = 1..30 (any statistics table,
#: e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2); 1.96 beyond
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
#: Every file :func:`write_report` replaces in its folder.
REPORT_FILES = ("results.json", "report.md") + PLOTS
#: Every file :func:`write_evaluation` replaces in its folder (both workloads' reports).
EVALUATION_FILES = ("results.json",) + tuple(
    (f"{d}/{n}" if d else n) for d in REPORT_DIRS.values() for n in ("report.md",) + PLOTS)
#: the paper's headline claims, checked on the 512-GPU clusters (elastico against exclusive, means over seeds)
GOALS = {"jct_ratio": 3.0, "throughput_ratio": 2.1, "utilization": 0.46,
         "utilization_ratio": 1.8, "service_bound_violations": 0}
#: the goal rows of the older utilization metric (gpu_utilization: busy GPU compute, not
#: what DCGM reports; docs/metrics.md)
UTIL_GOAL = "GPU utilization of elastico (busy compute, not DCGM's)"
UTIL_RATIO_GOAL = "GPU utilization, elastico / exclusive (busy compute, not DCGM's)"
#: the same goals read as DCGM's SM activity (dcgm_sm_active, DCGM_FI_PROF_SM_ACTIVE)
SM_GOAL = "GPU utilization of elastico as DCGM SM activity"
SM_RATIO_GOAL = "GPU utilization, elastico / exclusive, as DCGM SM activity"
ABLATIONS = ("elastico-no-rst", "elastico-no-esp", "elastico-no-iac")
#: smallest mean paired change (2 %) of avg JCT or throughput that counts as measurable
MEASURABLE = 0.02


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % Student t confidence interval of the mean of the per-seed
    ``values`` (mean ± t(0.975, n-1) x s / sqrt(n), s the sample standard deviation);
    ``low = high = mean`` for a single value.  Raises ValueError for no value."""
    a = np.asarray(values, float)
    if a.size == 0:
        raise ValueError("t_interval: no value")
    m = float(a.mean())
    if a.size == 1:
        return m, m, m
    df = a.size - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    h = t * float(a.std(ddof=1)) / math.sqrt(a.size)
    return m, m - h, m + h


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values, float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def summarise(runs: Sequence[dict]) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """``{(cluster, policy): {metric: (mean, sample standard deviation over seeds)}}``."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["cluster"], r["policy"]), []).append(r)
    return {k: {key: _mean_sd([r.get(key, 0.0) for r in rs]) for key, *_ in TABLE}
            | {"seeds": (len(rs), 0.0)} for k, rs in groups.items()}


def _clusters(runs: Sequence[dict]) -> list[str]:
    return list(dict.fromkeys(r["cluster"] for r in runs))


def _policies(runs: Sequence[dict]) -> list[str]:
    return list(dict.fromkeys(r["policy"] for r in runs))


def goal_check(runs: Sequence[dict], cluster: str) -> list[dict] | None:
    """The paper's headline claims (:data:`GOALS`) for ``cluster`` (elastico vs exclusive, ratio of the means over
    seeds); None when either policy is missing.  Each row: goal, target, measured, met, and
    ``ceiling`` for the utilization rows: the mean over elastico's seeds of the runs'
    ``gpu_utilization_ceiling`` (:mod:`elastico.sim.ceiling`; over exclusive's mean utilization
    for the ratio), None when the runs lack it or it is not finite.  Throughput is two rows:
    jobs finished per hour in the measurement window, and -- when the load sweep ran for the
    cluster -- the ratio of the maximum sustainable loads (as coarse as the sweep's grid; at
    the grid's top it is a lower bound).  Utilization is two pairs of rows: ``gpu_utilization``
    (busy GPU compute, not what DCGM reports; the rows :data:`UTIL_GOAL` and
    :data:`UTIL_RATIO_GOAL`, with the ceiling) and ``dcgm_sm_active``
    (DCGM's SM activity, ``DCGM_FI_PROF_SM_ACTIVE``; :data:`SM_GOAL` and
    :data:`SM_RATIO_GOAL`, only when every run of the two policies has it)."""
    s = summarise(runs)
    ex, el = s.get((cluster, "exclusive")), s.get((cluster, "elastico"))
    if ex is None or el is None:
        return None
    m = lambda d, k: d[k][0]  # noqa: E731
    div = lambda a, b: a / b if b else math.inf  # noqa: E731
    ceil = [r.get("gpu_utilization_ceiling") for r in runs
            if r["cluster"] == cluster and r["policy"] == "elastico"]
    ceiling = (float(np.mean(ceil)) if ceil and all(
        isinstance(c, (int, float)) and math.isfinite(c) for c in ceil) else None)
    rows = [  # goal, target, measured, ceiling
        ("avg JCT, exclusive / elastico", GOALS["jct_ratio"],
         div(m(ex, "avg_jct_s"), m(el, "avg_jct_s")), None),
        ("throughput (jobs/h in the window), elastico / exclusive", GOALS["throughput_ratio"],
         div(m(el, "jobs_per_hour"), m(ex, "jobs_per_hour")), None),
        (UTIL_GOAL, GOALS["utilization"], m(el, "gpu_utilization"), ceiling),
        (UTIL_RATIO_GOAL, GOALS["utilization_ratio"],
         div(m(el, "gpu_utilization"), m(ex, "gpu_utilization")),
         div(ceiling, m(ex, "gpu_utilization")) if ceiling is not None else None),
    ]
    if all("dcgm_sm_active" in r for r in runs
           if r["cluster"] == cluster and r["policy"] in ("exclusive", "elastico")):
        # the same targets read as DCGM's SM activity (what a DCGM exporter shows; the
        # ceiling is in gpu_utilization's terms, so none here: docs/metrics.md)
        rows += [(SM_GOAL, GOALS["utilization"], m(el, "dcgm_sm_active"), None),
                 (SM_RATIO_GOAL, GOALS["utilization_ratio"],
                  div(m(el, "dcgm_sm_active"), m(ex, "dcgm_sm_active")), None)]
    # below saturation every policy finishes what arrives, so the windowed ratio is ~1 by
    # construction; the throughput that separates policies is the maximum sustainable load
    # (the load sweep's, where it ran for this cluster: docs/metrics.md)
    sus = {p: {r.get("sustainable_load") for r in runs
               if r["cluster"] == cluster and r["policy"] == p} for p in ("exclusive", "elastico")}
    if all(len(v) == 1 and None not in v for v in sus.values()):
        (a,), (b,) = sus["exclusive"], sus["elastico"]
        if a or b:
            rows.insert(2, ("throughput (max sustainable load), elastico / exclusive",
                            GOALS["throughput_ratio"], div(b, a), None))
    out = [{"goal": g, "target": t, "measured": v, "met": v >= t, "ceiling": c}
           for g, t, v, c in rows]
    viol = sum(r["service_bound_violations"] for r in runs
               if r["cluster"] == cluster and r["policy"] == "elastico")
    out.append({"goal": "service jobs over their slowdown bound (elastico, all seeds)",
                "target": 0, "measured": viol, "met": viol == 0})
    return out


def ablation_check(runs: Sequence[dict], cluster: str) -> list[dict]:
    """Per ablation present: the paired (same seed) relative change against full elastico of
    avg JCT and throughput, the seeds on which it is worse, and whether it is *measurably
    worse*: avg JCT higher on every seed and by :data:`MEASURABLE` or more on average, or
    throughput lower on every seed and by :data:`MEASURABLE` or more on average, or more
    bound violations (service + batch) on every seed."""
    full = {r["seed"]: r for r in runs if r["cluster"] == cluster and r["policy"] == "elastico"}
    out = []
    for name in ABLATIONS:
        ab = {r["seed"]: r for r in runs if r["cluster"] == cluster and r["policy"] == name}
        seeds = sorted(set(ab) & set(full))
        if not seeds:
            continue
        d_jct = [ab[s]["avg_jct_s"] / full[s]["avg_jct_s"] - 1 if full[s]["avg_jct_s"] else 0.0
                 for s in seeds]
        d_tp = [ab[s]["jobs_per_hour"] / full[s]["jobs_per_hour"] - 1
                if full[s]["jobs_per_hour"] else 0.0 for s in seeds]
        viol = [ab[s]["service_bound_violations"] + ab[s]["batch_bound_violations"]
                - full[s]["service_bound_violations"] - full[s]["batch_bound_violations"]
                for s in seeds]
        worse_jct = sum(d > 0 for d in d_jct)
        worse_tp = sum(d < 0 for d in d_tp)
        n = len(seeds)
        worse = ((worse_jct == n and np.mean(d_jct) >= MEASURABLE)
                 or (worse_tp == n and -np.mean(d_tp) >= MEASURABLE)
                 or all(v > 0 for v in viol))
        out.append({"ablation": name, "seeds": len(seeds),
                    "avg_jct_change": float(np.mean(d_jct)), "jct_worse_seeds": worse_jct,
                    "throughput_change": float(np.mean(d_tp)), "throughput_worse_seeds": worse_tp,
                    "extra_bound_violations": int(sum(viol)),
                    "violations_worse_seeds": sum(v > 0 for v in viol),
                    "worse": bool(worse)})
    return out


def _fmt(fmt: str, mean: float, sd: float, n: int) -> str:
    return fmt.format(mean) + (f" ± {fmt.format(sd)}" if n > 1 else "")


def _metrics_link(out: Path | None) -> str:
    """docs/metrics.md as a link relative to the report's folder ``out`` when both are in
    this checkout (the report is read beside the docs); otherwise its repository path as
    text, since a link out of the folder would break once the folder is moved."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    if out is not None and doc.is_file():
        root, folder = doc.parents[1], out.resolve()
        if folder == root or root in folder.parents:
            return f"[docs/metrics.md]({Path(os.path.relpath(doc, folder)).as_posix()})"
    return "docs/metrics.md (in the ElastiCo repository)"


def _workload_of(runs: Sequence[dict]) -> str:
    kinds = {r.get("workload", "openb") for r in runs}
    return "llm-mix" if kinds == {"llm-mix"} else "openb"


def _markdown(runs: Sequence[dict], meta: dict, out: Path | None = None) -> str:
    s = summarise(runs)
    wkl = meta.get("workload") or _workload_of(runs)
    llm = wkl == "llm-mix"
    results = meta.get("results_link", "results.json")
    lines = [f"# {TITLES.get(wkl, 'ElastiCo evaluation')}", ""]
    lines += [meta.get("intro", "").strip(), ""] if meta.get("intro") else []
    lines += ["Settings: " + ", ".join(f"{k} {v}" for k, v in meta.get("settings", {}).items()),
              "", f"Every number is defined in {_metrics_link(out)} (\"elastico "
              "evaluate\"); cells are mean ± sample standard deviation over the seeds; the "
              f"JSON behind them is [results.json]({results}) (runs with `workload` "
              f"`{wkl}`).", ""]
    for cluster in _clusters(runs):
        rs = [r for r in runs if r["cluster"] == cluster]
        r0 = rs[0]
        seeds = sorted({r["seed"] for r in rs})
        kinds = r0.get("kinds", {})
        lines += [f"## {cluster}", "",
                  f"{r0['gpus']} GPUs; {r0['jobs']} jobs per seed "
                  f"({', '.join(f'{v} {k}' for k, v in kinds.items())} for seed {r0['seed']}); "
                  f"offered load {np.mean([r['load'] for r in rs]):.3g}; seeds "
                  f"{', '.join(map(str, seeds))}.", ""]
        head = "| policy | " + " | ".join(lbl for _, lbl, _, _ in TABLE) + " |"
        lines += [head, "|" + "---|" * (len(TABLE) + 1)]
        for pol in _policies(rs):
            d = s[(cluster, pol)]
            n = int(d["seeds"][0])
            lines.append(f"| {pol} | " + " | ".join(_fmt(fmt, *d[k], n) for k, _, fmt, _ in TABLE)
                         + " |")
        lines.append("")
        if llm:
            lines += _llm_goal_lines(runs, cluster, meta.get("sweep") or [])
            lines += _llm_table_lines(rs, cluster)
        g = None if llm else goal_check(runs, cluster)
        if g is not None:
            lines += [f"Goals (the paper's headline claims, set for the 512-GPU clusters; "
                      f"ratio of means over seeds), {cluster}:", "",
                      "| goal | target | measured | met | ceiling (any policy) |",
                      "|---|---|---|---|---|"]
            for row in g:
                t, v = row["target"], row["measured"]
                fmtv = (lambda x: f"{x:.1%}") if "utilization of" in row["goal"] else \
                    (lambda x: f"{x:,.0f}" if isinstance(x, int) else f"{x:.2f}x")
                short = "" if row["met"] else (
                    f" (short by {100 * (t - v):.1f} pp)" if "utilization of" in row["goal"] else
                    f" (short by {(t - v) / t:.0%})" if isinstance(t, float) else "")
                c = row.get("ceiling")
                lines.append(f"| {row['goal']} | {fmtv(t)} | {fmtv(v)} | "
                             f"{'yes' if row['met'] else 'no' + short} | "
                             f"{fmtv(c) if c is not None else '-'} |")
            lines.append("")
            lines += ["Utilization rows: \"GPU utilization\" is the simulator's busy GPU "
                      "compute (gpu_utilization, not what a DCGM exporter reports); \"as DCGM "
                      "SM activity\" is dcgm_sm_active (DCGM_FI_PROF_SM_ACTIVE), the same "
                      "targets read in DCGM's terms (docs/metrics.md).", ""]
            if any(row.get("ceiling") is not None for row in g):
                lines += ["Ceiling: the most GPU utilization any policy choosing among the "
                          "evaluated configurations could reach on these workloads (mean over "
                          "the seeds; in the ratio row divided by exclusive's measured "
                          "utilization).", ""]
            out_of_reach = [row["goal"] for row in g
                            if row.get("ceiling") is not None and row["ceiling"] < row["target"]]
            if out_of_reach:
                lines += ["Out of reach on this workload for any policy that chooses among the "
                          "evaluated configurations (the ceiling, docs/metrics.md, is below the "
                          "target): " + "; ".join(out_of_reach) + ".", ""]
        lines += _ci_lines(rs, cluster)
        if llm:
            lines += _ablation_ci_lines(runs, cluster)
            lines += _steering_lines(runs, cluster)
        ab = [] if llm else ablation_check(runs, cluster)
        if ab:
            lines += [f"Ablations against full elastico (paired by seed), {cluster}:", "",
                      "| ablation | avg JCT change | seeds with higher JCT | throughput change "
                      "| seeds with lower throughput | extra bound violations (seeds with more) "
                      "| measurably worse |", "|---|---|---|---|---|---|---|"]
            for a in ab:
                lines.append(f"| {a['ablation']} | {a['avg_jct_change']:+.1%} | "
                             f"{a['jct_worse_seeds']}/{a['seeds']} | "
                             f"{a['throughput_change']:+.1%} | "
                             f"{a['throughput_worse_seeds']}/{a['seeds']} | "
                             f"{a['extra_bound_violations']:+d} "
                             f"({a['violations_worse_seeds']}/{a['seeds']}) | "
                             f"{'yes' if a['worse'] else 'no'} |")
            lines.append("")
    lines += _sweep_lines(meta.get("sweep") or [])
    lines += _sensitivity_lines(meta.get("sensitivity") or [])
    lines += ["## Plots", "",
              "JCT CDF per policy (batch jobs counted by the JCT metrics: arrived in the "
              "measurement window, finished, not censored; all seeds pooled):", "",
              "![JCT CDF](jct_cdf.png)", "",
              "Slowdown CDF per policy (the same jobs; slowdown = JCT / run time alone at the "
              "requested shape on the best GPU model the job may use):", "",
              "![Slowdown CDF](slowdown_cdf.png)", "",
              f"GPU utilization over time (seed {meta.get('plot_seed', 'first')}; busy GPUs / "
              "cluster GPUs, time-binned):", "", "![GPU utilization](gpu_utilization.png)", "",
              f"SM activity (DCGM's `DCGM_FI_PROF_SM_ACTIVE`, every GPU of the cluster) over "
              f"the measurement window (seed {meta.get('plot_seed', 'first')}; time-binned):",
              "", "![SM activity](sm_activity.png)", "",
              f"Queue length over time (seed {meta.get('plot_seed', 'first')}; arrived jobs not "
              "placed, services included):", "", "![Queue length](queue_length.png)", "",
              "Load sweep: each policy's maximum sustainable load (the highest swept load "
              "with a bounded backlog on every sweep seed; 0 = below the lowest):", "",
              "![Load sweep](load_sweep.png)", "",
              f"Shadow prices over the measurement window (elastico, seed "
              f"{meta.get('plot_seed', 'first')}; utility per GPU of each pool's compute and "
              "per GiB of its memory, log scale, a price of 0 not drawn):", "",
              "![Prices](prices.png)", ""]
    if meta.get("closing"):
        lines += ["## Closing note", "", meta["closing"].strip(), ""]
    return "\n".join(lines)


def _ci_lines(rs: Sequence[dict], cluster: str) -> list[str]:
    """The JCT / slowdown / windowed-throughput table with 95 % t-intervals over the seeds,
    the censored-job count and the sustainable load (docs/metrics.md)."""
    lines = [f"JCT, slowdown and windowed throughput, {cluster}: mean over seeds [95 % "
             "confidence interval, Student t on the per-seed values]; short / long = work at "
             "most / above the median of the window's uncensored batch jobs; censored = batch "
             "jobs whose trace lifetime is cut off (excluded from JCT and slowdown), mean per "
             "seed; sustainable = the highest swept load with a bounded backlog on every "
             "sweep seed, then each seed's own and their median (docs/metrics.md, "
             "\"Sustainable load\"):", "",
             "| policy | " + " | ".join(lbl for _, lbl, _ in CI_TABLE)
             + " | censored | sustainable load |", "|" + "---|" * (len(CI_TABLE) + 3)]
    for pol in _policies(rs):
        prs = [r for r in rs if r["policy"] == pol]
        cells = []
        for key, _, fmt in CI_TABLE:
            m, lo, hi = t_interval([r.get(key, 0.0) for r in prs])
            cells.append(fmt.format(m) + (f" [{fmt.format(lo)}, {fmt.format(hi)}]"
                                          if len(prs) > 1 else ""))
        cens = float(np.mean([r.get("jobs_censored", 0) for r in prs]))
        sus = prs[0].get("sustainable_load")
        cells += [f"{cens:,.1f}", _sustain_cell(sus, prs[0].get("sustainable_load_by_seed"))]
        lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    return lines + [""]


def _load_text(x: float) -> str:
    return f"< {_min_sweep_text()}" if x == 0 else f"{x:g}"


def _sustain_cell(sus: float | None, by_seed: dict | None) -> str:
    """The sustainable-load cell: every seed's value, then per seed (``by_seed``: seed ->
    value, JSON keys) and the median over the seeds when there are several."""
    if sus is None:
        return "-"
    text = _load_text(sus)
    if by_seed and len(by_seed) > 1:
        vals = [float(v) for v in by_seed.values()]
        text += (" (per seed " + ", ".join(f"{k}: {float(v):g}" for k, v in by_seed.items())
                 + f"; median {float(np.median(vals)):g})")
    return text


def _min_sweep_text() -> str:
    from elastico.sim.evaluate import SWEEP_LOADS

    return f"{min(SWEEP_LOADS):g} (the lowest swept)"


def _sweep_lines(sweep: Sequence[dict]) -> list[str]:
    """The load sweep: per (cluster, policy) and target load, bounded or not (queue growth
    over the window's second half, in jobs, mean over the sweep's seeds)."""
    if not sweep:
        return []
    loads = sorted({float(r["load_target"]) for r in sweep})
    lines = ["## Load sweep", "",
             "Each cell: whether the backlog stayed bounded at that offered load on every "
             "sweep seed that ran it (docs/metrics.md, \"Sustainable load\"), and the queue "
             "growth (jobs) over the measurement window's second half, mean over those seeds; "
             "k/n seeds: only k of the n sweep seeds ran it; not run: above a load whose "
             "backlog grew on every seed (the sweep walks each seed up the loads and stops "
             "there: no higher load can be sustainable).", ""]
    for cluster in _clusters(sweep):
        rs = [r for r in sweep if r["cluster"] == cluster]
        lines += [f"{cluster}:", "", "| policy | " + " | ".join(f"load {x:g}" for x in loads)
                  + " |", "|" + "---|" * (len(loads) + 1)]
        for pol in _policies(rs):
            cells = []
            n = len({r["seed"] for r in rs if r["policy"] == pol})
            for x in loads:
                pts = [r for r in rs if r["policy"] == pol and float(r["load_target"]) == x]
                if not pts:
                    cells.append("not run")
                    continue
                ok = all(r["backlog_bounded"] for r in pts)
                g = float(np.mean([r["queue_growth"] for r in pts]))
                cells.append(f"{'bounded' if ok else 'growing'} ({g:+,.1f})"
                             + (f", {len(pts)}/{n} seeds" if len(pts) < n else ""))
            lines.append(f"| {pol} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _plots(outs, out: Path, sweep: Sequence[dict] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    runs = [o.run for o in outs]
    clusters = _clusters(runs)
    policies = _policies(runs)
    colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(policies)}
    plot_seed = min(r["seed"] for r in runs)
    n = len(clusters)
    cols = min(n, 2)
    rows = math.ceil(n / cols)

    def grid():
        fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.set_visible(False)
        return fig, axes.flat

    def cdf(fname: str, values, floor: float, xlabel: str, plain_minor: bool) -> None:
        """Per cluster, the CDF per policy of ``values(output)`` (all seeds pooled) on a log
        x axis, values clipped below at ``floor``."""
        fig, axes = grid()
        for ax, c in zip(axes, clusters):
            for p in policies:
                v = np.sort(np.concatenate([np.asarray(values(o), float) for o in outs
                                            if o.run["cluster"] == c and o.run["policy"] == p]
                                           or [np.zeros(0)]))
                if v.size:
                    ax.step(np.maximum(v, floor), np.arange(1, v.size + 1) / v.size,
                            where="post", label=p, color=colors[p])
            ax.set_xscale("log")
            if plain_minor:  # no crowded minor labels
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel(xlabel)
            ax.set_ylabel("fraction of batch jobs")
            ax.set_title(c)
            ax.grid(alpha=0.3)
            _legend_or_note(ax, "no batch job finished")
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)

    cdf("jct_cdf.png", lambda o: o.jct, 1.0, "JCT (s, log scale)", False)
    cdf("slowdown_cdf.png", lambda o: getattr(o, "slowdown", []), 1e-3,
        "slowdown = JCT / run time alone at the requested shape (log scale)", True)

    _extra_plots(outs, out, clusters, policies, colors, plot_seed, grid, sweep)

    for fname, key, ylabel in (("gpu_utilization.png", "utilization", "GPU utilization"),
                               ("queue_length.png", "queue", "jobs waiting")):
        fig, axes = grid()
        for ax, c in zip(axes, clusters):
            for o in outs:
                r = o.run
                if r["cluster"] == c and r["seed"] == plot_seed and o.series.get("t"):
                    ax.plot(np.asarray(o.series["t"]) / 3600.0, o.series[key], label=r["policy"],
                            color=colors[r["policy"]], lw=1.0)
            ax.set_xlabel("hours since the first arrival (to the horizon, or 4 arrival spans)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{c}, seed {plot_seed}")
            ax.grid(alpha=0.3)
            _legend_or_note(ax, "no run to plot")
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)


def _extra_plots(outs, out: Path, clusters, policies, colors, plot_seed, grid,
                 sweep: Sequence[dict]) -> None:
    """sm_activity.png, load_sweep.png and prices.png (docs/metrics.md, "Plots")."""
    import matplotlib.pyplot as plt

    fig, axes = grid()
    for ax, c in zip(axes, clusters):
        for o in outs:
            r = o.run
            if r["cluster"] == c and r["seed"] == plot_seed and o.series.get("sm_activity"):
                ax.plot(np.asarray(o.series["window_t"]) / 3600.0, o.series["sm_activity"],
                        label=r["policy"], color=colors[r["policy"]], lw=1.0)
        ax.set_xlabel("hours since the first arrival (measurement window)")
        ax.set_ylabel("SM activity (DCGM)")
        ax.set_title(f"{c}, seed {plot_seed}")
        ax.grid(alpha=0.3)
        _legend_or_note(ax, "no SM-activity series (continuous arrivals only)")
    fig.tight_layout()
    fig.savefig(out / "sm_activity.png", dpi=110)
    plt.close(fig)

    runs = [o.run for o in outs]
    fig, axes = grid()
    for ax, c in zip(axes, clusters):
        pols = [p for p in policies if _sustain_of(runs, c, p) is not None]
        vals = [_sustain_of(runs, c, p) for p in pols]
        if pols:
            ax.bar(range(len(pols)), vals, color=[colors[p] for p in pols], label="_")
            ax.set_xticks(range(len(pols)))
            ax.set_xticklabels(pols, rotation=45, ha="right", fontsize=7)
            ax.set_ylabel("max sustainable load")
        else:
            ax.text(0.5, 0.5, "no load sweep at this size", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9)
        ax.set_title(c)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "load_sweep.png", dpi=110)
    plt.close(fig)

    n = len(clusters)
    fig, axes = plt.subplots(max(n, 1), 2, figsize=(13, 4.2 * max(n, 1)), squeeze=False)
    for row, c in zip(axes, clusters):
        o = next((o for o in outs if o.run["cluster"] == c and o.run["policy"] == "elastico"
                  and o.run["seed"] == plot_seed and o.series.get("prices")), None)
        for ax, prefix, unit in ((row[0], "gpu:", "utility per GPU"),
                                 (row[1], "gpumem:", "utility per GiB")):
            drawn = False
            if o is not None:
                t = np.asarray(o.series["window_t"]) / 3600.0
                for k, (name, v) in enumerate(o.series["prices"].items()):
                    if not name.startswith(prefix):
                        continue
                    y = np.asarray(v, float)
                    if np.any(y > 0):
                        ax.plot(t, np.where(y > 0, y, np.nan), label=name[len(prefix):],
                                color=plt.cm.tab10(k % 10), lw=1.0)
                        drawn = True
            if drawn:
                ax.set_yscale("log")
            ax.set_xlabel("hours since the first arrival (measurement window)")
            ax.set_ylabel(f"shadow price ({unit})")
            ax.set_title(f"{c}: {prefix[:-1]} prices (elastico, seed {plot_seed})")
            ax.grid(alpha=0.3)
            _legend_or_note(ax, "no positive price (or no elastico run)")
    if not clusters:
        for ax in axes.flat:
            ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(out / "prices.png", dpi=110)
    plt.close(fig)


def write_report(outs, out: Path, meta: dict | None = None,
                 sweep: Sequence[dict] | None = None) -> list[Path]:
    """Write results.json, report.md and the PNGs of :data:`PLOTS` into ``out`` (created if
    missing); returns the paths written.  ``meta``: ``settings`` (shown in the report),
    optional ``intro`` and ``closing`` text.  ``sweep``: the load-sweep runs (results.json
    ``load_sweep``; the report's "Load sweep" section)."""
    meta = dict(meta or {})
    meta["sweep"] = list(sweep or [])
    out.mkdir(parents=True, exist_ok=True)
    runs = [o.run for o in outs]
    meta.setdefault("plot_seed", min(r["seed"] for r in runs) if runs else 0)
    # all files are made in a staging folder beside the report, then each moved into place
    # (a rename): a failure or an interrupt while making them leaves the previous report
    # whole, never new results.json beside an old report.md
    stage = Path(tempfile.mkdtemp(prefix=".report-", dir=out))
    try:
        # strict JSON: a non-finite number (the load of a workload without an arrival
        # window) is null, as in simulate --json, not Python's Infinity/NaN
        (stage / "results.json").write_text(
            json.dumps({"runs": _json_safe(runs), "load_sweep": _json_safe(meta["sweep"])},
                       indent=1, allow_nan=False) + "\n")
        _plots(outs, stage, meta["sweep"])
        (stage / "report.md").write_text(_markdown(runs, meta, out))
        for name in REPORT_FILES:
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out / name for name in REPORT_FILES]


def write_evaluation(parts: Sequence[dict], out: Path) -> list[Path]:
    """Write an evaluation of one or more workloads into ``out``: ``results.json`` at its top
    (``runs``, ``load_sweep`` and ``sensitivity`` of every part, each run with its
    ``workload``) and each workload's ``report.md`` and PNGs of :data:`PLOTS` in its folder
    (:data:`REPORT_DIRS`: openb at the top, llm-mix in ``llm-mix/``).  ``parts``: one dict
    per workload, ``workload``, ``outs`` (RunOutput list), ``meta`` (as :func:`write_report`'s),
    ``sweep`` (run objects) and ``sensitivity`` (run objects, each with ``sensitivity``:
    ``{"parameter", "value"}``).  All files are made in a staging folder and renamed into
    place at the end; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".report-", dir=out))
    written: list[str] = ["results.json"]
    try:
        doc = {"runs": [], "load_sweep": [], "sensitivity": []}
        for part in parts:
            doc["runs"] += [o.run for o in part["outs"]]
            doc["load_sweep"] += list(part.get("sweep") or [])
            doc["sensitivity"] += list(part.get("sensitivity") or [])
        (stage / "results.json").write_text(json.dumps(_json_safe(doc), indent=1,
                                                       allow_nan=False) + "\n")
        for part in parts:
            wkl = part["workload"]
            sub = REPORT_DIRS.get(wkl, wkl)
            folder = stage / sub if sub else stage
            folder.mkdir(parents=True, exist_ok=True)
            meta = dict(part.get("meta") or {})
            meta["sweep"] = list(part.get("sweep") or [])
            meta["sensitivity"] = list(part.get("sensitivity") or [])
            meta["workload"] = wkl
            runs = [o.run for o in part["outs"]]
            meta.setdefault("plot_seed", min(r["seed"] for r in runs) if runs else 0)
            meta["results_link"] = "../results.json" if sub else "results.json"
            others = [(p["workload"], REPORT_DIRS.get(p["workload"], p["workload"]))
                      for p in parts if p["workload"] != wkl]
            if others:
                links = "; ".join(
                    f"[{TITLES.get(w, w)}]"
                    f"({Path(os.path.relpath(Path(out, d, 'report.md'), Path(out, sub))).as_posix()})"
                    for w, d in others)
                meta["intro"] = ((meta.get("intro") or "") + "\n\nThe other workload's report: "
                                 + links + ".").strip()
            _plots(part["outs"], folder, meta["sweep"])
            (folder / "report.md").write_text(_markdown(runs, meta, out / sub if sub else out))
            written += [(f"{sub}/{n}" if sub else n) for n in ("report.md",) + PLOTS]
        for name in written:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out / name for name in written]


def _json_safe(value):
    """``value`` with every non-finite float replaced by None (JSON null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _legend_or_note(ax, empty: str) -> None:
    """The policies' legend, or ``empty`` written on the panel when nothing was drawn (a
    legend of no artists is only a matplotlib warning and an empty box)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", fontsize=9)


# ---- issue 24: the llm-mix report (goals with CIs, paired differences, steering, sensitivity) --

#: issue 24's goals (512 GPUs, elastico against exclusive at the same offered load, means over
#: seeds with 95 % CIs); docs/metrics.md, "The llm-mix report"
LLM_GOALS = {"jct_ratio": 3.0, "p50_jct_ratio": 2.0, "sustainable_ratio": 2.1,
             "sm_activity": 0.46, "sm_ratio": 1.8, "bound_time_frac": 0.05}
#: baselines elastico must beat on avg JCT and sustainable load (issue 24)
LLM_BASELINES = ("gavel", "fgd", "mps-static")
#: every ablation of elastico, in report order (issue 24: no-rst split into its parts)
LLM_ABLATIONS = ("elastico-no-rst", "elastico-no-growth", "elastico-no-model-choice",
                 "elastico-no-mig", "elastico-no-esp", "elastico-no-iac")
#: the llm-mix report's extra per-cluster table: (key, label, format)
LLM_TABLE = (
    ("sm_activity", "SM activity (DCGM)", "{:.1%}"),
    ("gpu_utilization", "GPU util. (busy compute)", "{:.1%}"),
    ("evictions", "evictions", "{:,.1f}"),
    ("shrinks", "shrinks", "{:,.1f}"),
    ("wasted_gpu_s", "wasted GPU-s", "{:,.0f}"),
    ("bound_violation_time_frac", "training time past bound", "{:.2%}"),
    ("bound_violation_jobs_5pct", "training jobs > 5 % past bound", "{:,.1f}"),
)


def paired_difference(runs: Sequence[dict], cluster: str, policy: str, reference: str,
                      key: str) -> dict | None:
    """The paired (same seed: the same workload) difference ``policy - reference`` of ``key``
    over the seeds both ran on ``cluster``: ``{"seeds", "diffs", "mean", "low", "high",
    "relative"}`` with the 95 % Student t interval of the mean difference
    (:func:`t_interval` on the per-seed differences; docs/metrics.md) and ``relative`` the
    mean difference over the reference's mean.  None when no seed has both (or a value is
    missing)."""
    a = {r["seed"]: r.get(key) for r in runs if r["cluster"] == cluster and r["policy"] == policy}
    b = {r["seed"]: r.get(key) for r in runs
         if r["cluster"] == cluster and r["policy"] == reference}
    seeds = sorted(s for s in set(a) & set(b)
                   if isinstance(a[s], (int, float)) and isinstance(b[s], (int, float)))
    if not seeds:
        return None
    d = [float(a[s]) - float(b[s]) for s in seeds]
    m, lo, hi = t_interval(d)
    ref = float(np.mean([b[s] for s in seeds]))
    return {"seeds": seeds, "diffs": d, "mean": m, "low": lo, "high": hi,
            "relative": m / ref if ref else math.inf}


def paired_ratio(runs: Sequence[dict], cluster: str, num: str, den: str,
                 key: str) -> dict | None:
    """Per seed ``num``'s ``key`` over ``den``'s (the same workload), their mean with its 95 %
    t interval, and the ratio of the means over those seeds; None without a common seed or
    with a zero denominator."""
    a = {r["seed"]: r.get(key) for r in runs if r["cluster"] == cluster and r["policy"] == num}
    b = {r["seed"]: r.get(key) for r in runs if r["cluster"] == cluster and r["policy"] == den}
    seeds = sorted(s for s in set(a) & set(b) if isinstance(a[s], (int, float))
                   and isinstance(b[s], (int, float)) and b[s])
    if not seeds:
        return None
    q = [float(a[s]) / float(b[s]) for s in seeds]
    m, lo, hi = t_interval(q)
    return {"seeds": seeds, "ratios": q, "mean": m, "low": lo, "high": hi,
            "of_means": float(np.mean([a[s] for s in seeds]) / np.mean([b[s] for s in seeds]))}


def _sustain_of(runs: Sequence[dict], cluster: str, policy: str):
    vals = {r.get("sustainable_load") for r in runs
            if r["cluster"] == cluster and r["policy"] == policy}
    return vals.pop() if len(vals) == 1 else None


def _ci_text(m: float, lo: float, hi: float, fmt: str, n: int) -> str:
    return fmt.format(m) + (f" [{fmt.format(lo)}, {fmt.format(hi)}]" if n > 1 else "")


def llm_goal_check(runs: Sequence[dict], cluster: str,
                   sweep: Sequence[dict] = ()) -> list[dict] | None:
    """Issue 24's goals (:data:`LLM_GOALS`) for ``cluster``; None without both ``exclusive``
    and ``elastico``.  Each row: ``goal``, ``target`` (text), ``measured`` (text, with the 95 %
    CI where seeds give one), ``met`` (True / False / None when not measurable here) and
    ``confident`` (the CI clears the target; None without a CI).  docs/metrics.md, "The
    llm-mix report", defines every row."""
    pols = {r["policy"] for r in runs if r["cluster"] == cluster}
    if not {"exclusive", "elastico"} <= pols:
        return None
    rows: list[dict] = []

    def ratio_row(goal, key, target):
        q = paired_ratio(runs, cluster, "exclusive", "elastico", key)
        if q is None:
            rows.append({"goal": goal, "target": f">= {target:g}x", "measured": "-",
                         "met": None, "confident": None})
            return
        n = len(q["seeds"])
        rows.append({"goal": goal, "target": f">= {target:g}x",
                     "measured": _ci_text(q["mean"], q["low"], q["high"], "{:.2f}x", n)
                     + f" (ratio of means {q['of_means']:.2f}x)",
                     "met": q["mean"] >= target,
                     "confident": (q["low"] >= target) if n > 1 else None})

    ratio_row("avg JCT, exclusive / elastico (per-seed ratio)", "avg_jct_s",
              LLM_GOALS["jct_ratio"])
    ratio_row("median JCT, exclusive / elastico (per-seed ratio)", "p50_jct_s",
              LLM_GOALS["p50_jct_ratio"])
    ex_s, el_s = _sustain_of(runs, cluster, "exclusive"), _sustain_of(runs, cluster, "elastico")
    if ex_s is None or el_s is None:
        rows.append({"goal": "max sustainable load, elastico / exclusive",
                     "target": f">= {LLM_GOALS['sustainable_ratio']:g}x",
                     "measured": "- (no load sweep at this size)", "met": None,
                     "confident": None})
    else:
        v = el_s / ex_s if ex_s else math.inf
        top = max((float(r["load_target"]) for r in sweep if r["cluster"] == cluster),
                  default=None)
        note = " (elastico at the grid's top: a lower bound)" if top is not None \
            and el_s >= top else ""
        rows.append({"goal": "max sustainable load, elastico / exclusive",
                     "target": f">= {LLM_GOALS['sustainable_ratio']:g}x",
                     "measured": f"{v:.2f}x ({_load_text(el_s)} / {_load_text(ex_s)}){note}",
                     "met": v >= LLM_GOALS["sustainable_ratio"], "confident": None})
    # SM activity at exclusive's saturation load: the sweep's runs at that load (windowed
    # metrics are those of a full replay: docs/metrics.md, "Sustainable load")
    at = [r for r in sweep if r["cluster"] == cluster and ex_s
          and math.isclose(float(r["load_target"]), ex_s)]
    sm = paired_ratio(at, cluster, "elastico", "exclusive", "sm_activity") if at else None
    el_sm = [r["sm_activity"] for r in at if r["policy"] == "elastico"
             and isinstance(r.get("sm_activity"), (int, float))]
    if el_sm:
        m, lo, hi = t_interval(el_sm)
        rows.append({"goal": f"SM activity of elastico at exclusive's saturation load "
                             f"({_load_text(ex_s)})", "target": f">= {LLM_GOALS['sm_activity']:.0%}",
                     "measured": _ci_text(m, lo, hi, "{:.1%}", len(el_sm)),
                     "met": m >= LLM_GOALS["sm_activity"],
                     "confident": (lo >= LLM_GOALS["sm_activity"]) if len(el_sm) > 1 else None})
    else:
        rows.append({"goal": "SM activity of elastico at exclusive's saturation load",
                     "target": f">= {LLM_GOALS['sm_activity']:.0%}",
                     "measured": "- (no sweep run of elastico at that load)", "met": None,
                     "confident": None})
    if sm is not None:
        n = len(sm["seeds"])
        rows.append({"goal": "SM activity, elastico / exclusive, at that load",
                     "target": f">= {LLM_GOALS['sm_ratio']:g}x",
                     "measured": _ci_text(sm["mean"], sm["low"], sm["high"], "{:.2f}x", n),
                     "met": sm["mean"] >= LLM_GOALS["sm_ratio"],
                     "confident": (sm["low"] >= LLM_GOALS["sm_ratio"]) if n > 1 else None})
    else:
        rows.append({"goal": "SM activity, elastico / exclusive, at that load",
                     "target": f">= {LLM_GOALS['sm_ratio']:g}x", "measured": "-",
                     "met": None, "confident": None})
    for b in LLM_BASELINES:
        d = paired_difference(runs, cluster, b, "elastico", "avg_jct_s")
        if d is None:
            continue
        n = len(d["seeds"])
        rows.append({"goal": f"better than {b} on avg JCT ({b} - elastico, s)", "target": "> 0",
                     "measured": _ci_text(d["mean"], d["low"], d["high"], "{:+,.0f}", n),
                     "met": d["mean"] > 0, "confident": (d["low"] > 0) if n > 1 else None})
        bs = _sustain_of(runs, cluster, b)
        if bs is not None and el_s is not None:
            rows.append({"goal": f"better than {b} on max sustainable load",
                         "target": f"> {_load_text(bs)}", "measured": _load_text(el_s),
                         "met": el_s > bs, "confident": None})
    for a in LLM_ABLATIONS:
        d = paired_difference(runs, cluster, a, "elastico", "avg_jct_s")
        if d is None:
            continue
        n = len(d["seeds"])
        # worse on what the mechanisms exist for: JCT, or the training jobs' slowdown bounds
        # (the bound goal's count, docs/metrics.md); either CI above 0 is measurably worse
        v = paired_difference(runs, cluster, a, "elastico", "bound_violation_jobs_5pct")
        worse = n > 1 and (d["low"] > 0 or (v is not None and len(v["seeds"]) > 1
                                            and v["low"] > 0))
        rows.append({"goal": f"{a} measurably worse ({a} - elastico, paired: avg JCT, s; "
                             "training jobs > 5 % past bound; a CI above 0)",
                     "target": "CI > 0",
                     "measured": _ci_text(d["mean"], d["low"], d["high"], "{:+,.0f}", n)
                     + f" ({d['relative']:+.1%})"
                     + ("" if v is None else "; jobs past bound "
                        + _ci_text(v["mean"], v["low"], v["high"], "{:+,.1f}", len(v["seeds"]))),
                     "met": worse if n > 1 else None,
                     "confident": worse if n > 1 else None})
    el = [r for r in runs if r["cluster"] == cluster and r["policy"] == "elastico"]
    fr = [r.get("bound_violation_time_frac") for r in el]
    jobs = [r.get("bound_violation_jobs_5pct") for r in el]
    if all(isinstance(x, (int, float)) for x in fr + jobs) and el:
        m, lo, hi = t_interval(fr)
        worst = max(r.get("bound_violation_time_frac_max") or 0.0 for r in el)
        rows.append({"goal": "no training job past its slowdown bound for > 5 % of its run "
                             "(elastico, all seeds)", "target": "0 jobs",
                     "measured": f"{int(sum(jobs))} jobs; worst job {worst:.1%} of its run; "
                                 f"all training time past bound "
                                 + _ci_text(m, lo, hi, "{:.2%}", len(fr)),
                     "met": sum(jobs) == 0, "confident": None})
    return rows


def _llm_goal_lines(runs, cluster, sweep) -> list[str]:
    g = llm_goal_check(runs, cluster, sweep)
    if g is None:
        return []
    lines = [f"Goals of issue 24 (set for 512 GPUs; elastico against exclusive at the same "
             f"offered load), {cluster}: mean over seeds [95 % CI, Student t over the "
             f"per-seed values]; *met* reads the mean, *CI clears* whether the whole interval "
             f"does:", "", "| goal | target | measured | met | CI clears |", "|---|---|---|---|---|"]
    yn = lambda v: "-" if v is None else ("yes" if v else "no")  # noqa: E731
    for row in g:
        lines.append(f"| {row['goal']} | {row['target']} | {row['measured']} | "
                     f"{yn(row['met'])} | {yn(row['confident'])} |")
    return lines + [""]


def _llm_table_lines(rs: Sequence[dict], cluster: str) -> list[str]:
    lines = [f"Utilisation, evictions and bounds, {cluster} (mean ± sd over seeds; "
             "docs/metrics.md):", "",
             "| policy | " + " | ".join(lbl for _, lbl, _ in LLM_TABLE) + " |",
             "|" + "---|" * (len(LLM_TABLE) + 1)]
    for pol in _policies(rs):
        prs = [r for r in rs if r["policy"] == pol]
        cells = []
        for key, _, fmt in LLM_TABLE:
            v = [r.get(key) for r in prs if isinstance(r.get(key), (int, float))]
            cells.append(_fmt(fmt, *_mean_sd(v), len(v)) if v else "-")
        lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    lines += ["", f"Per part of the mix, {cluster} (jobs finished in the window's JCT set, "
              "avg JCT s; mean over seeds):", ""]
    parts = sorted({p for r in rs for p in (r.get("mix_window") or {})})
    if parts:
        lines += ["| policy | " + " | ".join(parts) + " |", "|" + "---|" * (len(parts) + 1)]
        for pol in _policies(rs):
            prs = [r for r in rs if r["policy"] == pol and r.get("mix_window")]
            cells = []
            for p in parts:
                f = [r["mix_window"][p]["finished"] for r in prs]
                j = [r["mix_window"][p]["avg_jct_s"] for r in prs]
                cells.append(f"{np.mean(f):,.1f}, {np.mean(j):,.0f} s" if prs else "-")
            lines.append(f"| {pol} | " + " | ".join(cells) + " |")
    return lines + [""]


def _ablation_ci_lines(runs, cluster) -> list[str]:
    rows = []
    for a in (*LLM_ABLATIONS, *LLM_BASELINES, "time-slicing", "exclusive"):
        cells = []
        for key, fmt in (("avg_jct_s", "{:+,.0f}"), ("p50_jct_s", "{:+,.0f}"),
                         ("sm_activity", "{:+.3f}"), ("bound_violation_jobs_5pct", "{:+,.1f}")):
            d = paired_difference(runs, cluster, a, "elastico", key)
            if d is None:
                break
            cells.append(_ci_text(d["mean"], d["low"], d["high"], fmt, len(d["seeds"]))
                         + (" *" if len(d["seeds"]) > 1 and (d["low"] > 0 or d["high"] < 0)
                            else ""))
        else:
            rows.append(f"| {a} | {len(d['seeds'])} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return [f"Paired differences against full elastico (same seed, same jobs), {cluster}: "
            "mean of the per-seed differences [95 % CI]; * the CI excludes 0:", "",
            "| policy | seeds | avg JCT - elastico's (s) | p50 JCT - elastico's (s) "
            "| SM activity - elastico's | training jobs > 5 % past bound - elastico's |",
            "|---|---|---|---|---|---|", *rows, ""]


def _steering_lines(runs, cluster) -> list[str]:
    """Prices (elastico's time-average over the window, mean over seeds) and what they steered:
    each part's share of its GPU-seconds per pool, elastico against elastico-no-esp."""
    el = [r for r in runs if r["cluster"] == cluster and r["policy"] == "elastico"
          and r.get("prices_mean")]
    lines: list[str] = []
    if el:
        names = list(el[0]["prices_mean"])
        lines += [f"Shadow prices, {cluster}: elastico's time-average over the measurement "
                  "window (utility per GPU for `gpu:*`, per GiB for `gpumem:*` and `mem`, per "
                  "core for `cpu`), mean over seeds; the plot shows them over time:", "",
                  "| resource | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1),
                  "| price | " + " | ".join(
                      f"{np.mean([r['prices_mean'].get(n, 0.0) for r in el]):.3g}"
                      for n in names) + " |", ""]
    pols = [p for p in ("elastico", "elastico-no-esp", "exclusive")
            if any(r["cluster"] == cluster and r["policy"] == p and r.get("gpu_seconds")
                   for r in runs)]
    if "elastico" not in pols:
        return lines
    shares: dict[str, dict[str, dict[str, float]]] = {}
    pools: set[str] = set()
    parts: set[str] = set()
    for p in pols:
        rs = [r for r in runs if r["cluster"] == cluster and r["policy"] == p
              and r.get("gpu_seconds")]
        acc: dict[str, dict[str, list[float]]] = {}
        for r in rs:
            for part, by_pool in r["gpu_seconds"].items():
                tot = sum(by_pool.values())
                for pool, v in by_pool.items():
                    acc.setdefault(part, {}).setdefault(pool, []).append(v / tot if tot else 0)
                parts.add(part)
                pools.update(by_pool)
        shares[p] = {part: {pool: float(np.sum(v)) / len(rs) for pool, v in d.items()}
                     for part, d in acc.items()}
    pools_l = sorted(pools)
    lines += [f"What the prices steered, {cluster}: each part's GPU-seconds held in the "
              "window, share per GPU pool (mean over seeds); elastico-no-esp chooses the same "
              "families greedily, without prices:", "",
              "| part | policy | " + " | ".join(pools_l) + " |",
              "|" + "---|" * (len(pools_l) + 2)]
    for part in sorted(parts):
        for p in pols:
            d = shares[p].get(part, {})
            lines.append(f"| {part} | {p} | " + " | ".join(f"{d.get(x, 0.0):.0%}"
                                                          for x in pools_l) + " |")
    return lines + [""]


def _sensitivity_lines(sens: Sequence[dict]) -> list[str]:
    """Per parameter and value (each run's ``sensitivity``), per cluster: exclusive's and
    elastico's avg JCT [CI], the paired per-seed ratio [CI], elastico's SM activity and
    training time past bound."""
    if not sens:
        return []
    lines = ["## Sensitivity", "",
             "One parameter changed at a time from the main runs' settings (the rest as "
             "above); cells: mean over seeds [95 % CI]; the ratio is per seed "
             "(exclusive / elastico, the same jobs) then averaged (docs/metrics.md, "
             "\"Sensitivity\").", "",
             "| parameter | value | cluster | seeds | avg JCT exclusive (s) | avg JCT elastico "
             "(s) | avg JCT ratio | p50 JCT ratio | SM activity elastico | SM activity exclusive "
             "| training time past bound (elastico) |", "|" + "---|" * 11]
    keys = list(dict.fromkeys((r["sensitivity"]["parameter"], str(r["sensitivity"]["value"]))
                              for r in sens))
    for par, val in keys:
        rs = [r for r in sens if r["sensitivity"]["parameter"] == par
              and str(r["sensitivity"]["value"]) == val]
        for c in _clusters(rs):
            cells = []
            for pol, key, fmt in (("exclusive", "avg_jct_s", "{:,.0f}"),
                                  ("elastico", "avg_jct_s", "{:,.0f}")):
                v = [r[key] for r in rs if r["cluster"] == c and r["policy"] == pol
                     and isinstance(r.get(key), (int, float))]
                cells.append(_ci_text(*t_interval(v), fmt, len(v)) if v else "-")
            for key in ("avg_jct_s", "p50_jct_s"):
                q = paired_ratio(rs, c, "exclusive", "elastico", key)
                cells.append(_ci_text(q["mean"], q["low"], q["high"], "{:.2f}x",
                                      len(q["seeds"])) if q else "-")
            for pol, key, fmt in (("elastico", "sm_activity", "{:.1%}"),
                                  ("exclusive", "sm_activity", "{:.1%}"),
                                  ("elastico", "bound_violation_time_frac", "{:.2%}")):
                v = [r[key] for r in rs if r["cluster"] == c and r["policy"] == pol
                     and isinstance(r.get(key), (int, float))]
                cells.append(_ci_text(*t_interval(v), fmt, len(v)) if v else "-")
            n = len({r["seed"] for r in rs if r["cluster"] == c})
            lines.append(f"| {par} | {val} | {c} | {n} | " + " | ".join(cells) + " |")
    return lines + [""]
