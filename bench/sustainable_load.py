"""Maximum sustainable load of one policy on one cluster size, one seed, printed rung by rung
(issue 24's "maximum sustainable load >= 2.1x" goal is set at 512 GPUs, where the default
``elastico evaluate`` does not sweep: one elastico-family ladder there costs hours of CPU).

    python bench/sustainable_load.py --policy elastico [--gpus 512] [--seed 0]
        [--loads 1,1.5,2,2.5,3,3.5,4] [--workload llm-mix] [--cluster a100h100-mig]
        [--no-mig-lending] [--json OUT.jsonl]

Each rung is one run of :func:`elastico.sim.evaluate.run_one` exactly as the evaluation's
load sweep makes it (:func:`elastico.sim.evaluate.sweep_tasks`: continuous arrivals at that
load, the replay stopped at the end of its measurement window) and its backlog test
(:func:`elastico.sim.simulator.backlog_bounded`, docs/metrics.md "Sustainable load").  The
ladder walks upward and stops at the first load whose backlog grew, as the evaluation's
:class:`~elastico.sim.evaluate.SweepLadder` does; the sustainable load is the highest load
before it (every lower listed load bounded), or none when the lowest listed load already
grew.  Loads below the first listed one are assumed bounded: list the ladder from a load the
policy is known to sustain (the 64-GPU sweep of docs/evaluation/llm-mix/report.md says which).

Each rung's line (and, with ``--json``, one JSON object per line, written as it finishes, so
a run cut short keeps what it measured): load, ``queue_growth`` against the allowed growth,
bounded or growing, the CPU seconds it took.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
from jct_ceiling import flag_error  # noqa: E402


def _loads(text: str) -> list[float]:
    """``--loads``: comma-separated numbers > 0, ascending."""
    try:
        loads = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated numbers > 0") from None
    if not loads or min(loads) <= 0 or loads != sorted(set(loads)):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated numbers > 0, ascending, "
                                         "each once")
    return loads


def rung(cluster: str, gpus: int, policy: str, seed: int, load: float, workload: str,
         mig_lending: bool = True) -> dict:
    """One sweep point (module docstring): its backlog test and the figures behind it."""
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, run_one, sweep_tasks
    from elastico.sim.simulator import backlog_allowed

    st = Settings(arrivals="continuous", workload=workload, mig_lending=mig_lending)
    (task,) = sweep_tasks([load_cluster(cluster)], [gpus], [policy], [seed], [load], st)
    t0 = time.process_time()
    run = run_one(task).run
    return {"workload": workload, "cluster": cluster, "gpus": gpus, "policy": policy,
            "seed": seed, "load": load, "mig_lending": mig_lending,
            "queue_growth": run["queue_growth"],
            "queue_growth_allowed": backlog_allowed(run),
            "backlog_bounded": bool(run["backlog_bounded"]),
            "arrivals_half_window": run.get("arrivals_half_window"),
            "sm_activity": run.get("sm_activity"),
            "cpu_s": round(time.process_time() - t0, 1)}


def main(argv: list[str] | None = None) -> None:
    from elastico.errors import InvalidArgument

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", required=True, help="a registered policy (elastico evaluate's)")
    p.add_argument("--workload", default="llm-mix", choices=("llm-mix", "openb"),
                   help="the evaluation's workload (default: llm-mix)")
    p.add_argument("--cluster", default="a100h100-mig",
                   help="a bundled cluster definition or FILE.yaml (default: a100h100-mig)")
    p.add_argument("--gpus", type=int, default=512, help="cluster size (default: 512)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default: 0, the "
                   "evaluation's sweep seed)")
    p.add_argument("--loads", type=_loads, default=[1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0],
                   help="the ladder, ascending (default: 1,1.5,2,2.5,3,3.5,4)")
    p.add_argument("--mig-lending", action=argparse.BooleanOptionalAction, default=True,
                   help="elastico's MIG lending (PolicyEnv.mig_lending; on by default, as in "
                        "the evaluation; --no-mig-lending keeps MIG mode fixed)")
    p.add_argument("--json", default=None, help="append one JSON object per rung here")
    a = p.parse_args(argv)
    if a.seed < 0:
        p.error(f"--seed {a.seed}: an integer >= 0")
    if a.json:  # refused before hours of replay, not after
        try:
            open(a.json, "a").close()
        except OSError as e:
            p.error(f"--json {a.json}: cannot be written ({e.strerror})")
    from elastico.placer.policies import POLICIES

    if a.policy not in POLICIES:
        p.error(f"--policy {a.policy!r}: one of {', '.join(sorted(POLICIES))}")
    sustainable = None
    for load in a.loads:
        try:
            r = rung(a.cluster, a.gpus, a.policy, a.seed, load, a.workload, a.mig_lending)
        except InvalidArgument as e:
            flag_error(p, e)
        print(f"{a.policy} {a.cluster} {a.gpus} GPUs seed {a.seed} load {load:g}: queue growth "
              f"{r['queue_growth']:+.1f} jobs (allowed {r['queue_growth_allowed']:.1f}) -> "
              f"{'bounded' if r['backlog_bounded'] else 'growing'}; SM activity "
              f"{r['sm_activity']:.3f} ({r['cpu_s']:.0f} s CPU)", flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
        if not r["backlog_bounded"]:
            break
        sustainable = load
    print(f"sustainable load ({a.policy}, {a.gpus} GPUs, seed {a.seed}, loads from "
          f"{a.loads[0]:g}): {'none on this ladder' if sustainable is None else f'{sustainable:g}'}")


if __name__ == "__main__":
    main()
