"""The gRPC PricingService (elastico.pricing.server) against a real server on 127.0.0.1, port 0:
the same answers as the in-process solver, GetPrices state, the status codes of
elastico.runtime.grpc_errors, deadlines, the concurrency limit, health checking and reflection."""

from __future__ import annotations

import math
import threading
import types

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

import elastico.pricing
from elastico.errors import Infeasible, InvalidArgument, NotFound, Overloaded
from elastico.pricing import server as pricing_server
from elastico.v1 import pricing_pb2, pricing_pb2_grpc

TIMEOUT = 5.0  # seconds, every client call


# -- builders -------------------------------------------------------------------------------

# Hand-worked instance: 2 jobs, R = 2 resources (GPUs, GiB), capacity (1.5 GPUs, 16 GiB).
#   job 0: wait (0, [0, 0]) | big (3.0, [1, 10])
#   job 1: wait (0, [0, 0]) | big (2.0, [1, 10]) | small (1.5, [0.5, 4])
# Feasible pairs: big+small = 4.5 ([1.5, 14]), big+wait = 3, wait+big = 2, ...; big+big needs
# 2 GPUs.  OPT = 4.5 with choice [1, 2].  Dual at prices (1, 0):
#   L = max(0, 3-1) + max(0, 2-1, 1.5-0.5) + 1.5*1 + 16*0 = 2 + 1 + 1.5 = 4.5 = OPT,
# so the certified gap can reach 0.
OFFSETS = [0, 2, 5]
UTILITY = [0.0, 3.0, 0.0, 2.0, 1.5]
DEMAND = [[0, 0], [1, 10], [0, 0], [1, 10], [0.5, 4]]
CAPACITY = [1.5, 16.0]
NAMES = ["nvidia.com/gpu", "memory_gib"]


def request(*, offsets=OFFSETS, utility=UTILITY, demand=None, capacity=CAPACITY,
            names=NAMES, **kw) -> pricing_pb2.SolveRequest:
    """A SolveRequest; ``demand`` flat (row-major) or [M][R] nested."""
    demand = DEMAND if demand is None else demand
    flat = [float(x) for row in demand for x in row] if demand and isinstance(
        demand[0], (list, tuple)) else list(demand)
    return pricing_pb2.SolveRequest(
        instance=pricing_pb2.PricingInstance(
            offsets=offsets, utility=utility, demand=flat, capacity=capacity,
            resource_names=names),
        **kw)


@pytest.fixture
def make_server():
    """Starts servers on 127.0.0.1:0 (keyword arguments go to build_server) and returns a
    stub factory; every server and channel is closed at the end of the test."""
    started: list[tuple[grpc.Server, grpc.Channel]] = []

    def make(**kw):
        srv, port = pricing_server.build_server("127.0.0.1:0", **kw)
        srv.start()
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        started.append((srv, ch))
        return types.SimpleNamespace(
            channel=ch, pricing=pricing_pb2_grpc.PricingServiceStub(ch))

    yield make
    for srv, ch in started:
        ch.close()
        srv.stop(None).wait()


@pytest.fixture
def svc(make_server):
    return make_server()


def get_prices(svc) -> tuple[list[float], list[str]]:
    r = svc.pricing.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    return list(r.prices), list(r.resource_names)


def rpc_error(call, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=TIMEOUT, **kw)
    return info.value


# -- Solve / GetPrices ----------------------------------------------------------------------

def test_solve_over_grpc_equals_the_in_process_solver(svc):
    got = svc.pricing.Solve(request(), timeout=TIMEOUT)
    want = elastico.pricing.solve(UTILITY, DEMAND, OFFSETS, CAPACITY)
    assert list(got.choice) == [1, 2] == want.choice.tolist()  # hand-worked optimum
    assert got.primal_value == pytest.approx(4.5) == want.primal_value
    assert got.dual_bound == pytest.approx(want.dual_bound)
    assert got.dual_bound >= 4.5 - 1e-9  # weak duality
    assert list(got.prices) == pytest.approx(want.prices.tolist())
    assert got.gap == pytest.approx(want.gap)
    assert got.iterations == want.iterations
    assert got.seconds >= 0


def test_zero_options_mean_the_solver_defaults_and_options_reach_the_solver(svc):
    default = svc.pricing.Solve(request(), timeout=TIMEOUT)
    explicit = svc.pricing.Solve(
        request(max_iterations=pricing_server.DEFAULT_MAX_ITERATIONS,
                gap_tolerance=pricing_server.DEFAULT_GAP_TOLERANCE), timeout=TIMEOUT)
    assert list(default.choice) == list(explicit.choice)
    assert default.iterations == explicit.iterations
    one = svc.pricing.Solve(request(max_iterations=1, initial_prices=[1.0, 0.0]),
                            timeout=TIMEOUT)
    assert one.iterations == 1
    assert list(one.choice) == [1, 2]  # warm start at the optimal prices


def test_get_prices_is_empty_before_any_solve_then_the_last_prices(svc):
    assert get_prices(svc) == ([], [])
    got = svc.pricing.Solve(request(), timeout=TIMEOUT)
    assert get_prices(svc) == (list(got.prices), NAMES)
    again = svc.pricing.Solve(request(names=[]), timeout=TIMEOUT)
    assert get_prices(svc) == (list(again.prices), [])


# -- bad input -> INVALID_ARGUMENT naming the field and the value ---------------------------

BAD = {
    "nan utility": (dict(utility=[0.0, math.nan, 0.0, 2.0, 1.5]), ["instance.utility[1]", "nan"]),
    "negative capacity": (dict(capacity=[1.5, -1.0]), ["instance.capacity[1]", "-1.0"]),
    "demand length": (dict(demand=[0.0] * 9), ["instance.demand", "(9,)", "10"]),
    # flat index 9 = configuration 4, resource 1
    "negative demand": (dict(demand=[0, 0, 1, 10, 0, 0, 1, 10, 0.5, -4]),
                        ["instance.demand[9]", "-4.0", "configuration 4, resource 1"]),
    "offsets not ending at M": (dict(offsets=[0, 2, 4]), ["instance.offsets[2]", "4", "M=5"]),
    "empty family": (dict(offsets=[0, 2, 2, 5]), ["instance.offsets[2]", "2"]),
    "resource names": (dict(names=["gpu"]), ["instance.resource_names", "(1,)"]),
    # the names key the prices (GetPrices, the price metric's labels): each once
    "duplicate resource name": (dict(names=["gpu", "gpu"]), ["instance.resource_names[1]",
                                                            "'gpu'", "unique"]),
    "empty resource name": (dict(names=["", "mem"]), ["instance.resource_names[0]"]),
    "overflowing initial prices": (dict(initial_prices=[1e308, 1e308]), ["initial_prices"]),
    "initial prices": (dict(initial_prices=[-1.0, 0.0]), ["initial_prices[0]", "-1.0"]),
    "max iterations": (dict(max_iterations=-5), ["max_iterations", "-5"]),
    "gap tolerance": (dict(gap_tolerance=math.inf), ["gap_tolerance", "inf"]),
    "current out of family": (dict(current=[0, 3]), ["current[1]", "3"]),
    "current length": (dict(current=[0]), ["current.shape", "(1,)"]),
    "switch cost without current": (dict(switch_cost=[1.0, 1.0]), ["switch_cost", "current"]),
    "negative switch cost": (dict(current=[0, 0], switch_cost=[1.0, -2.0]),
                             ["switch_cost[1]", "-2.0"]),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_is_invalid_argument_and_changes_nothing(svc, case):
    kw, words = BAD[case]
    before = svc.pricing.Solve(request(), timeout=TIMEOUT)
    err = rpc_error(svc.pricing.Solve, request(**kw))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    for w in words:
        assert w in err.details(), (w, err.details())
    assert get_prices(svc) == (list(before.prices), NAMES)


def test_infeasible_instance_is_failed_precondition_and_changes_nothing(svc):
    # Two jobs, one configuration each (no zero-demand wait), 1 GPU each, 1.5 GPUs in all:
    # each fits alone, both cannot.
    err = rpc_error(svc.pricing.Solve, request(offsets=[0, 1, 2], utility=[1.0, 1.0],
                                               demand=[[1.0], [1.0]], capacity=[1.5], names=[]))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "capacity[0]" in err.details() and "1.5" in err.details()
    assert get_prices(svc) == ([], [])


# -- the one error mapping (elastico.runtime.grpc_errors) -------------------------------------------

@pytest.mark.parametrize("exc, code", [
    (InvalidArgument("x", 1, "must be 2"), grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound("job 7 not found"), grpc.StatusCode.NOT_FOUND),
    (Infeasible("no feasible choice"), grpc.StatusCode.FAILED_PRECONDITION),
    (Overloaded("too many solves"), grpc.StatusCode.RESOURCE_EXHAUSTED),
])
def test_domain_exceptions_map_to_their_status(svc, monkeypatch, exc, code):
    def boom(**kw):
        raise exc

    monkeypatch.setattr(elastico.pricing, "solve", boom)
    err = rpc_error(svc.pricing.Solve, request())
    assert err.code() == code
    assert str(exc) in err.details()


def test_unexpected_exception_is_internal_with_a_generic_message(svc, monkeypatch):
    def boom(**kw):
        raise RuntimeError("secret detail of the bug")

    monkeypatch.setattr(elastico.pricing, "solve", boom)
    err = rpc_error(svc.pricing.Solve, request())
    assert err.code() == grpc.StatusCode.INTERNAL  # not UNKNOWN
    assert "internal error" in err.details() and "error id" in err.details()
    assert "secret" not in err.details() and "Traceback" not in err.details()
    assert get_prices(svc) == ([], [])
    monkeypatch.undo()  # the server survives it
    assert list(svc.pricing.Solve(request(), timeout=TIMEOUT).choice) == [1, 2]


# -- deadlines and overload -----------------------------------------------------------------

class FakeContext:
    """Just enough of grpc.ServicerContext: time_remaining() from a list, abort() raises."""

    def __init__(self, remaining):
        self.remaining = list(remaining)
        self.aborted = None

    def time_remaining(self):
        return self.remaining.pop(0)

    def abort(self, code, details):
        self.aborted = (code, details)
        raise RuntimeError("aborted")


def test_deadline_passed_before_solving_skips_the_solve(monkeypatch):
    calls = []
    monkeypatch.setattr(elastico.pricing, "solve", lambda **kw: calls.append(kw))
    servicer, ctx = pricing_server.PricingServicer(), FakeContext([0.0])
    with pytest.raises(RuntimeError, match="aborted"):
        servicer.Solve(request(), ctx)
    assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert calls == []


def test_deadline_passed_while_solving_keeps_no_prices():
    servicer, ctx = pricing_server.PricingServicer(), FakeContext([10.0, 0.0])
    with pytest.raises(RuntimeError, match="aborted"):
        servicer.Solve(request(), ctx)
    assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert list(servicer.GetPrices(pricing_pb2.GetPricesRequest(), ctx).prices) == []


def test_a_short_client_deadline_is_deadline_exceeded(make_server, monkeypatch):
    release = threading.Event()
    real = elastico.pricing.solve

    def slow(**kw):
        release.wait(TIMEOUT)
        return real(**kw)

    monkeypatch.setattr(elastico.pricing, "solve", slow)
    s = make_server()
    with pytest.raises(grpc.RpcError) as info:
        s.pricing.Solve(request(), timeout=0.2)
    release.set()
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_more_than_max_concurrent_rpcs_is_resource_exhausted(make_server, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = elastico.pricing.solve

    def blocking(**kw):
        entered.set()
        release.wait(TIMEOUT)
        return real(**kw)

    monkeypatch.setattr(elastico.pricing, "solve", blocking)
    s = make_server(max_concurrent_rpcs=1)
    first = s.pricing.Solve.future(request(), timeout=TIMEOUT)
    try:
        assert entered.wait(TIMEOUT)
        err = rpc_error(s.pricing.GetPrices, pricing_pb2.GetPricesRequest())
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        release.set()
    assert list(first.result().choice) == [1, 2]


# -- health checking and reflection ---------------------------------------------------------

@pytest.mark.parametrize("service", ["elastico.v1.PricingService", ""])
def test_health_check_is_serving(svc, service):
    stub = health_pb2_grpc.HealthStub(svc.channel)
    got = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
    assert got.status == health_pb2.HealthCheckResponse.SERVING


def test_health_check_of_an_unknown_service_is_not_found(svc):
    stub = health_pb2_grpc.HealthStub(svc.channel)
    err = rpc_error(stub.Check, health_pb2.HealthCheckRequest(service="no.Such"))
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_lists_and_describes_the_service(svc):
    db = ProtoReflectionDescriptorDatabase(svc.channel)
    assert "elastico.v1.PricingService" in db.get_services()
    assert pricing_server.SERVICE_NAME == "elastico.v1.PricingService"
    fd = db.FindFileContainingSymbol("elastico.v1.PricingService")
    methods = {m.name for s in fd.service for m in s.method}
    assert methods == {"Solve", "GetPrices"}


def test_solve_kwargs_reshapes_demand_row_major():
    kw = pricing_server.solve_kwargs(request())
    assert kw["demand"].shape == (5, 2)
    np.testing.assert_array_equal(kw["demand"], np.asarray(DEMAND, dtype=float))
    assert kw["offsets"].dtype == np.int64 and kw["initial_prices"] is None
