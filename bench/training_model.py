"""Accuracy of the training performance model (not a test): ``python bench/training_model.py
[--json] [--check NAME ...]``.

Each check is one function in :data:`CHECKS` (name -> function returning a list of result
dicts); adding a check is adding a function and a line in the table.  A result has the keys
``check``, ``dataset``, ``points`` and either ``median_ape`` / ``p90_ape`` (absolute
percentage errors as fractions, |predicted / measured - 1|) or a check's own statistic (e.g.
``ks``).  With ``--json`` one JSON object per result on stdout; without, a readable table.

Checks (the measurements and the model: docs/model.md 2.; elastico/perf/training.py):

* ``leave_one_gpu_out``: ``sia`` -- for each of Sia's five jobs and five GPUs, the per-job
  roofline fitted on the other four GPUs predicts the held-out GPU's best measured one-GPU
  point (25 points; issue-22 goal: median <= 0.15); ``gavel`` -- each job type's K80 / P100 /
  V100 value from the model fitted on the two others (its compute share from its Sia
  stand-in).
* ``leave_one_job_out``: a job measured on the reference V100 only, the compute / bandwidth
  shares the median of the other jobs': ``sia`` (its best point on the four other GPUs) and
  ``gavel`` (its K80 and P100 values).
* ``scale_out``: ``sia`` -- leave one placement out: Pollux's throughput model fitted to the
  job's other measured placements on the GPU predicts each held-out placement's speedup over
  one GPU at every measured per-GPU batch (issue-22 goal: median <= 0.10); ``gavel`` -- leave
  one GPU count out of Gavel's 2/4/8-GPU measurements (one server and unconsolidated);
  ``gavel-from-sia`` -- the ResNet families' transfer (the same network's Sia sync times on
  V100, the Gavel job's own step time) against Gavel's measured V100 speedups;
  ``gavel-cross-gpu`` -- the other families' transfer (the sync time fitted to their own V100
  curve, carried to another GPU) against Gavel's measured P100 and K80 speedups.  Gavel's
  targets are its raw measurements (some superlinear, which no model with T_sync >= 0 gives).
* ``sm_active_ks``: the KS distance between the activity model's SM_ACTIVE CDF (and the
  simulator's population) and AcmeTrace's (bench/activity_model.py; docs/model.md 10.).

Prints nothing else; the exit status is 0.  ~15 s (the scale-out check fits ~1,500 models)
without ``sm_active_ks``, ~3 min more with it (three trace-512 replays).
"""

from __future__ import annotations

import argparse
import json
from typing import Callable

import numpy as np

from elastico.perf import training as T


def _result(check: str, dataset: str, points: list[T.CheckPoint]) -> dict:
    ape = np.array([p.ape for p in points])
    return {"check": check, "dataset": dataset, "points": int(len(ape)),
            "median_ape": round(float(np.median(ape)), 4),
            "p90_ape": round(float(np.percentile(ape, 90)), 4)}


def leave_one_gpu_out(model: T.TrainingSpeedModel) -> list[dict]:
    return [_result("leave_one_gpu_out", "sia", T.leave_one_gpu_out_sia(model)),
            _result("leave_one_gpu_out", "gavel", T.leave_one_gpu_out_gavel(model))]


def leave_one_job_out(model: T.TrainingSpeedModel) -> list[dict]:
    return [_result("leave_one_job_out", "sia", T.leave_one_job_out_sia(model)),
            _result("leave_one_job_out", "gavel", T.leave_one_job_out_gavel(model))]


def scale_out(model: T.TrainingSpeedModel) -> list[dict]:
    return [_result("scale_out", "sia", T.scale_out_sia(model)),
            _result("scale_out", "gavel", T.scale_out_gavel(model)),
            _result("scale_out", "gavel-from-sia", T.scale_out_gavel_from_sia(model)),
            _result("scale_out", "gavel-cross-gpu", T.scale_out_gavel_cross_gpu(model))]


def sm_active_ks(model: T.TrainingSpeedModel) -> list[dict]:
    """The activity model against AcmeTrace's SM_ACTIVE CDF (``bench/activity_model.py``: the
    model's 20,000 jobs, Kalos held out, and the simulator's own population on trace-512,
    seeds 0-2 pooled, ~3 min; issue-22 goal: ks <= 0.1)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from activity_model import sm_active_ks as rows

    return rows()


#: check name -> function of the bundled training model returning its result dicts
CHECKS: dict[str, Callable[[T.TrainingSpeedModel], list[dict]]] = {
    "leave_one_gpu_out": leave_one_gpu_out,
    "leave_one_job_out": leave_one_job_out,
    "scale_out": scale_out,
    "sm_active_ks": sm_active_ks,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per result")
    ap.add_argument("--check", action="append", choices=sorted(CHECKS),
                    help="run only this check (repeatable); default: all")
    args = ap.parse_args(argv)
    model = T.TrainingSpeedModel.bundled()
    for name in args.check or CHECKS:
        for r in CHECKS[name](model):
            if args.json:
                print(json.dumps(r), flush=True)
            else:
                stats = "  ".join(f"{k}={v}" for k, v in r.items()
                                  if k not in ("check", "dataset"))
                print(f"{r['check']:<18} {r['dataset']:<6} {stats}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
