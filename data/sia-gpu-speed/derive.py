"""Derive this folder's figures from Sia's (SOSP'23) per-job throughput profiles.

Usage: python derive.py SIA_TRACES_DIR [OUT_DIR]   (OUT_DIR: this folder by default)
SIA_TRACES_DIR = sia-simulator/traces of https://github.com/siasosp23/artifacts (commit
aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70).  Needs the elastico package (the one-GPU line is
elastico.perf.training.fit_step_time, the fit the product documents).  Writes:

* gpu_speed_vs_v100.csv -- per job and GPU (T4, V100, A100-40GB) the best one-GPU throughput,
  max over local_bsz of local_bsz / step_time on rows with placement "1" (samples/s), and its
  ratio to V100's (cluster "azure").
* single_gpu.csv -- per job and GPU (the five Sia GPUs, catalogue names): the one-GPU step
  time line T_grad(m) = alpha + beta m (Pollux's) fitted on the placement-"1" rows, the
  number of batch sizes, their range, the fit's median relative error, and the best point.
* scale_out.csv -- per job, GPU, multi-GPU placement and per-GPU batch m that was also
  measured on one GPU: the speedup over one GPU at the same m, gpus x t1(m) / t(m) (a ratio
  of two measured step times), with the placement's GPUs and nodes.

PROVENANCE.md says why, and what each cluster label is.
"""
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from elastico.perf.training import SIA_GPUS, SIA_JOBS, fit_step_time  # noqa: E402

RATIO_CLUSTERS = {"T4": "aws", "V100": "azure", "A100-40GB": "dgx-ext"}


def rows(path: Path) -> list[dict]:
    return list(csv.DictReader(open(path, newline="")))


def best(path: Path) -> tuple[int, float, float]:
    one = [r for r in rows(path) if r["placement"] == "1"]
    r = max(one, key=lambda r: int(r["local_bsz"]) / float(r["step_time"]))
    return int(r["local_bsz"]), float(r["step_time"]), int(r["local_bsz"]) / float(r["step_time"])


def ratios(root: Path, out: Path) -> None:
    with open(out / "gpu_speed_vs_v100.csv", "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["sia_job", "gpu_model", "sia_cluster", "best_local_bsz", "best_step_time_s",
                    "best_samples_per_s", "ratio_vs_v100"])
        for job in SIA_JOBS:
            ref = best(root / job / "placements-azure.csv")[2]
            for gpu, cluster in RATIO_CLUSTERS.items():
                bsz, step, tput = best(root / job / f"placements-{cluster}.csv")
                w.writerow([job, gpu, cluster, bsz, repr(step), f"{tput:.6g}", f"{tput / ref:.6g}"])


def single_and_scale(root: Path, out: Path) -> None:
    with open(out / "single_gpu.csv", "w", newline="") as f1, \
            open(out / "scale_out.csv", "w", newline="") as f2:
        w1 = csv.writer(f1, lineterminator="\n")
        w2 = csv.writer(f2, lineterminator="\n")
        w1.writerow(["sia_job", "gpu_model", "sia_cluster", "points", "local_bsz_min",
                     "local_bsz_max", "alpha_s", "beta_s_per_sample", "fit_median_ape",
                     "best_local_bsz", "best_step_time_s"])
        w2.writerow(["sia_job", "gpu_model", "placement", "gpus", "nodes", "local_bsz",
                     "speedup"])
        for job in SIA_JOBS:
            for gpu, cluster in SIA_GPUS.items():
                rs = rows(root / job / f"placements-{cluster}.csv")
                one = {int(r["local_bsz"]): float(r["step_time"]) for r in rs
                       if r["placement"] == "1"}
                ms = sorted(one)
                a, b = fit_step_time(ms, [one[m] for m in ms])
                errs = sorted(abs((a + b * m) / one[m] - 1) for m in ms)
                med = (errs[(len(errs) - 1) // 2] + errs[len(errs) // 2]) / 2
                bm = max(ms, key=lambda m: m / one[m])
                w1.writerow([job, gpu, cluster, len(ms), ms[0], ms[-1], f"{a:.6g}", f"{b:.6g}",
                             f"{med:.4f}", bm, repr(one[bm])])
                multi = sorted((r for r in rs if r["placement"] != "1"
                                and int(r["local_bsz"]) in one),
                               key=lambda r: (sum(map(int, r["placement"])), r["placement"],
                                              int(r["local_bsz"])))
                for r in multi:
                    k = sum(int(c) for c in r["placement"])
                    m = int(r["local_bsz"])
                    w2.writerow([job, gpu, r["placement"], k, len(r["placement"]), m,
                                 f"{k * one[m] / float(r['step_time']):.6g}"])


if __name__ == "__main__":
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent
    ratios(root, out)
    single_and_scale(root, out)
