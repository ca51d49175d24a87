"""Placement time of one round: a 512-GPU sub-cluster of the trace, 1,000 pending jobs.

    python bench/placement_round.py [--gpus 512] [--jobs 1000] [--repeat 5] [--json]

Cluster: ``elastico.trace.sub_cluster(read_nodes(), gpus)``.  Jobs: the first ``jobs`` GPU
pods of the bundled default pod list (seeded sample, ``--seed``), each with its requested
shape (``gpu_share``, GPU count, CPU, memory) on a GPU model it may use.  One "round" places
every job once, in arrival order, on an empty cluster with ``ClusterState.place_many`` (what a
round does: a job that fits nowhere is refused, and a later job whose shape dominates one that
already failed for lack of room is refused without a search), with each scorer; for ``elastico`` the round's
typical pods are set first (what ``ElasticoPolicy`` does).  Reports the median over
``--repeat`` rounds of the wall time, the jobs placed, and the GPUs allocated.  Measured here,
never asserted in tests (issue 5 goal: < 100 ms per round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None) -> int:
    from elastico import trace
    from elastico.model import Configuration
    from elastico.placer.fragmentation import typical_pods
    from elastico.placer.placement import SCORERS, ClusterState
    from elastico.predictor import AnalyticSlowdown, JobProfile

    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    nodes = trace.sub_cluster(trace.read_nodes(), a.gpus)
    models = {n.gpu_model: n.gpu_mem_gib for n in nodes}
    pods = [p for p in trace.read_pods() if p.num_gpus > 0]
    rng = np.random.default_rng(a.seed)
    pick = np.sort(rng.choice(len(pods), size=min(a.jobs, len(pods)), replace=False))
    jobs = []
    for i in pick.tolist():
        p = pods[i]
        allowed = [m for m in models if not p.gpu_models or m in p.gpu_models]
        if not allowed:
            continue
        m = allowed[int(rng.integers(len(allowed)))]
        share = p.gpu_share if p.num_gpus == 1 else 1.0
        cfg = Configuration("req", m, p.num_gpus, share, min(models[m], 16.0 * share), p.cpu, p.mem_gib, 1.0)
        jobs.append((f"{p.name}", cfg, JobProfile("t", "training", 0.4 * share, cfg.gpu_mem_gib)))
    tp = typical_pods([round(c.cpu * 1000) for _, c, _ in jobs],
                      [round(c.gpu_share * 1000) for _, c, _ in jobs], [c.num_gpus for _, c, _ in jobs])
    model = AnalyticSlowdown()
    out = []
    for scorer in SCORERS:
        times, placed, used = [], 0, 0.0
        for _ in range(a.repeat):
            cs = ClusterState(nodes, slowdown_model=model)
            t0 = time.perf_counter()
            if scorer == "elastico":
                cs.set_typical_pods(tp)
            placed = sum(o.placed for o in cs.place_many([(j, c, pr, 1.5) for j, c, pr in jobs],
                                                          scorer=scorer))
            times.append(time.perf_counter() - t0)
            used = cs.used_gpus()
        row = {"scorer": scorer, "gpus": a.gpus, "nodes": len(nodes), "jobs": len(jobs),
               "placed": int(placed), "gpus_allocated": round(used, 2),
               "round_ms_median": round(1000 * statistics.median(times), 1),
               "ms_per_job": round(1000 * statistics.median(times) / len(jobs), 3)}
        out.append(row)
        print(json.dumps(row) if a.json else
              f"{scorer:<9} {row['round_ms_median']:>9.1f} ms/round  {row['ms_per_job']:.3f} ms/job  "
              f"placed {placed}/{len(jobs)}  GPUs {used:.1f}/{a.gpus}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
