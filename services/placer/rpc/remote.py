"""gRPC clients that implement the round's in-process interfaces (STYLE.md 9: one contract,
several implementations), so that the same policy code prices, predicts and decides through
the services:

* :class:`RemotePricer` -- :func:`elastico.pricing.solve`'s signature and result over
  ``PricingService.Solve`` (``PolicyEnv.pricer``);
* :class:`RemoteSlowdownModel` -- the :class:`~elastico.predictor.SlowdownModel` interface
  over ``PredictorService.PredictSlowdown``: the missing pairs of one GPU in one batched call,
  answers cached across rounds; when the predictor is unreachable, slow or failing it answers
  with the analytic model for the rest of the round and says so (:attr:`degraded`);
* :class:`RemotePlacerPolicy` -- a :class:`~elastico.placer.round.Policy` whose round runs in
  ``PlacerService.RunRound`` (``elastico simulate --via-grpc``).

Deadlines: a round's deadline (:func:`round_deadline`, set by the placer server from its
caller's) bounds every call made for the round; pricing past it raises
:class:`RoundDeadlineExceeded` (the round fails whole: nothing of it applies).  Trace context
travels in the metadata of channels built by :func:`open_channel` with a tracer.

An adapter module (it imports grpc).  Who calls it: the placer server, ``elastico simulate
--via-grpc``, ``bench/rpc.py``.
"""

from __future__ import annotations

import contextvars
import time
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import grpc
import numpy as np

from elastico.model import mig_gpus_of
from elastico.errors import ElasticoError, InvalidArgument
from elastico.model import Node
from elastico.predictor import AnalyticSlowdown, JobProfile, SlowdownModel
from elastico.predictor.profile import OPTIONAL_FIELDS
from elastico.pricing import PricingResult
from elastico.runtime.telemetry import instrument_channel
from elastico.tracing import NOOP, Tracer
from elastico.v1 import placer_pb2, placer_pb2_grpc, predictor_pb2, predictor_pb2_grpc
from elastico.v1 import pricing_pb2, pricing_pb2_grpc

from elastico.placer.placement import ClusterState
from elastico.placer.policies import POLICIES
from elastico.placer.policies.common import JobCatalog, PolicyEnv
from elastico.placer.round import RoundInput, RoundResult
from elastico.placer.rpc import wire

__all__ = ["RoundDeadlineExceeded", "DependencyUnavailable", "round_deadline", "open_channel",
           "RemotePricer", "RemoteSlowdownModel", "RemotePlacerPolicy", "RoundSummary"]

#: Absolute deadline (time.monotonic()) of the round being run in this context, or None.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("elastico_round_deadline",
                                                                         default=None)
#: Largest messages the clients accept (a 1,000-job round is ~1 MB).
MAX_MESSAGE_BYTES = 256 * 2**20


class RoundDeadlineExceeded(ElasticoError):
    """A call made for a round outlived the round's deadline; the round is abandoned."""


class DependencyUnavailable(ElasticoError):
    """A service the round needs failed (its gRPC status and message are in the text)."""


@contextmanager
def round_deadline(seconds_left: float | None) -> Iterator[None]:
    """Calls made inside (by this thread) get at most ``seconds_left`` seconds from now in
    all; None = no round deadline."""
    token = _DEADLINE.set(None if seconds_left is None else time.monotonic() + seconds_left)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _timeout(own: float | None) -> float | None:
    """The timeout of one call: its own limit, cut to what is left of the round."""
    d = _DEADLINE.get()
    if d is None:
        return own
    left = max(d - time.monotonic(), 0.0)
    return left if own is None else min(own, left)


def open_channel(address: str, *, ca: bytes | None = None, cert: bytes | None = None,
                 key: bytes | None = None, tracer: Tracer = NOOP) -> grpc.Channel:
    """A channel to ``address``: TLS when ``ca`` (PEM) is given -- with ``cert``/``key`` the
    client's identity for mutual TLS -- else plaintext; with an OpenTelemetry ``tracer`` every
    call carries the trace context (:func:`elastico.runtime.telemetry.instrument_channel`)."""
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    if ca is not None:
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                             certificate_chain=cert)
        channel = grpc.secure_channel(address, creds, options=opts)
    else:
        channel = grpc.insecure_channel(address, options=opts)
    return instrument_channel(channel, tracer)


def _failed(service: str, e: grpc.RpcError) -> ElasticoError:
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    text = f"{service}: {code.name}: {e.details() if hasattr(e, 'details') else e}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RoundDeadlineExceeded(text)
    return DependencyUnavailable(text)


class RemotePricer:
    """:func:`elastico.pricing.solve` through ``PricingService.Solve`` (same arguments, same
    :class:`~elastico.pricing.PricingResult`; float64 travels exactly).  ``timeout_s``: limit
    of one call (None = the round's deadline only).  Raises :class:`RoundDeadlineExceeded`
    when the call outlives the round, :class:`DependencyUnavailable` when it fails,
    InvalidArgument when the service refuses the instance (its message)."""

    def __init__(self, channel: grpc.Channel, timeout_s: float | None = None):
        self._stub = pricing_pb2_grpc.PricingServiceStub(channel)
        self.timeout_s = timeout_s

    def __call__(self, utility: Any, demand: Any, offsets: Any, capacity: Any, *,
                 initial_prices: Any = None, max_iterations: int = 0,
                 gap_tolerance: float = 0.0, primal_every: int | None = None,
                 current: Any = None, switch_cost: Any = None, **ignored: Any) -> PricingResult:
        d = np.asarray(demand, dtype=np.float64)
        off = np.asarray(offsets, dtype=np.int64)
        # the float64 arrays go in as packed bytes (wire.merge_packed_doubles: same message,
        # without a Python float per element of the M*R demand)
        inst = wire.merge_packed_doubles(pricing_pb2.PricingInstance(offsets=off.tolist()),
                                         utility=utility, demand=d.ravel(), capacity=capacity)
        req = pricing_pb2.SolveRequest(
            instance=inst, max_iterations=int(max_iterations),
            gap_tolerance=float(gap_tolerance),
            current=[] if current is None else np.asarray(current, np.int64).tolist(),
            primal_every=int(primal_every or 0))
        wire.merge_packed_doubles(
            req, initial_prices=() if initial_prices is None else initial_prices,
            switch_cost=() if switch_cost is None else switch_cost)
        try:
            resp = self._stub.Solve(req, timeout=_timeout(self.timeout_s))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument("pricing instance", "sent by the placer", e.details()) from None
            raise _failed("pricing", e) from None
        n = len(off) - 1
        choice = np.array(resp.choice, dtype=np.int64)
        return PricingResult(
            choice=choice, prices=np.array(resp.prices, dtype=np.float64),
            primal_value=resp.primal_value, dual_bound=resp.dual_bound, gap=resp.gap,
            iterations=resp.iterations, seconds=resp.seconds,
            totals=d[off[:-1] + choice].sum(axis=0) if n else np.zeros(d.shape[1]),
            changed=(np.array(resp.changed, dtype=bool) if len(resp.changed)
                     else np.zeros(n, dtype=bool)))


class RemoteSlowdownModel:
    """:class:`~elastico.predictor.SlowdownModel` over ``PredictorService.PredictSlowdown``.

    ``gpu_slowdowns(residents)`` asks for the pairs of the GPU not yet cached, in one call
    (both directions: ``include_b``), and composes additively, ``sigma_i = 1 + sum_k
    (s(i, k) - 1)`` in partner order -- the predictor's own composition rule
    (:mod:`elastico.predictor.learned`).  Answers are cached per (profile, profile, GPU model)
    for as long as this object lives (the placer server keeps it across rounds).

    Degradation: when a call fails (unreachable, past ``timeout_s`` or the round's deadline,
    any error), ``fallback`` (default the analytic model) answers that call and every later
    one until :meth:`reset` (the placer server resets it at each round start);
    :attr:`degraded` says why and :attr:`fallback_calls` counts the calls it answered.
    ``tracer``: a ``predictor.predict`` span per call (pairs, model version).
    """

    def __init__(self, channel: grpc.Channel, *, timeout_s: float | None = 2.0,
                 fallback: SlowdownModel | None = None, tracer: Tracer = NOOP,
                 cache_limit: int = 1_000_000):
        self._stub = predictor_pb2_grpc.PredictorServiceStub(channel)
        self.timeout_s = timeout_s
        self.fallback = fallback or AnalyticSlowdown()
        self.tracer = tracer
        self.cache_limit = cache_limit
        self._cache: dict[tuple[JobProfile, JobProfile, str], float] = {}
        self._domain: dict[tuple[JobProfile, JobProfile, str], bool] = {}
        self._msgs: dict[JobProfile, predictor_pb2.JobProfile] = {}
        self.version = ""
        self.degraded = ""
        self.fallback_calls = 0
        self.calls = 0

    def known_jobs(self, job_keys: Sequence[str]) -> set[str] | None:
        """``PredictorService.LookupProfiles``: which of ``job_keys`` have a stored solo
        profile (the Kubernetes loop's ``profile_lookup``, issue 23), asked in chunks of at
        most 10,000; None when the call fails (the caller keeps those jobs unknown)."""
        out: set[str] = set()
        keys = list(job_keys)
        try:
            for i in range(0, len(keys), 10_000):
                resp = self._stub.LookupProfiles(
                    predictor_pb2.LookupProfilesRequest(job_keys=keys[i:i + 10_000]),
                    timeout=_timeout(self.timeout_s))
                out.update(resp.known_job_keys)
        except grpc.RpcError:
            return None
        return out

    def known_profiles(self, job_keys: Sequence[str]) -> dict[str, set[tuple]] | None:
        """``PredictorService.LookupProfiles`` per configuration: for each of ``job_keys``
        with stored solo profiles, the slots (GPU model, mechanism, MPS share or None, MIG
        profile or None; :func:`elastico.placer.policies.common.profile_slot`) it has one
        for -- the Kubernetes loop's ``profile_lookup``.  A key an older predictor lists in
        ``known_job_keys`` only gets :data:`~elastico.placer.policies.common.ANY_SLOT`
        (known everywhere).  None when the call fails (the caller keeps those jobs unknown)."""
        from elastico.placer.policies.common import ANY_SLOT

        out: dict[str, set[tuple]] = {}
        keys = list(job_keys)
        try:
            for i in range(0, len(keys), 10_000):
                resp = self._stub.LookupProfiles(
                    predictor_pb2.LookupProfilesRequest(job_keys=keys[i:i + 10_000]),
                    timeout=_timeout(self.timeout_s))
                for kp in resp.known_profiles:
                    out.setdefault(kp.job_key, set()).add(
                        (kp.gpu_model, kp.mechanism,
                         round(kp.mps_share, 4) if kp.mechanism == "mps" else None,
                         kp.mig_profile or None))
                for k in resp.known_job_keys:
                    if k not in out:
                        out[k] = {ANY_SLOT}
        except grpc.RpcError:
            return None
        return out

    def reset(self) -> None:
        """Try the predictor again (a new round)."""
        self.degraded = ""
        self.fallback_calls = 0

    def _message(self, p: JobProfile) -> predictor_pb2.JobProfile:
        m = self._msgs.get(p)
        if m is None:
            kw = {k: getattr(p, k) for k in OPTIONAL_FIELDS if getattr(p, k) is not None}
            m = predictor_pb2.JobProfile(job_type=p.job_type, kind=p.kind,
                                         gpu_activity=p.gpu_activity, mem_gib=p.mem_gib, **kw)
            if len(self._msgs) > self.cache_limit:
                self._msgs.clear()
            self._msgs[p] = m
        return m

    def _fetch(self, pairs: Sequence[tuple[JobProfile, JobProfile]], gpu: str) -> bool:
        """Caches s(a, b) and s(b, a) of ``pairs``; False (degraded) when the call failed."""
        req = predictor_pb2.PredictSlowdownRequest(
            pairs=[predictor_pb2.ProfilePair(a=self._message(a), b=self._message(b))
                   for a, b in pairs], gpu_model=gpu, include_b=True)
        with self.tracer.span("predictor.predict", {"predictor.pairs": len(pairs),
                                                    "predictor.gpu_model": gpu}) as span:
            try:
                self.calls += 1
                resp = self._stub.PredictSlowdown(req, timeout=_timeout(self.timeout_s))
            except grpc.RpcError as e:
                self.degraded = (f"predictor {e.code().name}: {e.details()}; analytic slowdown "
                                 "model used for the rest of the round")
                span.set_attribute("predictor.fallback", self.degraded)
                return False
            self.version = resp.model_version
            span.set_attribute("predictor.model_version", resp.model_version)
        for (a, b), sa, sb in zip(pairs, resp.slowdown, resp.slowdown_b):
            self._cache[(a, b, gpu)] = sa
            self._cache[(b, a, gpu)] = sb
        # an older predictor sends no flags: outside the domain (the safe side)
        ina = list(resp.in_domain) or [False] * len(pairs)
        inb = list(resp.in_domain_b) or [False] * len(pairs)
        if len(self._domain) > self.cache_limit:
            self._domain.clear()
        for (a, b), fa, fb in zip(pairs, ina, inb):
            self._domain[(a, b, gpu)] = bool(fa)
            self._domain[(b, a, gpu)] = bool(fb)
        return True

    def in_domain(self, victim: JobProfile, partner: JobProfile) -> bool:
        """Whether the predictor's slowdown of ``victim`` next to ``partner`` is a learned
        prediction inside its training domain (``PredictSlowdownResponse.in_domain``; the
        placer's bound rule, :class:`elastico.predictor.prior.UnknownSafe`).  Asked with the
        pair's slowdowns when not cached.  While degraded (the call failed) the round is the
        fallback's, as every other answer: its own ``in_domain``, or True for a fallback that
        cannot say (the analytic model: the unknown-job rule only, as on a placer that runs
        on it)."""
        gpu = self._gpu((victim, partner))
        key = (victim, partner, gpu)
        if not self.degraded and (key in self._domain
                                  or self._fetch([(victim, partner)], gpu)):
            return self._domain.get(key, False)
        f = getattr(self.fallback, "in_domain", None)
        return True if f is None else bool(f(victim, partner))

    def _gpu(self, residents: Sequence[JobProfile]) -> str:
        return next((r.gpu_model for r in residents if r.gpu_model), "")

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        n = len(residents)
        if n < 2:
            return np.ones(n)
        if self.degraded:
            self.fallback_calls += 1
            return self.fallback.gpu_slowdowns(residents)
        gpu = self._gpu(residents)
        if len(self._cache) > self.cache_limit:
            self._cache.clear()
        cache = self._cache
        missing = [(residents[i], residents[k]) for i in range(n) for k in range(i + 1, n)
                   if (residents[i], residents[k], gpu) not in cache
                   or (residents[k], residents[i], gpu) not in cache]
        if missing and not self._fetch(list(dict.fromkeys(missing)), gpu):
            self.fallback_calls += 1
            return self.fallback.gpu_slowdowns(residents)
        out = np.ones(n)
        for i in range(n):
            acc = 1.0
            for k in range(n):
                if k != i:
                    acc += cache[(residents[i], residents[k], gpu)] - 1.0
            out[i] = acc
        return out

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        return float(self.gpu_slowdowns([a, b])[0])


class RoundSummary:
    """What :class:`RemotePlacerPolicy` keeps of a remote round's pricing
    (``RoundResult.pricing``): ``gap``, ``prices`` (float64[R]), ``resource_names``,
    ``iterations``."""

    def __init__(self, resp: placer_pb2.RunRoundResponse):
        self.gap = resp.pricing_gap
        self.prices = np.array(resp.prices, dtype=np.float64)
        self.resource_names = tuple(resp.resource_names)
        self.iterations = resp.pricing_iterations


class RemotePlacerPolicy:
    """A :class:`~elastico.placer.round.Policy` whose decisions come from
    ``PlacerService.RunRound``: the request carries the round input (nodes, active jobs with
    their current configurations, the bookings in booking order), the response's decisions
    are rebuilt into a new :class:`ClusterState` in the placer's booking order, so the caller
    holds the same book the placer would hold in-process.  ``policy``: the placer's policy
    name; ``env``: the cluster and the knobs sent along (utility, restart_s, scorer), and the
    throughput model for the interference profiles of the rebuilt bookings.  ``timeout_s``:
    deadline of one round (None: none).  A failed call raises :class:`RoundDeadlineExceeded`
    or :class:`DependencyUnavailable` (the caller keeps its previous allocation).
    ``mig_gpus``: the ``(node, GPU)`` pairs in MIG mode, sent in every request (the placer
    sets the nodes' MIG count label from them); None: those the simulator puts in MIG mode
    for the in-process policy of that name (:func:`elastico.model.mig_gpus_of` when it
    ``uses_mig``, else none).  :attr:`uses_mig`: whether any is in MIG mode.

    MIG lending (``env.mig_lending``, the in-process policy's default; not with
    ``env.mig_pools``): ``mig_gpus`` are the *home* MIG GPUs, sent as ``mig_home_gpus``; each
    request sends as ``mig_gpus`` the ones in MIG mode in the round's ``state``, with
    ``PolicyOptions.mig_lending``, and the response's ``mig_switches`` are applied to the
    returned state (and put in ``RoundResult.mig_switches``), as the in-process policy applies
    them to its own."""

    def __init__(self, channel: grpc.Channel, policy: str, env: PolicyEnv, *,
                 timeout_s: float | None = None,
                 mig_gpus: Sequence[tuple[int, int]] | None = None):
        if mig_gpus is None:  # an unknown name: none (the placer refuses it)
            mig = getattr(POLICIES.get(policy), "uses_mig", False)
            mig_gpus = mig_gpus_of(env.nodes) if mig else ()
        # the simulator puts mig_gpus_of(nodes) in MIG mode when this is set
        self.uses_mig = bool(mig_gpus)
        # how the policy's pods share a GPU, for the simulator's truth (docs/model.md 6.)
        self.sharing = getattr(POLICIES.get(policy), "sharing", "mps")
        self._stub = placer_pb2_grpc.PlacerServiceStub(channel)
        self.name = policy
        self.env = env
        self.catalog = JobCatalog(env)
        self.timeout_s = timeout_s
        nodes: Sequence[Node] = env.nodes
        by_node: dict[int, list[int]] = {}
        for n, g in mig_gpus:
            by_node.setdefault(n, []).append(g)
        self.lending = bool(mig_gpus) and env.mig_lending and not env.mig_pools
        self._home = {i: tuple(sorted(g)) for i, g in by_node.items()}
        self._nodes = [wire.node_to_message(nd, by_node.get(i, ()),
                                            by_node.get(i, ()) if self.lending else ())
                       for i, nd in enumerate(nodes)]
        self._node_index = {nd.name: i for i, nd in enumerate(nodes)}
        self._decode = wire.DecisionDecoder(nodes, self._node_index)
        self._empty = ClusterState(nodes, mig_gpus)
        self._options = placer_pb2.PolicyOptions(utility=env.utility, restart_s=env.restart_s,
                                                 scorer=env.scorer, mig_lending=self.lending)

    def request(self, inp: RoundInput, state: ClusterState) -> placer_pb2.RunRoundRequest:
        configs = {a.job.id: a.config for a in inp.jobs}
        nodes = self._nodes
        if self.lending:  # the modes of the moment: lending changes them between rounds
            nodes = []
            for i, m in enumerate(self._nodes):
                home = self._home.get(i, ())
                now = [g for g in home if state.is_mig(i, g)]
                if list(m.mig_gpus) != now:
                    m = wire.node_to_message(self.env.nodes[i], now, home)
                nodes.append(m)
        req = placer_pb2.RunRoundRequest(now=inp.now, nodes=nodes, policy=self.name,
                                         options=self._options)
        add = req.jobs.add  # filled in place: no copy of each job
        for a in inp.jobs:
            wire.fill_job(add(), a)
        add = req.bookings.add
        for b in state.assignments():
            wire.fill_booking(add(), b, configs.get(b.job_id))
        return req

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        req = self.request(inp, state)
        try:
            resp = self._stub.RunRound(req, timeout=_timeout(self.timeout_s))
        except grpc.RpcError as e:
            raise _failed("placer", e) from None
        return self.result(inp, resp, req)

    def result(self, inp: RoundInput, resp: placer_pb2.RunRoundResponse,
               req: placer_pb2.RunRoundRequest | None = None) -> RoundResult:
        """The round's result from a RunRound response (the new book in booking order; with
        MIG lending, on the request's MIG modes with the response's switches applied)."""
        decisions = self._decode(resp.decisions)
        jobs = {a.job.id: a.job for a in inp.jobs}
        switches = []
        if self.lending and req is not None:
            from elastico.placer.policies.mig_lending import MigSwitch

            mig = {(i, g) for i, m in enumerate(req.nodes) for g in m.mig_gpus}
            for sw in resp.mig_switches:
                i = self._node_index[sw.node]
                gpus = tuple(sw.gpu_indices)
                mig = (mig | {(i, g) for g in gpus}) if sw.enabled else \
                    (mig - {(i, g) for g in gpus})
                switches.append(MigSwitch(i, sw.node, gpus, sw.enabled, sw.reason))
            state = ClusterState(self.env.nodes, sorted(mig))
        else:
            state = self._empty.copy()
        profile = self.catalog.profile
        for jid in resp.booking_order:
            d = decisions[jid]
            job = jobs[jid]
            state.rebook(d.assignment, profile(job, d.config), job.slowdown_bound)
        summary = RoundSummary(resp)
        out = RoundResult(decisions, state, pricing=summary, resource_names=summary.resource_names,
                          degraded=resp.degraded,
                          wake_at_s=resp.wake_at_s if resp.HasField("wake_at_s") else None)
        out.mig_switches = switches
        return out

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
