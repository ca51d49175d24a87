"""``elastico schedule``: run the placer's Kubernetes scheduler loop (an adapter: imports the
``kubernetes`` client; :mod:`elastico.cli` registers it).

Connects with the in-cluster service account (or ``--kubeconfig``), elects a leader with a
``coordination.k8s.io`` Lease (``--lease-namespace``/``--lease-name``; identity from
``--identity``, default the ``POD_NAME`` environment variable or the host name) and schedules
every pod with ``schedulerName: elastico`` (docs/annotations.md).  Prices and predicts
in-process, or through the PricingService / PredictorService at ``--pricing-address`` /
``--predictor-address`` (TLS with ``--upstream-ca``, mutual TLS with ``--upstream-cert`` and
``--upstream-key``).  Serves gRPC health checking on ``--health-address`` and Prometheus
metrics on ``--metrics-port``.  One ``elastico.round`` trace per round and a ``placer.bind``
span per bind go to OTLP when the ``OTEL_*`` environment asks for them.  SIGTERM/SIGINT stop it
cleanly (the Lease is released so a standby takes over at once).

Configuration is the placer's of ``elastico serve`` (:mod:`elastico.runtime.serve_config`, same
precedence: flags > environment > ``--config`` TOML file > defaults): ``[serve]``,
``[serve.tls]`` and ``[serve.placer]`` of the file; ``address`` there (``--health-address``,
``ELASTICO_PLACER_ADDRESS``) is the health endpoint's, default ``127.0.0.1:50055`` -- enough for
probes run inside the pod, and off ``elastico up``'s ports 50051..50054 (its placer listens on
50053), so that both can run on one machine; the cluster's TOML sets ``0.0.0.0:50053`` (the pod
runs no other placer) so that the metrics port, which listens on the same host, is reachable.  The health endpoint serves TLS (mutual TLS with
a client CA) when a certificate is configured, plaintext with ``--plaintext``; on a loopback
address with no TLS configured it serves plaintext (nothing off the host can reach it), on any
other address it refuses to start.

Health (:mod:`elastico.placer.kube.health`): ``SERVING`` once the pod and node informers have
listed and while the loop thread runs and turns; ``NOT_SERVING`` before, or when the loop
thread died or hung -- a standby replica is ``SERVING``.  When the loop thread dies the process
exits with status 1 (Kubernetes restarts it).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from elastico.errors import InvalidArgument
from elastico.runtime.serve_config import ServeConfig, load_serve_config, overrides_from_args

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

__all__ = ["register", "run", "load_config"]

log = logging.getLogger(__name__)

#: The health endpoint's address when nothing configures one: loopback, and not one of
#: ``elastico up``'s ports (50051..50054) so that a local stack and the loop can share a host.
DEFAULT_HEALTH_ADDRESS = "127.0.0.1:50055"


def register(sub: argparse._SubParsersAction) -> None:
    from elastico.cli.serve import add_upstream_arguments  # the placer's flags, one definition

    p = sub.add_parser("schedule", help="run the Kubernetes scheduler loop (schedulerName: elastico)",
                       description=__doc__.split("\n\n")[1],
                       epilog="Configuration: flags > environment (ELASTICO_PLACER_*, "
                              "ELASTICO_TLS_*, ELASTICO_UPSTREAM_*, ELASTICO_METRICS_PORT) > "
                              "--config TOML ([serve], [serve.tls], [serve.placer]) > defaults; "
                              "docs/deploy.md. Exit status: 0 after a clean stop, 1 when the "
                              "loop died, 2 bad configuration.")
    p.add_argument("--kubeconfig", default=None, metavar="FILE",
                   help="kubeconfig to use (default: the in-cluster service account)")
    p.add_argument("--identity", default=None,
                   help="this replica's name in the Lease (default: $POD_NAME or the host name)")
    p.add_argument("--lease-namespace", default="elastico-system",
                   help="namespace of the leader-election Lease (default elastico-system)")
    p.add_argument("--lease-name", default="elastico-placer",
                   help="name of the leader-election Lease (default elastico-placer)")
    p.add_argument("--no-leader-election", action="store_true",
                   help="bind without a Lease (only ever with a single replica)")
    p.add_argument("--policy", default="elastico", choices=("elastico", "exclusive"),
                   help="scheduling policy of every round: elastico (shapes, prices, "
                        "interference-aware placement) or exclusive (requested whole GPUs, "
                        "Kubernetes today); default elastico")
    p.add_argument("--round-interval", type=float, default=2.0, metavar="S",
                   help="seconds between rounds (default 2)")
    p.add_argument("--round-timeout", type=float, default=30.0, metavar="S",
                   help="deadline of one round's pricing and predictor calls, seconds; pricing "
                        "past it abandons the round with nothing applied (default 30)")
    p.add_argument("--min-run-s", type=float, default=300.0, metavar="S",
                   help="minimum guaranteed run of an offline LLM inference pod, seconds since "
                        "its start (status.startTime): only after it may a waiting pod of "
                        "normal priority have it evicted (docs/annotations.md, \"Priority\"); "
                        "default 300, as `elastico simulate --min-run-s`")
    p.add_argument("--no-mig-lending", action="store_true",
                   help="keep every node's MIG mode as its agent reports it; by default an "
                        "empty MIG-mode node whose agent runs with --follow-mig-mode is lent "
                        "whole while jobs wait that only whole GPUs serve, and comes back "
                        "after (docs/model.md 5., elastico.io/mig-lending on the Node)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="logging threshold (default INFO)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="TOML config file ([serve], [serve.tls], [serve.placer])")
    p.add_argument("--health-address", default=None, metavar="HOST:PORT",
                   help="gRPC health endpoint (default 127.0.0.1:50055, off elastico up's ports; "
                        "0 = any free port; "
                        "env ELASTICO_PLACER_ADDRESS)")
    p.add_argument("--metrics-port", default=None, metavar="P",
                   help="serve Prometheus metrics on http://HOST:P/metrics, HOST that of the "
                        "health address (0 = any free port; default off; env "
                        "ELASTICO_METRICS_PORT)")
    p.add_argument("--tls-cert", default=None, metavar="PEM",
                   help="health endpoint's certificate chain (env ELASTICO_TLS_CERT)")
    p.add_argument("--tls-key", default=None, metavar="PEM",
                   help="its private key (env ELASTICO_TLS_KEY)")
    p.add_argument("--tls-client-ca", default=None, metavar="PEM",
                   help="CA that probe certificates must chain to: mutual TLS")
    p.add_argument("--plaintext", action="store_true", default=None,
                   help="serve the health endpoint without TLS on a non-loopback address")
    add_upstream_arguments(p, scope="", predictor_default="the bundled model in-process")
    p.set_defaults(func=run)


def load_config(args: argparse.Namespace, env: Any = None) -> ServeConfig:
    """The placer's :class:`~elastico.runtime.serve_config.ServeConfig` from ``args`` (the parsed
    command line), ``env`` (None = the process environment) and ``args.config``; a loopback
    health address with no TLS configured gets plaintext (module docstring)."""
    return load_serve_config("placer", config_path=args.config, env=env,
                             overrides=overrides_from_args(args, args.health_address),
                             default_address=DEFAULT_HEALTH_ADDRESS,
                             plaintext_on_loopback="health address")


def load_kube_config(kubeconfig: str | None) -> None:
    """Configures the ``kubernetes`` client from ``kubeconfig`` (a file path) or, when None,
    the in-cluster service account.  Raises InvalidArgument naming the file (or "in-cluster
    config") and the client library's reason: a missing or unreadable file, broken YAML, a
    file without a usable context, or no service account outside a pod."""
    import yaml
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig and not Path(kubeconfig).is_file():
        raise InvalidArgument("--kubeconfig", kubeconfig, "an existing kubeconfig file")
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            config.load_incluster_config()
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError,
            AttributeError) as e:
        # the client library reports a broken file with whatever its parsing raised
        reason = " ".join(str(e).split()) or type(e).__name__
        if kubeconfig:
            raise InvalidArgument("--kubeconfig", kubeconfig,
                                  f"a readable kubeconfig with a usable current context "
                                  f"({reason})") from None
        raise InvalidArgument("in-cluster config", "not available",
                              f"running in a pod with a service account, or --kubeconfig FILE "
                              f"({reason})") from None


def run(args: argparse.Namespace) -> int:
    from kubernetes import client

    from elastico.runtime.metrics import LoopMetrics
    from elastico.placer.kube.health import LoopHealth, start_health_endpoint
    from elastico.placer.kube.leader import LeaseElector
    from elastico.placer.kube.loop import LoopConfig, SchedulerLoop, default_policy_factory
    from elastico.predictor import default_slowdown_model
    from elastico.cli.serve import (
        start_metrics_http, stop_on_signals, tls_credentials, upstream_clients)
    from elastico.runtime.telemetry import configure
    from elastico.perf.throughput import ThroughputModel

    # Kubernetes' own rules (apimachinery validation): a namespace is a DNS-1123 label, a
    # Lease name a DNS-1123 subdomain; refused here, not as an API error every round
    if not _DNS1123_LABEL.fullmatch(args.lease_namespace or ""):
        raise InvalidArgument("--lease-namespace", args.lease_namespace,
                              "a DNS-1123 label: at most 63 of a-z, 0-9 and '-', starting and "
                              "ending with a letter or digit")
    if not (_DNS1123_SUBDOMAIN.fullmatch(args.lease_name or "") and len(args.lease_name) <= 253):
        raise InvalidArgument("--lease-name", args.lease_name,
                              "a DNS-1123 subdomain: at most 253 of a-z, 0-9, '-' and '.', "
                              "each dot-separated part starting and ending with a letter or digit")
    if not args.round_interval > 0:
        raise InvalidArgument("--round-interval", args.round_interval, "a number of seconds > 0")
    if not (math.isfinite(args.min_run_s) and args.min_run_s >= 0):
        raise InvalidArgument("--min-run-s", args.min_run_s, "a finite number of seconds >= 0")
    if not 0 < args.round_timeout <= 3600:
        raise InvalidArgument("--round-timeout", args.round_timeout, "seconds in (0, 3600]")
    cfg = load_config(args)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "DEBUG":  # urllib3 warns once per retry of every request; the
        # informers and the loop log each failure once, with its cause and their next retry
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    load_kube_config(args.kubeconfig)
    identity = args.identity or os.environ.get("POD_NAME") or socket.gethostname()
    api = client.ApiClient()
    elector = None if args.no_leader_election else LeaseElector(
        client.CoordinationV1Api(api), args.lease_namespace, args.lease_name, identity)
    tracer = configure("elastico-placer")
    pricer, remote_slowdown = upstream_clients(cfg, tracer)
    throughput = ThroughputModel.bundled()
    # the same in-process default as `serve placer` (the bundled LightGBM model; the analytic
    # model, with a logged warning, where it cannot be loaded)
    slowdown = remote_slowdown or default_slowdown_model()[0]
    metrics = LoopMetrics()
    loop = SchedulerLoop(
        client.CoreV1Api(api), elector=elector, tracer=tracer, metrics=metrics,
        throughput=throughput, slowdown=slowdown,
        policy_factory=default_policy_factory(throughput, slowdown, policy=args.policy,
                                              tracer=tracer, pricer=pricer,
                                              min_run_s=args.min_run_s),
        config=LoopConfig(identity=identity, policy=args.policy,
                          round_interval_s=args.round_interval, min_run_s=args.min_run_s,
                          round_timeout_s=args.round_timeout,
                          mig_lending=not args.no_mig_lending),
        # issue 23: with a predictor service, jobs it holds no solo profile of are unknown
        # (co-located only where the prior's worst case keeps every bound); without one
        # there is no profile store, and every job is taken as profiled
        profile_lookup=None if remote_slowdown is None else remote_slowdown.known_profiles)

    stop = threading.Event()
    thread = threading.Thread(target=loop.run_forever, args=(stop,), name="scheduler-loop",
                              daemon=True)
    # a round may legitimately take long (many pods to write); a loop silent for this long
    # is hung, and the liveness probe restarts it
    stall_s = max(120.0, 10 * args.round_interval + args.round_timeout)
    from elastico.runtime.grpc_server import bind_error

    busy = bind_error(cfg.address)  # before grpc, which would log its own C-core line too
    if busy is not None:
        raise InvalidArgument("health address", cfg.address,
                              f"a free address of this host ({busy})")
    try:
        endpoint = start_health_endpoint(cfg.address, LoopHealth(loop, thread, stall_s=stall_s),
                                         credentials=tls_credentials(cfg.tls))
    except RuntimeError as e:  # grpc says no more than "could not bind"
        raise InvalidArgument("health address", cfg.address,
                              f"a free address of this host, with a matching TLS certificate "
                              f"and key where configured ({e})") from None
    host = cfg.address.rpartition(":")[0]
    http = start_metrics_http(cfg, metrics.registry, endpoint)
    upstream = ", ".join(f"{what} {addr}" for what, addr in (("pricing", cfg.pricing_address),
                                                             ("predictor", cfg.predictor_address))
                         if addr) or "in-process pricing and prediction"
    with stop_on_signals(stop):
        print(f"elastico schedule: {identity} starting (policy {args.policy}; {upstream}); "
              f"health on {host}:{endpoint.port} ({cfg.security})"
              + (f"; metrics on http://{host}:{http.server_port}/metrics" if http else ""),
              file=sys.stderr, flush=True)
        thread.start()
        rc = 0
        try:
            while not stop.wait(0.5):
                if not thread.is_alive():
                    endpoint.update()  # NOT_SERVING at once, for as long as we are still here
                    log.error("the scheduler loop thread died; exiting so that it is restarted")
                    rc = 1
                    break
        finally:
            stop.set()
            thread.join(30)
            endpoint.stop()
            if http is not None:
                http.shutdown()
            shutdown = getattr(tracer, "shutdown", None)
            if shutdown is not None:
                shutdown()
    return rc
