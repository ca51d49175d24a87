"""The shared model: resources, configurations, shape families, jobs, nodes.

Pure data, no I/O and no clock. Everyone uses it: the shape builder (``elastico.shapes``)
produces :class:`ShapeFamily` objects, the pricing solver consumes their arrays, the placer
packs :class:`Configuration` objects onto :class:`Node` GPUs, the simulator and the live
loop own :class:`Job` objects.

Units used throughout (DESIGN.md):

* GPU compute: fraction of one GPU (1.0 = a whole GPU; MPS active thread percentage / 100).
  The trace's ``gpu_milli`` is milli-GPU (1000 = 1.0).
* GPU memory and host memory: GiB.  CPU: cores (the trace's ``cpu_milli`` / 1000).
* Throughput: a job's *normalized* throughput, 1.0 = the speed at which the job ran in the
  trace (its requested shape on the reference GPU, see docs/model.md).  Time: seconds.

Resource vector layout (:class:`ResourceSpace`): for each GPU model ``m`` in the cluster,
``gpu:m`` (GPUs) and ``gpumem:m`` (GiB); then, for each model ``m`` with GPUs in MIG mode (only
in the space of a policy that uses MIG instances), ``gpu:m:mig`` and ``gpumem:m:mig``; then
``cpu`` (cores) and ``mem`` (GiB).  Keeping GPU models apart is what makes a V100 and a T4
different resources with different shadow prices; keeping MIG-mode GPUs apart from the same
model's normal ones is what keeps a price from selling a MIG instance on a GPU that cannot
host one (MIG mode is per GPU: NVIDIA MIG user guide, "Enable MIG Mode").
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.hardware import gpu_spec
from elastico.mig import MIG_PROFILES

if TYPE_CHECKING:  # pragma: no cover
    from elastico.llm_job import LlmJobSpec
    from elastico.llm_train_job import LlmTrainSpec

__all__ = [
    "MAX_PRIORITY",
    "JobKind",
    "ResourceSpace",
    "Configuration",
    "Provenance",
    "PROVENANCE_KINDS",
    "WAIT",
    "ShapeFamily",
    "Request",
    "Job",
    "Node",
    "MIG_CAPABLE_MODELS",
    "mps_percentage",
    "check_mps_percentage",
    "MPS_SHARE_ALLOWED",
    "MIG_GPUS_LABEL",
    "mig_gpu_count",
    "with_mig_count",
    "mig_gpus_of",
    "mig_models_of",
    "resource_space_for",
    "capacity_of",
]


class JobKind(str, enum.Enum):
    """Workload kinds.  ``training`` and ``inference`` (offline batch) are elastic;
    ``service`` (the trace's latency-sensitive LS pods) keeps its requested shape and is
    placed before any elastic job."""

    TRAINING = "training"
    INFERENCE = "inference"
    SERVICE = "service"

    @property
    def elastic(self) -> bool:
        return self is not JobKind.SERVICE


#: GPU models ElastiCo runs in MIG mode: those with a MIG profile table (:mod:`elastico.mig`)
#: whose GPU supports MIG by the catalogue (:attr:`elastico.hardware.GpuSpec.mig`; NVIDIA MIG
#: user guide, "Supported GPUs").
MIG_CAPABLE_MODELS = frozenset(m for m in MIG_PROFILES if gpu_spec(m).mig)

#: What an MPS-enforceable share is, for error messages (:func:`mps_percentage`).
MPS_SHARE_ALLOWED = ("a whole percent of a GPU, a multiple of 0.01 in [0.01, 1] (MPS enforces a "
                     "share as CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, an integer 1..100)")
_MPS_ROUNDING = 1e-9  # percent: float noise of k / 100 (0.29 * 100 = 28.999999999999996)


def check_mps_percentage(value: float, field: str = "active_thread_percentage") -> int:
    """``value`` as an MPS active thread percentage: a whole number in 1..100
    (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; the node agent passes nothing else to a client).
    Returns it as an int; raises :class:`elastico.errors.InvalidArgument` naming ``field``,
    the value and what is allowed otherwise (99.1, 0.5, 0, NaN, a bool, a string)."""
    ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
          and math.isfinite(value) and -200.0 <= value <= 200.0)
    k = round(value) if ok else 0
    if not (ok and abs(value - k) <= _MPS_ROUNDING and 1 <= k <= 100):
        raise InvalidArgument(field, value, "an integer percentage in 1..100 (MPS enforces whole "
                                            "percent of a GPU's threads)")
    return int(k)


def mps_percentage(share: float, field: str = "gpu_share") -> int:
    """The MPS active thread percentage that enforces ``share`` (fraction of one GPU's
    compute) exactly: ``share x 100``, an integer in 1..100.  The one rule for every share
    that MPS enforces (pod annotations, the placer's RPCs, shape families, the decision
    annotations the device plugin reads, the node agent's plans): a share is enforceable --
    a multiple of 0.01 in [0.01, 1], up to float noise of 1e-11 -- or refused.  Raises
    :class:`elastico.errors.InvalidArgument` naming ``field``, the share and
    :data:`MPS_SHARE_ALLOWED` (0.995 would be enforced as 99 or 100 %, 0.025 as 2 or 3 %,
    0.005 as nothing).  MIG instances' shares (compute slices / the GPU's, e.g. 3/7) are
    hardware partitions, not MPS shares, and never come here."""
    ok = (isinstance(share, (int, float, np.integer, np.floating)) and not isinstance(share, bool)
          and math.isfinite(share) and -2.0 <= share <= 2.0)  # x 100 must not overflow
    k = round(share * 100) if ok else 0
    if not (ok and abs(share * 100 - k) <= _MPS_ROUNDING and 1 <= k <= 100):
        raise InvalidArgument(field, share, MPS_SHARE_ALLOWED)
    return int(k)


#: Largest job priority (a utility weight, > 0).  Weights are relative; a cap far above any
#: sensible ratio keeps a round's summed utilities finite (a priority of 1e308 overflowed
#: the pricing instance to inf).
MAX_PRIORITY = 1e6


@dataclass(frozen=True)
class ResourceSpace:
    """Names and indices of the R resources of one cluster (see module docstring).

    ``gpu_models``: the cluster's GPU models; ``mig_models``: those of them whose MIG-mode
    GPUs are a pool of their own (a subset of ``gpu_models``; empty for a policy that never
    uses MIG instances).  ValueError for a duplicate or a MIG model not in ``gpu_models``."""

    gpu_models: tuple[str, ...]
    mig_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.gpu_models)) != len(self.gpu_models):
            raise ValueError(f"gpu_models: duplicated model in {self.gpu_models!r}")
        if len(set(self.mig_models)) != len(self.mig_models):
            raise ValueError(f"mig_models: duplicated model in {self.mig_models!r}")
        stray = [m for m in self.mig_models if m not in self.gpu_models]
        if stray:
            raise ValueError(f"mig_models: {stray!r} not in gpu_models {self.gpu_models!r}")

    @property
    def size(self) -> int:
        return 2 * (len(self.gpu_models) + len(self.mig_models)) + 2

    @property
    def names(self) -> tuple[str, ...]:
        out: list[str] = []
        for m in self.gpu_models:
            out += [f"gpu:{m}", f"gpumem:{m}"]
        for m in self.mig_models:
            out += [f"gpu:{m}:mig", f"gpumem:{m}:mig"]
        return tuple(out + ["cpu", "mem"])

    def gpu_index(self, model: str, mig: bool = False) -> int:
        """Index of ``gpu:model`` (``gpu:model:mig`` with ``mig``; KeyError when absent)."""
        try:
            if mig:
                return 2 * len(self.gpu_models) + 2 * self.mig_models.index(model)
            return 2 * self.gpu_models.index(model)
        except ValueError:
            pool = "MIG-mode GPU pools" if mig else "cluster"
            known = self.mig_models if mig else self.gpu_models
            raise KeyError(f"gpu_model: {model!r} is not in this {pool} {known!r}") from None

    def gpumem_index(self, model: str, mig: bool = False) -> int:
        return self.gpu_index(model, mig) + 1

    @property
    def cpu_index(self) -> int:
        return 2 * (len(self.gpu_models) + len(self.mig_models))

    @property
    def mem_index(self) -> int:
        return self.cpu_index + 1


#: :attr:`Provenance.kind` values.
PROVENANCE_KINDS = ("measured", "model")


@dataclass(frozen=True)
class Provenance:
    """Where one factor of a configuration's throughput comes from (docs/model.md 2.).

    ``kind`` ``"measured"``: ``source`` names the dataset (``gavel``, ``sia``, ``miso``) and
    ``detail`` the measured point; ``"model"``: ``source`` names the model (e.g.
    ``roofline-per-job``, ``pollux-sync``, ``amdahl-miso``) and ``detail`` its fit and inputs
    (an assumption says ``ASSUMPTION``).  ``factor``: which factor of the throughput it backs --
    ``speed`` (one whole GPU of the model), ``scale-out`` (n GPUs over one), ``share`` (an MPS
    compute share over the whole GPU), ``mig`` (a MIG instance over the whole GPU)."""

    kind: str
    source: str
    detail: str
    factor: str = "speed"

    def __str__(self) -> str:
        return f"{self.factor}: {self.kind} {self.source} [{self.detail}]"


@dataclass(frozen=True)
class Configuration:
    """One feasible way to run a job (an element of its shape family).

    ``num_gpus`` GPUs of ``gpu_model``, each giving the job ``gpu_share`` of its compute
    (MPS active thread percentage / 100; 1.0 = whole GPU) and ``gpu_mem_gib`` of its memory;
    ``mig_profile`` names a MIG profile (e.g. ``"3g.20gb"``) instead of an MPS share when set.
    ``cpu`` cores and ``mem_gib`` host memory are totals over the job.  ``throughput`` is the
    solo normalized throughput (1.0 = trace speed).  The ``wait`` configuration uses nothing
    and makes no progress.  ``replica_gpus``: GPUs of one replica of an offline-inference
    configuration, its tensor-parallel degree (an LLM job runs ``num_gpus / replica_gpus``
    independent replicas, each on one node; :mod:`elastico.llm_shapes`); of an LLM training
    configuration its tensor-parallel degree too (data parallel ``num_gpus / replica_gpus``,
    one gang on one node: :mod:`elastico.llm_train_job`); 1 for everything else (an
    inference replica per GPU; other training ignores it).
    """

    name: str
    gpu_model: str | None
    num_gpus: int
    gpu_share: float
    gpu_mem_gib: float
    cpu: float
    mem_gib: float
    throughput: float
    mig_profile: str | None = None
    replica_gpus: int = 1
    #: where ``throughput`` comes from, one :class:`Provenance` per factor (training and
    #: job-type inference configurations; empty for wait and for the LLM model's configurations,
    #: whose speed the LLM performance model gives).  Not part of equality.
    provenance: tuple[Provenance, ...] = field(default=(), compare=False)

    @property
    def replicas(self) -> int:
        """Independent replicas of an inference configuration (``num_gpus / replica_gpus``)."""
        return self.num_gpus // self.replica_gpus if self.replica_gpus > 0 else self.num_gpus

    @property
    def is_wait(self) -> bool:
        return self.num_gpus == 0 and self.cpu == 0 and self.mem_gib == 0

    @property
    def gpus_total(self) -> float:
        """GPU compute the configuration occupies, in GPUs (num_gpus x gpu_share)."""
        return self.num_gpus * self.gpu_share

    def demand(self, space: ResourceSpace) -> np.ndarray:
        """Resource vector, shape ``(space.size,)``, float64 (layout in ResourceSpace).  A MIG
        instance draws on its model's MIG-mode pool when ``space`` has one, otherwise on the
        model's only pool."""
        r = np.zeros(space.size)
        if self.is_wait:
            return r
        if self.num_gpus:
            if self.gpu_model is None:
                raise ValueError(f"configuration {self.name!r}: num_gpus > 0 needs a gpu_model")
            mig = self.mig_profile is not None and self.gpu_model in space.mig_models
            g = space.gpu_index(self.gpu_model, mig)
            r[g] = self.num_gpus * self.gpu_share
            r[g + 1] = self.num_gpus * self.gpu_mem_gib
        r[space.cpu_index] = self.cpu
        r[space.mem_index] = self.mem_gib
        return r


WAIT = Configuration("wait", None, 0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ShapeFamily:
    """A job's feasible configurations; ``configs[0]`` is always :data:`WAIT`."""

    configs: tuple[Configuration, ...]

    def __post_init__(self) -> None:
        if not self.configs or not self.configs[0].is_wait:
            raise ValueError("shape family: configs[0] must be the wait configuration")

    def __len__(self) -> int:
        return len(self.configs)

    def throughputs(self) -> np.ndarray:
        """Solo normalized throughput per configuration, shape ``(len(self),)``."""
        return np.array([c.throughput for c in self.configs])

    def demands(self, space: ResourceSpace) -> np.ndarray:
        """Resource vectors, shape ``(len(self), space.size)``."""
        return np.stack([c.demand(space) for c in self.configs])


@dataclass(frozen=True)
class Request:
    """What a pod asked for (the trace's columns, converted to model units).

    ``gpu_share`` is per GPU (trace ``gpu_milli``/1000; 1.0 for multi-GPU pods);
    ``gpu_models`` is the allowed set (empty = any model).

    GPU memory per GPU (:func:`elastico.shapes.gpu_memory_gib`): with ``device_memory``
    (the live path: a pod's request) it comes from each GPU's real memory -- ``gpu_mem_gib``
    GiB when set (a pod's ``elastico.io/gpu-memory-gib``), else the configuration's share of
    the GPU's memory, and a whole GPU all of it.  Without (the default: the trace workload),
    the simulator's documented footprint, ``gpu_mem_gib`` or ``gpu_share x``
    :data:`elastico.shapes.FOOTPRINT_GIB` on every configuration.
    """

    num_gpus: int
    gpu_share: float
    cpu: float
    mem_gib: float
    gpu_models: frozenset[str] = frozenset()
    gpu_mem_gib: float | None = None
    device_memory: bool = False

    def __post_init__(self) -> None:
        if self.num_gpus < 0:
            raise ValueError(f"num_gpus: {self.num_gpus} must be >= 0")
        if self.num_gpus and not (0.0 < self.gpu_share <= 1.0):
            raise ValueError(f"gpu_share: {self.gpu_share} must be in (0, 1]")
        if self.num_gpus > 1 and self.gpu_share != 1.0:
            raise ValueError(f"gpu_share: {self.gpu_share} must be 1.0 for num_gpus={self.num_gpus}")
        for name in ("cpu", "mem_gib"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}: {v} must be a finite number >= 0")
        if self.gpu_mem_gib is not None and not (math.isfinite(self.gpu_mem_gib)
                                                 and self.gpu_mem_gib > 0):
            raise ValueError(f"gpu_mem_gib: {self.gpu_mem_gib} must be a finite number > 0 or None")

    @property
    def gpus_total(self) -> float:
        return self.num_gpus * self.gpu_share


@dataclass
class Job:
    """A job (one trace pod, or one group of pods).  Mutable: the simulator or live loop
    updates progress.  ``work`` is the total work in normalized-throughput seconds (the
    job's trace duration: it finishes after ``work`` seconds at throughput 1.0).
    ``reshape``: may a policy give it a GPU count or share other than its request (Resource
    Shape Transformation)?  False: only its requested shape, on any allowed GPU model or a
    MIG instance that holds it (the live loop's default: a bound pod cannot be resized)."""

    id: str
    kind: JobKind
    arrival_s: float
    work: float
    request: Request
    job_type: str = ""
    priority: float = 1.0
    slowdown_bound: float = 1.5
    done: float = 0.0
    #: keep the requested per-GPU share where a policy gives services whole GPUs (a live
    #: ``elastico.io/shape-family: fixed`` pod keeps its requested shape: docs/annotations.md)
    fixed_share: bool = False
    #: live pods: False = the requested GPU count and share only (no Resource Shape
    #: Transformation beyond the GPU model / a MIG instance that holds it; docs/annotations.md)
    reshape: bool = True
    #: trace workload: the recorded lifetime is cut off by the end of the observation (the
    #: trace's pod is still Running), so ``work`` is a lower bound of the true work; such a
    #: job is replayed but kept out of JCT and slowdown statistics (docs/metrics.md)
    censored: bool = False
    #: an offline LLM inference job (kind ``inference``): its model, work in tokens and
    #: reference speed (:class:`elastico.llm_job.LlmJobSpec`); None for every other job.  Its
    #: ``work`` is then its tokens over the reference tokens/s (:mod:`elastico.llm_job`)
    llm: "LlmJobSpec | None" = None
    #: an LLM training or fine-tuning job (kind ``training``): its model, sequence length,
    #: global batch, tokens and reference speed (:class:`elastico.llm_train_job.LlmTrainSpec`);
    #: None for every other job.  Its ``work`` is its tokens over the reference tokens/s
    llm_train: "LlmTrainSpec | None" = None

    def __post_init__(self) -> None:
        if self.llm is not None and self.llm_train is not None:
            raise ValueError(f"job {self.id}: llm and llm_train are exclusive")
        if not (math.isfinite(self.work) and self.work >= 0):
            raise ValueError(f"job {self.id}: work {self.work} must be finite and >= 0")
        if not (math.isfinite(self.priority) and 0 < self.priority <= MAX_PRIORITY):
            raise ValueError(f"job {self.id}: priority {self.priority} must be in "
                             f"(0, {MAX_PRIORITY:g}]")
        if not self.slowdown_bound >= 1.0:
            raise ValueError(f"job {self.id}: slowdown_bound {self.slowdown_bound} must be >= 1")

    @property
    def remaining(self) -> float:
        return max(self.work - self.done, 0.0)


@dataclass(frozen=True)
class Node:
    """A node: ``num_gpus`` GPUs of one ``gpu_model`` (a trace node has one model), each with
    ``gpu_mem_gib`` of memory; ``cpu`` cores and ``mem_gib`` host memory; ``labels`` such as a
    topology domain; ``unhealthy_gpus``: indices of GPUs the node agent or a node condition
    marked unhealthy (never free: the placer books nothing new on them, docs/placement.md)."""

    name: str
    gpu_model: str
    num_gpus: int
    gpu_mem_gib: float
    cpu: float
    mem_gib: float
    labels: tuple[tuple[str, str], ...] = field(default=())
    unhealthy_gpus: frozenset[int] = field(default=frozenset())

    @property
    def mig_capable(self) -> bool:
        return self.gpu_model in MIG_CAPABLE_MODELS


#: node label: how many of the node's GPUs are in MIG mode.  A cluster definition's nodes have
#: their first ones in MIG mode (:func:`mig_gpus_of`); on live nodes (the Kubernetes loop's
#: inventory, the placer service's NodeSpec) the label is only the count
#: (:func:`with_mig_count`), set from the GPUs actually in MIG mode, whose indices reach the
#: ClusterState separately -- so read live nodes with :func:`mig_gpu_count`, and call
#: :func:`mig_gpus_of` only on nodes built from a cluster definition.
MIG_GPUS_LABEL = "elastico.io/mig-gpus"


def mig_gpu_count(node: Node, where: str = "node") -> int:
    """How many of ``node``'s GPUs are in MIG mode by its :data:`MIG_GPUS_LABEL` (0 without
    the label).  InvalidArgument (field ``{where}.labels[...]``) for a label that is not an
    integer in 0..num_gpus, or non-zero on a model without a MIG profile table."""
    from elastico.mig import MIG_PROFILES

    v = dict(node.labels).get(MIG_GPUS_LABEL)
    if v is None:
        return 0
    try:
        k = int(v)
    except ValueError:
        k = -1
    if not 0 <= k <= node.num_gpus:
        raise InvalidArgument(f"{where}.labels[{MIG_GPUS_LABEL}]", v,
                              f"an integer in 0..{node.num_gpus}")
    if k and node.gpu_model not in MIG_PROFILES:
        raise InvalidArgument(f"{where}.labels[{MIG_GPUS_LABEL}]", v,
                              f"0: {node.gpu_model} has no MIG profiles")
    return k


def with_mig_count(labels: Mapping[str, str], count: int) -> tuple[tuple[str, str], ...]:
    """``labels`` as a Node's sorted ``labels`` tuple, with :data:`MIG_GPUS_LABEL` set to
    ``count``, or removed when ``count`` is 0: whatever the labels said before is replaced by
    the count the caller knows (live nodes: the GPUs reported in MIG mode)."""
    out = {k: v for k, v in labels.items() if k != MIG_GPUS_LABEL}
    if count:
        out[MIG_GPUS_LABEL] = str(count)
    return tuple(sorted(out.items()))


def mig_gpus_of(nodes: Sequence[Node]) -> list[tuple[int, int]]:
    """``(node_index, gpu_index)`` of every GPU in MIG mode by the nodes' :data:`MIG_GPUS_LABEL`
    (the first ``k`` GPUs of a node labelled ``k``; nodes without the label: none).
    InvalidArgument like :func:`mig_gpu_count`."""
    return [(i, g) for i, n in enumerate(nodes) for g in range(mig_gpu_count(n, f"nodes[{i}]"))]


def mig_models_of(nodes: Sequence[Node]) -> frozenset[str]:
    """GPU models with at least one GPU in MIG mode by :func:`mig_gpu_count`."""
    return frozenset(n.gpu_model for i, n in enumerate(nodes) if mig_gpu_count(n, f"nodes[{i}]"))


def resource_space_for(nodes: Iterable[Node], mig: bool = False) -> ResourceSpace:
    """The resource space of a set of nodes: GPU models in first-seen order; with ``mig``, a
    MIG-mode pool for every model with GPUs in MIG mode by the nodes' labels
    (:func:`mig_gpu_count`, which raises InvalidArgument for a bad label)."""
    nodes = list(nodes)
    seen: dict[str, None] = {}
    for n in nodes:
        if n.num_gpus:
            seen.setdefault(n.gpu_model, None)
    mig_models: dict[str, None] = {}
    if mig:
        for i, n in enumerate(nodes):
            if mig_gpu_count(n, f"nodes[{i}]"):
                mig_models.setdefault(n.gpu_model, None)
    return ResourceSpace(tuple(seen), tuple(mig_models))


def capacity_of(nodes: Sequence[Node], space: ResourceSpace) -> np.ndarray:
    """Aggregate capacity vector of ``nodes`` in ``space``, shape ``(space.size,)``: a node's
    MIG-mode GPUs (by its label, :func:`mig_gpu_count`) count in their
    model's MIG-mode pool when ``space`` has one, the rest in the model's pool."""
    cap = np.zeros(space.size)
    for i, n in enumerate(nodes):
        k = mig_gpu_count(n, f"nodes[{i}]") if n.gpu_model in space.mig_models else 0
        if n.num_gpus:
            for mig, count in ((False, n.num_gpus - k), (True, k)):
                if count:
                    g = space.gpu_index(n.gpu_model, mig)
                    cap[g] += count
                    cap[g + 1] += count * n.gpu_mem_gib
        cap[space.cpu_index] += n.cpu
        cap[space.mem_index] += n.mem_gib
    return cap
