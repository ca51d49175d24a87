"""elastico.predictor — interference (slowdown) prediction for GPU co-location.

Who calls it: the placer (:mod:`elastico.placer.placement`) checks every co-location against
each resident's slowdown bound through the :class:`SlowdownModel` interface, the round feeds
predicted slowdowns back into pricing, and the simulator takes its ground truth from measured
pairs (:class:`MeasuredSlowdown`).  Whom it calls: lightgbm, numpy, scipy, the bundled data.

What it holds (docs/predictor.md):

* the feature schema (:mod:`~elastico.predictor.schema`, :class:`JobProfile`) and the
  observation CSV format (:mod:`~elastico.predictor.observations`);
* the LightGBM model (:mod:`~elastico.predictor.model`), its cross-validated evaluation
  against the constant and analytic baselines (:mod:`~elastico.predictor.evaluate`) and the
  bundled model trained on Gavel's measured pairs;
* the contention prior (:mod:`~elastico.predictor.prior`, :class:`ContentionPrior`: a pair's
  slowdown from the two jobs' solo activity, MPS shares and sharing mechanism, nothing
  fitted) that the bundled ``activity-v2`` model corrects with identity-free features
  (:mod:`~elastico.predictor.activity_features`), and ``elastico predictor score``
  (:func:`elastico.predictor.evaluate.score`);
* the :class:`SlowdownModel` implementations: :class:`LearnedSlowdown` (the predictor),
  :class:`AnalyticSlowdown` (the fallback: ``1 + kappa * activity``, fitted on Gavel's V100
  pairs), :class:`NoInterference` (ablation), :class:`MeasuredSlowdown` (ground truth);
* the service core (:mod:`~elastico.predictor.service`: model store, reported observations,
  retrain) and its gRPC adapter (:mod:`elastico.predictor.server`, imported on demand).
"""

from elastico.predictor.analytic import (
    DEFAULT_KAPPA,
    KAPPA_FULL_ACTIVITY,
    AnalyticSlowdown,
    GavelPair,
    NoInterference,
    SlowdownModel,
    compose_additive,
    fit_kappa,
    fit_kappa_from_gavel,
    load_gavel_pairs,
)
from elastico.predictor.prior import ContentionPrior, prior_pair, solo_activity
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import GPU_SPECS, SCHEMA_VERSION

__all__ = [
    "JobProfile",
    "SlowdownModel",
    "AnalyticSlowdown",
    "NoInterference",
    "ContentionPrior",
    "prior_pair",
    "solo_activity",
    "DEFAULT_KAPPA",
    "KAPPA_FULL_ACTIVITY",
    "GavelPair",
    "load_gavel_pairs",
    "fit_kappa",
    "fit_kappa_from_gavel",
    "compose_additive",
    "SCHEMA_VERSION",
    "GPU_SPECS",
    "LearnedSlowdown",
    "MeasuredSlowdown",
    "TimeSlicedTruth",
    "default_slowdown_model",
    "kfold_by_job_type",
]


def __getattr__(name: str):
    # the learned models import lightgbm: loaded on first use, so that importing the
    # package (the placer does) stays cheap and works where lightgbm is missing
    if name in ("LearnedSlowdown", "MeasuredSlowdown", "TimeSlicedTruth", "default_slowdown_model",
                "kfold_by_job_type"):
        from elastico.predictor import learned

        return getattr(learned, name)
    raise AttributeError(f"module 'elastico.predictor' has no attribute {name!r}")
