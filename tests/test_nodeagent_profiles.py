"""Activity profiles from the node (issue 23, deliverable 1): the backends' activity readings,
solo detection and the sampler, the predictor's profile store, ReportProfile end to end."""

from __future__ import annotations

import json
import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.contract import ALLOCATED, CONFIGURATION, GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT
from elastico.contract import MPS_ACTIVE_THREAD_PERCENTAGE, MPS_PINNED_MEM_LIMIT_GIB, ROUND_ID
from elastico.contract import job_key
from elastico.errors import InvalidArgument, NotFound
from elastico.nodeagent.allocation import PodInfo
from elastico.nodeagent.backend import (
    BackendUnavailable, DcgmProfiling, GpuInfo, NvmlGpuBackend, SimulatedGpuBackend)
from elastico.nodeagent.profiling import (
    ActivitySampler, Placement, catalogue_model, check_sampling, placements_from_pods, solo_units)
from elastico.perf.activity import ActivityProfile, draw_profile
from elastico.predictor.profiles import ProfileStore, StoredProfile

# A job worked by hand: SM level 0.8 while computing, DRAM level 0.4, kernels 60 % of the time
# of which 10 points are the all-reduce (no SM activity).
JOB_A = ActivityProfile(level=0.8, dram_level=0.4, kernel=0.6, sync=0.1)
JOB_B = ActivityProfile(level=0.6, dram_level=0.3, kernel=0.5, sync=0.0)


def backend(n=2, mig=()):
    gpus = [GpuInfo(i, f"GPU-{i}", "A100-40GB", 40.0, True, i in mig) for i in range(n)]
    return SimulatedGpuBackend(gpus)


# ---- the simulated backend's readings against hand-worked values --------------------------------

def test_simulated_solo_job_reads_its_activity_model_values():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0, pcie_rx_gbs=1.5, pcie_tx_gbs=0.25)
    (r,) = b.activity(0)
    # SM activity = level x (kernel - sync) = 0.8 x 0.5; DRAM = 0.4 x 0.5; NVML's per-process SM
    # utilisation = the time a kernel of it runs = 0.6
    assert r.sm_active == pytest.approx(0.40)
    assert r.dram_active == pytest.approx(0.20)
    assert [(p.pid, p.sm_util, p.mem_gib) for p in r.processes] == [(100, pytest.approx(0.6), 5.0)]
    assert (r.pcie_rx_gbs, r.pcie_tx_gbs) == (1.5, 0.25)
    (idle,) = b.activity(1)
    assert idle.processes == () and idle.sm_active == 0.0 and idle.dram_active == 0.0


def test_simulated_mps_share_caps_the_sm_level():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0, mps_share=0.5)
    (r,) = b.activity(0)
    # level min(0.8, 0.5) = 0.5 -> SM 0.5 x 0.5 = 0.25; DRAM scaled alike: 0.4 x 0.5/0.8 x 0.5
    assert r.sm_active == pytest.approx(0.25)
    assert r.dram_active == pytest.approx(0.125)


def test_simulated_two_mps_clients_add_up():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0, mps_share=0.5)
    b.run_process(0, 101, JOB_B, 3.0, mps_share=0.5)
    (r,) = b.activity(0)
    # levels 0.5 + 0.5 <= 1: linear, 0.5 x 0.5 + 0.5 x 0.5 = 0.5 (below P(any computes) 0.75)
    assert r.sm_active == pytest.approx(0.5)
    # DRAM: 0.25 x 0.5 + (0.3 x 0.5/0.6) x 0.5 = 0.25
    assert r.dram_active == pytest.approx(0.25)
    assert r.mem_gib == pytest.approx(8.0) and r.sm_util == pytest.approx(1.0)  # 0.6 + 0.5, capped


def test_simulated_mig_instances_read_apart():
    b = backend(1, mig=(0,))
    b.create_mig_instance(0, "3g.20gb", 0)
    b.create_mig_instance(0, "3g.20gb", 4)
    b.run_process(0, 100, JOB_A, 4.0, mig_start=0)
    readings = b.activity(0)
    assert [(r.mig_start, r.mig_profile) for r in readings] == [(0, "3g.20gb"), (4, "3g.20gb")]
    assert readings[0].sm_active == pytest.approx(0.4) and readings[1].sm_active == 0.0
    assert readings[0].pcie_rx_gbs is None  # a MIG instance shares its GPU's PCIe link
    with pytest.raises(InvalidArgument, match="mig_start"):
        b.run_process(0, 101, JOB_B, 1.0, mig_start=2)


def test_simulated_draw_profile_job():
    """A job drawn by the activity model reads exactly its model values."""
    p = draw_profile("job-17", seed=3)
    b = backend()
    b.run_process(0, 7, p, 2.0)
    (r,) = b.activity(0)
    assert r.sm_active == pytest.approx(p.level * (p.kernel - p.sync))
    assert r.processes[0].sm_util == pytest.approx(p.kernel)


def test_simulated_process_errors():
    b = backend()
    b.run_process(0, 100, JOB_A, 1.0)
    with pytest.raises(InvalidArgument, match="pid"):
        b.run_process(1, 100, JOB_A, 1.0)
    with pytest.raises(InvalidArgument, match="mem_gib"):
        b.run_process(1, 101, JOB_A, -1.0)
    with pytest.raises(NotFound):
        b.end_process(1, 100)
    b.end_process(0, 100)
    assert b.activity(0)[0].processes == ()


# ---- the NVML backend: real calls through a fake pynvml; no driver -> clear failure ------------

class _NvmlError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(samples=None, procs=None, running_fails=False):
    ns = types.SimpleNamespace
    fake = types.ModuleType("pynvml")
    fake.NVML_ERROR_NOT_FOUND = 6
    fake.NVML_PCIE_UTIL_RX_BYTES, fake.NVML_PCIE_UTIL_TX_BYTES = 1, 0
    fake.nvmlInit = lambda: None
    fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 1
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetMigMode = lambda h: (0, 0)
    seen = []

    def util(h, last):
        seen.append(last)
        if samples is None:
            raise _NvmlError(6)  # NVML_ERROR_NOT_FOUND: no sample since `last`
        return [ns(pid=p, timeStamp=t, smUtil=u, memUtil=0) for p, t, u in samples]

    def running(h):
        if running_fails:
            raise _NvmlError(999)
        return [ns(pid=p, usedGpuMemory=m) for p, m in (procs or [])]

    fake.nvmlDeviceGetProcessUtilization = util
    fake.nvmlDeviceGetComputeRunningProcesses = running
    fake.nvmlDeviceGetPcieThroughput = lambda h, c: {1: 2_000_000, 0: 500_000}[c]  # KB/s
    return fake, seen


def test_nvml_activity_reads_processes_pcie_and_no_dcgm(monkeypatch):
    fake, seen = fake_pynvml(samples=[(42, 1000, 60), (42, 2000, 80), (43, 1500, 10)],
                             procs=[(42, 3 * 2**30), (43, None), (44, 2**30)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "DcgmReader", None)  # no DCGM bindings here
    b = NvmlGpuBackend()
    (r,) = b.activity(0)
    by_pid = {p.pid: p for p in r.processes}
    assert by_pid[42].sm_util == pytest.approx(0.70) and by_pid[42].mem_gib == pytest.approx(3.0)
    assert by_pid[43].sm_util == pytest.approx(0.10) and by_pid[43].mem_gib is None
    assert by_pid[44].sm_util == 0.0  # running, no utilisation sample: no kernel ran
    assert (r.pcie_rx_gbs, r.pcie_tx_gbs) == (2.0, 0.5)  # KB/s / 1e6
    assert r.sm_active is None and r.dram_active is None  # unavailable, never invented
    assert "DCGM python bindings not importable" in b._dcgm.reason
    b.activity(0)
    assert seen == [0, 2000]  # the second call asks only for samples after the last seen


def test_nvml_activity_not_found_means_idle_and_failures_name_the_call(monkeypatch):
    fake, _ = fake_pynvml(samples=None, procs=[(42, 2**30)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "DcgmReader", None)
    b = NvmlGpuBackend()
    assert b.activity(0)[0].processes[0].sm_util == 0.0
    with pytest.raises(NotFound):
        b.activity(3)
    fake2, _ = fake_pynvml(running_fails=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake2)
    with pytest.raises(BackendUnavailable, match="nvmlDeviceGetComputeRunningProcesses"):
        NvmlGpuBackend().activity(0)


def test_nvml_activity_without_driver_fails_clearly(monkeypatch):
    fake = types.ModuleType("pynvml")

    def init():
        raise _NvmlError("Driver Not Loaded")

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(BackendUnavailable, match="NVML is not available: nvmlInit failed"):
        NvmlGpuBackend()


def test_dcgm_fields_read_when_the_bindings_import(monkeypatch):
    mod = types.ModuleType("DcgmReader")

    class DcgmReader:
        def __init__(self, fieldIds, updateFrequency):
            assert fieldIds == [1002, 1005] and updateFrequency == 1_000_000

        def GetLatestGpuValuesAsFieldIdDict(self):
            return {0: {1002: 0.42, 1005: 0.17}, 1: {1002: 7.0}}  # GPU 1: an absurd value

    mod.DcgmReader = DcgmReader
    monkeypatch.setitem(sys.modules, "DcgmReader", mod)
    d = DcgmProfiling()
    assert d.available and d.read(0) == (0.42, 0.17)
    assert d.read(1) == (None, None)      # 7.0 is no fraction: refused, not clipped
    assert d.read(0, mig_start=0) == (None, None)


# ---- solo detection and the sampler --------------------------------------------------------------

def pod(name, gpus, *, uid=None, job="", mig=None, mps=None, phase="Running", allocated=True):
    uid = uid or f"uid-{name}"
    ann = {ROUND_ID: "r1", CONFIGURATION: "c", GPU_UUIDS: ",".join(gpus)}
    if mig is not None:
        ann[MIG_PROFILE], ann[MIG_START_SLOT] = mig[0], str(mig[1])
    if mps is not None:
        ann[MPS_ACTIVE_THREAD_PERCENTAGE], ann[MPS_PINNED_MEM_LIMIT_GIB] = str(mps), "10"
    if allocated:
        ann[ALLOCATED] = f"{uid}/main"
    return PodInfo("ns", name, uid, "node-1", "elastico", ann, ("main",), phase=phase, job=job)


def test_placements_and_solo_units():
    pods = [pod("a", ["GPU-0"], job="ns/Job/train-a"), pod("b", ["GPU-1"], mps=50),
            pod("c", ["GPU-1"], mps=50), pod("d", ["GPU-2"], allocated=False),
            pod("e", ["GPU-3"], phase="Succeeded"),
            pod("f", ["GPU-4"], mig=("3g.20gb", 0)), pod("g", ["GPU-4"], mig=("3g.20gb", 4))]
    pl = placements_from_pods(pods)
    assert {p.pod for p in pl} == {"ns/a", "ns/b", "ns/c", "ns/f", "ns/g"}
    solo = solo_units(pl)
    # GPU-1 holds two MPS clients: not solo; the MIG instances of GPU-4 are each their own
    assert set(solo) == {("GPU-0", None), ("GPU-4", 0), ("GPU-4", 4)}
    assert solo[("GPU-0", None)].job_key == "ns/Job/train-a"
    assert solo[("GPU-4", 4)].mechanism == "mig" and solo[("GPU-4", 4)].job_key == "ns/pod/g"


def sampler_for(b, pods, window=3, **kw):
    state = {"pods": list(pods)}
    got = []
    s = ActivitySampler(b, lambda: placements_from_pods(state["pods"]), period_s=1.0,
                        window_s=float(window), node="node-1", on_profile=got.append, **kw)
    return s, state, got


def test_sampler_solo_job_profile_equals_the_model():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0, pcie_rx_gbs=1.5)
    s, _state, got = sampler_for(b, [pod("a", ["GPU-0"], job="ns/Job/a")])
    assert s.sample() == [] and s.sample() == []
    (p,) = s.sample()
    assert got == [p]
    assert (p.job_key, p.gpu_model, p.mechanism, p.samples) == ("ns/Job/a", "A100-40GB", "whole", 3)
    assert p.sm_activity == pytest.approx(0.4) and p.dram_activity == pytest.approx(0.2)
    assert p.process_sm_util == pytest.approx(0.6) and p.mem_gib == 5.0
    assert p.pcie_rx_gbs == 1.5 and p.node == "node-1"


def test_colocated_gpu_yields_no_solo_profile():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0, mps_share=0.5)
    b.run_process(0, 101, JOB_B, 3.0, mps_share=0.5)
    s, _state, got = sampler_for(b, [pod("a", ["GPU-0"], mps=50), pod("b", ["GPU-0"], mps=50)])
    for _ in range(10):
        s.sample()
    assert got == [] and s.buffered == 0


def test_a_neighbour_arriving_mid_window_restarts_it():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0)
    s, state, got = sampler_for(b, [pod("a", ["GPU-0"])])
    s.sample(); s.sample()                      # 2 of 3 solo readings
    state["pods"].append(pod("b", ["GPU-0"]))   # b joins: a is no longer alone
    s.sample()
    assert got == [] and s.buffered == 0
    state["pods"].pop()                         # b leaves: a full new window is needed
    s.sample(); s.sample()
    assert got == []
    s.sample()
    assert len(got) == 1 and got[0].samples == 3


def test_placements_are_reread_every_refresh_and_after_an_allocate():
    b = backend()
    b.run_process(0, 100, JOB_A, 5.0)
    reads = []
    state = {"pods": [pod("a", ["GPU-0"])]}

    def placements():
        reads.append(1)
        return placements_from_pods(state["pods"])

    s = ActivitySampler(b, placements, period_s=1.0, window_s=60.0, refresh_s=10.0)
    for _ in range(25):
        s.sample()
    assert len(reads) == 3            # periods 1, 11, 21
    state["pods"].append(pod("b", ["GPU-0"]))
    s.invalidate()                    # the device plugin allocated b
    s.sample()
    assert len(reads) == 4 and s.buffered == 0   # a's window ended at once
    with pytest.raises(InvalidArgument, match="placements_refresh_s"):
        ActivitySampler(b, placements, refresh_s=-1.0)


def test_sampler_mig_and_mps_configuration_recorded():
    b = backend(2, mig=(1,))
    b.create_mig_instance(1, "3g.20gb", 4)
    b.run_process(0, 100, JOB_A, 5.0, mps_share=0.5)
    b.run_process(1, 101, JOB_B, 4.0, mig_start=4)
    s, _state, got = sampler_for(b, [pod("a", ["GPU-0"], mps=50), pod("m", ["GPU-1"], mig=("3g.20gb", 4))],
                                 window=1)
    out = {p.job_key: p for p in s.sample()}
    assert out["ns/pod/a"].mechanism == "mps" and out["ns/pod/a"].mps_share == 0.5
    assert out["ns/pod/a"].sm_activity == pytest.approx(0.25)
    assert out["ns/pod/m"].mechanism == "mig" and out["ns/pod/m"].mig_profile == "3g.20gb"
    assert out["ns/pod/m"].sm_activity == pytest.approx(0.6 * 0.5)


def test_sampling_config_checked():
    assert check_sampling(1.0, 60.0) == 60
    with pytest.raises(InvalidArgument, match="profile_window_s"):
        check_sampling(2.0, 1.0)
    with pytest.raises(InvalidArgument, match="profile_period_s"):
        check_sampling(0.0, 1.0)
    with pytest.raises(InvalidArgument, match="profile_window_s"):
        check_sampling(0.001, 3600.0)


def test_catalogue_model_names():
    assert catalogue_model(GpuInfo(0, "u", "NVIDIA A100-SXM4-40GB", 39.5)) == "A100-40GB"
    assert catalogue_model(GpuInfo(0, "u", "NVIDIA H100 80GB HBM3", 79.6)) == "H100-80GB"
    assert catalogue_model(GpuInfo(0, "u", "Mystery GPU", 10.0)) == "Mystery GPU"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["alloc", "release", "sample"]),
                          st.integers(0, 3), st.integers(0, 1)), max_size=40))
def test_random_allocate_release_sample_keeps_solo_correct(ops):
    """Reference model: a unit emits a profile for job j exactly when j has been the only pod on
    it for `window` consecutive samples since the last emission or change."""
    window = 2
    b = backend(2)
    for g in range(2):
        for k in range(4):  # one process per (job, GPU) so every GPU always has a process
            b.run_process(g, 1000 * (g + 1) + k, JOB_A, 1.0)
    placed: dict[int, int] = {}  # job -> gpu
    s, state, got = sampler_for(b, [], window=window)
    run: dict[int, tuple[int, int]] = {}  # gpu -> (job alone, consecutive samples)
    expected: list[tuple[str, int]] = []
    for op, job, gpu in ops:
        if op == "alloc" and job not in placed:
            placed[job] = gpu
        elif op == "release":
            placed.pop(job, None)
        elif op == "sample":
            before, want = len(got), len(expected)
            for g in range(2):
                on = [j for j, x in placed.items() if x == g]
                if len(on) == 1:
                    prev = run.get(g)
                    n = prev[1] + 1 if prev and prev[0] == on[0] else 1
                    if n == window:
                        expected.append((f"ns/pod/j{on[0]}", g))
                        n = 0
                    run[g] = (on[0], n)
                else:
                    run.pop(g, None)
            state["pods"] = [pod(f"j{j}", [f"GPU-{g}"]) for j, g in placed.items()]
            s.sample()
            assert s.buffered <= 2 * window  # bounded: at most one window per GPU
            # checked at every sample: a wrong emission is caught where it happens
            assert sorted(p.job_key for p in got[before:]) == sorted(k for k, _ in expected[want:])
    assert sorted(p.job_key for p in got) == sorted(k for k, _ in expected)


def test_job_key_matches_the_placers_group_key():
    from elastico.placer.kube.annotations import job_group

    cases = [({"labels": {"elastico.io/job": "x"}}, [], "ns/label/x"),
             ({}, [{"kind": "Job", "name": "j", "controller": True}], "ns/Job/j"),
             ({}, [{"kind": "A", "name": "a"}, {"kind": "B", "name": "b", "controller": True}], "ns/B/b"),
             ({}, [], "ns/pod/p")]
    for meta, owners, want in cases:
        doc = {"metadata": {"namespace": "ns", "name": "p", **meta, "ownerReferences": owners}}
        got = job_key("ns", "p", meta.get("labels"),
                      [(o["kind"], o["name"], bool(o.get("controller"))) for o in owners])
        assert got == job_group(doc) == want


# ---- the profile store ---------------------------------------------------------------------------

def entry(job="ns/Job/a", gpu="A100-40GB", **kw):
    base = dict(job_key=job, gpu_model=gpu, mechanism="whole", sm_activity=0.4,
                dram_activity=0.2, mem_gib=5.0, pcie_rx_gbs=1.5, pcie_tx_gbs=0.0,
                process_sm_util=0.6, samples=60, period_s=1.0, kind="training", node="n1")
    base.update(kw)
    return base


def test_store_persists_across_restart(tmp_path):
    f = tmp_path / "profiles.json"
    s = ProfileStore(f)
    assert s.report([entry(), entry("ns/Job/b", mechanism="mps", mps_share=0.5)]) == 2
    again = ProfileStore(f)
    assert len(again) == 2
    p = again.get("ns/Job/b", "A100-40GB", "mps", 0.5)
    assert p is not None and p.sm_activity == 0.4 and p.mps_share == 0.5
    jp = p.job_profile()
    assert (jp.sharing, jp.mps_share, jp.gpu_activity, jp.mem_gib) == ("mps", 0.5, 0.4, 5.0)
    # a newer report of the same key replaces it, and that survives a restart too
    again.report([entry(sm_activity=0.7)])
    assert ProfileStore(f).get("ns/Job/a", "A100-40GB").sm_activity == 0.7
    assert len(ProfileStore(f)) == 2


def test_store_evicts_the_least_recently_reported(tmp_path):
    f = tmp_path / "profiles.json"
    s = ProfileStore(f, max_entries=3)
    s.report([entry("j1"), entry("j2"), entry("j3")])
    s.report([entry("j1")])            # j1 re-reported: now the newest; j2 is the oldest
    s.report([entry("j4")])            # full: j2 goes
    assert sorted(p.job_key for p in s.entries()) == ["j1", "j3", "j4"]
    s.report([entry("j5")])            # then j3
    assert [p.job_key for p in ProfileStore(f, max_entries=3).entries()] == ["j1", "j4", "j5"]
    assert s.evicted == 2


@pytest.mark.parametrize("field,value", [("sm_activity", 1.2), ("dram_activity", -0.1),
                                         ("mem_gib", -1.0), ("mem_gib", 1e12),
                                         ("pcie_rx_gbs", float("nan")), ("process_sm_util", 3.0),
                                         ("mechanism", "vgpu"), ("samples", 0)])
def test_store_refuses_absurd_counters_and_keeps_previous(tmp_path, field, value):
    f = tmp_path / "profiles.json"
    s = ProfileStore(f)
    s.report([entry()])
    before = f.read_text()
    with pytest.raises(InvalidArgument) as e:
        s.report([entry("ns/Job/ok"), entry("ns/Job/bad", **{field: value})])
    assert e.value.field == f"profiles[1].{field}"
    assert repr(value) in str(e.value) or str(value) in str(e.value)
    assert f.read_text() == before and [p.job_key for p in s.entries()] == ["ns/Job/a"]


def test_store_refuses_a_corrupt_file(tmp_path):
    f = tmp_path / "profiles.json"
    f.write_text(json.dumps({"format": 1, "seq": 1, "entries": [entry(sm_activity=5.0)]}))
    with pytest.raises(InvalidArgument, match=r"entries\[0\]"):
        ProfileStore(f)
    f.write_text("{not json")
    with pytest.raises(InvalidArgument, match="profiles.json"):
        ProfileStore(f)


def test_predictor_core_moves_a_bad_store_aside(tmp_path):
    from elastico.predictor.service import ModelStore, PredictorCore

    ms = ModelStore(tmp_path)
    ms.profiles_file.write_text("{not json")
    core = PredictorCore(ms, use_bundled=False)
    assert len(core.profiles) == 0 and (tmp_path / "profiles.json.bad").exists()
    core.profiles.report([entry()])
    assert len(PredictorCore(ms, use_bundled=False).profiles) == 1


def test_unknown_gpu_model_keeps_the_key_but_not_the_schema_field():
    p = StoredProfile(**entry(gpu="Mystery GPU", sm_activity=None))
    jp = p.job_profile()
    assert jp.gpu_model == "" and jp.gpu_activity == 0.6  # NVML's process utilisation stands in


# ---- ReportProfile over gRPC, from the sampler's profile -----------------------------------------

def test_report_profile_end_to_end(tmp_path):
    grpc = pytest.importorskip("grpc")
    from elastico.nodeagent.rpc.predictor import ProfileReporter, solo_profile_message
    from elastico.predictor.server import build_server
    from elastico.predictor.service import ModelStore, PredictorCore
    from elastico.v1 import predictor_pb2, predictor_pb2_grpc

    core = PredictorCore(ModelStore(tmp_path), use_bundled=False)
    server, port = build_server("127.0.0.1:0", core=core)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            b = backend()
            b.run_process(0, 100, JOB_A, 5.0)
            reporter = ProfileReporter(ch)
            s, _state, got = sampler_for(b, [pod("a", ["GPU-0"], job="ns/Job/a")], window=2)
            s.on_profile = lambda p: (got.append(p), reporter(p))
            s.sample(); s.sample()
            assert reporter.sent == 1
            stored = ProfileStore(tmp_path / "profiles.json").get("ns/Job/a", "A100-40GB")
            assert stored.sm_activity == pytest.approx(0.4) and stored.samples == 2
            # an absurd counter: INVALID_ARGUMENT naming the field, nothing stored
            bad = solo_profile_message(got[0])
            bad.sm_activity = 1.5
            bad.job_key = "ns/Job/bad"
            stub = predictor_pb2_grpc.PredictorServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                stub.ReportProfile(predictor_pb2.ReportProfileRequest(profiles=[bad]), timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "profiles[0].sm_activity" in e.value.details() and "1.5" in e.value.details()
            assert len(ProfileStore(tmp_path / "profiles.json")) == 1
    finally:
        server.stop(0)


@pytest.mark.parametrize("change,field", [
    (dict(mechanism="mps"), "profiles[0].mps_share"),               # mps without its share
    (dict(mechanism="whole", mps_share=0.5), "profiles[0].mps_share"),
    (dict(mechanism="mig"), "profiles[0].mig_profile"),             # mig without its profile
    (dict(mem_gib=-2.0), "profiles[0].mem_gib"),
    (dict(dram_activity=float("inf")), "profiles[0].dram_activity"),
    (dict(job_key=""), "profiles[0].job_key"),
    (dict(samples=0), "profiles[0].samples"),
    (dict(kind="batch"), "profiles[0].kind"),
])
def test_report_profile_wire_errors_name_the_field(tmp_path, change, field):
    grpc = pytest.importorskip("grpc")
    from elastico.predictor.server import build_server
    from elastico.predictor.service import PredictorCore
    from elastico.v1 import predictor_pb2, predictor_pb2_grpc

    core = PredictorCore(use_bundled=False)
    server, port = build_server("127.0.0.1:0", core=core)
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = predictor_pb2_grpc.PredictorServiceStub(ch)
            good = dict(job_key="ns/Job/a", gpu_model="A100-40GB", mechanism="whole",
                        sm_activity=0.4, samples=60, period_s=1.0, kind="training")
            r = stub.ReportProfile(predictor_pb2.ReportProfileRequest(
                profiles=[predictor_pb2.SoloProfile(**good)]), timeout=5)
            assert (r.accepted, r.stored) == (1, 1)
            bad = predictor_pb2.SoloProfile(**{**good, "job_key": "ns/Job/b", **change})
            with pytest.raises(grpc.RpcError) as e:
                stub.ReportProfile(predictor_pb2.ReportProfileRequest(profiles=[bad]), timeout=5)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert e.value.details().startswith(field), e.value.details()
            assert len(core.profiles) == 1
    finally:
        server.stop(0)
