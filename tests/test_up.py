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

from elastico.up_cli import free_ports


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_up_starts_healthy_services_and_sigterm_stops_them_all():
    base = free_ports(1)[0]
    while not all(p >= 1024 for p in range(base, base + 4)):
        base = free_ports(1)[0]
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "up", "--base-port", str(base)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = {}
        deadline = time.monotonic() + 240
        while "placer" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            name, _, addr = line.strip().partition(" ")
            lines[name] = addr.strip()
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
