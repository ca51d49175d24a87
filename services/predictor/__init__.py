"""elastico.predictor — interference (slowdown) prediction for MPS co-location.

Who calls it: the placer (:mod:`elastico.placer.placement`) checks every co-location against
each resident's slowdown bound, and the round feeds predicted slowdowns back into pricing
(effective throughput = solo throughput / slowdown).  Whom it calls: nothing yet.  Today it
holds the analytic model fitted on Gavel's measured V100 pairs (:class:`AnalyticSlowdown`,
:data:`DEFAULT_KAPPA`) and the :class:`NoInterference` ablation; the LightGBM predictor on
hardware-counter features (DESIGN.md, IAC) comes later behind the same :class:`SlowdownModel`
protocol, with the analytic model as its fallback.
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
from elastico.predictor.profile import JobProfile

__all__ = [
    "JobProfile",
    "SlowdownModel",
    "AnalyticSlowdown",
    "NoInterference",
    "DEFAULT_KAPPA",
    "KAPPA_FULL_ACTIVITY",
    "GavelPair",
    "load_gavel_pairs",
    "fit_kappa",
    "fit_kappa_from_gavel",
    "compose_additive",
]
