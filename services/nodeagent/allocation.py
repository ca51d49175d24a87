"""What the device plugin's Allocate hands a container: which pod it is for, and the devices,
mounts and environment that give it exactly the GPU share the placer decided.

kubelet's Allocate names only device IDs, never the pod.  The placer therefore keeps at most
ONE bound-but-unacknowledged ElastiCo pod per node, and Allocate identifies the pod by that
invariant (:func:`find_target`): the unique pod with ``spec.nodeName`` = this node,
``schedulerName`` ``elastico``, the decision annotations present, not being deleted, and a
container that requests :data:`~elastico.contract.GPU_RESOURCE` and is not yet acknowledged in
``elastico.io/allocated``.  Zero or several such pods -> the Allocate fails with the
candidates named; it never guesses by order.

The decision annotations (written by the placer before binding) and ``elastico.io/allocated``
(recorded here after a successful Allocate) are defined in :mod:`elastico.contract`.

Who calls it: :mod:`elastico.nodeagent.kube.deviceplugin`.  Whom it calls:
:mod:`elastico.nodeagent.backend` (GPU info, the MPS memory-limit format).  Pure: plain data in,
plain data out; no gRPC, no Kubernetes client, no clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from elastico.contract import (
    ALLOCATED, CONFIGURATION, GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT,
    MPS_ACTIVE_THREAD_PERCENTAGE, MPS_PINNED_MEM_LIMIT_GIB, PREDICTED_SLOWDOWN, ROUND_ID,
    SCHEDULER_NAME, TENSOR_PARALLEL, allocated_containers)
from elastico.errors import Infeasible, InvalidArgument
from elastico.model import check_mps_percentage
from elastico.nodeagent.backend import GpuInfo, pinned_mem_limit_env

__all__ = [
    "PodInfo", "Decision", "Mount", "DeviceSpec",
    "ContainerAllocation", "AllocationTarget", "parse_decision", "acknowledged", "find_target",
    "allocated_value", "build_allocation", "device_nodes",
]

_REQUIRED = (ROUND_ID, CONFIGURATION, GPU_UUIDS)


@dataclass(frozen=True)
class PodInfo:
    """The parts of a pod Allocate needs.  ``gpu_containers``: names of the containers that
    request :data:`~elastico.contract.GPU_RESOURCE`, init containers first, each in spec order
    (kubelet's allocation order); ``deleting``: ``metadata.deletionTimestamp`` is set; ``phase``:
    ``status.phase``."""

    namespace: str
    name: str
    uid: str
    node_name: str
    scheduler_name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    gpu_containers: tuple[str, ...] = ()
    deleting: bool = False
    phase: str = "Pending"
    #: the job's identity, the group key of its pods (:func:`elastico.contract.job_key`);
    #: "" = the pod is a job of its own
    job: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def job_key(self) -> str:
        """The job this pod belongs to: ``job``, else ``namespace/pod/name``."""
        return self.job or f"{self.namespace}/pod/{self.name}"


@dataclass(frozen=True)
class Decision:
    """The placer's decision for one pod, parsed from its annotations.  ``mig_profile`` and
    ``mig_start_slot`` both set or both None; ``mps_active_thread_percentage`` (1..100) and
    ``mps_pinned_mem_limit_gib`` (GiB per GPU) both set or both None; never MIG and MPS."""

    round_id: str
    configuration: str
    gpu_uuids: tuple[str, ...]
    mig_profile: str | None = None
    mig_start_slot: int | None = None
    mps_active_thread_percentage: int | None = None
    mps_pinned_mem_limit_gib: float | None = None
    predicted_slowdown: float | None = None
    #: an offline LLM inference pod's GPUs per engine replica (None for other pods)
    tensor_parallel: int | None = None

    @property
    def mig(self) -> bool:
        return self.mig_profile is not None

    @property
    def mps(self) -> bool:
        return self.mps_active_thread_percentage is not None


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the container (the v1beta1 ``Mount``)."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceSpec:
    """A host device node given to the container (the v1beta1 ``DeviceSpec``); permissions
    ``"rw"``: read and write, no mknod."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerAllocation:
    """The answer for one container: ``envs``, ``mounts``, ``devices``."""

    envs: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()


@dataclass(frozen=True)
class AllocationTarget:
    """The pod and container an Allocate is for, and the pod's decision."""

    pod: PodInfo
    container: str
    decision: Decision


def _nonempty(ann: Mapping[str, str], key: str) -> str:
    v = ann.get(key)
    if not isinstance(v, str) or not v.strip():
        raise InvalidArgument(f"annotation {key}", v, "a non-empty string")
    return v.strip()


def parse_decision(ann: Mapping[str, str]) -> Decision:
    """The :class:`Decision` in annotations ``ann``; InvalidArgument naming the annotation,
    its value and what is allowed for anything missing or malformed."""
    round_id = _nonempty(ann, ROUND_ID)
    configuration = _nonempty(ann, CONFIGURATION)
    raw = _nonempty(ann, GPU_UUIDS)
    uuids = tuple(u.strip() for u in raw.split(","))
    if any(not u for u in uuids) or len(set(uuids)) != len(uuids):
        raise InvalidArgument(f"annotation {GPU_UUIDS}", raw, "distinct comma-separated GPU UUIDs")
    prof, start = ann.get(MIG_PROFILE), ann.get(MIG_START_SLOT)
    if (prof is None) != (start is None):
        raise InvalidArgument(f"annotation {MIG_PROFILE if prof is None else MIG_START_SLOT}", None,
                              f"set together with {MIG_START_SLOT if prof is None else MIG_PROFILE}")
    start_slot = None
    if prof is not None:
        prof = _nonempty(ann, MIG_PROFILE)
        if not re.fullmatch(r"\d+", str(start).strip()):
            raise InvalidArgument(f"annotation {MIG_START_SLOT}", start, "an integer memory slice >= 0")
        start_slot = int(str(start).strip())
        if len(uuids) != 1:
            raise InvalidArgument(f"annotation {GPU_UUIDS}", raw, "exactly one GPU UUID with a MIG profile")
    pct, mem = ann.get(MPS_ACTIVE_THREAD_PERCENTAGE), ann.get(MPS_PINNED_MEM_LIMIT_GIB)
    if (pct is None) != (mem is None):
        missing = MPS_ACTIVE_THREAD_PERCENTAGE if pct is None else MPS_PINNED_MEM_LIMIT_GIB
        raise InvalidArgument(f"annotation {missing}", None, "set together with the other MPS annotation")
    mps_pct = mps_mem = None
    if pct is not None:
        if prof is not None:
            raise InvalidArgument(f"annotation {MPS_ACTIVE_THREAD_PERCENTAGE}", pct,
                                  "absent on a MIG decision (MIG and MPS do not combine here)")
        where = f"annotation {MPS_ACTIVE_THREAD_PERCENTAGE}"
        if not re.fullmatch(r"\d{1,3}", str(pct).strip()):
            raise InvalidArgument(where, pct, "an integer in 1..100")
        try:  # the one rule for MPS shares (elastico.model): what the placer booked, x 100
            mps_pct = check_mps_percentage(int(str(pct).strip()), where)
        except InvalidArgument as e:
            raise InvalidArgument(where, pct, e.allowed) from None
        mps_mem = _positive(MPS_PINNED_MEM_LIMIT_GIB, mem, "GiB > 0")
    slowdown = None
    if PREDICTED_SLOWDOWN in ann:
        slowdown = _positive(PREDICTED_SLOWDOWN, ann[PREDICTED_SLOWDOWN], "a number >= 1")
        if slowdown < 1:
            raise InvalidArgument(f"annotation {PREDICTED_SLOWDOWN}", ann[PREDICTED_SLOWDOWN], "a number >= 1")
    tp = None
    if TENSOR_PARALLEL in ann:
        raw_tp = ann[TENSOR_PARALLEL]
        n = 1 if prof is not None else len(uuids)
        allowed = f"an integer dividing the pod's {n} GPU(s)"
        if not re.fullmatch(r"\d{1,3}", str(raw_tp).strip()):
            raise InvalidArgument(f"annotation {TENSOR_PARALLEL}", raw_tp, allowed)
        tp = int(str(raw_tp).strip())
        if tp < 1 or n % tp:
            raise InvalidArgument(f"annotation {TENSOR_PARALLEL}", raw_tp, allowed)
    return Decision(round_id, configuration, uuids, prof, start_slot, mps_pct, mps_mem, slowdown,
                    tp)


def _positive(key: str, value: object, allowed: str) -> float:
    try:
        v = float(str(value).strip())
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise InvalidArgument(f"annotation {key}", value, allowed)
    return v


def acknowledged(pod: PodInfo) -> list[str]:
    """Containers of ``pod`` already allocated (``elastico.io/allocated`` entries with this
    pod's uid; an entry of another uid -- a recreated pod of the same name -- counts not)."""
    return allocated_containers(pod.annotations.get(ALLOCATED), pod.uid)


def allocated_value(pod: PodInfo, container: str) -> str:
    """The new ``elastico.io/allocated`` value once ``container`` is allocated."""
    return ",".join([f"{pod.uid}/{c}" for c in acknowledged(pod)] + [f"{pod.uid}/{container}"])


def _next_container(pod: PodInfo) -> str | None:
    done = set(acknowledged(pod))
    return next((c for c in pod.gpu_containers if c not in done), None)


def find_target(pods: Iterable[PodInfo], node: str) -> AllocationTarget:
    """The pod and container an Allocate on ``node`` is for (module docstring).  Raises
    Infeasible naming the candidates when there is not exactly one, InvalidArgument when the
    one candidate's decision annotations are malformed."""
    cands = []
    for p in pods:
        if (p.node_name == node and p.scheduler_name == SCHEDULER_NAME and not p.deleting
                and p.phase not in ("Succeeded", "Failed")
                and all(k in p.annotations for k in _REQUIRED) and _next_container(p) is not None):
            cands.append(p)
    if len(cands) != 1:
        names = ", ".join(sorted(f"{p.key} (uid {p.uid})" for p in cands)) or "none"
        raise Infeasible(
            f"allocate on node {node}: expected exactly one pod bound by the elastico scheduler "
            f"with decision annotations and a container not yet in {ALLOCATED}, found "
            f"{len(cands)}: {names}; the placer keeps at most one such pod per node, so this "
            "Allocate cannot be matched to a pod (kubelet retries it)")
    pod = cands[0]
    return AllocationTarget(pod, _next_container(pod), parse_decision(pod.annotations))


#: Device nodes every GPU container needs (driver control, unified memory), then one per GPU.
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def device_nodes(gpu_indices: Sequence[int], exists: Callable[[str], bool] = lambda _p: True
                 ) -> tuple[DeviceSpec, ...]:
    """DeviceSpecs for the control devices and ``/dev/nvidia<i>`` of each GPU, keeping the
    paths ``exists`` says are on the host (kubelet fails a container whose device is
    missing)."""
    paths = [*CONTROL_DEVICES, *(f"/dev/nvidia{i}" for i in gpu_indices)]
    return tuple(DeviceSpec(p, p) for p in paths if exists(p))


def build_allocation(decision: Decision, gpus: Sequence[GpuInfo], *, mig_uuid: str | None = None,
                     mps_pipe_dir: str = "/run/nvidia-mps", mps_log_dir: str = "/var/log/nvidia-mps",
                     exists: Callable[[str], bool] = lambda _p: True) -> ContainerAllocation:
    """The container's devices, mounts and environment for ``decision`` on a node with
    ``gpus``.  ``mig_uuid``: the MIG device UUID of the decision's instance (MIG only).

    * whole GPUs: ``NVIDIA_VISIBLE_DEVICES`` = the GPU UUIDs;
    * MIG: ``NVIDIA_VISIBLE_DEVICES`` = the MIG device UUID;
    * MPS: also ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
      (:func:`~elastico.nodeagent.backend.pinned_mem_limit_env`, one entry per visible GPU),
      ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY``, with both host directories
      mounted at the same paths;
    * always ``ELASTICO_ROUND_ID`` and ``ELASTICO_CONFIGURATION`` (for the job's logs), and
      the GPU memory the pod booked per GPU: ``ELASTICO_GPU_MEMORY_GIB`` (a whole GPU: its
      memory; MPS: the pinned limit; MIG: the instance's memory slices of the GPU's memory)
      and ``ELASTICO_GPU_MEMORY_FRACTION``, that memory over the memory of the device the
      container sees (1 for a whole GPU or a MIG instance, the limit over the GPU's memory
      under MPS) -- what an engine's memory setting is scaled by (vLLM
      ``--gpu-memory-utilization``), so it sizes its KV cache within the booking;
    * an offline LLM inference pod (``elastico.io/tensor-parallel``):
      ``ELASTICO_LLM_TENSOR_PARALLEL`` (GPUs per engine replica) and ``ELASTICO_LLM_REPLICAS``
      (the pod's GPUs over it).

    Raises InvalidArgument naming the annotation when a UUID is not on this node, the MIG or
    MPS request does not fit the GPU, and Infeasible when a GPU is unhealthy.
    """
    by_uuid = {g.uuid: g for g in gpus}
    chosen = []
    for u in decision.gpu_uuids:
        g = by_uuid.get(u)
        if g is None:
            raise InvalidArgument(f"annotation {GPU_UUIDS}", ",".join(decision.gpu_uuids),
                                  f"UUIDs of this node's GPUs {sorted(by_uuid)}")
        if not g.healthy:
            raise Infeasible(f"GPU {u} (index {g.index}) is unhealthy; not allocating it")
        chosen.append(g)
    envs = {"ELASTICO_ROUND_ID": decision.round_id, "ELASTICO_CONFIGURATION": decision.configuration}
    mounts: tuple[Mount, ...] = ()
    if decision.mig:
        g = chosen[0]
        if not g.mig_mode:
            raise InvalidArgument(f"annotation {MIG_PROFILE}", decision.mig_profile,
                                  f"only on a GPU in MIG mode (GPU {g.uuid} is not)")
        if not mig_uuid:
            raise InvalidArgument("mig_uuid", mig_uuid, "the MIG device UUID of the instance")
        envs["NVIDIA_VISIBLE_DEVICES"] = mig_uuid
    else:
        for g in chosen:
            if g.mig_mode:
                raise InvalidArgument(f"annotation {GPU_UUIDS}", g.uuid,
                                      "a GPU not in MIG mode (or give a MIG profile and start slot)")
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(decision.gpu_uuids)
    if decision.mps:
        mem = decision.mps_pinned_mem_limit_gib
        cap = min(g.memory_total_gib for g in chosen)
        if mem > cap:
            raise InvalidArgument(f"annotation {MPS_PINNED_MEM_LIMIT_GIB}", mem,
                                  f"GiB in (0, {cap:g}] (the GPU's memory)")
        envs.update({
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(decision.mps_active_thread_percentage),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": pinned_mem_limit_env(mem, len(chosen)),
            "CUDA_MPS_PIPE_DIRECTORY": mps_pipe_dir,
            "CUDA_MPS_LOG_DIRECTORY": mps_log_dir,
        })
        mounts = (Mount(mps_pipe_dir, mps_pipe_dir), Mount(mps_log_dir, mps_log_dir))
    booked, fraction = _booked_memory(decision, chosen)
    envs["ELASTICO_GPU_MEMORY_GIB"] = f"{booked:g}"
    envs["ELASTICO_GPU_MEMORY_FRACTION"] = f"{fraction:.6g}"
    if decision.tensor_parallel is not None:
        envs["ELASTICO_LLM_TENSOR_PARALLEL"] = str(decision.tensor_parallel)
        envs["ELASTICO_LLM_REPLICAS"] = str(
            (1 if decision.mig else len(chosen)) // decision.tensor_parallel)
    return ContainerAllocation(envs, mounts, device_nodes([g.index for g in chosen], exists))


def _booked_memory(decision: Decision, chosen: Sequence[GpuInfo]) -> tuple[float, float]:
    """(GiB booked per GPU, that over the memory of the device the container sees): the
    placer books a whole GPU's memory, an MPS share's pinned limit, a MIG instance's memory
    slices of the GPU's memory (:mod:`elastico.shapes`); the MPS limit is written in whole MiB
    (:func:`~elastico.nodeagent.backend.pinned_mem_limit_env`), so the same here."""
    total = min(g.memory_total_gib for g in chosen)
    if decision.mps:
        mem = math.floor(decision.mps_pinned_mem_limit_gib * 1024 + 1e-6) / 1024
        return mem, mem / total
    if decision.mig:
        from elastico.mig import MIG_PROFILES

        g = chosen[0]
        prof = (MIG_PROFILES.get(g.mig_model) or {}).get(decision.mig_profile)
        if prof is None:
            raise InvalidArgument(f"annotation {MIG_PROFILE}", decision.mig_profile,
                                  f"a MIG profile of {g.model}")
        return g.memory_total_gib * prof.memory_fraction, 1.0
    return total, 1.0
