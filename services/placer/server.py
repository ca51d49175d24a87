"""gRPC ``elastico.v1.PlacerService``: whole scheduling rounds (``RunRound``) and stateless
placement (``Place``), a thin adapter over :func:`elastico.placer.round.run_round` and
:class:`elastico.placer.placement.ClusterState`.

``RunRound``: the request is converted and validated whole (:mod:`elastico.placer.rpc.wire`:
``INVALID_ARGUMENT`` naming the field path and value, ``NOT_FOUND`` for a booking on an
unknown node or of a job not in the request), the bookings are booked on a fresh
:class:`ClusterState` in the request's order, and the policy runs one round on it
(:func:`run_round`: the ``elastico.round`` span, child of the caller's trace context).  The
policy prices through ``pricer`` (in-process :func:`elastico.pricing.solve`, or
:class:`~elastico.placer.rpc.remote.RemotePricer` over PricingService) and predicts through
``slowdown`` (in-process, or :class:`~elastico.placer.rpc.remote.RemoteSlowdownModel` over
PredictorService).  The caller's deadline bounds every call of the round
(:func:`~elastico.placer.rpc.remote.round_deadline`); pricing past it ends the RPC with
``DEADLINE_EXCEEDED`` and nothing of the round applies -- the caller keeps its previous
allocation.  A predictor that fails makes the round *degraded*: the analytic model answers,
jobs placed in that round get status ``degraded``, the response and the span say why, and
``elastico_placer_predictor_fallbacks_total`` counts it.

State: only warm caches, per (policy, knobs, cluster): the policy instance (shape families,
warm-start prices, dwell times), keyed by job id; a job absent from a round's request is
forgotten after that round.  The allocation itself is the caller's (it sends the bookings
every round).  Rounds run one at a time (the policy's caches are not thread-safe).

Who calls it: ``elastico simulate --via-grpc`` (:class:`~elastico.placer.rpc.remote.RemotePlacerPolicy`),
the Kubernetes loop, ``grpcurl``.  Whom it calls: the round, the pricing and predictor
clients, grpc.  An adapter module (exempt from the no-grpc rule of tests/test_layers.py).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import grpc

from elastico.errors import InvalidArgument
from elastico.runtime.grpc_server import abort_if_expired, serve_one
from elastico.runtime.metrics import ServiceMetrics
from elastico.predictor import SlowdownModel
from elastico.pricing import UTILITIES
from elastico.perf.throughput import ThroughputModel
from elastico.tracing import NOOP, Tracer
from elastico.v1 import placer_pb2, placer_pb2_grpc

from .rpc import wire
from .placement import SCORERS, ClusterState
from .policies import POLICIES, PolicyEnv, make_policy
from .policies.common import JobCatalog
from .rpc.remote import DependencyUnavailable, RoundDeadlineExceeded, round_deadline
from .round import MarkDegraded, RoundInput, run_round
from .upkeep import finish_round, start_round

__all__ = ["SERVICE_NAME", "PlacerServicer", "build_server", "MAX_RESTART_S"]

#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME: str = placer_pb2.DESCRIPTOR.services_by_name["PlacerService"].full_name
MAX_MESSAGE_BYTES = 256 * 2**20
MAX_RESTART_S = 86_400.0
#: Warm sessions kept (one per policy, knobs and cluster).
MAX_SESSIONS = 4


@dataclass
class _Session:
    policy: Any
    empty: ClusterState
    last_ids: frozenset[str] = frozenset()


def _without_modes(m: placer_pb2.NodeSpec) -> placer_pb2.NodeSpec:
    """``m`` with its home MIG GPUs in ``mig_home_gpus`` and no ``mig_gpus`` (a session key
    that MIG lending's mode changes do not change)."""
    out = placer_pb2.NodeSpec()
    out.CopyFrom(m)
    if not len(out.mig_home_gpus):
        out.mig_home_gpus.extend(sorted(out.mig_gpus))
    del out.mig_gpus[:]
    return out


class PlacerServicer(placer_pb2_grpc.PlacerServiceServicer):
    """RunRound and Place over one pricer and one slowdown model."""

    def __init__(self, *, pricer: Callable[..., Any] | None = None,
                 slowdown: SlowdownModel | None = None,
                 throughput: ThroughputModel | None = None,
                 metrics: ServiceMetrics | None = None, tracer: Tracer = NOOP):
        if slowdown is None:
            from elastico.predictor import default_slowdown_model

            slowdown, _ = default_slowdown_model()
        self.pricer = pricer
        self.slowdown = slowdown
        self.throughput = throughput or ThroughputModel.bundled()
        self._metrics = metrics
        self._tracer = tracer
        self._lock = threading.Lock()
        self._sessions: OrderedDict[tuple, _Session] = OrderedDict()
        self._rounds = 0
        # rounds resend every pending job unchanged: decoded and checked once
        self._decode_jobs = wire.JobDecoder()

    # -------------------------------------------------------------------------- RunRound
    def _options(self, request: placer_pb2.RunRoundRequest) -> dict[str, Any]:
        policy = request.policy or "elastico"
        if policy not in POLICIES:
            raise InvalidArgument("policy", policy, f"one of {sorted(POLICIES)}")
        o = request.options
        utility = o.utility or "jct"
        if utility not in UTILITIES:
            raise InvalidArgument("options.utility", utility, f"one of {sorted(UTILITIES)}")
        scorer = o.scorer or "bestfit"
        if scorer not in SCORERS:
            raise InvalidArgument("options.scorer", scorer, f"one of {list(SCORERS)}")
        restart_s = o.restart_s if o.HasField("restart_s") else 30.0
        if not (math.isfinite(restart_s) and 0.0 <= restart_s <= MAX_RESTART_S):
            raise InvalidArgument("options.restart_s", restart_s,
                                  f"seconds in [0, {MAX_RESTART_S:g}]")
        return {"policy": policy, "utility": utility, "scorer": scorer, "restart_s": restart_s,
                "mig_lending": bool(o.mig_lending)}

    def _session(self, key: tuple, nodes, mig, opts: dict[str, Any],
                 mig_home: dict[int, tuple[int, ...]] | None = None) -> _Session:
        s = self._sessions.get(key)
        if s is None:
            # MIG lending only when the caller asks (PolicyOptions.mig_lending): the modes come
            # with each request and the changes go back in RunRoundResponse.mig_switches
            env = PolicyEnv(nodes=nodes, throughput=self.throughput, slowdown=self.slowdown,
                            utility=opts["utility"], restart_s=opts["restart_s"],
                            scorer=opts["scorer"], tracer=self._tracer, pricer=self.pricer,
                            mig_lending=opts["mig_lending"],
                            mig_home=mig_home if opts["mig_lending"] else None)
            s = _Session(make_policy(opts["policy"], env), ClusterState(nodes, mig))
            self._sessions[key] = s
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return s

    def RunRound(self, request: placer_pb2.RunRoundRequest,
                 context: grpc.ServicerContext) -> placer_pb2.RunRoundResponse:
        abort_if_expired(context, "deadline passed before the round")
        if not math.isfinite(request.now):
            raise InvalidArgument("now", request.now, "finite seconds")
        opts = self._options(request)
        lending = opts["mig_lending"]
        nodes, mig = wire.nodes_from_messages(request.nodes, lending=lending)
        jobs = self._decode_jobs(request.jobs)
        wire.check_known(self.throughput, nodes,
                         ((f"jobs[{i}]", a.job) for i, a in enumerate(jobs)))
        by_id = {a.job.id: a for a in jobs}
        home = wire.mig_home_of(request.nodes) if lending else None
        # with lending the session (policy: prices, dwell clocks) is the home setting's, not
        # the modes of the moment, which lending changes
        key_nodes = [_without_modes(m) for m in request.nodes] if lending else request.nodes
        key = (tuple(sorted(opts.items())),
               b"".join(m.SerializeToString(deterministic=True) for m in key_nodes))
        with self._lock:
            session = self._session(key, nodes, mig, opts, home)
            policy = session.policy
            state = ClusterState(nodes, mig) if lending else session.empty.copy()
            wire.book_all(state, request.bookings, by_id, policy.catalog.profile)
            start_round(self.slowdown)
            inp = RoundInput(request.now, nodes, state, jobs)
            try:
                with round_deadline(context.time_remaining()):
                    result = run_round(MarkDegraded(policy, self.slowdown), inp,
                                       tracer=self._tracer)
            except RoundDeadlineExceeded as e:
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"round abandoned, nothing applied: {e}")
            except DependencyUnavailable as e:
                context.abort(grpc.StatusCode.UNAVAILABLE,
                              f"round abandoned, nothing applied: {e}")
            self._rounds += 1
            round_id = f"r{self._rounds:06d}"
            slow = result.state.predicted_slowdowns(self.slowdown)
            # after the slowdowns above: they count among the round's fallback calls
            session.last_ids = finish_round(policy, self.slowdown, session.last_ids, by_id,
                                            self._metrics)
        if self._metrics is not None:
            from .round import unknown_job_ids

            self._metrics.observe_round(inp, result, slow, unknown=unknown_job_ids(result.state))
        res = result.pricing
        names = result.resource_names if res is not None else ()
        resp = placer_pb2.RunRoundResponse(
            round_id=round_id,
            pricing_gap=float(getattr(res, "gap", 0.0) or 0.0),
            degraded=result.degraded,
            booking_order=result.state.job_ids(),
            prices=[] if res is None else [float(p) for p in res.prices],
            resource_names=names,
            pricing_iterations=int(getattr(res, "iterations", 0) or 0))
        if result.wake_at_s is not None:
            resp.wake_at_s = float(result.wake_at_s)
        for sw in getattr(result, "mig_switches", None) or ():
            resp.mig_switches.add(node=sw.node, gpu_indices=list(sw.gpus), enabled=sw.on,
                                  reason=sw.reason)
        add = resp.decisions.add  # filled in place: no copy of each decision
        for a in jobs:
            wire.fill_decision(add(), result.decisions[a.job.id], slow.get(a.job.id, 1.0))
        return resp

    # ----------------------------------------------------------------------------- Place
    def Place(self, request: placer_pb2.PlaceRequest,
              context: grpc.ServicerContext) -> placer_pb2.PlaceResponse:
        abort_if_expired(context, "deadline passed before placing")
        scorer = request.scorer or "bestfit"
        if scorer not in SCORERS:
            raise InvalidArgument("scorer", scorer, f"one of {list(SCORERS)}")
        nodes, mig = wire.nodes_from_messages(request.nodes)
        booked = wire.jobs_from_messages(request.booked_jobs, "booked_jobs")
        by_id = {a.job.id: a for a in booked}
        items = []
        seen: set[str] = set()
        for i, it in enumerate(request.items):
            a = wire.job_from_message(it.job, f"items[{i}].job")
            c = wire.config_from_message(it.configuration, f"items[{i}].configuration")
            if c.is_wait:
                raise InvalidArgument(f"items[{i}].configuration", c.name,
                                      "a configuration that uses resources (not wait)")
            if a.job.id in seen or a.job.id in by_id:
                raise InvalidArgument(f"items[{i}].job.id", a.job.id,
                                      "unique among items and not booked")
            seen.add(a.job.id)
            items.append((a.job, c))
        wire.check_known(self.throughput, nodes,
                         [*((f"booked_jobs[{i}]", a.job) for i, a in enumerate(booked)),
                          *((f"items[{i}].job", j) for i, (j, _) in enumerate(items))])
        catalog = JobCatalog(PolicyEnv(nodes=nodes, throughput=self.throughput,
                                       slowdown=self.slowdown))
        state = ClusterState(nodes, mig, slowdown_model=self.slowdown)
        wire.book_all(state, request.bookings, by_id, catalog.profile, "bookings", "booked_jobs")
        reqs = [(j.id, c, catalog.profile(j, c), j.slowdown_bound) for j, c in items]
        with self._tracer.span("placer.place", {"placer.jobs": len(reqs)}) as span:
            with round_deadline(context.time_remaining()):
                outs = state.place_many(reqs, scorer=scorer)
                slow = state.predicted_slowdowns(self.slowdown)
            span.set_attribute("placer.placed", sum(o.placed for o in outs))
        abort_if_expired(context, "deadline passed while placing")
        resp = placer_pb2.PlaceResponse()
        for (j, c), o in zip(items, outs):
            m = resp.outcomes.add(job_id=j.id, placed=o.placed, reason=o.reason)
            if o.placed:
                wire.fill_booking(m.placement, o.assignment, c, slow.get(j.id, 1.0))
        return resp


def build_server(address: str = "127.0.0.1:0", *, pricer: Callable[..., Any] | None = None,
                 slowdown: SlowdownModel | None = None, max_workers: int = 4,
                 max_concurrent_rpcs: int = 32,
                 credentials: grpc.ServerCredentials | None = None,
                 metrics: ServiceMetrics | None = None,
                 tracer: Tracer = NOOP) -> tuple[grpc.Server, int]:
    """A PlacerService server bound to ``address`` (port 0 picks a free port), not started.

    ``pricer``: how rounds are priced (None: in-process :func:`elastico.pricing.solve`; a
    :class:`~elastico.placer.rpc.remote.RemotePricer` prices through PricingService).
    ``slowdown``: how co-location slowdowns are predicted (None: the bundled LightGBM model
    in-process; a :class:`~elastico.placer.rpc.remote.RemoteSlowdownModel` asks PredictorService).
    Health (``""`` and :data:`SERVICE_NAME`), reflection, the error interceptor, bounded RPCs
    in flight, TLS ``credentials``, ``metrics`` and ``tracer`` as for every service
    (:func:`elastico.runtime.grpc_server.serve_one`).  Returns ``(server, port)``."""
    servicer = PlacerServicer(pricer=pricer, slowdown=slowdown, metrics=metrics, tracer=tracer)
    return serve_one(address, SERVICE_NAME,
                     lambda server: placer_pb2_grpc.add_PlacerServiceServicer_to_server(
                         servicer, server),
                     thread_name="elastico-placer", max_workers=max_workers,
                     max_concurrent_rpcs=max_concurrent_rpcs, max_message_bytes=MAX_MESSAGE_BYTES,
                     credentials=credentials, metrics=metrics, tracer=tracer)

