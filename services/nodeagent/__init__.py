"""elastico.nodeagent — the DaemonSet agent on every GPU node.

Who calls it: the placer (through NodeAgentService, :mod:`elastico.nodeagent.server`) and
kubelet (the device plugin, :mod:`elastico.nodeagent.kube.deviceplugin`); ``elastico nodeagent``
runs both.  Whom it calls: the GPUs through a :class:`GpuBackend` — NVML
(:class:`NvmlGpuBackend`) on a real node, :class:`SimulatedGpuBackend` in tests and the
simulator — the MPS control daemon (:mod:`elastico.nodeagent.mps`) and the Kubernetes API
(:mod:`elastico.nodeagent.kubeapi`).  docs/nodeagent.md has the whole picture.
"""

from elastico.nodeagent.backend import (
    TELEMETRY_KEYS,
    BackendUnavailable,
    GpuBackend,
    GpuInfo,
    MigDevice,
    MpsLimits,
    NvmlGpuBackend,
    SimulatedGpuBackend,
)

__all__ = [
    "BackendUnavailable",
    "GpuInfo",
    "MpsLimits",
    "MigDevice",
    "GpuBackend",
    "SimulatedGpuBackend",
    "NvmlGpuBackend",
    "TELEMETRY_KEYS",
]
