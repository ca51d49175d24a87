"""Analytic interference (slowdown) models: the fallback the placer uses until the LightGBM
predictor exists, and whenever the predictor service is down.

Slowdown (DESIGN.md): co-located step time / solo step time, >= 1.

Pair model (:class:`AnalyticSlowdown`)::

    pair_slowdown(a, b) = 1 + kappa * b.gpu_activity      if a.gpu_activity > 0
                        = 1                               otherwise

A job that keeps the SMs busy is slowed in proportion to how busy its partner keeps them; a
job that never touches the SMs (activity 0) is not slowed.  ``kappa`` is fitted by least
squares on Gavel's measured V100 single-GPU pairs (see :func:`fit_kappa_from_gavel` and
:data:`DEFAULT_KAPPA`).

Composition on one GPU (an ASSUMPTION, not measured: Gavel only measured pairs): the extra
slowdowns add up::

    sigma_i = 1 + sum_{k != i} (pair_slowdown(i, k) - 1)

Under MPS each extra co-runner takes SM time, cache and DRAM bandwidth from everybody, so the
additive form is the first-order term; it over-estimates when co-runners interfere with each
other rather than with ``i`` and is therefore the conservative choice for a bound check.
Because every term is >= 0, removing a co-runner never raises anybody's slowdown.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor.profile import JobProfile

__all__ = [
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
    "ResidentsMemo",
]

# Least-squares kappa of ``1 + kappa * activity_b`` on Gavel's measured V100 single-GPU pairs
# (data/gavel-throughputs/derived/simulation_throughputs_pairs_flat.csv, worker_type v100,
# scale factor 1: 676 ordered pairs, minus 40 both-zero (not run) rows, minus 80 artefact rows
# whose co-located throughput equals the isolated one exactly = 556 observations).
# Each Gavel job ran alone on a whole V100 (normalized speed 1), so its activity is its Amdahl
# parallel fraction p: DEFAULT_KAPPA uses activity = elastico.perf.throughput.ThroughputModel
# .bundled().parallel_fraction(job_type) (p per MISO family: 0.107 A3C .. 0.802 Transformer),
# giving 1.8095.  Recomputed by tests/test_predictor_analytic.py::test_default_kappa_is_the_gavel_fit
# (which fails, asking for this constant to be refreshed, if the throughput model's p change).
DEFAULT_KAPPA = 1.8095409866785455

# The same fit with activity 1.0 for every job (p = 1, no throughput model needed): the mean
# extra slowdown, 1.0360 (median 0.580; the mean is pulled up by a few pairs slowed > 5x).
KAPPA_FULL_ACTIVITY = 1.0360139255769545


@runtime_checkable
class SlowdownModel(Protocol):
    """Predicts MPS co-location slowdowns (>= 1).  Implementations: :class:`AnalyticSlowdown`,
    :class:`NoInterference`; the LightGBM predictor later."""

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        """Slowdown of ``a`` when it shares one GPU with ``b`` under MPS (>= 1)."""
        ...

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        """Slowdown of each resident of one GPU, shape ``(len(residents),)``, each >= 1."""
        ...


def compose_additive(model: SlowdownModel, residents: Sequence[JobProfile]) -> np.ndarray:
    """``sigma_i = 1 + sum_{k != i} (pair_slowdown(i, k) - 1)`` from any pair model
    (the module docstring's composition assumption); O(n^2) pair calls."""
    n = len(residents)
    out = np.ones(n)
    for i in range(n):
        for k in range(n):
            if i != k:
                out[i] += model.pair_slowdown(residents[i], residents[k]) - 1.0
    return out


class ResidentsMemo:
    """A model's ``gpu_slowdowns`` remembered per resident set (the placer's bound checks ask
    for the same GPUs over and over: 631,000 calls in a 512-GPU llm-mix replay;
    bench/sim_cpu.py).  Only for a model whose answer is a function of the residents alone.
    Holds at most ``limit`` sets (cleared when full); hands out copies, so a caller writing
    into its array changes nothing the next caller gets."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self._sets: dict[tuple[JobProfile, ...], np.ndarray] = {}

    def get(self, residents: Sequence[JobProfile],
            compute: Callable[[Sequence[JobProfile]], np.ndarray]) -> np.ndarray:
        """``compute(residents)``, from memory when this set was asked before."""
        key = tuple(residents)
        out = self._sets.get(key)
        if out is None:
            if len(self._sets) >= self.limit:
                self._sets.clear()
            out = self._sets[key] = compute(residents)
        return out.copy()


@dataclass(frozen=True)
class AnalyticSlowdown:
    """``pair_slowdown(a, b) = 1 + kappa * b.gpu_activity * [a.gpu_activity > 0]``
    (module docstring).  ``kappa`` (unitless, >= 0): extra slowdown per unit of the partner's
    SM activity; default :data:`DEFAULT_KAPPA` (Gavel V100 fit)."""

    kappa: float = DEFAULT_KAPPA

    def __post_init__(self) -> None:
        if not (math.isfinite(self.kappa) and self.kappa >= 0.0):
            raise InvalidArgument("kappa", self.kappa, "finite and >= 0")

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        if a.gpu_activity <= 0.0:
            return 1.0
        return 1.0 + self.kappa * b.gpu_activity

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        act = np.fromiter((r.gpu_activity for r in residents), float, len(residents))
        if act.size < 2:
            return np.ones(act.size)
        others = act.sum() - act
        return 1.0 + self.kappa * np.where(act > 0.0, others, 0.0)


@dataclass(frozen=True)
class NoInterference:
    """Every slowdown is 1.0 (ablation: co-location assumed free)."""

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        return 1.0

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        return np.ones(len(residents))


# ---------------------------------------------------------------------------------------------
# Fitting kappa on Gavel's measured pairs


@dataclass(frozen=True)
class GavelPair:
    """One usable measured pair: ``job_a`` slowed by ``slowdown_a`` (isolated / co-located
    throughput, unitless) when sharing one GPU with ``job_b``."""

    job_a: str
    job_b: str
    slowdown_a: float


def load_gavel_pairs(pairs_csv: str | Path, worker_type: str = "v100") -> list[GavelPair]:
    """Usable single-GPU pairs of ``worker_type`` from Gavel's flattened pairs CSV
    (data/gavel-throughputs/derived/simulation_throughputs_pairs_flat.csv; PROVENANCE.md).

    Kept: scale factor 1 on both sides.  Skipped (PROVENANCE.md caveats): ``both_zero`` rows
    (pair not run), rows whose co-located throughput of ``a`` is <= 0, and artefact rows where
    the co-located throughput equals the isolated one exactly (or exceeds it)."""
    out: list[GavelPair] = []
    with open(pairs_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["worker_type"] != worker_type:
                continue
            if row["scale_factor_a"] != "1" or row["scale_factor_b"] != "1":
                continue
            if row["both_zero"] not in ("0", "False", "false", ""):
                continue
            iso, col = float(row["isolated_tput_a"]), float(row["colocated_tput_a"])
            if not (iso > 0.0 and col > 0.0) or col >= iso:
                continue
            out.append(GavelPair(row["job_a"], row["job_b"], iso / col))
    return out


def fit_kappa(pairs: Iterable[GavelPair], activity: Callable[[str], float]) -> float:
    """Least-squares ``kappa`` of ``slowdown_a - 1 = kappa * activity(b) * [activity(a) > 0]``
    through the origin: ``kappa = sum(x * y) / sum(x * x)``.  ``activity`` maps a job type to
    its SM activity at a full GPU (fraction in [0, 1]).  Raises InvalidArgument when no pair
    has a non-zero regressor."""
    xs, ys = [], []
    for p in pairs:
        aa, ab = float(activity(p.job_a)), float(activity(p.job_b))
        for name, v in (("activity(" + p.job_a + ")", aa), ("activity(" + p.job_b + ")", ab)):
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise InvalidArgument(name, v, "a fraction in [0, 1]")
        xs.append(ab if aa > 0.0 else 0.0)
        ys.append(p.slowdown_a - 1.0)
    x, y = np.asarray(xs), np.asarray(ys)
    sxx = float(x @ x)
    if sxx <= 0.0:
        raise InvalidArgument("pairs", len(xs), "at least one pair with non-zero activities")
    return max(float(x @ y) / sxx, 0.0)


def fit_kappa_from_gavel(
    pairs_csv: str | Path,
    activity: Callable[[str], float] = lambda job_type: 1.0,
    worker_type: str = "v100",
) -> float:
    """Fit ``kappa`` on Gavel's measured pairs of ``worker_type`` (default V100):
    :func:`load_gavel_pairs` then :func:`fit_kappa`.  The default ``activity`` (1.0 for every
    job) reproduces :data:`KAPPA_FULL_ACTIVITY`; pass the throughput model's
    ``parallel_fraction`` to reproduce :data:`DEFAULT_KAPPA`."""
    return fit_kappa(load_gavel_pairs(pairs_csv, worker_type), activity)
