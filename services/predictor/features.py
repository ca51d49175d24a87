"""Feature matrix of ordered (victim, partner, GPU) triples (docs/predictor.md, "Features").

A row predicts the slowdown of the *victim* when it shares a GPU with the *partner*.  The row
is ``victim block | partner block | GPU block | pair block``; both job blocks come from the
same function of one job (:meth:`FeatureBuilder.job_vector`), and the pair block is symmetric
in the two jobs (sum and product of their GPU efficiencies), so the slowdown of B next to A is the same function applied to the
swapped row: predicting the pair (A, B) and the pair (B, A) gives the same two numbers,
swapped.

Per-job block (:data:`JOB_FEATURES`): the schema's counters and task features as numbers
(categories as integer codes, missing = NaN), plus features derived from the bundled solo
measurements when the job type is known there (:class:`SoloCatalog`):

* ``p_parallel``: Amdahl parallel fraction of the job's model family (MISO fit,
  :meth:`elastico.perf.throughput.ThroughputModel.parallel_fraction`);
* ``log_v100_over_k80``, ``log_v100_over_p100``: ln of the job's solo speed ratios across GPU
  generations (Gavel's isolated throughputs) -- a job that barely speeds up on a faster GPU
  spends its step time off the GPU and leaves room for a partner;
* ``gpu_efficiency``: (solo steps/s here / solo steps/s on K80) / (FP32 peak here / on K80),
  about 1 for a compute-bound job and near 0 for one bound elsewhere.

All are solo (one job alone) measurements: nothing in a row comes from a co-located run.
The solo steps/s themselves are not features: they differ by orders of magnitude between
model families (LM 109 steps/s, CycleGAN 4 on a V100) and taught the model nothing that
carried over to an unseen family (leave-one-model-out MAE 0.42 with them, 0.39 without).

Who calls it: :mod:`elastico.predictor.model` (training and prediction).  Whom it calls:
:mod:`elastico.perf.throughput` and the bundled Gavel isolated-throughput CSV (read once).
"""

from __future__ import annotations

import csv
import math
import re
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from elastico.paths import data_file
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import GPU_SPECS, KINDS, PRECISIONS, SHARING

__all__ = [
    "JOB_FEATURES",
    "FEATURE_NAMES",
    "CATEGORICAL_FEATURES",
    "SoloCatalog",
    "FeatureBuilder",
    "family_and_batch",
]

JOB_FEATURES: tuple[str, ...] = (
    "sm_activity", "dram_activity", "mem_gib", "pcie_rx_gbs", "pcie_tx_gbs",
    "tensor_activity", "power_frac",
    "kind", "precision", "sharing", "mps_share", "log2_batch_size", "model_family",
    "p_parallel", "log_v100_over_k80", "log_v100_over_p100", "gpu_efficiency",
)
_J = len(JOB_FEATURES)
_CATS = ("kind", "precision", "sharing", "model_family")
GPU_FEATURES = ("gpu.log_fp32_tflops", "gpu.log_mem_bw_gbs")
PAIR_FEATURES = ("pair.efficiency_sum", "pair.efficiency_product")
FEATURE_NAMES: tuple[str, ...] = (
    tuple(f"victim.{n}" for n in JOB_FEATURES) + tuple(f"partner.{n}" for n in JOB_FEATURES)
    + GPU_FEATURES + PAIR_FEATURES)
#: Indices of the categorical columns of a feature row (LightGBM ``categorical_feature``).
CATEGORICAL_FEATURES: tuple[int, ...] = tuple(
    i for i, n in enumerate(FEATURE_NAMES) if n.split(".", 1)[1] in _CATS)

_GAVEL_TYPE = re.compile(r"^(.+) \(batch size (\d+)\)$")
_K80 = GPU_SPECS["K80"].fp32_tflops


def family_and_batch(job_type: str) -> tuple[str | None, int | None]:
    """Model family and batch size from a Gavel-style job type: ``'LM (batch size 20)'`` ->
    ``('LM', 20)``, ``'A3C'`` -> ``('A3C', None)``; ``(None, None)`` for an empty string."""
    if not job_type:
        return None, None
    m = _GAVEL_TYPE.match(job_type)
    if m:
        return m.group(1), int(m.group(2))
    return job_type, None


class SoloCatalog:
    """Solo (isolated) throughputs in steps/s per job type on Gavel's K80 / P100 / V100
    (scale factor 1, ``data/gavel-throughputs/derived/simulation_throughputs_isolated_flat.csv``)
    and the Amdahl parallel fraction per model family (the throughput model's MISO fit)."""

    def __init__(self, solo: Mapping[str, Mapping[str, float]], parallel: Mapping[str, float]):
        self.solo = solo
        self.parallel = parallel

    @staticmethod
    @lru_cache(maxsize=1)
    def bundled() -> "SoloCatalog":
        """The catalog built from the bundled Gavel CSV and ThroughputModel.bundled()."""
        from elastico.perf.throughput import GAVEL_TO_MISO, ThroughputModel

        solo: dict[str, dict[str, float]] = {}
        path = data_file("gavel-throughputs", "derived", "simulation_throughputs_isolated_flat.csv")
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["scale_factor"] == "1" and row["worker_type"] in ("k80", "p100", "v100"):
                    v = float(row["isolated_tput"])
                    if v > 0:
                        solo.setdefault(row["job"], {})[row["worker_type"]] = v
        tm = ThroughputModel.bundled()
        parallel = {fam: tm.parallel[miso] for fam, miso in GAVEL_TO_MISO.items()}
        parallel.update(tm.parallel)  # MISO family names themselves
        return SoloCatalog(solo, parallel)

    def speed(self, job_type: str, worker: str) -> float | None:
        """Solo steps/s of ``job_type`` on ``worker`` (k80, p100, v100), None if unknown."""
        return self.solo.get(job_type, {}).get(worker)


def _log(x: float | None) -> float:
    return math.log(x) if x is not None and x > 0 else math.nan


def _code(value: str | None, vocab: Sequence[str]) -> float:
    if value is None:
        return math.nan
    try:
        return float(vocab.index(value))
    except ValueError:
        return math.nan  # unseen category: treated as missing


class FeatureBuilder:
    """Builds feature rows; ``families`` is the model-family vocabulary of the trained model
    (codes 0..n-1; a family outside it is missing).  Per-job vectors are cached by
    (profile, GPU model), so a batch of many pairs over few distinct jobs costs little."""

    def __init__(self, families: Sequence[str] = (), catalog: SoloCatalog | None = None):
        self.families = tuple(families)
        self.catalog = catalog or SoloCatalog.bundled()
        self._cache: dict[tuple[JobProfile, str], np.ndarray] = {}
        self._static: dict[tuple, tuple] = {}

    def _static_part(self, p: JobProfile) -> tuple:
        """What depends only on (job_type, model_family, batch_size): family code, log2
        batch, p, the two log speed ratios, the K80 solo steps/s (cached)."""
        fam, bs = family_and_batch(p.job_type)
        family = p.model_family if p.model_family is not None else fam
        batch = p.batch_size if p.batch_size is not None else bs
        cat = self.catalog
        k80, p100, v100 = (cat.speed(p.job_type, w) for w in ("k80", "p100", "v100"))
        out = (
            _code(family, self.families),
            math.log2(batch) if batch else math.nan,
            _nan(cat.parallel.get(family)) if family is not None else math.nan,
            _log(v100 / k80) if v100 and k80 else math.nan,
            _log(v100 / p100) if v100 and p100 else math.nan,
            k80,
        )
        if len(self._static) > 100_000:
            self._static.clear()
        self._static[(p.job_type, p.model_family, p.batch_size)] = out
        return out

    def job_vector(self, p: JobProfile, gpu_model: str) -> np.ndarray:
        """The per-job block, shape ``(len(JOB_FEATURES),)``, NaN where missing.
        ``gpu_model`` (the GPU the pair shares) wins over ``p.gpu_model``."""
        key = (p, gpu_model)
        v = self._cache.get(key)
        if v is not None:
            return v
        static = self._static.get((p.job_type, p.model_family, p.batch_size))
        if static is None:
            static = self._static_part(p)
        family_code, log2_batch, par, v_k80, v_p100, k80 = static
        tput = p.solo_tput
        spec = GPU_SPECS.get(gpu_model or p.gpu_model)
        eff = math.nan
        if tput is not None and k80 is not None and spec is not None:
            eff = (tput / k80) / (spec.fp32_tflops / _K80)
        v = np.array([
            _nan(p.sm_activity), _nan(p.dram_activity),
            p.mem_gib if p.mem_gib > 0 else math.nan,
            _nan(p.pcie_rx_gbs), _nan(p.pcie_tx_gbs), _nan(p.tensor_activity),
            _nan(p.power_frac),
            _code(p.kind or None, KINDS), _code(p.precision, PRECISIONS),
            _code(p.sharing, SHARING), _nan(p.mps_share),
            log2_batch, family_code, par, v_k80, v_p100, eff,
        ], dtype=np.float64)
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[key] = v
        return v

    def matrix(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
               gpu_models: Sequence[str]) -> np.ndarray:
        """Feature rows, shape ``(n, len(FEATURE_NAMES))``, for ``n`` ordered triples
        (victim i, partner i, GPU model i).  An unknown GPU model gives NaN GPU features."""
        n = len(victims)
        if not (len(partners) == n and len(gpu_models) == n):
            raise ValueError("victims, partners and gpu_models must have the same length")
        X = np.empty((n, len(FEATURE_NAMES)), dtype=np.float64)
        if n == 0:
            return X
        V, vi, pi, _ = distinct_job_rows(victims, partners, gpu_models, self.job_vector)
        X[:, :_J] = V[vi]
        X[:, _J:2 * _J] = V[pi]
        gpu_cache: dict[str, tuple[float, float]] = {}
        for g in set(gpu_models):
            s = GPU_SPECS.get(g)
            gpu_cache[g] = ((math.log(s.fp32_tflops), math.log(s.mem_bw_gbs)) if s
                            else (math.nan, math.nan))
        if len(gpu_cache) == 1:
            X[:, 2 * _J:2 * _J + 2] = next(iter(gpu_cache.values()))
        else:
            X[:, 2 * _J:2 * _J + 2] = np.array([gpu_cache[g] for g in gpu_models])
        _pair_block(X)
        return X


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


_EFF = JOB_FEATURES.index("gpu_efficiency")


def _pair_block(X: np.ndarray) -> None:
    """Fills the pair columns in place: sum and product of the two GPU efficiencies
    (symmetric in the two jobs); NaN where a side is missing."""
    ev, ep = X[:, _EFF], X[:, _J + _EFF]
    o = 2 * _J + 2
    X[:, o] = ev + ep
    X[:, o + 1] = ev * ep


def distinct_job_rows(victims: Sequence[JobProfile], partners: Sequence[JobProfile],
                      gpu_models: Sequence[str], job_vector
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[JobProfile]]:
    """One job vector per distinct (profile, GPU) of ``n`` ordered triples (a batch usually
    repeats few jobs): ``(V, vi, pi, distinct)`` with ``V[vi]`` / ``V[pi]`` the victims' /
    partners' vectors (``job_vector(profile, gpu_model)``, shape ``(n, d)`` each) and
    ``distinct[r]`` the profile of row ``r`` of ``V``.  ``n`` >= 1."""
    n = len(victims)
    rows: dict[tuple[JobProfile, str], int] = {}
    vecs: list[np.ndarray] = []
    distinct: list[JobProfile] = []
    vi = np.empty(n, dtype=np.intp)
    pi = np.empty(n, dtype=np.intp)
    for idx_arr, profs in ((vi, victims), (pi, partners)):
        for i in range(n):
            key = (profs[i], gpu_models[i])
            r = rows.get(key)
            if r is None:
                r = rows[key] = len(vecs)
                vecs.append(job_vector(profs[i], gpu_models[i]))
                distinct.append(profs[i])
            idx_arr[i] = r
    return np.vstack(vecs), vi, pi, distinct
