"""What a placement produces: where one job runs, and the tolerances every check uses.

Owns: :class:`Part` (one pod's GPUs, CPU and host memory on one node), :class:`Assignment`
(one job's parts and its per-GPU booking), :class:`PlaceOutcome` (the answer of
:meth:`~elastico.placer.placement.ClusterState.place`), and ``EPS`` / ``WHOLE``.
Who uses it: every module of this package, and the placer's callers, which read and write
assignments (the round, the policies, the Kubernetes loop's book, the wire codecs).
Whom it calls: nothing (plain frozen dataclasses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["EPS", "WHOLE", "Part", "Assignment", "PlaceOutcome"]

EPS = 1e-9  # tolerance on every capacity comparison (fractions of a GPU, GiB, cores)
#: a configuration with at least this share takes a whole GPU (no other resident)
WHOLE = 1.0 - 1e-12


@dataclass(frozen=True)
class Part:
    """One pod of a job: ``gpu_indices`` on node ``node`` (index ``node_index``), ``cpu``
    cores and ``mem_gib`` GiB host memory booked there, ``mig_starts[i]`` the MIG instance's
    start slot on ``gpu_indices[i]`` (MIG only)."""

    node: str
    node_index: int
    gpu_indices: tuple[int, ...]
    cpu: float
    mem_gib: float
    mig_starts: tuple[int, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """Where one job runs: one :class:`Part` per pod (a job that spans nodes without pods of
    its own gets one part per node).  ``gpu_share`` (fraction of a GPU) and ``gpu_mem_gib``
    (GiB) are per GPU as booked, the same on every GPU of the job (for MIG: the instance's
    compute_slices/7 and memory_slices/8 of the GPU's memory).

    Readers of a one-node job keep using ``node``, ``node_index``, ``gpu_indices`` and
    ``mig_starts`` (the parts' GPUs in part order); on a job that spans nodes these raise
    ValueError, so nothing silently reads one node of several -- read ``parts``.  ``cpu``
    and ``mem_gib`` are totals over the parts."""

    job_id: str
    parts: tuple[Part, ...]
    gpu_share: float
    gpu_mem_gib: float
    mig_profile: str | None = None
    config_name: str = ""
    gpu_model: str | None = None

    @property
    def node_indices(self) -> tuple[int, ...]:
        """The job's nodes, each once, in part order."""
        return tuple(dict.fromkeys(p.node_index for p in self.parts))

    @property
    def single_node(self) -> bool:
        return len(self.node_indices) == 1

    def _one(self) -> Part:
        if not self.single_node:
            names = ", ".join(dict.fromkeys(p.node for p in self.parts))
            raise ValueError(f"assignment of job {self.job_id!r} spans nodes {names}: read .parts")
        return self.parts[0]

    @property
    def node(self) -> str:
        return self._one().node

    @property
    def node_index(self) -> int:
        return self._one().node_index

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        self._one()
        return tuple(g for p in self.parts for g in p.gpu_indices)

    @property
    def mig_starts(self) -> tuple[int, ...]:
        self._one()
        return tuple(s for p in self.parts for s in p.mig_starts)

    @property
    def cpu(self) -> float:
        return math.fsum(p.cpu for p in self.parts) if len(self.parts) > 1 else self.parts[0].cpu

    @property
    def mem_gib(self) -> float:
        return math.fsum(p.mem_gib for p in self.parts) if len(self.parts) > 1 else self.parts[0].mem_gib

    @property
    def gpus(self) -> tuple[tuple[int, int], ...]:
        """``(node_index, gpu_index)`` of every GPU booking, part by part (a GPU appears
        twice when two pods of a ``share_gpus`` gang share it)."""
        return tuple((p.node_index, g) for p in self.parts for g in p.gpu_indices)


@dataclass(frozen=True)
class PlaceOutcome:
    """Result of :meth:`~elastico.placer.placement.ClusterState.place`: the assignment, or
    None and why not.  ``slowdown``: the new job's predicted slowdown right after placement
    (1.0 if alone)."""

    assignment: Assignment | None
    reason: str = ""
    slowdown: float = 1.0

    @property
    def placed(self) -> bool:
        return self.assignment is not None
