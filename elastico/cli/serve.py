"""``elastico serve SERVICE``: run one ElastiCo gRPC service in this process until SIGTERM or
SIGINT, then stop gracefully (in-flight RPCs get ``grace_s`` seconds to finish; new ones are
refused).  Configuration: :mod:`elastico.runtime.serve_config` (flags > environment > TOML file).

An adapter (it imports grpc): registered by the composition root :mod:`elastico.cli`.  The
services themselves are built by ``elastico.pricing.server.build_server`` and
``elastico.predictor.server.build_server``, ``elastico.placer.server.build_server`` (pricing
and prediction in-process, or through the services at ``--pricing-address`` /
``--predictor-address``) and ``elastico.nodeagent.server.build_server`` (refused with a clear
message while that module does not exist).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from elastico.errors import InvalidArgument
from elastico.runtime.grpc_server import bind_error, server_credentials
from elastico.runtime.metrics import ServiceMetrics
from elastico.runtime.telemetry import OtelTracer
from elastico.runtime.telemetry import configure as configure_tracing
from elastico.tracing import NOOP, Tracer
from elastico.runtime.serve_config import (
    DEFAULT_PORTS, SERVICES, ServeConfig, TlsConfig, load_serve_config, overrides_from_args)

__all__ = ["register", "run", "start", "add_upstream_arguments", "upstream_clients", "tls_credentials", "start_metrics_http",
           "stop_on_signals"]

_AVAILABLE = ("pricing", "predictor", "placer")


def available() -> tuple[str, ...]:
    """The services this installation can run (the node agent once its server exists)."""
    try:
        agent = importlib.util.find_spec("elastico.nodeagent.server") is not None
    except (ImportError, ValueError):
        agent = False
    return _AVAILABLE + (("nodeagent",) if agent else ())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="run one gRPC service (pricing, predictor, placer, nodeagent)",
        description="Run one ElastiCo gRPC service until SIGTERM/SIGINT, then stop gracefully. "
                    "TLS by default: give a certificate and key (and a client CA for mutual TLS) "
                    "by flag, environment (ELASTICO_TLS_CERT, ELASTICO_TLS_KEY, "
                    "ELASTICO_TLS_CLIENT_CA) or config file; --plaintext serves unencrypted. "
                    "Precedence: flags > environment > --config file > defaults. Health checking "
                    "(grpc.health.v1) and server reflection are always on.",
        epilog="default ports: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_PORTS.items())
               + "; docs/api.md has the config file format. Exit status: 0 after a clean stop, "
                 "2 bad configuration.")
    p.add_argument("service", choices=SERVICES, help="the service to run")
    p.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="listen address (default: 127.0.0.1:<the service's default port>; "
                        "env ELASTICO_<SERVICE>_ADDRESS)")
    p.add_argument("--port", type=int, default=None, metavar="P",
                   help="shorthand for --address 127.0.0.1:P (0 = any free port)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="TOML config file ([serve], [serve.tls], [serve.SERVICE])")
    p.add_argument("--tls-cert", default=None, metavar="PEM", help="server certificate chain")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="server private key")
    p.add_argument("--tls-client-ca", default=None, metavar="PEM",
                   help="CA that client certificates must chain to: mutual TLS")
    p.add_argument("--plaintext", action="store_true", default=None,
                   help="serve without TLS (loopback or a trusted mesh only)")
    p.add_argument("--max-workers", default=None, metavar="N",
                   help="RPC worker threads, 1..256 (default: 8)")
    p.add_argument("--max-concurrent-rpcs", default=None, metavar="N",
                   help="RPCs in flight before callers get RESOURCE_EXHAUSTED, 1..100000 "
                        "(default: 32)")
    p.add_argument("--metrics-port", default=None, metavar="P",
                   help="serve Prometheus metrics on http://HOST:P/metrics (0 = any free port; "
                        "default: off; env ELASTICO_METRICS_PORT)")
    p.add_argument("--grace-s", default=None, metavar="S",
                   help="seconds in-flight RPCs get to finish on shutdown, 0..3600 (default: 10; "
                        "a handler still computing then is cancelled, its caller gets "
                        "UNAVAILABLE)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model-dir", type=Path, default=None, metavar="DIR",
                   help="predictor only: model store to serve from and report into (default: "
                        "the bundled model, reports kept in memory)")
    g.add_argument("--model", type=Path, default=None, metavar="FILE",
                   help="predictor only: serve this model file")
    g.add_argument("--simulator-model", choices=("kfold", "analytic"), default=None,
                   help="predictor only: serve the model elastico simulate's placer uses "
                        "(kfold: LightGBM k-fold by job type on the bundled observations, so "
                        "that no pair is predicted by a model trained on it; analytic) -- for "
                        "simulate --via-grpc")
    p.add_argument("--refit-every", type=float, default=None, metavar="S",
                   help="predictor with --model-dir only: every S seconds, refit on the "
                        "reported observations when at least --refit-min-rows are new; the "
                        "candidate replaces the serving model only if it is no worse on "
                        "held-out new rows (docs/predictor.md, 'Online refit'; default: off)")
    p.add_argument("--refit-min-rows", type=int, default=20, metavar="N",
                   help="new reported rows a refit needs (default: %(default)s)")
    add_upstream_arguments(p, scope="placer only: ",
                           predictor_default="the bundled model in-process")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> ServeConfig:
    if args.port is not None and args.address is not None:
        raise InvalidArgument("--port", args.port, "not together with --address")
    if args.port is not None and not 0 <= args.port <= 65535:
        raise InvalidArgument("--port", args.port, "a port in 0..65535")
    for flag, value in (("--model-dir", args.model_dir), ("--model", args.model),
                        ("--simulator-model", args.simulator_model)):
        if value is not None and args.service != "predictor":
            raise InvalidArgument(flag, str(value), "only with the predictor")
    if getattr(args, "refit_every", None) is not None:
        if args.model_dir is None or args.service != "predictor":
            raise InvalidArgument("--refit-every", args.refit_every,
                                  "only with the predictor and --model-dir")
        if not (math.isfinite(args.refit_every) and args.refit_every > 0):
            raise InvalidArgument("--refit-every", args.refit_every, "seconds > 0")
        if args.refit_min_rows < 1:
            raise InvalidArgument("--refit-min-rows", args.refit_min_rows, "an integer >= 1")
    address = args.address if args.port is None else f"127.0.0.1:{args.port}"
    return load_serve_config(args.service, config_path=args.config,
                             overrides=overrides_from_args(args, address))


def _simulator_core(kind: str):
    """A predictor core serving the simulator's placer model (``--simulator-model``): the
    k-fold LightGBM predictor or the analytic model of ``elastico simulate``."""
    from elastico.predictor.service import PredictorCore
    from elastico.sim.simulator import slowdown_models

    model, _ = slowdown_models("analytic" if kind == "analytic" else "predictor")

    class SimulatorCore(PredictorCore):
        def __init__(self):
            super().__init__(use_bundled=False)
            self.note = f"simulator model {kind}"

        @property
        def version(self) -> str:
            return getattr(model, "version", None) or f"analytic-kappa{model.kappa:.4f}"

        def predict(self, a, b, gpu_model, both=True):
            import numpy as np

            if len(a) != len(b):
                raise InvalidArgument("pairs", (len(a), len(b)), "as many a as b profiles")
            if hasattr(model, "pairs"):
                sa, sb = model.pairs(a, b, gpu_model)
            else:
                sa = np.array([model.pair_slowdown(x, y) for x, y in zip(a, b)])
                sb = np.array([model.pair_slowdown(y, x) for x, y in zip(a, b)])
            return sa, (sb if both else None), self.version

        def in_domain(self, a, b):
            """As the simulator's in-process placer sees it: the model's own ``in_domain``
            (the k-fold predictor's validated domain), else True -- a model that cannot say
            where it is validated bounds unknown jobs only (elastico.predictor.prior.
            UnknownSafe).  The base core's answer (its bundled model's domain, none here:
            all False) made a placer behind this service stricter than the in-process one."""
            f = getattr(model, "in_domain", None)
            return [True if f is None else bool(f(x, y)) for x, y in zip(a, b)]

    return SimulatorCore()


def add_upstream_arguments(p: argparse.ArgumentParser, *, scope: str,
                           predictor_default: str) -> None:
    """The flags naming the pricing and predictor servers a placer calls, and the TLS files
    for calling them (``serve placer`` and ``schedule``; read by :func:`upstream_clients`
    through :class:`~elastico.runtime.serve_config.ServeConfig`).  ``scope`` prefixes each help text
    (e.g. "placer only: "); ``predictor_default`` says what predicts without the flag."""
    p.add_argument("--pricing-address", default=None, metavar="HOST:PORT",
                   help=f"{scope}price through the PricingService there (default: in-process; "
                        "env ELASTICO_PLACER_PRICING_ADDRESS)")
    p.add_argument("--predictor-address", default=None, metavar="HOST:PORT",
                   help=f"{scope}predict through the PredictorService there, the analytic model "
                        f"answering while it fails (default: {predictor_default}; env "
                        "ELASTICO_PLACER_PREDICTOR_ADDRESS)")
    p.add_argument("--upstream-ca", default=None, metavar="PEM",
                   help=f"{scope}CA of the pricing/predictor servers: call them over TLS "
                        "(default plaintext; env ELASTICO_UPSTREAM_CA)")
    p.add_argument("--upstream-cert", default=None, metavar="PEM",
                   help=f"{scope}client certificate for mutual TLS to them (env "
                        "ELASTICO_UPSTREAM_CERT)")
    p.add_argument("--upstream-key", default=None, metavar="PEM",
                   help=f"{scope}the client certificate's private key (env "
                        "ELASTICO_UPSTREAM_KEY)")


def upstream_clients(cfg: ServeConfig, tracer: Tracer):
    """The placer's ``(pricer, slowdown model)``: a :class:`~elastico.placer.rpc.remote.RemotePricer`
    and a :class:`~elastico.placer.rpc.remote.RemoteSlowdownModel` for ``cfg.pricing_address`` and
    ``cfg.predictor_address`` (over ``cfg.upstream_*`` TLS files), None for an address not
    configured (= in-process).  Used by ``elastico serve placer`` and ``elastico schedule``.
    Raises InvalidArgument for an unreadable TLS file."""
    from elastico.placer.rpc.remote import RemotePricer, RemoteSlowdownModel, open_channel

    def read(path):
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as e:
            raise InvalidArgument("upstream", str(path), f"a readable PEM file ({e})") from None

    tls = dict(ca=read(cfg.upstream_ca), cert=read(cfg.upstream_cert),
               key=read(cfg.upstream_key), tracer=tracer)
    pricer = slowdown = None
    if cfg.pricing_address:
        pricer = RemotePricer(open_channel(cfg.pricing_address, **tls))
    if cfg.predictor_address:
        slowdown = RemoteSlowdownModel(open_channel(cfg.predictor_address, **tls), tracer=tracer)
    return pricer, slowdown


def tls_credentials(tls: TlsConfig | None):
    """gRPC server credentials for ``tls`` (mutual TLS with a client CA), None without TLS.
    Used by ``elastico serve``, ``elastico schedule``'s health endpoint and ``elastico
    nodeagent``.  Raises InvalidArgument (field ``tls``) for an unreadable PEM file."""
    if tls is None:
        return None
    try:
        return server_credentials(tls.cert.read_bytes(), tls.key.read_bytes(),
                                  tls.client_ca.read_bytes() if tls.client_ca else None)
    except OSError as e:
        raise InvalidArgument("tls", str(e), "readable PEM files") from None


def start_metrics_http(cfg: ServeConfig, registry, server):
    """Serves ``registry`` as Prometheus metrics on ``cfg.metrics_port`` of the host of
    ``cfg.address``; returns the HTTP server, or None when no metrics port is configured.
    When the port is taken, stops ``server`` (the gRPC server already started, at once) and
    raises InvalidArgument (field ``metrics_port``)."""
    if cfg.metrics_port is None:
        return None
    from prometheus_client import start_http_server

    host = cfg.address.rpartition(":")[0]
    try:
        http, _ = start_http_server(cfg.metrics_port, addr=host.strip("[]"), registry=registry)
    except OSError as e:
        server.stop(0)
        raise InvalidArgument("metrics_port", cfg.metrics_port, f"a free port ({e})") from None
    return http


@contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """Sets ``stop`` (a new event when None) on SIGTERM or SIGINT while the block runs, and
    restores the previous handlers after it.  Enter it before printing a "listening" line: a
    supervisor may send SIGTERM as soon as it reads one."""
    stop = stop if stop is not None else threading.Event()

    def handler(*_) -> None:
        # Python runs a handler in the main thread between bytecodes, possibly while that
        # thread holds ``stop``'s internal lock (inside ``stop.wait``, or inside this very
        # handler's ``set`` when a second signal comes): ``stop.set()`` here could wait on
        # itself forever.  Another thread sets it instead, once the lock is free.
        if not stop.is_set():
            threading.Thread(target=stop.set, name="stop-on-signal", daemon=True).start()

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def start(cfg: ServeConfig, *, model_dir: Path | None = None, model: Path | None = None,
          metrics: ServiceMetrics | None = None, tracer: Tracer = NOOP,
          simulator_model: str | None = None, refit: tuple[float, int] | None = None):
    """Builds and starts the server of ``cfg``; returns ``(server, port)``.  ``refit``:
    ``(every_s, min_new_rows)`` of the predictor's online refit (with ``model_dir``), None =
    off.  ``metrics``: the
    Prometheus metrics it records into.  Raises InvalidArgument for a service not available
    yet or unreadable TLS files."""
    creds = tls_credentials(cfg.tls)
    busy = bind_error(cfg.address)
    if busy is not None:
        raise InvalidArgument("address", cfg.address, f"a free address of this host ({busy})")
    kw = dict(max_workers=cfg.max_workers, max_concurrent_rpcs=cfg.max_concurrent_rpcs,
              credentials=creds, metrics=metrics, tracer=tracer)
    if cfg.service not in available():
        raise InvalidArgument("service", cfg.service,
                              f"one of {', '.join(available())} (the {cfg.service} service is "
                              "not implemented yet)")
    try:
        if cfg.service == "pricing":
            from elastico.pricing.server import build_server
            server, port = build_server(cfg.address, **kw)
        elif cfg.service == "placer":
            from elastico.placer.server import build_server
            pricer, slowdown = upstream_clients(cfg, tracer)
            server, port = build_server(cfg.address, pricer=pricer, slowdown=slowdown, **kw)
        elif cfg.service == "nodeagent":
            from elastico.nodeagent.server import build_server  # type: ignore[import-not-found]
            server, port = build_server(cfg.address, **kw)
        elif simulator_model is not None:
            from elastico.predictor.server import build_server
            server, port = build_server(cfg.address, core=_simulator_core(simulator_model), **kw)
        else:
            from elastico.predictor.server import PredictorCore, build_server
            from elastico.predictor.service import ModelStore
            if model_dir is not None:
                where = model_dir if model_dir.exists() else model_dir.parent
                if not (where.is_dir() and os.access(where, os.W_OK)):
                    raise InvalidArgument("--model-dir", str(model_dir),
                                          "a folder this process may write or create (reported "
                                          "observations and new models go there)")
            core = PredictorCore(ModelStore(model_dir) if model_dir else None, model_path=model)
            server, port = build_server(cfg.address, core=core, **kw)
            if refit is not None:
                from elastico.predictor.server import start_refit_loop
                from elastico.predictor.service import RefitSchedule

                every, min_rows = refit
                start_refit_loop(core, RefitSchedule(min_rows, every), period_s=every)
    except RuntimeError as e:  # grpc could not bind (it says no more than that)
        if cfg.tls is not None:
            raise InvalidArgument(
                "tls", f"{cfg.tls.cert}, {cfg.tls.key}",
                f"a certificate and its matching private key in PEM, and a free local "
                f"address ({cfg.address}): grpc could not start TLS on it ({e})") from None
        raise InvalidArgument("address", cfg.address,
                              f"a free address of this host ({e})") from None
    server.start()
    return server, port


def run(args: argparse.Namespace) -> int:
    from elastico.runtime.lifeline import arm_from_env

    arm_from_env()  # started by `elastico up`: die with it
    cfg = _config(args)
    metrics = ServiceMetrics(cfg.service)
    tracer = configure_tracing(f"elastico-{cfg.service}")
    refit = (None if args.refit_every is None
             else (float(args.refit_every), int(args.refit_min_rows)))
    server, port = start(cfg, model_dir=args.model_dir, model=args.model, metrics=metrics,
                         tracer=tracer, simulator_model=args.simulator_model, refit=refit)
    host = cfg.address.rpartition(":")[0]
    http = start_metrics_http(cfg, metrics.registry, server)
    with stop_on_signals() as stop:
        print(f"elastico serve {cfg.service}: listening on {host}:{port} ({cfg.security}); "
              f"tracing {'OTLP' if isinstance(tracer, OtelTracer) else 'off'}; "
              f"max {cfg.max_concurrent_rpcs} RPCs in flight; SIGTERM/SIGINT stops with "
              f"{cfg.grace_s:g} s grace", file=sys.stderr, flush=True)
        if http is not None:
            print(f"elastico serve {cfg.service}: metrics on "
                  f"http://{host}:{http.server_port}/metrics", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
        print(f"elastico serve {cfg.service}: stopping (in-flight RPCs get {cfg.grace_s:g} s)",
              file=sys.stderr, flush=True)
        server.stop(cfg.grace_s).wait()
        if http is not None:
            http.shutdown()
        if isinstance(tracer, OtelTracer):
            tracer.shutdown()  # flushes the spans still queued
    print(f"elastico serve {cfg.service}: stopped", file=sys.stderr, flush=True)
    return 0
