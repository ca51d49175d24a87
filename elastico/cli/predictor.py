"""``elastico predictor ...``: train, evaluate, retrain, and rebuild the bundled data.

The lead's ``elastico/cli/__init__.py`` calls :func:`register` with its subparsers object; the chosen
command runs as ``args.func(args)`` and returns the exit status: 0 ok, 2 bad input (the
message on stderr names the field or ``FILE:LINE: column`` and the value).

* ``train --data FILE.csv --out MODEL [--name NAME] [--rounds N] [--report FILE.json]``
* ``evaluate [--data FILE.csv] --cv {kfold,leave-one-model-out,job-type-kfold} [--folds K]
  [--seed S] [--json]`` -- prints ``{"model": {...}, "constant": {...}, "analytic": {...}}``
  with ``--json`` (keys in :data:`elastico.predictor.evaluate.METRIC_KEYS`), else a table.
* ``retrain --model-dir DIR [--data BASE.csv] [--json]``
* ``score [--model FILE] --data FILE.csv [--bound B] [--json]`` -- a saved model (default the
  bundled one) and its baselines on any observation CSV (:func:`elastico.predictor.evaluate.
  score`).
* ``convert-gavel --out-dir DIR`` -- rewrites data/gavel-pair-observations/ from Gavel's file.

Calls :mod:`elastico.predictor.model`, :mod:`elastico.predictor.evaluate`,
:mod:`elastico.predictor.service`.  The gRPC server runs with
``python -m elastico.predictor.server`` (the CLI stays free of grpc, tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from elastico.errors import InvalidArgument
from elastico.paths import check_output_file

__all__ = ["register", "training_report"]

_EPILOG = ("exit status: 0 ok; 2 bad input (elastico: error: <field or FILE:LINE: column>: "
           "<value> is not allowed (...) on stderr)")
_CSV_HELP = ("observation CSV, one row per co-located pair: a_<field> and b_<field> columns for "
             "each per-job field, gpu_model, slowdown_a, slowdown_b, source "
             "(docs/predictor.md, 'CSV format')")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``predictor`` (train, evaluate, retrain, score, convert-gavel) to an argparse
    subparsers object."""
    from elastico.predictor.evaluate import CV_SCHEMES
    from elastico.predictor.model import DEFAULT_ROUNDS

    p = subparsers.add_parser(
        "predictor", help="interference (slowdown) predictor: train, evaluate, retrain",
        description="The LightGBM co-location slowdown predictor (docs/predictor.md).")
    sub = p.add_subparsers(dest="predictor_command", required=True, metavar="COMMAND")

    t = sub.add_parser("train", help="train a model on an observation CSV", epilog=_EPILOG,
                       description="Train the LightGBM slowdown model and write its file.")
    t.add_argument("--data", required=True, type=Path, metavar="FILE.csv", help=_CSV_HELP)
    t.add_argument("--out", required=True, type=Path, metavar="MODEL",
                   help="model file to write (JSON; overwritten atomically)")
    t.add_argument("--name", default="lgbm",
                   help="version prefix: the version is NAME-<8 hex of the booster's SHA-256> "
                        "(default: %(default)s)")
    t.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help="boosting rounds, 1..100000 (default: %(default)s)")
    t.add_argument("--report", type=Path, default=None, metavar="FILE.json",
                   help="also cross-validate (leave-one-model-out, kfold, job-type-kfold) and "
                        "write the training report here (default: none)")
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser("evaluate", help="cross-validate the model against two baselines",
                       epilog=_EPILOG,
                       description="Cross-validated MAE, MAPE, Spearman and decision accuracy "
                                   "of the LightGBM model, the constant (training mean) and "
                                   "the analytic model, on the same folds.")
    e.add_argument("--data", type=Path, default=None, metavar="FILE.csv",
                   help=_CSV_HELP + " (default: the bundled Gavel observations)")
    e.add_argument("--cv", required=True, choices=CV_SCHEMES,
                   help="kfold: rows in K folds; leave-one-model-out: one fold per model "
                        "family; job-type-kfold: job types in K folds")
    e.add_argument("--folds", type=int, default=None, metavar="K",
                   help="folds of kfold and job-type-kfold, >= 2 (default: 5; not with "
                        "leave-one-model-out, whose folds are the model families)")
    e.add_argument("--seed", type=int, default=None,
                   help="shuffling seed of kfold and job-type-kfold (default: 0; not with "
                        "leave-one-model-out, which does not shuffle)")
    e.add_argument("--json", action="store_true",
                   help='print {"model": {...}, "constant": {...}, "analytic": {...}} '
                        "(default: a table)")
    e.set_defaults(func=_cmd_evaluate)

    r = sub.add_parser("retrain", help="fold reported observations into a new model",
                       epilog=_EPILOG,
                       description="Train a candidate on the base data plus every reported "
                                   "observation of the model store; promote it only if it "
                                   "is no worse than the serving model on the new rows.")
    r.add_argument("--model-dir", required=True, type=Path, metavar="DIR",
                   help="model store: models/, CURRENT, observations/reported.csv")
    r.add_argument("--data", type=Path, default=None, metavar="BASE.csv",
                   help="base observations (default: the bundled Gavel observations)")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    r.set_defaults(func=_cmd_retrain)

    s = sub.add_parser("score", help="score a saved model on an observation CSV",
                       epilog=_EPILOG,
                       description="MAE, MAPE, Spearman and decision accuracy at a slowdown "
                                   "bound of a saved model on any observation CSV, with its "
                                   "baselines: constant_* (the model's training-set mean), "
                                   "analytic_* (the contention prior) and no_slowdown_*.  "
                                   "Nothing is trained or tuned.")
    s.add_argument("--model", type=Path, default=None, metavar="FILE",
                   help="model file (default: the bundled model)")
    s.add_argument("--data", required=True, type=Path, metavar="FILE.csv", help=_CSV_HELP)
    s.add_argument("--bound", type=float, default=1.5, metavar="B",
                   help="slowdown bound of the safe/unsafe decision, > 1 and <= 50 "
                        "(default: %(default)s; e.g. 1.1)")
    s.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    s.set_defaults(func=_cmd_score)

    c = sub.add_parser("convert-gavel", help="rebuild the observations from Gavel's pairs",
                       epilog=_EPILOG,
                       description="Convert data/gavel-throughputs' measured pairs into "
                                   "observations.csv and suspect.csv (PROVENANCE.md rules).")
    c.add_argument("--out-dir", required=True, type=Path, metavar="DIR",
                   help="folder to write observations.csv and suspect.csv into")
    c.set_defaults(func=_cmd_convert)
    return p


def _load(path: Path | None):
    from elastico.predictor.observations import bundled_observations, read_observations

    return bundled_observations() if path is None else read_observations(path)


def training_report(obs, predictor, data_name: str, data_sha256: str) -> dict[str, Any]:
    """The training report written beside a model: the data, the parameters, the cross-
    validated metrics of the recipe under each scheme (per GPU model for
    leave-one-model-out) and the features by total gain."""
    from elastico.predictor.evaluate import evaluate

    evals = {}
    by_gpu = {}
    for cv in ("leave-one-model-out", "kfold", "job-type-kfold"):
        ev = evaluate(obs, cv)
        evals[cv] = ev.summary()
        if cv == "leave-one-model-out":
            by_gpu = ev.by(lambda o: o.gpu_model)
    gain = predictor.booster.feature_importance(importance_type="gain")
    names = predictor.meta["feature_names"]
    top = sorted(((float(g), n) for g, n in zip(gain, names) if g > 0), reverse=True)
    return {
        "model_version": predictor.version,
        "feature_set": predictor.feature_set,
        "data": {"file": data_name, "sha256": data_sha256, "rows": len(obs),
                 "samples": predictor.meta["training"]["samples"]},
        "params": predictor.meta["params"], "rounds": predictor.meta["rounds"],
        "evaluation": evals,
        "leave-one-model-out_by_gpu": by_gpu,
        "feature_gain": {n: round(g, 3) for g, n in top},
    }


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _cmd_train(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from elastico.predictor.model import train
    from elastico.predictor.observations import file_sha256

    out = out or sys.stdout
    for flag, path in (("--out", args.out), ("--report", args.report)):
        if path is not None:
            check_output_file(flag, path)
    # three different files: an output must never overwrite the data or the other output
    named = [(f, p) for f, p in (("--data", args.data), ("--out", args.out),
                                 ("--report", args.report)) if p is not None]
    for i, (f1, p1) in enumerate(named):
        for f2, p2 in named[i + 1:]:
            if _same_file(p1, p2):
                raise InvalidArgument(f2, str(p2), f"a different file from {f1} ({p1})")
    obs = _load(args.data)
    sha = file_sha256(args.data)
    t0 = time.perf_counter()
    pred = train(obs, rounds=args.rounds, training_info={"data": args.data.name,
                                                         "data_sha256": sha})
    pred.meta["version"] = f"{args.name}-{pred.version.removeprefix('lgbm-')}"
    secs = time.perf_counter() - t0
    pred.save(args.out)
    out.write(f"model {pred.version}: {len(obs)} observations, "
              f"{pred.meta['training']['samples']} samples, trained in {secs:.2f} s -> {args.out}\n")
    if args.report is not None:
        rep = training_report(obs, pred, args.data.name, sha)
        args.report.write_text(json.dumps(rep, indent=1) + "\n")
        m = rep["evaluation"]["leave-one-model-out"]
        out.write("leave-one-model-out: " + ", ".join(
            f"{k} MAE {v['mae']:.3f}" for k, v in m.items()) + f" -> {args.report}\n")
    return 0


def _print_table(res: dict[str, dict[str, float]], out: TextIO) -> None:
    from elastico.predictor.evaluate import METRIC_KEYS

    names = list(res)
    out.write(f"{'metric':<20}" + "".join(f"{n:>12}" for n in names) + "\n")
    for k in METRIC_KEYS:
        fmt = "{:>12d}" if k == "n_pairs" else "{:>12.4f}"
        out.write(f"{k:<20}" + "".join(fmt.format(res[n][k]) for n in names) + "\n")


def _cmd_evaluate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from elastico.predictor.evaluate import evaluate

    out = out or sys.stdout
    if args.cv == "leave-one-model-out":
        # its folds are the model families and it does not shuffle: a K or seed given here
        # would be silently ignored, and the user would believe they had been used
        for flag, value in (("--folds", args.folds), ("--seed", args.seed)):
            if value is not None:
                raise InvalidArgument(flag, value, "only with --cv kfold or job-type-kfold "
                                      "(leave-one-model-out has one fold per model family)")
    folds = 5 if args.folds is None else args.folds
    seed = 0 if args.seed is None else args.seed
    if folds < 2:
        raise InvalidArgument("--folds", folds, "an integer >= 2")
    if seed < 0:
        raise InvalidArgument("--seed", seed, "an integer >= 0")
    obs = _load(args.data)
    res = evaluate(obs, args.cv, k=folds, seed=seed).summary()
    if args.json:
        json.dump(res, out)
        out.write("\n")
    else:
        out.write(f"{args.cv} on {args.data or 'the bundled Gavel observations'}\n")
        _print_table(res, out)
    return 0


def _cmd_retrain(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from elastico.predictor.service import ModelStore, retrain

    out = out or sys.stdout
    if not args.model_dir.is_dir():
        raise InvalidArgument("--model-dir", str(args.model_dir),
                              "an existing model store folder (the server's --model-dir)")
    if not os.access(args.model_dir, os.W_OK):
        raise InvalidArgument("--model-dir", str(args.model_dir), "a folder this process may write")
    base = None if args.data is None else _load(args.data)
    rep = retrain(ModelStore(args.model_dir), base,
                  base_name="bundled" if args.data is None else str(args.data))
    if args.json:
        json.dump(rep, out)
        out.write("\n")
    else:
        line = f"{rep['status']}: serving {rep['new_version'] if rep['status'] == 'promoted' else rep['old_version']}"
        if "old_mae" in rep:
            line += (f" (new rows {rep['new_rows']}: serving-model MAE {rep['old_mae']:.4f}, "
                     f"candidate MAE {rep['new_mae']:.4f})")
        elif "reason" in rep:
            line += f" ({rep['reason']})"
        out.write(line + "\n")
    return 0


def _cmd_convert(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from elastico.predictor.gavel import convert_gavel_pairs
    from elastico.predictor.observations import write_observations

    out = out or sys.stdout
    if not args.out_dir.is_dir():
        raise InvalidArgument("--out-dir", str(args.out_dir), "an existing folder")
    if not os.access(args.out_dir, os.W_OK):
        raise InvalidArgument("--out-dir", str(args.out_dir), "a folder this process may write")
    clean, suspect = convert_gavel_pairs()
    n1 = write_observations(args.out_dir / "observations.csv", clean)
    n2 = write_observations(args.out_dir / "suspect.csv", suspect)
    out.write(f"{n1} observations, {n2} suspect -> {args.out_dir}\n")
    return 0



def _cmd_score(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from elastico.predictor.evaluate import SCORE_BASELINES, SCORE_METRICS, check_bound, score
    from elastico.predictor.learned import bundled_predictor
    from elastico.predictor.model import SlowdownPredictor
    from elastico.predictor.observations import read_observations

    out = out or sys.stdout
    bound = check_bound(args.bound)
    model = bundled_predictor() if args.model is None else SlowdownPredictor.load(args.model)
    obs = read_observations(args.data)
    res = score(model, obs, bound)
    if args.json:
        json.dump(res, out)
        out.write("\n")
        return 0
    out.write(f"{res['model_version']} on {args.data}: {res['n_pairs']} pairs, "
              f"{res['n_slowdowns']} slowdowns, bound {bound:g} "
              f"(safe {100 * res['safe_fraction']:.1f} %, majority rule "
              f"{100 * res['majority_decision_accuracy']:.1f} %)\n")
    out.write(f"{'':<14}" + "".join(f"{m:>20}" for m in SCORE_METRICS) + "\n")
    for name in ("model",) + SCORE_BASELINES:
        pre = "" if name == "model" else name + "_"
        cells = []
        for m in SCORE_METRICS:
            v = res[pre + m]
            cells.append(f"{'n/a' if v is None else f'{v:.4f}':>20}")
        out.write(f"{name:<14}" + "".join(cells) + "\n")
    return 0
