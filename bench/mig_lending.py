"""``elastico`` with MIG lending against MIG mode fixed, paired, on the llm-mix evaluation's runs.

    python bench/mig_lending.py [--gpus 64] [--seeds 0,1,2,3,4] [--cluster a100h100-mig]
        [--policy elastico] [--json OUT.jsonl]

For each seed, the run ``elastico evaluate --workload llm-mix`` makes for ``--policy`` at
``--gpus`` GPUs (:func:`elastico.sim.evaluate.run_one`: continuous arrivals at the default load
0.5, the window's batch jobs run to completion), twice in one process: MIG mode fixed
(``Settings.mig_lending=False``, the behaviour before lending) and with MIG lending (the
default since 2026-12-07; :mod:`elastico.placer.policies.mig_lending`).  Prints per seed the average and median JCT of
both and the MIG mode changes, then the paired difference of the average JCT (lending minus
fixed) with its 95 % Student t interval over the seeds (:func:`elastico.sim.report.paired_difference`,
as the report's ablation rows).  Throughput is a separate measurement:
``bench/sustainable_load.py`` (lending, the default) against ``--no-mig-lending``.  Measured, never asserted in tests.

Each seed costs two runs: ~20 s of CPU at 64 GPUs, ~5 min at 512 (2-core machine).

Measured 2026-12-07 (bench/results/mig-lending-2026-12-07.jsonl): 64 GPUs, seeds 0-4: 896.8 ->
850.5 s, -46.3 s [-83.1, -9.5]; 512 GPUs: 689.0 -> 623.3 s, -65.7 s [-79.7, -51.7], 138-172
MIG mode changes per replay.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
from jct_ceiling import check_writable, flag_error  # noqa: E402

KEYS = ("avg_jct_s", "p50_jct_s", "mig_mode_switches", "sm_activity")


def _seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated integers >= 0, each once."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers >= 0, each once")
    return seeds


def pair(cluster: str, gpus: int, policy: str, seed: int) -> dict:
    """One seed's two runs (module docstring): ``fixed_<key>`` and ``lending_<key>`` for each
    of :data:`KEYS`, and the CPU seconds of each."""
    from elastico.cli.evaluate import DEFAULT_CONTINUOUS_LOAD
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    out = {"cluster": cluster, "gpus": gpus, "policy": policy, "seed": seed}
    for tag, lending in (("fixed", False), ("lending", True)):
        st = Settings(arrivals="continuous", workload="llm-mix", load=DEFAULT_CONTINUOUS_LOAD,
                      mig_lending=lending)
        t0 = time.process_time()
        run = run_one(Task(load_cluster(cluster), gpus, policy, seed, st)).run
        out.update({f"{tag}_{k}": run.get(k) for k in KEYS})
        out[f"{tag}_cpu_s"] = round(time.process_time() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    from elastico.errors import InvalidArgument
    from elastico.placer.policies import POLICIES
    from elastico.sim.report import paired_difference

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="a100h100-mig",
                   help="a bundled cluster definition with MIG-mode GPUs, or FILE.yaml "
                        "(default: a100h100-mig)")
    p.add_argument("--gpus", type=int, default=64, help="cluster size (default: 64)")
    p.add_argument("--seeds", type=_seeds, default=[0, 1, 2, 3, 4],
                   help="workload seeds, comma-separated (default: 0,1,2,3,4, the evaluation's)")
    p.add_argument("--policy", default="elastico",
                   help="an elastico-family policy that uses MIG (default: elastico)")
    p.add_argument("--json", default=None, help="append one JSON object per seed here")
    a = p.parse_args(argv)
    if a.policy not in POLICIES:
        p.error(f"--policy {a.policy!r}: one of {', '.join(sorted(POLICIES))}")
    check_writable(p, a.json)  # refused before an hour of replay, not after
    from elastico import trace
    from elastico.model import mig_gpus_of
    from elastico.sim.clusters import load_cluster

    try:
        nodes = load_cluster(a.cluster).nodes(a.gpus, trace.read_nodes())
    except InvalidArgument as e:  # a cluster or size that does not exist: say which
        flag_error(p, e)
    if not mig_gpus_of(nodes):
        p.error(f"--cluster {a.cluster}: has no MIG-mode GPUs (mig_gpus_per_node), so both runs "
                "would be the same; use a100h100-mig, a100-mig or a definition with them")
    runs = []
    for seed in a.seeds:
        try:
            r = pair(a.cluster, a.gpus, a.policy, seed)
        except InvalidArgument as e:
            flag_error(p, e)
        print(f"{a.policy} {a.cluster} {a.gpus} GPUs seed {seed}: avg JCT fixed "
              f"{r['fixed_avg_jct_s']:,.1f} s, lending {r['lending_avg_jct_s']:,.1f} s; median "
              f"{r['fixed_p50_jct_s']:,.1f} -> {r['lending_p50_jct_s']:,.1f} s; MIG mode changes "
              f"{r['lending_mig_mode_switches']:.0f} ({r['fixed_cpu_s'] + r['lending_cpu_s']:.0f} "
              "s CPU)", flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(r) + "\n")
        for tag in ("fixed", "lending"):
            runs.append({"cluster": a.cluster, "seed": seed, "policy": tag,
                         "avg_jct_s": r[f"{tag}_avg_jct_s"]})
    d = paired_difference(runs, a.cluster, "lending", "fixed", "avg_jct_s")
    if d is not None:
        ci = f" [{d['low']:+,.1f}, {d['high']:+,.1f}]" if len(d["seeds"]) > 1 else ""
        print(f"avg JCT, lending - fixed, over {len(d['seeds'])} seed(s): {d['mean']:+,.1f} s"
              f"{ci} ({d['relative']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
