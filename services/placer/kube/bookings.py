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

Bound pods are booked before reservations (each group oldest first): a bound pod runs, so
its GPUs are never given to anyone else.  What happens to a booking that cannot be entered
(the pod is in ``conflicts``; the loop decides what to tell, docs/placement.md "The live
loop's book"):

* a bound pod keeps every GPU it runs on, an unhealthy one included (``rebook(...,
  unhealthy_ok=True)``); the unhealthy GPU stays closed to new bookings;
* a bound pod whose node is out of the book (NotReady, cordoned, no valid inventory) holds
  nothing, and needs nothing held: a node out of the book takes no booking at all, and when
  it comes back its bound pods are booked first again;
* a bound pod whose booking conflicts anyway (its GPUs booked by an older bound pod, its
  GPU indices past the inventory, CPU/memory no longer free, an error) holds none of its
  resources, but its GPUs are *fenced*: marked unhealthy in the book, so no new booking goes
  there while it runs;
* a bound pod whose booking no longer parses (edited by hand, or written by another version)
  has the GPUs its ``elastico.io/gpu-uuids`` names on its node fenced the same way;
* a reservation (never ran) on an unhealthy or taken GPU, or on a node out of the book,
  holds nothing; the loop gives it up (at once, or after ``reservation_timeout_s`` for a
  node that is not usable now) and the pod is placed again.

MPS (docs/placement.md, "MPS: the daemon and users"): a node whose ``mps_down`` is set gets
:meth:`~elastico.placer.placement.ClusterState.set_mps_down` (no new MPS share there; the
bookings on it stay), and every booked pod its user (:func:`~elastico.placer.kube.mps.mps_user`,
read from the pod spec, which cannot change), so a restarted placer keeps other users off its
GPU.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Mapping, Sequence

from elastico.contract import allocated_containers
from elastico.errors import ElasticoError, InvalidArgument
from elastico.model import Configuration, Job, JobKind, Request
from elastico.placer.placement import Assignment, ClusterState, Part
from elastico.placer.round import ActiveJob
from elastico.predictor import JobProfile, SlowdownModel

from .annotations import (ALLOCATED, BOOKING, GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT,
                          MPS_ACTIVE_THREAD_PERCENTAGE, MPS_PINNED_MEM_LIMIT_GIB, SCHEDULER_NAME,
                          TENSOR_PARALLEL,
                          PodBooking, decision_annotations, parse_booking)
from .inventory import NodeInventory
from .mps import mps_user, requests_gpu

__all__ = ["pod_key", "is_elastico", "is_terminal", "allocation_acknowledged", "timestamp_s",
           "creation_s", "Book", "booked_job", "rebuild_book"]


def pod_key(pod: Mapping) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def is_elastico(pod: Mapping) -> bool:
    return (pod.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME


def is_terminal(pod: Mapping) -> bool:
    """Succeeded or Failed: its containers are gone, it holds no GPU."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def allocation_acknowledged(pod: Mapping) -> bool:
    """Whether the device plugin has allocated every GPU container of ``pod``: each container
    (init containers too) requesting ``elastico.io/gpu`` is in ``elastico.io/allocated`` as
    ``<this pod's uid>/<container>``, the form only the device plugin writes
    (:func:`elastico.nodeagent.allocation.allocated_value`).  Any other value -- written with
    the pod by its author (``"true"``), or for an earlier pod of the same name -- does not
    count, so it cannot make the placer bind a second unacknowledged pod to the node (the
    device plugin would then match neither)."""
    meta = pod.get("metadata") or {}
    done = set(allocated_containers((meta.get("annotations") or {}).get(ALLOCATED),
                                    meta.get("uid")))
    spec = pod.get("spec") or {}
    gpu = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
           if requests_gpu(c)]
    return bool(gpu) and all(c in done for c in gpu)


def timestamp_s(ts: object) -> float:
    """An API timestamp (RFC 3339, e.g. ``2024-01-01T00:00:00Z``) in seconds since the epoch
    (0 when absent)."""
    if not ts:
        return 0.0
    return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()


def creation_s(pod: Mapping) -> float:
    """``metadata.creationTimestamp`` in seconds since the epoch (0 when absent)."""
    return timestamp_s((pod.get("metadata") or {}).get("creationTimestamp"))


@dataclass
class Book:
    """The rebuilt book.  ``state``: every booking; ``running``: one fixed ActiveJob per booked
    pod (keyed by :func:`pod_key`; the round keeps them where they are -- this loop never
    moves a bound pod); ``bookings``: pod key -> its booking and whether it is bound;
    ``conflicts``: pod key -> why its booking holds nothing; ``fenced``: pod key of a bound
    pod in ``conflicts`` -> ``(node, GPU indices)`` kept from new bookings (marked unhealthy
    in ``state``) while it runs; ``errors``: pod key -> an unexpected exception its booking
    raised (a bug, not bad input; also in ``conflicts``), for the loop to report."""

    state: ClusterState
    running: list[ActiveJob] = field(default_factory=list)
    bookings: dict[str, tuple[PodBooking, bool]] = field(default_factory=dict)
    conflicts: dict[str, str] = field(default_factory=dict)
    fenced: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)


def _fence_by_uuid(book: Book, pod: Mapping, key: str, index: Mapping[str, int],
                   nodes: Sequence[NodeInventory]) -> None:
    """A bound pod whose booking does not parse: fence the GPUs of its node that its
    ``elastico.io/gpu-uuids`` annotation names (what the device plugin gave it), if any."""
    node = (pod.get("spec") or {}).get("nodeName")
    n = index.get(node) if node else None
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_UUIDS)
    if n is None or not isinstance(raw, str):
        return
    names = set(u.strip() for u in raw.split(","))
    gpus = tuple(g for g, u in enumerate(nodes[n].uuids) if u in names)
    if gpus:
        _fence(book, key, node, n, gpus)


def _fence(book: Book, key: str, node: str, n: int, gpus: tuple[int, ...]) -> None:
    """Keep GPUs ``gpus`` of node ``node`` (index ``n``), which bound pod ``key`` runs on but
    whose booking is in ``book.conflicts``, from new bookings while it runs: marked unhealthy
    in the book, listed in ``book.fenced``, and said in its conflict."""
    for g in gpus:
        book.state.mark_unhealthy(n, g)
    book.fenced[key] = (node, gpus)
    book.conflicts[key] += f"; while it runs, its GPUs {list(gpus)} of {node} take no new booking"


#: the decision annotations the device plugin enforces (elastico.nodeagent.allocation)
_ENFORCED = (GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT, MPS_ACTIVE_THREAD_PERCENTAGE,
             MPS_PINNED_MEM_LIMIT_GIB, TENSOR_PARALLEL)


def check_enforced(pod: Mapping, b: PodBooking, inv: NodeInventory) -> None:
    """The decision annotations the device plugin enforces (GPU UUIDs, MIG profile and slots,
    MPS active thread percentage and pinned memory limit) must be what booking ``b`` implies
    (:func:`~elastico.placer.kube.annotations.decision_annotations`), and its GPU UUIDs those
    of its GPU indices on ``inv``: what is booked is what is enforced.  A pod created with
    decision annotations of its own (or edited after the placer wrote them) fails here, so it
    holds nothing and its reservation is given up (a bound one has its GPUs fenced).  Raises
    InvalidArgument naming the first annotation that differs."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    want = decision_annotations(b)
    for k in _ENFORCED:
        if ann.get(k) != want[k]:
            raise InvalidArgument(k, ann.get(k), f"{want[k]!r}, what the pod's booking implies "
                                  "(decision annotations are the placer's; they are not "
                                  "written by hand)")
    have = tuple(inv.uuids[g] if 0 <= g < len(inv.uuids) else None for g in b.gpu_indices)
    if have != tuple(b.gpu_uuids):
        raise InvalidArgument(f"{BOOKING}.gpu_uuids", ",".join(b.gpu_uuids),
                              f"the UUIDs of GPUs {list(b.gpu_indices)} of node {b.node}: "
                              f"{','.join(str(u) for u in have)}")


def booked_job(key: str, pod: Mapping, b: PodBooking, spec) -> Job:
    """The job a booked pod ``key`` (booking ``b``) is in the round: what the pod declares
    (``spec``: its parsed ``elastico.io/*`` annotations,
    :class:`~elastico.placer.kube.annotations.PodSpec`; None when they no longer parse) --
    its offline LLM inference spec (``Job.llm``: low priority,
    :func:`elastico.placer.policies.priority.low_priority`), job type, priority weight,
    slowdown bound and work -- with the shape it runs (``b``'s GPUs, share, CPU and host
    memory, on its GPU model) and kind ``service``: a bound pod's requests cannot change, so
    every policy keeps it where it is (a running ``service`` keeps its place), and only the
    priority rule may take its GPUs (the loop then evicts it).  Without ``spec`` (annotations
    edited into something invalid while it runs) it is a normal-priority service of the
    booking's job type, as before.  Arrival: the pod's ``creationTimestamp``."""
    req = Request(len(b.gpu_indices), b.gpu_share if len(b.gpu_indices) == 1 else 1.0,
                  b.cpu, b.mem_gib, frozenset({b.gpu_model} if b.gpu_model else ()))
    base = Job(id=key, kind=JobKind.SERVICE, arrival_s=creation_s(pod), work=1.0, request=req,
               job_type=b.job_type, slowdown_bound=max(1.0, b.slowdown_bound))
    if spec is None:
        return base
    from .annotations import build_job

    try:
        true = build_job(key, spec, 1, b.cpu, b.mem_gib, creation_s(pod), may_resize=False)
    except (ElasticoError, ValueError):
        return base
    return Job(id=key, kind=JobKind.SERVICE, arrival_s=true.arrival_s, work=true.work,
               request=req, job_type=true.job_type, priority=true.priority,
               slowdown_bound=max(1.0, b.slowdown_bound), fixed_share=True, reshape=False,
               llm=true.llm)


def _booked_job(key: str, pod: Mapping, b: PodBooking, job_of) -> Job:
    spec = None
    if job_of is not None:
        try:
            spec = job_of(pod)
        except (ElasticoError, ValueError):
            spec = None
    return booked_job(key, pod, b, spec)


def rebuild_book(nodes: Sequence[NodeInventory], pods: Iterable[Mapping], *,
                 slowdown_model: SlowdownModel | None,
                 profile: Callable[[Job, Configuration], JobProfile],
                 job_of: Callable[[Mapping], object] | None = None) -> Book:
    """Book every reserved or bound elastico pod (module docstring) on a fresh ClusterState of
    ``nodes``: bound pods first, then reservations, each oldest first (so a conflict is
    charged to a reservation rather than a running pod, and to the later of two).
    ``profile``: the interference profile of a job running a configuration (the policy's
    ``JobCatalog.profile``), so rebooked pods are checked like placed ones.  ``job_of(pod)``:
    the pod's parsed annotations (``PodSpec``; the loop's
    :func:`~elastico.placer.kube.annotations.parse_pod_annotations` with its GPU models and
    job types), so each booked job is rebuilt as what its pod declares (:func:`booked_job`:
    an offline LLM inference pod stays low priority after a restart); None = every booked
    pod a normal-priority service.  Never raises for one pod: an unexpected error is
    recorded in ``errors`` (and ``conflicts``)."""
    index = {inv.node.name: i for i, inv in enumerate(nodes)}
    mig = [(i, g) for i, inv in enumerate(nodes) for g in inv.mig_gpus]
    state = ClusterState([inv.node for inv in nodes], mig, slowdown_model)
    for i, inv in enumerate(nodes):
        if inv.mps_down:
            state.set_mps_down(i, inv.mps_down)
    book = Book(state)
    cands = [p for p in pods if is_elastico(p) and not is_terminal(p)]
    cands.sort(key=lambda p: (not (p.get("spec") or {}).get("nodeName"), creation_s(p), pod_key(p)))
    for pod in cands:
        key = pod_key(pod)
        try:
            b = parse_booking((pod.get("metadata") or {}).get("annotations"))
        except ElasticoError as e:
            book.conflicts[key] = str(e)
            _fence_by_uuid(book, pod, key, index, nodes)
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
        job = _booked_job(key, pod, b, job_of)
        a = Assignment(job_id=key, parts=(Part(node=b.node, node_index=n, gpu_indices=b.gpu_indices,
                                               cpu=b.cpu, mem_gib=b.mem_gib,
                                               mig_starts=b.mig_starts),),
                       gpu_share=b.gpu_share, gpu_mem_gib=b.gpu_mem_gib,
                       mig_profile=b.mig_profile, config_name=b.config_name,
                       gpu_model=b.gpu_model)
        try:
            check_enforced(pod, b, nodes[n])
            prof = profile(Job(**{**job.__dict__, "kind": JobKind(b.kind)}), config)
            # a bound pod keeps the GPUs it runs on, healthy or not (module docstring)
            state.rebook(a, prof, job.slowdown_bound, unhealthy_ok=bool(bound_to))
        except Exception as e:
            # KeyError: MIG slot on a non-MIG GPU; anything but these is a bug, reported
            if not isinstance(e, (ElasticoError, ValueError, KeyError)):
                book.errors[key] = e
            book.conflicts[key] = str(e) if key not in book.errors else f"{type(e).__name__}: {e}"
            if bound_to:
                _fence(book, key, b.node, n,
                       tuple(g for g in b.gpu_indices if 0 <= g < nodes[n].node.num_gpus))
            continue
        try:
            state.set_mps_user(key, mps_user(pod))
        except ElasticoError:  # bound before this check existed: shares with no one
            state.set_mps_user(key, f"the users of pod {key} (runAsUser invalid or mixed)")
        book.bookings[key] = (b, bool(bound_to))
        book.running.append(ActiveJob(job, config))
    return book
