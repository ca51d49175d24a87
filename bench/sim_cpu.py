"""CPU seconds of one ``elastico evaluate`` run (:func:`elastico.sim.evaluate.run_one`), for
the simulator's cost (issue 19: the 512-GPU load sweep; issue 24: the evaluation's time budget).

    python bench/sim_cpu.py --cluster trace --gpus 512 --policy elastico --load 0.5 [--stop]
        [--workload openb|llm-mix] [--seed S] [--profile OUT.prof]

``--stop``: stopped at the measurement window's end, as the load sweep's runs are
(``Settings.stop_at_window_end``).  Prints the run's CPU seconds (``time.process_time``: the
machine is shared, wall time would measure the neighbours), its wall seconds, the workload's
jobs, the rounds and whether the backlog stayed bounded.  The workload and the shared inputs
are built (and timed) before the run, as a worker process of ``elastico evaluate`` does once.
A 512-GPU ``elastico`` run costs minutes of CPU (llm-mix a100h100-mig seed 0: 129.8 s)."""

from __future__ import annotations

import argparse
import cProfile
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
from jct_ceiling import check_writable, flag_error  # noqa: E402


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number > 0")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer >= 0")
    return v


def main(argv: list[str] | None = None) -> None:
    from elastico.errors import ElasticoError
    from elastico.placer.policies import POLICIES

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="Runs one replay of minutes at the defaults (trace, 512 GPUs, elastico).")
    p.add_argument("--cluster", default="trace",
                   help="'trace' or a cluster definition (a100-mig, a100h100-mig, FILE.yaml) "
                        "(default: trace)")
    p.add_argument("--gpus", type=_count, default=512, help="cluster size (default: 512)")
    p.add_argument("--policy", default="elastico", choices=sorted(POLICIES),
                   help="the policy replayed (default: elastico)")
    p.add_argument("--load", type=_positive, default=0.5,
                   help="offered load, continuous arrivals (default: 0.5)")
    p.add_argument("--seed", type=_count, default=0, help="workload seed (default: 0)")
    p.add_argument("--workload", default="openb", choices=("openb", "llm-mix"),
                   help="the workload (default: openb)")
    p.add_argument("--stop", action="store_true",
                   help="stop at the measurement window's end, as a load-sweep run does")
    p.add_argument("--profile", default=None, metavar="OUT.prof",
                   help="write a cProfile of the run here (pstats format)")
    a = p.parse_args(argv)
    check_writable(p, a.profile, "--profile")
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, _ceiling, _workload, run_one

    st = Settings(load=a.load, arrivals="continuous", stop_at_window_end=a.stop,
                  workload=a.workload)
    c0 = time.process_time()
    try:
        task = Task(load_cluster(a.cluster), a.gpus, a.policy, a.seed, st)
        _workload(task.spec, task.gpus, task.seed, st)
    except ElasticoError as e:  # a cluster or size that does not exist: say which
        flag_error(p, e)
    _ceiling(task.spec, task.gpus, task.seed, st)
    setup = time.process_time() - c0
    prof = cProfile.Profile() if a.profile else None
    c0, w0 = time.process_time(), time.perf_counter()
    if prof:
        prof.enable()
    out = run_one(task)
    if prof:
        prof.disable()
        prof.dump_stats(a.profile)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    r = out.run
    print(f"{task.cluster} {a.policy} load {a.load:g}{' stop' if a.stop else ''}: "
          f"{cpu:.1f} s CPU ({wall:.1f} s wall; setup {setup:.1f} s CPU), {r['jobs']} jobs, "
          f"bounded {r['backlog_bounded']}, evictions {r['evictions']}, "
          f"util {r['gpu_utilization']:.4f}", flush=True)


if __name__ == "__main__":
    main()
