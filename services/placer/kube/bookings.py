"""Rebuild the placer's book (:class:`elastico.placer.placement.ClusterState`) from pods.

Who calls it: the scheduler loop at the start of every round.  Pure: pods and nodes are plain
API dicts / :class:`~elastico.placer.kube.inventory.NodeInventory`; no kubernetes import.

State lives in Kubernetes (DESIGN.md): the placer keeps no booking only in memory.  Each round
the book is rebuilt from the pods, so a restarted placer, a second replica taking over, and the
running placer all see the same book.  The state machine of one elastico pod (STYLE.md 3,
"assume, then confirm or forget"):

* *pending*: no ``elastico.io/booking`` and no ``spec.nodeName`` -> a job for the round;
* *reserved* (assumed): the decision annotations are written, the Binding not yet made ->
  booked (so no one else gets its GPUs), bound by the loop when its node may take a bind;
* *bound* (confirmed): ``spec.nodeName`` set and a booking -> booked, including while
  terminating (``deletionTimestamp`` set) until the pod is gone or Succeeded/Failed;
* *forgotten*: a reservation the loop gives up (bind failed, node gone) loses its
  annotations (``clear_decision``) and the pod is pending again.

MPS (docs/placement.md, "MPS: the daemon and users"): a node whose ``mps_down`` is set gets
:meth:`~elastico.placer.placement.ClusterState.set_mps_down` (no new MPS share there; the
bookings on it stay), and every booked pod its user (:func:`~elastico.placer.kube.mps.mps_user`,
read from the pod spec, which cannot change), so a restarted placer keeps other users off its
GPU.

A booking that cannot be rebooked (its node is gone or not usable, or its GPUs are taken by an
earlier pod) is returned in ``conflicts`` and holds nothing; the loop decides what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Mapping, Sequence

from elastico.errors import ElasticoError
from elastico.model import Configuration, Job, JobKind, Request
from elastico.placer.placement import Assignment, ClusterState, Part
from elastico.placer.round import ActiveJob
from elastico.predictor import JobProfile, SlowdownModel

from .annotations import SCHEDULER_NAME, PodBooking, parse_booking
from .inventory import NodeInventory
from .mps import mps_user

__all__ = ["pod_key", "is_elastico", "is_terminal", "creation_s", "Book", "rebuild_book"]


def pod_key(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def is_elastico(pod: Mapping) -> bool:
    return (pod.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME


def is_terminal(pod: Mapping) -> bool:
    """Succeeded or Failed: its containers are gone, it holds no GPU."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def creation_s(pod: Mapping) -> float:
    """``metadata.creationTimestamp`` in seconds since the epoch (0 when absent)."""
    ts = (pod.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return 0.0
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


@dataclass
class Book:
    """The rebuilt book.  ``state``: every booking; ``running``: one fixed ActiveJob per booked
    pod (keyed by :func:`pod_key`; the round keeps them where they are -- this loop never
    moves a bound pod); ``bookings``: pod key -> its booking and whether it is bound;
    ``conflicts``: pod key -> why its booking holds nothing."""

    state: ClusterState
    running: list[ActiveJob] = field(default_factory=list)
    bookings: dict[str, tuple[PodBooking, bool]] = field(default_factory=dict)
    conflicts: dict[str, str] = field(default_factory=dict)


def rebuild_book(nodes: Sequence[NodeInventory], pods: Iterable[Mapping], *,
                 slowdown_model: SlowdownModel | None,
                 profile: Callable[[Job, Configuration], JobProfile]) -> Book:
    """Book every reserved or bound elastico pod (module docstring) on a fresh ClusterState of
    ``nodes``, oldest pod first (so a conflict is charged to the later pod).  ``profile``:
    the interference profile of a job running a configuration (the policy's
    ``JobCatalog.profile``), so rebooked pods are checked like placed ones."""
    index = {inv.node.name: i for i, inv in enumerate(nodes)}
    mig = [(i, g) for i, inv in enumerate(nodes) for g in inv.mig_gpus]
    state = ClusterState([inv.node for inv in nodes], mig, slowdown_model)
    for i, inv in enumerate(nodes):
        if inv.mps_down:
            state.set_mps_down(i, inv.mps_down)
    book = Book(state)
    cands = [p for p in pods if is_elastico(p) and not is_terminal(p)]
    cands.sort(key=lambda p: (creation_s(p), pod_key(p)))
    for pod in cands:
        key = pod_key(pod)
        try:
            b = parse_booking((pod.get("metadata") or {}).get("annotations"))
        except ElasticoError as e:
            book.conflicts[key] = str(e)
            continue
        if b is None:
            continue
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to and bound_to != b.node:
            book.conflicts[key] = f"bound to {bound_to} but booked on {b.node}"
            continue
        if not bound_to and (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue  # a reservation of a pod being deleted: never bound, holds nothing
        n = index.get(b.node)
        if n is None:
            book.conflicts[key] = f"node {b.node} is not usable now"
            continue
        config = b.configuration()
        job = Job(id=key, kind=JobKind.SERVICE, arrival_s=0.0, work=1.0,
                  request=Request(len(b.gpu_indices), b.gpu_share if len(b.gpu_indices) == 1 else 1.0,
                                  b.cpu, b.mem_gib, frozenset({b.gpu_model} if b.gpu_model else ())),
                  job_type=b.job_type, slowdown_bound=max(1.0, b.slowdown_bound))
        a = Assignment(job_id=key, parts=(Part(node=b.node, node_index=n, gpu_indices=b.gpu_indices,
                                               cpu=b.cpu, mem_gib=b.mem_gib,
                                               mig_starts=b.mig_starts),),
                       gpu_share=b.gpu_share, gpu_mem_gib=b.gpu_mem_gib,
                       mig_profile=b.mig_profile, config_name=b.config_name,
                       gpu_model=b.gpu_model)
        try:
            prof = profile(Job(**{**job.__dict__, "kind": JobKind(b.kind)}), config)
            state.rebook(a, prof, job.slowdown_bound)
        except (ElasticoError, ValueError, KeyError) as e:  # KeyError: MIG slot on a non-MIG GPU
            book.conflicts[key] = str(e)
            continue
        try:
            state.set_mps_user(key, mps_user(pod))
        except ElasticoError:  # bound before this check existed: shares with no one
            state.set_mps_user(key, f"the users of pod {key} (runAsUser invalid or mixed)")
        book.bookings[key] = (b, bool(bound_to))
        book.running.append(ActiveJob(job, config))
    return book
