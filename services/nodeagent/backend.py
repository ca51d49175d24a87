"""The node agent's GPU backend: what the agent asks of the GPUs on its node.

Who calls it: the node agent (telemetry loop, device plugin ``Allocate``).  Whom it calls:
NVML through ``pynvml`` (package ``nvidia-ml-py``) in :class:`NvmlGpuBackend`, nothing in
:class:`SimulatedGpuBackend` (tests, the simulator, GPU-less development machines).

MPS limits: NVML cannot set CUDA MPS per-client limits; they reach a client through its
environment (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) that
the device plugin's ``Allocate`` returns.  Both backends therefore keep a book of per-client
limits, validated against the GPUs, and render the environment with :meth:`mps_env`.

MIG: :meth:`GpuBackend.mig_devices` lists a GPU's instances, :meth:`~GpuBackend.create_mig_instance`
makes a GPU instance of a profile at a start slot with its full-size compute instance (what
``nvidia-smi mig -cgi <profile> -C`` does), :meth:`~GpuBackend.destroy_mig_instance` removes
both.  Geometry rules come from :mod:`elastico.mig` (the simulated backend refuses what
the tables refuse; NVML refuses what the driver refuses); the node plan
(:mod:`elastico.nodeagent.nodeplan`) validates a whole geometry before any step runs.

Health: :meth:`GpuBackend.wait_health_event` blocks until something may have changed a GPU's
health (NVML: a critical XID or double-bit ECC event; simulated: :meth:`set_health`) or the
timeout passes; ``list_gpus()`` then reports the new ``healthy`` flags.

Activity (issue 23): :meth:`GpuBackend.activity` reads what a job does on a GPU, one
:class:`ActivityReading` per *unit* -- the whole GPU, or each MIG instance of a GPU in MIG mode
(instances are hardware-isolated, so each is read on its own): per process (= per MPS client)
the SM utilisation NVML attributes to it (``nvmlDeviceGetProcessUtilization``, ``smUtil``) and
its memory (``nvmlDeviceGetComputeRunningProcesses``, ``usedGpuMemory``); the unit's SM and
DRAM activity (DCGM profiling fields ``DCGM_FI_PROF_SM_ACTIVE`` 1002 and
``DCGM_FI_PROF_DRAM_ACTIVE`` 1005, read only where the DCGM python bindings import; otherwise
``None`` = unavailable, never estimated); PCIe throughput (``nvmlDeviceGetPcieThroughput``,
whole GPUs only: a MIG instance shares its GPU's PCIe link).  The simulated backend computes
the same readings from :mod:`elastico.perf.activity` (:meth:`SimulatedGpuBackend.run_process`).

Units: memory GiB, power W, temperature degrees C, clocks MHz, utilization percent (0..100),
PCIe GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import json
import math
import threading
import uuid as uuidlib
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from elastico.errors import ElasticoError, Infeasible, InvalidArgument, NotFound
from elastico.hardware import GPU_MEMORY_GIB
from elastico.model import check_mps_percentage
from elastico.nodeagent.gpu_models import mig_table_model, simulated_model_names
from elastico.mig import MigGpu, mig_profile
from elastico.perf.activity import ActivityProfile, Resident, combine

__all__ = [
    "BackendUnavailable",
    "GpuInfo",
    "MpsLimits",
    "MigDevice",
    "ProcessUsage",
    "ActivityReading",
    "DCGM_SM_ACTIVE",
    "DCGM_DRAM_ACTIVE",
    "GpuBackend",
    "pinned_mem_amount",
    "pinned_mem_limit_env",
    "SimulatedGpuBackend",
    "NvmlGpuBackend",
    "DcgmProfiling",
    "TELEMETRY_KEYS",
    "backend_from_env",
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
    "pcie_rx_gbs",                  # nvmlDeviceGetPcieThroughput(RX_BYTES) (KB/s) / 1e6
    "pcie_tx_gbs",                  # nvmlDeviceGetPcieThroughput(TX_BYTES) (KB/s) / 1e6
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
    def mig_model(self) -> str | None:
        """Key of the GPU's MIG table (:func:`elastico.nodeagent.gpu_models.mig_table_model`),
        None when ElastiCo has none for it."""
        return mig_table_model(self.model, self.memory_total_gib)


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance on GPU ``gpu_index``: GPU instance of ``profile`` at memory slice
    ``start`` with its full-size compute instance (``has_ci``); ``uuid`` the MIG device UUID
    (``MIG-...``, empty while it has no compute instance); ``busy``: a CUDA process (or, in the
    simulated backend, a test) uses it."""

    gpu_index: int
    profile: str
    start: int
    uuid: str
    busy: bool = False
    has_ci: bool = True


@dataclass(frozen=True)
class MpsLimits:
    """A client's MPS limits: ``active_thread_percentage`` (a whole number in 1..100) of each
    GPU's SMs and ``pinned_mem_limit_gib`` (GiB) per GPU in ``gpu_indices``."""

    client_id: str
    gpu_indices: tuple[int, ...]
    active_thread_percentage: float
    pinned_mem_limit_gib: float


#: DCGM profiling field ids (DCGM user guide, "Profiling Metrics"; dcgm_fields.py):
#: SM activity and DRAM activity, fractions of time.
DCGM_SM_ACTIVE = 1002
DCGM_DRAM_ACTIVE = 1005


@dataclass(frozen=True)
class ProcessUsage:
    """One CUDA process (one MPS client) on a unit: ``pid``; ``sm_util``: NVML's per-process
    SM utilisation over the last sample period as a fraction (``smUtil`` / 100: the share of
    time a kernel of the process ran; None when NVML does not report it, e.g. on a MIG
    device); ``mem_gib``: its GPU memory, GiB (``usedGpuMemory`` / 2^30; None when NVML
    withholds it)."""

    pid: int
    sm_util: float | None
    mem_gib: float | None


@dataclass(frozen=True)
class ActivityReading:
    """One sample of one unit of GPU ``gpu_index``: the whole GPU (``mig_start`` None) or the
    MIG instance of ``mig_profile`` at ``mig_start``.  ``processes``: by pid.
    ``sm_active`` / ``dram_active``: DCGM 1002 / 1005 of the unit, fractions in [0, 1] (None:
    DCGM profiling unavailable).  ``pcie_rx_gbs`` / ``pcie_tx_gbs``: GB/s (None on a MIG
    instance or where NVML does not report it)."""

    gpu_index: int
    mig_start: int | None = None
    mig_profile: str | None = None
    processes: tuple[ProcessUsage, ...] = ()
    sm_active: float | None = None
    dram_active: float | None = None
    pcie_rx_gbs: float | None = None
    pcie_tx_gbs: float | None = None

    @property
    def mem_gib(self) -> float | None:
        """Memory of all its processes, GiB (None when any withholds it)."""
        vals = [p.mem_gib for p in self.processes]
        return None if any(v is None for v in vals) else float(sum(vals))  # type: ignore[arg-type]

    @property
    def sm_util(self) -> float | None:
        """NVML SM utilisation of its processes together, capped at 1 (None when any is
        unreported)."""
        vals = [p.sm_util for p in self.processes]
        return None if any(v is None for v in vals) else min(1.0, float(sum(vals)))  # type: ignore[arg-type]


@runtime_checkable
class GpuBackend(Protocol):
    """What the node agent needs from the GPUs (one contract test suite runs against every
    implementation: tests/test_gpu_backend.py)."""

    def list_gpus(self) -> list[GpuInfo]: ...

    def telemetry(self, index: int) -> dict[str, float]:
        """Readings named in :data:`TELEMETRY_KEYS` (unit in the key)."""
        ...

    def activity(self, index: int) -> list[ActivityReading]:
        """One :class:`ActivityReading` per unit of GPU ``index`` (the GPU, or each MIG
        instance by start); NotFound for an index not on the node."""
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

    def mig_devices(self, index: int) -> list[MigDevice]:
        """The MIG instances of GPU ``index`` by start (empty unless it is in MIG mode)."""
        ...

    def create_mig_instance(self, index: int, profile: str, start: int) -> MigDevice:
        """GPU instance of ``profile`` at ``start`` plus its full-size compute instance on GPU
        ``index``; InvalidArgument for a profile or start the GPU's model lacks, Infeasible when
        the slices are taken."""
        ...

    def destroy_mig_instance(self, index: int, start: int) -> None:
        """Destroys the compute instance and the GPU instance at ``start`` on GPU ``index``;
        NotFound when none starts there, Infeasible when it is busy."""
        ...

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """GPU ``index`` to MIG mode (``enabled``) or normal mode; Infeasible while MIG
        instances exist (the driver refuses it too)."""
        ...

    def wait_health_event(self, timeout_s: float) -> bool:
        """Blocks up to ``timeout_s`` s for an event that may change a GPU's health; True when
        one came (``list_gpus()`` shows its effect)."""
        ...

    def close(self) -> None: ...


def pinned_mem_amount(gib: float) -> str:
    """An MPS pinned device memory amount (``<n>G`` / ``<n>M``, as the environment variable and
    the control daemon's ``set_default_device_pinned_mem_limit`` take it): whole GiB in G
    (``16G``); a fraction in whole MiB, rounded down so the limit never exceeds the booking
    (2.5 GiB -> ``2560M``).  InvalidArgument unless ``gib`` is finite and > 0."""
    if not (isinstance(gib, (int, float)) and math.isfinite(gib) and gib > 0):
        raise InvalidArgument("pinned_mem_limit_gib", gib, "GiB > 0")
    return f"{int(gib)}G" if float(gib).is_integer() else f"{int(gib * 1024)}M"


def pinned_mem_limit_env(gib: float, devices: int) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for ``devices`` visible devices with ``gib`` GiB
    each: NVIDIA's ``<device ordinal>=<amount><unit>`` list (MPS docs, "Environment Variables":
    e.g. ``0=1G,1=2G``; amounts by :func:`pinned_mem_amount`), ordinals 0..devices-1 as the
    container enumerates them."""
    amount = pinned_mem_amount(gib)
    if devices < 1:
        raise InvalidArgument("devices", devices, ">= 1")
    return ",".join(f"{i}={amount}" for i in range(devices))


class _MpsBook:
    """Per-client MPS limits, validated against the GPUs (shared by both backends)."""

    def __init__(self) -> None:
        self._limits: dict[str, MpsLimits] = {}

    def set(self, gpus: Sequence[GpuInfo], client_id, pct, mem_gib, gpu_indices) -> MpsLimits:
        if not isinstance(client_id, str) or not client_id:
            raise InvalidArgument("client_id", client_id, "a non-empty string")
        # whole percent only (elastico.model.check_mps_percentage): MPS enforces nothing
        # finer, so 99.1 would be booked as one thing and enforced as another
        pct = check_mps_percentage(pct, "active_thread_percentage")
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
        (:func:`pinned_mem_limit_env`, e.g. ``"0=4G,1=4G"``)."""
        lim = self.get(client_id)
        return {
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": f"{lim.active_thread_percentage:g}",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": pinned_mem_limit_env(lim.pinned_mem_limit_gib,
                                                                     len(lim.gpu_indices)),
        }

    def clients(self) -> list[str]:
        return sorted(self._limits)


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


@dataclass(frozen=True)
class _SimProcess:
    profile: ActivityProfile
    mem_gib: float
    mig_start: int | None
    mps_share: float | None
    pcie_rx_gbs: float
    pcie_tx_gbs: float

    def resident(self) -> Resident:
        p = self.profile
        level = p.level if self.mps_share is None else min(p.level, self.mps_share)
        scale = level / p.level if p.level > 0 else 0.0
        return Resident(level, p.dram_level * scale, p.compute, p.kernel)


class SimulatedGpuBackend(_MpsLimitsOf):
    """An in-memory backend over a fixed list of GPUs.  Telemetry defaults to an idle GPU and
    can be set with :meth:`set_telemetry` (tests, the simulator).  MIG instances live in one
    :class:`elastico.mig.MigGpu` per MIG-mode GPU, so only geometries the MIG tables
    allow can exist; their UUIDs are derived from the GPU UUID, profile and start (stable
    across runs).  Thread-safe (the device plugin, the health watcher and RPCs share it)."""

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
                "pcie_rx_gbs": 0.0,
                "pcie_tx_gbs": 0.0,
            }
            for g in gpus
        }
        self._mps = _MpsBook()
        self._lock = threading.Condition()
        self._procs: dict[int, dict[int, _SimProcess]] = {g.index: {} for g in gpus}
        self._health_events = 0
        self._mig: dict[int, MigGpu] = {}
        self._busy: dict[tuple[int, int], bool] = {}
        for g in gpus:
            if g.mig_mode:
                self._mig[g.index] = self._new_mig(g)

    @classmethod
    def from_spec(cls, spec: Any) -> "SimulatedGpuBackend":
        """A backend from a plain inventory spec (what ``ELASTICO_SIMULATED_GPUS`` holds as
        JSON): either an int ``n`` (n idle "A100-40GB" GPUs) or a list of objects with
        ``model`` (one of :func:`~elastico.nodeagent.gpu_models.simulated_model_names`,
        exactly), ``memory_gib`` (GiB > 0) and optional ``uuid``, ``mig_mode``,
        ``healthy``; indices follow list order.  InvalidArgument names the bad entry."""
        if isinstance(spec, int) and not isinstance(spec, bool):
            if not 1 <= spec <= 64:
                raise InvalidArgument("simulated_gpus", spec, "a GPU count in 1..64 or a list")
            spec = [{"model": "A100-40GB", "memory_gib": GPU_MEMORY_GIB["A100-40GB"]}] * spec
        if not isinstance(spec, list) or not spec:
            raise InvalidArgument("simulated_gpus", spec, "a GPU count or a non-empty list of "
                                  "{model, memory_gib[, uuid, mig_mode, healthy]}")
        gpus = []
        allowed = {"model", "memory_gib", "uuid", "mig_mode", "healthy"}
        known = simulated_model_names()
        for i, item in enumerate(spec):
            if not isinstance(item, dict) or set(item) - allowed or "model" not in item:
                raise InvalidArgument(f"simulated_gpus[{i}]", item,
                                      f"an object with model, memory_gib and optional keys of {sorted(allowed)}")
            if item["model"] not in known:
                raise InvalidArgument(f"simulated_gpus[{i}].model", item["model"],
                                      f"one of {', '.join(known)} (exact names)")
            mem = item.get("memory_gib")
            if isinstance(mem, bool) or not isinstance(mem, (int, float)):
                raise InvalidArgument(f"simulated_gpus[{i}].memory_gib", mem, "GiB > 0")
            for k in ("mig_mode", "healthy"):
                if not isinstance(item.get(k, False), bool):
                    raise InvalidArgument(f"simulated_gpus[{i}].{k}", item[k], "true or false")
            uid = item.get("uuid") or f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_OID, f'elastico-sim-{i}')}"
            gpus.append(GpuInfo(i, str(uid), str(item["model"]), float(mem),
                                item.get("healthy", True), item.get("mig_mode", False)))
        for g in gpus:
            if g.mig_mode and g.mig_model is None:
                raise InvalidArgument(f"simulated_gpus[{g.index}].model", g.model,
                                      "a MIG-capable model when mig_mode is true")
        return cls(gpus)

    @staticmethod
    def _new_mig(g: GpuInfo) -> MigGpu:
        if g.mig_model is None:
            raise InvalidArgument(f"gpus[{g.index}].model", g.model, "a model with a MIG table (mig_mode)")
        return MigGpu(g.mig_model)

    def _gpu(self, index: int) -> GpuInfo:
        try:
            return self._gpus[index]
        except KeyError:
            raise NotFound(f"gpu index {index}: not on this node (have {sorted(self._gpus)})") from None

    def list_gpus(self) -> list[GpuInfo]:
        with self._lock:
            return [self._gpus[i] for i in sorted(self._gpus)]

    def telemetry(self, index: int) -> dict[str, float]:
        with self._lock:
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

    # --- activity ------------------------------------------------------------------------
    def run_process(self, index: int, pid: int, profile: ActivityProfile, mem_gib: float = 0.0,
                    *, mig_start: int | None = None, mps_share: float | None = None,
                    pcie_rx_gbs: float = 0.0, pcie_tx_gbs: float = 0.0) -> None:
        """Starts simulated CUDA process ``pid`` on GPU ``index`` (in the MIG instance at
        ``mig_start`` on a MIG-mode GPU, required there), doing what ``profile``
        (:class:`elastico.perf.activity.ActivityProfile`, its activity alone on the device it
        sees) says, holding ``mem_gib`` GiB and moving ``pcie_*_gbs`` GB/s.  ``mps_share``: its
        MPS active thread percentage / 100, which caps the SMs it holds (MPS docs).
        InvalidArgument for a bad value, a pid already running, or a MIG start with no
        instance."""
        if not isinstance(profile, ActivityProfile):
            raise InvalidArgument("profile", type(profile).__name__, "an ActivityProfile")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
            raise InvalidArgument("pid", pid, "a process id >= 1")
        for name, v in (("mem_gib", mem_gib), ("pcie_rx_gbs", pcie_rx_gbs), ("pcie_tx_gbs", pcie_tx_gbs)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidArgument(name, v, "a finite number >= 0")
        if mps_share is not None and not (isinstance(mps_share, (int, float)) and 0 < mps_share <= 1):
            raise InvalidArgument("mps_share", mps_share, "a fraction in (0, 1] or None")
        with self._lock:
            g = self._gpu(index)
            if mem_gib > g.memory_total_gib:
                raise InvalidArgument("mem_gib", mem_gib, f"<= the GPU's {g.memory_total_gib:g} GiB")
            if any(pid in procs for procs in self._procs.values()):
                raise InvalidArgument("pid", pid, "a pid not already running")
            if g.mig_mode:
                if mig_start not in self._mig[index].instances:
                    raise InvalidArgument("mig_start", mig_start,
                                          f"the start of a MIG instance of GPU {index} "
                                          f"{sorted(self._mig[index].instances)}")
                if mps_share is not None:
                    raise InvalidArgument("mps_share", mps_share, "None on a MIG instance")
            elif mig_start is not None:
                raise InvalidArgument("mig_start", mig_start, "None on a GPU not in MIG mode")
            self._procs[index][pid] = _SimProcess(profile, float(mem_gib), mig_start, mps_share,
                                                  float(pcie_rx_gbs), float(pcie_tx_gbs))

    def end_process(self, index: int, pid: int) -> None:
        """Ends simulated process ``pid`` on GPU ``index``; NotFound when it is not running."""
        with self._lock:
            self._gpu(index)
            if self._procs[index].pop(pid, None) is None:
                raise NotFound(f"gpu {index}: no simulated process {pid}")

    def activity(self, index: int) -> list[ActivityReading]:
        """Readings from the running processes' activity profiles: per process ``sm_util`` =
        its kernel time (NVML counts a sample period in which a kernel of the process ran) and
        its memory; per unit ``sm_active`` / ``dram_active`` =
        :func:`elastico.perf.activity.combine` of its processes under MPS rules (MPS clients,
        or one job alone; a MIG instance's processes share it the same way), each process's
        SM level capped at its MPS share with its DRAM level scaled alike (as
        :mod:`elastico.sim.utilisation` does); PCIe = the sum of the processes' (whole GPUs).
        The simulated GPU knows no slowdowns: co-located processes keep their solo time
        fractions (a measurement would see them stretched)."""
        with self._lock:
            g = self._gpu(index)
            procs = dict(self._procs[index])
            units = ([(s, p) for s, p in sorted(self._mig[index].instances.items())]
                     if g.mig_mode else [(None, None)])
        out = []
        for start, prof in units:
            mine = sorted((pid, x) for pid, x in procs.items() if x.mig_start == start)
            residents = [x.resident() for _pid, x in mine]
            act = combine(residents, "mps")
            whole = start is None
            out.append(ActivityReading(
                index, start, prof,
                tuple(ProcessUsage(pid, x.profile.gpu_util(), x.mem_gib) for pid, x in mine),
                act.sm_active, act.dram_active,
                float(sum(x.pcie_rx_gbs for _p, x in mine)) if whole else None,
                float(sum(x.pcie_tx_gbs for _p, x in mine)) if whole else None))
        return out

    def set_health(self, index: int, healthy: bool) -> None:
        """Marks GPU ``index`` healthy or not (as an XID would) and wakes health waiters."""
        with self._lock:
            self._gpus[index] = replace(self._gpu(index), healthy=bool(healthy))
            self._health_events += 1
            self._lock.notify_all()

    def wait_health_event(self, timeout_s: float) -> bool:
        with self._lock:
            seen = self._health_events
            return self._lock.wait_for(lambda: self._health_events != seen, timeout=max(0.0, timeout_s))

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """Enables or disables MIG mode; refused (Infeasible) while instances exist, as the
        driver refuses it."""
        with self._lock:
            g = self._gpu(index)
            if g.mig_mode == bool(enabled):
                return
            if not enabled and not self._mig[index].empty:
                raise Infeasible(f"gpu {index}: MIG instances exist ({self._mig[index].instances}); "
                                 "destroy them before disabling MIG mode")
            new = replace(g, mig_mode=bool(enabled))
            if enabled:
                self._mig[index] = self._new_mig(new)
            else:
                del self._mig[index]
            self._gpus[index] = new

    def _mig_gpu(self, index: int) -> MigGpu:
        g = self._gpu(index)
        if not g.mig_mode:
            raise InvalidArgument("gpu_index", index, "a GPU in MIG mode")
        return self._mig[index]

    def _device(self, index: int, profile: str, start: int) -> MigDevice:
        uid = uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{self._gpus[index].uuid}/{profile}@{start}")
        return MigDevice(index, profile, start, f"MIG-{uid}", self._busy.get((index, start), False))

    def mig_devices(self, index: int) -> list[MigDevice]:
        with self._lock:
            if not self._gpu(index).mig_mode:
                return []
            return [self._device(index, p, s) for s, p in self._mig[index].instances.items()]

    def create_mig_instance(self, index: int, profile: str, start: int) -> MigDevice:
        with self._lock:
            mig = self._mig_gpu(index)
            mig_profile(mig.gpu_model, profile)  # InvalidArgument naming the valid profiles
            mig.place(profile, start)            # Infeasible when the slices are taken
            return self._device(index, profile, start)

    def destroy_mig_instance(self, index: int, start: int) -> None:
        with self._lock:
            mig = self._mig_gpu(index)
            if start not in mig.instances:
                raise NotFound(f"gpu {index}: no MIG instance starts at slot {start} ({mig.instances})")
            if self._busy.get((index, start)):
                raise Infeasible(f"gpu {index}: MIG instance at slot {start} is busy")
            mig.release(start)

    def set_mig_busy(self, index: int, start: int, busy: bool) -> None:
        """Marks the MIG instance at ``start`` busy (a CUDA process runs in it) or idle."""
        with self._lock:
            if start not in self._mig_gpu(index).instances:
                raise NotFound(f"gpu {index}: no MIG instance starts at slot {start}")
            self._busy[(index, start)] = bool(busy)

    def close(self) -> None:
        pass


def _unavailable(reason: str) -> BackendUnavailable:
    return BackendUnavailable(
        f"NVML is not available: {reason}; install the NVIDIA driver / nvidia-ml-py "
        "or use the simulated backend"
    )


class DcgmProfiling:
    """DCGM profiling fields 1002 (``DCGM_FI_PROF_SM_ACTIVE``) and 1005
    (``DCGM_FI_PROF_DRAM_ACTIVE``) per GPU, through DCGM's python bindings (``DcgmReader``
    and ``dcgm_fields``, shipped with DCGM under ``/usr/local/dcgm/bindings/python3``) when they
    import and a host engine answers; otherwise :attr:`reason` says why and :meth:`read`
    returns ``(None, None)``: the fields are reported unavailable, never estimated from
    other counters.  MIG instances: DCGM reports profiling fields per GPU-instance entity; this
    reader watches GPU entities only, so an instance reads ``(None, None)`` (not yet read)."""

    def __init__(self, update_us: int = 1_000_000) -> None:
        self.reason = ""
        self._reader: Any = None
        try:
            from DcgmReader import DcgmReader  # type: ignore[import-not-found]  # noqa: PLC0415
        except Exception as e:  # not installed, or a broken install: unavailable, said why
            self.reason = f"DCGM python bindings not importable ({type(e).__name__}: {e})"
            return
        try:
            self._reader = DcgmReader(fieldIds=[DCGM_SM_ACTIVE, DCGM_DRAM_ACTIVE],
                                      updateFrequency=int(update_us))
        except Exception as e:
            self.reason = f"DCGM host engine not reachable ({type(e).__name__}: {e})"

    @property
    def available(self) -> bool:
        return self._reader is not None

    def read(self, gpu_index: int, mig_start: int | None = None) -> tuple[float | None, float | None]:
        """(SM activity, DRAM activity) of GPU ``gpu_index``, fractions, or None each where
        DCGM does not give a finite value in [0, 1]; ``(None, None)`` for a MIG instance."""
        if self._reader is None or mig_start is not None:
            return None, None
        try:
            data = self._reader.GetLatestGpuValuesAsFieldIdDict()
            vals = data.get(gpu_index, {})
        except Exception:
            return None, None

        def ok(v: Any) -> float | None:
            try:
                f = float(v)
            except (TypeError, ValueError):
                return None
            return f if math.isfinite(f) and 0.0 <= f <= 1.0 else None

        return ok(vals.get(DCGM_SM_ACTIVE)), ok(vals.get(DCGM_DRAM_ACTIVE))


#: XIDs that an application causes (NVIDIA k8s-device-plugin's list: 13 graphics engine
#: exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup,
#: 68 video processor exception, 109 context switch timeout): they do not make the GPU unhealthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class NvmlGpuBackend(_MpsLimitsOf):
    """GPUs read through NVML (``pynvml`` from the ``nvidia-ml-py`` package, imported here,
    lazily).  Raises :class:`BackendUnavailable` (never crashes) when pynvml is missing or
    ``nvmlInit`` fails; NVML errors on a query of one GPU mark it unhealthy / raise
    BackendUnavailable naming the call.

    Health: a GPU turns unhealthy on a critical XID event other than
    :data:`APPLICATION_XIDS`, on a double-bit ECC event, or when its volatile uncorrected ECC
    count grows; it stays so until the agent restarts (the NVIDIA device plugin's rule).
    MIG: profiles are matched by the name NVML gives each GPU-instance profile ("MIG 1g.10gb")
    against :mod:`elastico.mig`; instances are created at an explicit placement
    (``nvmlDeviceCreateGpuInstanceWithPlacement``) with one compute instance over all the
    GI's SM slices."""

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
        self._lock = threading.Lock()
        self._unhealthy: dict[int, str] = {}   # index -> why
        self._ecc_seen: dict[int, int] = {}
        self._events: Any = None
        self._last_seen: dict[tuple[int, int | None], int] = {}  # unit -> last sample timestamp (us)
        self._dcgm: DcgmProfiling | None = None

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise BackendUnavailable(f"NVML call {what} failed: {type(e).__name__}: {e}") from None

    def _count(self) -> int:
        return self._call("nvmlDeviceGetCount", self._nvml.nvmlDeviceGetCount)

    def _handle_at(self, index: int):
        """The handle of GPU ``index``, known to be in range."""
        return self._call("nvmlDeviceGetHandleByIndex", self._nvml.nvmlDeviceGetHandleByIndex, index)

    def _handle(self, index: int):
        count = self._count()
        if not (isinstance(index, int) and 0 <= index < count):
            raise NotFound(f"gpu index {index}: not on this node (have 0..{count - 1})")
        return self._handle_at(index)

    @staticmethod
    def _text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def list_gpus(self) -> list[GpuInfo]:
        return [self._gpu_info(i, self._handle_at(i)) for i in range(self._count())]

    def _gpu_info(self, i: int, h) -> GpuInfo:
        """GPU ``i`` (handle ``h``) as :meth:`list_gpus` lists it; reads its ECC count too."""
        nv = self._nvml
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
        self._check_ecc(i, h)
        with self._lock:
            healthy = healthy and i not in self._unhealthy
        return GpuInfo(i, uuid, name, float(total), healthy, mig)

    def unhealthy_reasons(self) -> dict[int, str]:
        """GPU index -> why it was marked unhealthy (XID number or ECC count)."""
        with self._lock:
            return dict(self._unhealthy)

    def _check_ecc(self, index: int, h) -> None:
        nv = self._nvml
        try:
            n = int(nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                   nv.NVML_VOLATILE_ECC))
        except Exception:  # ECC off or not supported (consumer boards): nothing to read
            return
        with self._lock:
            before = self._ecc_seen.setdefault(index, n)
            if n > before:
                self._unhealthy.setdefault(index, f"volatile uncorrected ECC errors {before} -> {n}")

    def wait_health_event(self, timeout_s: float) -> bool:
        nv = self._nvml
        if self._events is None:
            try:
                events = nv.nvmlEventSetCreate()
                for i in range(nv.nvmlDeviceGetCount()):
                    try:
                        nv.nvmlDeviceRegisterEvents(
                            self._handle_at(i),
                            nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError,
                            events)
                    except Exception:  # event type not supported on this GPU: ECC polling only
                        pass
                self._events = events
            except Exception:
                self._events = False  # no event API: callers still poll list_gpus()
        if self._events is False:
            threading.Event().wait(max(0.0, timeout_s))
            return False
        try:
            data = nv.nvmlEventSetWait(self._events, int(max(0.0, timeout_s) * 1000))
        except Exception:  # NVML_ERROR_TIMEOUT, or an interrupted wait
            return False
        xid = int(getattr(data, "eventData", 0))
        etype = int(getattr(data, "eventType", 0))
        if etype == nv.nvmlEventTypeXidCriticalError and xid in APPLICATION_XIDS:
            return False
        try:
            index = int(nv.nvmlDeviceGetIndex(data.device))
        except Exception:
            return False
        why = f"XID {xid}" if etype == nv.nvmlEventTypeXidCriticalError else "double-bit ECC error"
        with self._lock:
            self._unhealthy.setdefault(index, why)
        return True

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
        }
        for key, fn in (
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temperature_c", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
            ("sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ("pcie_rx_gbs", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) / 1e6),
            ("pcie_tx_gbs", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) / 1e6),
        ):
            try:  # optional readings: NaN where the GPU does not report them
                out[key] = float(fn())
            except Exception:
                out[key] = math.nan
        return out

    # --- activity ----------------------------------------------------------------------
    def activity(self, index: int) -> list[ActivityReading]:
        """NVML (and DCGM where it imports) readings of GPU ``index``'s units (module
        docstring).  Per unit: ``nvmlDeviceGetComputeRunningProcesses`` (pids, memory),
        ``nvmlDeviceGetProcessUtilization`` with the last timestamp seen on that unit (samples
        newer than the previous call; a process with no sample since -- or the call's
        ``NVML_ERROR_NOT_FOUND``, "no sample entries" -- ran no kernel: 0; any other error, such
        as NOT_SUPPORTED on MIG devices: None), ``nvmlDeviceGetPcieThroughput`` (KB/s / 1e6,
        whole GPUs), DCGM 1002/1005 (:class:`DcgmProfiling`; None where unavailable).  Raises
        NotFound for an index not on the node, BackendUnavailable naming the NVML call that
        failed for the process list."""
        nv = self._nvml
        h = self._handle(index)
        try:
            mig = bool(nv.nvmlDeviceGetMigMode(h)[0])
        except Exception:
            mig = False
        if self._dcgm is None:
            self._dcgm = DcgmProfiling()
        units: list[tuple[int | None, str | None, Any]] = []
        if mig:
            handles = self._mig_handles(h)
            for _name, _gi, info in self._gpu_instances(h):
                mh = handles.get(int(info.id))
                if mh is not None:
                    units.append((int(info.placement.start), _name, mh))
            units.sort(key=lambda u: u[0])
        else:
            units.append((None, None, h))
        out = []
        for start, prof, uh in units:
            running = self._call("nvmlDeviceGetComputeRunningProcesses",
                                 nv.nvmlDeviceGetComputeRunningProcesses, uh)
            util = self._process_util(index, start, uh)
            procs = []
            for pr in sorted(running, key=lambda p: int(p.pid)):
                used = getattr(pr, "usedGpuMemory", None)
                mem = None if used is None else float(used) / _GIB
                su = None if util is None else util.get(int(pr.pid), 0.0)
                procs.append(ProcessUsage(int(pr.pid), su, mem))
            sm, dram = self._dcgm.read(index, start)
            rx = tx = None
            if start is None:
                rx = self._optional(lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) / 1e6)
                tx = self._optional(lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) / 1e6)
            out.append(ActivityReading(index, start, prof, tuple(procs), sm, dram, rx, tx))
        return out

    @staticmethod
    def _optional(fn) -> float | None:
        try:
            v = float(fn())
        except Exception:
            return None
        return v if math.isfinite(v) else None

    def _process_util(self, index: int, start: int | None, uh) -> dict[int, float] | None:
        """pid -> mean ``smUtil`` / 100 of the samples newer than the unit's last call; {} for
        NVML_ERROR_NOT_FOUND (none); None when NVML cannot report it on this unit."""
        nv = self._nvml
        key = (index, start)
        last = self._last_seen.get(key, 0)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(uh, last)
        except Exception as e:
            not_found = getattr(nv, "NVML_ERROR_NOT_FOUND", None)
            if not_found is not None and getattr(e, "value", None) == not_found:
                return {}
            return None
        sums: dict[int, list[float]] = {}
        for smp in samples or ():
            sums.setdefault(int(smp.pid), []).append(float(smp.smUtil) / 100.0)
            last = max(last, int(smp.timeStamp))
        self._last_seen[key] = last
        return {pid: min(1.0, max(0.0, sum(v) / len(v))) for pid, v in sums.items()}

    # --- MIG ---------------------------------------------------------------------------
    def _gi_profiles(self, h) -> dict[str, Any]:
        """Our profile name -> NVML GPU-instance profile info, for the profiles this GPU has."""
        nv = self._nvml
        out: dict[str, Any] = {}
        for p in range(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))):
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except Exception:  # NOT_SUPPORTED on this model
                continue
            name = self._text(getattr(info, "name", b"")).removeprefix("MIG ").strip()
            if name:
                out[name] = info
        return out

    def _gpu_instances(self, h) -> list[tuple[str, Any, Any]]:
        """(profile name, GI handle, GI info) of every GPU instance of GPU ``h``."""
        import ctypes  # noqa: PLC0415 - only NVML needs ctypes arrays

        nv = self._nvml
        out = []
        for name, info in self._gi_profiles(h).items():
            arr = (nv.c_nvmlGpuInstance_t * max(1, int(info.instanceCount)))()
            count = ctypes.c_uint(0)
            try:
                nv.nvmlDeviceGetGpuInstances(h, info.id, arr, ctypes.byref(count))
            except Exception:
                continue
            for k in range(count.value):
                out.append((name, arr[k], nv.nvmlGpuInstanceGetInfo(arr[k])))
        return out

    def _compute_instances(self, gi) -> list[Any]:
        import ctypes  # noqa: PLC0415

        nv = self._nvml
        out = []
        for p in range(int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 0))):
            arr = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            try:
                nv.nvmlGpuInstanceGetComputeInstances(gi, p, arr, ctypes.byref(count))
            except Exception:
                continue
            out.extend(arr[k] for k in range(count.value))
        return out

    def _mig_handles(self, h) -> dict[int, Any]:
        """GPU-instance id -> MIG device handle (exists once the GI has a compute instance)."""
        nv = self._nvml
        out: dict[int, Any] = {}
        try:
            n = nv.nvmlDeviceGetMaxMigDeviceCount(h)
        except Exception:
            return out
        for k in range(n):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                out[int(nv.nvmlDeviceGetGpuInstanceId(mh))] = mh
            except Exception:  # NOT_FOUND: no MIG device at this index
                continue
        return out

    def mig_devices(self, index: int) -> list[MigDevice]:
        return self._mig_devices(index, self._handle(index))

    def _mig_devices(self, index: int, h) -> list[MigDevice]:
        nv = self._nvml
        try:
            if not nv.nvmlDeviceGetMigMode(h)[0]:
                return []
        except Exception:
            return []
        handles = self._mig_handles(h)
        out = []
        for name, gi, info in self._gpu_instances(h):
            mh = handles.get(int(info.id))
            uuid, busy = "", False
            if mh is not None:
                uuid = self._text(self._call("nvmlDeviceGetUUID", nv.nvmlDeviceGetUUID, mh))
                try:
                    busy = bool(nv.nvmlDeviceGetComputeRunningProcesses(mh))
                except Exception:
                    busy = False
            out.append(MigDevice(index, name, int(info.placement.start), uuid, busy,
                                 bool(self._compute_instances(gi))))
        return sorted(out, key=lambda d: d.start)

    def create_mig_instance(self, index: int, profile: str, start: int) -> MigDevice:
        nv = self._nvml
        h = self._handle(index)
        g = self._gpu_info(index, h)
        if not g.mig_mode or g.mig_model is None:
            raise InvalidArgument("gpu_index", index, "a GPU in MIG mode with a MIG table")
        p = mig_profile(g.mig_model, profile)
        if start not in p.starts:
            raise InvalidArgument("start_slot", start, f"a valid start of {profile} {list(p.starts)}")
        info = self._gi_profiles(h).get(profile)
        if info is None:
            raise InvalidArgument("mig_profile", profile, f"a profile NVML offers on GPU {index}")
        placement = nv.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, p.memory_slices
        try:
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, placement)
        except Exception as e:
            raise Infeasible(f"gpu {index}: cannot create {profile} at slot {start}: {e}") from None
        ci_profile = {1: "1_SLICE", 2: "2_SLICE", 3: "3_SLICE", 4: "4_SLICE", 7: "7_SLICE",
                      8: "8_SLICE", 6: "6_SLICE"}[p.compute_slices]
        try:
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, getattr(nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{ci_profile}"),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except Exception as e:
            try:  # leave no half-made instance behind
                nv.nvmlGpuInstanceDestroy(gi)
            except Exception:
                pass
            raise Infeasible(f"gpu {index}: cannot create the compute instance of {profile} "
                             f"at slot {start}: {e}") from None
        for d in self._mig_devices(index, h):
            if d.start == start:
                return d
        raise BackendUnavailable(f"gpu {index}: {profile} at slot {start} was created but NVML does not list it")

    def destroy_mig_instance(self, index: int, start: int) -> None:
        nv = self._nvml
        h = self._handle(index)
        for d in self._mig_devices(index, h):
            if d.start == start and d.busy:
                raise Infeasible(f"gpu {index}: MIG instance at slot {start} is busy")
        for _name, gi, info in self._gpu_instances(h):
            if int(info.placement.start) != start:
                continue
            for ci in self._compute_instances(gi):
                self._call("nvmlComputeInstanceDestroy", nv.nvmlComputeInstanceDestroy, ci)
            self._call("nvmlGpuInstanceDestroy", nv.nvmlGpuInstanceDestroy, gi)
            return
        raise NotFound(f"gpu {index}: no MIG instance starts at slot {start}")

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """``nvmlDeviceSetMigMode``, then ``nvmlDeviceGetMigMode`` to see it took effect.  NVML
        resets the (idle) GPU itself to activate the mode where it can; where it cannot -- a
        pass-through VM (activation status ``NVML_ERROR_RESET_REQUIRED``), a GPU not idle
        (``NVML_ERROR_IN_USE``) -- the mode stays *pending* (NVML documentation of
        ``nvmlDeviceSetMigMode``): Infeasible (FAILED_PRECONDITION) naming the current and
        pending mode and the activation status, so that no pod is handed a GPU in the mode its
        booking does not need.  The agent never resets a GPU itself."""
        nv = self._nvml
        h = self._handle(index)
        status = self._call("nvmlDeviceSetMigMode", nv.nvmlDeviceSetMigMode, h,
                            nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE)
        current, pending = self._call("nvmlDeviceGetMigMode", nv.nvmlDeviceGetMigMode, h)
        if bool(current) != bool(enabled):
            raise Infeasible(
                f"gpu {index}: MIG mode {'on' if enabled else 'off'} asked, but NVML reports it "
                f"{'on' if current else 'off'} now and {'on' if pending else 'off'} pending "
                f"(activation status {status}): the change needs a GPU reset "
                f"(nvidia-smi -r -i {index}, or a VM reboot under pass-through), which the "
                "agent does not do")

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                if self._events:
                    self._nvml.nvmlEventSetFree(self._events)
            except Exception:
                pass
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass


def backend_from_env(env: Mapping[str, str]) -> GpuBackend:
    """The backend the environment asks for: ``ELASTICO_GPU_BACKEND=simulated`` -> a
    :class:`SimulatedGpuBackend` from ``ELASTICO_SIMULATED_GPUS`` (JSON: a GPU count or a list,
    :meth:`SimulatedGpuBackend.from_spec`; default 2 idle A100-40GB); ``nvml`` or unset ->
    :class:`NvmlGpuBackend` (BackendUnavailable, with the reason, where no NVIDIA driver is)."""
    kind = (env.get("ELASTICO_GPU_BACKEND") or "nvml").strip().lower()
    if kind == "simulated":
        raw = env.get("ELASTICO_SIMULATED_GPUS") or "2"
        try:
            spec = json.loads(raw)
        except ValueError as e:
            raise InvalidArgument("ELASTICO_SIMULATED_GPUS", raw, f"JSON: a GPU count or a list ({e})") from None
        return SimulatedGpuBackend.from_spec(spec)
    if kind == "nvml":
        return NvmlGpuBackend()
    raise InvalidArgument("ELASTICO_GPU_BACKEND", kind, "nvml or simulated")
