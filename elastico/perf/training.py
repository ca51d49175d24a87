"""Training speed from measurements: how fast a training job type runs on one GPU of a model,
and how that speed scales with GPU count and placement (one node / several).

Who calls it: :class:`elastico.perf.throughput.ThroughputModel` (the facade every caller uses:
shapes, the simulator, the placer) and ``bench/training_model.py`` (the model's errors against
the measurements).  It calls numpy/scipy, the GPU catalogue (:mod:`elastico.hardware`) and reads
bundled files once (an ``lru_cache``'d loader).  Pure otherwise; every speed comes with its
:class:`elastico.model.Provenance`.

Data (data/README.md; each folder's PROVENANCE.md):

* **Gavel** ``data/gavel-throughputs/simulation_throughputs.json`` (Narayanan et al., OSDI'20,
  MIT): steps/s of 26 job types (each a model at a fixed per-GPU batch) alone on one K80 / P100
  / V100, and of 19 of them on 2 / 4 / 8 GPUs of one server (``<worker>``) and spread over
  servers (``<worker>_unconsolidated``).
* **Sia / Pollux** ``data/sia-gpu-speed/`` (Jayaram Subramanya et al., SOSP'23; Qiao et al.,
  OSDI'21): seven training jobs profiled per placement and per-GPU batch on T4, V100-32GB,
  A100-40GB, Quadro RTX 6000 and RTX 2080 Ti.  Shipped: the T4 files (Apache-2.0 via
  petuum/adaptdl) and figures derived from all five GPUs by ``derive.py`` -- per (job, GPU) the
  one-GPU step-time line ``T_grad(m) = alpha + beta m`` (Pollux's, fitted here by
  :func:`fit_step_time`) and its best point; per (job, GPU, placement, per-GPU batch m) the
  measured speedup over one GPU at the same m.

Model (docs/model.md, 2. walks through it with the fitted constants):

* **Roofline per job.**  The time of one unit of a job's work on GPU g is
  ``a / C_g + b / B_g``: ``C_g`` the compute peak the job's precision runs at
  (:func:`compute_peak_tflops`: FP32 training runs as TF32 on GPUs with TF32 Tensor Cores, the
  PyTorch default for convolutions and, in the 1.7-1.11 releases Sia's jobs used, for matmuls),
  ``B_g`` the memory bandwidth, both from the catalogue; ``a, b >= 0`` (the compute- and
  bandwidth-bound shares) are fitted per job by non-negative least squares on relative
  residuals (:func:`fit_roofline`).  A Sia job's step time at per-GPU batch m is
  ``m (a/C + b/B) + (d/B + e)``: its per-sample time (Pollux's beta) and per-step time
  (Pollux's alpha; ``e`` the GPU-independent part) each fitted over the GPUs it was measured
  on (:func:`fit_sia_job`).
* **A Gavel job type on a GPU Gavel did not measure** (:meth:`TrainingSpeedModel.base`):
  ``t(g) = s_j (phi C_ref / C_g + (1 - phi) B_ref / B_g)`` with ``phi`` the compute-bound share
  at the reference V100 of the Sia job that stands for its family (:data:`GAVEL_TO_SIA`; its
  per-sample roofline over five GPUs: Gavel's K80 / P100 / V100 have nearly the same
  FLOP-per-byte ratio, so they cannot tell the two shares apart), else the median ``phi`` of
  the Sia jobs, and the scale ``s_j`` fitted to the job type's own measured points (the
  geometric mean over K80, P100, V100).  Measured pairs are used as measured.
* **Scale-out** (:meth:`TrainingSpeedModel.speedup`, the per-GPU batch fixed as both sources
  measured it: a gang of n trains n x the per-GPU batch per step).  Where Gavel measured the job
  type on the GPU model (K80, P100, V100): its measured n-GPU throughput over its 1-GPU one
  (one server, or ``_unconsolidated`` for several), at most n, linear interpolation between the
  measured counts (1, 2, 4, 8) only.  Elsewhere Pollux's throughput model
  ``T_iter = (T_grad^g + T_sync^g)^(1/g)``, ``T_sync = alpha_s + beta_s (n - 2)`` per locality
  (one node / several), with ``T_grad`` the job type's own one-GPU step time on that GPU and
  the synchronisation constants fitted (:func:`fit_sync`) to: for the ResNets, the *same
  network's* measured Sia placements on that GPU (:data:`SAME_NETWORK`; the same gradient
  bytes); for the other families, the job type's own Gavel V100 curve (gamma 1), its
  synchronisation time carried over (ASSUMPTION).  Job types Gavel never measured on several
  GPUs take the median Gavel curve, for the GPU count they requested only.
* **Undisclosed GPUs** (the trace's G2, G3: no datasheet, no measurement): ASSUMED to run as the
  reference V100 (:data:`ASSUMED_AS`), tagged as the assumption it is.  Anything else without
  measurement or catalogue figures is refused (:class:`elastico.errors.InvalidArgument`
  naming the field, the value and what is allowed).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares, nnls

from elastico.errors import InvalidArgument
from elastico.hardware import GpuSpec, gpu_spec
from elastico.model import Provenance
from elastico.paths import data_file

__all__ = [
    "REFERENCE_GPU", "GAVEL_WORKERS", "GAVEL_GPU_COUNTS", "ASSUMED_AS", "GAVEL_TO_SIA",
    "SIA_GPUS", "SIA_JOBS", "SAME_NETWORK", "compute_peak_tflops", "Roofline", "fit_roofline",
    "fit_step_time", "SiaJobModel", "fit_sia_job", "SyncFit", "fit_sync", "pollux_step_time",
    "own_sync_fit", "sync_fit_of", "SiaSingleGpu", "SiaPlacement", "GavelData", "SiaData",
    "TrainingSpeedModel", "family_of", "CheckPoint", "leave_one_gpu_out_sia",
    "leave_one_gpu_out_gavel", "leave_one_job_out_sia", "leave_one_job_out_gavel",
    "scale_out_sia", "scale_out_gavel", "scale_out_gavel_from_sia", "scale_out_gavel_cross_gpu",
]

#: The reference GPU: normalized throughput 1.0 is a job's requested shape on it.  V100 is the
#: one model both Gavel (measured) and the trace (V100M16 / V100M32 nodes) have.
REFERENCE_GPU = "V100M16"
#: GPU model -> Gavel worker type whose measurements it is (the trace's V100s: V100 SXM2, the
#: part Gavel measured on AWS p3; the P100 Gavel measured on its P100 servers).
GAVEL_WORKERS: Mapping[str, str] = MappingProxyType(
    {"K80": "k80", "P100": "p100", "V100M16": "v100", "V100M32": "v100"})
#: GPU counts Gavel measured (scale factors).
GAVEL_GPU_COUNTS = (1, 2, 4, 8)
#: ASSUMPTION: models without a datasheet (the trace's anonymised G2, G3) run as this model.
ASSUMED_AS: Mapping[str, str] = MappingProxyType({"G2": REFERENCE_GPU, "G3": REFERENCE_GPU})

#: Gavel family -> the Sia job that stands for it (docs/model.md 2. says why):
#: ResNet-18 -> cifar10 (Pollux's cifar10 job *is* ResNet-18 on CIFAR-10) and ResNet-50 ->
#: imagenet (ResNet-50 on ImageNet) are the same networks; Transformer -> bert (the only
#: attention model Sia profiled); LM -> deepspeech2 (the only recurrent model); CycleGAN ->
#: yolov3 (GUESS: both large-activation conv nets on high-resolution images at small per-GPU
#: batches).  No counterpart: Recommendation (Sia's ncf has an unusable V100 profile) and A3C
#: (a small conv net bound by CPU environment steps): they take the median compute share.
GAVEL_TO_SIA: Mapping[str, str] = MappingProxyType({
    "ResNet-18": "cifar10", "ResNet-50": "imagenet", "Transformer": "bert",
    "LM": "deepspeech2", "CycleGAN": "yolov3",
})
#: Gavel families whose Sia stand-in is the same network (so the same gradient bytes to
#: all-reduce): their scale-out on GPUs Gavel did not measure is Pollux's model fitted to the
#: stand-in's measured placements there.  Other families: Pollux's model (gamma 1) fitted to
#: their own Gavel V100 curve, its synchronisation time carried to the other GPU.
SAME_NETWORK: Mapping[str, str] = MappingProxyType({"ResNet-18": "cifar10",
                                                    "ResNet-50": "imagenet"})
#: Catalogue GPU model -> Sia's cluster label (sia-simulator/simulator_config.py): aws = AWS
#: g4dn.12xlarge (4x T4), azure = Azure ND40rs_v2 (8x V100-32GB SXM2, NVLink), dgx-ext =
#: DGX-A100 (8x A100-40GB, extended batch sizes), quad = 4x Quadro RTX 6000, rtx = 8x RTX 2080 Ti.
SIA_GPUS: Mapping[str, str] = MappingProxyType({
    "T4": "aws", "V100M32": "azure", "A100-40GB": "dgx-ext", "RTX6000": "quad",
    "RTX2080Ti": "rtx"})
#: Sia jobs with usable one-GPU profiles (ncf: its V100 profile is 9x below its own T4 one,
#: which no hardware explains; gpt_pmp: pipeline-parallel, no one-GPU rows).
SIA_JOBS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")

_KEY = re.compile(r"^\('(.+)', (\d+)\)$")


def family_of(job_type: str) -> str:
    """A Gavel job type's family: its name before `` (batch size``."""
    return job_type.split(" (batch size")[0]


# ------------------------------------------------------------------------- the roofline

def compute_peak_tflops(gpu: str | GpuSpec) -> float | None:
    """The compute peak (TFLOP/s) FP32 training runs at on ``gpu``: the catalogue's dense TF32
    Tensor Core peak where it lists one (Ampere and later: PyTorch runs FP32 convolutions as
    TF32 by default, and did so for matmuls in 1.7-1.11, the releases Sia's jobs ran on), else
    the FP32 peak; None when the catalogue has neither (an undisclosed model)."""
    s = gpu if isinstance(gpu, GpuSpec) else gpu_spec(gpu)
    return s.peak_tflops.get("tf32") or s.peak_tflops.get("fp32")


def _terms(gpu: str) -> tuple[float, float]:
    """``(1 / C, 1 / B)`` of ``gpu`` (C in TFLOP/s, B in GB/s); InvalidArgument when the
    catalogue lacks either figure."""
    return _terms_cached(gpu) if isinstance(gpu, str) else _terms_of(gpu)


_NO_MODEL = ("a GPU model Gavel measured (" + ", ".join(GAVEL_WORKERS) + "), one the catalogue "
             "(elastico.hardware) gives a compute peak and a memory bandwidth for (the roofline "
             "model), or an assumed one (" + ", ".join(ASSUMED_AS) + ")")


def _terms_of(gpu) -> tuple[float, float]:
    try:
        s = gpu_spec(gpu)
    except InvalidArgument:
        raise InvalidArgument("gpu_model", gpu, _NO_MODEL) from None
    c = compute_peak_tflops(s)
    if not c or not s.hbm_gbps:
        raise InvalidArgument("gpu_model", gpu, _NO_MODEL)
    return 1.0 / c, 1.0 / s.hbm_gbps


@lru_cache(maxsize=256)
def _terms_cached(gpu: str) -> tuple[float, float]:
    return _terms_of(gpu)


def _nnls_relative(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative w minimising ``sum ((x w - t) / t)^2``."""
    w, _ = nnls(np.asarray(x, float) / np.asarray(t, float)[:, None], np.ones(len(t)))
    return w


@dataclass(frozen=True)
class Roofline:
    """``time(g) = a / C_g + b / B_g`` (+ ``c``, a GPU-independent part, for per-step times):
    ``a`` in TFLOP (time x TFLOP/s), ``b`` in GB, ``c`` in the time unit; fitted on ``gpus``."""

    a: float
    b: float
    c: float = 0.0
    gpus: tuple[str, ...] = ()

    def time(self, gpu: str) -> float:
        ic, ib = _terms(gpu)
        return self.a * ic + self.b * ib + self.c

    def compute_share(self, gpu: str = REFERENCE_GPU) -> float:
        """The compute-bound part of :meth:`time` on ``gpu`` (0 when the time is 0)."""
        ic, ib = _terms(gpu)
        tot = self.a * ic + self.b * ib + self.c
        return self.a * ic / tot if tot > 0 else 0.0


def fit_roofline(times: Mapping[str, float], *, constant: bool = False) -> Roofline:
    """Fit :class:`Roofline` ``a, b (, c) >= 0`` to ``{gpu: time}`` (times > 0) by non-negative
    least squares on relative residuals.  ``constant``: also a GPU-independent part ``c``."""
    gpus = tuple(times)
    if not gpus:
        raise InvalidArgument("times", dict(times), "at least one GPU's time")
    rows = [(*_terms(g), 1.0) if constant else _terms(g) for g in gpus]
    t = np.array([times[g] for g in gpus], float)
    if not np.all(np.isfinite(t) & (t > 0)):
        raise InvalidArgument("times", dict(times), "finite times > 0")
    w = _nnls_relative(np.array(rows), t)
    return Roofline(float(w[0]), float(w[1]), float(w[2]) if constant else 0.0, gpus)


def fit_step_time(local_bsz: Sequence[float], step_time: Sequence[float]) -> tuple[float, float]:
    """Pollux's one-GPU step time ``T_grad(m) = alpha + beta m`` (Qiao et al., OSDI'21, 3.2):
    ``(alpha s, beta s per sample) >= 0`` by non-negative least squares on relative residuals
    over the measured (per-GPU batch, step time) points (at least 2 batch sizes)."""
    m = np.asarray(local_bsz, float)
    t = np.asarray(step_time, float)
    if len(m) < 2 or len(set(m.tolist())) < 2:
        raise InvalidArgument("local_bsz", list(m), "at least two different batch sizes")
    a, b = _nnls_relative(np.column_stack([np.ones_like(m), m]), t)
    return float(a), float(b)


@dataclass(frozen=True)
class SiaJobModel:
    """A Sia job's step time on any catalogue GPU: ``m per_sample.time(g) + per_step.time(g)``
    (per-sample: compute and bandwidth; per-step: bandwidth and a GPU-independent part)."""

    job: str
    per_sample: Roofline
    per_step: Roofline

    def step_time(self, gpu: str, local_bsz: float) -> float:
        return local_bsz * self.per_sample.time(gpu) + self.per_step.time(gpu)


def fit_sia_job(job: str, lines: Mapping[str, tuple[float, float]]) -> SiaJobModel:
    """Fit :class:`SiaJobModel` from ``{gpu: (alpha, beta)}`` (each GPU's :func:`fit_step_time`):
    the betas to ``a/C + b/B``, the alphas to ``d/B + e``."""
    beta = fit_roofline({g: b for g, (_, b) in lines.items()})
    gpus = tuple(lines)
    alphas = np.array([max(lines[g][0], 1e-9) for g in gpus])
    w = _nnls_relative(np.array([(_terms(g)[1], 1.0) for g in gpus]), alphas)
    return SiaJobModel(job, beta, Roofline(0.0, float(w[0]), float(w[1]), gpus))


# ------------------------------------------------------------------------- scale-out

@dataclass(frozen=True)
class SyncFit:
    """Pollux's synchronisation time and overlap (OSDI'21, 3.2) for one job on one GPU type:
    ``T_sync(n) = alpha + beta (n - 2)`` seconds, ``_local`` on one node, ``_node`` on several;
    ``T_iter = (T_grad^gamma + T_sync^gamma)^(1/gamma)``, ``gamma`` in [1, 10].  ``max_local``:
    the most GPUs measured on one node; ``multi_node``: whether several nodes were measured."""

    alpha_local: float
    beta_local: float
    alpha_node: float
    beta_node: float
    gamma: float
    max_local: int
    multi_node: bool
    points: int

    def sync_time(self, gpus: int, nodes: int) -> float:
        if gpus <= 1:
            return 0.0
        if nodes <= 1:
            return self.alpha_local + self.beta_local * (gpus - 2)
        return self.alpha_node + self.beta_node * (gpus - 2)


def pollux_step_time(t_grad: float, sync: SyncFit, gpus: int, nodes: int = 1) -> float:
    """Step time of one data-parallel step on ``gpus`` GPUs over ``nodes`` nodes (fixed per-GPU
    batch): ``(T_grad^gamma + T_sync^gamma)^(1/gamma)``, ``T_grad`` for one GPU."""
    ts = sync.sync_time(gpus, nodes)
    if ts <= 0:
        return t_grad
    g = sync.gamma
    return float((t_grad ** g + ts ** g) ** (1.0 / g))


def fit_sync(gpus: Sequence[int], nodes: Sequence[int], t_grad: Sequence[float],
             ratio: Sequence[float], *, gamma: float | None = None) -> SyncFit:
    """Fit :class:`SyncFit` to measured multi-GPU points: ``gpus`` (>= 2) over ``nodes``, the
    one-GPU step time ``t_grad`` (s) at the point's per-GPU batch and the measured ``ratio`` =
    step time / one-GPU step time at that batch (= gpus / speedup).  Least squares on
    ``log(model ratio / measured ratio)``, every constant >= 0, gamma in [1, 10].  Constants
    of a locality with no point stay at 0 (``multi_node`` False: several nodes not measured).
    ``gamma``: fixed instead of fitted (1: no overlap of computation and synchronisation)."""
    k = np.asarray(gpus, float)
    n = np.asarray(nodes, int)
    tg = np.asarray(t_grad, float)
    r = np.asarray(ratio, float)
    if len(k) == 0 or np.any(k < 2) or np.any(n < 1):
        raise InvalidArgument("gpus", list(k), "multi-GPU points (>= 2 GPUs, >= 1 node)")
    local, multi = n == 1, n > 1

    def model(x):
        al, bl, an, bn = x[:4]
        g = x[4] if gamma is None else gamma
        ts = np.where(local, al + bl * (k - 2), an + bn * (k - 2))
        return (tg ** g + ts ** g) ** (1.0 / g) / tg

    def resid(x):
        return np.log(model(x) / r)

    med = float(np.median(tg))
    x0 = [0.2 * med, 0.02 * med, 0.5 * med, 0.02 * med] + ([2.0] if gamma is None else [])
    free = [] if gamma is not None else [None]
    lo = [0.0] * 4 + [1.0 for _ in free]
    hi = [np.inf] * 4 + [10.0 for _ in free]
    fit = least_squares(resid, x0, bounds=(lo, hi))
    al, bl, an, bn = (float(v) for v in fit.x[:4])
    g = float(fit.x[4]) if gamma is None else float(gamma)
    if not multi.any():
        an = bn = 0.0
    max_local = int(k[local].max()) if local.any() else 1
    return SyncFit(al, bl, an, bn, g, max_local, bool(multi.any()), int(len(k)))


# ------------------------------------------------------------------------- data

@dataclass(frozen=True)
class GavelData:
    """Gavel's isolated throughputs, steps/s: ``table[worker][(job_type, n)]`` for workers
    k80/p100/v100 (one server) and ``<worker>_unconsolidated`` (several)."""

    table: Mapping[str, Mapping[tuple[str, int], float]]
    types: tuple[str, ...]

    @staticmethod
    def read(path: str | Path) -> "GavelData":
        name = Path(path).name
        raw = json.loads(Path(path).read_text())
        table: dict[str, dict[tuple[str, int], float]] = {}
        for worker in ("k80", "p100", "v100"):
            for w in (worker, worker + "_unconsolidated"):
                if w not in raw:
                    raise InvalidArgument(f"{name}: {w}", None, "worker type missing")
                t: dict[tuple[str, int], float] = {}
                for key, entry in raw[w].items():
                    m = _KEY.match(key)
                    if not m:
                        raise InvalidArgument(f"{name}: {w}", key,
                                              "key must look like \"('<job>', <scale>)\"")
                    v = float(entry["null"])
                    if not (math.isfinite(v) and v >= 0):
                        raise InvalidArgument(f"{name}: {w}.{key}", v,
                                              "isolated throughput must be finite and >= 0")
                    t[(m.group(1), int(m.group(2)))] = v
                table[w] = MappingProxyType(t)
        types = tuple(j for (j, n) in table["v100"] if n == 1)
        for w in ("k80", "p100"):
            missing = [j for j in types if not table[w].get((j, 1))]
            if missing:
                raise InvalidArgument(f"{name}: {w}", missing, "a one-GPU value for every job type")
        return GavelData(MappingProxyType(table), types)


@dataclass(frozen=True)
class SiaSingleGpu:
    """One row of ``data/sia-gpu-speed/single_gpu.csv``: job on one GPU, its one-GPU line
    ``T_grad(m) = alpha + beta m`` over ``points`` batch sizes and its best point."""

    job: str
    gpu: str
    points: int
    alpha_s: float
    beta_s: float
    best_local_bsz: int
    best_step_time_s: float

    @property
    def best_samples_per_s(self) -> float:
        return self.best_local_bsz / self.best_step_time_s


@dataclass(frozen=True)
class SiaPlacement:
    """One row of ``data/sia-gpu-speed/scale_out.csv``: measured speedup over one GPU at the
    same per-GPU batch (= gpus x one-GPU step time / step time)."""

    job: str
    gpu: str
    placement: str
    gpus: int
    nodes: int
    local_bsz: int
    speedup: float


def _csv_rows(path: Path, columns: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    name = path.name
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise InvalidArgument(f"{name}: columns", reader.fieldnames,
                                  "must include " + ", ".join(missing))
        return list(enumerate(reader, start=2))


def _num(name: str, line: int, row: dict[str, str], col: str, kind=float, positive=True):
    try:
        v = kind(row[col])
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name}:{line}: {col}", row[col], "a number") from None
    if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
        raise InvalidArgument(f"{name}:{line}: {col}", row[col],
                              "a finite number > 0" if positive else "a finite number >= 0")
    return v


@dataclass(frozen=True)
class SiaData:
    """The derived Sia/Pollux figures: one-GPU lines per (job, GPU) and scale-out points."""

    single: Mapping[tuple[str, str], SiaSingleGpu]
    placements: tuple[SiaPlacement, ...]

    @staticmethod
    def read(single_csv: str | Path, scale_csv: str | Path) -> "SiaData":
        single: dict[tuple[str, str], SiaSingleGpu] = {}
        p = Path(single_csv)
        cols = ("sia_job", "gpu_model", "points", "alpha_s", "beta_s_per_sample",
                "best_local_bsz", "best_step_time_s")
        for line, row in _csv_rows(p, cols):
            gpu = row["gpu_model"]
            if gpu not in SIA_GPUS:
                raise InvalidArgument(f"{p.name}:{line}: gpu_model", gpu,
                                      "one of " + ", ".join(SIA_GPUS))
            single[(row["sia_job"], gpu)] = SiaSingleGpu(
                row["sia_job"], gpu, _num(p.name, line, row, "points", int),
                _num(p.name, line, row, "alpha_s", float, positive=False),
                _num(p.name, line, row, "beta_s_per_sample", float, positive=False),
                _num(p.name, line, row, "best_local_bsz", int),
                _num(p.name, line, row, "best_step_time_s"))
        q = Path(scale_csv)
        out = []
        for line, row in _csv_rows(q, ("sia_job", "gpu_model", "placement", "gpus", "nodes",
                                       "local_bsz", "speedup")):
            gpu = row["gpu_model"]
            if gpu not in SIA_GPUS:
                raise InvalidArgument(f"{q.name}:{line}: gpu_model", gpu,
                                      "one of " + ", ".join(SIA_GPUS))
            k = _num(q.name, line, row, "gpus", int)
            if k < 2:
                raise InvalidArgument(f"{q.name}:{line}: gpus", row["gpus"], "an integer >= 2")
            out.append(SiaPlacement(row["sia_job"], gpu, row["placement"], k,
                                    _num(q.name, line, row, "nodes", int),
                                    _num(q.name, line, row, "local_bsz", int),
                                    _num(q.name, line, row, "speedup")))
        return SiaData(MappingProxyType(single), tuple(out))

    def lines(self, job: str, exclude: Iterable[str] = ()) -> dict[str, tuple[float, float]]:
        """``{gpu: (alpha, beta)}`` of ``job`` over its measured GPUs but ``exclude``."""
        ex = set(exclude)
        return {g: (r.alpha_s, r.beta_s) for (j, g), r in self.single.items()
                if j == job and g not in ex}

    def scale_points(self, job: str, gpu: str) -> tuple[SiaPlacement, ...]:
        return tuple(p for p in self.placements if p.job == job and p.gpu == gpu)


def sync_fit_of(data: SiaData, job: str, gpu: str,
                exclude_placement: str | None = None) -> SyncFit:
    """:func:`fit_sync` of ``job``'s measured placements on ``gpu`` (but one, for
    cross-validation), with ``T_grad`` its one-GPU line there."""
    one = data.single.get((job, gpu))
    pts = [p for p in data.scale_points(job, gpu) if p.placement != exclude_placement]
    if one is None or not pts:
        raise InvalidArgument("sia scale-out", f"{job} on {gpu}", "measured placements")
    tg = [one.alpha_s + one.beta_s * p.local_bsz for p in pts]
    return fit_sync([p.gpus for p in pts], [p.nodes for p in pts], tg,
                    [p.gpus / p.speedup for p in pts])


# ------------------------------------------------------------------------- the model

def _measured(dataset: str, detail: str, factor: str) -> Provenance:
    return Provenance("measured", dataset, detail, factor)


def _model(name: str, detail: str, factor: str) -> Provenance:
    return Provenance("model", name, detail, factor)


@dataclass(frozen=True, eq=False)
class TrainingSpeedModel:
    """Speed of Gavel's job types on one GPU of any model, and their scale-out; build with
    :meth:`bundled` or :meth:`from_files`.  Immutable; fits are computed once, lazily."""

    gavel: GavelData
    sia: SiaData

    @staticmethod
    def bundled() -> "TrainingSpeedModel":
        return _bundled()

    @classmethod
    def from_files(cls, gavel_json: str | Path, sia_single_csv: str | Path,
                   sia_scale_csv: str | Path) -> "TrainingSpeedModel":
        return cls(GavelData.read(gavel_json), SiaData.read(sia_single_csv, sia_scale_csv))

    # ---------------------------------------------------------------- job types
    def job_types(self) -> tuple[str, ...]:
        return self.gavel.types

    def check_type(self, job_type: str) -> None:
        if not isinstance(job_type, str) or job_type not in _type_set(self):
            raise InvalidArgument("job_type", job_type,
                                  "one of the Gavel job types: " + ", ".join(self.gavel.types))

    def multi_gpu_measured(self, job_type: str) -> bool:
        """Whether Gavel measured ``job_type`` on 2, 4 and 8 GPUs of one server (p100, v100)."""
        self.check_type(job_type)
        return all((job_type, n) in self.gavel.table[w] for w in ("p100", "v100")
                   for n in GAVEL_GPU_COUNTS[1:])

    # ---------------------------------------------------------------- fits (cached)
    def sia_model(self, job: str) -> SiaJobModel:
        """The Sia job's :class:`SiaJobModel` over all five GPUs it was measured on."""
        return _sia_model(self, job)

    def compute_share(self, job_type: str) -> tuple[float, str]:
        """``(phi, where from)``: the job type's compute-bound share at the reference V100."""
        self.check_type(job_type)
        return _phi(self, job_type)

    def gavel_scale(self, job_type: str, phi: float) -> float:
        """``s_j`` of ``t(g) = s_j u_phi(g)``: geometric mean over the job type's measured
        one-GPU points (K80, P100, V100) of ``t / u_phi``."""
        pts = [(gpu, self.gavel.table[w][(job_type, 1)])
               for gpu, w in (("K80", "k80"), ("P100", "p100"), (REFERENCE_GPU, "v100"))]
        return float(np.exp(np.mean([np.log(1.0 / v / _unit(phi, g)) for g, v in pts])))

    # ---------------------------------------------------------------- one GPU
    def base(self, job_type: str, gpu_model: str) -> tuple[float, Provenance]:
        """Steps/s of ``job_type`` alone on one whole GPU of ``gpu_model``, with provenance."""
        self.check_type(job_type)
        w = GAVEL_WORKERS.get(gpu_model)
        if w is not None:
            return (self.gavel.table[w][(job_type, 1)],
                    _measured("gavel", f"{w} ({job_type}, 1 GPU)", "speed"))
        if gpu_model in ASSUMED_AS:
            ref = ASSUMED_AS[gpu_model]
            v, _ = self.base(job_type, ref)
            return v, _model("undisclosed-gpu-as-reference",
                             f"ASSUMPTION: {gpu_model} has no datasheet; runs as {ref} "
                             f"(gavel {GAVEL_WORKERS[ref]} ({job_type}, 1 GPU))", "speed")
        _terms(gpu_model)  # refuses a GPU without figures, naming it
        phi, src = self.compute_share(job_type)
        s = self.gavel_scale(job_type, phi)
        return (1.0 / (s * _unit(phi, gpu_model)),
                _model("roofline-per-job",
                       f"phi={phi:.3f} ({src}), scale fitted on gavel k80/p100/v100 "
                       f"({job_type}, 1 GPU); C={compute_peak_tflops(gpu_model):g} TFLOP/s, "
                       f"B={gpu_spec(gpu_model).hbm_gbps:g} GB/s", "speed"))

    # ---------------------------------------------------------------- several GPUs
    def speedup(self, job_type: str, gpu_model: str, num_gpus: int, nodes: int = 1, *,
                t_grad: float | None = None) -> tuple[float, Provenance]:
        """Throughput on ``num_gpus`` GPUs of ``gpu_model`` over ``nodes`` nodes relative to one
        GPU (the per-GPU batch fixed), with provenance (module docstring).  ``t_grad``: the
        job's one-GPU step time (s) a modelled scale-out uses (default ``1 / base``)."""
        self.check_type(job_type)
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) \
                or not 1 <= num_gpus <= 8:
            raise InvalidArgument("num_gpus", num_gpus,
                                  "an integer in 1..8 (measurements go up to 8 GPUs)")
        if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) \
                or not 1 <= nodes <= num_gpus:
            raise InvalidArgument("nodes", nodes, f"an integer in 1..num_gpus ({num_gpus})")
        if num_gpus == 1:
            return 1.0, _model("identity", "one GPU: no scale-out", "scale-out")
        gpu = ASSUMED_AS.get(gpu_model, gpu_model)
        assumed = (f"; ASSUMPTION: {gpu_model} runs as {gpu}" if gpu != gpu_model else "")
        w = GAVEL_WORKERS.get(gpu)
        if w is None:
            _terms(gpu)  # refuses a GPU without figures
        measured = self.multi_gpu_measured(job_type)
        if w is not None or not measured:
            tname = (w or "v100") + ("" if nodes == 1 else "_unconsolidated")
            table = self.gavel.table[tname]
            where = "one server" if nodes == 1 else "several servers"
            own = _has_curve(table, job_type)
            if own:
                curve, src = _gavel_curve(table, job_type), f"gavel {tname} ({job_type})"
            else:
                curve = _median_curve(self, tname)
                src = (f"median of gavel's measured {tname} curves ({job_type} was not "
                       f"measured on several GPUs there)")
            exact = num_gpus in GAVEL_GPU_COUNTS
            x = curve[GAVEL_GPU_COUNTS.index(num_gpus)] if exact \
                else float(np.interp(num_gpus, GAVEL_GPU_COUNTS, curve))
            if own and exact and w is not None:
                if assumed:
                    return x, _model("undisclosed-gpu-as-reference",
                                     f"{src}: {num_gpus} GPUs on {where}, at most linear"
                                     f"{assumed}", "scale-out")
                return x, _measured("gavel", f"{src}: {num_gpus} GPUs on {where}, at most "
                                             "linear", "scale-out")
            return x, _model("gavel-interpolated" if own else "gavel-median-curve",
                             f"{src}; {num_gpus} GPUs on {where}"
                             + ("" if exact else ", linear between the measured 1/2/4/8")
                             + (f"; {gpu_model}: scale-out not measured, the v100 curve"
                                if w is None else "") + assumed, "scale-out")
        if t_grad is None:
            t_grad = 1.0 / self.base(job_type, gpu_model)[0]
        tg = t_grad
        sia_job = SAME_NETWORK.get(family_of(job_type))
        if sia_job is not None:
            sync_gpu, why = _sync_gpu(gpu)
            fit = _sync_fit(self, sia_job, sync_gpu)
            if nodes > 1 and not fit.multi_node:
                raise InvalidArgument("nodes", nodes,
                                      f"1: {sia_job} was measured on one {sync_gpu} node only")
            x = num_gpus * tg / pollux_step_time(tg, fit, num_gpus, nodes)
            extra = (f", extrapolated beyond the {fit.max_local} GPUs measured on one node"
                     if nodes == 1 and num_gpus > fit.max_local else "")
            return x, _model("pollux-sync",
                             f"T_grad = 1/({job_type} on {gpu_model}); T_sync, gamma of sia "
                             f"{sia_job} (the same network) on {sync_gpu} ({why}; "
                             f"alpha={fit.alpha_local:.4g} s, beta={fit.beta_local:.4g} s, "
                             f"gamma={fit.gamma:.3g}, {fit.points} points){extra}{assumed}",
                             "scale-out")
        tname = "v100" + ("" if nodes == 1 else "_unconsolidated")
        fit = _own_sync_fit(self, job_type, tname)
        x = num_gpus * tg / pollux_step_time(tg, fit, num_gpus, nodes)
        return x, _model("gavel-own-sync",
                         f"T_grad = 1/({job_type} on {gpu_model}); T_sync = alpha + beta (n-2), "
                         f"alpha={fit.alpha_local + fit.alpha_node:.4g} s, "
                         f"beta={fit.beta_local + fit.beta_node:.4g} s, fitted (gamma 1) to "
                         f"gavel {tname}'s measured 2/4/8-GPU speedups of {job_type} (at most "
                         "linear); ASSUMPTION: the all-reduce takes as long as on gavel's V100 "
                         f"servers{assumed}", "scale-out")


def own_sync_fit(table: Mapping[tuple[str, int], float], job_type: str,
                 several_nodes: bool = False) -> SyncFit:
    """Pollux's synchronisation model (gamma 1) fitted to one Gavel table's measured 2/4/8-GPU
    speedups of ``job_type`` (each at most linear), its own one-GPU step time as T_grad."""
    t1 = 1.0 / table[(job_type, 1)]
    curve = _gavel_curve(table, job_type)
    ns = GAVEL_GPU_COUNTS[1:]
    return fit_sync(ns, [2 if several_nodes else 1] * len(ns), [t1] * len(ns),
                    [n / curve[GAVEL_GPU_COUNTS.index(n)] for n in ns], gamma=1.0)


@lru_cache(maxsize=None)
def _own_sync_fit(model: "TrainingSpeedModel", job_type: str, tname: str) -> SyncFit:
    return own_sync_fit(model.gavel.table[tname], job_type, tname.endswith("_unconsolidated"))


@lru_cache(maxsize=None)
def _type_set(model: TrainingSpeedModel) -> frozenset:
    return frozenset(model.gavel.types)


def _unit(phi: float, gpu: str) -> float:
    """``phi C_ref / C_g + (1 - phi) B_ref / B_g``: the roofline time on ``gpu`` of a unit of
    work taking 1 on the reference GPU, ``phi`` of it compute-bound there."""
    ic, ib = _terms(gpu)
    rc, rb = _terms(REFERENCE_GPU)
    return phi * ic / rc + (1.0 - phi) * ib / rb


def _gavel_curve(table: Mapping[tuple[str, int], float], job_type: str) -> tuple[float, ...]:
    base = table[(job_type, 1)]
    return tuple(1.0 if n == 1 else min(float(n), table[(job_type, n)] / base)
                 for n in GAVEL_GPU_COUNTS)


def _has_curve(table: Mapping[tuple[str, int], float], job_type: str) -> bool:
    return all(table.get((job_type, n), 0) > 0 for n in GAVEL_GPU_COUNTS)


@lru_cache(maxsize=None)
def _median_curve(model: TrainingSpeedModel, tname: str) -> tuple[float, ...]:
    """The median over job types of the measured curves of Gavel's table ``tname`` (for a
    multi-GPU shape a job type never measured so *requested*; its families keep that count).
    Gavel's ``_unconsolidated`` one-GPU values equal the one-server ones (PROVENANCE)."""
    table = model.gavel.table[tname]
    curves = [_gavel_curve(table, j) for j in model.gavel.types if _has_curve(table, j)]
    return tuple(float(np.median([c[i] for c in curves])) for i in range(len(GAVEL_GPU_COUNTS)))


def _sync_gpu(gpu: str) -> tuple[str, str]:
    """The Sia-measured GPU whose synchronisation times stand for ``gpu``'s, and why."""
    s = gpu_spec(gpu)
    for g in SIA_GPUS:
        if gpu_spec(g).name == s.name:
            return g, "measured there"
    if s.generation == "ampere" and s.name.startswith("A100"):
        return "A100-40GB", "ASSUMPTION: the same DGX A100 NVLink system"
    if s.nvlink_gbps and s.form_factor == "SXM":
        return "A100-40GB", ("ASSUMPTION: an NVLink SXM system syncs as the measured DGX A100 "
                             "(NVLink 600 GB/s)")
    return "T4", "ASSUMPTION: a PCIe system syncs as the measured g4dn T4 node (PCIe Gen3)"


@lru_cache(maxsize=None)
def _sync_fit(model: TrainingSpeedModel, sia_job: str, gpu: str) -> SyncFit:
    return sync_fit_of(model.sia, sia_job, gpu)


@lru_cache(maxsize=None)
def _sia_model(model: TrainingSpeedModel, job: str) -> SiaJobModel:
    lines = model.sia.lines(job)
    if not lines:
        raise InvalidArgument("sia_job", job, "one of " + ", ".join(SIA_JOBS))
    return fit_sia_job(job, lines)


@lru_cache(maxsize=None)
def _population_phi(model: TrainingSpeedModel) -> float:
    return float(np.median([model.sia_model(j).per_sample.compute_share(REFERENCE_GPU)
                            for j in SIA_JOBS]))


@lru_cache(maxsize=None)
def _phi(model: TrainingSpeedModel, job_type: str) -> tuple[float, str]:
    sia_job = GAVEL_TO_SIA.get(family_of(job_type))
    if sia_job is not None:
        m = model.sia_model(sia_job)
        return (m.per_sample.compute_share(REFERENCE_GPU),
                f"sia {sia_job}'s per-sample roofline over {', '.join(m.per_sample.gpus)}")
    return _population_phi(model), f"median of the sia jobs {', '.join(SIA_JOBS)}"


@lru_cache(maxsize=1)
def _bundled() -> TrainingSpeedModel:
    return TrainingSpeedModel.from_files(
        data_file("gavel-throughputs", "simulation_throughputs.json"),
        data_file("sia-gpu-speed", "single_gpu.csv"),
        data_file("sia-gpu-speed", "scale_out.csv"))


# ------------------------------------------------------------------------- its errors

@dataclass(frozen=True)
class CheckPoint:
    """One measured value and the model's prediction of it made without it (``detail`` says
    which point and what was left out)."""

    dataset: str
    job: str
    gpu: str
    detail: str
    measured: float
    predicted: float

    @property
    def ape(self) -> float:
        """Absolute percentage error as a fraction, ``|predicted / measured - 1|``."""
        return abs(self.predicted / self.measured - 1.0)


def leave_one_gpu_out_sia(model: TrainingSpeedModel) -> list[CheckPoint]:
    """For each Sia job and each of its five GPUs: :func:`fit_sia_job` on the other four, the
    held-out GPU's measured best one-GPU point (samples/s at its best per-GPU batch) against
    the prediction at that batch."""
    out = []
    for job in SIA_JOBS:
        for gpu in SIA_GPUS:
            one = model.sia.single.get((job, gpu))
            if one is None:
                continue
            fit = fit_sia_job(job, model.sia.lines(job, exclude=(gpu,)))
            m = one.best_local_bsz
            out.append(CheckPoint("sia", job, gpu, f"best point, local_bsz {m}",
                                  one.best_samples_per_s, m / fit.step_time(gpu, m)))
    return out


def leave_one_job_out_sia(model: TrainingSpeedModel) -> list[CheckPoint]:
    """For each Sia job: its own data on the reference V100 only (its one-GPU line there), the
    compute share of its per-sample time and the bandwidth share of its per-step time the
    median of the *other* jobs' (each fitted on its five GPUs); its best point on each other
    GPU against the prediction -- how well a job measured on one GPU is placed on the rest."""
    fits = {j: model.sia_model(j) for j in SIA_JOBS}
    ref = "V100M32"
    out = []
    for job in SIA_JOBS:
        others = [fits[j] for j in SIA_JOBS if j != job]
        phi = float(np.median([f.per_sample.compute_share(ref) for f in others]))
        psi = float(np.median([_bw_share(f.per_step, ref) for f in others]))
        own = model.sia.single[(job, ref)]
        for gpu in SIA_GPUS:
            if gpu == ref or (job, gpu) not in model.sia.single:
                continue
            one = model.sia.single[(job, gpu)]
            m = one.best_local_bsz
            ic, ib = _terms(gpu)
            rc, rb = _terms(ref)
            t = (m * own.beta_s * (phi * ic / rc + (1 - phi) * ib / rb)
                 + own.alpha_s * (psi * ib / rb + 1 - psi))
            out.append(CheckPoint("sia", job, gpu, f"best point, local_bsz {m}; from {ref} + "
                                                   f"the other jobs' shares",
                                  one.best_samples_per_s, m / t))
    return out


def _bw_share(r: Roofline, gpu: str) -> float:
    ic, ib = _terms(gpu)
    tot = r.a * ic + r.b * ib + r.c
    return r.b * ib / tot if tot > 0 else 0.0


_GAVEL_GPUS = (("K80", "k80"), ("P100", "p100"), (REFERENCE_GPU, "v100"))


def leave_one_gpu_out_gavel(model: TrainingSpeedModel) -> list[CheckPoint]:
    """For each Gavel job type and each of K80 / P100 / V100: the model of
    :meth:`TrainingSpeedModel.base` (its compute share from its Sia stand-in, which holds no
    Gavel point) with the scale fitted on the two other GPUs, against the held-out value."""
    out = []
    for jt in model.job_types():
        phi, _ = model.compute_share(jt)
        for gpu, w in _GAVEL_GPUS:
            rest = [(g, model.gavel.table[x][(jt, 1)]) for g, x in _GAVEL_GPUS if g != gpu]
            s = float(np.exp(np.mean([np.log(1.0 / v / _unit(phi, g)) for g, v in rest])))
            out.append(CheckPoint("gavel", jt, gpu, "1 GPU", model.gavel.table[w][(jt, 1)],
                                  1.0 / (s * _unit(phi, gpu))))
    return out


def leave_one_job_out_gavel(model: TrainingSpeedModel) -> list[CheckPoint]:
    """For each Gavel job type: only its V100 value, the compute share the median of the Sia
    jobs other than its stand-in; its K80 and P100 values against the prediction."""
    out = []
    shares = {j: model.sia_model(j).per_sample.compute_share(REFERENCE_GPU) for j in SIA_JOBS}
    for jt in model.job_types():
        twin = GAVEL_TO_SIA.get(family_of(jt))
        phi = float(np.median([v for j, v in shares.items() if j != twin]))
        v100 = model.gavel.table["v100"][(jt, 1)]
        for gpu, w in _GAVEL_GPUS[:2]:
            pred = v100 * _unit(phi, REFERENCE_GPU) / _unit(phi, gpu)
            out.append(CheckPoint("gavel", jt, gpu, "1 GPU, from v100 only",
                                  model.gavel.table[w][(jt, 1)], pred))
    return out


def scale_out_sia(model: TrainingSpeedModel) -> list[CheckPoint]:
    """Leave one placement out: for each Sia job, GPU and measured multi-GPU placement,
    :func:`fit_sync` on the job's other placements on that GPU; each of the placement's per-GPU
    batch sizes: measured speedup over one GPU against the prediction."""
    out = []
    for job in SIA_JOBS:
        for gpu in SIA_GPUS:
            pts = model.sia.scale_points(job, gpu)
            one = model.sia.single.get((job, gpu))
            if not pts or one is None:
                continue
            for pl in sorted({p.placement for p in pts}):
                fit = sync_fit_of(model.sia, job, gpu, exclude_placement=pl)
                for p in pts:
                    if p.placement != pl:
                        continue
                    tg = one.alpha_s + one.beta_s * p.local_bsz
                    if p.nodes > 1 and not fit.multi_node:
                        continue
                    pred = p.gpus * tg / pollux_step_time(tg, fit, p.gpus, p.nodes)
                    out.append(CheckPoint("sia", job, gpu,
                                          f"placement {pl}, local_bsz {p.local_bsz}",
                                          p.speedup, pred))
    return out


def scale_out_gavel(model: TrainingSpeedModel) -> list[CheckPoint]:
    """Leave one GPU count out on Gavel's measured multi-GPU points: for each job type, worker
    and placement (one server / unconsolidated) with 2, 4 and 8 GPUs measured, :func:`fit_sync`
    on the other two counts (its own one-GPU step time as T_grad); the held-out count's
    measured speedup (not capped) against the prediction."""
    out = []
    for worker in ("k80", "p100", "v100"):
        for suffix, nodes in (("", 1), ("_unconsolidated", 2)):
            table = model.gavel.table[worker + suffix]
            for jt in model.job_types():
                if not _has_curve(table, jt):
                    continue
                t1 = 1.0 / table[(jt, 1)]
                s = {n: table[(jt, n)] / table[(jt, 1)] for n in GAVEL_GPU_COUNTS[1:]}
                for held in GAVEL_GPU_COUNTS[1:]:
                    rest = [n for n in GAVEL_GPU_COUNTS[1:] if n != held]
                    fit = fit_sync(rest, [nodes] * len(rest), [t1] * len(rest),
                                   [n / s[n] for n in rest])
                    pred = held * t1 / pollux_step_time(t1, fit, held, nodes)
                    out.append(CheckPoint("gavel", jt, worker,
                                          f"{held} GPUs, {worker}{suffix}", s[held], pred))
    return out


def scale_out_gavel_from_sia(model: TrainingSpeedModel) -> list[CheckPoint]:
    """The transfer the model makes for the ResNet families on GPUs Gavel did not measure,
    checked where Gavel did measure: Pollux's model fitted to the same network's Sia
    placements on V100 (azure) with the Gavel job type's own V100 step time as T_grad,
    against Gavel's measured one-server V100 speedups (2, 4, 8 GPUs; not capped)."""
    table = model.gavel.table["v100"]
    out = []
    for jt in model.job_types():
        sia_job = SAME_NETWORK.get(family_of(jt))
        if sia_job is None or not _has_curve(table, jt):
            continue
        fit = _sync_fit(model, sia_job, "V100M32")
        t1 = 1.0 / table[(jt, 1)]
        for n in GAVEL_GPU_COUNTS[1:]:
            out.append(CheckPoint("gavel-from-sia", jt, "V100M16", f"{n} GPUs, one server, "
                                  f"T_sync of sia {sia_job} on V100M32",
                                  table[(jt, n)] / table[(jt, 1)],
                                  n * t1 / pollux_step_time(t1, fit, n)))
    return out


def scale_out_gavel_cross_gpu(model: TrainingSpeedModel) -> list[CheckPoint]:
    """The transfer the model makes for the other families: Pollux's model (gamma 1) fitted
    to the job type's own V100 curve, its synchronisation time carried to P100 and K80 with
    their own one-GPU step times, against Gavel's measured one-server speedups there."""
    v = model.gavel.table["v100"]
    out = []
    for jt in model.job_types():
        if not _has_curve(v, jt):
            continue
        fit = own_sync_fit(v, jt)
        for w in ("p100", "k80"):
            t = model.gavel.table[w]
            if not _has_curve(t, jt):
                continue
            t1 = 1.0 / t[(jt, 1)]
            for n in GAVEL_GPU_COUNTS[1:]:
                out.append(CheckPoint("gavel-cross-gpu", jt, w, f"{n} GPUs, one server, "
                                      "T_sync from its v100 curve", t[(jt, n)] / t[(jt, 1)],
                                      n * t1 / pollux_step_time(t1, fit, n)))
    return out
