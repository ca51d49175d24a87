"""Derive sync_share.csv from Sia's (SOSP'23) per-job step and all-reduce times.

Usage: python3 derive.py SIA_TRACES_DIR > sync_share.csv
SIA_TRACES_DIR = sia-simulator/traces of https://github.com/siasosp23/artifacts (commit
aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70).  For each job, cluster and (GPUs, nodes) of a
placement: how many profiled rows (batch sizes x placements with those GPUs and nodes), the
median over them of sync_time / step_time (the share of a step spent waiting for the gradient
all-reduce) with its 10th and 90th percentiles, and the median step_time.  A placement string
holds one digit per node (its GPUs there): "4" = 4 GPUs on one node, "44" = 2 nodes x 4.
PROVENANCE.md says what sync_time measures and which cluster is which GPU.
"""
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# gpt_pmp (pipeline model parallel) is left out: its sync_time exceeds its step_time in most
# rows (shares up to 8.4), not a data-parallel all-reduce share
JOBS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
#: cluster label -> ElastiCo GPU model name (elastico.hardware), from simulator_config.py
CLUSTERS = {"aws": "T4", "azure": "V100M32", "dgx-ext": "A100-40GB", "quad": "RTX6000",
            "rtx": "RTX2080Ti"}


def quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main(root: Path) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["sia_job", "sia_cluster", "gpu_model", "gpus", "nodes", "rows",
                "sync_share_median", "sync_share_p10", "sync_share_p90", "step_time_median_s"])
    for job in JOBS:
        for cluster, gpu in CLUSTERS.items():
            groups: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
            with open(root / job / f"placements-{cluster}.csv", newline="") as f:
                for r in csv.DictReader(f):
                    step, sync = float(r["step_time"]), float(r["sync_time"])
                    if step <= 0:
                        continue
                    gpus = sum(int(c) for c in r["placement"])
                    groups[(gpus, len(r["placement"]))].append((sync / step, step))
            for (gpus, nodes), rows in sorted(groups.items()):
                shares = [s for s, _ in rows]
                w.writerow([job, cluster, gpu, gpus, nodes, len(rows),
                            f"{statistics.median(shares):.6g}", f"{quantile(shares, 0.1):.6g}",
                            f"{quantile(shares, 0.9):.6g}",
                            f"{statistics.median([t for _, t in rows]):.6g}"])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
