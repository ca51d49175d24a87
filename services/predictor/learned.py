"""Slowdown models behind the one :class:`~elastico.predictor.analytic.SlowdownModel`
interface the placer and the simulator use (docs/predictor.md, "Serving" and "Simulator").

* :class:`LearnedSlowdown`: the LightGBM predictor(s).  With several predictors a *route*
  picks the one that answers for each victim -- how the simulator's k-fold predictor is built
  (:func:`kfold_by_job_type`).
* :class:`MeasuredSlowdown`: the simulator's ground truth, Gavel's measured pairs.
* :func:`default_slowdown_model`: the bundled LightGBM model, or the analytic model when no
  model can be loaded (the fallback).

Rules shared by all of them (as :class:`~elastico.predictor.analytic.AnalyticSlowdown` has
them): a job with ``gpu_activity == 0`` is not slowed and slows nobody; on one GPU the extra
slowdowns add up, ``sigma_i = 1 + sum_k (pair(i, k) - 1)`` (an assumption: only pairs were
measured).  MPS share (an ASSUMPTION: no bundled measurement varies the MPS share): the pair
data were taken without per-client limits, so a partner held to ``mps_share = s`` is taken to
cause the measured extra slowdown times its relative activity at ``s``, ``1 / (p/s + 1 - p)``
with ``p`` its family's Amdahl parallel fraction (``s`` itself when ``p`` is unknown) -- the
same dependence on the partner's activity as the analytic model's.  A model trained on data
that does vary the share (``share_varied`` in its file) gets no such correction.

Who calls it: the simulate CLI, the placer's policies (through ``PolicyEnv.slowdown``), the
service core.  Whom it calls: :mod:`elastico.predictor.model`, numpy.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor.analytic import (AnalyticSlowdown, ResidentsMemo, SlowdownModel,
                                         compose_additive)
from elastico.predictor.features import SoloCatalog, family_and_batch
from elastico.predictor.model import SlowdownPredictor, train
from elastico.predictor.observations import Observation
from elastico.predictor.profile import JobProfile

__all__ = [
    "BUNDLED_MODEL",
    "LEGACY_MODEL",
    "LearnedSlowdown",
    "MeasuredSlowdown",
    "TimeSlicedTruth",
    "share_factor",
    "bundled_predictor",
    "default_slowdown_model",
    "kfold_by_job_type",
    "truth_gpu",
]

_LOG = logging.getLogger(__name__)

#: The bundled model file: feature set ``activity-v2`` (the contention prior corrected by
#: LightGBM on identity-free features), trained on data/gavel-pair-observations/observations.csv.
BUNDLED_MODEL = Path(__file__).resolve().parent / "models" / "activity-lgbm.json"
#: The model of issue 22 (feature set ``identity-v1``, Gavel job-type features), kept for
#: comparison (bench/predictor_loo_bench.py) and loadable with ``--model``.
LEGACY_MODEL = Path(__file__).resolve().parent / "models" / "gavel-lgbm.json"
_CACHE_LIMIT = 200_000
_CACHED_BATCH = 256  # batches up to this size use the prediction cache


@lru_cache(maxsize=8192)
def share_factor(p: JobProfile) -> float:
    """Relative activity of a partner at its MPS share (module docstring): 1.0 without a
    share or at share 1, else ``1 / (p/s + 1 - p)`` (``s`` when ``p`` is unknown); cached."""
    s = p.mps_share
    if s is None or s >= 1.0:
        return 1.0
    fam = p.model_family if p.model_family is not None else family_and_batch(p.job_type)[0]
    par = SoloCatalog.bundled().parallel.get(fam) if fam is not None else None
    if par is None:
        return float(s)
    return 1.0 / (par / s + 1.0 - par)


def _compose(residents: Sequence[JobProfile], pair: Callable[[list, list], np.ndarray],
             scale: bool) -> np.ndarray:
    """Additive composition over ordered pairs, pair slowdowns from one batched call."""
    n = len(residents)
    if n < 2:
        return np.ones(n)
    vi, pi = np.nonzero(~np.eye(n, dtype=bool))
    s = pair([residents[i] for i in vi], [residents[k] for k in pi])
    act = np.array([r.gpu_activity > 0 for r in residents])
    extra = np.where(act[vi] & act[pi], s - 1.0, 0.0)
    if scale:
        extra = extra * np.array([share_factor(residents[k]) for k in pi])
    out = np.ones(n)
    np.add.at(out, vi, extra)
    return out


class LearnedSlowdown:
    """:class:`SlowdownModel` over one or more :class:`SlowdownPredictor`.

    ``route(victim) -> index`` chooses the predictor that answers for a victim (default: the
    first).  ``default_gpu``: the GPU model assumed when neither profile names one ("" =
    unknown, NaN GPU features).  Predictions are cached per (victim, partner, GPU).
    """

    def __init__(self, predictors: Sequence[SlowdownPredictor],
                 route: Callable[[JobProfile], int] | None = None, default_gpu: str = ""):
        if not predictors:
            raise InvalidArgument("predictors", 0, "at least one trained predictor")
        self.predictors = list(predictors)
        self.route = route or (lambda p: 0)
        self.default_gpu = default_gpu
        # the share correction is for identity-v1 models trained without shares; an
        # activity-v2 model's prior already reads every MPS share
        self._scale = [not pr.share_varied
                       and getattr(pr, "feature_set", "identity-v1") == "identity-v1"
                       for pr in self.predictors]
        self._cache: dict[tuple[JobProfile, JobProfile, str], float] = {}
        # residents -> gpu_slowdowns: composed from the cached pairs, so valid as long as
        # they are
        self._gpu_memo = ResidentsMemo(_CACHE_LIMIT)
        self._domain: dict[tuple[JobProfile, JobProfile], bool] = {}

    @property
    def version(self) -> str:
        """The answering model's version (``+``-joined for several)."""
        return "+".join(p.version for p in self.predictors)

    def _gpu(self, a: JobProfile, b: JobProfile) -> str:
        return a.gpu_model or b.gpu_model or self.default_gpu

    def raw(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
            gpu_models: Sequence[str] | None = None) -> np.ndarray:
        """Model slowdowns of ``victims[i]`` next to ``partners[i]`` (no share correction, no
        activity rule), shape ``(n,)``; one LightGBM call per predictor.  Small batches (the
        placer's, which repeat) are cached; large ones (a PredictSlowdown call) are not."""
        n = len(victims)
        gpus = list(gpu_models) if gpu_models is not None else [
            self._gpu(v, p) for v, p in zip(victims, partners)]
        use_cache = n <= _CACHED_BATCH
        out = np.empty(n)
        todo: dict[int, list[int]] = {}
        route = self.route
        single = len(self.predictors) == 1
        for i in range(n):
            if use_cache:
                hit = self._cache.get((victims[i], partners[i], gpus[i]))
                if hit is not None:
                    out[i] = hit
                    continue
            todo.setdefault(0 if single else route(victims[i]), []).append(i)
        if len(self._cache) > _CACHE_LIMIT:
            self._cache.clear()
        for r, idx in todo.items():
            if len(idx) == n:
                s = self.predictors[r].predict(victims, partners, gpus)
            else:
                s = self.predictors[r].predict([victims[i] for i in idx],
                                               [partners[i] for i in idx],
                                               [gpus[i] for i in idx])
            out[idx] = s
            if use_cache:
                for i, v in zip(idx, s.tolist()):
                    self._cache[(victims[i], partners[i], gpus[i])] = v
        return out

    def slowdowns(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
                  gpu_model: str | None = None) -> np.ndarray:
        """Slowdown of ``victims[i]`` next to ``partners[i]`` on ``gpu_model`` (default: the
        profiles' GPU), with the activity rule and the share correction of the module
        docstring, shape ``(n,)``, each >= 1."""
        n = len(victims)
        if n == 0:
            return np.ones(0)
        gpus = None if gpu_model is None else [gpu_model] * n
        s = self.raw(victims, partners, gpus)
        active = np.fromiter((v.gpu_activity > 0 and p.gpu_activity > 0
                              for v, p in zip(victims, partners)), dtype=bool, count=n)
        extra = np.where(active, s - 1.0, 0.0)
        if any(p.mps_share is not None for p in partners):
            scale = np.fromiter(
                (share_factor(p) if p.mps_share is not None and self._scale[
                    0 if len(self.predictors) == 1 else self.route(v)] else 1.0
                 for v, p in zip(victims, partners)), dtype=np.float64, count=n)
            extra = extra * scale
        return 1.0 + extra

    def pairs(self, a: Sequence[JobProfile], b: Sequence[JobProfile],
              gpu_model: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(slowdown of a[i], slowdown of b[i])`` for pairs on ``gpu_model`` (see
        :meth:`slowdowns`), one model call.  Swapping a and b swaps the results."""
        n = len(a)
        s = self.slowdowns(list(a) + list(b), list(b) + list(a), gpu_model)
        return s[:n], s[n:]

    def in_domain(self, victim: JobProfile, partner: JobProfile) -> bool:
        """Whether the predictor that answers for ``victim`` (``route``) predicts it next to
        ``partner`` inside its training domain (:meth:`SlowdownPredictor.in_domain
        <elastico.predictor.model.SlowdownPredictor.in_domain>`; a predictor without the
        method: False).  Cached per pair, as the predictions are."""
        key = (victim, partner)
        hit = self._domain.get(key)
        if hit is None:
            pr = self.predictors[0 if len(self.predictors) == 1 else self.route(victim)]
            f = getattr(pr, "in_domain", None)
            hit = bool(f(victim, partner)) if f is not None else False
            if len(self._domain) > _CACHE_LIMIT:
                self._domain.clear()
            self._domain[key] = hit
        return hit

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        """Slowdown of ``a`` next to ``b`` (>= 1)."""
        return float(self.slowdowns([a], [b])[0])

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        """Slowdown of each resident of one GPU, additive over its partners, shape ``(n,)``."""
        if len(residents) < 2:
            return np.ones(len(residents))
        return self._gpu_memo.get(residents, self._gpu_slowdowns)

    def _gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        scale = all(self._scale)
        if not scale and any(self._scale):  # mixed: correct per victim
            return np.array([1.0 + sum(self.pair_slowdown(r, o) - 1.0
                                       for k, o in enumerate(residents) if k != i)
                             for i, r in enumerate(residents)])
        return _compose(residents, lambda v, p: self.raw(v, p), scale)


class MeasuredSlowdown:
    """Ground truth from measured pairs: ``table[(gpu, victim_type, partner_type)]`` =
    measured slowdown of the victim.  ``gpu_of(model)`` maps a cluster GPU model to the GPU
    its pairs were measured on, or None where none were (:func:`truth_gpu`): on such a model
    no measured slowdown applies (docs/model.md, "Interference on other GPU models"), so a
    pair there is not slowed (1.0) and :meth:`measured_on` says False.  Pairs on a measured
    GPU without a measurement use ``fallback`` (default the analytic model).  Shares and
    composition: module docstring."""

    def __init__(self, table: Mapping[tuple[str, str, str], float],
                 fallback: SlowdownModel | None = None,
                 gpu_of: Callable[[str], str | None] | None = None):
        self.table = dict(table)
        self.fallback = fallback or AnalyticSlowdown()
        self.gpu_of = gpu_of or truth_gpu
        self.lookups = 0
        self.misses = 0
        self.unmeasured_gpu = 0

    @classmethod
    def from_observations(cls, obs: Sequence[Observation], **kw) -> "MeasuredSlowdown":
        """The table of every measured side of ``obs`` (a later row wins on duplicates)."""
        table: dict[tuple[str, str, str], float] = {}
        for o in obs:
            table[(o.gpu_model, o.a.job_type, o.b.job_type)] = o.slowdown_a
            if o.slowdown_b is not None:
                table[(o.gpu_model, o.b.job_type, o.a.job_type)] = o.slowdown_b
        return cls(table, **kw)

    def measured_on(self, gpu_model: str | None) -> bool:
        """Were pairs measured on ``gpu_model`` (through ``gpu_of``)?"""
        return gpu_model is not None and self.gpu_of(gpu_model) is not None

    def _pair(self, a: JobProfile, b: JobProfile) -> float:
        self.lookups += 1
        gpu = self.gpu_of(a.gpu_model or b.gpu_model or "")
        if gpu is None:  # no measurement on this GPU model: not applied (docs/model.md)
            self.unmeasured_gpu += 1
            return 1.0
        s = self.table.get((gpu, a.job_type, b.job_type))
        if s is None:
            self.misses += 1
            return float(self.fallback.pair_slowdown(a, b))
        return max(float(s), 1.0)

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        """Measured slowdown of ``a`` next to ``b``, share-corrected (>= 1)."""
        if a.gpu_activity <= 0 or b.gpu_activity <= 0:
            return 1.0
        return 1.0 + (self._pair(a, b) - 1.0) * share_factor(b)

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        """Additive composition of :meth:`pair_slowdown`, shape ``(n,)``."""
        return compose_additive(self, residents)


class TimeSlicedTruth:
    """What co-residents of one GPU run at under time-slicing (the NVIDIA device plugin's
    shared-GPU mode; docs/model.md, "Sharing mechanisms"), over a ``measured`` slowdown model.

    Time-slicing enforces no share: the GPU's contexts take turns, so a pod alone on a GPU
    runs at the whole GPU's speed, and k co-resident pods each get their turn of it.  The
    measured pair slowdown (Gavel ran both jobs concurrently, unlimited) is the *total*
    effect of sharing, relative to the whole GPU -- not something applied on top of a share
    cap.  :meth:`gpu_slowdowns` returns, per resident, its slowdown relative to its
    whole-GPU speed: ``min(k, 1 + sum_{o != i} (pair(i, o) - 1))`` with every partner at its
    whole-GPU activity (no MPS share correction), where ``k`` = the number of residents (the
    round-robin bound: each context gets at least its 1/k turn; the additive composition is
    the module docstring's, as for MPS).  On a GPU model where ``measured`` has no pairs
    (``measured.measured_on(model)`` False) the round-robin share itself: ``k`` each.
    Shape ``(n,)``; 1.0 for a lone resident."""

    def __init__(self, measured: SlowdownModel):
        self.measured = measured

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        k = len(residents)
        if k < 2:
            return np.ones(k)
        gpu = residents[0].gpu_model
        on = getattr(self.measured, "measured_on", None)
        if on is not None and not on(gpu):
            return np.full(k, float(k))
        whole = [replace(r, mps_share=None, gpu_activity=r.gpu_activity / share_factor(r))
                 if r.mps_share is not None else r for r in residents]
        s = np.asarray(self.measured.gpu_slowdowns(whole), float)
        return np.clip(s, 1.0, float(k))

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        return float(self.gpu_slowdowns([a, b])[0])


def truth_gpu(model: str) -> str | None:
    """The GPU whose measured pairs stand for a cluster GPU model: K80 and P100 themselves,
    V100M16 and V100M32 Gavel's V100 (``V100M16``; the same V100 silicon, only the memory
    size differs); None for every other model -- Gavel measured no pair there, and a V100
    slowdown is not carried to another GPU (docs/model.md, "Interference on other GPU
    models")."""
    if model in ("K80", "P100"):
        return model
    if model in ("V100M16", "V100M32"):
        return "V100M16"
    return None


@lru_cache(maxsize=1)
def bundled_predictor() -> SlowdownPredictor:
    """The bundled model (:data:`BUNDLED_MODEL`), loaded once.  InvalidArgument if the file
    is missing or refused."""
    return SlowdownPredictor.load(BUNDLED_MODEL)


def default_slowdown_model(path: str | Path | None = None) -> tuple[SlowdownModel, str]:
    """``(model, note)``: the LightGBM model at ``path`` (default the bundled one) as a
    :class:`LearnedSlowdown`, or -- when it cannot be loaded (missing, refused, lightgbm not
    installed) -- :class:`AnalyticSlowdown` with a note saying why (the fallback)."""
    try:
        pred = SlowdownPredictor.load(path) if path is not None else bundled_predictor()
    except (InvalidArgument, ImportError, OSError) as e:
        note = f"analytic fallback: no usable predictor model ({e})"
        _LOG.warning(note)
        return AnalyticSlowdown(), note
    return LearnedSlowdown([pred]), f"predictor {pred.version}"


def kfold_by_job_type(obs: Sequence[Observation], k: int = 5, seed: int = 0,
                      train_fn: Callable[[Sequence[Observation]], SlowdownPredictor] = train
                      ) -> LearnedSlowdown:
    """The simulator's predictor: job types dealt (seeded) into ``k`` folds; the model of
    fold f is trained on the rows in which no job is of a type in f and answers for victims
    of those types, so no slowdown it predicts was in its training data (neither the pair
    nor the victim's type).  Victims of types in no fold get a model trained on every row
    (it cannot have seen a pair with them)."""
    from elastico.predictor.evaluate import make_folds

    obs = list(obs)
    folds = make_folds(obs, "job-type-kfold", k, seed)
    models = [train_fn([obs[i] for i in f.train]) for f in folds]
    fold_of: dict[str, int] = {}
    for f_idx, f in enumerate(folds):
        for i in f.pred_a:
            fold_of[obs[i].a.job_type] = f_idx
        for i in f.pred_b:
            fold_of[obs[i].b.job_type] = f_idx
    models.append(train_fn(obs))
    everything = len(models) - 1
    return LearnedSlowdown(models, route=lambda v: fold_of.get(v.job_type, everything))
