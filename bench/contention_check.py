"""The contention model (elastico.perf.contention) against Gavel's measured pairs: a sanity
check, not a fit.  Nothing of the model is fitted to these pairs.

Each Gavel job type's demand alone on a V100 (Gavel recorded no counters, so each comes from
the job's *solo* measurements, never from a pair):

* ``sm``: its Amdahl parallel fraction ``p`` (elastico.perf.throughput, fitted on MISO's A100
  MIG-slice step times: how much of a GPU's SMs its kernels can use);
* ``dram``: ``(1 - compute_bound) x SOLO_BW_EFFICIENCY`` (elastico.perf.contention.roofline_demand,
  as the simulator's ground truth builds it);
* ``compute_bound``: its roofline compute share at the V100 (elastico.perf.training, from Sia's
  per-sample lines over five GPUs);
* ``busy``: ``--busy`` (default 1.0: Gavel's jobs train back to back; 0 < busy <= 1), or
  ``acmetrace``: the median GPU utilisation above 0 of AcmeTrace Seren's jobs.

Mechanism ``mps`` (Gavel's runtime starts MPS for co-located jobs; no per-client limit).
Prints per GPU (``--gpus``; default V100M16, the check's set, then K80 and P100 for reference)
the pairs' MAE, the Spearman rank correlation, and the baselines "no slowdown" (1.0) and the
constant median of the *other* GPUs' pairs, each over every measured side (slowdown_a and
slowdown_b).  ``--contention`` moves the parameters (preset or name=value list).

    .venv/bin/python bench/contention_check.py [--json] [--busy 1.0|acmetrace] [--contention default]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

import numpy as np
from scipy.stats import spearmanr

from elastico.paths import data_file
from elastico.perf.activity import GPU_UTIL, acmetrace_quantiles
from elastico.perf.contention import Demand, contention_params, pair_slowdown, roofline_demand
from elastico.perf.throughput import ThroughputModel
from elastico.perf.training import TrainingSpeedModel


def rows():
    with open(data_file("gavel-pair-observations", "observations.csv"), newline="") as f:
        yield from csv.DictReader(f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", default="1.0")
    ap.add_argument("--contention", default="default")
    ap.add_argument("--gpus", default="V100M16,K80,P100")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    params = contention_params(a.contention)
    busy = (float(np.median(acmetrace_quantiles("Seren", GPU_UTIL))) if a.busy == "acmetrace"
            else float(a.busy))
    tm, tr = ThroughputModel.bundled(), TrainingSpeedModel.bundled()
    cache: dict[str, Demand] = {}

    def demand(job_type: str) -> Demand:
        d = cache.get(job_type)
        if d is None:
            sm = tm.parallel_fraction(job_type)
            d = cache[job_type] = roofline_demand(busy, sm, tr.compute_share(job_type)[0])
        return d

    meas: dict[str, list[float]] = {}
    pred: dict[str, list[float]] = {}
    for r in rows():
        g = r["gpu_model"]
        for v, p, s in ((r["a_job_type"], r["b_job_type"], r["slowdown_a"]),
                        (r["b_job_type"], r["a_job_type"], r["slowdown_b"])):
            if not s:
                continue
            meas.setdefault(g, []).append(float(s))
            pred.setdefault(g, []).append(pair_slowdown(demand(v), demand(p), "mps", params))
    out = []
    for g in a.gpus.split(","):
        m, p = np.array(meas[g]), np.array(pred[g])
        other = np.concatenate([np.array(v) for k, v in meas.items() if k != g])
        const = float(np.median(other))
        out.append({"gpu": g, "sides": int(m.size), "busy": busy, "params": params.describe(),
                    "mae": float(np.mean(np.abs(p - m))),
                    "spearman": float(spearmanr(p, m).statistic),
                    "mae_no_slowdown": float(np.mean(np.abs(1.0 - m))),
                    "mae_constant_other_gpus_median": float(np.mean(np.abs(const - m))),
                    "constant": const,
                    "measured_median": float(np.median(m)), "model_median": float(np.median(p))})
    for o in out:
        if a.json:
            print(json.dumps(o))
        else:
            print(f"{o['gpu']:8s} sides {o['sides']:4d}  MAE {o['mae']:.3f}  Spearman "
                  f"{o['spearman']:+.3f}  | no-slowdown MAE {o['mae_no_slowdown']:.3f}  "
                  f"constant {o['constant']:.2f} MAE {o['mae_constant_other_gpus_median']:.3f}"
                  f"  | median measured {o['measured_median']:.2f} model "
                  f"{o['model_median']:.2f}  ({o['params']}, busy {busy:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
