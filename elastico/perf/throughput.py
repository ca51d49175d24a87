"""Solo throughput of a DL job type on a GPU model, GPU count and compute share.

Who calls it: :mod:`elastico.shapes` (normalized throughput of each configuration) and
:mod:`elastico.sim.workload` (job types).  It calls numpy/scipy and reads two bundled files
once (an ``lru_cache``'d loader); :class:`ThroughputModel` is immutable plain data.

Sources (all bundled, see data/README.md and the PROVENANCE.md files):

* **Gavel** ``data/gavel-throughputs/simulation_throughputs.json`` (Narayanan et al., OSDI'20,
  MIT): isolated throughput in steps/s of 26 job types at scale factor 1 on k80/p100/v100,
  and of 19 of them at scale factor (= GPUs) 2/4/8.
* **MISO** ``data/miso-a100-mig-slices/derived/mig_slice_batch_time_summary.csv`` (Li et al.,
  SoCC'22, MIT): median per-batch time of 8 model families x batch sizes on A100-40GB MIG
  slices 1g/2g/3g/4g/7g.
* **Sia** ``data/sia-gpu-speed/gpu_speed_vs_v100.csv`` (derived from Jayaram Subramanya et al.,
  SOSP'23, and Pollux, OSDI'21; PROVENANCE.md there): per job, the best single-GPU throughput on
  T4, V100 and A100-40GB and its ratio to V100's.

Model (docs/model.md walks through it):

* Compute-share scaling.  Step time at compute share s (fraction of one GPU; MIG g/7, MPS
  active thread percentage/100) follows Amdahl, ``T(s) = A/s + B``.  For every MISO
  (family, batch size) with a 7g time we fit (A, B) >= 0 by non-negative least squares on the
  relative residuals ``(A/s + B - T)/T`` over the measured slices; the family's parallel
  fraction ``p`` is the median over batch sizes of ``A/(A+B)``.  Normalized speed at share s:
  ``f(s) = 1 / (p/s + 1 - p)`` (f(1) = 1).  deepspeech2's 1g.5gb timings are left out of the
  fit (MISO PROVENANCE: non-monotone in batch size, heavy variance, likely memory pressure).
* GPU model speed.  P100 and V100 (V100M16, V100M32) use Gavel's measured p100 / v100
  values per job type.  T4 and A100 (40GB measured; 80GB ASSUMED to take the 40GB ratio, same
  GA100 compute) use the Sia-measured ratio to V100 of the Sia job that stands for the job
  type's family (:data:`GAVEL_TO_SIA`): speed = v100 x ratio.  Everything else -- A10, H100,
  the undisclosed G2/G3, and T4/A100 for families with no Sia counterpart -- has no
  measurement: speed = v100 x :data:`SPEED_FACTOR_VS_V100` (a roofline rule ``min(FP32 peak
  ratio, memory-bandwidth ratio)`` vs V100; G2/G3 ASSUMED V100-class, 1.0) x the
  sensitivity multiplier of ``gpu_speed`` (:data:`GPU_SPEED_SENSITIVITIES`): ``datasheet``
  1.0, ``low`` / ``high`` the smallest / largest ratio ``Sia-measured / roofline factor``
  over the measured (job, GPU) pairs -- how far the datasheet rule was off where it can be
  checked.
* MIG instances (:meth:`ThroughputModel.mig`).  A100-40GB: MISO's measured speed of the
  profile relative to 7g.40gb.  A100-80GB: the same measured ratio of the A100-40GB profile
  with as many compute slices (same GA100 silicon, same SM slices; ASSUMPTION: the larger
  memory slice does not change the relative speed).  Other MIG models (H100-80GB): no
  measurement, the Amdahl share_speed(g/7) with the MISO-fitted p (ASSUMPTION).
* Multi-GPU scaling.  speedup(n) = tput(n)/tput(1) from Gavel on the same worker type (p100 for
  P100, v100 for everything else), exactly as measured (a non-monotone measurement stays
  non-monotone), clipped to at most linear (n; a superlinear measurement is not credited);
  between measured counts (1, 2, 4, 8) linear interpolation.  Job types Gavel never ran
  multi-GPU (A3C, CycleGAN, Recommendation) use the median speedup of the measured types at
  that n on that worker -- only to price a multi-GPU shape such a job *requested*: the shape
  families never grow or shrink their GPU count (:meth:`ThroughputModel.multi_gpu_measured`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np
from scipy.optimize import nnls

from elastico.errors import InvalidArgument
from elastico.hardware import gpu_spec
from elastico.mig import MIG_GEOMETRY, mig_profiles
from elastico.paths import data_file

__all__ = [
    "ThroughputModel",
    "REFERENCE_GPU",
    "GAVEL_TO_MISO",
    "MIG_PROFILES",
    "SPEED_FACTOR_VS_V100",
    "fit_amdahl",
    "GAVEL_TO_SIA",
    "SIA_CLUSTER_OF",
    "GPU_SPEED_SENSITIVITIES",
]

#: The reference GPU model: normalized throughput 1.0 = a job's requested shape on it.  V100
#: is the one model both Gavel (measured) and the trace (V100M16/V100M32 nodes) have.
REFERENCE_GPU = "V100M16"

#: Gavel family (job-type name before " (batch size") -> MISO family.
#: ResNet-18/50 -> resnet, Transformer -> transformer, CycleGAN -> cyclegan and
#: Recommendation -> embedding (an embedding-table recommender) are direct matches.
#: GUESSES: LM (Gavel's LSTM language model on Wikitext-2) -> deepspeech2, the only recurrent
#: (GRU/LSTM) model MISO measured; A3C (reinforcement learning, a small conv net, mostly
#: CPU-bound environment steps) -> mobilenet, MISO's smallest conv net.
GAVEL_TO_MISO: Mapping[str, str] = MappingProxyType({
    "ResNet-18": "resnet",
    "ResNet-50": "resnet",
    "Transformer": "transformer",
    "LM": "deepspeech2",
    "Recommendation": "embedding",
    "CycleGAN": "cyclegan",
    "A3C": "mobilenet",
})

#: Gavel family -> the Sia job (data/sia-gpu-speed) whose measured T4/A100 speed vs V100 it
#: takes (docs/model.md 2. says why).  ResNet-18 -> cifar10 (Pollux's cifar10 job *is*
#: ResNet-18 on CIFAR-10) and ResNet-50 -> imagenet (ResNet-50 on ImageNet) are the same
#: models; Transformer -> bert (the only attention model Sia profiled); LM -> deepspeech2
#: (the only recurrent model, as for MISO); CycleGAN -> yolov3 (GUESS: both are large-
#: activation convolutional nets on high-resolution images at small per-GPU batches).  No
#: counterpart: Recommendation (Sia's ncf has an unusable V100 profile, PROVENANCE) and A3C
#: (a tiny conv net bound by CPU environment steps): they keep the datasheet factor.
GAVEL_TO_SIA: Mapping[str, str] = MappingProxyType({
    "ResNet-18": "cifar10",
    "ResNet-50": "imagenet",
    "Transformer": "bert",
    "LM": "deepspeech2",
    "CycleGAN": "yolov3",
})
#: GPU model -> the Sia GPU whose measured ratio it takes (A100-80GB: ASSUMPTION, the 40GB's).
SIA_CLUSTER_OF: Mapping[str, str] = MappingProxyType(
    {"T4": "T4", "A100-40GB": "A100-40GB", "A100-80GB": "A100-40GB"})
#: ``gpu_speed`` settings: multiplier of the datasheet factor of unmeasured (model, type) pairs
#: (module docstring); ``datasheet`` is the default.
GPU_SPEED_SENSITIVITIES = ("low", "datasheet", "high")

#: The GPU MISO measured its MIG slices on, and its compute slices C (share of a profile g/C).
_MISO_GPU = "A100-40GB"
_MISO_C = MIG_GEOMETRY[_MISO_GPU][0]
#: A100 MIG profiles MISO measured -> compute slices g (share g/7), from :mod:`elastico.mig`.
MIG_PROFILES: Mapping[str, int] = MappingProxyType(
    {p: mig_profiles(_MISO_GPU)[p].compute_slices
     for p in ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")})


#: ASSUMED speed of the trace's undisclosed models (G2, G3: no datasheet) relative to V100.
UNDISCLOSED_SPEED_FACTOR = 1.0


def _roofline(gpu_model: str) -> float:
    """``min(FP32 peak ratio, memory-bandwidth ratio)`` of ``gpu_model`` vs :data:`REFERENCE_GPU`,
    both from the GPU catalogue (:mod:`elastico.hardware`: NVIDIA datasheets)."""
    s, ref = gpu_spec(gpu_model), gpu_spec(REFERENCE_GPU)
    return min(s.peak_tflops["fp32"] / ref.peak_tflops["fp32"], s.hbm_gbps / ref.hbm_gbps)


#: Speed relative to V100 of GPU models Gavel did not measure (see module docstring), the
#: roofline rule on the catalogue's datasheet figures (V100M16: V100 SXM2, FP32 15.7 TFLOPS,
#: 900 GB/s): T4 min(8.1/15.7, 320/900) = 0.356; A10 min(31.2/15.7, 600/900) = 0.667;
#: A100 min(19.5/15.7, ...) = 1.242; H100-80GB (the catalogue's H100-SXM) min(67/15.7,
#: 3350/900) = 3.722 (bandwidth-bound); G2, G3: ASSUMED 1.0 (undisclosed models, no figures).
SPEED_FACTOR_VS_V100: Mapping[str, float] = MappingProxyType({
    **{m: _roofline(m) for m in ("T4", "A10", "A100-40GB", "A100-80GB", "H100-80GB")},
    **{m: UNDISCLOSED_SPEED_FACTOR for m in ("G2", "G3")},
})

#: GPU model -> Gavel worker type whose measurements it uses.
_MEASURED = {"P100": "p100", "V100M16": "v100", "V100M32": "v100"}
_GPU_COUNTS = (1, 2, 4, 8)
_KEY = re.compile(r"^\('(.+)', (\d+)\)$")


def fit_amdahl(shares: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Fit ``T(s) = A/s + B`` with A, B >= 0 minimising sum ((A/s + B - T)/T)^2.

    ``shares`` (n,) in (0, 1], ``times`` (n,) seconds, n >= 2.  Returns (A, B) in seconds.
    """
    s = np.asarray(shares, float)
    t = np.asarray(times, float)
    x = np.column_stack([1.0 / s, np.ones_like(s)]) / t[:, None]
    (a, b), _ = nnls(x, np.ones_like(t))
    return float(a), float(b)


def _family_of(job_type: str) -> str:
    return job_type.split(" (batch size")[0]


@dataclass(frozen=True, eq=False)
class ThroughputModel:
    """Immutable throughput model; build with :meth:`bundled` or :meth:`from_files`.

    ``isolated[worker][(job_type, n)]`` steps/s (Gavel), ``fits[(miso_family, batch)] = (A, B)``
    seconds, ``parallel[miso_family] = p``, ``mig_speed[(miso_family, profile)]`` = measured
    speed on the profile relative to 7g.40gb (median over batch sizes),
    ``curves[worker][job_type]`` = measured speedup at 1/2/4/8 GPUs (at most linear).
    """

    isolated: Mapping[str, Mapping[tuple[str, int], float]]
    fits: Mapping[tuple[str, int], tuple[float, float]]
    parallel: Mapping[str, float]
    mig_speed: Mapping[tuple[str, str], float]
    _types: tuple[str, ...] = field(default=())
    curves: Mapping[str, Mapping[str, tuple[float, ...]]] = field(default_factory=dict)
    #: ``sia_ratio[(sia_job, sia_gpu)]`` = measured best single-GPU throughput / V100's
    sia_ratio: Mapping[tuple[str, str], float] = field(default_factory=dict)
    #: one of :data:`GPU_SPEED_SENSITIVITIES`; ``sensitivity[gpu_speed]`` its multiplier
    gpu_speed: str = "datasheet"
    sensitivity: Mapping[str, float] = field(default_factory=lambda: {"datasheet": 1.0})

    def __repr__(self) -> str:
        return (f"ThroughputModel({len(self._types)} job types, "
                f"p={ {k: round(v, 3) for k, v in sorted(self.parallel.items())} })")

    # ------------------------------------------------------------------ construction
    @staticmethod
    def bundled(gpu_speed: str = "datasheet") -> "ThroughputModel":
        """The model built from the bundled Gavel JSON, MISO summary CSV and Sia ratios
        (cached), with unmeasured GPU speed factors at ``gpu_speed`` (one of
        :data:`GPU_SPEED_SENSITIVITIES`; InvalidArgument otherwise)."""
        _check_gpu_speed(gpu_speed)
        return _bundled(gpu_speed)

    @classmethod
    def from_files(cls, gavel_json: str | Path, miso_csv: str | Path,
                   sia_csv: str | Path | None = None, *,
                   gpu_speed: str = "datasheet") -> "ThroughputModel":
        """Build from a Gavel ``simulation_throughputs.json``, MISO summary CSV and,
        optionally, the Sia ratio CSV (``data/sia-gpu-speed/gpu_speed_vs_v100.csv``; without
        it every non-Gavel model uses its datasheet factor).  ``gpu_speed`` as in
        :meth:`bundled`.  Raises InvalidArgument on malformed files."""
        _check_gpu_speed(gpu_speed)
        raw = json.loads(Path(gavel_json).read_text())
        isolated: dict[str, dict[tuple[str, int], float]] = {}
        for worker in ("p100", "v100"):
            if worker not in raw:
                raise InvalidArgument(f"{Path(gavel_json).name}: {worker}", None,
                                      "worker type missing")
            table: dict[tuple[str, int], float] = {}
            for key, entry in raw[worker].items():
                m = _KEY.match(key)
                if not m:
                    raise InvalidArgument(f"{Path(gavel_json).name}: {worker}", key,
                                          "key must look like \"('<job>', <scale>)\"")
                v = float(entry["null"])
                if not (math.isfinite(v) and v >= 0):
                    raise InvalidArgument(f"{Path(gavel_json).name}: {worker}.{key}", v,
                                          "isolated throughput must be finite and >= 0")
                table[(m.group(1), int(m.group(2)))] = v
            isolated[worker] = table
        types = tuple(j for (j, n) in isolated["v100"] if n == 1)
        for j in types:
            if _family_of(j) not in GAVEL_TO_MISO:
                raise InvalidArgument("gavel job type", j, "no MISO family mapping")

        times: dict[tuple[str, int], dict[int, float]] = {}
        with open(miso_csv, newline="") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                prof = row["mig_slice"]
                if prof not in MIG_PROFILES:
                    raise InvalidArgument(f"{Path(miso_csv).name}:{line}: mig_slice", prof,
                                          "one of " + ", ".join(MIG_PROFILES))
                t = float(row["median_batch_time_s_excl_first_of_epoch"])
                if not (math.isfinite(t) and t > 0):
                    raise InvalidArgument(
                        f"{Path(miso_csv).name}:{line}: median_batch_time_s_excl_first_of_epoch",
                        t, "must be finite and > 0")
                times.setdefault((row["model"], int(row["batch_size"])), {})[MIG_PROFILES[prof]] = t
        fits: dict[tuple[str, int], tuple[float, float]] = {}
        ps: dict[str, list[float]] = {}
        ratios: dict[tuple[str, str], list[float]] = {}
        for (fam, bs), d in sorted(times.items()):
            if _MISO_C not in d:
                continue
            for prof, g in MIG_PROFILES.items():
                if g in d:
                    ratios.setdefault((fam, prof), []).append(d[_MISO_C] / d[g])
            pts = {g: t for g, t in d.items() if not (fam == "deepspeech2" and g == 1)}
            if len(pts) < 2:
                continue
            g = np.array(sorted(pts), float)
            a, b = fit_amdahl(g / float(_MISO_C), np.array([pts[int(x)] for x in g]))
            fits[(fam, bs)] = (a, b)
            ps.setdefault(fam, []).append(a / (a + b))
        parallel = {fam: float(np.median(v)) for fam, v in ps.items()}
        for fam in set(GAVEL_TO_MISO.values()):
            if fam not in parallel:
                raise InvalidArgument("miso family", fam, "no timings to fit")
        mig_speed = {k: float(np.median(v)) for k, v in ratios.items()}
        curves = {w: _curves(isolated[w], types) for w in isolated}
        sia = _read_sia(sia_csv) if sia_csv is not None else {}
        return cls(
            MappingProxyType({w: MappingProxyType(t) for w, t in isolated.items()}),
            MappingProxyType(fits), MappingProxyType(parallel), MappingProxyType(mig_speed),
            types, MappingProxyType(curves), MappingProxyType(sia), gpu_speed,
            MappingProxyType(_sensitivity(sia)))

    # ------------------------------------------------------------------ queries
    def job_types(self) -> tuple[str, ...]:
        """The 26 Gavel job types measured at scale factor 1, in file order."""
        return self._types

    def multi_gpu_job_types(self) -> tuple[str, ...]:
        """Job types Gavel measured at scale factors 2, 4 and 8 on v100 (19)."""
        v = self.isolated["v100"]
        return tuple(j for j in self._types if all((j, n) in v for n in (2, 4, 8)))

    def gpu_models(self) -> tuple[str, ...]:
        """GPU models the model knows a speed for."""
        return tuple(_MEASURED) + tuple(SPEED_FACTOR_VS_V100)

    def _check_type(self, job_type: str) -> None:
        if job_type not in self._types:
            raise InvalidArgument("job_type", job_type,
                                  "one of the Gavel job types: " + ", ".join(self._types))

    def miso_family(self, job_type: str) -> str:
        """The MISO family whose MIG timings stand in for ``job_type`` (GAVEL_TO_MISO)."""
        self._check_type(job_type)
        return GAVEL_TO_MISO[_family_of(job_type)]

    def parallel_fraction(self, job_type: str) -> float:
        """Amdahl parallel fraction p in (0, 1) of ``job_type`` (its MISO family's)."""
        return self.parallel[self.miso_family(job_type)]

    def share_speed(self, job_type: str, gpu_share: float) -> float:
        """Normalized speed at compute share s: ``1/(p/s + 1 - p)``; 1.0 at s = 1."""
        if not (isinstance(gpu_share, (int, float)) and 0.0 < gpu_share <= 1.0):
            raise InvalidArgument("gpu_share", gpu_share, "must be in (0, 1]")
        p = self.parallel_fraction(job_type)
        if gpu_share == 1.0:
            return 1.0
        return 1.0 / (p / gpu_share + 1.0 - p)

    def speed_factor(self, gpu_model: str, job_type: str | None = None) -> float | None:
        """Speed relative to V100 on models Gavel did not measure; None for P100 and V100.
        With ``job_type``: the Sia-measured ratio of its family's Sia job on that model when
        there is one (:meth:`measured_speed_ratio`), else the datasheet factor x the
        ``gpu_speed`` sensitivity multiplier.  Without: the datasheet factor x multiplier.
        Raises InvalidArgument for an unknown model."""
        if gpu_model in _MEASURED:
            return None
        if gpu_model not in SPEED_FACTOR_VS_V100:
            raise InvalidArgument("gpu_model", gpu_model,
                                  "one of " + ", ".join(self.gpu_models()))
        if job_type is not None:
            r = self.measured_speed_ratio(job_type, gpu_model)
            if r is not None:
                return r
        return SPEED_FACTOR_VS_V100[gpu_model] * self.sensitivity[self.gpu_speed]

    def measured_speed_ratio(self, job_type: str, gpu_model: str) -> float | None:
        """The Sia-measured speed of ``job_type`` on ``gpu_model`` relative to V100 (best
        single-GPU samples/s over V100's, data/sia-gpu-speed), or None where nothing was
        measured (no Sia counterpart of the family, or a model Sia did not run)."""
        self._check_type(job_type)
        sia_job = GAVEL_TO_SIA.get(_family_of(job_type))
        sia_gpu = SIA_CLUSTER_OF.get(gpu_model)
        if sia_job is None or sia_gpu is None:
            return None
        return self.sia_ratio.get((sia_job, sia_gpu))

    def multi_gpu_measured(self, job_type: str) -> bool:
        """Whether Gavel measured ``job_type`` on 2, 4 and 8 GPUs (p100 and v100): only then
        may a shape family give it a GPU count other than the one it requested."""
        self._check_type(job_type)
        return all((job_type, n) in self.isolated[w] for w in ("p100", "v100")
                   for n in _GPU_COUNTS[1:])

    def _worker(self, gpu_model: str) -> str:
        return _MEASURED.get(gpu_model, "v100")

    def speedup(self, job_type: str, gpu_model: str, num_gpus: int) -> float:
        """Multi-GPU speedup over one GPU (see module docstring): Gavel's measured ratio, at most
        num_gpus (below 1 where more GPUs measured slower)."""
        self._check_type(job_type)
        self.speed_factor(gpu_model)  # validates the model
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) \
                or not 1 <= num_gpus <= 8:
            raise InvalidArgument("num_gpus", num_gpus,
                                  "must be an integer in 1..8 (Gavel measured up to 8)")
        curve = self._speedup_curve(job_type, self._worker(gpu_model))
        if num_gpus in _GPU_COUNTS:
            return curve[_GPU_COUNTS.index(num_gpus)]
        return float(np.interp(num_gpus, _GPU_COUNTS, curve))

    def _speedup_curve(self, job_type: str, worker: str) -> tuple[float, ...]:
        return self.curves[worker][job_type]

    def solo(self, job_type: str, gpu_model: str, num_gpus: int = 1,
             gpu_share: float = 1.0) -> float:
        """Solo throughput in steps/s of ``job_type`` on ``num_gpus`` GPUs of ``gpu_model``,
        each giving it ``gpu_share`` of its compute (gang, data parallel).

        = base(job_type, model) x speedup(num_gpus) x share_speed(gpu_share); base is Gavel's
        measured scale-1 value for P100/V100 (exact), v100 x :meth:`speed_factor` otherwise
        (the Sia-measured ratio of the job type where there is one).
        """
        self._check_type(job_type)
        factor = self.speed_factor(gpu_model, job_type)
        base = self.isolated[self._worker(gpu_model)][(job_type, 1)]
        if factor is not None:
            base *= factor
        if num_gpus == 1:
            up = 1.0
        else:
            up = self.speedup(job_type, gpu_model, num_gpus)
        if gpu_share == 1.0:
            return base * up
        return base * up * self.share_speed(job_type, gpu_share)

    def mig(self, job_type: str, profile: str, gpu_model: str = "A100-40GB") -> float:
        """Solo throughput in steps/s of ``job_type`` on one MIG instance of ``profile`` of a
        ``gpu_model`` GPU (a profile of :data:`elastico.mig.MIG_PROFILES`, e.g.
        ``"3g.20gb"`` on A100-40GB, ``"3g.40gb"`` on A100-80GB / H100-80GB).

        = solo(job_type, gpu_model) x the instance's speed relative to the whole GPU (module
        docstring): on A100s the MISO family's measured speed of the A100-40GB profile with as
        many compute slices, relative to 7g.40gb (median over batch sizes), where MISO measured
        it; else (other models, deepspeech2's 1g) the Amdahl share_speed(g / C) of g of the
        GPU's C compute slices.  The instance never beats the whole GPU it is part of.
        """
        from elastico.mig import MIG_PROFILES as GPU_MIG_PROFILES

        table = GPU_MIG_PROFILES.get(gpu_model)
        if table is None:
            raise InvalidArgument("gpu_model", gpu_model,
                                  "a MIG-capable model: " + ", ".join(GPU_MIG_PROFILES))
        prof = table.get(profile)
        if prof is None:
            raise InvalidArgument("profile", profile,
                                  f"one of {gpu_model}'s MIG profiles: " + ", ".join(table))
        whole = self.solo(job_type, gpu_model)  # validates job_type and the model's speed
        rel = None
        if gpu_model in _MISO_MEASURED and prof.compute_slices in _MISO_BY_SLICES:
            fam = self.miso_family(job_type)
            if not (fam == "deepspeech2" and prof.compute_slices == 1):
                rel = self.mig_speed.get((fam, _MISO_BY_SLICES[prof.compute_slices]))
        if rel is None:
            rel = self.share_speed(job_type, prof.share)
        return whole * min(rel, 1.0)


#: GPU models whose MIG speeds use MISO's A100-40GB measurements (same GA100 silicon).
_MISO_MEASURED = frozenset({"A100-40GB", "A100-80GB"})
#: compute slices -> the MISO profile measured with that many slices
_MISO_BY_SLICES = {g: p for p, g in MIG_PROFILES.items()}


def _curves(table: Mapping[tuple[str, int], float],
            types: tuple[str, ...]) -> Mapping[str, tuple[float, ...]]:
    """Measured speedup at 1/2/4/8 GPUs per job type from one worker's table, at most linear
    (``min(n, tput(n)/tput(1))``, nothing else smoothed); types without measurements get the
    median curve of the measured ones (for requested shapes only; module docstring)."""
    measured: dict[str, list[float]] = {}
    for j in types:
        base = table[(j, 1)]
        if base > 0 and all((j, n) in table and table[(j, n)] > 0 for n in _GPU_COUNTS[1:]):
            measured[j] = [min(float(n), table[(j, n)] / base) for n in _GPU_COUNTS]
    med = [float(np.median([c[i] for c in measured.values()])) for i in range(len(_GPU_COUNTS))]
    return MappingProxyType({j: tuple(measured.get(j, med)) for j in types})


def _check_gpu_speed(gpu_speed: str) -> None:
    if gpu_speed not in GPU_SPEED_SENSITIVITIES:
        raise InvalidArgument("gpu_speed", gpu_speed,
                              "one of " + ", ".join(GPU_SPEED_SENSITIVITIES))


_SIA_COLUMNS = ("sia_job", "gpu_model", "ratio_vs_v100")


def _read_sia(path: str | Path) -> dict[tuple[str, str], float]:
    """``{(sia_job, gpu_model): ratio_vs_v100}`` from the derived Sia CSV; InvalidArgument
    naming ``file:line: column`` for a missing column or a ratio that is not finite and > 0."""
    name = Path(path).name
    out: dict[tuple[str, str], float] = {}
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _SIA_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise InvalidArgument(f"{name}: columns", reader.fieldnames,
                                  "must include " + ", ".join(missing))
        for line, row in enumerate(reader, start=2):
            try:
                r = float(row["ratio_vs_v100"])
            except (TypeError, ValueError):
                r = math.nan
            if not (math.isfinite(r) and r > 0):
                raise InvalidArgument(f"{name}:{line}: ratio_vs_v100", row["ratio_vs_v100"],
                                      "a finite number > 0")
            out[(row["sia_job"], row["gpu_model"])] = r
    return out


def _sensitivity(sia: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Multipliers of the datasheet factor: ``low`` / ``high`` = min / max over the Sia-measured
    (job, GPU) pairs of a GPU with a datasheet factor of ``measured ratio / factor``."""
    errs = [r / SPEED_FACTOR_VS_V100[g] for (_, g), r in sia.items() if g in SPEED_FACTOR_VS_V100]
    if not errs:
        return {"low": 1.0, "datasheet": 1.0, "high": 1.0}
    return {"low": min(errs), "datasheet": 1.0, "high": max(errs)}


@lru_cache(maxsize=len(GPU_SPEED_SENSITIVITIES))
def _bundled(gpu_speed: str = "datasheet") -> ThroughputModel:
    return ThroughputModel.from_files(
        data_file("gavel-throughputs", "simulation_throughputs.json"),
        data_file("miso-a100-mig-slices", "derived", "mig_slice_batch_time_summary.csv"),
        data_file("sia-gpu-speed", "gpu_speed_vs_v100.csv"), gpu_speed=gpu_speed)
