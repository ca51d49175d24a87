"""Derive gpu_speed_vs_v100.csv from Sia's (SOSP'23) per-job throughput profiles.

Usage: python3 derive.py SIA_TRACES_DIR > gpu_speed_vs_v100.csv
SIA_TRACES_DIR = sia-simulator/traces of https://github.com/siasosp23/artifacts (commit
aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70).  For each job and cluster: the best single-GPU
throughput, max over local_bsz of local_bsz / step_time on rows with placement "1"
(samples/s); ratio_vs_v100 = that on the GPU / that on V100 (cluster "azure").
PROVENANCE.md says why, and what each cluster label is.
"""
import csv
import sys
from pathlib import Path

JOBS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")  # ncf: V100 profile unusable
CLUSTERS = {"T4": "aws", "V100": "azure", "A100-40GB": "dgx-ext"}


def best(path: Path) -> tuple[int, float, float]:
    rows = [r for r in csv.DictReader(open(path, newline="")) if r["placement"] == "1"]
    r = max(rows, key=lambda r: int(r["local_bsz"]) / float(r["step_time"]))
    return int(r["local_bsz"]), float(r["step_time"]), int(r["local_bsz"]) / float(r["step_time"])


def main(root: Path) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["sia_job", "gpu_model", "sia_cluster", "best_local_bsz", "best_step_time_s",
                "best_samples_per_s", "ratio_vs_v100"])
    for job in JOBS:
        ref = best(root / job / "placements-azure.csv")[2]
        for gpu, cluster in CLUSTERS.items():
            bsz, step, tput = best(root / job / f"placements-{cluster}.csv")
            w.writerow([job, gpu, cluster, bsz, repr(step), f"{tput:.6g}", f"{tput / ref:.6g}"])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
