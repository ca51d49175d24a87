"""``elastico up`` starts every service as its own process, each answers the health check,
and SIGTERM stops them all (no child left)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elastico.cli.up import free_ports


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _running(pid: int) -> bool:
    stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                          text=True).stdout.strip()
    return stat != "" and not stat.startswith("Z")


def read_addresses(proc, timeout_s: float = 240) -> dict[str, str]:
    """``elastico up``'s "SERVICE HOST:PORT" lines on stdout, read until the placer's (the
    last one) or EOF or ``timeout_s``."""
    lines: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while "placer" not in lines and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        name, _, addr = line.strip().partition(" ")
        lines[name] = addr.strip()
    return lines


def test_up_starts_healthy_services_and_sigterm_stops_them_all():
    base = free_ports(1)[0]
    while not all(p >= 1024 for p in range(base, base + 4)):
        base = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "up", "--base-port", str(base)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = read_addresses(proc)
        assert lines.get("pricing") == f"127.0.0.1:{base}", proc.stderr.read()
        assert lines["predictor"] == f"127.0.0.1:{base + 1}"
        assert lines["placer"] == f"127.0.0.1:{base + 2}"
        for addr in lines.values():
            with grpc.insecure_channel(addr) as ch:
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert r.status == health_pb2.HealthCheckResponse.SERVING
        kids = _children(proc.pid)
        assert len(kids) >= 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        for k in kids:
            try:
                os.kill(k, 0)
                alive = subprocess.run(["ps", "-o", "stat=", "-p", str(k)], capture_output=True,
                                       text=True).stdout.strip()
                assert alive == "" or alive.startswith("Z"), f"child {k} still running"
            except ProcessLookupError:
                pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- bad flags: checked once, before any child starts --------------------------------------------
import socket  # noqa: E402

import pytest  # noqa: E402

from elastico.cli import main as cli_main  # noqa: E402

pytest.importorskip("cryptography.x509")
from tls_certs import make_pki  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _up_error(capsys, *argv) -> str:
    assert cli_main(["up", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err   # one message, not one per child
    return err


def test_incoherent_tls_flags_exit_2_naming_them(pki, capsys):
    cert = ["--tls-cert", str(pki["server"]), "--tls-key", str(pki["server_key"])]
    # the placer would call pricing and predictor in plaintext: every round would fail
    assert "--tls-ca: 'missing'" in _up_error(capsys, *cert)
    assert "--tls-ca" in _up_error(capsys, "--tls-ca", str(pki["ca"]))  # ignored before
    err = _up_error(capsys, "--tls-cert", "/no/cert.pem", "--tls-key", str(pki["server_key"]),
                    "--tls-ca", str(pki["ca"]))
    assert "--tls-cert: '/no/cert.pem'" in err
    err = _up_error(capsys, "--tls-cert", str(pki["server"]), "--tls-key",
                    str(pki["client_key"]), "--tls-ca", str(pki["ca"]))
    assert f"--tls-key: '{pki['client_key']}'" in err


def test_a_bad_host_or_a_busy_port_exits_2_before_starting_anything(capsys):
    assert "--host: 'nohost.invalid'" in _up_error(capsys, "--host", "nohost.invalid")
    # the flag's own value, not the ':0' address built from it
    assert "--host: '' is not allowed (a host name or IP address" in _up_error(capsys, "--host", "")
    # the second port of the four is the busy one, so the check must cover every port; the
    # port below it must be free (another process on a shared CI machine may hold it: retry)
    for _ in range(50):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            if port - 1 < 1024 or not _free(port - 1):
                continue
            err = _up_error(capsys, "--base-port", str(port - 1))
            if f"pricing's port {port - 1} is not" in err:
                continue  # taken by someone else between the probe and the check
            break
    assert f"--base-port: {port - 1}" in err and f"port {port} is not" in err


def _free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_an_up_stack_with_tls_runs_rounds_and_dies_with_up(pki):
    from elastico.v1 import placer_pb2_grpc
    from test_placer_tls import _request

    base = free_ports(1)[0]
    while not all(1024 <= p <= 65535 for p in range(base, base + 4)):
        base = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "up", "--base-port", str(base),
                             "--tls-cert", str(pki["server"]), "--tls-key",
                             str(pki["server_key"]), "--tls-ca", str(pki["ca"])],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = read_addresses(proc)
        assert lines.get("placer") == f"127.0.0.1:{base + 2}", proc.poll()
        creds = grpc.ssl_channel_credentials(pki["ca"].read_bytes())
        with grpc.secure_channel(f"localhost:{base + 2}", creds) as ch:
            resp = placer_pb2_grpc.PlacerServiceStub(ch).RunRound(_request(), timeout=120)
        # priced and predicted through the TLS pricing and predictor, not degraded
        assert resp.degraded == "" and resp.pricing_iterations >= 1
        kids = _children(proc.pid)
        assert len(kids) >= 3
        proc.kill()   # SIGKILL: up cannot stop its children itself
        proc.wait(10)
        deadline = time.monotonic() + 20
        alive = kids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [k for k in kids if _running(k)]
        assert not alive, f"children {alive} outlived a killed up"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for k in kids if "kids" in locals() else []:
            if _running(k):
                os.kill(k, signal.SIGKILL)
