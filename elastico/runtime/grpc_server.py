"""Building an ElastiCo gRPC server: the part every service shares (STYLE.md 8: thin servicers).

One function, :func:`serve_one`, so that every service gets the same production behaviour:
the error interceptor of :mod:`elastico.runtime.grpc_errors` (domain errors -> status codes, never
``UNKNOWN``), a bounded number of in-flight RPCs (beyond it grpc answers
``RESOURCE_EXHAUSTED``), message size limits, gRPC health checking (overall and per service,
``SERVING``, or a caller's own health servicer) and server reflection.  Callers: the pricing,
predictor, placer and node-agent servers, and the scheduler loop's health endpoint
(:mod:`elastico.placer.kube.health`).
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from typing import Any, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from elastico.runtime.grpc_errors import ErrorInterceptor, UnaryInterceptor
from elastico.runtime.metrics import ServiceMetrics
from elastico.runtime.serve_config import is_loopback  # re-exported: callers import it from here too
from elastico.runtime.telemetry import server_interceptor
from elastico.tracing import NOOP, Tracer

__all__ = ["serve_one", "abort_if_expired", "server_credentials", "channel_credentials",
           "MetricsInterceptor", "is_loopback", "bind_error"]

_LOG = logging.getLogger(__name__)


def bind_error(address: str) -> str | None:
    """Why ``address`` (``host:port``) cannot be listened on -- the port is held, the host is
    not this machine's or does not resolve -- or None when it can (port 0 always can).  Tried
    with a plain socket as grpc binds (``SO_REUSEADDR``, no ``SO_REUSEPORT``), so that the
    common failures are reported before grpc's C core logs its own line for them."""
    import socket

    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return None
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        return f"{host} does not resolve: {e}"
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
            except OSError as e:
                return f"{sockaddr[0]}:{sockaddr[1]}: {e.strerror}"
    return None


class MetricsInterceptor(UnaryInterceptor):
    """Times every unary-unary RPC and counts it by its final status code (outermost
    interceptor, so it sees the code the error interceptor chose)."""

    def __init__(self, metrics: ServiceMetrics):
        self.metrics = metrics

    def wrap(self, method: str, behavior: Callable[[Any, grpc.ServicerContext], Any]
             ) -> Callable[[Any, grpc.ServicerContext], Any]:
        metrics = self.metrics

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            t0 = time.perf_counter()
            try:
                return behavior(request, context)
            finally:
                code = context.code()
                metrics.observe_rpc(method, "OK" if code is None else code.name,
                                    time.perf_counter() - t0)

        return timed


def serve_one(address: str, service_name: str,
              add_servicer: Callable[[grpc.Server], None] | None, *,
              thread_name: str, max_workers: int, max_concurrent_rpcs: int,
              max_message_bytes: int,
              credentials: grpc.ServerCredentials | None = None,
              metrics: ServiceMetrics | None = None,
              tracer: Tracer = NOOP,
              health_servicer: health.HealthServicer | None = None,
              label: str | None = None) -> tuple[grpc.Server, int]:
    """A server for one service bound to ``address`` (``host:port``; port 0 picks a free one),
    not started.  ``add_servicer(server)`` registers the service's servicer (the generated
    ``add_...Servicer_to_server``); ``service_name`` is its full name for health and
    reflection (e.g. ``"elastico.v1.PricingService"``).  ``max_message_bytes`` bounds both
    directions.  ``credentials``: TLS (or mutual TLS) server credentials
    (:func:`server_credentials`); None serves plaintext -- callers decide when that is allowed
    (``elastico serve`` only on ``--plaintext``).  ``metrics``: count and time every RPC on
    it (:class:`MetricsInterceptor`).  ``tracer``: an OpenTelemetry tracer
    (:func:`elastico.runtime.telemetry.configure`) opens a server span per RPC, child of the caller's
    span.  ``health_servicer``: None = a new ``HealthServicer`` reporting ``SERVING`` for the
    overall service (``""``) and ``service_name``, fixed; a caller's own one is registered as
    it is and the caller sets its statuses (e.g. a health-only endpoint that follows the
    scheduler loop: ``add_servicer=None``, ``service_name=health.SERVICE_NAME``).  ``label``:
    how the plaintext warning names the server (default ``service_name``).  Returns
    ``(server, port)``; the caller runs ``server.start()`` and ``server.stop(grace)``.  Raises
    RuntimeError when the address cannot be bound."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name),
        interceptors=[i for i in (server_interceptor(tracer),
                                  MetricsInterceptor(metrics) if metrics is not None else None,
                                  ErrorInterceptor()) if i is not None],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
        # SO_REUSEPORT (grpc's default on Linux) would let a second server bind a port this
        # one holds and silently split the connections between them: refuse it instead
        options=[("grpc.max_receive_message_length", max_message_bytes),
                 ("grpc.max_send_message_length", max_message_bytes),
                 ("grpc.so_reuseport", 0)],
    )
    if add_servicer is not None:
        add_servicer(server)
    if health_servicer is None:
        health_servicer = health.HealthServicer()
        for name in ("", service_name):
            health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        tuple(dict.fromkeys((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME))), server)
    port = (server.add_secure_port(address, credentials) if credentials is not None
            else server.add_insecure_port(address))
    if port == 0:  # older grpc returns 0 instead of raising
        raise RuntimeError(f"cannot bind {address!r}")
    if credentials is None and not is_loopback(address):
        # No handler configured -> logging's last resort prints WARNINGs to stderr.
        _LOG.warning("WARNING: %s serves PLAINTEXT on %s, which other hosts can reach: "
                     "anyone on the network can call it and read its traffic; give "
                     "--tls-cert/--tls-key (and --tls-client-ca for mutual TLS) or listen "
                     "on 127.0.0.1", label or service_name, address)
    return server, port


def abort_if_expired(context: grpc.ServicerContext, why: str) -> None:
    """Ends the RPC with ``DEADLINE_EXCEEDED`` and message ``why`` when the caller's deadline
    has already passed.  Servicers call it before work starts and before state is kept, so an
    expired request changes nothing."""
    # grpc clamps time_remaining() at 0; no deadline reads as a very large number.
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, why)


def server_credentials(cert_pem: bytes, key_pem: bytes,
                       client_ca_pem: bytes | None = None) -> grpc.ServerCredentials:
    """TLS server credentials from PEM bytes: the server's certificate chain and private key;
    with ``client_ca_pem`` mutual TLS -- a client must present a certificate signed by that CA
    or the handshake fails (``require_client_auth``)."""
    return grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=client_ca_pem,
                                       require_client_auth=client_ca_pem is not None)


def channel_credentials(ca_pem: bytes, cert_pem: bytes | None = None,
                        key_pem: bytes | None = None) -> grpc.ChannelCredentials:
    """TLS client credentials: ``ca_pem`` verifies the server; ``cert_pem``/``key_pem`` (both or
    neither) are the client's identity for mutual TLS."""
    return grpc.ssl_channel_credentials(root_certificates=ca_pem, private_key=key_pem,
                                        certificate_chain=cert_pem)
