"""A solo profile is known per (job, GPU model, MPS share): counters are not portable across
GPU models (a job's SM and DRAM activity depend on the GPU's peak FLOP/s and bandwidth,
elastico.perf.contention.compute_bound_on / roofline_dram) nor across MPS shares (activity
p * speed(share)).  A job profiled on G2 is unknown on a V100 (worst-case rule, docs/predictor.md
"Unknown jobs") and known on G2; the simulator profiles it again where it runs alone; the
predictor's LookupProfiles answers per GPU model."""
from __future__ import annotations

import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.common import ANY_SLOT, profile_slot
from elastico.predictor import AnalyticSlowdown
from elastico.predictor.prior import is_worst_case
from elastico.predictor.profiles import ProfileStore, StoredProfile
from elastico.sim.simulator import simulate

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"
NODES = [Node("g2", "G2", 1, 16.0, 32.0, 128.0), Node("v", "V100M32", 1, 16.0, 32.0, 128.0)]


def _job(i=0, models=None, work=500.0):
    return Job(f"j{i}", JobKind.TRAINING, 0.0, work,
               Request(1, 1.0, 1.0, 2.0, gpu_models=frozenset(models or ())),
               job_type=JT, reshape=False)


def _policy():
    return make_policy("elastico", PolicyEnv(nodes=NODES, throughput=MODEL,
                                             slowdown=AnalyticSlowdown()))


def _config(cat, job, model):
    return next(c for c in cat.requested(job, False) if c.gpu_model == model)


def test_profiled_on_g2_is_known_on_g2_and_unknown_on_a_v100():
    cat = _policy().catalog
    job = _job()
    g2, v100 = _config(cat, job, "G2"), _config(cat, job, "V100M32")
    cat.unknown.add(job.id)
    assert is_worst_case(cat.profile(job, g2)) and is_worst_case(cat.profile(job, v100))
    cat.mark_profiled(job.id, g2, (0.41, 0.27))
    on_g2 = cat.profile(job, g2)
    assert not cat.is_unknown(job.id, g2) and not is_worst_case(on_g2)
    assert (on_g2.sm_activity, on_g2.dram_activity) == (0.41, 0.27)   # its own counters
    # on the V100 it has no profile: the worst case, not the G2 counters
    assert cat.is_unknown(job.id, v100) and is_worst_case(cat.profile(job, v100))
    # nor at another MPS share of the same model (activity depends on the share)
    half = g2.__class__(**{**g2.__dict__, "gpu_share": 0.5})
    assert profile_slot(half) == ("G2", "mps", 0.5, None)
    assert cat.is_unknown(job.id, half)
    # an older predictor's per-job answer: known everywhere (backwards compatible)
    cat.known[job.id] = {ANY_SLOT}
    assert not cat.is_unknown(job.id, v100) and not is_worst_case(cat.profile(job, v100))


def test_simulator_profiles_again_on_a_new_gpu_model():
    """Known on G2 only, the job may run only on the V100: it runs there unknown (the
    worst-case rule) and gets its V100 profile one window after its start."""
    pol = _policy()
    job = _job(models={"V100M32"})
    g2 = _config(pol.catalog, _job(), "G2")
    pol.catalog.mark_profiled(job.id, g2, (0.41, 0.27))
    res = simulate(NODES, [job], pol, unknown_profiles=True, profile_window_s=60.0,
                   activity=lambda j, c: pol.catalog.base_profile(j, c).gpu_activity)
    rec = res.records[0]
    assert rec.profiled_s == pytest.approx(rec.first_start_s + 60.0)
    assert rec.profiles_recorded == 1
    assert res.metrics["unknown_run_s"] == pytest.approx(60.0, rel=1e-6)
    assert res.metrics["unknown_profiles_recorded"] == 1


def _stored(**kw):
    d = dict(job_key="ns/Job/a", gpu_model="G2", mechanism="whole", sm_activity=0.3,
             dram_activity=0.2, mem_gib=5.0, process_sm_util=0.9, samples=60, period_s=1.0)
    d.update(kw)
    return StoredProfile(**d)


def test_profile_store_known_slots_per_gpu_model_and_share(tmp_path):
    s = ProfileStore(tmp_path / "p.json")
    s.report([_stored(), _stored(mechanism="mps", mps_share=0.5),
              _stored(job_key="ns/Job/b", gpu_model="V100M32", mechanism="mps", mps_share=1.0)])
    assert s.known_slots(["ns/Job/a", "ns/Job/b", "ns/Job/c"]) == {
        "ns/Job/a": {("G2", "whole", None, None), ("G2", "mps", 0.5, None)},
        "ns/Job/b": {("V100M32", "whole", None, None)}}     # a full MPS share is a whole GPU


def test_lookup_profiles_answers_per_gpu_model_over_grpc(tmp_path):
    grpc = pytest.importorskip("grpc")
    from elastico.placer.rpc.remote import RemoteSlowdownModel
    from elastico.predictor.server import build_server
    from elastico.predictor.service import ModelStore, PredictorCore

    core = PredictorCore(ModelStore(tmp_path), use_bundled=False)
    core.profiles.report([_stored(), _stored(mechanism="mps", mps_share=0.25)])
    server, port = build_server("127.0.0.1:0", core=core)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            remote = RemoteSlowdownModel(ch, timeout_s=5)
            assert remote.known_profiles(["ns/Job/a", "ns/Job/b"]) == {
                "ns/Job/a": {("G2", "whole", None, None), ("G2", "mps", 0.25, None)}}
            assert remote.known_jobs(["ns/Job/a", "ns/Job/b"]) == {"ns/Job/a"}  # old client
    finally:
        server.stop(None)
    with grpc.insecure_channel("127.0.0.1:1") as ch:
        assert RemoteSlowdownModel(ch, timeout_s=0.5).known_profiles(["x"]) is None
