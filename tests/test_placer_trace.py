"""One scheduling round is one distributed trace (issue 6, item 5): the test calls
``RunRound`` on a real ``elastico serve placer`` process that prices through an ``elastico serve
pricing`` process and predicts through an ``elastico serve predictor`` process; all four
processes export OTLP/gRPC to a receiver started here, and the spans must form one tree:

    test: RunRound client span
      placer: RunRound server span
        placer: elastico.round
          placer: shapes.generate
          placer: pricing.solve            (iterations, gap, prices)
            placer: Solve client span
              pricing: Solve server span
                pricing: pricing.solve     (iterations, gap, prices: the same numbers)
          placer: placer.place
            ... placer: predictor.predict  (pairs, model version)
                  placer: PredictSlowdown client span
                    predictor: server span
                      predictor: predictor.predict (pairs, model version)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from concurrent import futures

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc  # noqa: E402

from elastico.placer.rpc import wire  # noqa: E402
from elastico.placer.round import ActiveJob  # noqa: E402
from elastico.runtime.telemetry import configure, instrument_channel  # noqa: E402
from elastico.v1 import placer_pb2, placer_pb2_grpc  # noqa: E402
from test_placer_grpc import NODES, _job  # noqa: E402
from test_tracing import Receiver, _attrs  # noqa: E402


def _serve(service: str, *args: str) -> tuple[subprocess.Popen, int]:
    """``python -m elastico serve SERVICE`` on a free port; (process, port) once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "serve", service, "--port", "0",
                             "--plaintext", "--grace-s", "5", *args],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines = []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"listening on .*:(\d+) \(plaintext\); tracing OTLP", line)
        if m:
            return proc, int(m.group(1))
    proc.wait()
    raise AssertionError(f"elastico serve {service} did not start:\n{''.join(lines)}")


def _stop(proc: subprocess.Popen) -> int:
    """SIGTERM; the exit status (the service flushes its queued spans before it exits)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


@pytest.fixture
def receiver(monkeypatch):
    """An OTLP/gRPC trace receiver on loopback, and OTEL_* pointing every process at it."""
    rec = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    yield rec
    server.stop(0)


def test_one_round_is_one_trace_across_the_placer_pricing_and_predictor(receiver):
    procs = []
    try:
        pricing, pport = _serve("pricing")
        procs.append(pricing)
        predictor, dport = _serve("predictor")
        procs.append(predictor)
        placer, lport = _serve("placer", "--pricing-address", f"127.0.0.1:{pport}",
                               "--predictor-address", f"127.0.0.1:{dport}")
        procs.append(placer)
        tracer = configure("elastico-test-client")
        # 8 quarter-GPU jobs on 4 GPUs: they share GPUs, so the placer asks the predictor
        jobs = [ActiveJob(_job(i, share=0.25)) for i in range(8)]
        req = placer_pb2.RunRoundRequest(now=100.0, nodes=[wire.node_to_message(n) for n in NODES],
                                         jobs=[wire.job_to_message(a) for a in jobs],
                                         policy="elastico")
        with instrument_channel(grpc.insecure_channel(f"127.0.0.1:{lport}"), tracer) as ch:
            resp = placer_pb2_grpc.PlacerServiceStub(ch).RunRound(req, timeout=120)
        tracer.shutdown()
        assert [_stop(p) for p in reversed(procs)] == [0, 0, 0]
    finally:
        for p in procs:
            _stop(p)
    assert resp.degraded == "" and resp.pricing_iterations >= 1
    assert sum(d.status == "placed" for d in resp.decisions) >= 2

    spans = receiver.spans
    service_of = {s.span_id: svc for svc, s in spans}
    by_id = {s.span_id: s for _, s in spans}

    def named(name, service):
        found = [s for svc, s in spans if s.name == name and svc == service]
        assert found, (name, service, sorted({(svc, s.name) for svc, s in spans}))
        return found

    def parent(s):
        return by_id[s.parent_span_id]

    def ancestors(s):
        out = []
        while s.parent_span_id:
            s = parent(s)
            out.append(s)
        return out

    # one trace: every exported span, from all four processes, carries the client's trace id
    client = named("/elastico.v1.PlacerService/RunRound", "elastico-test-client")[0]
    assert client.parent_span_id == b""
    assert {s.trace_id for _, s in spans} == {client.trace_id}
    assert {svc for svc, _ in spans} == {"elastico-test-client", "elastico-placer",
                                         "elastico-pricing", "elastico-predictor"}
    assert all(s.parent_span_id in by_id for _, s in spans if s is not client)

    server = named("/elastico.v1.PlacerService/RunRound", "elastico-placer")[0]
    assert server.parent_span_id == client.span_id
    (root,) = named("elastico.round", "elastico-placer")
    assert root.parent_span_id == server.span_id
    a = _attrs(root)
    assert (a["round.policy"], a["round.jobs"], a["round.now_s"]) == ("elastico", 8, 100.0)
    assert a["round.placed"] == sum(d.status == "placed" for d in resp.decisions)
    for name in ("shapes.generate", "pricing.solve", "placer.place"):
        (s,) = named(name, "elastico-placer")
        assert s.parent_span_id == root.span_id, name

    # pricing: the placer's span holds the round's numbers, the pricing process's span the same
    (solve,) = named("pricing.solve", "elastico-placer")
    a = _attrs(solve)
    assert a["pricing.iterations"] == resp.pricing_iterations
    assert a["pricing.gap"] == resp.pricing_gap
    assert [a[f"pricing.price.{n}"] for n in resp.resource_names] == list(resp.prices)
    (call,) = named("/elastico.v1.PricingService/Solve", "elastico-placer")
    assert call.parent_span_id == solve.span_id
    (srv,) = named("/elastico.v1.PricingService/Solve", "elastico-pricing")
    assert srv.parent_span_id == call.span_id
    (remote_solve,) = named("pricing.solve", "elastico-pricing")
    assert remote_solve.parent_span_id == srv.span_id
    b = _attrs(remote_solve)
    assert (b["pricing.iterations"], b["pricing.gap"]) == (resp.pricing_iterations,
                                                           resp.pricing_gap)
    # the placer does not send resource names, so the pricing process names prices by index
    assert [b[f"pricing.price.{r}"] for r in range(len(resp.prices))] == list(resp.prices)
    assert b["pricing.jobs"] == a["pricing.jobs"] == 8

    # prediction: every placer-side predictor.predict is inside the round and has its server
    # half in the predictor process, with the same pair count and the model version it reported
    predicts = named("predictor.predict", "elastico-placer")
    served = named("predictor.predict", "elastico-predictor")
    assert len(predicts) == len(served)
    for p in predicts:
        assert root in ancestors(p)
        pa = _attrs(p)
        assert pa["predictor.pairs"] >= 1 and pa["predictor.model_version"]
        (call,) = [s for _, s in spans if s.parent_span_id == p.span_id]
        assert call.name == "/elastico.v1.PredictorService/PredictSlowdown"
        (srv,) = [s for _, s in spans if s.parent_span_id == call.span_id]
        assert service_of[srv.span_id] == "elastico-predictor"
        (inner,) = [s for _, s in spans if s.parent_span_id == srv.span_id]
        assert inner.name == "predictor.predict"
        ia = _attrs(inner)
        assert ia["predictor.pairs"] == pa["predictor.pairs"]
        assert ia["predictor.model_version"] == pa["predictor.model_version"]
