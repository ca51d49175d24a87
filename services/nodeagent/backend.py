"""The node agent's GPU backend: what the agent asks of the GPUs on its node.

Who calls it: the node agent (telemetry loop, device plugin ``Allocate``).  Whom it calls:
NVML through ``pynvml`` (package ``nvidia-ml-py``) in :class:`NvmlGpuBackend`, nothing in
:class:`SimulatedGpuBackend` (tests, the simulator, GPU-less development machines).

MPS limits: NVML cannot set CUDA MPS per-client limits; they reach a client through its
environment (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) that
the device plugin's ``Allocate`` returns.  Both backends therefore keep a book of per-client
limits, validated against the GPUs, and render the environment with :meth:`mps_env`.

Units: memory GiB, power W, temperature degrees C, clocks MHz, utilization percent (0..100).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol, Sequence, runtime_checkable

from elastico.errors import ElasticoError, InvalidArgument, NotFound

__all__ = [
    "BackendUnavailable",
    "GpuInfo",
    "MpsLimits",
    "GpuBackend",
    "SimulatedGpuBackend",
    "NvmlGpuBackend",
    "TELEMETRY_KEYS",
]

# NVML-style readings every backend's telemetry() returns (key -> unit in the name).
TELEMETRY_KEYS = (
    "utilization_gpu_percent",      # nvmlDeviceGetUtilizationRates().gpu
    "utilization_memory_percent",   # nvmlDeviceGetUtilizationRates().memory
    "memory_used_gib",              # nvmlDeviceGetMemoryInfo().used
    "memory_total_gib",             # nvmlDeviceGetMemoryInfo().total
    "power_w",                      # nvmlDeviceGetPowerUsage() (mW) / 1000
    "temperature_c",                # nvmlDeviceGetTemperature(GPU)
    "sm_clock_mhz",                 # nvmlDeviceGetClockInfo(SM)
)

_GIB = float(1 << 30)


class BackendUnavailable(ElasticoError):
    """The backend cannot run on this machine (e.g. no NVIDIA driver or no pynvml)."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: ``index`` (NVML index), ``uuid``, ``model`` (marketing name, e.g. "A100-40GB"
    or NVML's "NVIDIA A100-SXM4-40GB"), ``memory_total_gib`` (GiB), ``healthy``, ``mig_mode``
    (MIG mode currently enabled)."""

    index: int
    uuid: str
    model: str
    memory_total_gib: float
    healthy: bool = True
    mig_mode: bool = False

    @property
    def name(self) -> str:
        return self.model


@dataclass(frozen=True)
class MpsLimits:
    """A client's MPS limits: ``active_thread_percentage`` (0, 100] of each GPU's SMs and
    ``pinned_mem_limit_gib`` (GiB) per GPU in ``gpu_indices``."""

    client_id: str
    gpu_indices: tuple[int, ...]
    active_thread_percentage: float
    pinned_mem_limit_gib: float


@runtime_checkable
class GpuBackend(Protocol):
    """What the node agent needs from the GPUs (one contract test suite runs against every
    implementation: tests/test_gpu_backend.py)."""

    def list_gpus(self) -> list[GpuInfo]: ...

    def telemetry(self, index: int) -> dict[str, float]:
        """Readings named in :data:`TELEMETRY_KEYS` (unit in the key)."""
        ...

    def set_mps_limits(
        self,
        client_id: str,
        active_thread_percentage: float,
        pinned_mem_limit_gib: float,
        gpu_indices: Sequence[int] = (0,),
    ) -> MpsLimits: ...

    def clear_mps_limits(self, client_id: str) -> None: ...

    def mps_limits(self, client_id: str) -> MpsLimits: ...

    def mps_env(self, client_id: str) -> dict[str, str]: ...

    def close(self) -> None: ...


class _MpsBook:
    """Per-client MPS limits, validated against the GPUs (shared by both backends)."""

    def __init__(self) -> None:
        self._limits: dict[str, MpsLimits] = {}

    def set(self, gpus: Sequence[GpuInfo], client_id, pct, mem_gib, gpu_indices) -> MpsLimits:
        if not isinstance(client_id, str) or not client_id:
            raise InvalidArgument("client_id", client_id, "a non-empty string")
        if not (isinstance(pct, (int, float)) and math.isfinite(pct) and 0.0 < pct <= 100.0):
            raise InvalidArgument("active_thread_percentage", pct, "a percentage in (0, 100]")
        idx = tuple(gpu_indices)
        by_index = {g.index: g for g in gpus}
        if not idx or len(set(idx)) != len(idx):
            raise InvalidArgument("gpu_indices", idx, "distinct GPU indices, at least one")
        for i in idx:
            if i not in by_index:
                raise InvalidArgument("gpu_indices", i, f"an index of this node's GPUs {sorted(by_index)}")
            if by_index[i].mig_mode:
                raise InvalidArgument("gpu_indices", i, "a GPU not in MIG mode (MPS limits need a non-MIG GPU)")
        cap = min(by_index[i].memory_total_gib for i in idx)
        if not (isinstance(mem_gib, (int, float)) and math.isfinite(mem_gib) and 0.0 < mem_gib <= cap):
            raise InvalidArgument("pinned_mem_limit_gib", mem_gib, f"GiB in (0, {cap:g}] (the GPU's memory)")
        lim = MpsLimits(client_id, idx, float(pct), float(mem_gib))
        self._limits[client_id] = lim
        return lim

    def get(self, client_id: str) -> MpsLimits:
        try:
            return self._limits[client_id]
        except KeyError:
            raise NotFound(f"client_id: no MPS limits for {client_id!r}") from None

    def clear(self, client_id: str) -> None:
        self.get(client_id)
        del self._limits[client_id]

    def env(self, client_id: str) -> dict[str, str]:
        """CUDA MPS client environment: thread percentage and per-device pinned memory limit
        (``"0=4096M,1=4096M"``; indices are the container's device ordinals 0..n-1)."""
        lim = self.get(client_id)
        mib = int(lim.pinned_mem_limit_gib * 1024)
        return {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": f"{lim.active_thread_percentage:g}",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(f"{i}={mib}M" for i in range(len(lim.gpu_indices))),
        }


class _MpsLimitsOf:
    """The MPS-limit half of :class:`GpuBackend`, shared by every backend: NVML cannot set
    per-client MPS limits (the MPS control daemon and the client environment do), so each
    backend keeps the same validated book (``self._mps``) against its own GPU list."""

    _mps: "_MpsBook"

    def set_mps_limits(self, client_id, active_thread_percentage, pinned_mem_limit_gib, gpu_indices=(0,)):
        return self._mps.set(self.list_gpus(), client_id, active_thread_percentage, pinned_mem_limit_gib, gpu_indices)

    def clear_mps_limits(self, client_id: str) -> None:
        self._mps.clear(client_id)

    def mps_limits(self, client_id: str) -> MpsLimits:
        return self._mps.get(client_id)

    def mps_env(self, client_id: str) -> dict[str, str]:
        return self._mps.env(client_id)


class SimulatedGpuBackend(_MpsLimitsOf):
    """An in-memory backend over a fixed list of GPUs.  Telemetry defaults to an idle GPU and
    can be set with :meth:`set_telemetry` (tests, the simulator)."""

    def __init__(self, gpus: Sequence[GpuInfo]):
        seen: set[int] = set()
        for g in gpus:
            if g.index in seen:
                raise InvalidArgument("gpus.index", g.index, "distinct GPU indices")
            if not (math.isfinite(g.memory_total_gib) and g.memory_total_gib > 0):
                raise InvalidArgument(f"gpus[{g.index}].memory_total_gib", g.memory_total_gib, "GiB > 0")
            seen.add(g.index)
        self._gpus: dict[int, GpuInfo] = {g.index: g for g in gpus}
        self._readings: dict[int, dict[str, float]] = {
            g.index: {
                "utilization_gpu_percent": 0.0,
                "utilization_memory_percent": 0.0,
                "memory_used_gib": 0.0,
                "memory_total_gib": float(g.memory_total_gib),
                "power_w": 0.0,
                "temperature_c": 30.0,
                "sm_clock_mhz": 0.0,
            }
            for g in gpus
        }
        self._mps = _MpsBook()

    def _gpu(self, index: int) -> GpuInfo:
        try:
            return self._gpus[index]
        except KeyError:
            raise NotFound(f"gpu index {index}: not on this node (have {sorted(self._gpus)})") from None

    def list_gpus(self) -> list[GpuInfo]:
        return [self._gpus[i] for i in sorted(self._gpus)]

    def telemetry(self, index: int) -> dict[str, float]:
        self._gpu(index)
        return dict(self._readings[index])

    def set_telemetry(self, index: int, **readings: float) -> None:
        """Set simulated readings (keys from :data:`TELEMETRY_KEYS`, except memory_total_gib)."""
        g = self._gpu(index)
        for k, v in readings.items():
            if k not in TELEMETRY_KEYS or k == "memory_total_gib":
                raise InvalidArgument("readings", k, f"one of {[x for x in TELEMETRY_KEYS if x != 'memory_total_gib']}")
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InvalidArgument(f"readings.{k}", v, "finite and >= 0")
            if k.endswith("_percent") and v > 100:
                raise InvalidArgument(f"readings.{k}", v, "a percentage in [0, 100]")
            if k == "memory_used_gib" and v > g.memory_total_gib:
                raise InvalidArgument(f"readings.{k}", v, f"<= memory_total_gib {g.memory_total_gib:g}")
        self._readings[index].update({k: float(v) for k, v in readings.items()})

    def set_health(self, index: int, healthy: bool) -> None:
        self._gpus[index] = replace(self._gpu(index), healthy=bool(healthy))

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        self._gpus[index] = replace(self._gpu(index), mig_mode=bool(enabled))

    def close(self) -> None:
        pass


def _unavailable(reason: str) -> BackendUnavailable:
    return BackendUnavailable(
        f"NVML is not available: {reason}; install the NVIDIA driver / nvidia-ml-py "
        "or use the simulated backend"
    )


class NvmlGpuBackend(_MpsLimitsOf):
    """GPUs read through NVML (``pynvml`` from the ``nvidia-ml-py`` package, imported here,
    lazily).  Raises :class:`BackendUnavailable` (never crashes) when pynvml is missing or
    ``nvmlInit`` fails; NVML errors on a query of one GPU mark it unhealthy / raise
    BackendUnavailable naming the call."""

    def __init__(self) -> None:
        try:
            import pynvml  # noqa: PLC0415 - optional dependency, imported lazily on purpose
        except ImportError as e:
            raise _unavailable(f"pynvml cannot be imported ({e})") from None
        except Exception as e:  # a broken install must not crash the agent
            raise _unavailable(f"pynvml failed to import ({type(e).__name__}: {e})") from None
        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except Exception as e:
            raise _unavailable(f"nvmlInit failed ({type(e).__name__}: {e})") from None
        self._open = True
        self._mps = _MpsBook()

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise BackendUnavailable(f"NVML call {what} failed: {type(e).__name__}: {e}") from None

    def _handle(self, index: int):
        count = self._call("nvmlDeviceGetCount", self._nvml.nvmlDeviceGetCount)
        if not (isinstance(index, int) and 0 <= index < count):
            raise NotFound(f"gpu index {index}: not on this node (have 0..{count - 1})")
        return self._call("nvmlDeviceGetHandleByIndex", self._nvml.nvmlDeviceGetHandleByIndex, index)

    @staticmethod
    def _text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def list_gpus(self) -> list[GpuInfo]:
        nv = self._nvml
        out = []
        for i in range(self._call("nvmlDeviceGetCount", nv.nvmlDeviceGetCount)):
            h = self._handle(i)
            healthy = True
            try:
                uuid = self._text(nv.nvmlDeviceGetUUID(h))
                name = self._text(nv.nvmlDeviceGetName(h))
                total = nv.nvmlDeviceGetMemoryInfo(h).total / _GIB
            except Exception:
                uuid, name, total, healthy = f"unknown-{i}", "unknown", 0.0, False
            try:
                mig = bool(nv.nvmlDeviceGetMigMode(h)[0])
            except Exception:  # not MIG-capable (NVML_ERROR_NOT_SUPPORTED)
                mig = False
            out.append(GpuInfo(i, uuid, name, float(total), healthy, mig))
        return out

    def telemetry(self, index: int) -> dict[str, float]:
        nv = self._nvml
        h = self._handle(index)
        util = self._call("nvmlDeviceGetUtilizationRates", nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._call("nvmlDeviceGetMemoryInfo", nv.nvmlDeviceGetMemoryInfo, h)
        out = {
            "utilization_gpu_percent": float(util.gpu),
            "utilization_memory_percent": float(util.memory),
            "memory_used_gib": mem.used / _GIB,
            "memory_total_gib": mem.total / _GIB,
            "power_w": math.nan,
            "temperature_c": math.nan,
            "sm_clock_mhz": math.nan,
        }
        for key, fn in (
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temperature_c", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            ("sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
        ):
            try:  # optional readings: NaN where the GPU does not report them
                out[key] = float(fn())
            except Exception:
                pass
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
