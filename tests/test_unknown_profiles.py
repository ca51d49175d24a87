"""Unknown jobs stay safe (issue 23, deliverable 3; docs/predictor.md, "Unknown jobs").

Hand-worked values of the mechanism bound (services/predictor/worst_case.py; more in
tests/test_worst_case.py): a job with no solo profile is taken busy all the time (u = 1) with
DRAM intensity 1 and SMs as wide as its MPS share, on any SMs; 1 on MIG.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown, JobProfile, NoInterference
from elastico.predictor.prior import (UnknownSafe, is_worst_case, prior_pair, worst_case_pair,
                                      worst_case_profile)
from elastico.predictor.profiles import ProfileStore, StoredProfile
from elastico.sim.simulator import simulate

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def resident(u, dram=0.1, share=0.5, sharing=None):
    return JobProfile("resident", "training", u, 4.0, "A100-40GB", sharing=sharing,
                      mps_share=share, sm_activity=u, dram_activity=dram)


def newcomer(share=0.5, sharing=None):
    return worst_case_profile(JobProfile("new", "training", 0.2, 4.0, "A100-40GB",
                                         sharing=sharing, mps_share=share))


def test_worst_case_profile_is_busy_dram_bound_and_keeps_its_share():
    w = newcomer(share=0.3)
    assert (w.sm_activity, w.dram_activity, w.gpu_activity, w.mps_share) == (1.0, 1.0, 1.0, 0.3)
    assert is_worst_case(w) and not is_worst_case(resident(0.4))


def test_colocation_allowed_when_the_resident_bound_holds_against_a_fully_busy_newcomer():
    # the mechanism bound (services/predictor/worst_case.py): resident busy 20 %, DRAM
    # intensity 0.02 / 0.2 = 0.1, share 0.5; newcomer busy 1, intensity 1, share 0.5.
    # x[r, n] = max(min(1, 0.5/0.5), 1/0.5) = 2 -> S_r <= 1 + 0.2 * 2 = 1.4;
    # x[n, r] = max(1, 0.1/0.5) = 1, q_r = 1 - 0.8/1.4 = 3/7 -> S_n <= 1 + 3/7;
    # both within 1.5 -> co-location allowed
    r, n = resident(0.2, dram=0.02), newcomer()
    sig = UnknownSafe(NoInterference()).gpu_slowdowns([r, n])
    assert sig.tolist() == pytest.approx([1.4, 1 + 3 / 7])
    assert all(s <= 1.5 for s in sig)
    # MIG: isolated, 1 whatever the activity (a job on its own slice needs no profile)
    rm, nm = resident(0.9, sharing="mig"), newcomer(sharing="mig")
    assert UnknownSafe(NoInterference()).gpu_slowdowns([rm, nm]).tolist() == [1.0, 1.0]


def test_colocation_refused_when_the_worst_case_pushes_the_resident_past_its_bound():
    # resident busy 80 %, intensity 0.125: S_r <= 1 + 0.8 * 2 = 2.6 > 1.5, and the newcomer
    # 1 + (1 - 0.2/2.6) = 1.923.  The plain prior with the two 50 % MPS shares would allow it
    # (SMs 0.5 + 0.5 <= 1; DRAM 1 + 0.1/0.8 -> D = 1.125, 1 + 0.8 * 0.125 = 1.1)
    r, n = resident(0.8), newcomer()
    assert prior_pair(r, n) == pytest.approx(1.0 + 0.8 * 1.0 * 0.125)
    sig = UnknownSafe(NoInterference()).gpu_slowdowns([r, n])
    assert sig.tolist() == pytest.approx([2.6, 1 + 2.4 / 2.6])
    assert sig[0] > 1.5
    # the base model's own prediction still counts when it is larger
    assert np.all(UnknownSafe(AnalyticSlowdown()).gpu_slowdowns([r, n]) >= sig)
    # a resident busy 40 %: the prior's old worst case 1 + u_a u_b said 1.4 (allowed); the
    # mechanism bound counts the newcomer's memory traffic: 1 + 0.4 * 2 = 1.8, refused
    r4 = resident(0.4)
    assert worst_case_pair(r4, n) == pytest.approx(1.4)
    assert UnknownSafe(NoInterference()).gpu_slowdowns([r4, n])[0] == pytest.approx(1.8)


def test_no_unknown_resident_means_the_base_model_bit_for_bit():
    a, b = resident(0.8), resident(0.7, share=0.4)
    base = AnalyticSlowdown()
    assert np.array_equal(UnknownSafe(base, outside_domain=False).gpu_slowdowns([a, b]),
                          base.gpu_slowdowns([a, b]))


# ---- the glue: a stored solo profile as the predictor reads it ------------------------------

def _stored(**kw):
    d = dict(job_key="ns/Job/a", gpu_model="A100-40GB", mechanism="whole", sm_activity=0.3,
             dram_activity=0.2, mem_gib=5.0, process_sm_util=0.9, samples=60, period_s=1.0)
    d.update(kw)
    return StoredProfile(**d)


def test_stored_profile_busy_fraction_is_nvml_process_utilisation_and_mig_is_mig():
    jp = _stored().job_profile()
    assert jp.sm_activity == 0.9          # the prior's u: NVML's time-based busy fraction
    assert jp.gpu_activity == 0.3         # the analytic model's input stays DCGM's
    assert _stored(process_sm_util=None).job_profile().sm_activity == 0.3
    mig = _stored(mechanism="mig", mig_profile="3g.20gb").job_profile()
    assert mig.sharing == "mig" and prior_pair(mig, newcomer()) == 1.0


def test_profile_store_lookup_says_which_jobs_are_known(tmp_path):
    s = ProfileStore(tmp_path / "p.json")
    s.report([_stored()])
    assert s.known_jobs(["ns/Job/a", "ns/Job/b"]) == {"ns/Job/a"}


# ---- the simulator: profiled after the window, not before ----------------------------------

def _run(jobs, window=60.0, **kw):
    nodes = [Node("n0", "V100M16", 1, 16.0, 32.0, 128.0)]
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy("elastico", env)
    res = simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.base_profile(j, c).gpu_activity,
                   unknown_profiles=True, profile_window_s=window, **kw)
    return res, pol


def _job(i, arrival, work):
    return Job(f"j{i}", JobKind.TRAINING, arrival, work, Request(1, 1.0, 1.0, 2.0), job_type=JT,
               reshape=False)


def test_simulator_records_the_solo_profile_after_the_window_and_not_before():
    res, pol = _run([_job(0, 0.0, 500.0), _job(1, 0.0, 20.0)])
    rec = {r.job_id: r for r in res.records}
    # j0 alone on the GPU from its start: profiled exactly one window later
    assert rec["j0"].profiled_s == pytest.approx(rec["j0"].first_start_s + 60.0)
    # a job that is gone before a full window never gets a profile
    short, _ = _run([_job(1, 0.0, 20.0)])
    assert short.records[0].profiled_s is None
    assert short.metrics["unknown_jobs_profiled"] == 0
    # with a window longer than j0's run it is never profiled either
    never, _ = _run([_job(0, 0.0, 500.0)], window=10_000.0)
    assert never.records[0].profiled_s is None
    assert res.metrics["unknown_bound_violation_jobs"] == 0


def test_simulator_profile_is_what_the_backend_measures_not_the_truth(monkeypatch):
    import elastico.sim.simulator as S
    from elastico.sim.utilisation import UtilisationMeter

    seen = []
    orig = S._measure_solo

    def spy(meter, job, config, nodes, window_s):
        out = orig(meter, job, config, nodes, window_s)
        seen.append((job, config, window_s, out))
        return out
    monkeypatch.setattr(S, "_measure_solo", spy)
    res, pol = _run([_job(0, 0.0, 500.0)])
    assert len(seen) == 1
    job, config, window, (busy, dram) = seen[0]
    assert not pol.catalog.is_unknown("j0", config)   # known on the slot it was profiled on
    # the activity model's kernel fraction over a 60 s window starting mid-step: within one
    # step's kernel time of the mean (a window holds whole steps plus at most one partial)
    p = UtilisationMeter([Node("n0", "V100M16", 1, 16.0, 32.0, 128.0)]).profile(job, config, 1)
    assert abs(busy - p.kernel) <= p.step_s / window + 1e-12
    assert abs(dram - p.dram_active()) <= p.dram_level * p.step_s / window + 1e-12


def test_assume_profiled_is_todays_behaviour():
    nodes = [Node("n0", "V100M16", 1, 16.0, 32.0, 128.0)]
    jobs = [_job(0, 0.0, 500.0), _job(1, 10.0, 300.0)]
    out = []
    for unknown in (False, True):
        env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
        pol = make_policy("elastico", env)
        out.append(simulate(nodes, jobs, pol, unknown_profiles=unknown,
                            activity=lambda j, c: pol.catalog.base_profile(j, c).gpu_activity))
    assert "unknown_run_s" not in out[0].metrics and "unknown_run_s" in out[1].metrics


def test_lookup_profiles_over_grpc_and_the_placer_client(tmp_path):
    grpc = pytest.importorskip("grpc")
    from elastico.placer.rpc.remote import RemoteSlowdownModel
    from elastico.predictor.server import build_server
    from elastico.predictor.service import ModelStore, PredictorCore
    from elastico.v1 import predictor_pb2, predictor_pb2_grpc

    core = PredictorCore(ModelStore(tmp_path), use_bundled=False)
    core.profiles.report([_stored()])
    server, port = build_server("127.0.0.1:0", core=core)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            remote = RemoteSlowdownModel(ch, timeout_s=5)
            assert remote.known_jobs(["ns/Job/a", "ns/Job/b"]) == {"ns/Job/a"}
            stub = predictor_pb2_grpc.PredictorServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                stub.LookupProfiles(predictor_pb2.LookupProfilesRequest(), timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "job_keys" in e.value.details()
    finally:
        server.stop(None)
    # unreachable predictor: None (the loop keeps those jobs unknown)
    with grpc.insecure_channel("127.0.0.1:1") as ch:
        assert RemoteSlowdownModel(ch, timeout_s=0.5).known_jobs(["x"]) is None


def test_evaluate_starts_jobs_unknown_like_simulate_unless_assume_profiled():
    import argparse

    from elastico.cli import evaluate as cli_eval
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    # the flag: parsed into the settings every run shares (default: jobs arrive unknown)
    ap = argparse.ArgumentParser()
    cli_eval.register(ap.add_subparsers())
    base = ["evaluate", "--gpus", "8", "--clusters", "trace", "--seeds", "0"]
    assert cli_eval.parse(ap.parse_args(base))[4].assume_profiled is False
    assert cli_eval.parse(ap.parse_args(base + ["--assume-profiled"]))[4].assume_profiled is True
    # the runs: the simulator's one code path, unknown jobs profiled after the window by default
    spec = load_cluster("trace")
    runs = {flag: run_one(Task(spec, 8, "elastico", 0,
                               Settings(jobs_per_gpu=2.0, assume_profiled=flag))).run
            for flag in (False, True)}
    assert runs[False]["assume_profiled"] is False
    assert runs[False]["unknown_jobs_profiled"] >= 1 and runs[False]["unknown_run_s"] > 0
    assert "unknown_jobs_profiled" not in runs[True] and runs[True]["assume_profiled"] is True
