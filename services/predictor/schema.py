"""The predictor's feature schema, version :data:`SCHEMA_VERSION` (docs/predictor.md).

One place says what the interference predictor may know about a job and a GPU: every per-job
field (name, unit, allowed range, and the NVML / DCGM field it comes from), the categorical
vocabularies, and the GPU models with their datasheet numbers.  Every field is optional: a
missing value is ``None`` here and NaN in a feature matrix, and the model handles it.

Who reads it: :mod:`elastico.predictor.profile` (validates a :class:`JobProfile`),
:mod:`elastico.predictor.observations` (the CSV format), :mod:`elastico.predictor.features`
(the feature matrix) and the gRPC adapter.  It imports nothing of ElastiCo but the errors and
the GPU catalogue (:mod:`elastico.hardware`).

Bump :data:`SCHEMA_VERSION` when a field is added, removed or changes meaning; a model file
records the version it was trained on and is refused by code of another version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from elastico.errors import InvalidArgument
from elastico.hardware import SCHEDULER_NAMES, gpu_spec

__all__ = [
    "MAX_SLOWDOWN",
    "SCHEMA_VERSION",
    "MAX_BATCH_SIZE",
    "MAX_MEM_GIB",
    "JobField",
    "JOB_FIELDS",
    "JOB_FIELD_NAMES",
    "KINDS",
    "PRECISIONS",
    "SHARING",
    "GpuSpec",
    "GPU_SPECS",
    "check_job_field",
    "check_gpu_model",
    "check_slowdown",
]

SCHEMA_VERSION = 1

#: Job kinds (elastico.model.JobKind values).
KINDS = ("training", "inference", "service")
#: Arithmetic precision of the job's kernels: fp32, automatic mixed precision (fp16 with fp32
#: master weights), bf16.
PRECISIONS = ("fp32", "amp", "bf16")
#: How the GPU is shared: CUDA MPS (concurrent kernels, optional per-client SM limit), the
#: driver's default time-slicing (one context at a time) or MIG (each job on its own instance:
#: disjoint SMs, L2 and memory; the contention prior gives it no interference).
SHARING = ("mps", "timeslice", "mig")


#: Largest per-GPU batch size accepted (samples/step): 2^20.  Published training and offline
#: inference batch sizes per GPU stay in the thousands; a value above a million is a unit or
#: typing mistake (e.g. a sample count), not a batch.
MAX_BATCH_SIZE = 2**20
#: Largest per-job GPU memory accepted, GiB: 1024.  The largest single GPU has 288 GB (B300);
#: 1 TiB leaves room while refusing byte counts given as GiB (e.g. 1.6e10).
MAX_MEM_GIB = 1024.0


@dataclass(frozen=True)
class JobField:
    """One per-job field.  ``check``: ``fraction`` [0, 1], ``share`` (0, 1], ``nonneg`` >= 0,
    ``positive`` > 0, ``count`` integer >= 1, ``choice`` one of ``choices``, ``text`` any
    non-empty string.  ``source``: where a solo profile reads it (NVML / DCGM field).
    ``maximum``: an upper bound for a number beyond which the value cannot be a real
    measurement (None = none beyond finiteness)."""

    name: str
    check: str
    unit: str
    doc: str
    source: str
    choices: tuple[str, ...] = ()
    maximum: float | None = None


#: Per-job fields, in CSV column order (prefixed ``a_`` / ``b_`` in an observation file).
JOB_FIELDS: tuple[JobField, ...] = (
    JobField("job_type", "text", "-",
             "workload identifier, e.g. a Gavel job type 'ResNet-50 (batch size 64)'; "
             "not a feature itself, but keys the solo-throughput catalog and groups folds",
             "the job's spec"),
    JobField("kind", "choice", "-", "training, inference (offline batch) or service",
             "the job's spec", KINDS),
    JobField("model_family", "text", "-",
             "DL model family, e.g. ResNet-50, Transformer, LM (Gavel's names)",
             "the job's spec"),
    JobField("batch_size", "count", "samples/step", "per-GPU batch size", "the job's spec",
             maximum=MAX_BATCH_SIZE),
    JobField("precision", "choice", "-", "fp32, amp (fp16 mixed) or bf16",
             "the job's spec", PRECISIONS),
    JobField("sharing", "choice", "-", "mps, timeslice or mig", "the placement", SHARING),
    JobField("mps_share", "share", "fraction of SMs",
             "MPS active thread percentage / 100; missing = no limit",
             "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of the client"),
    JobField("solo_tput", "positive", "steps/s",
             "iterations per second alone on this GPU model (whole GPU)",
             "the job's own step counter during the solo profile"),
    JobField("sm_activity", "fraction", "fraction of cycles",
             "fraction of cycles with at least one warp resident on an SM, averaged over SMs",
             "DCGM_FI_PROF_SM_ACTIVE (1002); NVML: nvmlGpmMetricsGet "
             "NVML_GPM_METRIC_SM_UTIL (Hopper+); coarser fallback "
             "nvmlDeviceGetUtilizationRates().gpu / 100"),
    JobField("dram_activity", "fraction", "fraction of cycles",
             "fraction of cycles the device memory interface is sending or receiving",
             "DCGM_FI_PROF_DRAM_ACTIVE (1005); NVML: NVML_GPM_METRIC_DRAM_BW_UTIL (Hopper+); "
             "coarser fallback nvmlDeviceGetUtilizationRates().memory / 100"),
    JobField("mem_gib", "nonneg", "GiB", "GPU memory held by the job's process(es)",
             "nvmlDeviceGetComputeRunningProcesses()[i].usedGpuMemory (bytes) / 2^30; "
             "DCGM_FI_DEV_FB_USED (252, MiB) / 1024 when alone on the GPU",
             maximum=MAX_MEM_GIB),
    JobField("pcie_rx_gbs", "nonneg", "GB/s", "host-to-device PCIe traffic (1 GB = 1e9 bytes)",
             "DCGM_FI_PROF_PCIE_RX_BYTES (1010, bytes/s) / 1e9; NVML: "
             "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES) (KB/s) / 1e6"),
    JobField("pcie_tx_gbs", "nonneg", "GB/s", "device-to-host PCIe traffic (1 GB = 1e9 bytes)",
             "DCGM_FI_PROF_PCIE_TX_BYTES (1009, bytes/s) / 1e9; NVML: "
             "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES) (KB/s) / 1e6"),
    JobField("tensor_activity", "fraction", "fraction of cycles",
             "fraction of cycles the tensor-core pipe is active",
             "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (1004); NVML: "
             "NVML_GPM_METRIC_ANY_TENSOR_UTIL (Hopper+)"),
    JobField("power_frac", "fraction", "fraction of the power limit",
             "average board power / enforced power limit",
             "nvmlDeviceGetPowerUsage() / nvmlDeviceGetEnforcedPowerLimit() (both mW); "
             "DCGM_FI_DEV_POWER_USAGE (155, W) / DCGM_FI_DEV_ENFORCED_POWER_LIMIT (164, W)"),
)
JOB_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in JOB_FIELDS)
_BY_NAME = {f.name: f for f in JOB_FIELDS}


@dataclass(frozen=True)
class GpuSpec:
    """The predictor's view of one GPU model (one GPU, not one board): peak FP32 TFLOPS and
    memory bandwidth GB/s, read from :mod:`elastico.hardware`; ``assumed`` when the model is
    undisclosed and V100-class numbers stand in (as in :mod:`elastico.perf.throughput`)."""

    fp32_tflops: float
    mem_bw_gbs: float
    assumed: bool = False


#: GPU models the predictor knows: every GPU model the scheduler places on
#: (:data:`elastico.hardware.SCHEDULER_NAMES`, the catalogue's keys and aliases: one source of
#: truth), their figures read from the GPU catalogue (:mod:`elastico.hardware`, NVIDIA
#: datasheets, one GPU: K80 is one GK210 of the two on a board, P100 the PCIe 16 GB part,
#: V100M16/V100M32 the SXM2 parts, H100-80GB the SXM part, H200 the SXM part).  G2, G3 are
#: anonymised in the Alibaba trace (the catalogue has no figures for them): ASSUMED V100-class
#: (:data:`_STAND_IN`'s figures), as the throughput model assumes.
_STAND_IN = "V100M16"
_MODELS = tuple(m for m in SCHEDULER_NAMES if m not in ("G2", "G3"))


def _from_catalogue(name: str, assumed: bool = False) -> GpuSpec:
    s = gpu_spec(name)
    return GpuSpec(s.peak_tflops["fp32"], s.hbm_gbps, assumed=assumed)


GPU_SPECS: Mapping[str, GpuSpec] = MappingProxyType({
    **{m: _from_catalogue(m) for m in _MODELS},
    "G2": _from_catalogue(_STAND_IN, assumed=True),
    "G3": _from_catalogue(_STAND_IN, assumed=True),
})


def _finite(v: Any) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float range (10**400) is no finite measurement
        return False


def check_job_field(name: str, value: Any, where: str = "") -> Any:
    """``value`` of per-job field ``name`` if allowed (``None`` = missing is always allowed),
    normalised (``batch_size`` to int, numbers to float).  Raises InvalidArgument with field
    ``where + name`` and the allowed range otherwise; an unknown ``name`` too."""
    f = _BY_NAME.get(name)
    if f is None:
        raise InvalidArgument(where + name, value, "a field of " + ", ".join(JOB_FIELD_NAMES))
    if value is None:
        return None
    field = where + name
    c = f.check
    if c == "text":
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgument(field, value, "a non-empty string")
        return value
    if c == "choice":
        if value not in f.choices:
            raise InvalidArgument(field, value, "one of " + ", ".join(f.choices))
        return value
    if c == "count":
        if (not _finite(value) or value != int(value) or value < 1
                or (f.maximum is not None and value > f.maximum)):
            top = f" and <= {int(f.maximum)}" if f.maximum is not None else ""
            raise InvalidArgument(field, value, f"an integer >= 1{top} ({f.unit})")
        return int(value)
    if not _finite(value):
        raise InvalidArgument(field, value, f"a finite number ({f.unit})")
    v = float(value)
    if c == "fraction" and not 0.0 <= v <= 1.0:
        raise InvalidArgument(field, value, f"a fraction in [0, 1] ({f.unit})")
    if c == "share" and not 0.0 < v <= 1.0:
        raise InvalidArgument(field, value, f"a fraction in (0, 1] ({f.unit})")
    if c == "nonneg" and v < 0.0:
        raise InvalidArgument(field, value, f">= 0 ({f.unit})")
    if c == "positive" and v <= 0.0:
        raise InvalidArgument(field, value, f"> 0 ({f.unit})")
    if f.maximum is not None and v > f.maximum:
        raise InvalidArgument(field, value, f"<= {f.maximum:g} ({f.unit})")
    return v


def check_gpu_model(value: Any, field: str = "gpu_model") -> str:
    """``value`` if it is a GPU model of :data:`GPU_SPECS`; InvalidArgument naming ``field``."""
    if value not in GPU_SPECS:
        raise InvalidArgument(field, value, "one of " + ", ".join(GPU_SPECS))
    return value


#: Largest measured slowdown accepted, and its reciprocal the smallest: the predictor
#: represents slowdowns up to 50 (``model.py`` clips normalized throughput at 0.02), the
#: bundled Gavel pairs span 1.005-11, and a value past these (1e308 was accepted and made a
#: retrain's MAE 1.4e307) is a unit or recording error, not a measurement.
MAX_SLOWDOWN = 50.0


def check_slowdown(value: Any, field: str) -> float:
    """A measured slowdown (co-located step time / solo step time) in [1/MAX_SLOWDOWN,
    MAX_SLOWDOWN] = [0.02, 50].  Values below 1 are kept as measured (noise).
    InvalidArgument naming ``field`` otherwise."""
    if not _finite(value) or not 1.0 / MAX_SLOWDOWN <= value <= MAX_SLOWDOWN:
        raise InvalidArgument(field, value,
                              f"a slowdown in [{1.0 / MAX_SLOWDOWN:g}, {MAX_SLOWDOWN:g}] "
                              "(co-located / solo step time)")
    return float(value)
