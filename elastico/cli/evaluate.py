"""``elastico evaluate``: every policy on every cluster and seed, and the report.

Who calls it: :mod:`elastico.cli`.  Whom it calls: :mod:`elastico.sim.clusters` (cluster
definitions), :mod:`elastico.sim.evaluate` (the runs, in parallel processes) and
:mod:`elastico.sim.report` (results.json, report.md, PNG plots).  Progress goes to stderr, one
line per finished run.  Every flag is checked before any run starts.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from elastico.errors import InvalidArgument

#: the default evaluation (docs/metrics.md, "elastico evaluate"): sized to finish in under
#: 30 minutes on 2 cores
DEFAULT_GPUS = "64,512"
DEFAULT_CLUSTERS = "trace,a100h100-mig"
DEFAULT_SEEDS = "0,1,2"
DEFAULT_JOBS_PER_GPU = 2.0
#: default arrivals: continuous over a window sized from the trace's batch durations (p90;
#: docs/model.md, "Continuous arrivals"); ``trace`` = the trace's own compressed arrivals
DEFAULT_ARRIVALS = "continuous"
DEFAULT_WINDOW_QUANTILE = 0.9
#: the offered load of the main runs with continuous arrivals: half the cluster's GPUs
#: requested, below saturation, so that JCTs are steady-state; the sweep says where each
#: policy saturates (docs/metrics.md, "elastico evaluate")
DEFAULT_CONTINUOUS_LOAD = 0.5
#: the load sweep's seeds and cluster sizes (docs/metrics.md, "Sustainable load")
DEFAULT_SWEEP_SEEDS = "0"
#: None = the smallest size of --gpus: with the 512-GPU sweep too the default run does not fit
#: 45 minutes on 2 cores (measured 2026-12-02: the main runs alone take 15.5 min, the 512-GPU
#: sweep adds up to 48 runs of 10-260 s); ``--sweep-gpus 64,512`` runs it at every size
DEFAULT_SWEEP_GPUS = None
DEFAULT_POLICIES = ("exclusive", "time-slicing", "fgd", "gavel", "elastico", "elastico-no-rst",
                    "elastico-no-esp", "elastico-no-iac")
MAX_GPUS = 6212  # the trace's whole cluster
#: the workloads one default ``elastico evaluate`` covers (issue 24), each with its report
DEFAULT_WORKLOADS = "openb,llm-mix"
#: the llm-mix evaluation's defaults (issue 24; docs/metrics.md, "The llm-mix report"): the
#: A100/H100 MIG cluster at 64 and 512 GPUs, five seeds (the 95 % CIs), every baseline and
#: every ablation; sized to fit, with the openb evaluation, 60 minutes on 2 cores (the
#: measured costs are in docs/metrics.md)
LLM_MIX_DEFAULTS = {
    "clusters": "a100h100-mig",
    "gpus": "64,512",
    "seeds": "0,1,2,3,4",
    "policies": ",".join(("exclusive", "time-slicing", "mps-static", "fgd", "gavel", "elastico",
                          "elastico-no-rst", "elastico-no-growth", "elastico-no-model-choice",
                          "elastico-no-mig", "elastico-no-esp", "elastico-no-iac")),
    # at the largest size: elastico and the baselines of the goal table (an elastico run there
    # costs ~130 s of CPU, bench/sim_cpu.py; the ablations run at 64 GPUs: with elastico-no-esp
    # and -no-mig at 512 too the whole evaluation took 55.3 min on 2 cores, 2026-12-07, and
    # their 512 figures are in bench/results/llm-mix-512-ablations-2026-12-07.json)
    "large_policies": ",".join(("exclusive", "mps-static", "fgd", "gavel", "elastico")),
    # 0.5 apart above 1, on to 4: elastico sustained the former top (2) on seed 0
    "sweep_loads": "0.25,0.5,0.75,1,1.5,2,2.5,3,3.5,4",
    "sweep_seeds": "0",
    # the policies the goal table's sustainable-load rows compare (an elastico sweep run at
    # load 1 costs ~47 s of CPU at 64 GPUs, more above it: the ablations are not swept)
    "sweep_policies": ",".join(("exclusive", "time-slicing", "mps-static", "fgd", "gavel",
                                "elastico")),
    "sweep_gpus": None,  # the smallest size
    "sensitivity_seeds": "0,1,2",
}
#: the openb evaluation's defaults (unchanged by issue 24)
OPENB_DEFAULTS = {"clusters": DEFAULT_CLUSTERS, "gpus": DEFAULT_GPUS, "seeds": DEFAULT_SEEDS,
                  "policies": ",".join(DEFAULT_POLICIES), "large_policies": None,
                  "sweep_loads": None, "sweep_seeds": DEFAULT_SWEEP_SEEDS,
                  "sweep_gpus": DEFAULT_SWEEP_GPUS, "sweep_policies": None,
                  "sensitivity_seeds": "none"}
#: the llm-mix sensitivity section (issue 24): one parameter changed at a time from the main
#: runs' settings, at the smallest --gpus size, exclusive and elastico; the main value of each
#: parameter (contention default, the main --inference-share, the main --load) is the main
#: runs' own
SENSITIVITY = (("contention", ("low", "default", "high")),
               ("inference share", (0.2, 0.4, 0.6)),
               ("load", (0.25, 0.5, 0.75)))
SENSITIVITY_POLICIES = ("exclusive", "elastico")


def register(sub: argparse._SubParsersAction) -> None:
    from elastico.pricing import UTILITIES

    p = sub.add_parser(
        "evaluate",
        help="run every policy on the trace and MIG clusters over several seeds and write "
             "the report (markdown, PNG plots, results.json)",
        description="Replays the bundled Alibaba GPU trace through every --policies on every "
                    "--clusters x --gpus cluster for every --seeds, in --jobs parallel "
                    "processes, and writes report.md, results.json and PNG plots into --out.  "
                    "docs/metrics.md defines every number.",
    )
    p.add_argument("--gpus", default=None, metavar="N,N",
                   help="cluster sizes in GPUs, comma-separated (default: "
                        f"openb {DEFAULT_GPUS}, llm-mix {LLM_MIX_DEFAULTS['gpus']})")
    p.add_argument("--clusters", default=None, metavar="C,C",
                   help="'trace' (the trace's own GPU mix), a bundled cluster definition "
                        "(data/clusters/NAME.yaml) or a path to a .yaml file, comma-separated "
                        f"(default: openb {DEFAULT_CLUSTERS}, llm-mix "
                        f"{LLM_MIX_DEFAULTS['clusters']})")
    p.add_argument("--policies", default=None, metavar="P,P",
                   help="policies, comma-separated (default: openb "
                        f"{','.join(DEFAULT_POLICIES)}; llm-mix {LLM_MIX_DEFAULTS['policies']})")
    p.add_argument("--large-policies", default=None, metavar="P,P|all",
                   help="policies run at the largest of several --gpus sizes (and in its "
                        "load sweep), each also in --policies; 'all' = --policies (default: "
                        f"openb all, llm-mix {LLM_MIX_DEFAULTS['large_policies']})")
    p.add_argument("--seeds", default=None, metavar="S,S",
                   help="workload seeds, comma-separated integers >= 0 (default: openb "
                        f"{DEFAULT_SEEDS}, llm-mix {LLM_MIX_DEFAULTS['seeds']})")
    p.add_argument("--jobs-per-gpu", type=float, default=DEFAULT_JOBS_PER_GPU, metavar="K",
                   help="trace pods replayed per cluster GPU, the trace window "
                        "(default: %(default)s)")
    p.add_argument("--load", type=float, default=None,
                   help="offered load (continuous arrivals: the demand offered in the "
                        f"measurement window, default {DEFAULT_CONTINUOUS_LOAD:g}; trace "
                        "arrivals: default 1.0, or 0.9 of the most the pods can offer)")
    p.add_argument("--utility", choices=sorted(UTILITIES), default="jct",
                   help="elastico's objective (default: %(default)s)")
    p.add_argument("--gpu-speed-sensitivity", choices=("low", "datasheet", "high"),
                   default="datasheet",
                   help="speed of GPU models no measurement covers: datasheet factor, or it "
                        "times the smallest (low) / largest (high) error of that rule where "
                        "Sia measured it (docs/model.md 2.) (default: datasheet)")
    p.add_argument("--undisclosed-gpu-speed", type=float, default=1.0, metavar="U",
                   help="one-GPU speed of the trace's undisclosed G2/G3 as a factor of the "
                        "reference V100's: a sensitivity parameter (as simulate's; band 0.387 "
                        "to 2.52, docs/model.md 2.) (default: 1)")
    p.add_argument("--contention", default="default", metavar="PRESET|NAME=VALUE,...",
                   help="the ground truth's contention model where no measured pair applies "
                        "(as simulate's --contention): low, default, high or explicit "
                        "switch_overhead=...,bw_efficiency=... (docs/model.md) "
                        "(default: %(default)s)")
    p.add_argument("--restart-s", type=float, default=30.0,
                   help="seconds of progress lost per reconfiguration (default: %(default)s)")
    p.add_argument("--remaining-estimate", choices=("elapsed", "user", "oracle"),
                   default="elapsed",
                   help="what elastico believes a job's remaining work is (as simulate's; "
                        "oracle = the true remaining work, a sensitivity run only; user = "
                        "f-model estimates with badness 3, seeded per run) (default: "
                        "%(default)s)")
    p.add_argument("--arrivals", choices=("continuous", "trace"), default=DEFAULT_ARRIVALS,
                   help="continuous: Poisson arrivals of trace pods over a warm-up, a "
                        "measurement window and a drain sized from the trace's batch "
                        "durations; trace: the trace's own arrivals compressed to the load "
                        "(--jobs-per-gpu pods) (default: %(default)s)")
    p.add_argument("--window-quantile", type=float, default=DEFAULT_WINDOW_QUANTILE,
                   metavar="Q", help="continuous arrivals: warm-up = drain = the Q-quantile "
                                     "of the trace's batch durations, measurement window = "
                                     "twice it (default: %(default)s)")
    p.add_argument("--sweep-loads", default=None,
                   metavar="L,L", help="offered loads of the load sweep that finds each "
                                       "policy's maximum sustainable load (continuous "
                                       "arrivals only); 'none' skips it (default: openb "
                                       f"{_default_sweep_text()}, llm-mix "
                                       f"{LLM_MIX_DEFAULTS['sweep_loads']})")
    p.add_argument("--sweep-seeds", default=None, metavar="S,S",
                   help=f"seeds of the load sweep (default: openb {DEFAULT_SWEEP_SEEDS}, "
                        f"llm-mix {LLM_MIX_DEFAULTS['sweep_seeds']})")
    p.add_argument("--sweep-policies", default=None, metavar="P,P|all",
                   help="policies of the load sweep, each also in --policies; 'all' = "
                        "--policies (default: openb all, llm-mix "
                        f"{LLM_MIX_DEFAULTS['sweep_policies']})")
    p.add_argument("--sweep-gpus", default=DEFAULT_SWEEP_GPUS, metavar="N,N",
                   help="cluster sizes of the load sweep, each also in --gpus (default: "
                        "the smallest of --gpus, for the run's time budget; e.g. 64,512 "
                        "sweeps every size)")
    p.add_argument("--workload", default=DEFAULT_WORKLOADS, metavar="W,W",
                   help="the workloads, comma-separated, each with its own report: openb (the "
                        "Alibaba trace's pods; report.md in --out) and llm-mix (training jobs "
                        "-- the trace's batch pods as measured families, LLM fine-tuning -- and "
                        "bursty offline LLM inference jobs, continuous arrivals only; "
                        "llm-mix/report.md in --out; docs/model.md, \"The llm-mix workload\"); "
                        "results.json in --out holds every workload's runs (default: "
                        "%(default)s)")
    p.add_argument("--inference-share", type=float, default=None, metavar="S",
                   help="llm-mix: share of the offered demand that is offline LLM inference, "
                        "in [0, 1]; the sensitivity section also runs 0.2 and 0.6 "
                        "(default: 0.4)")
    p.add_argument("--sensitivity-seeds", default=None, metavar="S,S|none",
                   help="llm-mix: seeds of the sensitivity section (contention model "
                        "low/default/high, inference share 0.2/0.4/0.6, load 0.25/0.5/0.75; "
                        "exclusive and elastico at the smallest --gpus size); 'none' skips it "
                        f"(default: {LLM_MIX_DEFAULTS['sensitivity_seeds']})")
    p.add_argument("--llm-jobs", default=None, metavar="FILE|demo",
                   help="also replay offline LLM inference jobs from a jobs file, or demo "
                        "(as simulate's --llm-jobs); with continuous arrivals they arrive "
                        "over the measurement window (uniform times: a Poisson process given "
                        "its count), so the window metrics count them; each run's results.json "
                        "entry lists them under llm_jobs and their own window metrics under "
                        "llm_window (default: none)")
    p.add_argument("--assume-profiled", action="store_true",
                   help="every job has its solo activity profile from the start (as "
                        "'elastico simulate --assume-profiled'); default: jobs arrive unknown "
                        "and are profiled after 60 s alone, as 'elastico simulate' runs them "
                        "(docs/predictor.md, 'Unknown jobs')")
    p.add_argument("--no-mig-lending", action="store_true",
                   help="keep every node's MIG mode fixed (the behaviour before MIG lending); "
                        "default: elastico and its MIG-using ablations lend an empty MIG-mode "
                        "node whole while jobs wait that only whole GPUs serve, as the live "
                        "loop does (docs/model.md 5.)")
    p.add_argument("--out", type=_folder, default=Path("docs/evaluation"), metavar="DIR",
                   help="output folder (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=None, metavar="PROCESSES",
                   help="number of parallel worker processes running the simulations, "
                        "1..256 (not a pod count: pods per run are --jobs-per-gpu x --gpus; "
                        "simulate's --jobs is a pod count) (default: the CPU count)")
    p.set_defaults(func=run)


def _sweep_default():
    from elastico.sim.evaluate import SWEEP_LOADS

    return SWEEP_LOADS


def _loads(flag: str, text: str) -> list[float]:
    """Comma-separated offered loads, each a finite number in (0, 10], or 'none' (empty)."""
    if text.strip().lower() == "none":
        return []
    out = []
    for tok in text.split(","):
        try:
            v = float(tok)
        except ValueError:
            raise InvalidArgument(flag, text, "comma-separated numbers in (0, 10], or "
                                              "'none'") from None
        if not (math.isfinite(v) and 0 < v <= 10):
            raise InvalidArgument(flag, v, "each a number in (0, 10]")
        out.append(v)
    if len(set(out)) != len(out):
        raise InvalidArgument(flag, text, "no value twice")
    return sorted(out)


def _ints(flag: str, text: str, lo: int, hi: int | None = None) -> list[int]:
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        try:
            v = int(tok)
        except ValueError:
            raise InvalidArgument(flag, text, "comma-separated integers") from None
        if v < lo or (hi is not None and v > hi):
            raise InvalidArgument(flag, v, f"each in {lo}..{hi}" if hi else f"each >= {lo}")
        out.append(v)
    if len(set(out)) != len(out):
        raise InvalidArgument(flag, text, "no value twice")
    return out


def _names(flag: str, text: str) -> list[str]:
    out = [t.strip() for t in text.split(",")]
    if not all(out):
        raise InvalidArgument(flag, text, "comma-separated non-empty names")
    if len(set(out)) != len(out):
        raise InvalidArgument(flag, text, "no name twice")
    return out


def workloads(args: argparse.Namespace) -> list[str]:
    """The --workload list, each checked (InvalidArgument naming the flag)."""
    from elastico.sim.llm_mix import check_workload

    text = getattr(args, "workload", "openb") or "openb"
    return [check_workload(w, "--workload") for w in _names("--workload", text)]


def resolve(args: argparse.Namespace, workload: str) -> argparse.Namespace:
    """``args`` with every per-workload flag the user left out set to ``workload``'s default
    (:data:`OPENB_DEFAULTS`, :data:`LLM_MIX_DEFAULTS`); a flag given applies to every
    workload."""
    d = LLM_MIX_DEFAULTS if workload == "llm-mix" else OPENB_DEFAULTS
    out = argparse.Namespace(**vars(args))
    for key, value in d.items():
        if getattr(out, key, None) is None:
            setattr(out, key, value)
    if out.sweep_loads is None:
        out.sweep_loads = _default_sweep_text()
    return out


def parse(args: argparse.Namespace, workload: str | None = None):
    """Every flag checked (InvalidArgument naming it) -> (specs, gpus, policies, seeds,
    settings, workers) of ``workload`` (default: the first of --workload), with that
    workload's defaults (:func:`resolve`) for the flags left out."""
    from elastico.sim.clusters import load_cluster

    names = workloads(args)
    if workload is None:
        workload = names[0]
    args = resolve(args, workload)
    from elastico.sim.evaluate import Settings
    from elastico.placer.policies import POLICIES
    from elastico.paths import check_output_dir, check_output_file
    from elastico.sim.report import EVALUATION_FILES, REPORT_FILES

    gpus = _ints("--gpus", args.gpus, 1, MAX_GPUS)
    seeds = _ints("--seeds", args.seeds, 0)
    policies = _names("--policies", args.policies)
    for name in policies:
        if name not in POLICIES:
            raise InvalidArgument("--policies", name, "one of " + ", ".join(POLICIES))
    specs = []
    for ref in _names("--clusters", args.clusters):
        try:
            specs.append(load_cluster(ref))
        except InvalidArgument as e:
            field = "--clusters" if e.field == "cluster" else f"--clusters {ref}: {e.field}"
            raise InvalidArgument(field, e.value, e.allowed) from None
    if len({s.name for s in specs}) != len(specs):
        raise InvalidArgument("--clusters", args.clusters, "clusters with distinct names")
    for s in specs:  # a size a definition cannot build fails now, not after an hour of runs
        for g in gpus:
            try:
                if s.pools:
                    s.nodes(g)
            except InvalidArgument as e:
                raise InvalidArgument("--gpus", g, e.allowed) from None
    if not (math.isfinite(args.jobs_per_gpu) and 0 < args.jobs_per_gpu <= 100):
        raise InvalidArgument("--jobs-per-gpu", args.jobs_per_gpu, "a number in (0, 100]")
    from elastico.sim.workload import MAX_LOAD

    if args.load is not None and not (math.isfinite(args.load) and 0 < args.load <= MAX_LOAD):
        raise InvalidArgument("--load", args.load, f"a number in (0, {MAX_LOAD:g}] (as "
                              "--sweep-loads)")
    if not (math.isfinite(args.restart_s) and 0 <= args.restart_s <= 86_400):
        raise InvalidArgument("--restart-s", args.restart_s, "in 0..86400")
    if args.jobs is not None and not (1 <= args.jobs <= 256):
        raise InvalidArgument("--jobs", args.jobs, "an integer in 1..256")
    check_output_dir("--out", args.out)
    if args.out.is_dir():  # every file the report replaces, before an hour of runs
        for name in dict.fromkeys(REPORT_FILES + EVALUATION_FILES):
            if (args.out / name).parent.is_dir():  # a workload's folder is made if missing
                check_output_file("--out", args.out / name)
    arrivals = getattr(args, "arrivals", "trace")
    quantile = getattr(args, "window_quantile", DEFAULT_WINDOW_QUANTILE)
    if not (math.isfinite(quantile) and 0 < quantile < 1):
        raise InvalidArgument("--window-quantile", quantile, "a number in (0, 1)")
    load = args.load
    if load is None and arrivals == "continuous":
        load = DEFAULT_CONTINUOUS_LOAD
    llm_jobs = getattr(args, "llm_jobs", None)
    if llm_jobs is not None:  # read now: a bad file must not fail after an hour of runs
        from elastico.sim.llm_workload import load_llm_jobs

        try:
            load_llm_jobs(llm_jobs)
        except InvalidArgument as e:
            raise InvalidArgument(f"--llm-jobs {e.field}", e.value, e.allowed) from None
    u = getattr(args, "undisclosed_gpu_speed", 1.0)
    if not (math.isfinite(u) and 0 < u <= 20):
        raise InvalidArgument("--undisclosed-gpu-speed", u,
                              "a factor of the reference V100's speed in (0, 20]")
    from elastico.perf.contention import contention_params

    contention = getattr(args, "contention", "default")
    contention_params(contention)  # refused (field, value, allowed) before any run
    from elastico.sim.llm_mix import (DEFAULT_INFERENCE_SHARE, LLM_MIX, check_inference_share,
                                      check_workload)

    wkl = check_workload(workload, "--workload")
    share = getattr(args, "inference_share", None)
    if share is not None and LLM_MIX not in names:
        raise InvalidArgument("--inference-share", share, "only with --workload llm-mix")
    share = DEFAULT_INFERENCE_SHARE if share is None else check_inference_share(
        share, "--inference-share")
    if wkl == LLM_MIX and arrivals != "continuous":
        raise InvalidArgument("--arrivals", arrivals, "continuous with --workload llm-mix (its "
                                                      "jobs arrive over a window)")
    settings = Settings(jobs_per_gpu=args.jobs_per_gpu, load=load,
                        restart_s=args.restart_s, utility=args.utility, arrivals=arrivals,
                        window_quantile=quantile, gpu_speed=args.gpu_speed_sensitivity,
                        remaining_estimate=args.remaining_estimate, llm_jobs=llm_jobs,
                        undisclosed_speed=float(u),
                        contention=contention,
                        assume_profiled=bool(getattr(args, "assume_profiled", False)),
                        mig_lending=not getattr(args, "no_mig_lending", False),
                        workload=wkl, inference_share=share)
    if args.load is not None and arrivals == "trace":
        _check_load(specs, gpus, seeds, settings)
    if wkl == LLM_MIX:  # a cluster no LLM fits fails now, not inside a worker
        from elastico import trace
        from elastico.sim.llm_mix import check_cluster

        nodes_all = trace.read_nodes()
        for s in specs:
            for g in gpus:
                try:
                    check_cluster(s.nodes(g, nodes_all), share)
                except InvalidArgument as e:
                    raise InvalidArgument("--clusters", f"{s.label(g)} ({e.value})",
                                          e.allowed.replace("inference_share", "--inference-share")
                                          ) from None
    return specs, gpus, policies, seeds, settings, args.jobs or os.cpu_count() or 1


def parse_sweep(args: argparse.Namespace, settings,
                gpus: list[int] | None = None) -> tuple[list[float], list[int], list[int]]:
    """(sweep loads, sweep seeds, sweep sizes); no sweep (empty loads) with ``--arrivals
    trace``, where the backlog test has no window (docs/metrics.md, "Sustainable load").
    ``gpus``: the evaluation's sizes, which every sweep size must be one of."""
    loads = _loads("--sweep-loads", getattr(args, "sweep_loads", "none"))
    seeds = _ints("--sweep-seeds", getattr(args, "sweep_seeds", DEFAULT_SWEEP_SEEDS), 0)
    text = getattr(args, "sweep_gpus", DEFAULT_SWEEP_GPUS)
    if text is None:
        sizes = [min(gpus)] if gpus else []
    else:
        sizes = _ints("--sweep-gpus", text, 1, MAX_GPUS)
    if gpus is not None:
        for g in sizes:
            if g not in gpus:
                raise InvalidArgument("--sweep-gpus", g, "one of --gpus ("
                                      + ",".join(map(str, gpus)) + ")")
    if settings.arrivals != "continuous":
        if loads and getattr(args, "sweep_loads", None) not in (None, _default_sweep_text()):
            raise InvalidArgument("--sweep-loads", args.sweep_loads,
                                  "only with --arrivals continuous (the backlog test needs a "
                                  "measurement window); give 'none'")
        loads = []
    return loads, seeds, sizes


def _default_sweep_text() -> str:
    return ",".join(f"{x:g}" for x in _sweep_default())


def _check_load(specs, gpus: list[int], seeds: list[int], settings) -> None:
    """An explicit --load that some run's workload cannot offer fails now, naming the flag,
    not after the runs start.  Builds each workload as :func:`elastico.sim.evaluate.run_one` does
    (``jobs_per_gpu x gpus`` pods; ~20 ms each)."""
    from elastico import trace
    from elastico.sim import workload
    from elastico.perf.throughput import ThroughputModel

    nodes_all, pods, model = trace.read_nodes(), trace.read_pods(), ThroughputModel.bundled()
    for s in specs:
        for g in gpus:
            nodes = s.nodes(g, nodes_all)
            for seed in seeds:
                n_jobs = max(1, int(round(settings.jobs_per_gpu * g)))
                try:
                    wl = workload.build_workload(pods, nodes, seed=seed, load=settings.load,
                                                 model=model, jobs=n_jobs)
                except InvalidArgument as e:
                    if e.field != "load":
                        raise
                    hint = ("raise --load" if workload.load_is_too_low(e)
                            else "lower --load or raise --jobs-per-gpu")
                    raise InvalidArgument("--load", settings.load,
                                          f"{e.allowed} (cluster {s.label(g)}, seed {seed}); "
                                          f"{hint}") from None
                if not math.isfinite(wl.offered_load):
                    raise InvalidArgument("--load", settings.load,
                                          f"cannot be met on cluster {s.label(g)}, seed {seed}: "
                                          "its pods have fewer than two distinct arrival "
                                          "times; leave --load out or raise --jobs-per-gpu")


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _folder(text: str) -> Path:
    # Path("") is ".": an empty --out would quietly write the report where the command runs
    if not text.strip():
        raise argparse.ArgumentTypeError("an output folder, not an empty string")
    return Path(text)


def _policies_at(policies: list[str], large: list[str] | None, gpus: list[int]):
    """``size -> policies``: every policy at each size but the largest of several, where only
    ``large`` (None: all) run."""
    top = max(gpus)
    return {g: (policies if (large is None or len(gpus) == 1 or g != top)
                else [p for p in policies if p in large]) for g in gpus}


def _large(args: argparse.Namespace, policies: list[str],
           explicit: bool = True) -> list[str] | None:
    """--large-policies (None: all); a workload's default keeps those among --policies."""
    return _subset("--large-policies", getattr(args, "large_policies", None), policies,
                   explicit)


def _subset(flag: str, text: str | None, policies: list[str],
            explicit: bool = True) -> list[str] | None:
    """A policy list that must be within --policies (None or 'all': all of them); a
    workload's default (``explicit`` False) keeps those among --policies."""
    if text is None or text.strip().lower() == "all":
        return None
    out = _names(flag, text)
    if not explicit:
        return [p for p in out if p in policies]
    for name in out:
        if name not in policies:
            raise InvalidArgument(flag, name, "one of --policies (" + ",".join(policies) + ")")
    return out


def plan(args: argparse.Namespace) -> list[dict]:
    """Every workload's runs, checked before any starts: per workload (--workload) a dict with
    ``workload``, ``args`` (resolved), ``specs``, ``gpus``, ``policies``, ``seeds``,
    ``settings``, ``workers``, ``main`` (tasks), ``sweep`` (tasks), ``sweep_loads``,
    ``sweep_seeds``, ``sweep_gpus`` and ``sensitivity`` (``[(task, parameter, value)]``)."""
    from dataclasses import replace

    from elastico.sim.evaluate import Task, sweep_tasks

    plans = []
    for w in workloads(args):
        specs, gpus, policies, seeds, settings, workers = parse(args, w)
        a = resolve(args, w)
        large = _large(a, policies, getattr(args, "large_policies", None) is not None)
        at = _policies_at(policies, large, gpus)
        sweep_loads, sweep_seeds, sweep_gpus = parse_sweep(a, settings, gpus)
        main = [Task(s, g, p, seed, settings) for s in specs for g in gpus for p in at[g]
                for seed in seeds]
        swept = _subset("--sweep-policies", getattr(a, "sweep_policies", None), policies,
                        getattr(args, "sweep_policies", None) is not None)
        sweep = [t for g in sweep_gpus
                 for t in sweep_tasks(specs, [g], [p for p in at[g]
                                                   if swept is None or p in swept],
                                      sweep_seeds, sweep_loads, settings)]
        sens: list[tuple] = []
        text = getattr(a, "sensitivity_seeds", "none") or "none"
        if w == "llm-mix" and text.strip().lower() != "none":
            s_seeds = _ints("--sensitivity-seeds", text, 0)
            g = min(gpus)
            for par, values in SENSITIVITY:
                for v in values:
                    if par == "contention":
                        st = replace(settings, contention=v)
                    elif par == "inference share":
                        st = replace(settings, inference_share=float(v))
                    else:
                        st = replace(settings, load=float(v))
                    for spec in specs:
                        for pol in SENSITIVITY_POLICIES:
                            if pol in policies:
                                for seed in s_seeds:
                                    sens.append((Task(spec, g, pol, seed, st), par, v))
        plans.append({"workload": w, "args": a, "specs": specs, "gpus": gpus,
                      "policies": policies, "seeds": seeds, "settings": settings,
                      "workers": workers, "main": main, "sweep": sweep,
                      "sweep_loads": sweep_loads, "sweep_seeds": sweep_seeds,
                      "sweep_gpus": sweep_gpus, "sensitivity": sens, "at": at})
    return plans


def run(args: argparse.Namespace) -> int:
    from elastico.cli import count_of
    from elastico.sim.evaluate import (SweepLadder, run_tasks, sustainable_loads,
                                       sustainable_loads_by_seed)
    from elastico.sim.report import write_evaluation, write_report

    plans = plan(args)
    workers = plans[0]["workers"]
    main = [t for pl in plans for t in pl["main"]]
    sens = list(dict.fromkeys(t for pl in plans for t, _, _ in pl["sensitivity"]))
    extra = [t for t in sens if t not in set(main)]
    # the sweep walks each (cluster, policy, seed) up its loads and stops above the first load
    # whose backlog grows (no higher one can be sustainable); a sweep point that is also a
    # main run (same cluster, size, policy, seed and load) is not run twice
    ladder = SweepLadder([t for pl in plans for t in pl["sweep"]], main)
    in_main = set(main) | set(extra)
    # a sensitivity run's label in the progress lines (the main runs' own have none)
    label = {t: f" [{par} {v}]" for pl in plans for t, par, v in pl["sensitivity"]
             if t not in set(main)}
    n_main = len(main) + len(extra)
    n_sweep = ladder.most_runs()
    t0 = time.perf_counter()
    if len(plans) == 1 and not plans[0]["sensitivity"] and len(
            {len(v) for v in plans[0]["at"].values()}) == 1:
        pl = plans[0]
        print(f"evaluate: {count_of(len(main), 'run')} "
              f"({count_of(len(pl['specs']), 'cluster definition')} x "
              f"{count_of(len(pl['gpus']), 'size')} x "
              f"{count_of(len(pl['policies']), 'policy', 'policies')} x "
              f"{count_of(len(pl['seeds']), 'seed')})"
              + (f" and up to {count_of(n_sweep, 'load-sweep run')}" if n_sweep else "")
              + f" on {count_of(workers, 'process', 'processes')}",
              file=sys.stderr, flush=True)
    for pl in plans if len(plans) > 1 or plans[0]["sensitivity"] or len(
            {len(v) for v in plans[0]["at"].values()}) > 1 else ():
        print(f"evaluate {pl['workload']}: {count_of(len(pl['main']), 'run')} "
              f"({count_of(len(pl['specs']), 'cluster definition')} x "
              f"{count_of(len(pl['gpus']), 'size')} x "
              f"{count_of(len(pl['policies']), 'policy', 'policies')} x "
              f"{count_of(len(pl['seeds']), 'seed')}"
              + (f"; {', '.join(str(len(v)) for v in pl['at'].values())} policies by size"
                 if len({len(v) for v in pl['at'].values()}) > 1 else "") + ")"
              + (f", {count_of(len(pl['sensitivity']), 'sensitivity point')}"
                 if pl["sensitivity"] else ""),
              file=sys.stderr, flush=True)
    if len(plans) > 1 or plans[0]["sensitivity"] or len(
            {len(v) for v in plans[0]["at"].values()}) > 1:
        print(f"evaluate: {count_of(n_main, 'run')}"
              + (f" and up to {count_of(n_sweep, 'load-sweep run')}" if n_sweep else "")
              + f" on {count_of(workers, 'process', 'processes')}", file=sys.stderr, flush=True)

    counts = {"main": 0, "sweep": 0}

    def progress(_done, _total, task, out):
        r = out.run
        kind = "main" if task in in_main else "sweep"
        counts[kind] += 1
        # main runs: k of all; sweep runs: k of at most n_sweep (the walk may stop early)
        head = (f"[{'' if kind == 'main' else 'sweep '}{counts[kind]}/"
                f"{n_main if kind == 'main' else n_sweep} "
                f"{time.perf_counter() - t0:,.0f}s] {task.settings.workload} ")
        if kind == "main":
            what = (f"{task.cluster} {task.policy} seed {task.seed}{label.get(task, '')}: avg JCT "
                    f"{r['avg_jct_s']:,.0f} s, {r['jobs_per_hour']:,.2f} jobs/h, "
                    f"util {r['gpu_utilization']:.1%}")
        else:  # stopped at the window's end: no JCT (docs/metrics.md, "Sustainable load")
            what = (f"{task.cluster} {task.policy} seed {task.seed} load "
                    f"{task.settings.load:g}: backlog "
                    f"{'bounded' if r['backlog_bounded'] else 'growing'} "
                    f"({r['queue_growth']:+,.1f} jobs), util {r['gpu_utilization']:.1%}")
        print(f"{head}{what} ({r['wall_s']:,.0f} s)", file=sys.stderr, flush=True)

    # SIGTERM (a CI job cancelled, `kill`) ends the run as Ctrl-C does, up to the last file
    # moved into place: the worker processes are stopped, the staging folder removed, the
    # previous report left whole (`elastico: interrupted`, exit 130)
    old_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        done = run_tasks(main + extra + ladder.start(), workers=workers, progress=progress,
                         then=ladder.done, priority=ladder.priority)
        wall = time.perf_counter() - t0
        sweep_all = ladder.runs()
        parts = []
        for pl in plans:
            w, settings, a = pl["workload"], pl["settings"], pl["args"]
            outs = [done[t] for t in pl["main"]]
            sweep = [r for r in sweep_all if r.get("workload", "openb") == w]
            _set_sustainable(outs, sweep, sustainable_loads, sustainable_loads_by_seed)
            sens_runs = []
            for t, par, v in pl["sensitivity"]:
                r = dict(done[t].run)
                r["sensitivity"] = {"parameter": par, "value": v}
                sens_runs.append(r)
            meta = {"settings": _settings_text(pl, a, settings, workers, wall),
                    "closing": _closing_note(args.out / _report_dir(w))}
            parts.append({"workload": w, "outs": outs, "meta": meta, "sweep": sweep,
                          "sensitivity": sens_runs})
        if len(parts) == 1 and parts[0]["workload"] == "openb":
            # one openb evaluation: the report folder as before issue 24
            p0 = parts[0]
            paths = write_report(p0["outs"], args.out, p0["meta"], sweep=p0["sweep"])
        else:
            paths = write_evaluation(parts, args.out)
        print(f"evaluate: wrote {', '.join(str(p) for p in paths)} in {wall / 60:.1f} min",
              file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _report_dir(workload: str) -> str:
    from elastico.sim.report import REPORT_DIRS

    return REPORT_DIRS.get(workload, workload)


def _set_sustainable(outs, sweep, sustainable_loads, sustainable_loads_by_seed) -> None:
    """Each main run's ``sustainable_load`` (and per seed, median) from its workload's sweep
    runs (docs/metrics.md, "Sustainable load"); null where no sweep ran at that size."""
    sustain = sustainable_loads(sweep) if sweep else {}
    by_seed = sustainable_loads_by_seed(sweep) if sweep else {}
    for o in outs:  # per (cluster, policy); null without a sweep
        key = (o.run["cluster"], o.run["policy"])
        o.run["sustainable_load"] = sustain.get(key)
        # per sweep seed (JSON keys are strings) and their median (the spread over seeds:
        # docs/metrics.md, "Sustainable load"); null without a sweep
        seeds_of = by_seed.get(key)
        o.run["sustainable_load_by_seed"] = (
            {str(k): v for k, v in seeds_of.items()} if seeds_of else None)
        o.run["sustainable_load_median"] = (
            float(statistics.median(seeds_of.values())) if seeds_of else None)


def _settings_text(pl: dict, args, settings, workers: int, wall: float) -> dict:
    sweep_loads, sweep_seeds, sweep_gpus = pl["sweep_loads"], pl["sweep_seeds"], pl["sweep_gpus"]
    at = pl["at"]
    return {
        # as --clusters takes them (a definition's own name, e.g. a100h100, labels its rows)
        **({"workload": f"llm-mix (inference share {settings.inference_share:g})"}
           if settings.workload == "llm-mix" else {}),
        "clusters": ", ".join(_names("--clusters", args.clusters)),
        "GPUs": ", ".join(map(str, pl["gpus"])),
        **({"policies at " + str(max(at)) + " GPUs": ", ".join(at[max(at)])}
           if len({len(v) for v in at.values()}) > 1 else {}),
        "seeds": ", ".join(map(str, pl["seeds"])),
        **({"jobs per GPU": f"{settings.jobs_per_gpu:g}"} if settings.arrivals == "trace"
           else {}),
        "load": "default (1.0, or 0.9 of the maximum)" if settings.load is None
        else f"{settings.load:g}", "restart": f"{settings.restart_s:g} s",
        "utility": settings.utility, "arrivals": settings.arrivals,
        **({"window quantile": f"{settings.window_quantile:g}"}
           if settings.arrivals == "continuous" else {}),
        "load sweep": (", ".join(f"{x:g}" for x in sweep_loads) + " (seeds "
                       + ", ".join(map(str, sweep_seeds)) + "; GPUs "
                       + ", ".join(map(str, sweep_gpus)) + ")") if sweep_loads else "none",
        **({"sensitivity": f"{len(pl['sensitivity'])} points (seeds "
            + ", ".join(sorted({str(t.seed) for t, _, _ in pl['sensitivity']})) + ")"}
           if pl["sensitivity"] else {}),
        "remaining work": settings.remaining_estimate,
        **({"LLM jobs": settings.llm_jobs} if settings.llm_jobs else {}),
        "GPU speed of unmeasured models": settings.gpu_speed,
        **({"G2/G3 speed (x V100)": f"{settings.undisclosed_speed:g}"}
           if settings.undisclosed_speed != 1.0 else {}),
        "contention model (unmeasured pairs)": settings.contention,
        "solo profiles": "every job profiled from the start (--assume-profiled)"
        if settings.assume_profiled else "jobs arrive unknown, profiled after 60 s alone",
        "MIG lending": "on (an empty MIG-mode node lent whole while jobs wait that only whole "
        "GPUs serve; docs/model.md 5.)" if settings.mig_lending
        else "off: MIG mode fixed (--no-mig-lending)",
        "processes": workers,
        "wall time (all workloads)": f"{wall / 60:.1f} min",
    }


def _closing_note(out: Path) -> str:
    """A closing note kept beside the report (``closing.md``, written by a person who read
    the numbers) is carried into it; the runner never invents one."""
    p = out / "closing.md"
    try:
        return p.read_text(encoding="utf-8") if p.is_file() else ""
    except OSError:
        return ""
