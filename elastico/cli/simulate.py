"""``elastico simulate``: replay the Alibaba GPU trace through one or more policies.

Two modes.  ``--mode replay`` (default) builds the cluster (:func:`elastico.trace.read_nodes`, :func:`elastico.trace.sub_cluster`),
the workload (:func:`elastico.sim.workload.build_workload`), runs :func:`elastico.sim.simulator.simulate`
per policy and prints the summary table; ``--json FILE`` writes the metrics (keys in
docs/metrics.md).  ``--mode inflation`` runs FGD's workload-inflation benchmark
(:mod:`elastico.placer.inflation`, docs/placement.md) on the full trace cluster: one openb
workload, one seed, the placement policies ``random``, ``bestfit``, ``packing``, ``fgd`` and
``elastico``, and prints the unallocated GPU % at 100 % and 130 % arrived load beside FGD's
published numbers (:func:`published_fgd`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from elastico.cli import count_of
from elastico.errors import InvalidArgument
from elastico.paths import check_input_file, check_output_file
from elastico.tracing import NOOP

_ROWS = [
    ("avg_jct_s", "avg JCT (s)", "{:,.0f}"),
    ("p50_jct_s", "p50 JCT (s)", "{:,.0f}"),
    ("p95_jct_s", "p95 JCT (s)", "{:,.0f}"),
    ("p99_jct_s", "p99 JCT (s)", "{:,.0f}"),
    ("avg_queue_s", "avg queueing (s)", "{:,.0f}"),
    ("makespan_s", "makespan (s)", "{:,.0f}"),
    ("jobs_per_hour", "jobs/h in window", "{:,.2f}"),
    ("work_per_hour", "GPU-h/h in window", "{:,.2f}"),
    ("avg_slowdown", "avg slowdown", "{:,.2f}"),
    ("p50_slowdown", "p50 slowdown", "{:,.2f}"),
    ("avg_jct_short_s", "avg JCT short (s)", "{:,.0f}"),
    ("avg_jct_long_s", "avg JCT long (s)", "{:,.0f}"),
    ("jobs_completed", "batch jobs completed", "{:,.0f}"),
    ("jobs_unfinished", "batch jobs unfinished", "{:,.0f}"),
    ("jobs_censored", "censored (not in JCT)", "{:,.0f}"),
    ("jobs_window_unfinished", "window jobs not in JCT", "{:,.0f}"),
    ("service_avg_queue_s", "service queueing (s)", "{:,.0f}"),
    ("services_never_placed", "services never placed", "{:,.0f}"),
    ("gpu_allocation", "GPU allocation", "{:.1%}"),
    ("gpu_utilization", "GPU util. (not DCGM)", "{:.1%}"),  # busy compute: docs/metrics.md
    ("dcgm_sm_active", "SM activity (DCGM)", "{:.1%}"),
    ("dcgm_gpu_util", "GPU util (DCGM)", "{:.1%}"),
    ("restarts", "reconfigurations", "{:,.0f}"),
    ("evictions", "evictions", "{:,.0f}"),
    ("shrinks", "shrinks", "{:,.0f}"),
    ("mig_mode_switches", "MIG mode changes", "{:,.0f}"),
    ("wasted_gpu_s", "wasted GPU-s", "{:,.0f}"),
    ("wasted_tokens", "wasted tokens", "{:,.3g}"),
    ("round_ms_p50", "round p50 (ms)", "{:,.2f}"),
    ("round_ms_p99", "round p99 (ms)", "{:,.2f}"),
]

#: printed when some run has them (issue 23: jobs arrive unknown unless --assume-profiled)
_UNKNOWN_ROWS = [
    ("batch_bound_violations", "batch past bound", "{:,.0f}"),
    ("unknown_jobs_profiled", "jobs profiled (at least one slot)", "{:,.0f}"),
    ("unknown_profiles_recorded", "solo profiles recorded (per GPU model / share)", "{:,.0f}"),
    ("unknown_bound_violation_jobs", "unknown >5% past bound", "{:,.0f}"),
    ("unknown_bound_violation_any", "unknown past bound", "{:,.0f}"),
    ("unknown_bound_violation_time_share", "unknown time past bnd", "{:.2%}"),
    ("unknown_bound_violation_max", "unknown max overshoot", "{:.1%}"),
]

MAX_RESTART_S = 86_400.0  # a checkpoint/restore longer than a day is a typo, not a model
#: --jobs at most this many pods per GPU: beyond it the queue grows for simulated weeks and a
#: replay takes hours (8 GPUs x all 6,198 eligible pods ran > 15 min); evaluate uses 2
MAX_JOBS_PER_GPU = 32
#: the replay-only flags (dest, flag, default); set explicitly with --mode inflation they
#: are refused rather than ignored
_REPLAY_ONLY = (("gpus", "--gpus", 512), ("jobs", "--jobs", None), ("load", "--load", None),
                ("cluster", "--cluster", None), ("utility", "--utility", "jct"),
                ("restart_s", "--restart-s", 30.0), ("slowdown_model", "--slowdown-model",
                                                     "predictor"),
                ("via_grpc", "--via-grpc", None), ("arrivals", "--arrivals", "trace"),
                ("gpu_speed_sensitivity", "--gpu-speed-sensitivity", "datasheet"),
                ("undisclosed_gpu_speed", "--undisclosed-gpu-speed", 1.0),
                ("remaining_estimate", "--remaining-estimate", "elapsed"),
                ("user_estimate_badness", "--user-estimate-badness", 3.0),
                ("llm_jobs", "--llm-jobs", None), ("llm_load_gbps", "--llm-load-gbps", None),
                ("contention", "--contention", "default"),
                ("overrun_windows", "--overrun-windows", None),
                ("mps_replicas", "--mps-replicas", 2), ("min_run_s", "--min-run-s", 300.0),
                ("no_preemption", "--no-preemption", False),
                ("mig_lending", "--mig-lending", True),
                ("assume_profiled", "--assume-profiled", False))

#: ``--user-estimate-badness`` default: Mu'alem & Feitelson's f-model (IEEE TPDS 12(6), 2001),
#: a user's estimate of a run of r seconds is uniform in [r, (f + 1) r]; f = 3 is a sensitivity
#: setting, not a fit (docs/model.md, "Remaining work").
MAX_BADNESS = 1000.0


def register(sub: argparse._SubParsersAction) -> None:
    from elastico.pricing import UTILITIES
    from elastico.placer.policies import POLICIES

    p = sub.add_parser(
        "simulate",
        help="replay the bundled Alibaba GPU trace through scheduling policies",
        description="Discrete-event replay of the Alibaba GPU trace v2023 (openb) on a "
                    "deterministic sub-cluster of its GPU nodes, or (--workload llm-mix) of "
                    "training and bursty offline LLM inference on a cluster definition.  "
                    "Prints one column per policy; docs/metrics.md defines every metric and "
                    "docs/model.md the workloads (sampling, kinds, load).",
    )
    p.add_argument("--trace", type=Path, default=None, metavar="CSV",
                   help="pod list (default: the bundled openb_pod_list_default.csv)")
    p.add_argument("--nodes", type=Path, default=None, metavar="CSV",
                   help="node list (default: the bundled openb_node_list_gpu_node.csv)")
    p.add_argument("--cluster", default=None, metavar="NAME|FILE.yaml",
                   help="replay on a cluster definition -- a .yaml file, a bundled name "
                        "(a100-mig, a100h100-mig; data/clusters/, elastico/sim/clusters.py) or "
                        "trace (the trace's own GPU mix, as without --cluster) -- with --gpus "
                        "GPUs instead of the trace's own GPU mix")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs in the deterministic sub-cluster, 1..6212 for the bundled "
                        "node list (replay; default: 512); with --cluster, whole nodes: a "
                        "multiple of the definition's node step (16 for a100-mig, 64 for "
                        "a100h100-mig), at most 65,536")
    p.add_argument("--jobs", type=int, default=None,
                   help="trace pods to replay, drawn without replacement (seeded) from the "
                        "eligible GPU pods, trace order kept, at most "
                        f"{MAX_JOBS_PER_GPU} x --gpus (more queue for simulated weeks and "
                        "take hours to replay) (replay; default: 4 x --gpus); "
                        "0 = a proportional share of the trace (GPUs/6212 of its pods).  "
                        "Trace arrivals only: --arrivals continuous and --workload llm-mix "
                        "size the workload from --load and the measurement window, so neither "
                        "--jobs nor its cap applies there (--jobs is refused with them)")
    from elastico.placer.inflation import POLICIES as INFLATION_POLICIES

    p.add_argument("--mode", choices=("replay", "inflation"), default="replay",
                   help="replay: trace-driven replay with arrivals and departures; "
                        "inflation: FGD's benchmark (pods shuffled by --seed, copies appended "
                        "to 130%% of the cluster's GPUs, placed one at a time, none leave; "
                        "docs/placement.md) (default: %(default)s)")
    p.add_argument("--policy", action="append", metavar="POLICY",
                   help=f"policy to simulate; repeat for several.  replay: "
                        f"{', '.join(sorted(POLICIES))} (default: exclusive and elastico); "
                        f"inflation: {', '.join(INFLATION_POLICIES)} (default: all)")
    p.add_argument("--workload", default=None, metavar="NAME",
                   help="replay: openb (the trace's pods) or llm-mix (training jobs and bursty "
                        "offline LLM inference, continuous arrivals; docs/model.md, \"The "
                        "llm-mix workload\"; without --cluster on a100h100-mig) (default: "
                        "openb); inflation: the openb pod list "
                        "openb_pod_list_NAME.csv (e.g. default, cpu050, gpushare40, gpuspec10, "
                        "multigpu20; --trace overrides it) (default: default)")
    p.add_argument("--inference-share", type=float, default=None, metavar="S",
                   help="--workload llm-mix: share of the offered demand that is offline LLM "
                        "inference, in [0, 1] (default: 0.4)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for pod sampling and job types (replay, default 0) or for the "
                        "inflation workload's shuffle and copies (inflation, default 42)")
    p.add_argument("--load", type=float, default=None,
                   help="offered load: average fraction of the cluster's GPUs the pods "
                        "request during their arrival window (default: 1.0, or 0.9 of the "
                        "most the sampled pods can offer if that is less); needs pods "
                        "with at least two distinct arrival times")
    p.add_argument("--arrivals", choices=("trace", "continuous"), default=None,
                   help="trace: the sampled pods' own arrivals compressed to --load; "
                        "continuous: Poisson arrivals of trace pods over a warm-up, a "
                        "measurement window and a drain sized from the trace's batch "
                        "durations (p90; docs/model.md), --load = the demand offered in the "
                        "window; the number of jobs follows from --load and the window, "
                        f"--jobs and its {MAX_JOBS_PER_GPU} x --gpus cap do not apply (a high "
                        "--load on a few GPUs draws hundreds of jobs) (replay; default: trace)")
    p.add_argument("--overrun-windows", type=float, default=None, metavar="W",
                   help="continuous arrivals: after the drain, nothing arrives and the replay "
                        "goes on until every batch job that arrived in the measurement window "
                        "(censored trace lifetimes aside) has finished, for at most W (<= 1e9) "
                        "measurement windows, so that every "
                        "policy's JCT rows are over the same jobs (docs/metrics.md, \"Which "
                        "jobs count\"); 0 stops at the horizon (default: 100, a guard that no "
                        "stable run reaches)")
    p.add_argument("--utility", choices=sorted(UTILITIES), default=None,
                   help="elastico's objective (default: jct)")
    p.add_argument("--restart-s", type=float, default=None,
                   help="seconds of progress a running job loses when it changes "
                        f"configuration or restarts, 0..{MAX_RESTART_S:g} (default: 30.0)")
    p.add_argument("--mps-replicas", type=int, default=None, metavar="N",
                   help="mps-static: MPS replicas per GPU, the device plugin's "
                        "sharing.mps.replicas (1..48; default: 2)")
    p.add_argument("--min-run-s", type=float, default=None, metavar="S",
                   help="minimum guaranteed run of offline LLM inference before a job of "
                        "higher priority may evict it, every policy (docs/model.md 6.; "
                        "default: 300)")
    p.add_argument("--no-preemption", action="store_true", default=None,
                   help="no policy preempts offline LLM inference for jobs of higher priority")
    p.add_argument("--mig-lending", action=argparse.BooleanOptionalAction, default=None,
                   help="elastico and its MIG-using ablations lend an empty MIG-mode node's GPUs "
                        "whole to waiting jobs that no MIG instance can serve, and return them "
                        "to MIG mode after, as the live scheduler does (docs/model.md 5.; on by "
                        "default; --no-mig-lending keeps each node's MIG mode fixed; matters on "
                        "a cluster definition with MIG nodes, e.g. a100h100-mig)")
    p.add_argument("--slowdown-model", choices=("predictor", "analytic"), default=None,
                   help="what the placer predicts co-location slowdowns with: the LightGBM "
                        "predictor, k-fold by job type so that it never predicts a pair it "
                        "was trained on, or the analytic model; jobs run at Gavel's "
                        "measured slowdowns (docs/predictor.md) (default: predictor)")
    p.add_argument("--undisclosed-gpu-speed", type=float, default=None, metavar="U",
                   help="one-GPU speed of the trace's undisclosed G2/G3 as a factor of the "
                        "reference V100's: a sensitivity parameter, nothing measures it; its "
                        "reported band is 0.387 (a T4) to 2.52 (an A100-80GB), median over job "
                        "types (docs/model.md 2.) (default: 1, they run as the reference)")
    p.add_argument("--contention", default=None, metavar="PRESET|NAME=VALUE,...",
                   help="the ground truth's contention model where no measured pair applies "
                        "(GPU models other than K80/P100/V100, LLM inference jobs): low, "
                        "default or high, or explicit values such as "
                        "switch_overhead=0.1,bw_efficiency=0.8 (ranges in docs/model.md, "
                        "\"Interference on other GPU models\") (default: default)")
    p.add_argument("--gpu-speed-sensitivity", choices=("low", "datasheet", "high"),
                   default=None,
                   help="speed of GPU models no measurement covers (G2, G3, A10, H100, and "
                        "T4/A100 for job types without a Sia counterpart): their datasheet "
                        "factor vs V100 (datasheet), or it times the smallest (low) / largest "
                        "(high) error of that rule where Sia measured it (docs/model.md 2.) "
                        "(default: datasheet)")
    p.add_argument("--remaining-estimate", choices=("elapsed", "user", "oracle"), default=None,
                   help="what elastico believes a job's remaining work is: elapsed = from its "
                        "attained service and the trace's duration distribution; user = a "
                        "user's estimate with the f-model's error (--user-estimate-badness); "
                        "oracle = the true remaining work, a sensitivity run only (no live "
                        "system knows it; docs/model.md) (default: elapsed)")
    p.add_argument("--user-estimate-badness", type=float, default=None, metavar="F",
                   help="--remaining-estimate user: each job's estimate is uniform in "
                        "[work, (F + 1) x work] (Mu'alem & Feitelson's f-model), seeded by "
                        f"--seed; 0..{MAX_BADNESS:g} (default: 3)")
    p.add_argument("--llm-jobs", default=None, metavar="FILE|demo|train-demo",
                   help="also replay LLM jobs from a JSON jobs file (docs/model.md, \"LLM "
                        "inference jobs in the simulator\"; \"kind\": \"training\" entries "
                        "are LLM training / fine-tuning jobs, docs/model.md 9.), or demo: five "
                        "bundled offline inference jobs (Llama-3-8B, Mistral-7B, Mixtral-8x7B, "
                        "Llama-2-70B, Llama-3-70B fp8), or train-demo: three bundled training "
                        "jobs (Llama-2-7B and Llama-2-13B SFT, a Llama-3-8B continued "
                        "pre-training) beside two inference jobs, for an A100/H100 cluster such "
                        "as --cluster a100h100-mig; arrivals are counted from the workload's "
                        "first; a table of the LLM jobs (tokens, configuration, start-up, JCT) "
                        "follows the summary (replay)")
    p.add_argument("--llm-load-gbps", type=float, default=None, metavar="GB/S",
                   help="weight-loading bandwidth of an LLM job's start-up, GB/s (default: "
                        "7.877, a PCIe 4.0 x4 NVMe drive's interface; elastico/llm_shapes.py) "
                        "(replay)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE",
                   help="also write the metrics as JSON: flat for one policy, "
                        "{'runs': [...]} for several")
    p.add_argument("--via-grpc", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run every round through PlacerService.RunRound (pricing through "
                        "PricingService, prediction through PredictorService): the placer at "
                        "ADDRESS, or -- without one -- pricing, predictor and placer started "
                        "on free loopback ports for the run and stopped after it; the placer "
                        "service takes every job as profiled, so this implies "
                        "--assume-profiled, and the results equal the in-process run's with it "
                        "(replay mode)")
    p.epilog = ("--gpus, --jobs, --load, --cluster, --utility, --restart-s, --slowdown-model, "
                "--gpu-speed-sensitivity, --remaining-estimate, --user-estimate-badness, "
                "--llm-jobs, --llm-load-gbps, --contention, --arrivals, --overrun-windows, "
                "--undisclosed-gpu-speed, --mps-replicas, --min-run-s, --no-preemption, "
                "--mig-lending, --assume-profiled and --via-grpc are for --mode replay; a pod-list "
                "name as --workload (e.g. cpu050) is for --mode inflation; a flag given in the "
                "other mode is refused.")
    p.add_argument("--assume-profiled", action="store_true", default=None,
                   help="every job has its solo activity profile from the start (the behaviour "
                        "before issue 23, for comparison); default: jobs arrive unknown, the "
                        "elastico policy co-locates one only where the contention prior's worst "
                        "case keeps every resident within its bound, and records its solo "
                        "profile after 60 s alone (docs/predictor.md, 'Unknown jobs')")
    p.add_argument("--no-progress", action="store_true",
                   help="hide the progress bar (shown only on a terminal)")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    """Every flag checked before any work: a bad --json must not cost a 4-minute run."""
    from elastico.placer.inflation import POLICIES as INFLATION_POLICIES
    from elastico.placer.policies import POLICIES

    _check_mode_flags(args)
    allowed = INFLATION_POLICIES if args.mode == "inflation" else tuple(sorted(POLICIES))
    for name in args.policy or ():
        if name not in allowed:
            raise InvalidArgument("--policy", name, f"one of {', '.join(allowed)} in "
                                                    f"--mode {args.mode}")
    if args.policy and len(set(args.policy)) != len(args.policy):  # as evaluate --policies
        twice = next(n for n in args.policy if args.policy.count(n) > 1)
        raise InvalidArgument("--policy", twice, "given twice; name each policy once")
    if args.seed is None:
        args.seed = 42 if args.mode == "inflation" else 0
    if args.via_grpc is not None and args.remaining_estimate not in (None, "elapsed"):
        raise InvalidArgument("--remaining-estimate", args.remaining_estimate,
                              "elapsed with --via-grpc (the placer service plans with the "
                              "elapsed estimate; RunRound carries no other)")
    f = args.user_estimate_badness
    if f is not None and not (isinstance(f, float) and 0.0 <= f <= MAX_BADNESS):
        raise InvalidArgument("--user-estimate-badness", f, f"a number in [0, {MAX_BADNESS:g}]")
    if args.mode == "inflation" and args.trace is None:
        from elastico import trace

        if not args.workload or "/" in args.workload or "\\" in args.workload:
            raise InvalidArgument("--workload", args.workload, "a workload name such as default")
        folder = trace.data_file(trace.TRACE_DIR, trace.DEFAULT_PODS).parent
        path = folder / f"openb_pod_list_{args.workload}.csv"
        if not path.is_file():
            names = sorted(f.name[len("openb_pod_list_"):-4]
                           for f in folder.glob("openb_pod_list_*.csv")) if folder.is_dir() else []
            raise InvalidArgument("--workload", args.workload, "one of " + ", ".join(names))
        args.trace = path
    if args.gpus <= 0:
        raise InvalidArgument("--gpus", args.gpus, "must be a positive integer")
    sized = ("--arrivals continuous" if args.arrivals == "continuous"
             else "--workload llm-mix" if args.workload == "llm-mix" else None)
    if args.jobs is not None and sized and args.mode == "replay":
        # refused, not ignored, and before the --jobs bounds below, which do not apply
        raise InvalidArgument("--jobs", args.jobs, f"not with {sized}: the workload is sized "
                              "from --load and the measurement window, so --jobs and its "
                              f"{MAX_JOBS_PER_GPU} x --gpus cap do not apply; leave --jobs out")
    if args.jobs is not None and args.jobs < 0:
        raise InvalidArgument("--jobs", args.jobs, "must be an integer >= 0")
    if args.jobs is not None and args.jobs > MAX_JOBS_PER_GPU * args.gpus:
        raise InvalidArgument("--jobs", args.jobs,
                              f"at most {MAX_JOBS_PER_GPU} x --gpus = "
                              f"{MAX_JOBS_PER_GPU * args.gpus}: more pods per GPU queue for "
                              "simulated weeks and take hours to replay; raise --gpus, or "
                              "give --jobs 0 for the trace's proportional share")
    if args.seed < 0:
        raise InvalidArgument("--seed", args.seed, "must be an integer >= 0")
    if args.load is not None and not (math.isfinite(args.load) and args.load > 0):
        raise InvalidArgument("--load", args.load, "must be a finite number > 0")
    if args.overrun_windows is not None:
        # finite once multiplied by a window (14,680 s by default): 1e308 windows is not
        if not (math.isfinite(args.overrun_windows) and 0 <= args.overrun_windows <= 1e9):
            raise InvalidArgument("--overrun-windows", args.overrun_windows,
                                  "a finite number of measurement windows in 0..1e9")
        if args.arrivals != "continuous" and args.workload != "llm-mix":
            raise InvalidArgument("--overrun-windows", args.overrun_windows,
                                  "only with --arrivals continuous (or --workload llm-mix): "
                                  "the trace's own arrivals run until the last batch job ends")
    if not (math.isfinite(args.restart_s) and 0 <= args.restart_s <= MAX_RESTART_S):
        raise InvalidArgument("--restart-s", args.restart_s, f"must be in 0..{MAX_RESTART_S:g}")
    from elastico.placer.policies.mpsstatic import MAX_REPLICAS

    if not 1 <= args.mps_replicas <= MAX_REPLICAS:
        raise InvalidArgument("--mps-replicas", args.mps_replicas, f"must be in 1..{MAX_REPLICAS}")
    if not (math.isfinite(args.min_run_s) and args.min_run_s >= 0):
        raise InvalidArgument("--min-run-s", args.min_run_s, "must be a finite number >= 0")
    if getattr(args, "via_grpc", None) is not None:
        # the placer service applies the priority rule with its defaults (RunRound's
        # PolicyOptions carry no other): refused rather than silently not honoured
        if args.min_run_s != 300.0:
            raise InvalidArgument("--min-run-s", args.min_run_s, "300 (the default) with "
                                  "--via-grpc (the placer service's minimum guaranteed run)")
        if args.no_preemption:
            raise InvalidArgument("--no-preemption", True, "not with --via-grpc (the placer "
                                  "service always applies the priority rule)")
        if args.mps_replicas != 2:
            raise InvalidArgument("--mps-replicas", args.mps_replicas, "2 (the default) with "
                                  "--via-grpc (the placer service's mps-static replicas)")
        if not args.assume_profiled:  # said, not silently different from the in-process run
            print("--via-grpc: the placer service takes every job as profiled (no unknown-job "
                  "rule, docs/predictor.md 6b): running as --assume-profiled", file=sys.stderr)
            args.assume_profiled = True
    for flag, path in (("--trace", args.trace), ("--nodes", args.nodes)):
        if path is not None:
            check_input_file(flag, path, "CSV file")
    if args.json is not None:
        check_output_file("--json", args.json)
    u = getattr(args, "undisclosed_gpu_speed", 1.0)
    if args.mode != "inflation" and not (math.isfinite(u) and 0 < u <= 20):
        raise InvalidArgument("--undisclosed-gpu-speed", u,
                              "a factor of the reference V100's speed in (0, 20]")
    g = args.llm_load_gbps
    if g is not None and not (math.isfinite(g) and 0 < g <= 1e4):
        raise InvalidArgument("--llm-load-gbps", g, "a number of GB/s in (0, 10000]")
    if args.llm_jobs is not None:
        from elastico.sim.llm_workload import BUNDLED

        if args.llm_jobs not in BUNDLED:
            check_input_file("--llm-jobs", Path(args.llm_jobs), "JSON file (or demo)")
    elif g is not None:
        raise InvalidArgument("--llm-load-gbps", g, "only with --llm-jobs")
    if getattr(args, "via_grpc", None):  # "" = start the services here
        from elastico.runtime.serve_config import check_address

        # before anything runs: grpc would read port 99999 modulo 65536, or resolve "garbage"
        check_address("--via-grpc", args.via_grpc, listen=False)


def _check_mode_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of the other mode that the user set (argparse defaults are None so that
    "set" is visible), then fill in the defaults."""
    args._arrivals_given = getattr(args, "arrivals", None) is not None
    if args.mode == "inflation":
        for dest, flag, _ in _REPLAY_ONLY:
            value = getattr(args, dest, None)
            if value is False:  # --no-<flag> of an on/off flag (--no-mig-lending)
                flag, value = "--no-" + flag[2:], True
            if value is not None:
                raise InvalidArgument(flag, value,
                                      "only in --mode replay; --mode inflation runs on the "
                                      "whole trace cluster (--nodes) with every pod")
        args.workload = args.workload if args.workload is not None else "default"
    elif args.workload is not None:
        from elastico.sim.llm_mix import WORKLOADS

        if args.workload.lower() in WORKLOADS:  # names in any case, as GPU and MIG names
            args.workload = args.workload.lower()
        if args.workload not in WORKLOADS:
            raise InvalidArgument("--workload", args.workload,
                                  "one of " + ", ".join(WORKLOADS) + " in --mode replay (pod-list "
                                  "names such as cpu050 only in --mode inflation; in --mode "
                                  "replay give --trace CSV)")
    if args.mode != "inflation":
        args.workload = args.workload or "openb"
        share = getattr(args, "inference_share", None)
        if share is not None and args.workload != "llm-mix":
            raise InvalidArgument("--inference-share", share, "only with --workload llm-mix")
        if share is not None:
            from elastico.sim.llm_mix import check_inference_share

            check_inference_share(share, "--inference-share")
    elif getattr(args, "inference_share", None) is not None:
        raise InvalidArgument("--inference-share", args.inference_share,
                              "only in --mode replay with --workload llm-mix")
    # --mig-lending said on the command line (not the default): note when it changes nothing
    args.mig_lending_given = getattr(args, "mig_lending", None) is True
    for dest, _, default in _REPLAY_ONLY:
        if getattr(args, dest, None) is None and default is not None:
            setattr(args, dest, default)


def run(args: argparse.Namespace) -> int:
    # the composition root (elastico.cli) hands in an OpenTelemetry tracer when the OTEL_*
    # environment asks for one; otherwise the rounds are not traced
    tracer = getattr(args, "tracer", NOOP)
    from elastico import trace
    from elastico.perf.throughput import ThroughputModel
    from elastico.sim import workload
    from elastico.sim.simulator import slowdown_models

    _check(args)
    if args.mode == "inflation":
        return run_inflation_mode(args)
    if args.via_grpc is not None and args.undisclosed_gpu_speed != 1.0:
        raise InvalidArgument("--undisclosed-gpu-speed", args.undisclosed_gpu_speed,
                              "1 with --via-grpc (the placer service prices with the bundled "
                              "model)")
    from elastico.perf.contention import contention_params

    contention_params(args.contention)  # refused (field, value, allowed) before any work
    if args.via_grpc is not None and args.gpu_speed_sensitivity != "datasheet":
        raise InvalidArgument("--gpu-speed-sensitivity", args.gpu_speed_sensitivity,
                              "datasheet with --via-grpc (the placer service prices with the "
                              "bundled model's datasheet factors)")
    policies = list(args.policy or ["exclusive", "elastico"])
    if args.workload == "llm-mix" and args.cluster is None and args.nodes is None:
        # the trace's own nodes have no GPU model the LLM training jobs are defined on
        args.cluster = "a100h100-mig"
        print("note: --workload llm-mix without --cluster runs on a100h100-mig (the cluster "
              "elastico evaluate uses for it); --cluster trace for the trace's own nodes",
              file=sys.stderr)
    spec = None
    if args.cluster is not None:
        from elastico.sim.clusters import load_cluster

        try:
            spec = load_cluster(args.cluster)
        except InvalidArgument as e:
            field = "--cluster" if e.field == "cluster" else f"--cluster {args.cluster}: {e.field}"
            raise InvalidArgument(field, e.value, e.allowed) from None
        if spec.pools and args.nodes is not None:
            raise InvalidArgument("--nodes", str(args.nodes),
                                  f"not with --cluster {args.cluster}, which defines its own "
                                  "nodes; give one of them (--nodes only with --cluster trace)")
    nodes_all = _read_trace("--nodes", args.nodes, trace.read_nodes)
    try:
        if spec is not None:
            nodes = spec.nodes(args.gpus, nodes_all)
        else:
            nodes = trace.sub_cluster(nodes_all, args.gpus)
    except InvalidArgument as e:  # the user's knob is --gpus
        if e.field.startswith("--cluster"):
            raise
        raise InvalidArgument("--gpus", e.value, e.allowed) from None
    pods = _read_trace("--trace", args.trace, trace.read_pods)
    model = ThroughputModel.bundled(args.gpu_speed_sensitivity)
    if args.undisclosed_gpu_speed != 1.0:
        try:
            model = model.with_undisclosed_speed(args.undisclosed_gpu_speed)
        except InvalidArgument as e:
            raise InvalidArgument("--undisclosed-gpu-speed", e.value, e.allowed) from None
    n_jobs = 4 * args.gpus if args.jobs is None else (args.jobs or None)
    if args.arrivals == "continuous":
        n_jobs = None
    if args.workload == "llm-mix":
        if args.arrivals == "trace" and getattr(args, "_arrivals_given", False):
            raise InvalidArgument("--arrivals", "trace", "continuous with --workload llm-mix "
                                                         "(its jobs arrive over a window)")
        args.arrivals = "continuous"
        n_jobs = None
    try:
        if args.workload == "llm-mix":
            from elastico.sim.llm_mix import DEFAULT_INFERENCE_SHARE, build_llm_mix_workload

            share = args.inference_share
            try:
                wl = build_llm_mix_workload(
                    pods, nodes, seed=args.seed, load=1.0 if args.load is None else args.load,
                    inference_share=DEFAULT_INFERENCE_SHARE if share is None else share,
                    model=model, window=workload.default_window(pods, 0.9))
            except InvalidArgument as e:
                if e.field != "nodes":
                    raise
                where = f"--cluster {args.cluster} --gpus {args.gpus}" if args.cluster \
                    else f"--gpus {args.gpus}"
                raise InvalidArgument(where, e.value, e.allowed.replace(
                    "inference_share", "--inference-share")) from None
        elif args.arrivals == "continuous":
            wl = workload.build_continuous_workload(
                pods, nodes, seed=args.seed, load=1.0 if args.load is None else args.load,
                model=model, window=workload.default_window(pods, 0.9))
        else:
            wl = workload.build_workload(pods, nodes, seed=args.seed, load=args.load,
                                         model=model, jobs=n_jobs)
    except InvalidArgument as e:
        if e.field == "load":  # the user's knob is --load (or --jobs, which sets the maximum)
            hint = ("raise --load" if workload.load_is_too_low(e)
                    else "lower --load" if args.workload == "llm-mix"
                    or args.arrivals == "continuous"
                    else "lower --load or replay more pods with --jobs")
            raise InvalidArgument("--load", e.value, f"{e.allowed}; {hint}") from None
        raise
    if not wl.jobs and args.jobs == 0:
        raise InvalidArgument("--jobs", 0, f"--jobs 0 replays the trace's proportional share "
                              f"for --gpus {args.gpus} ({args.gpus}/6212 of its pods), which "
                              "is no pod that fits this cluster; give a pod count (--jobs N) "
                              "or more --gpus")
    if not wl.jobs:
        # which input to change is the user's call: a cluster file whose nodes fit no pod is
        # the likelier culprit when one was given
        field, value = (("--cluster", str(args.cluster)) if args.cluster
                        else ("--trace", str(args.trace or "bundled trace")))
        raise InvalidArgument(field, value,
                              "no GPU pod of the trace that ran fits this cluster's nodes "
                              "(excluded: "
                              + ", ".join(f"{k} {v}" for k, v in wl.excluded.items() if v)
                              + "); give nodes with more GPUs, CPU, memory or GPU memory, or "
                              "another trace")
    if n_jobs is not None and len(wl.jobs) < n_jobs:
        print(f"note: --jobs {n_jobs} asked, but only {len(wl.jobs)} trace pods are eligible; "
              "replaying all of them", file=sys.stderr)
    llm = []
    if args.llm_jobs is not None:
        wl, llm = _with_llm_jobs(wl, args.llm_jobs)
    if args.load is not None and not math.isfinite(wl.offered_load):
        raise InvalidArgument("--load", args.load,
                              f"cannot be met: the {len(wl.jobs)} sampled pod(s) have fewer "
                              "than two distinct arrival times, so there is no arrival window "
                              "to scale; leave --load out or replay more pods with --jobs")
    load = f"{wl.offered_load:.3g}" if math.isfinite(wl.offered_load) else \
        "n/a (all pods arrive at once)"
    print(f"cluster: {count_of(args.gpus, 'GPU')} on {count_of(len(nodes), 'node')} "
          f"({', '.join(f'{m} {c}' for m, c in _model_mix(nodes))}); "
          f"workload: {count_of(len(wl.jobs), 'job')} ({_kind_mix(wl.jobs)}), "
          f"load {load}, seed {args.seed}"
          + ("" if getattr(args, "mig_lending", True) else "; MIG mode fixed (--no-mig-lending)"),
          file=sys.stderr)
    if args.workload == "llm-mix":
        print("llm-mix: " + ", ".join(f"{k} {v} jobs ({wl.mix_demand[k]:.3f} of the cluster "
                                      "in the window)" for k, v in wl.mix.items())
              + f"; inference share {wl.inference_share:g}; reference GPUs "
              + ", ".join(f"{k} {v}" if v is not None else f"{k} none (no GPU model here has "
                          "a cited LLM-training MFU: no training-llm jobs)"
                          for k, v in wl.reference_gpus.items()), file=sys.stderr)
    if llm:
        from elastico.sim.llm_workload import describe

        print(f"with {describe(llm)} from {args.llm_jobs}", file=sys.stderr)

    slowdown, truth = slowdown_models(args.slowdown_model, args.contention)
    via = None
    if args.via_grpc is not None:
        # elastico.cli (the composition root) hands in the gRPC wiring (elastico.cli.up)
        via = args.via_grpc_factory(args.via_grpc, args.slowdown_model).__enter__()
    try:
        runs = _replay(args, policies, nodes, model, wl, slowdown, truth, tracer, via)
    finally:
        if via is not None:
            via.__exit__(None, None, None)
    from elastico.sim.ceiling import workload_ceiling

    ceiling = workload_ceiling(wl.jobs, nodes, model)
    for r in runs:
        r["gpu_utilization_ceiling"] = ceiling
    _print_table(runs)
    if llm:
        _print_llm(runs)
    if not any(j.kind.elastic for j in wl.jobs):
        print("note: this workload has no batch job, so the JCT, queueing, makespan and "
              "throughput rows are over its services (docs/metrics.md)")
    if math.isfinite(ceiling):
        print(f"GPU utilization ceiling of this workload: {ceiling:.1%} (the most any policy "
              "choosing among these configurations could reach; docs/metrics.md)")
    _write_json(args.json, runs)
    return 0


#: statistics over the jobs the JCT rows count (docs/metrics.md), by the subset they are over
_JCT_STATISTICS = {
    "all": ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown",
            "p50_slowdown", "p95_slowdown", "p99_slowdown"),
    "short": ("avg_jct_short_s", "p50_slowdown_short"),
    "long": ("avg_jct_long_s", "p50_slowdown_long"),
}


def without_empty_statistics(metrics: dict) -> dict:
    """``metrics`` with NaN ("no value": the table's ``-``, null in --json) for a statistic
    over no job, where the simulator reports 0: the JCT, queueing and slowdown statistics
    when no batch job that arrived in the measurement window finished uncensored
    (``jobs_in_jct`` 0), the short or the long ones when none of that half did, and the
    makespan when no batch job finished at all (``jobs_completed`` 0), the service queueing
    when no service was placed (``services_placed`` 0)."""
    n = metrics.get("jobs_in_jct")
    if n is None:
        return metrics
    short = metrics.get("jobs_in_jct_short", 0)
    empty = {"all": n == 0, "short": short == 0, "long": n - short == 0}
    out = dict(metrics)
    for part, keys in _JCT_STATISTICS.items():
        if empty[part]:
            out.update({k: math.nan for k in keys if k in out})
    if metrics.get("jobs_completed") == 0 and "makespan_s" in out:
        out["makespan_s"] = math.nan
    if metrics.get("services_placed") == 0 and "service_avg_queue_s" in out:
        out["service_avg_queue_s"] = math.nan  # no service was placed: no queueing to average
    return out


def _read_trace(flag: str, path: Path | None, reader):
    """``reader(path)`` (:func:`elastico.trace.read_pods` / ``read_nodes``); a bad file the
    user gave names its flag first (``--trace bad.csv:1: ...``), the bundled one as before."""
    try:
        return reader(path)
    except InvalidArgument as e:
        if path is None:
            raise
        raise InvalidArgument(f"{flag} {e.field}", e.value, e.allowed) from None


def _note_idle_lending(policies, nodes) -> None:
    """Say when --mig-lending can change nothing: no node in MIG mode, or no policy that
    uses MIG instances (the others never lend)."""
    from elastico.model import mig_gpus_of
    from elastico.placer.policies import POLICIES

    lenders = [p for p in policies if getattr(POLICIES.get(p), "uses_mig", False)]
    why = ("the cluster has no MIG-mode GPUs (a cluster definition with mig_gpus_per_node "
           "has them, e.g. --cluster a100h100-mig)" if not mig_gpus_of(nodes)
           else f"no policy of {', '.join(policies)} uses MIG instances (elastico and its "
                "ablations other than -no-rst and -no-mig do)" if not lenders else "")
    if why:
        print(f"--mig-lending: no effect here: {why}", file=sys.stderr)


def _replay(args, policies, nodes, model, wl, slowdown, truth, tracer, via) -> list[dict]:
    """One simulation per policy (in-process, or through ``via``'s placer)."""
    from tqdm import tqdm

    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.sim.evaluate import Settings
    from elastico.sim.simulator import simulate
    from elastico.sim.workload import user_estimates

    runs = []
    overrun = Settings() if args.overrun_windows is None else Settings(
        overrun_windows=args.overrun_windows)
    estimates = (user_estimates(wl.jobs, args.user_estimate_badness, args.seed)
                 if args.remaining_estimate == "user" else None)
    if getattr(args, "mig_lending_given", False):
        _note_idle_lending(policies, nodes)
    for name in policies:
        env = PolicyEnv(nodes=nodes, throughput=model, slowdown=slowdown, tracer=tracer,
                        utility=args.utility, restart_s=args.restart_s,
                        remaining_estimate=args.remaining_estimate, user_estimates=estimates,
                        mps_replicas=args.mps_replicas, min_run_s=args.min_run_s,
                        preemption=not args.no_preemption, mig_lending=args.mig_lending)
        policy = make_policy(name, env) if via is None else via.policy(name, env)
        batch = sum(1 for j in wl.jobs if j.kind.elastic) or len(wl.jobs)
        bar = tqdm(total=batch, desc=f"{name:>9}", unit="job", file=sys.stderr,
                   disable=True if args.no_progress else None, leave=False)

        def progress(done: int, now: float, _bar=bar) -> None:
            _bar.update(done)
            _bar.set_postfix_str(f"t={now:,.0f}s", refresh=False)

        try:
            win = wl.window
            res = simulate(nodes, wl.jobs, policy, restart_s=args.restart_s,
                           activity=lambda j, c, _cat=policy.catalog: getattr(_cat, "base_profile", _cat.profile)(j, c).gpu_activity,
                           progress=progress, truth=truth, tracer=tracer,
                           window=None if win is None else (win.lo, win.hi),
                           horizon_s=None if win is None else win.horizon,
                           # the window's batch jobs run to completion (docs/metrics.md)
                           overrun_s=overrun.overrun_s(win),
                           llm_load_gbps=args.llm_load_gbps,
                           unknown_profiles=not args.assume_profiled)
        finally:
            bar.close()
        runs.append({"workload": args.workload, "policy": name, "gpus": args.gpus,
                     "seed": args.seed,
                     "load": wl.offered_load, "jobs": len(wl.jobs),
                     "remaining_estimate": args.remaining_estimate,
                     "mig_lending": bool(args.mig_lending),
                     "assume_profiled": bool(args.assume_profiled),
                     **without_empty_statistics(res.metrics)})
        llm = llm_records(res.records)
        if llm:
            runs[-1]["llm_jobs"] = llm
    return runs


def _with_llm_jobs(wl, source: str):
    """``wl`` with the LLM jobs of ``source`` added (arrivals from its first arrival)."""
    from dataclasses import replace

    from elastico.sim.llm_workload import load_llm_jobs
    from elastico.sim.workload import offered_load

    try:
        llm = load_llm_jobs(source, offset_s=min((j.arrival_s for j in wl.jobs), default=0.0))
    except InvalidArgument as e:
        raise InvalidArgument(f"--llm-jobs {e.field}", e.value, e.allowed) from None
    jobs = sorted([*wl.jobs, *llm], key=lambda j: j.arrival_s)  # stable: trace order kept
    kinds = dict(wl.kinds)
    for j in llm:
        kinds[j.kind.value] = kinds.get(j.kind.value, 0) + 1
    load = wl.offered_load if wl.window is not None else offered_load(jobs, wl.cluster_gpus)
    return replace(wl, jobs=jobs, kinds=kinds, offered_load=load), llm


def llm_records(records) -> list[dict]:
    """The LLM jobs of a run (``JobRecord.tokens`` > 0) as plain dicts: kind (inference or
    training), tokens, tokens done, status, last configuration, start-up paid, restarts, JCT
    (finished jobs)."""
    out = []
    for r in records:
        if r.tokens > 0:
            out.append({"job": r.job_id, "kind": r.kind, "status": r.status, "tokens": r.tokens,
                        "tokens_done": r.tokens_done, "config": r.config,
                        "startup_s": r.startup_s, "restarts": r.restarts,
                        "evictions": r.evictions, "wasted_tokens": r.wasted_tokens,
                        "arrival_s": r.arrival_s, "first_start_s": r.first_start_s,
                        "jct_s": (r.finish_s - r.arrival_s) if r.finish_s is not None else None,
                        "reason": r.reason if r.status != "finished" else ""})
    return out


def _print_llm(runs: list[dict]) -> None:
    """One table per policy: each LLM job's tokens, configuration, start-up and JCT."""
    for r in runs:
        rows = r.get("llm_jobs") or []
        if not rows:
            continue
        if any(x.get("kind") == "training" for x in rows):
            print(f"\nLLM jobs, {r['policy']}: inference tokens are prompt + generated, "
                  "start-up = weight loading, every start; training tokens are tokens trained "
                  "on (a restart costs --restart-s)")
        else:
            print(f"\nLLM inference jobs, {r['policy']}: tokens are prompt + generated; "
                  "start-up = weight loading, every start")
        head = (f"{'job':<24}{'tokens':>10}{'done':>7}{'status':>11}{'JCT (s)':>10}"
                f"{'start-up (s)':>13}{'restarts':>9}{'evicted':>8}  last configuration")
        print(head)
        print("-" * (len(head) + 10))
        for x in rows:
            jct = f"{x['jct_s']:,.0f}" if x["jct_s"] is not None else "-"
            done = x["tokens_done"] / x["tokens"] if x["tokens"] else 0.0
            print(f"{x['job'][:23]:<24}{x['tokens']:>10.3g}{done:>7.0%}{x['status']:>11}{jct:>10}"
                  f"{x['startup_s']:>13,.1f}{x['restarts']:>9}{x['evictions']:>8}  "
                  f"{x['config'] or x['reason'][:60]}")


def _write_json(path: Path | None, runs: list[dict]) -> None:
    """``--json FILE``: one run as a flat object, several as ``{"runs": [...]}``."""
    if path is None:
        return
    # strict JSON has no NaN/Infinity: a metric without a value is null
    runs = [{k: None if isinstance(v, float) and not math.isfinite(v) else v
             for k, v in r.items()} for r in runs]
    doc = runs[0] if len(runs) == 1 else {"runs": runs}
    try:
        path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    except OSError as e:
        raise InvalidArgument("--json", str(path), f"could not be written: {e.strerror}") from None


def _model_mix(nodes):
    mix: dict[str, int] = {}
    for n in nodes:
        mix[n.gpu_model] = mix.get(n.gpu_model, 0) + n.num_gpus
    return sorted(mix.items(), key=lambda kv: -kv[1])


def _kind_mix(jobs) -> str:
    mix: dict[str, int] = {}
    for j in jobs:
        mix[j.kind.value] = mix.get(j.kind.value, 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(mix.items()))


def _print_table(runs: list[dict]) -> None:
    rows = _ROWS + ([row for row in _UNKNOWN_ROWS]
                    if any("unknown_run_s" in r for r in runs) else [])
    runs = [{**{k: math.nan for k, _, _ in rows}, **r} for r in runs]
    names = [r["policy"] for r in runs]
    ratio = "exclusive" in names and "elastico" in names and len(names) == 2

    def cell(fmt: str, v) -> str:  # a metric a policy has no value for (NaN) prints "-"
        return "-" if isinstance(v, float) and math.isnan(v) else fmt.format(v)

    # each column at least two spaces wider than its policy name (elastico-no-rst, ...) and
    # than its widest value (a makespan of a very thin load can run to 13+ digits)
    w = max(14, *(len(n) + 2 for n in names),
            *(len(cell(fmt, r[key])) + 2 for key, _, fmt in rows for r in runs))
    lw = max(22, *(len(label) + 1 for _, label, _ in rows))
    head = f"{'metric':<{lw}}" + "".join(f"{n:>{w}}" for n in names) + (f"{'ratio':>10}" if ratio else "")
    print(head)
    print("-" * len(head))
    for key, label, fmt in rows:
        line = f"{label:<{lw}}" + "".join(f"{cell(fmt, r[key]):>{w}}" for r in runs)
        if ratio:
            ex, el = (next(r[key] for r in runs if r["policy"] == p) for p in ("exclusive", "elastico"))
            lower_better = key.endswith("_s") or key.startswith("round") or "slowdown" in key
            num, den = (ex, el) if lower_better else (el, ex)
            counts = ("jobs_unfinished", "restarts", "jobs_completed", "services_never_placed",
                      "jobs_censored", "evictions", "shrinks", "wasted_gpu_s", "wasted_tokens",
                      "mig_mode_switches")
            known = den and not (math.isnan(num) or math.isnan(den))
            line += f"{num / den:>9.2f}x" if known and key not in counts else f"{'':>10}"
        print(line)
    if ratio:
        print("ratio: exclusive/elastico for times (higher = elastico faster), "
              "elastico/exclusive otherwise; JCT, queueing, makespan and throughput are over "
              "batch jobs (training and offline inference: the trace's BE pods, or llm-mix's "
              "jobs), not services; see docs/metrics.md")


def published_fgd(path: Path | None = None) -> dict[tuple[str, str], dict[int, float]]:
    """FGD's published unallocated GPU % (100 - allocation, mean over its 10 seeds) per
    ``(workload, policy)`` at arrived 100 and 130: ``{(w, p): {100: x, 130: y}}``.  Reads
    ``data/fgd-expected-results/allocation_100_130.csv`` (PROVENANCE.md there)."""
    import csv

    from elastico.paths import data_file

    f = path or data_file("fgd-expected-results", "allocation_100_130.csv")
    acc: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with open(f, newline="") as fh:
        for r in csv.DictReader(fh):
            acc.setdefault((r["workload"], r["policy"]), []).append(
                (float(r["alloc_pct_100"]), float(r["alloc_pct_130"])))
    return {k: {100: round(100 - sum(a for a, _ in v) / len(v), 4),
                130: round(100 - sum(b for _, b in v) / len(v), 4)} for k, v in acc.items()}


def _pct(alloc: float) -> float | None:
    """Unallocated % from an allocation column; None when the workload never reached it."""
    return None if math.isnan(alloc) else round(100 - alloc, 2)


def run_inflation_mode(args: argparse.Namespace) -> int:
    """``--mode inflation``: one workload, one seed, each policy; table (and --json)."""
    import time

    from elastico import trace
    from elastico.placer.inflation import POLICIES as INFLATION_POLICIES
    from elastico.placer.inflation import InflationNodes, InflationPods, inflate, run_inflation

    policies = list(args.policy or INFLATION_POLICIES)
    nodes_all = _read_trace("--nodes", args.nodes, trace.read_nodes)
    nodes = InflationNodes.from_nodes([n for n in nodes_all if n.num_gpus > 0])
    pods = InflationPods.from_trace(_read_trace("--trace", args.trace, trace.read_pods))
    order = inflate(pods, nodes.capacity_milli, args.seed)
    workload = Path(args.trace).stem.replace("openb_pod_list_", "")
    try:
        published = published_fgd()
    except OSError:
        published = {}
    print(f"inflation: workload {workload} ({len(pods.name)} pods, {len(order)} after "
          f"inflation to 130%), {int(nodes.num_gpus.sum())} GPUs on {nodes.num_gpus.size} nodes, "
          f"seed {args.seed}", file=sys.stderr)
    runs = []
    for name in policies:
        t0 = time.perf_counter()
        res = run_inflation(nodes, pods, order, name, args.seed)
        cols = res.columns((100, 130))
        pub = published.get((workload, name), {})
        runs.append({"workload": workload, "policy": name, "seed": args.seed,
                     "unallocated_pct_100": _pct(cols[100]),
                     "unallocated_pct_130": _pct(cols[130]),
                     "published_pct_100": pub.get(100), "published_pct_130": pub.get(130),
                     "pods": int(order.size), "failed": int((~res.placed).sum()),
                     "seconds": round(time.perf_counter() - t0, 2)})
    head = f"{'policy':<10}{'unalloc@100%':>14}{'unalloc@130%':>14}{'FGD pub@100%':>14}{'FGD pub@130%':>14}"
    print(head)
    print("-" * len(head))
    fmt = lambda v: f"{v:>14.2f}" if v is not None else f"{'-':>14}"  # noqa: E731
    for r in runs:
        print(f"{r['policy']:<10}" + fmt(r["unallocated_pct_100"]) + fmt(r["unallocated_pct_130"])
              + fmt(r["published_pct_100"]) + fmt(r["published_pct_130"]))
    print("unallocated GPU % = 100 - allocated milli-GPU / cluster milli-GPU x 100 when the "
          "arrived GPU requests are 100 % / 130 % of the cluster's GPUs (FGD's binning); FGD "
          "pub = FGD's published mean over its seeds 42..51 for the same policy "
          "(data/fgd-expected-results); every pod keeps its requested shape")
    _write_json(args.json, runs)
    return 0
