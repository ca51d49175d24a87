"""One trace across processes: a client's ``elastico.round`` span, its gRPC call to a real
``elastico serve pricing`` process, the server's span and its ``pricing.solve`` child, all
exported over OTLP/gRPC to a receiver started here (the OpenTelemetry collector's own trace
service definition) and checked as a tree with its attributes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from concurrent import futures

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1 import (  # noqa: E402
    trace_service_pb2,
    trace_service_pb2_grpc,
)

from elastico.runtime.telemetry import configure, instrument_channel, tracing_enabled  # noqa: E402
from elastico.tracing import NOOP  # noqa: E402
from elastico.v1 import pricing_pb2, pricing_pb2_grpc  # noqa: E402


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span it is sent: (service.name, span) pairs."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            for rs in request.resource_spans:
                service = next((a.value.string_value for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    self.spans.extend((service, s) for s in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _attrs(span) -> dict:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value"))
    return out


def test_tracing_is_off_unless_the_environment_asks():
    assert not tracing_enabled({})
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317"})
    assert not tracing_enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317",
                                "OTEL_SDK_DISABLED": "true"})
    assert not tracing_enabled({"OTEL_TRACES_EXPORTER": "none",
                                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317"})
    assert configure("x", env={}) is NOOP


def test_one_trace_spans_the_client_and_the_pricing_process(monkeypatch):
    receiver = Receiver()
    rserver = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, rserver)
    rport = rserver.add_insecure_port("127.0.0.1:0")
    rserver.start()
    otel_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rport}",
                "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    for k, v in otel_env.items():
        monkeypatch.setenv(k, v)
    proc = subprocess.Popen([sys.executable, "-m", "elastico.cli", "serve", "pricing",
                             "--port", "0", "--plaintext", "--grace-s", "5"],
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        line = proc.stderr.readline()
        m = re.search(r"listening on .*:(\d+) \(plaintext\); tracing OTLP", line)
        assert m, line
        tracer = configure("elastico-test-round")
        inst = pricing_pb2.PricingInstance(  # 2 jobs, 1 GPU: OPT = 3
            offsets=[0, 2, 4], utility=[0, 3, 0, 2], demand=[0, 1, 0, 1], capacity=[1],
            resource_names=["nvidia.com/gpu"])
        with tracer.span("elastico.round", {"round.id": 7}):
            with instrument_channel(grpc.insecure_channel(f"127.0.0.1:{m.group(1)}"),
                                    tracer) as ch:
                pricing_pb2_grpc.PricingServiceStub(ch).Solve(
                    pricing_pb2.SolveRequest(instance=inst), timeout=10)
        tracer.shutdown()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        rserver.stop(0)

    by_name = {}
    for service, s in receiver.spans:
        by_name.setdefault(s.name, []).append((service, s))
    root_service, root = by_name["elastico.round"][0]
    assert root_service == "elastico-test-round" and _attrs(root)["round.id"] == 7
    method = "/elastico.v1.PricingService/Solve"
    spans = by_name[method]
    client = next(s for svc, s in spans if svc == "elastico-test-round")
    server = next(s for svc, s in spans if svc == "elastico-pricing")
    solve_service, solve = by_name["pricing.solve"][0]
    assert solve_service == "elastico-pricing"
    # one trace, as a chain: round -> client call -> (other process) server span -> solve
    assert {s.trace_id for s in (root, client, server, solve)} == {root.trace_id}
    assert client.parent_span_id == root.span_id
    assert server.parent_span_id == client.span_id
    assert solve.parent_span_id == server.span_id
    a = _attrs(solve)
    assert a["pricing.jobs"] == 2 and a["pricing.resources"] == 1
    assert a["pricing.gap"] == 0.0 and a["pricing.iterations"] >= 1
    assert 2.0 <= a["pricing.price.nvidia.com/gpu"] <= 3.0  # any price in [2, 3] is optimal


def test_simulate_exports_one_round_tree_per_round_when_otel_asks(monkeypatch, capsys):
    from elastico.cli import main

    receiver = Receiver()
    rserver = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, rserver)
    rport = rserver.add_insecure_port("127.0.0.1:0")
    rserver.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{rport}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    try:
        assert main(["simulate", "--gpus", "8", "--jobs", "12", "--policy", "elastico",
                     "--no-progress"]) == 0
    finally:
        rserver.stop(0)
    capsys.readouterr()
    spans = [s for svc, s in receiver.spans if svc == "elastico-simulate"]
    rounds = [s for s in spans if s.name == "elastico.round"]
    assert rounds and all(s.parent_span_id == b"" for s in rounds)
    ids = {s.span_id for s in rounds}
    solves = [s for s in spans if s.name == "pricing.solve"]
    assert solves and all(s.parent_span_id in ids for s in solves)
