"""Leave-one-family-out accuracy and the learning curve of the slowdown predictors on Gavel's
measured pairs (not a test): ``python bench/predictor_loo_bench.py [--seeds N] [--json FILE]``.

Data: the bundled observations (data/gavel-pair-observations/observations.csv, 907 pairs,
1814 measured slowdowns, seven model families) -- the only licensable measured pairs the
project has.

**Leave one family out.**  For each model family F, every predictor that learns is trained on
the rows in which neither job is of family F and predicts every slowdown *suffered by* a job of
family F (:func:`elastico.predictor.evaluate.make_folds`, ``leave-one-model-out``); pooled
over the seven folds every measured slowdown is predicted once.  Predictors:

* ``old``: the issue-22 recipe (feature set ``identity-v1``: Gavel job-type features);
* ``new``: the contention prior corrected by LightGBM (``activity-v2``, identity-free);
* ``prior``: the contention prior alone (:mod:`elastico.predictor.prior`; nothing trained);
* ``constant``: the fold's training-sample mean slowdown;
* ``no_slowdown``: 1.0.

Metrics (:func:`elastico.predictor.evaluate.score_metrics`): MAE, Spearman (pooled),
decision accuracy at b = 1.1 and 1.5 (a pair is safe when both its measured slowdowns are
<= b), and the majority rule's accuracy.

**Learning curve.**  For each family F and seed: the rows with a job of F are shuffled; the
first 20 are the pool of "observed co-locations", the rest are scored (the same rows for
every k).  The model is trained on the rows without F plus the first k of the pool, k = 0, 5,
10, 20, and scored (MAE) on the slowdowns suffered by F's jobs in the scored rows.  Printed:
the mean over families and seeds, and per family.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from elastico.predictor.evaluate import make_folds, model_group, score_metrics  # noqa: E402
from elastico.predictor.model import train, training_samples  # noqa: E402
from elastico.predictor.observations import bundled_observations  # noqa: E402
from elastico.predictor.prior import prior_pair  # noqa: E402

PREDICTORS = ("old", "new", "prior", "constant", "no_slowdown")
BOUNDS = (1.1, 1.5)
KS = (0, 5, 10, 20)


def _train(name: str, rows):
    return train(rows, feature_set="identity-v1" if name == "old" else "activity-v2")


def leave_one_family_out(obs) -> dict:
    n = len(obs)
    pred = {k: (np.full(n, np.nan), np.full(n, np.nan)) for k in PREDICTORS}
    for f in make_folds(obs, "leave-one-model-out"):
        tr = [obs[i] for i in f.train]
        mean = float(training_samples(tr)[3].mean())
        models = {k: _train(k, tr) for k in ("old", "new")}
        for col, rows in ((0, f.pred_a), (1, f.pred_b)):
            if len(rows) == 0:
                continue
            vic = [obs[i].a if col == 0 else obs[i].b for i in rows]
            par = [obs[i].b if col == 0 else obs[i].a for i in rows]
            gpu = [obs[i].gpu_model for i in rows]
            for k, m in models.items():
                pred[k][col][rows] = m.predict(vic, par, gpu)
            pred["prior"][col][rows] = [prior_pair(v, p) for v, p in zip(vic, par)]
            pred["constant"][col][rows] = mean
            pred["no_slowdown"][col][rows] = 1.0
    out = {}
    for k, (pa, pb) in pred.items():
        pb = np.where([o.slowdown_b is None for o in obs], 1.0, pb)
        res = {}
        for b in BOUNDS:
            m = score_metrics(obs, pa, pb, b)
            res.update(mae=m["mae"], mape=m["mape"], spearman=m["spearman"])
            res[f"decision_accuracy_{b}"] = m["decision_accuracy"]
        out[k] = res
    for b in BOUNDS:
        safe = np.array([o.slowdown_a <= b and (o.slowdown_b is None or o.slowdown_b <= b)
                         for o in obs])
        out.setdefault("majority", {})[f"decision_accuracy_{b}"] = float(
            max(safe.mean(), 1 - safe.mean()))
    return out


def learning_curve(obs, seeds: int, recipes=("new", "old")) -> dict:
    groups = [(model_group(o.a), model_group(o.b)) for o in obs]
    fams = sorted({g for ga, gb in groups for g in (ga, gb)})
    res: dict = {r: {f: {k: [] for k in KS} for f in fams} for r in recipes}
    prior_res: dict = {f: [] for f in fams}
    for fam in fams:
        with_f = [i for i, (ga, gb) in enumerate(groups) if fam in (ga, gb)]
        without = [obs[i] for i, (ga, gb) in enumerate(groups) if fam not in (ga, gb)]
        for seed in range(seeds):
            perm = np.random.default_rng(seed).permutation(with_f)
            pool, scored = list(perm[:max(KS)]), list(perm[max(KS):])
            vic, par, gpu, true = [], [], [], []
            for i in scored:
                o = obs[i]
                if groups[i][0] == fam:
                    vic.append(o.a), par.append(o.b), gpu.append(o.gpu_model)
                    true.append(o.slowdown_a)
                if groups[i][1] == fam and o.slowdown_b is not None:
                    vic.append(o.b), par.append(o.a), gpu.append(o.gpu_model)
                    true.append(o.slowdown_b)
            true = np.array(true)
            prior_res[fam].append(float(np.abs(
                np.array([prior_pair(v, p) for v, p in zip(vic, par)]) - true).mean()))
            for r in recipes:
                for k in KS:
                    m = _train(r, without + [obs[i] for i in pool[:k]])
                    res[r][fam][k].append(float(np.abs(m.predict(vic, par, gpu) - true).mean()))
    out = {}
    for r in recipes:
        out[r] = {"mean": {k: float(np.mean([np.mean(res[r][f][k]) for f in fams])) for k in KS},
                  "by_family": {f: {k: float(np.mean(res[r][f][k])) for k in KS} for f in fams}}
    out["prior"] = {"mean": float(np.mean([np.mean(v) for v in prior_res.values()])),
                    "by_family": {f: float(np.mean(v)) for f, v in prior_res.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="learning-curve draws per family")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args()
    obs = bundled_observations()
    t0 = time.perf_counter()
    loo = leave_one_family_out(obs)
    print(f"leave one family out, {len(obs)} Gavel pairs ({time.perf_counter() - t0:.0f} s)")
    print(f"{'':<12}{'MAE':>8}{'MAPE':>8}{'Spearman':>10}{'acc b=1.1':>11}{'acc b=1.5':>11}")
    for k in PREDICTORS:
        r = loo[k]
        rho = "n/a" if r["spearman"] is None else f"{r['spearman']:.3f}"
        print(f"{k:<12}{r['mae']:>8.3f}{r['mape']:>8.3f}{rho:>10}"
              f"{r['decision_accuracy_1.1']:>11.3f}{r['decision_accuracy_1.5']:>11.3f}")
    mj = loo["majority"]
    print(f"{'majority':<12}{'':>26}{mj['decision_accuracy_1.1']:>11.3f}"
          f"{mj['decision_accuracy_1.5']:>11.3f}")
    t0 = time.perf_counter()
    lc = learning_curve(obs, args.seeds)
    print(f"\nlearning curve (MAE on a held-out family's pairs after k of its co-locations "
          f"are observed; {args.seeds} draws per family; {time.perf_counter() - t0:.0f} s)")
    print(f"{'':<16}" + "".join(f"{'k=' + str(k):>8}" for k in KS))
    for r in ("new", "old"):
        print(f"{r + ' (mean)':<16}" + "".join(f"{lc[r]['mean'][k]:>8.3f}" for k in KS))
    print(f"{'prior (mean)':<16}{lc['prior']['mean']:>8.3f}")
    for f, v in lc["new"]["by_family"].items():
        print(f"  new {f:<11}" + "".join(f"{v[k]:>8.3f}" for k in KS))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"leave_one_family_out": loo, "learning_curve": lc}, fh, indent=1)


if __name__ == "__main__":
    main()
