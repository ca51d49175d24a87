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
* **Sia / Pollux** ``data/sia-gpu-speed/`` (Jayaram Subramanya et al., SOSP'23; Qiao et al.,
  OSDI'21): the derived one-GPU lines and scale-out points :mod:`elastico.perf.training` fits.

Model (docs/model.md walks through it):

* Compute-share scaling.  Step time at compute share s (fraction of one GPU; MIG g/7, MPS
  active thread percentage/100) follows Amdahl, ``T(s) = A/s + B``.  For every MISO
  (family, batch size) with a 7g time we fit (A, B) >= 0 by non-negative least squares on the
  relative residuals ``(A/s + B - T)/T`` over the measured slices; the family's parallel
  fraction ``p`` is the median over batch sizes of ``A/(A+B)``.  Normalized speed at share s:
  ``f(s) = 1 / (p/s + 1 - p)`` (f(1) = 1).  deepspeech2's 1g.5gb timings are left out of the
  fit (MISO PROVENANCE: non-monotone in batch size, heavy variance, likely memory pressure).
* GPU model speed and scale-out: :class:`elastico.perf.training.TrainingSpeedModel` --
  Gavel's measured values where Gavel measured the pair (K80, P100, V100), elsewhere the
  per-job roofline model (compute- vs bandwidth-bound share fitted per job on Sia's five GPUs,
  scale fitted on the job type's own Gavel points, the GPU catalogue's figures) and Pollux's
  scale-out model fitted to Sia's measured placements.  The trace's undisclosed G2/G3 are
  ASSUMED to run as the reference V100.  The ``gpu_speed`` sensitivity
  (:data:`GPU_SPEED_SENSITIVITIES`) multiplies every model-predicted one-GPU speed:
  ``datasheet`` 1.0 (the model as fitted), ``low`` / ``high`` the 10th / 90th percentile of
  measured / predicted over the model's leave-one-GPU-out points on Sia's jobs -- how far the
  model was off where it can be checked.
* MIG instances (:meth:`ThroughputModel.mig`).  A100-40GB: MISO's measured speed of the
  profile relative to 7g.40gb.  A100-80GB: the same measured ratio of the A100-40GB profile
  with as many compute slices (same GA100 silicon, same SM slices; ASSUMPTION: the larger
  memory slice does not change the relative speed).  Other MIG models (H100-80GB): no
  measurement, the Amdahl share_speed(g/7) with the MISO-fitted p (ASSUMPTION).
* Every configuration's throughput comes with its provenance (:meth:`ThroughputModel.provenance`,
  one :class:`elastico.model.Provenance` per factor: speed, scale-out, share, MIG).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np
from scipy.optimize import nnls

from elastico.errors import InvalidArgument
from elastico.hardware import SCHEDULER_NAMES
from elastico.mig import MIG_GEOMETRY, mig_profiles
from elastico.model import Provenance
from elastico.paths import data_file
from elastico.perf.training import (ASSUMED_AS, GAVEL_GPU_COUNTS, GAVEL_TO_SIA, GAVEL_WORKERS,
                                    REFERENCE_GPU, TrainingSpeedModel, family_of,
                                    leave_one_gpu_out_sia)

__all__ = [
    "ThroughputModel",
    "REFERENCE_GPU",
    "GAVEL_TO_MISO",
    "GAVEL_TO_SIA",
    "MIG_PROFILES",
    "fit_amdahl",
    "GPU_SPEED_SENSITIVITIES",
    "SCHEDULER_GPU_MODELS",
    "UNDISCLOSED_BAND_MODELS",
    "undisclosed_speed_band",
]

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

#: ``gpu_speed`` settings: multiplier of every model-predicted one-GPU speed (module
#: docstring); ``datasheet`` (the model as fitted) is the default.
GPU_SPEED_SENSITIVITIES = ("low", "datasheet", "high")

#: The GPU models the scheduler places on (:meth:`ThroughputModel.gpu_models`): the GPU
#: catalogue's, every spelling (:data:`elastico.hardware.SCHEDULER_NAMES`: one source of
#: truth) -- the trace's (P100, T4, V100M16, V100M32, A10 measured or predicted; G2, G3 by
#: assumption), the MIG clusters' (A100-40GB, A100-80GB, H100-80GB) and every other datacenter
#: GPU from K80 to B200, which the training model predicts from its compute peak and bandwidth
#: (docs/model.md section 2).  The scheduler's pools are named by these.
SCHEDULER_GPU_MODELS = SCHEDULER_NAMES

#: The GPU MISO measured its MIG slices on, and its compute slices C (share of a profile g/C).
_MISO_GPU = "A100-40GB"
_MISO_C = MIG_GEOMETRY[_MISO_GPU][0]
#: A100 MIG profiles MISO measured -> compute slices g (share g/7), from :mod:`elastico.mig`.
MIG_PROFILES: Mapping[str, int] = MappingProxyType(
    {p: mig_profiles(_MISO_GPU)[p].compute_slices
     for p in ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")})


def fit_amdahl(shares: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Fit ``T(s) = A/s + B`` with A, B >= 0 minimising sum ((A/s + B - T)/T)^2.

    ``shares`` (n,) in (0, 1], ``times`` (n,) seconds, n >= 2.  Returns (A, B) in seconds.
    """
    s = np.asarray(shares, float)
    t = np.asarray(times, float)
    x = np.column_stack([1.0 / s, np.ones_like(s)]) / t[:, None]
    (a, b), _ = nnls(x, np.ones_like(t))
    return float(a), float(b)


@dataclass(frozen=True, eq=False)
class ThroughputModel:
    """Immutable throughput model; build with :meth:`bundled` or :meth:`from_files`.

    ``training``: GPU speed and scale-out (:class:`elastico.perf.training.TrainingSpeedModel`);
    ``fits[(miso_family, batch)] = (A, B)`` seconds, ``parallel[miso_family] = p``,
    ``mig_speed[(miso_family, profile)]`` = measured speed on the profile relative to 7g.40gb
    (median over batch sizes); ``sensitivity[gpu_speed]`` the multiplier of model-predicted
    one-GPU speeds at the ``gpu_speed`` setting.
    """

    training: TrainingSpeedModel
    fits: Mapping[tuple[str, int], tuple[float, float]]
    parallel: Mapping[str, float]
    mig_speed: Mapping[tuple[str, str], float]
    gpu_speed: str = "datasheet"
    sensitivity: Mapping[str, float] = field(default_factory=lambda: {"datasheet": 1.0})
    #: the undisclosed G2/G3's one-GPU speed over the reference V100's: a SENSITIVITY
    #: PARAMETER, not a measurement (:func:`undisclosed_speed_band`, docs/model.md 2.); 1.0 is
    #: the historical setting (they run as the reference)
    undisclosed_speed: float = 1.0

    def __repr__(self) -> str:
        return (f"ThroughputModel({len(self.job_types())} job types, gpu_speed={self.gpu_speed}, "
                f"p={ {k: round(v, 3) for k, v in sorted(self.parallel.items())} })")

    # ------------------------------------------------------------------ construction
    @staticmethod
    def bundled(gpu_speed: str = "datasheet") -> "ThroughputModel":
        """The model built from the bundled Gavel JSON, Sia figures and MISO summary CSV
        (cached), model-predicted speeds at ``gpu_speed`` (one of
        :data:`GPU_SPEED_SENSITIVITIES`; InvalidArgument otherwise)."""
        _check_gpu_speed(gpu_speed)
        return _bundled(gpu_speed)

    @classmethod
    def from_files(cls, gavel_json: str | Path, miso_csv: str | Path,
                   sia_single_csv: str | Path | None = None,
                   sia_scale_csv: str | Path | None = None, *,
                   gpu_speed: str = "datasheet") -> "ThroughputModel":
        """Build from a Gavel ``simulation_throughputs.json``, the MISO summary CSV and the Sia
        figures (``single_gpu.csv``, ``scale_out.csv``; the bundled ones when None).
        ``gpu_speed`` as in :meth:`bundled`.  Raises InvalidArgument on malformed files."""
        _check_gpu_speed(gpu_speed)
        training = TrainingSpeedModel.from_files(
            gavel_json, sia_single_csv or data_file("sia-gpu-speed", "single_gpu.csv"),
            sia_scale_csv or data_file("sia-gpu-speed", "scale_out.csv"))
        for j in training.job_types():
            if family_of(j) not in GAVEL_TO_MISO:
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
        return cls(training, MappingProxyType(fits), MappingProxyType(parallel),
                   MappingProxyType(mig_speed), gpu_speed,
                   MappingProxyType(_sensitivity(training)))

    # ------------------------------------------------------------------ queries
    def job_types(self) -> tuple[str, ...]:
        """The 26 Gavel job types measured at scale factor 1, in file order."""
        return self.training.job_types()

    def multi_gpu_job_types(self) -> tuple[str, ...]:
        """Job types Gavel measured at scale factors 2, 4 and 8 on one p100 and v100 server (19)."""
        return tuple(j for j in self.job_types() if self.training.multi_gpu_measured(j))

    def gpu_models(self) -> tuple[str, ...]:
        """The GPU models the scheduler places on (:data:`SCHEDULER_GPU_MODELS`)."""
        return SCHEDULER_GPU_MODELS

    def _check_type(self, job_type: str) -> None:
        self.training.check_type(job_type)

    def _check_model(self, gpu_model: str) -> None:
        if gpu_model not in SCHEDULER_GPU_MODELS:
            raise InvalidArgument("gpu_model", gpu_model,
                                  "one of " + ", ".join(SCHEDULER_GPU_MODELS))

    def miso_family(self, job_type: str) -> str:
        """The MISO family whose MIG timings stand in for ``job_type`` (GAVEL_TO_MISO)."""
        self._check_type(job_type)
        return GAVEL_TO_MISO[family_of(job_type)]

    def parallel_fraction(self, job_type: str) -> float:
        """Amdahl parallel fraction p in (0, 1) of ``job_type`` (its MISO family's)."""
        return self.parallel[self.miso_family(job_type)]

    def share_speed(self, job_type: str, gpu_share: float) -> float:
        """Normalized speed at compute share s: ``1/(p/s + 1 - p)``; 1.0 at s = 1."""
        if isinstance(gpu_share, bool) or not (isinstance(gpu_share, (int, float))
                                               and 0.0 < gpu_share <= 1.0):
            raise InvalidArgument("gpu_share", gpu_share, "must be in (0, 1]")
        p = self.parallel_fraction(job_type)
        if gpu_share == 1.0:
            return 1.0
        return 1.0 / (p / gpu_share + 1.0 - p)

    def base(self, job_type: str, gpu_model: str) -> tuple[float, Provenance]:
        """Steps/s of ``job_type`` alone on one whole GPU of ``gpu_model`` and its provenance;
        a model-predicted speed is multiplied by the ``gpu_speed`` sensitivity."""
        if type(job_type) is str and type(gpu_model) is str:
            return _cached_base(self, job_type, gpu_model)
        return self._base(job_type, gpu_model)

    def with_undisclosed_speed(self, speed: float) -> "ThroughputModel":
        """This model with the undisclosed G2/G3 at ``speed`` x the reference V100's one-GPU
        speed (every job type alike; :func:`undisclosed_speed_band` gives the band the
        simulator's results are reported over).  InvalidArgument (field
        ``undisclosed_speed``) outside (0, 20]."""
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) \
                or not (math.isfinite(speed) and 0 < speed <= 20):
            raise InvalidArgument("undisclosed_speed", speed,
                                  "a factor of the reference V100's speed in (0, 20]")
        return replace(self, undisclosed_speed=float(speed))

    def _base(self, job_type: str, gpu_model: str) -> tuple[float, Provenance]:
        self._check_model(gpu_model)
        v, prov = self.training.base(job_type, gpu_model)
        if gpu_model in ASSUMED_AS:
            u = self.undisclosed_speed
            v *= u
            prov = Provenance(prov.kind, prov.source,
                              f"{prov.detail}; SENSITIVITY PARAMETER undisclosed_speed={u:g} x "
                              "the reference (no measurement, no datasheet; the band reported "
                              "is undisclosed_speed_band(): docs/model.md 2.)", prov.factor)
        mult = self.sensitivity[self.gpu_speed]
        if prov.kind == "model" and mult != 1.0:
            v *= mult
            prov = Provenance(prov.kind, prov.source,
                              f"{prov.detail}; x {mult:.4g} (gpu_speed={self.gpu_speed})",
                              prov.factor)
        return v, prov

    def speed_factor(self, gpu_model: str, job_type: str) -> float:
        """Speed of ``job_type`` on one ``gpu_model`` GPU relative to the reference V100."""
        return self.base(job_type, gpu_model)[0] / self.base(job_type, REFERENCE_GPU)[0]

    def multi_gpu_measured(self, job_type: str) -> bool:
        """Whether Gavel measured ``job_type`` on 2, 4 and 8 GPUs (p100 and v100): only then
        may a shape family give it a GPU count other than the one it requested."""
        return self.training.multi_gpu_measured(job_type)

    def speedup(self, job_type: str, gpu_model: str, num_gpus: int, nodes: int = 1) -> float:
        """Throughput on ``num_gpus`` GPUs over ``nodes`` nodes relative to one GPU, the
        per-GPU batch fixed (:meth:`elastico.perf.training.TrainingSpeedModel.speedup`): never
        above ``num_gpus``, below 1 where more GPUs were measured slower."""
        return self._speedup(job_type, gpu_model, num_gpus, nodes)[0]

    def _speedup(self, job_type: str, gpu_model: str, num_gpus: int,
                 nodes: int = 1) -> tuple[float, Provenance]:
        if type(num_gpus) is int and type(nodes) is int and type(job_type) is str \
                and type(gpu_model) is str:
            return _cached_speedup(self, job_type, gpu_model, num_gpus, nodes)
        return self._speedup_uncached(job_type, gpu_model, num_gpus, nodes)

    def _speedup_uncached(self, job_type: str, gpu_model: str, num_gpus: int,
                          nodes: int = 1) -> tuple[float, Provenance]:
        self._check_type(job_type)
        self._check_model(gpu_model)
        if num_gpus == 1 and nodes == 1:
            return 1.0, Provenance("model", "identity", "one GPU", "scale-out")
        if self.gpu_speed == "datasheet" or GAVEL_WORKERS.get(ASSUMED_AS.get(gpu_model, gpu_model)):
            return self.training.speedup(job_type, gpu_model, num_gpus, nodes)
        # a model-predicted scale-out uses the job's one-GPU step time there, so it follows
        # the sensitivity setting of that speed
        return _scaled_speedup(self, job_type, gpu_model, num_gpus, nodes)

    def solo(self, job_type: str, gpu_model: str, num_gpus: int = 1,
             gpu_share: float = 1.0) -> float:
        """Solo throughput in steps/s of ``job_type`` on ``num_gpus`` GPUs of ``gpu_model``
        (one node), each giving it ``gpu_share`` of its compute (gang, data parallel, per-GPU
        batch fixed): base(job_type, model) x speedup(num_gpus) x share_speed(gpu_share)."""
        base, _ = self.base(job_type, gpu_model)
        up = 1.0 if num_gpus == 1 else self._speedup(job_type, gpu_model, num_gpus)[0]
        if gpu_share == 1.0:
            return base * up
        return base * up * self.share_speed(job_type, gpu_share)

    def provenance(self, job_type: str, gpu_model: str, num_gpus: int = 1,
                   gpu_share: float = 1.0, *, mig_profile: str | None = None
                   ) -> tuple[Provenance, ...]:
        """Where :meth:`solo` (or :meth:`mig` with ``mig_profile``) gets each factor of its
        value: the one-GPU speed, the scale-out (``num_gpus`` > 1), the MPS share
        (``gpu_share`` < 1) or the MIG instance.  Raises like :meth:`solo` / :meth:`mig`."""
        if type(job_type) is str and type(gpu_model) is str and type(num_gpus) is int \
                and type(gpu_share) in (int, float) and (mig_profile is None
                                                        or type(mig_profile) is str):
            return _cached_provenance(self, job_type, gpu_model, num_gpus, gpu_share,
                                      mig_profile)
        return self._provenance(job_type, gpu_model, num_gpus, gpu_share, mig_profile)

    def _provenance(self, job_type: str, gpu_model: str, num_gpus: int, gpu_share: float,
                    mig_profile: str | None) -> tuple[Provenance, ...]:
        out = [self.base(job_type, gpu_model)[1]]
        if mig_profile is not None:
            out.append(self._mig(job_type, mig_profile, gpu_model)[1])
            return tuple(out)
        if num_gpus != 1:
            out.append(self._speedup(job_type, gpu_model, num_gpus)[1])
        if gpu_share != 1.0:
            self.share_speed(job_type, gpu_share)  # validates the share
            fam = self.miso_family(job_type)
            out.append(Provenance(
                "model", "amdahl-miso",
                f"1/(p/s + 1 - p), p={self.parallel[fam]:.3f} fitted on miso {fam}'s "
                f"A100-40GB MIG slice times (median over batch sizes); s={gpu_share:g}", "share"))
        return tuple(out)

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
        whole = self.solo(job_type, gpu_model) if gpu_model in SCHEDULER_GPU_MODELS else None
        rel, _ = self._mig(job_type, profile, gpu_model)
        return whole * rel

    def _mig(self, job_type: str, profile: str, gpu_model: str) -> tuple[float, Provenance]:
        from elastico.mig import MIG_PROFILES as GPU_MIG_PROFILES

        table = GPU_MIG_PROFILES.get(gpu_model)
        if table is None:
            raise InvalidArgument("gpu_model", gpu_model,
                                  "a MIG-capable model: " + ", ".join(GPU_MIG_PROFILES))
        prof = table.get(profile)
        if prof is None:
            raise InvalidArgument("profile", profile,
                                  f"one of {gpu_model}'s MIG profiles: " + ", ".join(table))
        self._check_model(gpu_model)
        fam = self.miso_family(job_type)
        if gpu_model in _MISO_MEASURED and prof.compute_slices in _MISO_BY_SLICES \
                and not (fam == "deepspeech2" and prof.compute_slices == 1):
            miso = _MISO_BY_SLICES[prof.compute_slices]
            rel = self.mig_speed.get((fam, miso))
            if rel is not None:
                same = gpu_model == _MISO_GPU and profile == miso
                detail = (f"miso {fam} on {_MISO_GPU} {miso} over 7g.40gb (median over batch "
                          f"sizes)" + ("" if same else
                                       f"; ASSUMPTION: {gpu_model} {profile} has the same "
                                       f"{prof.compute_slices} GA100 compute slices"))
                return min(rel, 1.0), Provenance("measured", "miso", detail, "mig")
        return (min(self.share_speed(job_type, prof.share), 1.0),
                Provenance("model", "amdahl-miso",
                           f"1/(p/s + 1 - p), p={self.parallel[fam]:.3f} (miso {fam}), "
                           f"s={prof.compute_slices}/{round(prof.compute_slices / prof.share)} "
                           "compute slices; ASSUMPTION: no measurement of this instance", "mig"))


#: GPU models whose MIG speeds use MISO's A100-40GB measurements (same GA100 silicon).
_MISO_MEASURED = frozenset({"A100-40GB", "A100-80GB"})
#: compute slices -> the MISO profile measured with that many slices
_MISO_BY_SLICES = {g: p for p, g in MIG_PROFILES.items()}


@lru_cache(maxsize=65536)
def _cached_base(model: ThroughputModel, job_type: str, gpu_model: str) -> tuple[float, Provenance]:
    return model._base(job_type, gpu_model)


@lru_cache(maxsize=65536)
def _cached_provenance(model: ThroughputModel, job_type: str, gpu_model: str, num_gpus: int,
                       gpu_share: float, mig_profile: str | None) -> tuple[Provenance, ...]:
    return model._provenance(job_type, gpu_model, num_gpus, gpu_share, mig_profile)


@lru_cache(maxsize=65536)
def _cached_speedup(model: ThroughputModel, job_type: str, gpu_model: str, num_gpus: int,
                    nodes: int) -> tuple[float, Provenance]:
    return model._speedup_uncached(job_type, gpu_model, num_gpus, nodes)


def _scaled_speedup(model: ThroughputModel, job_type: str, gpu_model: str, num_gpus: int,
                    nodes: int) -> tuple[float, Provenance]:
    """The training model's scale-out at a sensitivity other than ``datasheet``: a modelled
    scale-out takes the job's one-GPU step time at that setting (Gavel's curves do not move)."""
    tg = 1.0 / model.base(job_type, gpu_model)[0]
    x, prov = model.training.speedup(job_type, gpu_model, num_gpus, nodes, t_grad=tg)
    return x, Provenance(prov.kind, prov.source,
                         f"{prov.detail}; T_grad at gpu_speed={model.gpu_speed}", prov.factor)


#: GPU models whose median speed over the job types bounds :func:`undisclosed_speed_band`:
#: the trace's slowest disclosed model and the A100-80GB (docs/model.md 2. says why).
UNDISCLOSED_BAND_MODELS = ("T4", "A100-80GB")


@lru_cache(maxsize=1)
def undisclosed_speed_band() -> tuple[float, float]:
    """``(low, high)``: the band of :attr:`ThroughputModel.undisclosed_speed` the simulator's
    results are reported over -- the median over the 26 job types of the bundled model's
    speed relative to the V100 (``datasheet``) on :data:`UNDISCLOSED_BAND_MODELS`: the
    trace's slowest disclosed GPU (T4, 0.387) and an A100-80GB (2.52).  A choice, not a
    measurement: nothing bounds an undisclosed GPU (docs/model.md 2.)."""
    tm = _bundled("datasheet")
    lo, hi = (float(np.median([tm.speed_factor(g, j) for j in tm.job_types()]))
              for g in UNDISCLOSED_BAND_MODELS)
    return lo, hi


def _check_gpu_speed(gpu_speed: str) -> None:
    if gpu_speed not in GPU_SPEED_SENSITIVITIES:
        raise InvalidArgument("gpu_speed", gpu_speed,
                              "one of " + ", ".join(GPU_SPEED_SENSITIVITIES))


def _sensitivity(training: TrainingSpeedModel) -> dict[str, float]:
    """Multipliers of model-predicted speeds: ``low`` / ``high`` = the 10th / 90th percentile
    of measured / predicted over the leave-one-GPU-out points of Sia's jobs."""
    pts = leave_one_gpu_out_sia(training)
    r = np.array([p.measured / p.predicted for p in pts])
    return {"low": float(np.percentile(r, 10)), "datasheet": 1.0,
            "high": float(np.percentile(r, 90))}


@lru_cache(maxsize=len(GPU_SPEED_SENSITIVITIES))
def _bundled(gpu_speed: str = "datasheet") -> ThroughputModel:
    return ThroughputModel.from_files(
        data_file("gavel-throughputs", "simulation_throughputs.json"),
        data_file("miso-a100-mig-slices", "derived", "mig_slice_batch_time_summary.csv"),
        gpu_speed=gpu_speed)
