"""OpenTelemetry for ElastiCo processes: the adapter behind :class:`elastico.tracing.Tracer`,
configured by the standard ``OTEL_*`` environment variables, and the gRPC interceptors that
carry the trace context across service hops (W3C ``traceparent``), so one scheduling round is
one trace over several processes.

Configuration (read by :func:`configure`; the OpenTelemetry SDK reads the rest itself):

* tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
  is set, or ``OTEL_TRACES_EXPORTER=otlp``; off when ``OTEL_SDK_DISABLED=true`` or
  ``OTEL_TRACES_EXPORTER=none`` (off = :data:`elastico.tracing.NOOP`, zero cost);
* export is OTLP over gRPC (``OTEL_EXPORTER_OTLP_*``: endpoint, headers, insecure, certificate,
  timeout), batched (``OTEL_BSP_*``);
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` override the service name given here.

Who calls it: ``elastico serve`` (each service process) and the scheduling loop.  An adapter
(it wraps gRPC channels and servers): algorithm code sees only :class:`elastico.tracing.Tracer`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from elastico.tracing import NOOP, Span, Tracer

__all__ = ["OtelTracer", "configure", "tracing_enabled", "server_interceptor",
           "instrument_channel"]


def tracing_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for trace export (module docstring)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "otlp" or bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                                      or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class OtelTracer:
    """:class:`elastico.tracing.Tracer` over an OpenTelemetry ``TracerProvider``."""

    def __init__(self, provider: TracerProvider, name: str = "elastico"):
        self.provider = provider
        self._tracer = provider.get_tracer(name)

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any] | None = None) -> Iterator[Span]:
        with self._tracer.start_as_current_span(name, attributes=attributes) as s:
            yield s

    def shutdown(self) -> None:
        """Flush the spans still queued and stop exporting (call once at process exit)."""
        self.provider.shutdown()


def configure(service_name: str, env: Mapping[str, str] | None = None) -> Tracer:
    """The process's tracer: an :class:`OtelTracer` exporting OTLP when the environment asks
    for it (:func:`tracing_enabled`), else :data:`elastico.tracing.NOOP`.  ``service_name``
    (e.g. ``"elastico-pricing"``) is the ``service.name`` resource attribute unless
    ``OTEL_SERVICE_NAME`` says otherwise.  The provider is this function's own, not the
    OpenTelemetry global, so two services in one process (tests, ``elastico up``) stay apart."""
    if not tracing_enabled(env):
        return NOOP
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.name": service_name})  # OTEL_* env applied on top
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracer(provider)


def server_interceptor(tracer: Tracer):
    """A gRPC server interceptor that opens a SERVER span per RPC as the child of the caller's
    span (context from the request metadata); None when ``tracer`` is not an OtelTracer."""
    if not isinstance(tracer, OtelTracer):
        return None
    from opentelemetry.instrumentation.grpc import server_interceptor as otel_server

    return otel_server(tracer_provider=tracer.provider)


def instrument_channel(channel, tracer: Tracer):
    """``channel`` wrapped so every call opens a CLIENT span and sends the trace context in
    its metadata; the channel itself when ``tracer`` is not an OtelTracer."""
    if not isinstance(tracer, OtelTracer):
        return channel
    from opentelemetry.instrumentation.grpc import client_interceptor, intercept_channel

    return intercept_channel(channel, client_interceptor(tracer_provider=tracer.provider))

