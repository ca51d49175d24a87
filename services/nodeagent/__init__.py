"""elastico.nodeagent — the DaemonSet agent on every GPU node.

Who calls it: the placer (through NodeAgentService, later) and the kubelet (device plugin).
Whom it calls: the GPUs through a :class:`GpuBackend` — NVML (:class:`NvmlGpuBackend`) on a
real node, :class:`SimulatedGpuBackend` in tests and the simulator.
"""

from elastico.nodeagent.backend import (
    TELEMETRY_KEYS,
    BackendUnavailable,
    GpuBackend,
    GpuInfo,
    MpsLimits,
    NvmlGpuBackend,
    SimulatedGpuBackend,
)

__all__ = [
    "BackendUnavailable",
    "GpuInfo",
    "MpsLimits",
    "GpuBackend",
    "SimulatedGpuBackend",
    "NvmlGpuBackend",
    "TELEMETRY_KEYS",
]
