"""The short CI form of the load test (bench/load.py has the full one, issue 9 item 3): 64
concurrent clients call PredictSlowdown for a few seconds against a real PredictorService on
loopback whose bound on RPCs in flight is 8, far below 64.  Every failed call must be
``RESOURCE_EXHAUSTED`` (the bound refusing, issue 6's goal) -- no deadline, no UNKNOWN, no
INTERNAL -- the others succeed with the right number of slowdowns, and once the load stops
the server answers every call again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elastico.predictor import server as predictor_server
from elastico.predictor.service import PredictorCore
from elastico.v1 import predictor_pb2_grpc

CLIENTS, SECONDS, BOUND = 64, 4.0, 8


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_load", Path(__file__).resolve().parents[1] / "bench" / "load.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_load"] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_64_clients_see_only_resource_exhausted_over_the_bound_and_the_server_recovers():
    load = _bench()
    server, port = predictor_server.build_server(
        "127.0.0.1:0", core=PredictorCore(), max_workers=4, max_concurrent_rpcs=BOUND)
    server.start()
    target = f"127.0.0.1:{port}"
    req = load.predict_request(pairs=8)
    channels = []
    try:
        # one channel per client, as separate processes would have
        def call_for_client():
            ch = grpc.insecure_channel(target)
            channels.append(ch)
            stub = predictor_pb2_grpc.PredictorServiceStub(ch)

            def call():
                resp = stub.PredictSlowdown(req, timeout=load.CALL_TIMEOUT_S)
                assert len(resp.slowdown) == len(resp.slowdown_b) == 8
            return call

        calls = [call_for_client() for _ in range(CLIENTS)]
        # drive() takes one call list shared by its threads; give each thread its own
        # channel by round-robin over the per-client callables
        counter = iter(range(10**9))

        def next_client_call():
            return calls[next(counter) % CLIENTS]()

        tally = load.drive([("PredictSlowdown", next_client_call)], CLIENTS, SECONDS)[
            "PredictSlowdown"]
        assert set(tally.errors) <= {"RESOURCE_EXHAUSTED"}, tally.errors
        assert tally.errors["RESOURCE_EXHAUSTED"] > 0, "64 clients never exceeded a bound of 8"
        assert len(tally.latencies) > 0
        # recovery: the server answers again, one call at a time, and stays healthy
        with grpc.insecure_channel(target) as ch:
            stub = predictor_pb2_grpc.PredictorServiceStub(ch)
            for _ in range(BOUND * 2):
                assert len(stub.PredictSlowdown(req, timeout=10).slowdown) == 8
            assert health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=predictor_server.SERVICE_NAME),
                timeout=10).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for ch in channels:
            ch.close()
        server.stop(0).wait()
