"""The gRPC PredictorService (elastico.predictor.server) against a real server on 127.0.0.1,
port 0: the same slowdowns as the in-process core, the model version, reports stored for
retraining, INVALID_ARGUMENT naming the field of a bad request, health and the fallback."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elastico.predictor import server as predictor_server
from elastico.predictor.learned import bundled_predictor
from elastico.predictor.profile import JobProfile
from elastico.predictor.service import ModelStore, PredictorCore
from elastico.v1 import predictor_pb2 as pb
from elastico.v1 import predictor_pb2_grpc

TIMEOUT = 10.0

R50 = dict(job_type="ResNet-50 (batch size 64)", kind="training", gpu_activity=0.287,
           solo_tput=4.39)
LM = dict(job_type="LM (batch size 20)", kind="training", gpu_activity=0.224, solo_tput=64.7)


@pytest.fixture
def serve(tmp_path):
    """Starts a server over a core (default: a store in tmp_path) and returns (stub, core)."""
    started = []

    def start(core=None):
        core = core or PredictorCore(ModelStore(tmp_path / "store"))
        server, port = predictor_server.build_server("127.0.0.1:0", core=core)
        server.start()
        ch = grpc.insecure_channel(f"127.0.0.1:{port}")
        started.append((server, ch))
        return predictor_pb2_grpc.PredictorServiceStub(ch), core, ch

    yield start
    for server, ch in started:
        ch.close()
        server.stop(None)


def test_predict_matches_the_core_and_names_the_model(serve):
    stub, core, _ = serve()
    req = pb.PredictSlowdownRequest(gpu_model="V100M16", include_b=True, pairs=[
        pb.ProfilePair(a=pb.JobProfile(**R50), b=pb.JobProfile(**LM)),
        pb.ProfilePair(a=pb.JobProfile(**LM), b=pb.JobProfile(**R50)),
    ])
    resp = stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert resp.model_version == bundled_predictor().version
    a, b = JobProfile(gpu_model="V100M16", **R50), JobProfile(gpu_model="V100M16", **LM)
    sa, sb = bundled_predictor().predict([a, b], [b, a], ["V100M16"] * 2)
    assert list(resp.slowdown) == pytest.approx([sa, sb], rel=1e-12)
    # the second pair is the first swapped
    assert (resp.slowdown[1], resp.slowdown_b[1]) == (resp.slowdown_b[0], resp.slowdown[0])
    assert all(s >= 1.0 for s in list(resp.slowdown) + list(resp.slowdown_b))
    req.include_b = False  # only the a sides: the same numbers, no slowdown_b
    one = stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert list(one.slowdown) == list(resp.slowdown) and list(one.slowdown_b) == []
    empty = stub.PredictSlowdown(pb.PredictSlowdownRequest(gpu_model="T4"), timeout=TIMEOUT)
    assert list(empty.slowdown) == [] and empty.model_version == resp.model_version


def test_in_domain_flags_cross_the_wire_and_the_placer_client_reads_them(serve):
    # the bundled model's domain is Gavel's pairs with catalogue activity (docs/predictor.md
    # "Domain"): R50 next to LM without counters is inside; the same pair with a measured
    # sm_activity is outside (source "measured") -- each flag as the bundled model says
    from elastico.placer.rpc.remote import RemoteSlowdownModel

    stub, core, ch = serve()
    measured = dict(R50, sm_activity=0.6, dram_activity=0.3)
    req = pb.PredictSlowdownRequest(gpu_model="V100M16", include_b=True, pairs=[
        pb.ProfilePair(a=pb.JobProfile(**R50), b=pb.JobProfile(**LM)),
        pb.ProfilePair(a=pb.JobProfile(**measured), b=pb.JobProfile(**LM)),
    ])
    resp = stub.PredictSlowdown(req, timeout=TIMEOUT)
    a, b = JobProfile(gpu_model="V100M16", **R50), JobProfile(gpu_model="V100M16", **LM)
    m = JobProfile(gpu_model="V100M16", **measured)
    bp = bundled_predictor()
    want = [bp.in_domain(a, b), bp.in_domain(m, b)]
    assert want == [True, False]  # the test can fail: one inside, one outside
    assert list(resp.in_domain) == want
    assert list(resp.in_domain_b) == [bp.in_domain(b, a), bp.in_domain(b, m)]
    remote = RemoteSlowdownModel(ch, timeout_s=TIMEOUT)
    assert remote.in_domain(a, b) and not remote.in_domain(m, b)
    assert remote.in_domain(b, a) == bp.in_domain(b, a)

def test_unset_activity_and_missing_features(serve):
    stub, _, _ = serve()
    # nothing but the job types: every counter missing, activity estimated from the schema
    req = pb.PredictSlowdownRequest(gpu_model="T4", pairs=[pb.ProfilePair(
        a=pb.JobProfile(job_type="A3C"), b=pb.JobProfile(job_type="CycleGAN"))])
    resp = stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert np.isfinite(resp.slowdown[0]) and resp.slowdown[0] >= 1.0
    # an explicit activity 0: the job never touches the SMs, so it is not slowed
    req.pairs[0].a.gpu_activity = 0.0
    assert stub.PredictSlowdown(req, timeout=TIMEOUT).slowdown[0] == 1.0


@pytest.mark.parametrize("mutate,field", [
    (lambda r: setattr(r, "gpu_model", "X100"), "gpu_model"),
    (lambda r: setattr(r, "gpu_model", ""), "gpu_model"),
    (lambda r: setattr(r.pairs[1].b, "sm_activity", 1.5), "pairs[1].b.sm_activity"),
    (lambda r: setattr(r.pairs[0].a, "kind", "batch"), "pairs[0].a.kind"),
    (lambda r: setattr(r.pairs[0].a, "batch_size", 0), "pairs[0].a.batch_size"),
    (lambda r: setattr(r.pairs[1].a, "mps_share", 0.0), "pairs[1].a.mps_share"),
    (lambda r: setattr(r.pairs[0].b, "precision", "fp8"), "pairs[0].b.precision"),
    (lambda r: setattr(r.pairs[0].b, "gpu_activity", -0.1), "pairs[0].b.gpu_activity"),
    (lambda r: setattr(r.pairs[0].b, "mem_gib", float("nan")), "pairs[0].b.mem_gib"),
])
def test_bad_requests_are_invalid_argument_naming_the_field(serve, mutate, field):
    stub, _, _ = serve()
    req = pb.PredictSlowdownRequest(gpu_model="V100M16", pairs=[
        pb.ProfilePair(a=pb.JobProfile(**R50), b=pb.JobProfile(**LM))] * 2)
    mutate(req)
    with pytest.raises(grpc.RpcError) as err:
        stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":")


def test_report_observation_stores_for_retraining(serve, tmp_path):
    stub, core, _ = serve()
    obs = pb.Observation(a=pb.JobProfile(**R50, sm_activity=0.6), b=pb.JobProfile(**LM),
                         gpu_model="A10", slowdown_a=1.4, slowdown_b=1.25, source="node-7")
    r = stub.ReportObservation(pb.ReportObservationRequest(observations=[obs, obs]),
                               timeout=TIMEOUT)
    assert (r.accepted, r.stored) == (2, 2)
    only_a = pb.Observation(a=pb.JobProfile(**LM), b=pb.JobProfile(**R50), gpu_model="A10",
                            slowdown_a=1.1)
    r = stub.ReportObservation(pb.ReportObservationRequest(observations=[only_a]),
                               timeout=TIMEOUT)
    assert (r.accepted, r.stored) == (1, 3)
    # a source with line breaks is one quoted CSV cell: still one more observation, not three
    multi = pb.Observation(a=pb.JobProfile(**LM), b=pb.JobProfile(**R50), gpu_model="A10",
                           slowdown_a=1.2, source="rack 4\nnode 7\nrun 2")
    r = stub.ReportObservation(pb.ReportObservationRequest(observations=[multi]),
                               timeout=TIMEOUT)
    assert (r.accepted, r.stored) == (1, 4)
    stored = core.store.reported()
    assert [(o.gpu_model, o.slowdown_a, o.slowdown_b, o.source) for o in stored] == [
        ("A10", 1.4, 1.25, "node-7"), ("A10", 1.4, 1.25, "node-7"), ("A10", 1.1, None, ""),
        ("A10", 1.2, None, "rack 4\nnode 7\nrun 2")]
    assert stored[0].a.sm_activity == 0.6 and stored[0].a.job_type == R50["job_type"]
    # one bad observation: INVALID_ARGUMENT naming it, nothing stored
    bad = pb.Observation(a=pb.JobProfile(**LM), b=pb.JobProfile(**R50), gpu_model="A10",
                         slowdown_a=-1.0)
    with pytest.raises(grpc.RpcError) as err:
        stub.ReportObservation(pb.ReportObservationRequest(observations=[obs, bad]),
                               timeout=TIMEOUT)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("observations[1].slowdown_a:")
    # past what the predictor can represent (50) or its reciprocal: a recording error
    for value in (1e308, 50.5, 0.019, 5e-324):
        bad.slowdown_a = value
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportObservation(pb.ReportObservationRequest(observations=[bad]),
                                   timeout=TIMEOUT)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("observations[0].slowdown_a:")
        assert "[0.02, 50]" in err.value.details()
    assert len(core.store.reported()) == 4
    for req in (pb.ReportObservationRequest(),
                pb.ReportObservationRequest(observations=[pb.Observation(
                    a=pb.JobProfile(**LM), b=pb.JobProfile(**R50), gpu_model="Z",
                    slowdown_a=1.2)])):
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportObservation(req, timeout=TIMEOUT)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(core.store.reported()) == 4


def test_health_and_the_analytic_fallback(serve, tmp_path):
    stub, _, ch = serve(PredictorCore(ModelStore(tmp_path / "none"), use_bundled=False))
    health = health_pb2_grpc.HealthStub(ch)
    for name in ("", predictor_server.SERVICE_NAME):
        assert health.Check(health_pb2.HealthCheckRequest(service=name), timeout=TIMEOUT
                            ).status == health_pb2.HealthCheckResponse.SERVING
    req = pb.PredictSlowdownRequest(gpu_model="P100", include_b=True, pairs=[
        pb.ProfilePair(a=pb.JobProfile(job_type="x", gpu_activity=0.5),
                       b=pb.JobProfile(job_type="y", gpu_activity=0.25))])
    resp = stub.PredictSlowdown(req, timeout=TIMEOUT)
    assert resp.model_version.startswith("analytic-kappa")
    k = float(resp.model_version.removeprefix("analytic-kappa"))
    assert resp.slowdown[0] == pytest.approx(1 + k * 0.25, abs=1e-4)
    assert resp.slowdown_b[0] == pytest.approx(1 + k * 0.5, abs=1e-4)


def test_serve_refuses_a_bad_model_file(tmp_path, capsys):
    from elastico.cli import main as cli_main

    bad = tmp_path / "m.json"
    bad.write_text('{"format": "elastico-slowdown-model"')  # truncated
    assert cli_main(["serve", "predictor", "--plaintext", "--port", "0", "--model", str(bad)]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
