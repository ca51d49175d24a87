"""The live Kubernetes scheduler loop: watch pods and nodes, run rounds, write decisions, bind.

Who calls it: ``elastico schedule`` (:mod:`elastico.cli.schedule`) and the tests (against an
in-process API server).  Whom it calls: the official ``kubernetes`` client (``CoreV1Api``),
:func:`elastico.placer.round.run_round` with a policy from a factory, the pure modules of
this package, and a :class:`~elastico.placer.kube.leader.LeaseElector`.

One round (:meth:`SchedulerLoop.run_round`; docs/annotations.md has the pod's view):

1. Leader?  Only the Lease holder writes; a follower keeps its caches warm and returns.
2. Nodes -> model nodes (:mod:`.inventory`); the policy is rebuilt when they change.
3. The book is rebuilt from the pods (:mod:`.bookings`): bound and reserved pods hold their
   GPUs; nothing is booked only in memory, so a restart or a failover loses nothing.
4. Pending elastico pods are validated (:mod:`.annotations`; invalid -> ``Rejected`` Event)
   and grouped into jobs (single pods, or complete gangs).  A gang of several pods is placed
   by the loop, before the round, on the round's book (:meth:`SchedulerLoop._place_gangs`:
   ``Gang(pods=P)``, one part per pod, all or nothing; the policy cannot split a job into
   pods); the round then keeps it as booked.
5. :func:`run_round` decides, on the pending jobs in creation order.  A job keeps its
   requested GPU count and share unless its pod says ``elastico.io/resize-policy: restart``
   (docs/annotations.md, "Resizing by restart"); a round that grows such a job while another
   pending job waits is decided again with every job at its requested shape, and a job left
   waiting may have a grown ``restart`` pod evicted to give its GPUs back
   (:meth:`SchedulerLoop._reclaim`).  A placed job's pods get their decision annotations (merge
   patch carrying the pod's resourceVersion: a 409 re-reads the pod and retries, a bounded
   number of times; a failure undoes the job's other patches -- all pods or none).
   One job's error does not stop the round: a job whose handling raises (reading its pods,
   placing its gang, the decision -- found by bisection when :func:`run_round` raises --,
   its patches, its Binding, its booking) gets status ``error``, a ``SchedulingError``
   Event, ``elastico_job_errors_total{stage}`` and its traceback in the log once
   (:meth:`SchedulerLoop._job_error`); the other jobs go on.
6. Reserved pods are bound (Binding subresource), at most one unacknowledged pod per node:
   kubelet's Allocate carries no pod identity, so the device plugin identifies the pod as the
   only bound, unacknowledged elastico pod on its node.  A node holding one takes no further
   bind until the device plugin writes ``elastico.io/allocated`` or the pod runs.  A reserved
   MPS share is not bound while its node's ``elastico.io/mps`` says the daemon is down (given
   up after ``reservation_timeout_s``, like a reservation on an unusable node).

MPS (docs/placement.md, "MPS: the daemon and users"): each job's Linux user
(:func:`~elastico.placer.kube.mps.mps_user`; a bad or mixed ``runAsUser`` -> ``Rejected``)
goes into the book, and a waiting pod's Event names the MPS rule that keeps it off a GPU.

Informers (:class:`~elastico.placer.kube.informer.Informer`): list, then watch from the
list's resourceVersion with a server-side timeout; a stream that ends or drops is re-watched
from the last resourceVersion seen, a ``410 Gone`` (or any other error) relists, and every
``resync_s`` the cache is relisted anyway.  A write's response is put into the cache at once (the informer ignores an
older event of the same object that arrives later), so the next round never re-places a pod
that was just reserved.

Through the services (``elastico schedule --pricing-address/--predictor-address``: a
``policy_factory`` pricing with :class:`~elastico.placer.rpc.remote.RemotePricer` and a
:class:`~elastico.placer.rpc.remote.RemoteSlowdownModel` as ``slowdown``): every call of a round
shares the round's deadline (``round_timeout_s``).  Pricing that fails or outlives it abandons
the round before anything is written -- no annotation, no bind, no Event; the pods stay
pending and the next round starts again from the API's state.  A predictor that fails makes
the round *degraded*: the analytic model answers for the rest of the round, the jobs placed
in it get status ``degraded``, and the ``elastico.round`` span's ``round.degraded_reason`` and
``elastico_rounds_degraded_total`` say why.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from elastico.contract import MIG_LENDING
from elastico.errors import ElasticoError, InvalidArgument
from elastico.runtime.metrics import LoopMetrics
from elastico.model import Configuration, Job, JobKind, Node
from elastico.placer.placement import ClusterState, Gang
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.common import JobCatalog
from elastico.placer.policies.priority import low_priority
from elastico.placer.rpc.remote import DependencyUnavailable, RoundDeadlineExceeded, round_deadline
from elastico.placer.round import (ActiveJob, Decision, MarkDegraded, Policy, RoundInput, Status,
                                   unknown_reason,
                                   run_round)
from elastico.placer.upkeep import finish_round, start_round
from elastico.predictor import AnalyticSlowdown, SlowdownModel
from elastico.shapes import config_name, fits_memory, requested_configuration
from elastico.perf.throughput import ThroughputModel
from elastico.tracing import NOOP, Tracer

from . import annotations as A
from .bookings import (allocation_acknowledged, creation_s, is_elastico, is_terminal, pod_key,
                       rebuild_book, timestamp_s)
from .events import EventRecorder
from .informer import Informer
from .inventory import NodeInventory, node_inventory
from .lending import LendingView, after_switches, lending_view
from .leader import LeaseElector
from .mps import mps_user

__all__ = ["LoopConfig", "RoundReport", "SchedulerLoop", "default_policy_factory"]

log = logging.getLogger(__name__)
_GIB = 1 << 30
MERGE_PATCH = "application/merge-patch+json"


@dataclass
class LoopConfig:
    """Tunables (seconds).  ``event_interval_s``: the same Event (pod, reason, message) is
    not repeated sooner; ``reservation_timeout_s``: a reservation whose node stays unusable
    this long is given up and the pod goes back to pending; ``round_timeout_s``: the deadline
    of a round's pricing and predictor calls, together (remote services only)."""

    identity: str = "elastico-placer"
    round_interval_s: float = 2.0
    watch_timeout_s: int = 60
    resync_s: float = 300.0
    event_interval_s: float = 300.0
    reservation_timeout_s: float = 120.0
    max_conflict_retries: int = 3
    policy: str = "elastico"
    round_timeout_s: float = 30.0
    # resize-policy: restart (docs/annotations.md, "Resizing by restart"): a job's pods are
    # evicted at most resize_max_restarts times per resize_window_s (then it keeps its
    # requested shape), and only a pod that ran resize_min_run_s (the round's dwell: 10 x a
    # 30 s restart) since it started
    resize_max_restarts: int = 3
    resize_window_s: float = 3600.0
    resize_min_run_s: float = 300.0
    # offline LLM inference is low priority (elastico.placer.policies.priority): a bound
    # one is evicted for a waiting normal-priority job only after it ran min_run_s seconds
    # since its status.startTime (the simulator's --min-run-s; used by the default policy
    # factory -- a factory of one's own passes its own to default_policy_factory)
    min_run_s: float = 300.0
    # MIG lending (docs/mig.md, "Lending"; elastico.placer.policies.mig_lending): the policy
    # lends an empty MIG-mode node whole while jobs wait that only whole GPUs serve -- only a
    # node whose agent follows the bookings' MIG mode (elastico.io/mig-follow: "true",
    # `elastico nodeagent --follow-mig-mode`); the lent GPUs are kept on the Node
    # (elastico.io/mig-lending, lending.py).  False: every node keeps the mode its agent reports
    mig_lending: bool = True


@dataclass
class RoundReport:
    """What one round did (for logs and tests): pod keys by outcome."""

    leader: bool
    round_id: str = ""
    decisions: dict = field(default_factory=dict)
    reserved: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    abandoned: str = ""  # why the round was given up before any write ("" = it was not)
    # pod key -> the error its handling raised this round (a SchedulingError Event says it)
    errors: dict[str, str] = field(default_factory=dict)
    # MIG lending: node name -> its elastico.io/mig-lending value written this round (None =
    # removed); the policy's mode changes behind them are in the round's span and log
    mig_lending: dict[str, str | None] = field(default_factory=dict)

    def pod_counts(self) -> dict[str, int]:
        return {"reserved": len(self.reserved), "bound": len(self.bound), "held": len(self.held),
                "waiting": len(self.waiting), "rejected": len(self.rejected),
                "error": len(self.errors)}


class _CountedEvents(EventRecorder):
    """An :class:`EventRecorder` that counts the Events it writes (``elastico_events_total``)."""

    def __init__(self, *args, metrics: LoopMetrics | None = None, **kw):
        super().__init__(*args, **kw)
        self.metrics = metrics

    def emit(self, pod: Mapping, reason: str, message: str, now: float, *,
             warning: bool = False) -> bool:
        written = super().emit(pod, reason, message, now, warning=warning)
        if written and self.metrics is not None:
            self.metrics.events.labels(reason).inc()
        return written


def default_policy_factory(throughput: ThroughputModel, slowdown: SlowdownModel, *,
                           policy: str = "elastico", tracer: Tracer = NOOP,
                           pricer: Callable | None = None, min_run_s: float = 300.0):
    """``nodes -> make_policy(policy, PolicyEnv(...))``: prices with ``pricer`` (None =
    in-process :func:`elastico.pricing.solve`; a
    :class:`~elastico.placer.rpc.remote.RemotePricer` = PricingService) and predicts with
    ``slowdown`` (in-process, or a :class:`~elastico.placer.rpc.remote.RemoteSlowdownModel`).
    A job here is the pods its user created, so the policy never splits one into replica pods
    on several nodes (``replica_pods=False``).  Remaining work is the user's estimate: a
    pod's ``elastico.io/work`` annotation is its ``Job.work`` (``remaining_estimate="user"``,
    policies/remaining.py).  ``min_run_s``: the priority rule's minimum guaranteed run
    (``PolicyEnv.min_run_s``; :func:`make_policy` wraps the policy in the rule the simulator
    applies, :class:`~elastico.placer.policies.priority.PriorityPreemption`).

    The factory takes ``mig_home`` (node index -> GPU indices whose home mode is MIG, of the
    nodes that may be lent: :class:`~elastico.placer.kube.lending.LendingView`'s ``home``);
    the loop passes it only when some node may be lent, and without it the policy keeps every
    node's MIG mode (``PolicyEnv.mig_lending`` False)."""
    def build(nodes: Sequence[Node], mig_home: Mapping[int, tuple[int, ...]] | None = None
              ) -> Policy:
        return make_policy(policy, PolicyEnv(nodes=list(nodes), throughput=throughput,
                                             slowdown=slowdown, tracer=tracer, pricer=pricer,
                                             replica_pods=False, remaining_estimate="user",
                                             min_run_s=min_run_s,
                                             mig_lending=bool(mig_home), mig_home=mig_home))
    return build


def _requests(pod: Mapping) -> tuple[float, float, list[str]]:
    """(CPU cores, memory GiB) the pod requests (sum over its containers; an init container
    runs alone, so the larger of that and the largest init container) and the names of
    containers whose ``elastico.io/gpu`` request is not 1."""
    spec = pod.get("spec") or {}
    cpu = mem = 0.0
    bad, handles = [], 0
    for c in spec.get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        lim = (c.get("resources") or {}).get("limits") or {}
        cpu += float(parse_quantity(str(req.get("cpu", lim.get("cpu", "0")))))
        mem += float(parse_quantity(str(req.get("memory", lim.get("memory", "0"))))) / _GIB
        g = req.get(A.GPU_RESOURCE, lim.get(A.GPU_RESOURCE))
        if g is not None:
            handles += 1
            if str(g) != "1":
                bad.append(f"{c.get('name')}={g}")
    for c in spec.get("initContainers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu = max(cpu, float(parse_quantity(str(req.get("cpu", "0")))))
        mem = max(mem, float(parse_quantity(str(req.get("memory", "0")))) / _GIB)
    if handles == 0:
        bad.append("no container requests it")
    return cpu, mem, bad


def _gang_configuration(job: Job, pods: int, gpu_model: str, gpu_mem_gib: float,
                        throughput: ThroughputModel) -> Configuration:
    """The requested shape of a gang ``job`` of ``pods`` equal pods on ``gpu_model`` GPUs of
    ``gpu_mem_gib`` GiB: ``job``'s GPUs, CPU cores and host GiB in total (whole GPUs), with
    the normalized throughput of *one pod's* requested shape (the pods run the same shape,
    so the gang's speed relative to its request on the reference GPU is a pod's).  The
    throughput model is asked about one pod's GPUs only: it knows data-parallel speedups up
    to 8 GPUs (Gavel's measurements) and a gang may have up to 64 (2 pods x 8 GPUs = 16
    must not be looked up as one 16-GPU process).  Raises InvalidArgument as
    :func:`~elastico.shapes.requested_configuration` does (e.g. a job type the model does
    not know)."""
    req = job.request
    per_pod = dataclasses.replace(job, request=dataclasses.replace(
        req, num_gpus=req.num_gpus // pods, cpu=req.cpu / pods, mem_gib=req.mem_gib / pods))
    one = requested_configuration(per_pod, gpu_model, gpu_mem_gib, whole_gpus=True,
                                  model=throughput)
    return dataclasses.replace(one, name=config_name(gpu_model, req.num_gpus, one.gpu_share),
                               num_gpus=req.num_gpus, cpu=req.cpu, mem_gib=req.mem_gib)


def _minus_other_pods(invs: list[NodeInventory], pods) -> list[NodeInventory]:
    """The nodes with the CPU and memory requested by pods of other schedulers (bound, not
    finished) taken off, so an elastico pod is never bound where kubelet would refuse it.
    The policy keeps the full nodes (its prices only need the GPUs); placement uses these."""
    used: dict[str, list[float]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not is_elastico(pod) and not is_terminal(pod):
            cpu, mem, _ = _requests(pod)
            u = used.setdefault(node, [0.0, 0.0])
            u[0] += cpu
            u[1] += mem
    out = []
    for inv in invs:
        u = used.get(inv.node.name)
        if u:
            inv = dataclasses.replace(inv, node=dataclasses.replace(
                inv.node, cpu=max(0.0, inv.node.cpu - u[0]), mem_gib=max(0.0, inv.node.mem_gib - u[1])))
        out.append(inv)
    return out


#: What each stage of :data:`elastico.runtime.metrics.JOB_ERROR_STAGES` means, for the Event.
_STAGE_WORDS = {"pod": "reading the pod's annotations and requests",
                "gang": "placing its gang", "round": "deciding in the scheduling round",
                "reserve": "writing its decision", "bind": "binding it",
                "book": "rebuilding its booking",
                "preempt": "evicting it for a job of higher priority"}


class _SkipJobs:
    """``policy`` without the jobs of ``errors`` (job id -> cause): the policy never sees
    them, and each gets an ``error`` decision with its cause, so the round's span and metrics
    count it (``round.error``)."""

    def __init__(self, policy: Policy, errors: Mapping[str, str]):
        self.policy, self.errors, self.name = policy, errors, policy.name

    def __call__(self, inp: RoundInput, state: ClusterState):
        if not self.errors:
            return self.policy(inp, state)
        res = self.policy(dataclasses.replace(
            inp, jobs=[a for a in inp.jobs if a.job.id not in self.errors]), state)
        for a in inp.jobs:
            if a.job.id in self.errors:
                res.decisions[a.job.id] = Decision(a.job.id, Status.ERROR, None,
                                                   reason=self.errors[a.job.id])
        return res


class SchedulerLoop:
    """The placer's Kubernetes loop (module docstring).

    ``core``: a ``CoreV1Api``.  ``policy_factory(nodes) -> Policy``: called when the usable
    nodes change (default :func:`default_policy_factory`: in-process pricing and analytic
    slowdowns; pass one building remote clients to use the gRPC services).  ``elector``:
    None = always leader (one replica, tests).  ``clock``: wall-clock seconds (Event times,
    reservation timeouts, the round's ``now``).  ``tracer``: one ``placer.bind`` span per bind
    (plus the round's spans when the policy was built with the same tracer).  ``metrics``:
    :class:`~elastico.runtime.metrics.LoopMetrics` to record rounds, binds and Events into.
    ``heartbeat``: :func:`time.monotonic` at the last turn of :meth:`run_forever` (health).
    ``profile_lookup(job keys) -> {key: known slots} | known keys | None``: the unknown-job
    rule (issue 23; :meth:`_mark_unknown`): jobs without a stored solo profile on the GPU
    model (and MPS share) they would run with are co-located only where the
    contention prior's worst case keeps every resident within its bound, and their pods get an
    ``UnknownProfile`` Event saying where they run and why."""

    def __init__(self, core: CoreV1Api, *, throughput: ThroughputModel | None = None,
                 slowdown: SlowdownModel | None = None,
                 policy_factory: Callable[[Sequence[Node]], Policy] | None = None,
                 elector: LeaseElector | None = None, config: LoopConfig | None = None,
                 tracer: Tracer = NOOP, clock: Callable[[], float] = time.time,
                 metrics: LoopMetrics | None = None,
                 profile_lookup: Callable[[list[str]], dict[str, set[tuple]] | set[str] | None]
                 | None = None):
        self.core = core
        self.metrics = metrics
        # issue 23: job keys -> {key: slots (GPU model, mechanism, MPS share, MIG profile)
        # with a stored solo profile} (None = lookup failed; a plain set of keys = known on
        # every slot, an older predictor); None = every job is taken as profiled (no
        # unknown-job rule).  E.g. RemoteSlowdownModel.known_profiles, or
        # ProfileStore.known_slots in process.
        self.profile_lookup = profile_lookup
        self._known_profiles: dict[str, set[tuple]] = {}
        self.heartbeat = time.monotonic()
        self.config = config or LoopConfig()
        self.throughput = throughput or ThroughputModel.bundled()
        self.slowdown = slowdown or AnalyticSlowdown()
        self.policy_factory = policy_factory or default_policy_factory(
            self.throughput, self.slowdown, policy=self.config.policy, tracer=tracer,
            min_run_s=self.config.min_run_s)
        self.elector, self.tracer, self.clock = elector, tracer, clock
        self.wake = threading.Event()
        cfg = self.config
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, on_change=self.wake.set,
                             watch_timeout_s=cfg.watch_timeout_s, resync_s=cfg.resync_s)
        self.nodes = Informer("nodes", core.list_node, on_change=self.wake.set,
                              watch_timeout_s=cfg.watch_timeout_s, resync_s=cfg.resync_s)
        self._known_models = tuple(self.throughput.gpu_models())
        self._job_types = tuple(self.throughput.job_types())
        self._policy: Policy | None = None
        self._policy_nodes: tuple | None = None
        self._catalog: JobCatalog | None = None
        self._jobs_seen: frozenset[str] = frozenset()
        self.events = _CountedEvents(core, self.config.identity, metrics=metrics,
                                     interval_s=self.config.event_interval_s, leading=self.leading)
        self._node_reasons: dict[str, str] = {}
        self._node_annotations: dict[str, Mapping[str, str]] = {}  # node -> its annotations
        self._lending_notes: dict[str, str] = {}  # node -> why its lent state was not used
        self._mps_down: dict[str, str] = {}  # node -> why its MPS daemon is not ready
        self._mps_held_since: dict[str, float] = {}  # reserved pod -> held for MPS since
        self._unusable_since: dict[str, float] = {}
        self._resizes: dict[str, list[float]] = {}  # job group -> times this replica evicted one
        # uid of a pod this replica asked to evict for the priority rule -> when: asked once
        # (its booking goes when the pod does, never by a patch of ours)
        self._preempting: dict[str, float] = {}
        self._round_pods: Mapping[str, dict] = {}
        # (job id, stage, cause) of the job errors of the last round / this round: a job that
        # keeps failing the same way has its traceback logged once (_job_error)
        self._errors_logged: set[tuple[str, str, str]] = set()
        self._errors_now: set[tuple[str, str, str]] = set()
        self._seq = itertools.count(1)
        self._epoch = int(clock())
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the two informer threads."""
        for inf in (self.pods, self.nodes):
            t = threading.Thread(target=inf.run, args=(self._stop,), daemon=True,
                                 name=f"informer-{inf.name}")
            t.start()
            self._threads.append(t)

    def wait_synced(self, timeout: float = 30.0) -> bool:
        return self.pods.synced.wait(timeout) and self.nodes.synced.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        for inf in (self.pods, self.nodes):
            inf.stop()
        for t in self._threads:
            t.join(5)
        if self.elector is not None:
            self.elector.release()

    def run_forever(self, stop: threading.Event) -> None:
        """Rounds every ``round_interval_s`` (sooner when a watch reports a change, at most
        one round per second) until ``stop`` is set.  A round that fails is logged; it
        changed nothing it did not finish (each write is on its own, see module docstring)."""
        self.start()
        try:
            # up to 30 s for the first lists, but a stop meanwhile (an API server that is not
            # there yet) ends it at once instead of after the wait
            end = time.monotonic() + 30.0
            while not (stop.is_set() or self.pods.synced.is_set() and self.nodes.synced.is_set()
                       or time.monotonic() >= end):
                stop.wait(0.2)
            while not stop.is_set():
                t0 = self.heartbeat = time.monotonic()
                try:
                    self.run_round()
                except Exception:
                    log.exception("round failed; the next round starts from the API's state")
                    if self.metrics is not None:
                        self.metrics.observe_loop_round("failed")
                self.wake.clear()
                self.wake.wait(self.config.round_interval_s)
                stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))
        finally:
            self.stop()

    # ------------------------------------------------------------------ the round
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _inventory(self) -> list[NodeInventory]:
        out = []
        nodes = sorted(self.nodes.snapshot().items())
        self._node_annotations = {name: (obj.get("metadata") or {}).get("annotations") or {}
                                  for name, obj in nodes}
        for name, obj in nodes:
            inv = node_inventory(obj, known_models=self._known_models, quantity=parse_quantity)
            if isinstance(inv, str):
                if self._node_reasons.get(name) != inv:
                    log.info("node %s hosts no elastico pod: %s", name, inv)
                self._node_reasons[name] = inv
                continue
            self._node_reasons.pop(name, None)
            out.append(inv)
        self._mps_down = {i.node.name: i.mps_down for i in out if i.mps_down}
        return out

    def _policy_for(self, invs: list[NodeInventory],
                    mig_home: Mapping[int, tuple[int, ...]] | None = None) -> Policy:
        """The policy for these nodes, rebuilt only when they change: a node, its MIG GPUs, or
        -- for the nodes that may be lent (``mig_home``) -- their home MIG GPUs, not the
        modes lending switches (a rebuilt policy loses its prices and dwell clocks)."""
        mig_home = mig_home or {}
        sig = tuple((i.node, mig_home.get(k, i.mig_gpus), k in mig_home)
                    for k, i in enumerate(invs))
        if self._policy is None or sig != self._policy_nodes:
            nodes = [i.node for i in invs]
            self._policy = (self.policy_factory(nodes, mig_home=dict(mig_home)) if mig_home
                            else self.policy_factory(nodes))
            self._catalog = JobCatalog(PolicyEnv(nodes=nodes, throughput=self.throughput,
                                                 slowdown=self.slowdown))
            self._policy_nodes = sig
            self._jobs_seen = frozenset()
        return self._policy

    def run_round(self) -> RoundReport:
        """One round (module docstring).  Returns what it did."""
        leader = self.elector is None or self.elector.try_acquire_or_renew()
        m = self.metrics
        if m is not None:
            m.leader.set(1 if leader else 0)
        if not leader:
            if m is not None:
                m.observe_loop_round("standby")
            return RoundReport(leader=False)
        t0 = time.perf_counter()
        report = self._lead_round()
        if m is not None:
            m.observe_loop_round("abandoned" if report.abandoned else "completed",
                                 time.perf_counter() - t0, report.pod_counts())
        return report

    def _placing_model(self) -> SlowdownModel:
        """The slowdown model of the loop's own placements (gangs, reclaim trials): with the
        bound rule (:class:`elastico.predictor.prior.UnknownSafe`: the mechanism bound for
        unknown jobs and for pairs outside the prediction's validated domain), as the
        elastico policy's own placements."""
        from elastico.predictor.prior import UnknownSafe

        return UnknownSafe(self.slowdown)

    def _mark_unknown(self, pods: dict, policy: Policy) -> None:
        """The unknown-job rule (issue 23, docs/predictor.md "Unknown jobs"): ask
        ``profile_lookup`` on which slots (GPU model, mechanism, MPS share, MIG profile:
        :func:`~elastico.placer.policies.common.profile_slot`) each job (pod group key) has a
        stored solo profile, and mark it unknown on the others in the loop's and the policy's
        catalogue -- both the job key (a pending job) and its pods' keys (a booked pod is a
        job of its own in the rebuilt book).  Counters are not portable across GPU models or
        MPS shares, so a job profiled on one model is unknown on another until it has run
        alone there.  A job known everywhere (a plain-set answer, an older predictor) is not
        asked again; the others are asked each round (a new slot may have been profiled).
        A failed lookup (None) keeps what was known: the safe side for the rest."""
        from ..policies.common import ANY_SLOT

        groups = {pod_key(p): A.job_group(p) for p in pods.values()
                  if is_elastico(p) and not is_terminal(p)}
        ask = sorted(g for g in set(groups.values())
                     if ANY_SLOT not in self._known_profiles.get(g, ()))
        if ask:
            got = self.profile_lookup(ask)
            if got is None:
                log.info("profile lookup failed: %d jobs stay unknown where not known", len(ask))
            elif isinstance(got, dict):
                for g, slots in got.items():
                    self._known_profiles.setdefault(g, set()).update(slots)
            else:  # a set of keys: known on every slot
                for g in got:
                    self._known_profiles[g] = {ANY_SLOT}
        known = {g: set(self._known_profiles.get(g, ())) for g in set(groups.values())}
        known.update({k: known[g] for k, g in groups.items()})
        unknown = {k for k, slots in known.items() if ANY_SLOT not in slots}
        for cat in (self._catalog, getattr(policy, "catalog", None)):
            if cat is None or (cat is not self._catalog
                               and not getattr(policy, "handles_unknown", False)):
                continue
            cat.unknown = unknown
            cat.known = {k: v for k, v in known.items() if v}

    def _lead_round(self) -> RoundReport:
        now = self.clock()
        report = RoundReport(leader=True, round_id=f"{self.config.identity}/{self._epoch}/{next(self._seq)}")
        start_round(self.slowdown)  # a remote predictor is tried again each round
        invs = self._inventory()
        pods = self.pods.snapshot()
        self._round_pods = pods
        reported = {i.node.name: i.mig_gpus for i in invs}
        view = self._lending_view(invs, pods)
        invs = view.invs
        by_node = {i.node.name: i for i in invs}
        policy = self._policy_for(invs, view.home)
        invs = _minus_other_pods(invs, pods.values())
        deadline = time.monotonic() + self.config.round_timeout_s
        if self.profile_lookup is not None:
            self._mark_unknown(pods, policy)
        with round_deadline(self.config.round_timeout_s):
            book = rebuild_book(invs, pods.values(), slowdown_model=self.slowdown,
                                profile=self._catalog.profile, job_of=self._pod_spec)
        self._errors_logged, self._errors_now = self._errors_now, set()
        for key, e in book.errors.items():
            self._job_error(key, [key], "book", e, pods, report, now)
        self._handle_conflicts(book, pods, now)
        jobs, members = self._pending_jobs(pods, book, report, now)
        # first come, first served among equals: the round sees pending jobs in creation order
        jobs.sort(key=lambda j: (j.arrival_s, j.id))
        for job in jobs:  # MPS: one user per GPU (the pods' users were checked in _pending_jobs)
            book.state.set_mps_user(job.id, mps_user(pods[members[job.id][0]]))
        active = book.running
        switches: list = []  # the round's MIG mode changes (MIG lending), if the policy ran
        if jobs:
            errors: dict[str, tuple[str, Exception]] = {}
            try:
                with round_deadline(max(0.0, deadline - time.monotonic())):
                    # gangs first, on the round's book: the round sees them as booked
                    gangs = self._place_gangs_apart([j for j in jobs if len(members[j.id]) > 1],
                                                    members, book, errors)

                    def decide(jobs):
                        pending = [ActiveJob(j, gangs[j.id].config) if j.id in gangs
                                   else ActiveJob(j) for j in jobs if j.id not in errors
                                   and (j.id not in gangs or gangs[j.id].assignment is not None)]
                        return self._decide(policy, now, invs, book, jobs, pending, errors)
                    result, active = decide(jobs)
                    if _grows_while_others_wait(jobs, result.decisions):
                        # a job gets more than it asked only with room no pending job could
                        # use: redo the round with every job at its requested shape
                        jobs = [dataclasses.replace(j, reshape=False) for j in jobs]
                        result, active = decide(jobs)
                    switches = list(getattr(result, "mig_switches", None) or ())
            except (DependencyUnavailable, RoundDeadlineExceeded) as e:
                report.abandoned = str(e)
                log.warning("round %s abandoned, nothing applied: %s", report.round_id, e)
                return report
            for jid, (stage, e) in errors.items():
                self._job_error(jid, members[jid], stage, e, pods, report, now)
            why = getattr(self.slowdown, "degraded", "")
            for jid, d in gangs.items():
                if why and d.status is Status.PLACED:
                    gangs[jid] = dataclasses.replace(d, status=Status.DEGRADED,
                                                     reason=f"{d.reason}; {why}")
            report.decisions = {j.id: result.decisions[j.id] if j.id in errors
                                else gangs.get(j.id) or result.decisions[j.id] for j in jobs}
            # the priority rule's evictions: carried out on the victims' pods; the jobs they
            # make room for wait until the victims are gone
            held = self._preempt_pods(result, book, pods, report, now)
            reclaim: dict = {"state": None, "used": set()}  # _reclaim's trial book this round
            lent_now = sorted({s.node for s in switches if not s.on})  # said in Waiting Events
            for job in jobs:
                d = report.decisions[job.id]
                names = members[job.id]
                if d.status is Status.ERROR:
                    continue  # told above (_job_error)
                if job.id in held and d.status in (Status.PLACED, Status.DEGRADED):
                    why = (f"preempting {', '.join(held[job.id])} (offline LLM inference, low "
                           f"priority, past its minimum guaranteed run of "
                           f"{self.config.min_run_s:g} s); placed once they are gone")
                    report.decisions[job.id] = Decision(job.id, Status.WAITING, None, reason=why)
                    for key in names:
                        report.waiting[key] = why
                        self.events.emit(pods[key], "Waiting", f"waiting: {why}", now)
                    continue
                if d.status in (Status.PLACED, Status.DEGRADED) and d.assignment is not None:
                    if not self.leading():
                        break
                    try:
                        self._reserve(job, d, names, by_node, report, now)
                    except Exception as e:
                        self._job_error(job.id, names, "reserve", e, pods, report, now)
                        for key in names:  # all pods or none (the _reserve contract)
                            self._clear_quietly(key)
                    else:
                        why_unknown = unknown_reason(d.reason)
                        if why_unknown:  # issue 23: the unknown-job rule's decision, said
                            for key in names:
                                self.events.emit(pods[key], "UnknownProfile", why_unknown, now)
                else:
                    why = self._mps_why(result.state if job.id not in gangs else book.state, job,
                                        d.reason or d.status.value) + self._unusable_nodes()
                    if d.status is Status.WAITING and len(names) == 1 and self.leading():
                        why += self._reclaim(job, reclaim, result.state, book, pods, now)
                    if d.status is Status.WAITING and lent_now:
                        why += (f"; MIG node(s) {', '.join(lent_now)} lent whole to the jobs "
                                "waiting for whole GPUs of their model (placed from the next "
                                "round)")
                    for key in names:
                        report.waiting[key] = why
                        self.events.emit(pods[key], "Waiting", f"{d.status.value}: {why}", now)
        if self.leading():
            self._write_lending(view, switches, reported, report)
        self._jobs_seen = finish_round(policy, self.slowdown, self._jobs_seen,
                                       (a.job.id for a in active), self.metrics)
        self._bind_reserved(report, now)
        self.events.prune((p.get("metadata") or {}).get("uid") for p in pods.values())
        return report

    def _lending_view(self, invs: list[NodeInventory], pods: Mapping[str, dict]) -> LendingView:
        """The round's MIG view (:func:`~.lending.lending_view`) from the Nodes' annotations
        and every booking the pods carry; a node whose lent state is not used is logged once
        per reason."""
        bookings = []
        for pod in pods.values() if self.config.mig_lending else ():
            if is_elastico(pod) and not is_terminal(pod):
                try:
                    b = A.parse_booking((pod.get("metadata") or {}).get("annotations"))
                except ElasticoError:
                    continue  # the book reports it (rebuild_book's errors)
                if b is not None:
                    bookings.append(b)
        view = lending_view(invs, self._node_annotations, bookings,
                            enabled=self.config.mig_lending)
        for name, why in view.notes.items():
            if self._lending_notes.get(name) != why:
                log.warning("node %s: %s", name, why)
        self._lending_notes = dict(view.notes)
        return view

    def _write_lending(self, view: LendingView, switches: Sequence, reported: Mapping,
                       report: RoundReport) -> None:
        """Write each node's new :data:`~elastico.contract.MIG_LENDING` value (the round's MIG
        mode changes, and the returning GPUs the agent reports in MIG mode again:
        :func:`~.lending.after_switches`).  A write that fails is logged and changes nothing:
        lending acts after the round's placement, so no booking of this round depends on it,
        and the next round reads the Node as it is."""
        for s in switches:
            log.info("MIG lending: node %s GPUs %s to %s mode: %s", s.node, list(s.gpus),
                     "MIG" if s.on else "normal", s.reason)
        written = set()
        for name, lent in after_switches(view, switches, reported).items():
            value = lent.annotation()
            try:
                resp = self.core.patch_node(
                    name, {"metadata": {"annotations": {MIG_LENDING: value}}},
                    _content_type=MERGE_PATCH, _preload_content=False)
                self.nodes.assume(json.loads(resp.data))  # the next round reads it at once
            except (ApiException, OSError, ValueError) as e:
                log.warning("node %s: writing %s=%s failed (%s); the next round reads the Node "
                            "as it is", name, MIG_LENDING, value, getattr(e, "reason", e))
                continue
            report.mig_lending[name] = value
            written.add(name)
        if self.metrics is not None:
            for s in switches:
                if s.node in written:
                    self.metrics.mig_switches.labels("mig" if s.on else "normal").inc()

    def _unusable_nodes(self) -> str:
        """``; nodes not usable now: <node>: <why>, ...`` (three at most), or ""."""
        if not self._node_reasons:
            return ""
        items = sorted(self._node_reasons.items())
        more = f" and {len(items) - 3} more" if len(items) > 3 else ""
        return "; nodes not usable now: " + ", ".join(f"{n}: {w}" for n, w in items[:3]) + more

    def _restarts_left(self, group: str, now: float) -> int:
        """Evictions left in ``group``'s restart budget (``resize_max_restarts`` per
        ``resize_window_s``, counted by this replica)."""
        times = [t for t in self._resizes.get(group, ()) if now - t < self.config.resize_window_s]
        if times:
            self._resizes[group] = times
        else:
            self._resizes.pop(group, None)
        return self.config.resize_max_restarts - len(times)

    def _grown_pods(self, book, pods: dict, now: float) -> list[tuple]:
        """Bound pods the placer may evict to give GPUs back: ``resize-policy: restart``, not
        terminating, booked with more than they asked (:func:`_upsized`), running at least
        ``resize_min_run_s`` (``status.startTime``, else ``creationTimestamp``), restarts left
        in their job's budget.  Most GPUs held first, then by pod key:
        ``(-GPUs held, key, pod, PodSpec, PodBooking, job group)``."""
        out = []
        for key, (b, bound) in book.bookings.items():
            pod = pods.get(key)
            meta = (pod or {}).get("metadata") or {}
            if not bound or meta.get("deletionTimestamp"):
                continue
            try:
                spec = A.parse_pod_annotations(meta.get("annotations"), gpu_models=self._known_models,
                                               job_types=self._job_types)
            except ElasticoError:
                continue
            if spec.resize_policy != "restart" or not _upsized(b.configuration(), spec.gpus,
                                                                spec.gpu_fraction):
                continue
            started = (pod.get("status") or {}).get("startTime")
            since = timestamp_s(started) if started else creation_s(pod)
            group = A.job_group(pod)
            if now - since < self.config.resize_min_run_s or self._restarts_left(group, now) < 1:
                continue
            out.append((-len(b.gpu_indices) * b.gpu_share, key, pod, spec, b, group))
        return sorted(out, key=lambda v: (v[0], v[1]))

    def _reclaim(self, job: Job, ctx: dict, state: ClusterState, book, pods: dict,
                 now: float) -> str:
        """Give back GPUs a waiting ``job`` needs: of :meth:`_grown_pods`, the first such that
        with it shrunk to its requested shape both ``job`` (its requested shape, placed first)
        and the shrunk pod fit; evict it (policy/v1 Eviction, so PodDisruptionBudgets hold;
        its controller recreates it, and the next rounds place the two once it is gone).
        ``state``: the round's book; ``ctx``: this round's trial book, candidates and the pods
        already evicted (each waiting job counts on the room of those before it).  Returns
        the words to add to the job's waiting reason ("" when nothing is evicted)."""
        if ctx.get("victims") is None:
            ctx["victims"] = self._grown_pods(book, pods, now)
        victims = [v for v in ctx["victims"] if v[1] not in ctx["used"]]
        if not victims:
            return ""
        if ctx["state"] is None:
            ctx["state"] = state.copy()
        cat, whole = self._catalog, job.kind is JobKind.SERVICE
        for _, key, pod, spec, b, group in victims:
            if self._restarts_left(group, now) < 1:  # another pod of its job went first
                continue
            trial = ctx["state"].copy()
            trial.release(key)
            cpu, mem, _ = _requests(pod)
            try:
                small = A.build_job(key, spec, 1, cpu, mem, creation_s(pod), may_resize=False)
                shrunk = requested_configuration(small, b.gpu_model, cat.gpu_models[b.gpu_model][1],
                                                 whole_gpus=False, model=self.throughput)
            except (ElasticoError, ValueError, KeyError):
                continue
            if not any(trial.place(job.id, c, cat.profile(job, c), job.slowdown_bound,
                                   self._placing_model(), scorer=cat.env.scorer).placed
                       for c in cat.requested(job, whole)):
                continue
            if not trial.place(key, shrunk, cat.profile(small, shrunk), small.slowdown_bound,
                               self._placing_model(), scorer=cat.env.scorer).placed:
                continue
            ns, name = key.split("/", 1)
            uid = (pod.get("metadata") or {}).get("uid")
            try:
                self.core.create_namespaced_pod_eviction(name, ns, {
                    "apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                    "deleteOptions": {"preconditions": {"uid": uid}}}, _preload_content=False)
            except ApiException as e:  # 429: a PodDisruptionBudget says not now
                log.info("eviction of %s to give back GPUs refused: %s %s", key, e.status, e.reason)
                continue
            self._resizes.setdefault(group, []).append(now)
            ctx["state"] = trial
            ctx["used"].add(key)
            left = self._restarts_left(group, now)
            self.events.emit(pod, "Resizing", (
                f"evicted to give back GPUs: it holds {b.config_name} (asked {spec.gpus} x "
                f"{spec.gpu_fraction:g}) and {job.id} waits for them; its controller recreates it "
                f"({A.RESIZE_POLICY}: restart; {left} restart(s) left in "
                f"{self.config.resize_window_s:g} s)"), now)
            return (f"; evicting {key} ({A.RESIZE_POLICY}: restart, holds {b.config_name}, asked "
                    f"{spec.gpus} x {spec.gpu_fraction:g}) to give back its GPUs")
        return ""

    def _mps_why(self, state: ClusterState, job: Job, why: str) -> str:
        """``why`` plus, when the MPS rules (daemon down, another user on the GPU) keep the
        job's requested shape off every GPU that would otherwise take it, what they are."""
        try:
            configs = self._catalog.requested(job, False)
        except (ElasticoError, ValueError):  # the round said why it waits already
            return why
        for c in configs:
            extra = state.mps_obstacle(job.id, c)
            if extra:
                return why if extra in why else f"{why}; {extra}"
        return why

    def _place_gangs(self, gangs: Sequence[Job], members: Mapping[str, list[str]],
                     state: ClusterState) -> dict[str, Decision]:
        """Book each gang of several pods still to place on ``state``, all of its pods or none
        (:meth:`ClusterState.place` with ``Gang(pods=P)``: one pod per part, each on one node;
        one node, else one topology domain, else anywhere; no two pods on one GPU), oldest
        first, on the first allowed GPU model where it fits.  A gang keeps its requested
        shape (``build_job``): ``P`` pods of ``GPUs/P`` whole GPUs, CPU and memory split
        evenly.  Returns one decision per gang: ``placed`` with the assignment (one part per
        pod, in ``members`` order), ``waiting`` (no room now) or ``unplaceable`` (no node of
        an allowed model has a pod's GPUs).  The policy cannot split a job into pods, so the
        loop places gangs itself, before the round, which then keeps them as booked."""
        out: dict[str, Decision] = {}
        cat = self._catalog
        for job in sorted(gangs, key=lambda j: (j.arrival_s, j.id)):
            P = len(members[job.id])
            per_pod = job.request.num_gpus // P
            allowed = job.request.gpu_models or frozenset(cat.gpu_models)
            configs = [_gang_configuration(job, P, m, mem, self.throughput)
                       for m, (mx, mem) in sorted(cat.gpu_models.items())
                       if m in allowed and per_pod <= mx
                       and fits_memory(job, mem, whole_gpus=True)]  # gpu-memory-gib fits
            if not configs:
                out[job.id] = Decision(job.id, Status.UNPLACEABLE, None, reason=(
                    f"gang of {P} pods: no node of an allowed GPU model "
                    f"{sorted(allowed)} has {per_pod} GPUs"
                    + (f" with {job.request.gpu_mem_gib:g} GiB of GPU memory each"
                       if job.request.gpu_mem_gib is not None else "")))
                continue
            reasons = []
            for c in configs:
                placed = state.place(job.id, c, cat.profile(job, c), job.slowdown_bound,
                                     self._placing_model(), scorer=cat.env.scorer, gang=Gang(pods=P))
                if placed.assignment is not None:
                    out[job.id] = Decision(job.id, Status.PLACED, c, placed.assignment,
                                           placed.slowdown, f"placed as a gang of {P} pods",
                                           changed=True)
                    break
                reasons.append(placed.reason)
            else:
                out[job.id] = Decision(job.id, Status.WAITING, None, reason="; ".join(reasons))
        return out

    def _place_gangs_apart(self, gangs: Sequence[Job], members: Mapping[str, list[str]], book,
                           errors: dict[str, tuple[str, Exception]]) -> dict[str, Decision]:
        """:meth:`_place_gangs`, one gang at a time (oldest first), each on a copy of
        ``book.state`` that replaces it only when the placement returns: a gang whose placement
        raises books nothing and is put in ``errors`` (job id -> ("gang", the exception)); the
        other gangs are placed as usual.  DependencyUnavailable and RoundDeadlineExceeded
        propagate (the round is abandoned)."""
        out: dict[str, Decision] = {}
        for job in sorted(gangs, key=lambda j: (j.arrival_s, j.id)):
            trial = book.state.copy()
            try:
                out.update(self._place_gangs([job], members, trial))
            except (DependencyUnavailable, RoundDeadlineExceeded):
                raise
            except Exception as e:
                errors[job.id] = ("gang", e)
                continue
            book.state = trial
        return out

    def _pod_spec(self, pod: Mapping) -> A.PodSpec:
        """A pod's parsed ``elastico.io/*`` annotations (ElasticoError when they do not
        parse): what :func:`~.bookings.rebuild_book` rebuilds a booked pod's job from."""
        return A.parse_pod_annotations((pod.get("metadata") or {}).get("annotations"),
                                       gpu_models=self._known_models, job_types=self._job_types)

    def _note_starts(self, policy: Policy, book, now: float) -> None:
        """Tell the priority rule (``policy.note_started``, when it has one) since when each
        booked low-priority pod has run: its ``status.startTime`` once kubelet started it,
        ``now`` while it has not started (bound but Pending, or only reserved: its minimum
        guaranteed run has not begun).  A running pod without a ``startTime`` is left to the
        rule's own memory (from the round that first saw it run).  So the guarantee counts
        from the pod's real start, across placer restarts and policy rebuilds, and a trial
        round of :meth:`_decide` that evicted a pod does not restart its clock."""
        note = getattr(policy, "note_started", None)
        if note is None:
            return
        for a in book.running:
            if not low_priority(a.job):
                continue
            pod = self._round_pods.get(a.job.id) or {}
            status = pod.get("status") or {}
            if not (pod.get("spec") or {}).get("nodeName") \
                    or status.get("phase", "Pending") == "Pending":
                note(a.job.id, now)
            elif status.get("startTime"):
                note(a.job.id, timestamp_s(status["startTime"]))

    def _preempt_pods(self, result, book, pods: Mapping[str, dict], report: RoundReport,
                      now: float) -> dict[str, list[str]]:
        """Carry out the priority rule's decisions (``result.preempted``: victim -> the job
        it made room for; :mod:`elastico.placer.policies.priority`) on booked pods: a bound
        victim is evicted through the ``policy/v1`` Eviction API (uid precondition, so
        PodDisruptionBudgets hold and a recreated pod of the same name is not hit), once --
        a pod asked before or already terminating is not asked again --, with a ``Preempted``
        Event saying for whom and why; a victim only reserved (never bound) has its
        reservation given up.  A shrink is carried out the same way: a bound pod cannot be
        resized in place (its controller recreates it, placed anew).  Its booking goes with
        the pod (the book is rebuilt from the pods), never by a patch of ours, so it is
        released exactly once.  A victim placed in this very round has nothing to evict.
        Returns job id -> the victims it waits for: such a job is not reserved this round (its
        GPUs are still the victims' until they are gone) and is placed in a later round."""
        held: dict[str, list[str]] = {}
        for victim, by in sorted(result.preempted.items()):
            if victim not in book.bookings:
                continue
            held.setdefault(by, []).append(victim)
            if not self.leading():
                continue
            pod = pods.get(victim) or {}
            meta = pod.get("metadata") or {}
            b, bound = book.bookings[victim]
            d = result.decisions.get(victim)
            how = (f"shrunk to {d.config.name} in the round; a bound pod cannot be resized in "
                   f"place, so it is evicted" if d is not None and d.config is not None
                   and not d.config.is_wait else "evicted")
            why = (f"preempted by {by}: offline LLM inference is low priority and this pod ran "
                   f"past its minimum guaranteed run of {self.config.min_run_s:g} s; {how} "
                   f"(it held {b.config_name} on {b.node}); its controller recreates it")
            try:
                if not bound:
                    log.info("pod %s: reservation given up (%s)", victim, why)
                    self._clear(victim)
                    self.events.emit(pod, "Preempted", why, now, warning=True)
                    continue
                uid = meta.get("uid")
                if meta.get("deletionTimestamp") or uid in self._preempting:
                    continue  # asked already: its GPUs are free once it is gone
                ns, name = victim.split("/", 1)
                try:
                    self.core.create_namespaced_pod_eviction(name, ns, {
                        "apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": name, "namespace": ns},
                        "deleteOptions": {"preconditions": {"uid": uid}}}, _preload_content=False)
                except ApiException as e:
                    if e.status == 404:
                        continue  # gone already
                    # 429: a PodDisruptionBudget says not now; the next round asks again
                    log.info("eviction of %s for %s refused: %s %s", victim, by, e.status, e.reason)
                    self.events.emit(pod, "Waiting", f"not evicted for {by} yet: the API refused "
                                     f"the eviction ({e.status} {e.reason}); asked again next round",
                                     now)
                    continue
                self._preempting[uid] = now
                log.info("pod %s: %s", victim, why)
                self.events.emit(pod, "Preempted", why, now, warning=True)
            except Exception as e:  # a bug, not the API: this victim only
                self._job_error(victim, [victim], "preempt", e, pods, report, now)
        live = {(p.get("metadata") or {}).get("uid") for p in pods.values()}
        self._preempting = {u: t for u, t in self._preempting.items() if u in live}
        return held

    def _decide(self, policy: Policy, now: float, invs: list[NodeInventory], book,
                jobs: Sequence[Job], pending: list[ActiveJob],
                errors: dict[str, tuple[str, Exception]]):
        """:func:`run_round` on ``pending`` (new jobs; placed gangs with their configuration)
        plus the book's running jobs, isolating jobs that make it raise.  Returns
        ``(result, active)``: the round's result, with an ``error`` decision for every job in
        ``errors``, and the jobs it ran with.

        The round is all or nothing on a copy of the book (:mod:`elastico.placer.round`), so
        when it raises, the culprits are found by bisection -- the round is run again on
        halves of the pending jobs (with the running ones, on fresh copies; without tracer or
        metrics), down to single jobs that raise alone -- and put in ``errors`` (job id ->
        ("round", the exception)); the round then runs once more without them, which is the
        result.  A job that raised in the last round is tried alone first (so a job that keeps
        failing costs one trial round per round).  A round that raises with no pending job at
        all, or whose failure no single job reproduces, raises (the loop's "round failed", as
        before: nothing is written).  DependencyUnavailable and RoundDeadlineExceeded always
        propagate."""
        nodes = [i.node for i in invs]
        by_id = {j.id: j for j in jobs}

        def run(subset: list[ActiveJob], final: bool):
            keep = {a.job.id for a in subset}
            state = book.state
            drop = [a.job.id for a in pending if a.job.id not in keep and a.job.id in state]
            if drop:  # placed gangs left out of this run: their booking goes with them
                state = state.copy()
                for jid in drop:
                    state.release(jid)
            skip = {jid: f"{errors[jid][0]}: {type(errors[jid][1]).__name__}: {errors[jid][1]}"
                    for jid in errors if jid in by_id} if final else {}
            act = list(subset) + [ActiveJob(by_id[jid]) for jid in skip] + book.running
            inp = RoundInput(now=now, nodes=nodes, state=state, jobs=act)
            self._note_starts(policy, book, now)
            res = run_round(MarkDegraded(_SkipJobs(policy, skip), self.slowdown), inp,
                            tracer=self.tracer if final else NOOP,
                            metrics=self.metrics if final else None)
            return res, act

        def fails(subset: list[ActiveJob]) -> Exception | None:
            try:
                run(subset, final=False)
            except (DependencyUnavailable, RoundDeadlineExceeded):
                raise
            except Exception as e:
                return e
            return None

        def bisect(subset: list[ActiveJob], e: Exception) -> dict[str, Exception]:
            if len(subset) == 1:
                return {subset[0].job.id: e}
            out: dict[str, Exception] = {}
            for part in (subset[:len(subset) // 2], subset[len(subset) // 2:]):
                pe = fails(part)
                if pe is not None:
                    out.update(bisect(part, pe))
            return out

        # a job that raised in the last round is tried alone first: one that keeps failing
        # costs one trial round per round, not a bisection
        again = {jid for jid, stage, _ in self._errors_logged if stage == "round"}
        for a in [a for a in pending if a.job.id in again]:
            e = fails([a])
            if e is not None:
                errors[a.job.id] = ("round", e)
        ok = [a for a in pending if a.job.id not in errors]
        while True:
            try:
                return run(ok, final=True)
            except (DependencyUnavailable, RoundDeadlineExceeded):
                raise
            except Exception as e:
                log.debug("round raised %s: %s; looking for the job(s) that raise it",
                          type(e).__name__, e)
                found = {} if fails([]) is not None else bisect(ok, e)
                if not found:
                    raise
                for jid, je in found.items():
                    errors[jid] = ("round", je)
                ok = [a for a in ok if a.job.id not in found]

    def _job_error(self, job_id: str, keys: Sequence[str], stage: str, exc: Exception,
                   pods: Mapping[str, dict], report: RoundReport, now: float) -> None:
        """One job's handling raised ``exc`` at ``stage`` (one of
        :data:`elastico.runtime.metrics.JOB_ERROR_STAGES`): a Warning Event ``SchedulingError`` with
        the cause on each of its pods ``keys``, ``elastico_job_errors_total{stage}``,
        ``report.errors``, and the traceback in the log -- once while the job keeps failing
        the same way (later rounds: one debug line).  Nothing is written for the job this
        round; the other jobs go on.  A pending pod is tried again in the next round."""
        cause = f"{type(exc).__name__}: {exc}"
        msg = (f"scheduling error while {_STAGE_WORDS.get(stage, stage)}: {cause}; this pod "
               "is left as it is this round and tried again in the next, other pods are "
               "scheduled as usual")
        sig = (job_id, stage, cause)
        self._errors_now.add(sig)
        if sig in self._errors_logged:
            log.debug("job %s: %s failed again: %s", job_id, stage, cause)
        else:
            log.error("job %s: %s failed; the job is skipped this round, the others go on",
                      job_id, stage, exc_info=exc)
        if self.metrics is not None:
            self.metrics.job_errors.labels(stage).inc()
        for key in keys:
            report.errors[key] = msg
            report.waiting.pop(key, None)
            pod = pods.get(key)
            if pod is not None:
                self.events.emit(pod, "SchedulingError", msg, now, warning=True)

    # ------------------------------------------------------------------ pending pods -> jobs
    def _pending_jobs(self, pods: dict, book, report: RoundReport, now: float):
        groups: dict[str, list[dict]] = {}
        booked_in_group: dict[str, int] = {}
        for key, pod in pods.items():
            if not is_elastico(pod) or is_terminal(pod):
                continue
            g = A.job_group(pod)
            if key in book.bookings:
                booked_in_group[g] = booked_in_group.get(g, 0) + 1
                continue
            meta = pod.get("metadata") or {}
            if (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp") \
                    or A.BOOKING in (meta.get("annotations") or {}):
                continue
            groups.setdefault(g, []).append(pod)
        jobs, members = [], {}
        for g, group in sorted(groups.items()):
            try:
                self._group_job(g, group, booked_in_group.get(g, 0), jobs, members, pods,
                                report, now)
            except Exception as e:  # a bug, not bad input: this group's pods only
                self._job_error(g, [pod_key(p) for p in group], "pod", e, pods, report, now)
        return jobs, members

    def _group_job(self, g: str, group: list[dict], booked: int, jobs: list, members: dict,
                   pods: dict, report: RoundReport, now: float) -> None:
        """The job(s) of one group's pending pods ``group`` (``booked`` of its pods already
        booked), appended to ``jobs`` / ``members``; invalid pods are Rejected, a gang that
        cannot be formed waits with an Event saying why."""
        valid = []
        for pod in sorted(group, key=lambda p: (creation_s(p), pod_key(p))):
            key = pod_key(pod)
            try:
                spec = A.parse_pod_annotations((pod.get("metadata") or {}).get("annotations"),
                                               gpu_models=self._known_models,
                                               job_types=self._job_types)
                mps_user(pod)  # a bad or mixed runAsUser: Rejected
                cpu, mem, bad = _requests(pod)
                if spec.resize_policy == "restart" and not any(
                        o.get("controller") for o in
                        (pod.get("metadata") or {}).get("ownerReferences") or []):
                    raise InvalidArgument(A.RESIZE_POLICY, spec.resize_policy, (
                        "'none' for a pod without a controller owner reference (a Job, "
                        "ReplicaSet, ...): ElastiCo resizes a pod by evicting it for its "
                        "controller to recreate, and nothing would recreate this one"))
                if bad:
                    raise ElasticoError(
                        f"spec.containers[].resources.requests[{A.GPU_RESOURCE}]: "
                        f"{', '.join(bad)} is not allowed (each GPU container requests "
                        f"exactly 1, the handle of the ElastiCo device plugin)")
            except (ElasticoError, ValueError) as e:
                report.rejected[key] = str(e)
                self.events.emit(pod, "Rejected", str(e), now, warning=True)
                continue
            except Exception as e:  # a bug, not bad input: this pod only
                self._job_error(key, [key], "pod", e, pods, report, now)
                continue
            valid.append((pod, spec, cpu, mem))
        if not valid:
            return
        gang = valid[0][1].gang_size
        if gang == 1:
            for pod, spec, cpu, mem in valid:
                self._add_job(jobs, members, report, pod_key(pod), [pod], spec, cpu, mem, now,
                              may_resize=self._restarts_left(g, now) > 0)
            return
        need = gang - booked
        specs = {v[1] for v in valid}
        if len(specs) > 1:
            msg = (f"the pods of gang {g} disagree on their {A.PREFIX}* annotations; "
                   "every member must carry the same ones")
            for pod, *_ in valid:
                report.rejected[pod_key(pod)] = msg
                self.events.emit(pod, "Rejected", msg, now, warning=True)
            return
        if need <= 0:
            # e.g. a controller's replacement for a member that is still terminating: it is
            # placed once the member is gone (its GPUs stay booked until then)
            msg = (f"gang {g} already has its {gang} pods booked; this pod waits until one of "
                   "them ends")
            for pod, *_ in valid:
                report.waiting[pod_key(pod)] = msg
                self.events.emit(pod, "Waiting", msg, now)
            return
        if len(valid) < need:
            msg = f"gang incomplete: {len(valid)} of {need} pods to place exist"
            for pod, *_ in valid:
                report.waiting[pod_key(pod)] = msg
                self.events.emit(pod, "Waiting", msg, now)
            return
        chosen = valid[:need]
        cpu = max(v[2] for v in chosen)
        mem = max(v[3] for v in chosen)
        self._add_job(jobs, members, report, g, [v[0] for v in chosen], valid[0][1], cpu, mem, now)

    def _add_job(self, jobs, members, report, job_id, pods, spec, cpu, mem, now, *,
                 may_resize: bool = True):
        try:
            job = A.build_job(job_id, spec, len(pods), cpu, mem, min(creation_s(p) for p in pods),
                              may_resize=may_resize)
        except (ElasticoError, ValueError) as e:
            for pod in pods:
                report.rejected[pod_key(pod)] = str(e)
                self.events.emit(pod, "Rejected", str(e), now, warning=True)
            return
        except Exception as e:  # a bug, not bad input: this job only
            self._job_error(job_id, [pod_key(p) for p in pods], "pod", e,
                            {pod_key(p): p for p in pods}, report, now)
            return
        jobs.append(job)
        members[job_id] = [pod_key(p) for p in sorted(pods, key=pod_key)]

    # ------------------------------------------------------------------ writes
    def _patch_pod(self, key: str, build: Callable[[dict], dict | None]) -> dict | None:
        """Merge-patch a pod with ``build(current pod)`` (None = nothing to do), carrying its
        resourceVersion; on 409 re-read and retry up to ``max_conflict_retries`` times.
        Returns the patched pod, or None when the pod is gone, ``build`` declined, or the
        retries ran out (logged)."""
        ns, name = key.split("/", 1)
        pod = self.pods.get(key)
        for attempt in range(1, self.config.max_conflict_retries + 1):
            if pod is None:
                return None
            body = build(pod)
            if body is None:
                return None
            body.setdefault("metadata", {})["resourceVersion"] = pod["metadata"].get("resourceVersion")
            try:
                resp = self.core.patch_namespaced_pod(name, ns, body, _content_type=MERGE_PATCH,
                                                      _preload_content=False)
                new = json.loads(resp.data)
                self.pods.assume(new)
                return new
            except ApiException as e:
                if e.status == 404:
                    return None
                if e.status != 409:
                    log.warning("patch of pod %s failed: %s %s", key, e.status, e.reason)
                    return None
                log.info("patch of pod %s: 409 conflict (attempt %d of %d); re-reading",
                         key, attempt, self.config.max_conflict_retries)
                pod = self._read_pod(ns, name)
        log.warning("patch of pod %s: still conflicting after %d attempts; giving up this round",
                    key, self.config.max_conflict_retries)
        return None

    def _read_pod(self, ns: str, name: str) -> dict | None:
        """The pod as the API has it now (None when gone or unreadable: the caller gives up
        this write, and the next round starts from the API's state again)."""
        try:
            pod = json.loads(self.core.read_namespaced_pod(name, ns, _preload_content=False).data)
        except ApiException as e:
            if e.status != 404:
                log.warning("re-read of pod %s/%s failed: %s %s", ns, name, e.status, e.reason)
            return None
        self.pods.assume(pod)
        return pod

    def _reserve(self, job, d, names: list[str], by_node: dict[str, NodeInventory],
                 report: RoundReport, now: float) -> None:
        """Write the decision on every pod of the job, or on none (undo on failure)."""
        try:
            parts = A.split_assignment(job, d.config, d.assignment, names,
                                       {k: v.uuids for k, v in by_node.items()},
                                       report.round_id, d.slowdown)
        except ElasticoError as e:
            log.warning("job %s: decision not applicable (%s); the job waits", job.id, e)
            for key in names:
                report.waiting[key] = str(e)
            return
        done: list[str] = []
        for key, part in zip(names, parts):
            uid = (self.pods.get(key) or {}).get("metadata", {}).get("uid")

            def build(pod, part=part, uid=uid):
                meta = pod.get("metadata") or {}
                # only a pod that is still the one we decided for, unbound and undecided
                if meta.get("uid") != uid or (pod.get("spec") or {}).get("nodeName") \
                        or meta.get("deletionTimestamp") \
                        or A.BOOKING in (meta.get("annotations") or {}):
                    return None
                return {"metadata": {"annotations": A.decision_annotations(part)}}
            if not self.leading() or self._patch_pod(key, build) is None:
                for k in done:
                    self._clear(k)
                log.warning("job %s: decision not recorded on pod %s; nothing reserved", job.id, key)
                return
            done.append(key)
        report.reserved.extend(done)
        log.info("job %s: %s on %s (round %s)", job.id, d.config.name,
                 ", ".join(f"{p.node} GPUs {list(p.gpu_indices)}" for p in parts), report.round_id)

    def _clear(self, key: str) -> None:
        self._patch_pod(key, lambda pod: None if (pod.get("spec") or {}).get("nodeName")
                        else {"metadata": {"annotations": A.clear_decision()}})

    def _clear_quietly(self, key: str) -> None:
        """:meth:`_clear` after a job error: a failure is logged (the next round rebuilds the
        book from the API's state in any case)."""
        try:
            self._clear(key)
        except Exception as e:
            log.warning("pod %s: decision not cleared after an error: %s", key, e)

    def _handle_conflicts(self, book, pods: dict, now: float) -> None:
        """Reservations whose node is unusable wait ``reservation_timeout_s`` for it to come
        back, then are given up; other bad reservations are given up at once; a bound pod
        with a bad booking gets a Warning Event (the loop never touches a bound pod; its
        GPUs are fenced, :mod:`.bookings`), except on a node that is not usable now (its
        booking comes back with the node) or when the booking raised an error (reported as
        ``SchedulingError`` instead)."""
        for key, why in book.conflicts.items():
            pod = pods[key]
            bound = (pod.get("spec") or {}).get("nodeName")
            unusable = why.startswith("node ") and why.endswith("is not usable now")
            if bound:
                if not unusable and key not in book.errors:
                    self.events.emit(pod, "BookingConflict", why, now, warning=True)
                continue
            if unusable:
                since = self._unusable_since.setdefault(key, now)
                if now - since < self.config.reservation_timeout_s:
                    self.events.emit(pod, "Waiting", f"reserved; {why}", now)
                    continue
            if self.leading():
                log.info("pod %s: reservation given up (%s)", key, why)
                self._clear(key)
                self._unusable_since.pop(key, None)
        for key in list(self._unusable_since):
            if key not in book.conflicts:
                del self._unusable_since[key]

    def _bind_reserved(self, report: RoundReport, now: float) -> None:
        pods = self.pods.snapshot()
        busy = set()
        reserved = []
        for key, pod in pods.items():
            if not is_elastico(pod) or is_terminal(pod):
                continue
            meta = pod.get("metadata") or {}
            ann = meta.get("annotations") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            if node and A.BOOKING in ann and not allocation_acknowledged(pod) \
                    and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                busy.add(node)
            elif not node and A.BOOKING in ann and not meta.get("deletionTimestamp"):
                reserved.append(pod)
        reserved.sort(key=lambda p: (creation_s(p), pod_key(p)))
        keys = {pod_key(p) for p in reserved}
        self._mps_held_since = {k: t for k, t in self._mps_held_since.items() if k in keys}
        usable = {n for n, r in self.nodes.snapshot().items()} - set(self._node_reasons)
        for pod in reserved:
            key = pod_key(pod)
            try:
                b = A.parse_booking(pod["metadata"]["annotations"])
            except ElasticoError:
                continue  # reported as a conflict by the book
            if b is None or b.node not in usable:
                continue
            if b.node in self._mps_down and b.mig_profile is None and b.gpu_share < 1.0:
                # the device plugin would refuse its Allocate: held, and given up (pending
                # again, for another node) after reservation_timeout_s, as on an unusable node
                since = self._mps_held_since.setdefault(key, now)
                if now - since >= self.config.reservation_timeout_s and self.leading():
                    log.info("pod %s: reservation given up (MPS control daemon on node %s is "
                             "down: %s)", key, b.node, self._mps_down[b.node])
                    self._clear(key)
                    del self._mps_held_since[key]
                    continue
                report.held.append(key)
                self.events.emit(pod, "Waiting", f"reserved on {b.node}; held: MPS control daemon "
                                 f"on node {b.node} is down: {self._mps_down[b.node]}", now)
                continue
            self._mps_held_since.pop(key, None)
            if b.node in busy:
                report.held.append(key)
                self.events.emit(pod, "Waiting", f"reserved on {b.node}; held until the device plugin "
                            f"acknowledges the pod bound there before it", now)
                continue
            if not self.leading():
                return
            try:
                if self._bind(pod, b, report, now):
                    busy.add(b.node)
            except Exception as e:
                busy.add(b.node)  # it may have gone through: no second bind there this round
                self._job_error(key, [key], "bind", e, pods, report, now)

    def _bind(self, pod: dict, b: A.PodBooking, report: RoundReport, now: float) -> bool:
        key = pod_key(pod)
        ns, name = key.split("/", 1)
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": pod["metadata"].get("uid")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": b.node}}
        with self.tracer.span("placer.bind", {"bind.pod": key, "bind.node": b.node,
                                              "bind.round_id": b.round_id,
                                              "bind.configuration": b.config_name}) as span:
            for attempt in range(1, self.config.max_conflict_retries + 1):
                try:
                    # _preload_content=False: the API answers a Binding with a Status, which
                    # the client cannot deserialize as V1Binding (kubernetes-client/python#825)
                    self.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)
                    break
                except ApiException as e:
                    if e.status == 404:
                        span.set_attribute("bind.outcome", "pod gone")
                        return False
                    if e.status == 409 and self.metrics is not None:
                        self.metrics.bind_conflicts.inc()
                    if e.status != 409:
                        log.warning("bind %s -> %s failed: %s %s; retried next round",
                                    key, b.node, e.status, e.reason)
                        span.set_attribute("bind.outcome", f"error {e.status}")
                        return False
                    cur = self._read_pod(ns, name)
                    where = (cur or {}).get("spec", {}).get("nodeName")
                    log.info("bind %s -> %s: 409 conflict (attempt %d); pod is on %r",
                             key, b.node, attempt, where)
                    if cur is None:
                        return False
                    if where == b.node:
                        break  # an earlier attempt went through
                    if where:
                        span.set_attribute("bind.outcome", f"bound elsewhere: {where}")
                        self.events.emit(pod, "BookingConflict", f"bound to {where} by someone "
                                    f"else; ElastiCo reserved {b.node}", now, warning=True)
                        return False
            else:
                span.set_attribute("bind.outcome", "conflict retries exhausted")
                return False
            span.set_attribute("bind.outcome", "bound")
        bound = copy.deepcopy(self.pods.get(key) or pod)
        bound.setdefault("spec", {})["nodeName"] = b.node
        self.pods.assume(bound)
        report.bound.append(key)
        if self.metrics is not None:
            self.metrics.binds.inc()
        gpus = f"MIG {b.mig_profile}" if b.mig_profile else f"{b.gpu_share:g} of each"
        self.events.emit(pod, "Scheduled", f"Successfully assigned {key} to {b.node}: {b.config_name}, "
                    f"GPUs {','.join(b.gpu_uuids)} ({gpus}), round {b.round_id}", now)
        return True


def _upsized(config, gpus: int, share: float) -> bool:
    """Does ``config`` give more than ``gpus`` GPUs at ``share`` (the pod's request)?  More
    GPUs, or a larger MPS share; a MIG instance holding the share is not more."""
    return config.num_gpus > gpus or (config.mig_profile is None
                                      and config.gpu_share > share + 1e-9)


def _grows_while_others_wait(jobs: Sequence[Job], decisions: Mapping[str, Decision]) -> bool:
    """Did the round give a job more than it asked while another pending job waits?"""
    ds = [(j, decisions.get(j.id)) for j in jobs]
    grown = any(j.reshape and d is not None and d.config is not None
                and d.status in (Status.PLACED, Status.DEGRADED)
                and _upsized(d.config, j.request.num_gpus, j.request.gpu_share) for j, d in ds)
    return grown and any(d is not None and d.status is Status.WAITING for _, d in ds)
