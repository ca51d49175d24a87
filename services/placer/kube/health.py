"""The scheduler loop's health endpoint: gRPC health checking (``grpc.health.v1``) for
``elastico schedule``, so that Kubernetes probes it like the other ElastiCo Deployments
(``grpc_health_probe`` with the pod's own certificate).

The overall service (``""``) is ``SERVING`` when

* both informers (pods, nodes) have listed once (the caches are warm), and
* the loop thread is alive and turned within ``stall_s`` seconds (:attr:`SchedulerLoop.heartbeat`
  is set at the start of every turn of ``run_forever``; a round hung on a call that never
  returns stops it);

and ``NOT_SERVING`` otherwise.  A standby replica (not holding the Lease) is healthy: it keeps
its caches warm to take over.  Leadership is the ``elastico_leader`` metric, not health.

An adapter (imports grpc).  Who calls it: :mod:`elastico.cli.schedule` and the tests.  Whom it
calls: ``grpc_health``'s ``HealthServicer`` and :func:`elastico.runtime.grpc_server.serve_one` (the
server every ElastiCo service gets: reflection, the error interceptor, the warning about
plaintext off loopback), here with the loop-following servicer instead of a fixed one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2

from elastico.runtime.grpc_server import serve_one

__all__ = ["LoopHealth", "HealthEndpoint", "start_health_endpoint"]

log = logging.getLogger(__name__)
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_MAX_MESSAGE_BYTES = 2**20


class LoopHealth:
    """Judges a running scheduler loop.  ``loop``: a
    :class:`~elastico.placer.kube.loop.SchedulerLoop` (its ``pods``/``nodes`` informers and
    ``heartbeat``); ``thread``: the thread running its ``run_forever``; ``stall_s``: seconds
    without a heartbeat after which the loop counts as hung; ``clock``: monotonic seconds."""

    def __init__(self, loop, thread: threading.Thread, *, stall_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic):
        self.loop, self.thread, self.stall_s, self.clock = loop, thread, stall_s, clock

    def problem(self) -> str:
        """Why the loop is unhealthy, or ``""`` when it is healthy."""
        if not self.thread.is_alive():
            return "the scheduler loop thread is not running"
        waiting = [inf.name for inf in (self.loop.pods, self.loop.nodes) if not inf.synced.is_set()]
        if waiting:
            return f"informers not synced yet: {', '.join(waiting)}"
        age = self.clock() - self.loop.heartbeat
        if age > self.stall_s:
            return f"no loop turn for {age:.0f} s (limit {self.stall_s:g} s)"
        return ""


class HealthEndpoint:
    """A started health server (:func:`start_health_endpoint`): ``port`` it listens on,
    ``servicer`` (the standard ``HealthServicer``), :meth:`stop`."""

    def __init__(self, server: grpc.Server, port: int, servicer: health.HealthServicer,
                 health_of: LoopHealth, poll_s: float):
        self.server, self.port, self.servicer = server, port, servicer
        self.health = health_of
        self.poll_s = poll_s
        self.status = _NOT_SERVING
        self._stop = threading.Event()
        self._last_problem: str | None = None
        self._served = False  # SERVING reached once: a problem after it is a warning
        self.update()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="loop-health")
        self._thread.start()

    def update(self) -> int:
        """Re-judge the loop and publish the status (also to ``Watch`` streams); returns it."""
        why = self.health.problem()
        if why != self._last_problem:
            if why and self._served:
                log.warning("health: NOT_SERVING: %s", why)
            elif why:  # not up yet (the thread starts after the endpoint): no alarm
                log.info("health: starting (NOT_SERVING until ready: %s)", why)
            else:
                log.info("health: SERVING")
                self._served = True
            self._last_problem = why
        self.status = _NOT_SERVING if why else _SERVING
        self.servicer.set("", self.status)
        return self.status

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.update()

    def stop(self, grace: float | None = 1.0) -> None:
        self._stop.set()
        self._thread.join(5)
        self.servicer.enter_graceful_shutdown()
        self.server.stop(grace).wait()


def start_health_endpoint(address: str, health_of: LoopHealth, *,
                          credentials: grpc.ServerCredentials | None = None,
                          poll_s: float = 1.0) -> HealthEndpoint:
    """Serve ``grpc.health.v1.Health`` (and reflection) on ``address`` (``host:port``, port 0
    picks a free one), re-judging ``health_of`` every ``poll_s`` seconds.  ``credentials``:
    TLS or mutual-TLS server credentials (:func:`elastico.runtime.grpc_server.server_credentials`);
    None serves plaintext (warned about off loopback).  Raises RuntimeError when the address
    cannot be bound."""
    servicer = health.HealthServicer()
    servicer.set("", _NOT_SERVING)  # a new servicer says SERVING; nothing is judged yet
    # health checks and reflection only: two workers and 1 MiB messages are plenty
    server, port = serve_one(address, health.SERVICE_NAME, None, thread_name="loop-health",
                             max_workers=2, max_concurrent_rpcs=16,
                             max_message_bytes=_MAX_MESSAGE_BYTES, credentials=credentials,
                             health_servicer=servicer,
                             label="the scheduler loop's health endpoint")
    server.start()
    return HealthEndpoint(server, port, servicer, health_of, poll_s)
