"""``elastico up``: every ElastiCo service as its own process on loopback (local mode).

Starts ``elastico serve SERVICE`` (in this interpreter, :func:`child_command`) for pricing,
predictor, placer (pricing and predicting through the other two) and -- when this
installation has its server -- the node agent, on ``base_port``, ``base_port + 1``, ...
(default 50051 pricing, 50052 predictor, 50053 placer, 50054 node agent; the node agent
with ``ELASTICO_GPU_BACKEND=simulated`` unless the environment chooses a backend), plaintext
on loopback unless TLS files are given (``--tls-cert``/``--tls-key`` with ``--tls-ca``, the CA
that signed them: the placer calls pricing and predictor over TLS verified with it).  The TLS
files, the host and the ports are checked once before any child starts (exit 2).  Once every
service answers the gRPC health check ``SERVING`` it prints their addresses; SIGTERM or
SIGINT (Ctrl-C) stops them all (each gets SIGTERM and finishes its in-flight RPCs); if one of
them dies, the others are stopped and ``up`` exits 1 naming it.  On Linux the children get
SIGTERM when ``up`` dies, even by SIGKILL (``PR_SET_PDEATHSIG``), so none is left running.

:class:`Stack` is the same thing as a library (``elastico simulate --via-grpc`` and
``bench/rpc.py`` start their services with it).  An adapter (it speaks gRPC health).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from elastico.errors import ElasticoError, InvalidArgument
from elastico.runtime.lifeline import ENV as LIFELINE_ENV

__all__ = ["register", "run", "Stack", "ServiceDied", "free_ports"]

ORDER = ("pricing", "predictor", "placer", "nodeagent")


class ServiceDied(ElasticoError):
    """A service process exited (or never became healthy)."""


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that were free on ``host`` a moment ago."""
    import socket

    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


#: A child's bootstrap: elastico's command line with the current folder left off sys.path.
#: ``python -m elastico`` run from a source checkout imports the checkout's ``elastico/``
#: folder, which holds only part of the package (the services live in services/ and are
#: mapped in at install time), instead of the installed package.
_BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
         "from elastico.cli import main; sys.exit(main())")


def child_command(args: list[str]) -> list[str]:
    """The argv that runs ``elastico ARGS`` in a new process of this interpreter, importing
    the installed package whatever the current folder is."""
    return [sys.executable, "-c", _BOOT, *args]


def _healthy(address: str, timeout: float, ca: bytes | None = None) -> bool:
    """Whether ``address`` answers the gRPC health check ``SERVING`` (over TLS verified with
    ``ca`` when given, else plaintext)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ch = (grpc.secure_channel(address, grpc.ssl_channel_credentials(ca)) if ca is not None
          else grpc.insecure_channel(address))
    with ch:
        try:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""),
                                                     timeout=timeout)
        except grpc.RpcError:
            return False
    return r.status == health_pb2.HealthCheckResponse.SERVING


def _listening(address: str, timeout: float) -> bool:
    """Whether ``address`` accepts TCP connections (a TLS server whose CA we do not have)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Stack:
    """The service processes of one local deployment.  ``ports``: service -> port;
    ``extra``: service -> extra ``serve`` arguments; ``tls``: ``serve`` TLS arguments for
    every service (empty = ``--plaintext``); ``ca``: PEM of the CA that signed their
    certificate, for the health check over TLS (TLS without it: :meth:`start` waits only
    until each service accepts connections)."""

    ports: dict[str, int]
    host: str = "127.0.0.1"
    extra: dict[str, list[str]] = field(default_factory=dict)
    tls: list[str] = field(default_factory=list)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ca: bytes | None = None

    def address(self, service: str) -> str:
        return f"{self.host}:{self.ports[service]}"

    def argv(self, service: str) -> list[str]:
        args = child_command(["serve", service, "--address", self.address(service)]
                             + (self.tls or ["--plaintext"]))
        if service == "placer":
            args += ["--pricing-address", self.address("pricing"),
                     "--predictor-address", self.address("predictor")]
        return args + self.extra.get(service, [])

    def start(self, timeout_s: float = 120.0) -> None:
        """Starts every service and waits until all are healthy; ServiceDied (the others
        stopped) when one exits first or ``timeout_s`` passes."""
        try:
            for s in self.ports:
                # the child arms PR_SET_PDEATHSIG itself (elastico.runtime.lifeline): no preexec_fn,
                # which would run Python between fork and exec in this gRPC-threaded process.
                # The signal comes when the *thread* that started the child ends, so a Stack is
                # started from a thread that lives as long as it (the main thread in ``up``).
                env = {**os.environ, LIFELINE_ENV: str(os.getpid())}
                if s == "nodeagent" and "ELASTICO_GPU_BACKEND" not in os.environ:
                    # local mode: a simulated GPU backend unless the environment picks one
                    env["ELASTICO_GPU_BACKEND"] = "simulated"
                self.procs[s] = subprocess.Popen(self.argv(s), stdin=subprocess.DEVNULL, env=env)
            deadline = time.monotonic() + timeout_s
            if self.tls and self.ca is None:
                def ready(address: str) -> bool:
                    return _listening(address, 1.0)
            else:
                def ready(address: str) -> bool:
                    return _healthy(address, 1.0, self.ca if self.tls else None)
            waiting = list(self.ports)
            while waiting:
                dead = self.dead()
                if dead:
                    raise ServiceDied(f"{dead[0]} exited with status {dead[1]} while starting")
                waiting = [s for s in waiting if not ready(self.address(s))]
                if waiting and time.monotonic() > deadline:
                    raise ServiceDied(f"{', '.join(waiting)} not healthy after {timeout_s:g} s")
                if waiting:
                    time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def dead(self) -> tuple[str, int] | None:
        """The first service whose process has exited, with its status; None when all run."""
        for s, p in self.procs.items():
            rc = p.poll()
            if rc is not None:
                return s, rc
        return None

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to every process still running, then SIGKILL after ``grace_s``."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs.values():
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> "Stack":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up", help="run every service as its own process on loopback (local mode)",
        description="Start pricing, predictor, placer (and the node agent when available) as "
                    "separate `elastico serve` processes, print their addresses once all are "
                    "healthy, and stop them all on Ctrl-C or SIGTERM (exit 0), or when one "
                    "dies (exit 1, naming it).")
    p.add_argument("--base-port", type=int, default=50051, metavar="P",
                   help="port of pricing; predictor, placer and node agent take the next ones "
                        "(default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="listen host (default: %(default)s)")
    p.add_argument("--tls-cert", default=None, metavar="PEM",
                   help="serve TLS with this certificate (default: plaintext on loopback)")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="its private key")
    p.add_argument("--tls-ca", default=None, metavar="PEM",
                   help="CA that signed --tls-cert: the placer verifies pricing and predictor "
                        "with it, and up verifies the services' health checks with it (required "
                        "with --tls-cert)")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace, ports: dict[str, int]) -> bytes | None:
    """Everything every child would refuse, checked once here before any starts (else each
    child prints the same error): the TLS files (as ``serve`` reads them), the host, and that
    each port is free.  Returns the CA's PEM (None without TLS).  Raises InvalidArgument."""
    import socket

    from elastico.runtime.serve_config import load_serve_config

    tls = ({"tls_cert": args.tls_cert, "tls_key": args.tls_key} if args.tls_cert
           else {"plaintext": True})
    try:
        load_serve_config("pricing", env={}, overrides={"address": f"{args.host}:0", **tls})
        ca = None
        if args.tls_ca is not None:
            cfg = load_serve_config("placer", env={}, overrides={
                "address": f"{args.host}:0", "pricing_address": f"{args.host}:1",
                "upstream_ca": args.tls_ca, **tls})
            ca = cfg.upstream_ca.read_bytes()
    except InvalidArgument as e:  # serve's names of the settings -> up's flags
        flag = {"tls.cert": "--tls-cert", "tls.key": "--tls-key", "upstream_ca": "--tls-ca",
                "address": "--host"}.get(e.field, e.field)
        if flag == "--host":  # the flag's own value, not the address built from it
            raise InvalidArgument(flag, args.host, "a host name or IP address of this host, "
                                                   "e.g. 127.0.0.1, ::1 or localhost") from None
        raise InvalidArgument(flag, e.value, e.allowed.replace("tls.cert", "--tls-cert")) from None
    except OSError as e:
        raise InvalidArgument("--tls-ca", args.tls_ca, f"a readable PEM file ({e})") from None
    try:
        infos = socket.getaddrinfo(args.host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise InvalidArgument("--host", args.host,
                              f"an address or name of this host ({e})") from None
    family, _, _, _, sockaddr = infos[0]
    for service, port in ports.items():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # as grpc binds: a connection in TIME_WAIT does not make a port busy
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((sockaddr[0], port) + tuple(sockaddr[2:]))
            except OSError as e:
                if e.errno == errno.EADDRNOTAVAIL:
                    raise InvalidArgument("--host", args.host, f"an address of this host "
                                          f"({e.strerror})") from None
                raise InvalidArgument("--base-port", args.base_port,
                                      f"ports {min(ports.values())}..{max(ports.values())} free "
                                      f"on {args.host}: {service}'s port {port} is not "
                                      f"({e.strerror})") from None
    return ca


def run(args: argparse.Namespace) -> int:
    from elastico.cli.serve import available, stop_on_signals

    if not 1 <= args.base_port <= 65535 - 3:
        raise InvalidArgument("--base-port", args.base_port, "a port in 1..65532")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InvalidArgument("--tls-key" if args.tls_key is None else "--tls-cert", "missing",
                              "both --tls-cert and --tls-key, or neither")
    if args.tls_cert is not None and args.tls_ca is None:
        # without it the placer would call pricing and predictor in plaintext and fail
        raise InvalidArgument("--tls-ca", "missing", "with --tls-cert/--tls-key: the CA that "
                              "signed that certificate, which the placer verifies pricing and "
                              "predictor with")
    if args.tls_ca is not None and args.tls_cert is None:
        raise InvalidArgument("--tls-ca", args.tls_ca,
                              "only with --tls-cert and --tls-key (plaintext needs no CA)")
    services = [s for s in ORDER if s in available()]
    ports = {s: args.base_port + ORDER.index(s) for s in services}
    tls: list[str] = []
    extra: dict[str, list[str]] = {}
    if args.tls_cert:
        tls = ["--tls-cert", args.tls_cert, "--tls-key", args.tls_key]
        extra["placer"] = ["--upstream-ca", args.tls_ca]
    ca = _check(args, ports)
    if "nodeagent" not in services:
        print("elastico up: nodeagent skipped (this installation has no node-agent server)",
              file=sys.stderr, flush=True)
    stack = Stack(ports, host=args.host, extra=extra, tls=tls, ca=ca)
    with stop_on_signals() as stop:
        try:
            stack.start()
            for s in services:
                print(f"{s:<10} {stack.address(s)}", flush=True)
            print("elastico up: all services healthy; Ctrl-C or SIGTERM stops them",
                  file=sys.stderr, flush=True)
            while not stop.wait(0.5):
                dead = stack.dead()
                if dead:
                    stack.stop()
                    raise ServiceDied(f"{dead[0]} exited with status {dead[1]}; "
                                      "stopped the others")
            print("elastico up: stopping", file=sys.stderr, flush=True)
            stack.stop()
        except ServiceDied as e:
            print(f"elastico up: {e}", file=sys.stderr, flush=True)
            return 1
        finally:
            stack.stop()
    print("elastico up: stopped", file=sys.stderr, flush=True)
    return 0


class ViaGrpc:
    """``elastico simulate --via-grpc [ADDRESS]``: policies whose rounds run in a placer's
    ``RunRound``.  Without an address, starts pricing, predictor (serving the simulator's
    placer model, ``slowdown_model`` = ``predictor`` (k-fold) or ``analytic``) and a placer
    pricing and predicting through them, on free loopback ports, and stops them on exit."""

    def __init__(self, address: str | None, slowdown_model: str = "predictor",
                 timeout_s: float | None = 600.0):
        self.address = address or None
        self.slowdown_model = slowdown_model
        self.timeout_s = timeout_s
        self.stack: Stack | None = None
        self.channel = None

    def __enter__(self) -> "ViaGrpc":
        from elastico.placer.rpc.remote import open_channel

        address = self.address
        if address is None:
            kind = "analytic" if self.slowdown_model == "analytic" else "kfold"
            ports = free_ports(3)
            self.stack = Stack(dict(zip(("pricing", "predictor", "placer"), ports)),
                               extra={"predictor": ["--simulator-model", kind]})
            self.stack.start()
            address = self.stack.address("placer")
        self.channel = open_channel(address)
        return self

    def policy(self, name: str, env):
        """A :class:`~elastico.placer.rpc.remote.RemotePlacerPolicy` named ``name`` for ``env``."""
        from elastico.placer.rpc.remote import RemotePlacerPolicy

        return RemotePlacerPolicy(self.channel, name, env, timeout_s=self.timeout_s)

    def __exit__(self, *exc) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.stack is not None:
            self.stack.stop()
