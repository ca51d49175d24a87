"""Identity-free feature matrix of the ``activity-v2`` model (docs/predictor.md, "Features").

A row describes an ordered (victim, partner, GPU) triple by what *any* job has -- its solo
activity, its share and mechanism, its kind -- and the GPU's datasheet figures.  A job's name
(``job_type``) and its model family (``model_family``) are labels: they never enter a row
(tests/test_predictor_prior.py checks that changing them leaves every row unchanged).  The
one place a family is read is :func:`elastico.predictor.prior.solo_activity`, and only for a
job that has *no* measured SM activity (Gavel's pairs): its busy fraction is then the
catalogue's Amdahl fraction, a solo-activity estimate (source ``catalogue``), not a label.

Row = ``victim block | partner block | pair block``; the job blocks are the same function of
one job (:data:`JOB_FEATURES`), the pair block is symmetric in the two jobs except the prior
itself (``log_prior``, the victim's), so swapping a pair swaps its two predictions exactly.

Per job: ``u`` (busy fraction), ``w`` (MPS width), ``i`` (DRAM intensity while busy), the
counters as measured (``dram_activity``, ``tensor_activity``, ``power_frac``, PCIe GB/s;
NaN when missing), ``mem_frac`` (memory held / the GPU's memory), ``kind`` and ``precision``
as category codes.  Pair: the mechanism (code), ln of the victim's prior, the overlap
``u_a u_b``, the SM and DRAM demands ``w_a + w_b`` and ``i_a + i_b``, the memory demand
``mem_frac_a + mem_frac_b``, and the GPU's ln FP32 TFLOPS, ln memory bandwidth and memory
GiB (elastico.hardware, NVIDIA datasheets).

Who calls it: :mod:`elastico.predictor.model` (feature set ``activity-v2``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np

from elastico.predictor.features import distinct_job_rows
from elastico.predictor.prior import mechanism, prior_pair, solo_activity
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import GPU_SPECS, KINDS, PRECISIONS

__all__ = ["JOB_FEATURES", "PAIR_FEATURES", "FEATURE_NAMES", "CATEGORICAL_FEATURES",
           "ActivityFeatureBuilder", "domain_key"]

JOB_FEATURES: tuple[str, ...] = (
    "u", "w", "i", "dram_activity", "tensor_activity", "power_frac", "pcie_rx_gbs",
    "pcie_tx_gbs", "mem_frac", "kind", "precision",
)
PAIR_FEATURES: tuple[str, ...] = (
    "pair.mechanism", "pair.log_prior", "pair.overlap", "pair.sm_demand", "pair.dram_demand",
    "pair.mem_demand", "gpu.log_fp32_tflops", "gpu.log_mem_bw_gbs", "gpu.memory_gib",
)
FEATURE_NAMES: tuple[str, ...] = (
    tuple(f"victim.{n}" for n in JOB_FEATURES) + tuple(f"partner.{n}" for n in JOB_FEATURES)
    + PAIR_FEATURES)
_J = len(JOB_FEATURES)
CATEGORICAL_FEATURES: tuple[int, ...] = tuple(
    i for i, n in enumerate(FEATURE_NAMES)
    if n.split(".", 1)[1] in ("kind", "precision", "mechanism"))


@lru_cache(maxsize=64)
def _gpu(gpu_model: str) -> tuple[float, float, float]:
    """(ln FP32 TFLOPS, ln memory GB/s, memory GiB) of a GPU model; NaN when unknown."""
    s = GPU_SPECS.get(gpu_model)
    if s is None:
        return (math.nan, math.nan, math.nan)
    from elastico.hardware import gpu_spec

    name = "V100M16" if s.assumed else gpu_model  # G2/G3: the schema's stand-in
    return (math.log(s.fp32_tflops), math.log(s.mem_bw_gbs), float(gpu_spec(name).memory_gib))


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _code(value: str | None, vocab: Sequence[str]) -> float:
    if not value:
        return math.nan
    try:
        return float(vocab.index(value))
    except ValueError:
        return math.nan


def domain_key(victim: JobProfile, partner: JobProfile) -> str:
    """The training domain of an ordered pair: ``kind/kind/mechanism/source/source``
    (:func:`elastico.predictor.prior.solo_activity` sources).  The learned correction is
    applied only to pairs whose key it saw in training (docs/predictor.md, "Domain")."""
    return "/".join((victim.kind or "?", partner.kind or "?", mechanism(victim, partner),
                     solo_activity(victim).source, solo_activity(partner).source))


class ActivityFeatureBuilder:
    """Builds ``activity-v2`` rows (module docstring).  ``families`` is accepted for the
    model file's interface and ignored: no label is a feature."""

    def __init__(self, families: Sequence[str] = ()):
        self._cache: dict[tuple[JobProfile, str], np.ndarray] = {}

    def job_vector(self, p: JobProfile, gpu_model: str) -> np.ndarray:
        """The per-job block, shape ``(len(JOB_FEATURES),)``, NaN where missing."""
        key = (p, gpu_model)
        v = self._cache.get(key)
        if v is not None:
            return v
        a = solo_activity(p)
        mem = _gpu(gpu_model or p.gpu_model)[2]
        v = np.array([
            a.u, a.w, a.i, _nan(p.dram_activity), _nan(p.tensor_activity), _nan(p.power_frac),
            _nan(p.pcie_rx_gbs), _nan(p.pcie_tx_gbs),
            p.mem_gib / mem if p.mem_gib > 0 and mem > 0 else math.nan,
            _code(p.kind, KINDS), _code(p.precision, PRECISIONS),
        ], dtype=np.float64)
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = v
        return v

    def matrix(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
               gpu_models: Sequence[str]) -> np.ndarray:
        """Rows, shape ``(n, len(FEATURE_NAMES))``, for ``n`` ordered triples.  One job
        vector per distinct (profile, GPU); the pair block and the prior (the same formula as
        :func:`elastico.predictor.prior.prior_pair`) in numpy over the batch."""
        n = len(victims)
        if not (len(partners) == n and len(gpu_models) == n):
            raise ValueError("victims, partners and gpu_models must have the same length")
        X = np.empty((n, len(FEATURE_NAMES)), dtype=np.float64)
        if n == 0:
            return X
        V, vi, pi, distinct = distinct_job_rows(victims, partners, gpu_models,
                                                 self.job_vector)
        # per distinct job: 2 mig, 1 timeslice, 0 otherwise
        M = np.asarray([2 if p.sharing == "mig" else 1 if p.sharing == "timeslice" else 0
                        for p in distinct])
        A, B = V[vi], V[pi]
        X[:, :_J] = A
        X[:, _J:2 * _J] = B
        o = 2 * _J
        iu, iw, ii, im = (JOB_FEATURES.index(k) for k in ("u", "w", "i", "mem_frac"))
        m = np.maximum(M[vi], M[pi])  # mig > timeslice > mps, as prior.mechanism
        overlap = A[:, iu] * B[:, iu]
        sm, dram = A[:, iw] + B[:, iw], A[:, ii] + B[:, ii]
        d = np.maximum(1.0, np.maximum(sm, dram))
        prior = np.where(m == 2, 1.0, np.where(m == 1, 1.0 + overlap,
                                                1.0 + overlap * (d - 1.0)))
        X[:, o] = m
        X[:, o + 1] = np.log(prior)
        X[:, o + 2] = overlap
        X[:, o + 3] = sm
        X[:, o + 4] = dram
        X[:, o + 5] = A[:, im] + B[:, im]
        gpus = {g: _gpu(g) for g in set(gpu_models)}
        if len(gpus) == 1:
            X[:, o + 6:o + 9] = next(iter(gpus.values()))
        else:
            X[:, o + 6:o + 9] = np.array([gpus[g] for g in gpu_models])
        return X

    def priors(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile]
               ) -> np.ndarray:
        """The prior's slowdowns of the triples, shape ``(n,)``."""
        return np.array([prior_pair(v, p) for v, p in zip(victims, partners)], dtype=float)
