"""CPU seconds of one ``elastico evaluate`` run (:func:`elastico.sim.evaluate.run_one`), for
the 512-GPU load sweep's cost (issue 19).

    python bench/sim_cpu.py --cluster trace --gpus 512 --policy elastico --load 0.5 [--stop]
        [--workload openb|llm-mix] [--seed S] [--profile OUT.prof]

``--stop``: stopped at the measurement window's end, as the load sweep's runs are
(``Settings.stop_at_window_end``).  Prints the run's CPU seconds (``time.process_time``: the
machine is shared, wall time would measure the neighbours), its wall seconds, the workload's
jobs, the rounds and whether the backlog stayed bounded.  The workload and the shared inputs
are built (and timed) before the run, as a worker process of ``elastico evaluate`` does once."""

from __future__ import annotations

import argparse
import cProfile
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cluster", default="trace")
    p.add_argument("--gpus", type=int, default=512)
    p.add_argument("--policy", default="elastico")
    p.add_argument("--load", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workload", default="openb", choices=("openb", "llm-mix"))
    p.add_argument("--stop", action="store_true")
    p.add_argument("--profile", default=None)
    a = p.parse_args()
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, _ceiling, _workload, run_one

    st = Settings(load=a.load, arrivals="continuous", stop_at_window_end=a.stop,
                  workload=a.workload)
    task = Task(load_cluster(a.cluster), a.gpus, a.policy, a.seed, st)
    c0 = time.process_time()
    _workload(task.spec, task.gpus, task.seed, st)
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
