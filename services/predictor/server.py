"""gRPC ``elastico.v1.PredictorService``: a thin adapter over
:class:`elastico.predictor.service.PredictorCore`.

Each RPC converts the request's messages to :class:`~elastico.predictor.JobProfile` /
:class:`~elastico.predictor.observations.Observation` (validated by the schema: a bad value
raises InvalidArgument naming the wire field, e.g. ``pairs[3].b.sm_activity``), calls the
core and converts the result back.  Errors are mapped by
:class:`elastico.runtime.grpc_errors.ErrorInterceptor` (``INVALID_ARGUMENT`` for bad input,
``INTERNAL`` for anything unexpected).  A ReportObservation with one bad observation stores
none of them.

State: the core's serving model (swapped atomically when the store's CURRENT changes; a
refused model file leaves the old one serving) and the reported observations.

Deadlines: prediction is pure CPU and short; the deadline is checked before the work (no
effort on a call whose caller has gone) and after it (a late answer is DEADLINE_EXCEEDED).
ReportObservation checks it again just before storing: a caller that gave up retries, and the
rows must not be stored twice.

Who calls it: the placer (later, over the network), node agents (ReportObservation),
``grpcurl``, Kubernetes probes (health).  Whom it calls: the core, grpc, grpc_health,
grpc_reflection.  This is an adapter module: it is exempt from the no-grpc rule of
tests/test_layers.py.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable

import grpc

from elastico.errors import InvalidArgument
from elastico.runtime.grpc_server import abort_if_expired, serve_one
from elastico.runtime.metrics import ServiceMetrics
from elastico.tracing import NOOP, Tracer
from elastico.predictor.observations import Observation, analytic_activity
from elastico.predictor.profile import JobProfile
from elastico.predictor.profiles import MAX_REPORT
from elastico.predictor.schema import check_gpu_model, check_job_field
from elastico.predictor.service import PredictorCore
from elastico.v1 import predictor_pb2, predictor_pb2_grpc

__all__ = ["SERVICE_NAME", "PredictorServicer", "build_server", "profile_from_message",
           "observation_from_message", "solo_profile_from_message"]

#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME: str = predictor_pb2.DESCRIPTOR.services_by_name["PredictorService"].full_name
#: Largest request/response accepted (10,000 pairs of full profiles is ~4 MB).
MAX_MESSAGE_BYTES = 256 * 2**20


def profile_from_message(m: predictor_pb2.JobProfile, gpu_model: str, where: str) -> JobProfile:
    """A validated profile from a wire ``JobProfile``; InvalidArgument names ``where.field``.
    An unset ``gpu_activity`` is estimated by
    :func:`elastico.predictor.observations.analytic_activity` (docs/predictor.md)."""
    kw: dict[str, Any] = {fd.name: v for fd, v in m.ListFields()}  # the set fields only
    job_type = kw.pop("job_type", "")
    kind = kw.pop("kind", "")
    activity = kw.pop("gpu_activity", None)
    mem = kw.pop("mem_gib", 0.0)
    try:
        check_job_field("mem_gib", mem, "profile.")  # the schema's bounds, not only >= 0
        p = JobProfile(job_type, kind, 1.0 if activity is None else activity, mem,
                       gpu_model=gpu_model, **kw)
        if activity is None:
            p = replace(p, gpu_activity=analytic_activity(p))
    except InvalidArgument as e:
        raise InvalidArgument(where + "." + e.field.removeprefix("profile."), e.value,
                              e.allowed) from None
    return p


def _require_sides(m: Any, where: str) -> None:
    """A pair or observation must carry both jobs: proto3 reads an absent ``a``/``b`` as an
    empty profile, which would be predicted as an unknown, fully busy job instead of failing."""
    for side in ("a", "b"):
        if not m.HasField(side):
            raise InvalidArgument(f"{where}.{side}", "missing",
                                  "a JobProfile for each job of the pair (at least job_type)")


def observation_from_message(m: predictor_pb2.Observation, where: str) -> Observation:
    """A validated observation from a wire ``Observation``; InvalidArgument names the field
    (``observations[i].a.sm_activity``, ``observations[i].slowdown_a``, ...)."""
    gpu = m.gpu_model
    try:
        check_gpu_model(gpu, "gpu_model")
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}.gpu_model", e.value, e.allowed) from None
    _require_sides(m, where)
    a = profile_from_message(m.a, gpu, f"{where}.a")
    b = profile_from_message(m.b, gpu, f"{where}.b")
    try:
        return Observation(a, b, gpu, m.slowdown_a,
                           m.slowdown_b if m.HasField("slowdown_b") else None, m.source)
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}.{e.field}", e.value, e.allowed) from None


_SOLO_OPTIONAL = ("mps_share", "sm_activity", "dram_activity", "mem_gib", "pcie_rx_gbs",
                  "pcie_tx_gbs", "process_sm_util")


def solo_profile_from_message(m: predictor_pb2.SoloProfile) -> dict[str, Any]:
    """The :class:`~elastico.predictor.profiles.StoredProfile` fields of a wire
    ``SoloProfile`` (unset optional counters -> None; validated by the store)."""
    out: dict[str, Any] = {"job_key": m.job_key, "gpu_model": m.gpu_model,
                           "mechanism": m.mechanism, "mig_profile": m.mig_profile or None,
                           "samples": int(m.samples), "period_s": m.period_s, "kind": m.kind,
                           "node": m.node}
    for name in _SOLO_OPTIONAL:
        out[name] = getattr(m, name) if m.HasField(name) else None
    return out


class PredictorServicer(predictor_pb2_grpc.PredictorServiceServicer):
    """PredictSlowdown and ReportObservation over one :class:`PredictorCore`."""

    def __init__(self, core: PredictorCore, metrics: ServiceMetrics | None = None,
                 tracer: Tracer = NOOP):
        self.core = core
        self._metrics = metrics
        self._tracer = tracer

    def PredictSlowdown(self, request: predictor_pb2.PredictSlowdownRequest,
                        context: grpc.ServicerContext) -> predictor_pb2.PredictSlowdownResponse:
        abort_if_expired(context, "deadline passed before predicting")
        gpu = request.gpu_model
        check_gpu_model(gpu, "gpu_model")
        cache: dict[bytes, JobProfile] = {}
        a, b = [], []
        for i, pair in enumerate(request.pairs):
            _require_sides(pair, f"pairs[{i}]")
            for side, out in (("a", a), ("b", b)):
                msg = getattr(pair, side)
                key = msg.SerializeToString(deterministic=True)
                p = cache.get(key)
                if p is None:
                    p = cache[key] = profile_from_message(msg, gpu, f"pairs[{i}].{side}")
                out.append(p)
        with self._tracer.span("predictor.predict", {"predictor.pairs": len(a),
                                                     "predictor.gpu_model": gpu}) as span:
            sa, sb, version = self.core.predict(a, b, gpu, both=request.include_b)
            span.set_attribute("predictor.model_version", version)
        if self._metrics is not None:
            self._metrics.observe_prediction(len(a), fallback=version.startswith("analytic"))
        abort_if_expired(context, "deadline passed while predicting")
        return predictor_pb2.PredictSlowdownResponse(
            slowdown=sa.tolist(), slowdown_b=[] if sb is None else sb.tolist(),
            model_version=version, in_domain=self.core.in_domain(a, b),
            in_domain_b=[] if sb is None else self.core.in_domain(b, a))

    def ReportObservation(self, request: predictor_pb2.ReportObservationRequest,
                          context: grpc.ServicerContext
                          ) -> predictor_pb2.ReportObservationResponse:
        abort_if_expired(context, "deadline passed before the observations were read")
        obs = [observation_from_message(m, f"observations[{i}]")
               for i, m in enumerate(request.observations)]
        # a caller whose deadline passed will retry: storing now would store the rows twice
        abort_if_expired(context, "deadline passed; no observation stored")
        stored = self.core.report(obs)
        return predictor_pb2.ReportObservationResponse(accepted=len(obs), stored=stored)

    def ReportProfile(self, request: predictor_pb2.ReportProfileRequest,
                      context: grpc.ServicerContext) -> predictor_pb2.ReportProfileResponse:
        abort_if_expired(context, "deadline passed before the profiles were read")
        if len(request.profiles) > MAX_REPORT:
            raise InvalidArgument("profiles", len(request.profiles), f"at most {MAX_REPORT} per request")
        rows = [solo_profile_from_message(m) for m in request.profiles]
        abort_if_expired(context, "deadline passed; no profile stored")
        stored = self.core.profiles.report(rows)  # all or none, the field named
        return predictor_pb2.ReportProfileResponse(accepted=len(rows), stored=stored)

    def LookupProfiles(self, request: predictor_pb2.LookupProfilesRequest,
                       context: grpc.ServicerContext) -> predictor_pb2.LookupProfilesResponse:
        """Which of the requested job keys have a stored solo profile (the placer's lookup
        for the unknown-job rule, docs/predictor.md "Unknown jobs")."""
        keys = list(request.job_keys)
        if not keys or len(keys) > MAX_REPORT:
            raise InvalidArgument("job_keys", len(keys), f"1..{MAX_REPORT} job keys")
        known = self.core.profiles.known_slots(keys)
        return predictor_pb2.LookupProfilesResponse(
            known_job_keys=[k for k in dict.fromkeys(keys) if k in known],
            known_profiles=[
                predictor_pb2.KnownProfile(job_key=k, gpu_model=m, mechanism=mech,
                                           mps_share=share or 0.0, mig_profile=mig or "")
                for k in dict.fromkeys(keys) for m, mech, share, mig in sorted(
                    known.get(k, ()), key=lambda t: (t[0], t[1], t[2] or 0.0, t[3] or ""))])


def build_server(address: str = "127.0.0.1:0", *, core: PredictorCore | None = None,
                 max_workers: int = 4, max_concurrent_rpcs: int = 32,
                 credentials: grpc.ServerCredentials | None = None,
                 metrics: ServiceMetrics | None = None,
                 tracer: Tracer = NOOP) -> tuple[grpc.Server, int]:
    """A PredictorService server bound to ``address`` (port 0 picks a free port), not started.

    ``core``: the :class:`PredictorCore` to serve (default: a core over the bundled model,
    reports kept in memory).  Registers the standard health service (``""`` and
    :data:`SERVICE_NAME` SERVING) and server reflection; installs
    :class:`~elastico.runtime.grpc_errors.ErrorInterceptor`.  More than ``max_concurrent_rpcs`` RPCs in
    flight are refused by grpc with ``RESOURCE_EXHAUSTED``.

    ``credentials``: TLS / mutual-TLS server credentials
    (:func:`elastico.runtime.grpc_server.server_credentials`); None = plaintext.  ``metrics``: the
    Prometheus metrics to record into (:class:`elastico.runtime.metrics.ServiceMetrics`).
    ``tracer``: OpenTelemetry tracer: a server span per RPC and a ``predictor.predict`` child
    with the pair count and model version.

    Returns ``(server, port)``; the caller runs ``server.start()`` and ``server.stop(grace)``.
    """
    servicer = PredictorServicer(core or PredictorCore(), metrics, tracer)
    return serve_one(address, SERVICE_NAME,
                     lambda server: predictor_pb2_grpc.add_PredictorServiceServicer_to_server(
                         servicer, server),
                     thread_name="elastico-predictor", max_workers=max_workers,
                     max_concurrent_rpcs=max_concurrent_rpcs, max_message_bytes=MAX_MESSAGE_BYTES,
                     credentials=credentials, metrics=metrics, tracer=tracer)


def start_refit_loop(core: PredictorCore, schedule: Any, period_s: float,
                     clock: Callable[[], float] | None = None) -> threading.Event:
    """Runs :func:`elastico.predictor.service.refit_if_due` every ``period_s`` seconds in a
    daemon thread (docs/predictor.md, "Online refit"); returns the Event that stops it.
    ``schedule``: a :class:`~elastico.predictor.service.RefitSchedule`; ``clock``: monotonic
    seconds (default :func:`time.monotonic`).  A refit that fails or is refused is logged by
    ``refit_if_due``; the serving model keeps serving."""
    import logging
    import time

    from elastico.predictor.service import refit_if_due

    clock = clock or time.monotonic
    stop = threading.Event()
    log = logging.getLogger(__name__)

    def loop() -> None:
        while not stop.wait(period_s):
            try:
                rep = refit_if_due(core, schedule, clock())
            except Exception:  # noqa: BLE001 -- a refit bug must not kill the server
                log.exception("refit failed; still serving %s", core.version)
                continue
            if rep is not None:
                log.info("refit %s: serving %s (%s)", rep.get("status"), core.version,
                         rep.get("reason", ""))

    threading.Thread(target=loop, daemon=True, name="elastico-predictor-refit").start()
    return stop

