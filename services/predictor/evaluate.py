"""Cross-validated evaluation of the slowdown model against two baselines (docs/predictor.md,
"Evaluation").

Every fold trains three predictors on the fold's training rows and predicts its held-out sides:

* ``model``: the LightGBM model (:func:`elastico.predictor.model.train`);
* ``constant``: the mean slowdown of the training samples;
* ``analytic``: the contention model used before the predictor existed,
  ``1 + kappa * activity(partner)`` (:class:`elastico.predictor.analytic.AnalyticSlowdown`),
  with ``kappa`` refitted by least squares on the fold's training samples (activity: each
  profile's ``gpu_activity``, see :func:`elastico.predictor.observations.analytic_activity`).

Cross-validation schemes (``cv``):

* ``kfold``: rows shuffled (seeded) into ``k`` folds; a held-out row's pair was never seen,
  but both of its jobs were (with other partners).
* ``leave-one-model-out``: one fold per model family (``model_family``, else the family parsed
  from ``job_type``, else the job type).  The fold of family F trains on the rows where
  neither job is of family F, and predicts every slowdown *suffered by* a job of family F.
  Every measured slowdown is predicted exactly once, by a model that never saw its victim's
  family -- nor, therefore, the pair.
* ``job-type-kfold``: the same with job types dealt (seeded) into ``k`` folds -- how the
  simulator's predictor is trained (docs/predictor.md, "Simulator").

Metrics over the held-out slowdowns (:data:`METRIC_KEYS`): ``mae`` (mean |pred - true|),
``mape`` (mean |pred - true| / true), ``spearman`` (rank correlation of all predicted and
measured slowdowns pooled over folds; 0 when either side is constant), and
``decision_acc_<b>``: the fraction of pairs (rows) for which "safe to co-locate under bound
b" -- every measured slowdown of the pair <= b -- is decided as the measurement says.
``n_pairs``: rows evaluated.

Who calls it: ``elastico predictor evaluate``, the training report, tests.  Whom it calls:
:mod:`elastico.predictor.model`, numpy, scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor.features import family_and_batch
from elastico.predictor.model import SlowdownPredictor, train, training_samples
from elastico.predictor.observations import Observation
from elastico.predictor.profile import JobProfile

__all__ = [
    "METRIC_KEYS",
    "BOUNDS",
    "CV_SCHEMES",
    "PREDICTORS",
    "Fold",
    "Evaluation",
    "make_folds",
    "metrics",
    "fit_kappa_profiles",
    "evaluate",
    "model_group",
    "SCORE_BASELINES",
    "SCORE_METRICS",
    "check_bound",
    "score_metrics",
    "score",
]

BOUNDS = (1.25, 1.5)
METRIC_KEYS = ("mae", "mape", "spearman") + tuple(f"decision_acc_{b}" for b in BOUNDS) + (
    "n_pairs",)
CV_SCHEMES = ("kfold", "leave-one-model-out", "job-type-kfold")
PREDICTORS = ("model", "constant", "analytic")


@dataclass(frozen=True)
class Fold:
    """One fold: ``train`` row indices; ``pred_a`` / ``pred_b`` the rows whose slowdown_a /
    slowdown_b this fold's models predict."""

    name: str
    train: np.ndarray
    pred_a: np.ndarray
    pred_b: np.ndarray


def model_group(p: JobProfile) -> str:
    """The leave-one-model-out group of a job: its model family, else the family parsed from
    its job type, else ``"?"``."""
    if p.model_family is not None:
        return p.model_family
    return family_and_batch(p.job_type)[0] or "?"


def make_folds(obs: Sequence[Observation], cv: str, k: int = 5, seed: int = 0) -> list[Fold]:
    """The folds of scheme ``cv`` (module docstring).  Raises InvalidArgument for an unknown
    scheme, ``k`` < 2 or more than the rows (kfold) / job types (job-type-kfold), or a fold
    that leaves fewer than 2 training samples."""
    if cv not in CV_SCHEMES:
        raise InvalidArgument("--cv", cv, "one of " + ", ".join(CV_SCHEMES))
    n = len(obs)
    has_b = np.array([o.slowdown_b is not None for o in obs], dtype=bool)
    rng = np.random.default_rng(seed)
    folds: list[Fold] = []
    if cv == "kfold":
        if not (isinstance(k, int) and 2 <= k <= n):
            raise InvalidArgument("--folds", k, f"an integer in 2..{n} (rows) for kfold")
        for f, test in enumerate(np.array_split(rng.permutation(n), k)):
            test = np.sort(test)
            train_idx = np.setdiff1d(np.arange(n), test)
            folds.append(Fold(f"fold{f}", train_idx, test, test[has_b[test]]))
    else:
        if cv == "leave-one-model-out":
            key: Callable[[JobProfile], str] = model_group
        else:
            types = sorted({o.a.job_type for o in obs} | {o.b.job_type for o in obs})
            if len(types) < 2:
                raise InvalidArgument("--data", f"{len(types)} job type(s)",
                                      "at least 2 job types for job-type-kfold")
            if not (isinstance(k, int) and 2 <= k <= len(types)):
                raise InvalidArgument("--folds", k, f"an integer in 2..{len(types)} (job types) "
                                      "for job-type-kfold")
            fold_of = {t: f"types{f}" for f, part in
                       enumerate(np.array_split(rng.permutation(len(types)), k))
                       for t in (types[i] for i in part)}
            key = lambda p: fold_of[p.job_type]  # noqa: E731
        ga = np.array([key(o.a) for o in obs], dtype=object)
        gb = np.array([key(o.b) for o in obs], dtype=object)
        for g in sorted(set(ga.tolist()) | set(gb.tolist())):
            train_idx = np.flatnonzero((ga != g) & (gb != g))
            folds.append(Fold(g, train_idx, np.flatnonzero(ga == g),
                              np.flatnonzero((gb == g) & has_b)))
    for f in folds:
        samples = len(f.train) + int(has_b[f.train].sum())
        if samples < 2:
            raise InvalidArgument("--cv", cv, f"fold {f.name!r} leaves {samples} training "
                                  "sample(s); need at least 2 (too few models or rows)")
    return folds


def fit_kappa_profiles(victims: Sequence[JobProfile], partners: Sequence[JobProfile],
                       slowdowns: np.ndarray) -> float:
    """Least-squares ``kappa`` (>= 0) of ``slowdown - 1 = kappa * partner.gpu_activity`` over
    samples whose victim is active (``gpu_activity > 0``; others have regressor 0), through
    the origin: ``sum(x y) / sum(x x)``; 0.0 when every regressor is 0."""
    x = np.array([p.gpu_activity if v.gpu_activity > 0 else 0.0
                  for v, p in zip(victims, partners)], dtype=np.float64)
    y = np.asarray(slowdowns, dtype=np.float64) - 1.0
    sxx = float(x @ x)
    return max(float(x @ y) / sxx, 0.0) if sxx > 0 else 0.0


def _spearman(pred: np.ndarray, true: np.ndarray) -> float:
    if len(pred) < 2 or np.ptp(pred) == 0 or np.ptp(true) == 0:
        return 0.0
    from scipy.stats import spearmanr

    r = float(spearmanr(pred, true).statistic)
    return r if math.isfinite(r) else 0.0


def metrics(obs: Sequence[Observation], pred_a: np.ndarray, pred_b: np.ndarray,
            rows: np.ndarray | None = None) -> dict[str, float]:
    """Metrics (:data:`METRIC_KEYS`) of predictions ``pred_a[i]``, ``pred_b[i]`` (NaN where
    not predicted) against ``obs`` restricted to ``rows`` (default all)."""
    idx = np.arange(len(obs)) if rows is None else np.asarray(rows)
    true_a = np.array([obs[i].slowdown_a for i in idx], dtype=np.float64)
    true_b = np.array([np.nan if obs[i].slowdown_b is None else obs[i].slowdown_b
                       for i in idx], dtype=np.float64)
    pa, pb = np.asarray(pred_a, float)[idx], np.asarray(pred_b, float)[idx]
    mb = ~np.isnan(true_b)
    true = np.concatenate([true_a, true_b[mb]])
    pred = np.concatenate([pa, pb[mb]])
    if np.isnan(pred).any():
        raise ValueError("a measured slowdown has no prediction")
    out: dict[str, float] = {}
    if len(true) == 0:
        return {k: 0.0 for k in METRIC_KEYS[:-1]} | {"n_pairs": 0}
    err = np.abs(pred - true)
    out["mae"] = float(err.mean())
    out["mape"] = float((err / true).mean())
    out["spearman"] = _spearman(pred, true)
    for b in BOUNDS:
        safe_true = (true_a <= b) & np.where(mb, true_b <= b, True)
        safe_pred = (pa <= b) & np.where(mb, pb <= b, True)
        out[f"decision_acc_{b}"] = float((safe_true == safe_pred).mean())
    out["n_pairs"] = int(len(idx))
    return out


@dataclass
class Evaluation:
    """Out-of-fold predictions of each predictor (``pred[name] = (pred_a, pred_b)``, NaN
    where a side is not measured), the folds, and the observations."""

    obs: Sequence[Observation]
    cv: str
    folds: list[Fold]
    pred: dict[str, tuple[np.ndarray, np.ndarray]]

    def summary(self, rows: np.ndarray | None = None) -> dict[str, dict[str, float]]:
        """``{"model": {...}, "constant": {...}, "analytic": {...}}``, each with
        :data:`METRIC_KEYS` (over ``rows``, default all)."""
        return {name: metrics(self.obs, pa, pb, rows) for name, (pa, pb) in self.pred.items()}

    def by(self, key: Callable[[Observation], str]) -> dict[str, dict[str, dict[str, float]]]:
        """:meth:`summary` per value of ``key(observation)`` (e.g. the GPU model)."""
        groups: dict[str, list[int]] = {}
        for i, o in enumerate(self.obs):
            groups.setdefault(key(o), []).append(i)
        return {g: self.summary(np.array(rows)) for g, rows in sorted(groups.items())}


def evaluate(obs: Sequence[Observation], cv: str = "leave-one-model-out", *, k: int = 5,
             seed: int = 0,
             train_fn: Callable[[Sequence[Observation]], SlowdownPredictor] = train
             ) -> Evaluation:
    """Cross-validates the model and both baselines on ``obs`` under scheme ``cv`` (module
    docstring).  ``k``/``seed``: folds and shuffling of ``kfold`` and ``job-type-kfold``.
    ``train_fn`` trains the model on a fold's rows (default :func:`train`).  Raises
    InvalidArgument for fewer than 2 rows or a bad scheme (see :func:`make_folds`)."""
    obs = list(obs)
    if len(obs) < 2:
        raise InvalidArgument("--data", len(obs), "at least 2 observation rows to evaluate")
    folds = make_folds(obs, cv, k, seed)
    n = len(obs)
    pred = {name: (np.full(n, np.nan), np.full(n, np.nan)) for name in PREDICTORS}
    for f in folds:
        tr = [obs[i] for i in f.train]
        model = train_fn(tr)
        v, p, _, y = training_samples(tr)
        mean = float(y.mean())
        kappa = fit_kappa_profiles(v, p, y)
        for side, rows in (("a", f.pred_a), ("b", f.pred_b)):
            if len(rows) == 0:
                continue
            col = 0 if side == "a" else 1
            vic = [obs[i].a if side == "a" else obs[i].b for i in rows]
            par = [obs[i].b if side == "a" else obs[i].a for i in rows]
            gpu = [obs[i].gpu_model for i in rows]
            pred["model"][col][rows] = model.predict(vic, par, gpu)
            pred["constant"][col][rows] = mean
            pred["analytic"][col][rows] = [
                1.0 + kappa * pp.gpu_activity if vv.gpu_activity > 0 else 1.0
                for vv, pp in zip(vic, par)]
    return Evaluation(obs, cv, folds, pred)


# ---------------------------------------------------------------------------------------------
# Scoring a saved model on any observation file (``elastico predictor score``)

#: Predictors ``score`` reports, each as ``<name>_<metric>`` (the model's without prefix).
SCORE_BASELINES = ("constant", "analytic", "no_slowdown")
SCORE_METRICS = ("mae", "mape", "spearman", "decision_accuracy")


def check_bound(bound: object, field: str = "--bound") -> float:
    """A slowdown bound ``b`` in (1, :data:`~elastico.predictor.schema.MAX_SLOWDOWN`]; a pair
    is *safe* at ``b`` when every measured slowdown of it is <= b.  InvalidArgument else."""
    from elastico.predictor.schema import MAX_SLOWDOWN

    ok = isinstance(bound, (int, float)) and not isinstance(bound, bool) and math.isfinite(
        bound) and 1.0 < bound <= MAX_SLOWDOWN
    if not ok:
        raise InvalidArgument(field, bound, f"a slowdown bound > 1 and <= {MAX_SLOWDOWN:g} "
                              "(e.g. 1.1 or 1.5)")
    return float(bound)


def score_metrics(obs: Sequence[Observation], pred_a: np.ndarray, pred_b: np.ndarray,
                  bound: float) -> dict[str, float | None]:
    """``mae``, ``mape``, ``spearman`` over every measured slowdown (``slowdown_a`` of each
    row, ``slowdown_b`` where measured), pooled; ``decision_accuracy``: the fraction of rows
    whose "safe at ``bound``" (every measured slowdown <= bound) the predictions decide as
    measured.  ``spearman`` is None when the predictions or the measurements are constant
    (undefined).  ``pred_b[i]`` is ignored where ``slowdown_b`` is not measured."""
    true_a = np.array([o.slowdown_a for o in obs], dtype=np.float64)
    true_b = np.array([np.nan if o.slowdown_b is None else o.slowdown_b for o in obs])
    pa, pb = np.asarray(pred_a, float), np.asarray(pred_b, float)
    mb = ~np.isnan(true_b)
    true = np.concatenate([true_a, true_b[mb]])
    pred = np.concatenate([pa, pb[mb]])
    err = np.abs(pred - true)
    rho = None
    if len(pred) >= 2 and np.ptp(pred) > 0 and np.ptp(true) > 0:
        from scipy.stats import spearmanr

        r = float(spearmanr(pred, true).statistic)
        rho = r if math.isfinite(r) else None
    safe_true = (true_a <= bound) & np.where(mb, true_b <= bound, True)
    safe_pred = (pa <= bound) & np.where(mb, pb <= bound, True)
    return {"mae": float(err.mean()), "mape": float((err / true).mean()), "spearman": rho,
            "decision_accuracy": float((safe_true == safe_pred).mean())}


def score(model, obs: Sequence[Observation], bound: float = 1.5) -> dict[str, object]:
    """Scores a saved model (:class:`SlowdownPredictor`) on ``obs`` against its baselines
    (docs/predictor.md, "Scoring"): the model as it serves (:class:`elastico.predictor.
    learned.LearnedSlowdown`: MPS-share correction for an identity-v1 model, the activity
    rule), ``constant_*`` (the model's own training-set mean slowdown), ``analytic_*`` (the
    contention prior, :mod:`elastico.predictor.prior`, reading each row's MPS share and
    activity columns) and ``no_slowdown_*`` (1.0).  Also ``n_pairs``, ``n_slowdowns``,
    ``bound``, ``safe_fraction`` (rows safe at the bound as measured),
    ``majority_decision_accuracy`` (always deciding the more common of safe / unsafe),
    ``model_version`` and ``model_mean_slowdown``.  InvalidArgument for a bad bound or no
    rows."""
    from elastico.predictor.learned import LearnedSlowdown
    from elastico.predictor.prior import prior_pair

    bound = check_bound(bound)
    obs = list(obs)
    if not obs:
        raise InvalidArgument("--data", 0, "at least one observation row")
    learned = LearnedSlowdown([model])
    n = len(obs)
    pa, pb = np.empty(n), np.empty(n)
    by_gpu: dict[str, list[int]] = {}
    for i, o in enumerate(obs):
        by_gpu.setdefault(o.gpu_model, []).append(i)
    for gpu, rows in by_gpu.items():
        sa, sb = learned.pairs([obs[i].a for i in rows], [obs[i].b for i in rows], gpu)
        pa[rows], pb[rows] = sa, sb
    mean = float(model.meta.get("training", {}).get("mean_slowdown", math.nan))
    if not math.isfinite(mean):
        raise InvalidArgument("--model", model.version, "a model file whose training record "
                              "has mean_slowdown (retrain it)")
    preds = {
        "": (pa, pb),
        "constant_": (np.full(n, mean), np.full(n, mean)),
        "analytic_": (np.array([prior_pair(o.a, o.b) for o in obs]),
                      np.array([prior_pair(o.b, o.a) for o in obs])),
        "no_slowdown_": (np.ones(n), np.ones(n)),
    }
    out: dict[str, object] = {"model_version": model.version, "bound": bound, "n_pairs": n,
                              "n_slowdowns": n + sum(o.slowdown_b is not None for o in obs)}
    for prefix, (a, b) in preds.items():
        for k, v in score_metrics(obs, a, b, bound).items():
            out[prefix + k] = v
    safe = np.array([o.slowdown_a <= bound and (o.slowdown_b is None or o.slowdown_b <= bound)
                     for o in obs])
    out["safe_fraction"] = float(safe.mean())
    out["majority_decision_accuracy"] = float(max(safe.mean(), 1.0 - safe.mean()))
    out["model_mean_slowdown"] = mean
    return out
