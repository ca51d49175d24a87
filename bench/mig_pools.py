"""MIG-mode GPUs priced as a pool of their own against one pool per GPU model, paired.

    python bench/mig_pools.py [--cluster a100h100-mig] [--gpus 512] [--seeds 0,1] [--json]

Replays ``elastico evaluate``'s workload (``--cluster`` at ``--gpus`` GPUs, 2 pods per GPU,
load 1.0) for each seed under the ``elastico`` policy twice in one process: with the default
``PolicyEnv(mig_pools=False)`` (one pricing pool per GPU model) and with ``mig_pools=True``
(``gpu:<model>:mig`` pools, docs/pricing.md 4c).  Prints average JCT, reconfigurations and GPU
utilization of both, and the relative change of average JCT.  Measured, never asserted in
tests.

Measured (2-core machine, ~4 min per seed at 512 GPUs): a100h100-512 seed 0: 240 -> 258 s,
restarts 57 -> 124; seed 1: 200 -> 207 s, restarts 63 -> 97; a100h100-64 seeds 0-4, mean
215 -> 218 s.  So the default keeps one pool per model.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
    from jct_ceiling import flag_error
    from elastico.sim.clusters import load_cluster
    from elastico.errors import ElasticoError
    from elastico.sim.evaluate import Settings, _inputs, _truth, _workload
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.sim.simulator import simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--cluster", default="a100h100-mig",
                    help="as elastico evaluate --clusters (one with MIG-mode GPUs)")
    ap.add_argument("--gpus", type=int, default=512, help="cluster size, GPUs")
    ap.add_argument("--seeds", default="0,1", help="workload seeds, comma-separated")
    ap.add_argument("--json", action="store_true", help="print one JSON object per seed")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: {args.seeds!r} must be comma-separated integers")
    if not seeds or min(seeds) < 0:
        ap.error(f"--seeds: {args.seeds!r} must be integers >= 0")
    if len(set(seeds)) != len(seeds):
        ap.error(f"--seeds: {args.seeds!r} names a seed twice (each seed is one replay)")
    try:
        spec = load_cluster(args.cluster)
        workloads = {s: _workload(spec, args.gpus, s, Settings(jobs_per_gpu=2.0)) for s in seeds}
    except ElasticoError as e:  # a cluster or size that does not exist: say which
        flag_error(ap, e)
    from elastico.model import mig_gpus_of

    if not any(mig_gpus_of(nodes) for nodes, _ in workloads.values()):
        ap.error(f"--cluster {args.cluster}: has no MIG-mode GPUs (mig_gpus_per_node), so both "
                 "runs would be the same; use a100h100-mig, a100-mig or a definition with them")
    _, _, model, predictor, _ = _inputs()
    for seed, (nodes, wl) in workloads.items():
        out = {"cluster": args.cluster, "gpus": args.gpus, "seed": seed}
        for tag, pools in (("one_pool", False), ("mig_pools", True)):
            policy = make_policy("elastico", PolicyEnv(nodes=nodes, throughput=model,
                                                       slowdown=predictor, mig_pools=pools))
            m = simulate(nodes, list(wl.jobs), policy, truth=_truth(),
                         activity=lambda j, c: policy.catalog.profile(j, c).gpu_activity).metrics
            out.update({f"{tag}_avg_jct_s": m["avg_jct_s"], f"{tag}_restarts": m["restarts"],
                        f"{tag}_gpu_utilization": m["gpu_utilization"]})
        out["avg_jct_change"] = out["mig_pools_avg_jct_s"] / out["one_pool_avg_jct_s"] - 1
        if args.json:
            print(json.dumps(out), flush=True)
        else:
            print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in out.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
