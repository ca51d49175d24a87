"""Hypothesis-generated messages against real servers on 127.0.0.1 (issue 9 item 1, issue 6
"Tests"): for every RPC of PricingService, PredictorService and NodeAgentService

* valid messages are answered, and the answer keeps the contract (a feasible choice, the
  prices kept for GetPrices; one slowdown per pair; the MPS clients booked);
* one bad field in an otherwise valid message -> ``INVALID_ARGUMENT`` whose details start with
  the field path and show the bad value, and the service's state (GetPrices, the model
  version and stored reports, the node's MIG instances and MPS book) is what it was before;
* arbitrary messages (every field drawn from NaN, infinities, extreme integers, odd text,
  nested messages) and bytes that are no message at all are never ``UNKNOWN`` or
  ``INTERNAL``;
* a caller whose deadline passes gets ``DEADLINE_EXCEEDED`` and nothing is kept.

The PlacerService has its own bad-field tests (tests/test_placer_grpc.py); the generic
arbitrary-message fuzz below also runs against it.
"""

from __future__ import annotations

import math
import time

import grpc
import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.runtime.metrics import ServiceMetrics
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
from elastico.nodeagent import server as na_server
from elastico.predictor import server as predictor_server
from elastico.predictor.schema import GPU_SPECS, JOB_FIELDS, MAX_BATCH_SIZE, MAX_MEM_GIB
from elastico.predictor.service import ModelStore, PredictorCore
from elastico.pricing import server as pricing_server
from elastico.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from elastico.v1 import predictor_pb2, predictor_pb2_grpc
from elastico.v1 import pricing_pb2, pricing_pb2_grpc

TIMEOUT = 20.0
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def _start(build, **kw):
    metrics = ServiceMetrics(kw.pop("name"))
    server, port = build("127.0.0.1:0", metrics=metrics, **kw)
    server.start()
    target = f"127.0.0.1:{port}"
    return server, grpc.insecure_channel(target), metrics, target


@pytest.fixture(scope="module")
def pricing():
    server, ch, metrics, target = _start(pricing_server.build_server, name="pricing")
    yield type("Svc", (), dict(stub=pricing_pb2_grpc.PricingServiceStub(ch), channel=ch,
                               metrics=metrics, target=target))
    ch.close()
    server.stop(0).wait()


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    core = PredictorCore(ModelStore(tmp_path_factory.mktemp("store")))
    server, ch, metrics, _ = _start(predictor_server.build_server, name="predictor", core=core)
    yield type("Svc", (), dict(stub=predictor_pb2_grpc.PredictorServiceStub(ch), channel=ch,
                               core=core, metrics=metrics))
    ch.close()
    server.stop(0).wait()


@pytest.fixture(scope="module")
def nodeagent():
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-0", "A100-40GB", 40.0),
                             GpuInfo(1, "GPU-1", "A100-40GB", 40.0, mig_mode=True)])
    server, ch, metrics, _ = _start(na_server.build_server, name="nodeagent", backend=b,
                                 node_name="fuzz-node")
    yield type("Svc", (), dict(stub=nodeagent_pb2_grpc.NodeAgentServiceStub(ch), channel=ch,
                               backend=b, metrics=metrics))
    ch.close()
    server.stop(0).wait()


def _fails(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(request, timeout=TIMEOUT)
    return e.value


def _shown(v) -> str:
    """How InvalidArgument prints a float value (repr of a Python float)."""
    return repr(float(v)) if isinstance(v, float) else repr(v)


BAD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf])
NEGATIVE = st.one_of(st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False),
                     st.just(-1e308))


# ---- PricingService --------------------------------------------------------------------

@st.composite
def instances(draw):
    """A valid instance: N jobs, each with a zero-demand 'wait' configuration first (so it is
    always feasible), R resources.  Returns (offsets, utility, demand rows, capacity)."""
    r = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    offsets, utility, demand = [0], [], []
    small = st.floats(0, 8, allow_nan=False)
    for k in sizes:
        utility.append(0.0)
        demand.append([0.0] * r)
        for _ in range(k - 1):
            utility.append(draw(st.floats(-5, 50, allow_nan=False)))
            demand.append([draw(small) for _ in range(r)])
        offsets.append(offsets[-1] + k)
    capacity = [draw(st.floats(0, 16, allow_nan=False)) for _ in range(r)]
    return offsets, utility, demand, capacity


def solve_request(inst, **kw):
    offsets, utility, demand, capacity = inst
    return pricing_pb2.SolveRequest(instance=pricing_pb2.PricingInstance(
        offsets=offsets, utility=utility, demand=[x for row in demand for x in row],
        capacity=capacity), **kw)


@FUZZ
@given(inst=instances())
def test_pricing_valid_instances_get_a_feasible_choice_and_keep_the_prices(pricing, inst):
    offsets, utility, demand, capacity = inst
    resp = pricing.stub.Solve(solve_request(inst), timeout=TIMEOUT)
    assert len(resp.choice) == len(offsets) - 1
    used = np.zeros(len(capacity))
    rows = []
    for j, c in enumerate(resp.choice):  # choice[j]: index within job j's family
        assert 0 <= c < offsets[j + 1] - offsets[j]
        rows.append(offsets[j] + c)
        used += demand[offsets[j] + c]
    assert np.all(used <= np.array(capacity) + 1e-9)  # feasible: within every capacity
    assert resp.primal_value == pytest.approx(sum(utility[i] for i in rows), abs=1e-9)
    kept = pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    assert list(kept.prices) == list(resp.prices)


@st.composite
def bad_solve_requests(draw):
    """(request, field path, bad value): a valid instance with one field made bad."""
    inst = draw(instances())
    offsets, utility, demand, capacity = inst
    req = solve_request(inst)
    r, m = len(capacity), len(utility)
    which = draw(st.sampled_from(["capacity", "utility", "demand", "offsets0", "offsets_empty",
                                  "initial_prices", "max_iterations", "gap_tolerance",
                                  "current", "primal_every", "names"]))
    if which == "capacity":
        k, v = draw(st.integers(0, r - 1)), draw(st.one_of(BAD_FLOATS, NEGATIVE))
        req.instance.capacity[k] = v
        return req, f"instance.capacity[{k}]", v
    if which == "utility":
        i, v = draw(st.integers(0, m - 1)), draw(BAD_FLOATS)
        req.instance.utility[i] = v
        return req, f"instance.utility[{i}]", v
    if which == "demand":
        j, v = draw(st.integers(0, m * r - 1)), draw(st.one_of(BAD_FLOATS, NEGATIVE))
        req.instance.demand[j] = v
        return req, f"instance.demand[{j}]", v
    if which == "offsets0":
        v = draw(st.integers(1, 2**62))
        req.instance.offsets[0] = v
        return req, "instance.offsets[0]", v
    if which == "offsets_empty" and len(offsets) > 2:  # job 0 and job 1 share a start
        req.instance.offsets[1] = 0
        return req, "instance.offsets[1]", 0
    if which == "initial_prices":
        k, v = draw(st.integers(0, r - 1)), draw(st.one_of(BAD_FLOATS, NEGATIVE))
        prices = [1.0] * r
        prices[k] = v
        req.initial_prices.extend(prices)
        return req, f"initial_prices[{k}]", v
    if which == "max_iterations":
        v = draw(st.integers(-2**31, -1))
        req.max_iterations = v
        return req, "max_iterations", v
    if which == "gap_tolerance":
        v = draw(st.one_of(BAD_FLOATS, NEGATIVE))
        req.gap_tolerance = v
        return req, "gap_tolerance", v
    if which == "current":
        j = draw(st.integers(0, len(offsets) - 2))
        v = draw(st.one_of(st.integers(-2**63, -2), st.integers(offsets[-1], 2**63 - 1)))
        cur = [-1] * (len(offsets) - 1)  # every other job valid: not running
        cur[j] = v
        req.current.extend(cur)
        return req, f"current[{j}]", v
    if which == "primal_every":
        v = draw(st.integers(-2**31, -1))
        req.primal_every = v
        return req, "primal_every", v
    req.instance.resource_names.extend(["gpu"] * (r + 1))
    return req, "instance.resource_names.shape", (r + 1,)


@FUZZ
@given(case=bad_solve_requests())
def test_pricing_one_bad_field_is_invalid_argument_naming_it_and_keeps_the_prices(pricing, case):
    req, field, value = case
    before = pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    e = _fails(pricing.stub.Solve, req)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
    assert e.details().startswith(f"{field}: {_shown(value)} is not allowed"), e.details()
    after = pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    assert after == before


def test_pricing_sums_that_overflow_are_refused_or_finite(pricing):
    """Utilities near the float maximum: each is finite, their sum is not.  The answer is
    either a clear INVALID_ARGUMENT or a finite result -- never inf prices kept, never
    INTERNAL."""
    big = 1.7e308
    inst = ([0, 2, 4], [0.0, big, 0.0, big], [[0.0], [1.0], [0.0], [1.0]], [2.0])
    before = pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    try:
        resp = pricing.stub.Solve(solve_request(inst), timeout=TIMEOUT)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
        assert pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT) == before
    else:
        assert all(math.isfinite(p) for p in resp.prices)
        assert list(resp.choice) == [1, 1]  # both fit: 2 GPUs of capacity 2


# ---- PredictorService ------------------------------------------------------------------

JOB_TYPES = ["ResNet-50 (batch size 64)", "LM (batch size 20)", "A3C", "CycleGAN",
             "Transformer (batch size 128)", "Recommendation (batch size 512)"]
_FIELD = {f.name: f for f in JOB_FIELDS}


def _valid_value(name: str):
    f = _FIELD[name]
    if f.check == "fraction":
        return st.floats(0, 1)
    if f.check == "share":
        return st.floats(1e-6, 1)
    if f.check == "nonneg":
        return st.floats(0, min(f.maximum or 1e4, 1e4))
    if f.check == "positive":
        return st.floats(1e-6, 1e4)
    if f.check == "count":
        return st.integers(1, 4096)
    if f.check == "choice":
        return st.sampled_from(f.choices)
    return st.sampled_from(["ResNet-50", "LM", "Transformer"])


_OPTIONAL = [n for n in predictor_pb2.JobProfile.DESCRIPTOR.fields_by_name
             if n not in ("job_type", "kind")]


@st.composite
def profiles(draw):
    kw = {"job_type": draw(st.sampled_from(JOB_TYPES)),
          "kind": draw(st.sampled_from(["training", "inference", "service", ""]))}
    for name in draw(st.sets(st.sampled_from(_OPTIONAL), max_size=6)):
        kw[name] = draw(st.floats(0, 1) if name == "gpu_activity" else _valid_value(name))
    return predictor_pb2.JobProfile(**kw)


@st.composite
def predict_requests(draw):
    pairs = draw(st.lists(st.tuples(profiles(), profiles()), min_size=1, max_size=4))
    return predictor_pb2.PredictSlowdownRequest(
        gpu_model=draw(st.sampled_from(sorted(GPU_SPECS))), include_b=draw(st.booleans()),
        pairs=[predictor_pb2.ProfilePair(a=a, b=b) for a, b in pairs])


def _predictor_state(svc):
    return svc.core.version, len(svc.core.store.reported())


@FUZZ
@given(req=predict_requests())
def test_predictor_valid_pairs_get_one_finite_slowdown_each(predictor, req):
    resp = predictor.stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert len(resp.slowdown) == len(req.pairs)
    assert len(resp.slowdown_b) == (len(req.pairs) if req.include_b else 0)
    assert all(math.isfinite(s) and s > 0 for s in [*resp.slowdown, *resp.slowdown_b])
    assert resp.model_version == predictor.core.version


def _bad_value(name: str):
    """Values the schema must refuse for per-job field ``name``."""
    if name == "gpu_activity":
        return st.one_of(BAD_FLOATS, NEGATIVE, st.floats(1.0001, 1e300))
    f = _FIELD[name]
    if f.check == "fraction":
        return st.one_of(BAD_FLOATS, NEGATIVE, st.floats(1.0001, 1e300))
    if f.check == "share":
        return st.one_of(BAD_FLOATS, NEGATIVE, st.just(0.0), st.floats(1.0001, 1e300))
    if f.check == "nonneg":
        top = st.floats(f.maximum * 1.001, 1e300) if f.maximum else st.nothing()
        return st.one_of(BAD_FLOATS, NEGATIVE, top)
    if f.check == "positive":
        return st.one_of(BAD_FLOATS, NEGATIVE, st.just(0.0))
    if f.check == "count":  # uint32 on the wire: 0 or above the schema's maximum
        return st.one_of(st.just(0), st.integers(MAX_BATCH_SIZE + 1, 2**32 - 1))
    if f.check == "choice":  # kind "" means unknown and is allowed
        return st.sampled_from(["FP32", "fp8", "batch", "mps ", "x" * 300]
                               + ([] if name == "kind" else [""]))
    return st.sampled_from(["", "   "])


_BAD_FIELDS = [n for n in predictor_pb2.JobProfile.DESCRIPTOR.fields_by_name
               if n != "job_type"]
#: GPU model names that are not models: substrings, case, whitespace, known to other tools
BAD_GPU_MODELS = ["", "A1", "A100", "a10", "A10 ", "V100", "H100", "T4\x00", "K80|T4", "ä"]


@st.composite
def bad_predict_requests(draw):
    req = draw(predict_requests())
    i = draw(st.integers(0, len(req.pairs) - 1))
    side = draw(st.sampled_from(["a", "b"]))
    which = draw(st.sampled_from(["field", "field", "gpu_model", "missing"]))
    if which == "gpu_model":
        v = draw(st.sampled_from(BAD_GPU_MODELS))
        req.gpu_model = v
        return req, "gpu_model", v
    if which == "missing":
        req.pairs[i].ClearField(side)
        return req, f"pairs[{i}].{side}", "missing"
    name = draw(st.sampled_from(_BAD_FIELDS))
    v = draw(_bad_value(name))
    setattr(getattr(req.pairs[i], side), name, v)
    return req, f"pairs[{i}].{side}.{name}", v


@FUZZ
@given(case=bad_predict_requests())
def test_predictor_one_bad_field_is_invalid_argument_naming_it(predictor, case):
    req, field, value = case
    before = _predictor_state(predictor)
    e = _fails(predictor.stub.PredictSlowdown, req)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
    # the first bad field of the request is named; a bad gpu_model is checked before pairs
    assert e.details().startswith(f"{field}: {_shown(value)} is not allowed"), e.details()
    assert _predictor_state(predictor) == before


@st.composite
def bad_reports(draw):
    """(request, field, value): valid observations with one made bad."""
    n = draw(st.integers(1, 3))
    obs = []
    for _ in range(n):
        obs.append(predictor_pb2.Observation(
            a=draw(profiles()), b=draw(profiles()), gpu_model=draw(st.sampled_from(sorted(GPU_SPECS))),
            slowdown_a=draw(st.floats(0.5, 5)), source="fuzz"))
    i = draw(st.integers(0, n - 1))
    which = draw(st.sampled_from(["slowdown_a", "slowdown_b", "gpu_model", "side", "missing"]))
    o = obs[i]
    if which in ("slowdown_a", "slowdown_b"):
        v = draw(st.one_of(BAD_FLOATS, NEGATIVE, st.just(0.0)))
        setattr(o, which, v)
        field = f"observations[{i}].{which}"
    elif which == "gpu_model":
        v = draw(st.sampled_from(BAD_GPU_MODELS))
        o.gpu_model = v
        field = f"observations[{i}].gpu_model"
    elif which == "missing":
        side = draw(st.sampled_from(["a", "b"]))
        o.ClearField(side)
        v, field = "missing", f"observations[{i}].{side}"
    else:
        side, name = draw(st.sampled_from(["a", "b"])), draw(st.sampled_from(_BAD_FIELDS))
        v = draw(_bad_value(name))
        setattr(getattr(o, side), name, v)
        field = f"observations[{i}].{side}.{name}"
    return predictor_pb2.ReportObservationRequest(observations=obs), field, v


@FUZZ
@given(case=bad_reports())
def test_report_observation_with_one_bad_field_stores_nothing(predictor, case):
    req, field, value = case
    before = _predictor_state(predictor)
    e = _fails(predictor.stub.ReportObservation, req)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
    assert e.details().startswith(f"{field}: {_shown(value)} is not allowed"), e.details()
    assert _predictor_state(predictor) == before


def test_report_observation_valid_is_stored(predictor):
    before = len(predictor.core.store.reported())
    o = predictor_pb2.Observation(a=predictor_pb2.JobProfile(job_type="A3C"),
                                  b=predictor_pb2.JobProfile(job_type="CycleGAN"),
                                  gpu_model="T4", slowdown_a=1.3, slowdown_b=1.2)
    r = predictor.stub.ReportObservation(
        predictor_pb2.ReportObservationRequest(observations=[o]), timeout=TIMEOUT)
    assert (r.accepted, r.stored) == (1, before + 1)


# ---- NodeAgentService ------------------------------------------------------------------

def _node_state(svc):
    b = svc.backend
    return ([(d.profile, d.start) for d in b.mig_devices(1)],
            [(c, b.mps_limits(c)) for c in b._mps.clients()])


@st.composite
def mps_plans(draw):
    ids = draw(st.lists(st.text("abcdefgh0123456789/-", min_size=1, max_size=12), min_size=1,
                        max_size=4, unique=True))
    return nodeagent_pb2.ApplyNodePlanRequest(mps_limits=[
        nodeagent_pb2.MpsLimit(client_id=c, gpu_index=0,
                               # whole percent only: what MPS enforces (issue 18)
                               active_thread_percentage=draw(st.integers(1, 100)),
                               pinned_mem_limit_gib=draw(st.floats(0.5, 10)))
        for c in ids])


@FUZZ
@given(req=mps_plans())
def test_nodeagent_valid_plans_book_their_clients(nodeagent, req):
    r = nodeagent.stub.ApplyNodePlan(req, timeout=TIMEOUT)
    assert sorted(r.mps_clients) == sorted(m.client_id for m in req.mps_limits)
    for m in req.mps_limits:
        lim = nodeagent.backend.mps_limits(m.client_id)
        assert lim.active_thread_percentage == pytest.approx(m.active_thread_percentage)
    t = nodeagent.stub.GetTelemetry(nodeagent_pb2.GetTelemetryRequest(), timeout=TIMEOUT)
    assert t.node == "fuzz-node" and [g.index for g in t.gpus] == [0, 1]


@st.composite
def bad_plans(draw):
    req = draw(mps_plans())
    i = draw(st.integers(0, len(req.mps_limits) - 1))
    which = draw(st.sampled_from(["active_thread_percentage", "pinned_mem_limit_gib",
                                  "gpu_index", "client_id", "mig"]))
    m = req.mps_limits[i]
    if which == "active_thread_percentage":
        v = draw(st.one_of(BAD_FLOATS, NEGATIVE, st.just(0.0), st.floats(100.001, 1e300),
                           st.floats(0.001, 99.999).filter(lambda x: abs(x - round(x)) > 1e-3)))
    elif which == "pinned_mem_limit_gib":
        v = draw(st.one_of(BAD_FLOATS, NEGATIVE, st.floats(40.001, 1e300)))  # GPU 0: 40 GiB
    elif which == "gpu_index":
        v = draw(st.one_of(st.integers(-2**31, -1), st.integers(1, 2**31 - 1)))  # 1 is MIG
    elif which == "client_id":
        v = ""
    else:
        profile = draw(st.sampled_from(["", "1g", "3g.20gb ", "9g.99gb", "1g.5gb\x00"]))
        req.mig_geometries.append(nodeagent_pb2.MigGeometry(
            gpu_index=1, instances=[nodeagent_pb2.MigInstanceSpec(profile=profile,
                                                                   start_slot=0)]))
        return req, "mig_geometries[0].instances", None
    setattr(m, which, v)
    return req, f"mps_limits[{i}].{which}", v


@FUZZ
@given(case=bad_plans())
def test_nodeagent_one_bad_field_is_invalid_argument_and_changes_nothing(nodeagent, case):
    req, field, value = case
    before = _node_state(nodeagent)
    e = _fails(nodeagent.stub.ApplyNodePlan, req)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
    if value is None:
        assert e.details().startswith(field), e.details()
    else:
        assert e.details().startswith(f"{field}: {_shown(value)} is not allowed"), e.details()
    assert _node_state(nodeagent) == before


# ---- any message, any bytes ------------------------------------------------------------

_NASTY_DOUBLES = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324]))
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-2**31, 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-2**63, 2**63 - 1), FieldDescriptor.TYPE_SINT64: (-2**63, 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
}


def _scalar(fd):
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _NASTY_DOUBLES if fd.type == FieldDescriptor.TYPE_DOUBLE else st.floats(width=32)
    if fd.type in _INT_RANGES:
        lo, hi = _INT_RANGES[fd.type]
        return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if fd.type == FieldDescriptor.TYPE_ENUM:  # proto3 keeps unknown enum numbers too
        return st.integers(-2, 2 + max(v.number for v in fd.enum_type.values))
    if fd.type == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.text(max_size=20), st.sampled_from(["A10", "A100", "50m", "nan"]))
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=20)
    raise AssertionError(fd.type)


def _repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)  # protobuf >= 6; older ones have only label
    return rep if rep is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def messages(descriptor, depth: int = 0):
    """Any message of ``descriptor``: each field unset or drawn from nasty values."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(descriptor)

    @st.composite
    def build(draw):
        msg = cls()
        for fd in descriptor.fields:
            if not draw(st.booleans()):
                continue
            if fd.type == FieldDescriptor.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:
                # a map<k, v> field: nasty keys and values, e.g. NodeSpec.labels
                key, value = (fd.message_type.fields_by_name[n] for n in ("key", "value"))
                getattr(msg, fd.name).update(draw(st.dictionaries(
                    _scalar(key), _scalar(value), max_size=3)))
                continue
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                if depth >= 2:
                    continue
                sub = messages(fd.message_type, depth + 1)
                if _repeated(fd):
                    getattr(msg, fd.name).extend(draw(st.lists(sub, max_size=3)))
                else:
                    getattr(msg, fd.name).CopyFrom(draw(sub))
            elif _repeated(fd):
                getattr(msg, fd.name).extend(draw(st.lists(_scalar(fd), max_size=6)))
            else:
                setattr(msg, fd.name, draw(_scalar(fd)))
        return msg

    return build()


def _methods(service_descriptor):
    return [(f"/{service_descriptor.full_name}/{m.name}", m.input_type)
            for m in service_descriptor.methods]


def _raw(channel, method):
    return channel.unary_unary(method)  # bytes in, bytes out


_SERVICES = {
    "pricing": pricing_pb2.DESCRIPTOR.services_by_name["PricingService"],
    "predictor": predictor_pb2.DESCRIPTOR.services_by_name["PredictorService"],
    "nodeagent": nodeagent_pb2.DESCRIPTOR.services_by_name["NodeAgentService"],
}
_CALLS = [(svc, method, desc) for svc, sd in _SERVICES.items() for method, desc in _methods(sd)]


@pytest.mark.parametrize("svc,method,desc", _CALLS, ids=[m for _, m, _ in _CALLS])
def test_any_message_is_never_unknown_or_internal(request, svc, method, desc):
    s = request.getfixturevalue(svc)
    call = _raw(s.channel, method)

    @FUZZ
    @given(msg=messages(desc))
    def run(msg):
        try:
            call(msg.SerializeToString(), timeout=TIMEOUT)
        except grpc.RpcError as e:
            assert e.code() not in NEVER, (method, msg, e.details())

    run()


@pytest.mark.parametrize("svc,method,desc", _CALLS, ids=[m for _, m, _ in _CALLS])
def test_bytes_that_are_no_message_are_invalid_argument(request, svc, method, desc):
    s = request.getfixturevalue(svc)
    call = _raw(s.channel, method)
    # a field 1 length-delimited record claiming 5 bytes with 1 left; an unterminated varint;
    # a group end without a start
    for junk in (b"\x0a\x05\x0a", b"\x08" + b"\xff" * 11, b"\x0c"):
        e = _fails(call, junk)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (junk, e.details())
        assert e.details().startswith("request:"), e.details()


def test_placer_any_message_is_never_unknown_or_internal():
    """The same fuzz against the PlacerService, when its server builds here."""
    placer_server = pytest.importorskip("elastico.placer.server")
    from elastico.v1 import placer_pb2

    server, port = placer_server.build_server("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            for method, desc in _methods(placer_pb2.DESCRIPTOR.services_by_name["PlacerService"]):
                call = _raw(ch, method)

                @settings(max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
                @given(msg=messages(desc))
                def run(msg):
                    try:
                        call(msg.SerializeToString(), timeout=TIMEOUT)
                    except grpc.RpcError as e:
                        assert e.code() not in NEVER, (method, msg, e.details())

                run()
    finally:
        server.stop(0).wait()


# ---- deadlines -------------------------------------------------------------------------

def _count(metrics, service, method, code):
    return metrics.registry.get_sample_value(
        "elastico_rpc_total", {"service": service, "method": method, "code": code}) or 0.0


def _wait_for(pred, seconds=120.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _big_solve(n=20_000, k=6, r=3):
    rng = np.random.default_rng(1)
    d = rng.uniform(0, 1, (n * k, r))
    d[::k] = 0.0
    u = d.sum(1) * rng.uniform(0.5, 1.5, n * k)
    return pricing_pb2.SolveRequest(
        instance=pricing_pb2.PricingInstance(
            offsets=(np.arange(n + 1) * k).tolist(), utility=u.tolist(), demand=d.ravel().tolist(),
            capacity=(0.3 * d.reshape(n, k, r).max(1).sum(0)).tolist()),
        max_iterations=300, gap_tolerance=1e-12)


def test_pricing_deadline_exceeded_keeps_the_prices(pricing):
    before = pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT)
    method = "/elastico.v1.PricingService/Solve"
    n0 = _count(pricing.metrics, "pricing", method, "DEADLINE_EXCEEDED")
    with grpc.insecure_channel(pricing.target,
                               options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        e = _fails(lambda r, timeout: pricing_pb2_grpc.PricingServiceStub(ch).Solve(r, timeout=0.05),
                   _big_solve())
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # the server finishes (or skips) the solve on its side and says so; only then compare
    assert _wait_for(lambda: _count(pricing.metrics, "pricing", method, "DEADLINE_EXCEEDED") > n0)
    assert pricing.stub.GetPrices(pricing_pb2.GetPricesRequest(), timeout=TIMEOUT) == before


class _Expired:
    """A servicer context whose caller's deadline has passed."""

    def __init__(self):
        self.aborted = None

    def time_remaining(self):
        return 0.0

    def abort(self, code, details):
        self.aborted = (code, details)
        raise grpc.RpcError(details)


def test_predictor_report_after_the_deadline_stores_nothing(predictor):
    servicer = predictor_server.PredictorServicer(predictor.core)
    before = _predictor_state(predictor)
    req = predictor_pb2.ReportObservationRequest(observations=[predictor_pb2.Observation(
        a=predictor_pb2.JobProfile(job_type="A3C"), b=predictor_pb2.JobProfile(job_type="LM"),
        gpu_model="T4", slowdown_a=1.5)])
    ctx = _Expired()
    with pytest.raises(grpc.RpcError):
        servicer.ReportObservation(req, ctx)
    assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _predictor_state(predictor) == before
    ctx = _Expired()
    with pytest.raises(grpc.RpcError):
        servicer.PredictSlowdown(predictor_pb2.PredictSlowdownRequest(gpu_model="T4"), ctx)
    assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED


def test_predictor_and_nodeagent_short_deadlines_are_deadline_exceeded(predictor, nodeagent):
    pairs = [predictor_pb2.ProfilePair(a=predictor_pb2.JobProfile(job_type=f"job-{i}"),
                                       b=predictor_pb2.JobProfile(job_type="A3C"))
             for i in range(20_000)]
    e = _fails(lambda r, timeout: predictor.stub.PredictSlowdown(r, timeout=0.001),
               predictor_pb2.PredictSlowdownRequest(gpu_model="T4", pairs=pairs))
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    before = _node_state(nodeagent)
    servicer = na_server.NodeAgentServicer(nodeagent.backend, "n")
    ctx = _Expired()
    with pytest.raises(grpc.RpcError):
        servicer.ApplyNodePlan(nodeagent_pb2.ApplyNodePlanRequest(mps_limits=[
            nodeagent_pb2.MpsLimit(client_id="late", gpu_index=0, active_thread_percentage=50,
                                   pinned_mem_limit_gib=1)]), ctx)
    assert ctx.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _node_state(nodeagent) == before
