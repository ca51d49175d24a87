"""NodeAgentService over real gRPC on a loopback port, with the simulated backend: telemetry,
node plans (valid, and each invalid field -> INVALID_ARGUMENT naming it with state unchanged),
health, reflection, and the backend chosen by the environment (NVML without a driver fails
with the reason, never a traceback)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from elastico.nodeagent import BackendUnavailable, GpuInfo, SimulatedGpuBackend
from elastico.nodeagent import server as na_server
from elastico.v1 import nodeagent_pb2 as pb
from elastico.v1 import nodeagent_pb2_grpc

TIMEOUT = 10


def backend():
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-0", "A100-40GB", 40.0),
                             GpuInfo(1, "GPU-1", "A100-40GB", 40.0, mig_mode=True)])
    b.set_telemetry(0, utilization_gpu_percent=73.0, utilization_memory_percent=41.0,
                    memory_used_gib=12.5, pcie_rx_gbs=3.25)
    return b


@pytest.fixture
def svc():
    b = backend()
    server, port = na_server.build_server("127.0.0.1:0", backend=b, node_name="node-7")
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield type("Svc", (), dict(backend=b, channel=ch, stub=nodeagent_pb2_grpc.NodeAgentServiceStub(ch)))
    ch.close()
    server.stop(0).wait()


def err(fn, req):
    with pytest.raises(grpc.RpcError) as e:
        fn(req, timeout=TIMEOUT)
    return e.value


def test_get_telemetry_converts_units(svc):
    r = svc.stub.GetTelemetry(pb.GetTelemetryRequest(), timeout=TIMEOUT)
    assert r.node == "node-7" and [g.index for g in r.gpus] == [0, 1]
    g = r.gpus[0]
    # percent -> fraction: 73 % -> 0.73, 41 % -> 0.41
    assert (g.uuid, g.sm_activity, g.dram_activity, g.memory_used_gib, g.pcie_rx_gbs) == (
        "GPU-0", pytest.approx(0.73), pytest.approx(0.41), 12.5, 3.25)
    assert g.mig_model == "A100-40GB" and g.healthy and not g.mig_mode
    assert r.gpus[1].mig_mode and list(r.gpus[1].mig_instances) == []


def plan(**kw):
    return pb.ApplyNodePlanRequest(**kw)


def geometry(index, *pairs):
    return pb.MigGeometry(gpu_index=index, instances=[pb.MigInstanceSpec(profile=p, start_slot=s)
                                                      for p, s in pairs])


def test_apply_node_plan_books_mps_and_builds_mig_in_planner_order(svc):
    svc.backend.create_mig_instance(1, "7g.40gb", 0)  # idle; the target replaces it
    r = svc.stub.ApplyNodePlan(plan(
        mps_limits=[pb.MpsLimit(client_id="uid-1/main", gpu_index=0, active_thread_percentage=30,
                                pinned_mem_limit_gib=8)],
        mig_geometries=[geometry(1, ("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6))]), timeout=TIMEOUT)
    # destroy the 7g (CI then GI), then create GI+CI by start -- elastico.mig_plan order
    assert [(s.op, s.profile, s.start_slot) for s in r.mig_steps] == [
        ("destroy_ci", "7g.40gb", 0), ("destroy_gi", "7g.40gb", 0),
        ("create_gi", "4g.20gb", 0), ("create_ci", "4g.20gb", 0),
        ("create_gi", "2g.10gb", 4), ("create_ci", "2g.10gb", 4),
        ("create_gi", "1g.5gb", 6), ("create_ci", "1g.5gb", 6)]
    assert [(d.profile, d.start) for d in svc.backend.mig_devices(1)] == [
        ("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]
    assert list(r.mps_clients) == ["uid-1/main"]
    assert svc.backend.mps_env("uid-1/main")["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8G"
    t = svc.stub.GetTelemetry(pb.GetTelemetryRequest(), timeout=TIMEOUT)
    assert [(m.profile, m.start_slot) for m in t.gpus[1].mig_instances] == [
        ("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]


GOOD_MPS = dict(client_id="c", gpu_index=0, active_thread_percentage=50, pinned_mem_limit_gib=4)
BAD = [
    (dict(mps_limits=[pb.MpsLimit(**{**GOOD_MPS, "active_thread_percentage": 0})]),
     "mps_limits[0].active_thread_percentage: 0.0"),
    (dict(mps_limits=[pb.MpsLimit(**{**GOOD_MPS, "active_thread_percentage": float("nan")})]),
     "mps_limits[0].active_thread_percentage: nan"),
    (dict(mps_limits=[pb.MpsLimit(**GOOD_MPS), pb.MpsLimit(**{**GOOD_MPS, "client_id": "d", "pinned_mem_limit_gib": 41})]),
     "mps_limits[1].pinned_mem_limit_gib: 41.0"),
    (dict(mps_limits=[pb.MpsLimit(**{**GOOD_MPS, "gpu_index": 1})]),
     "mps_limits[0].gpu_index: 1"),  # GPU 1 is in MIG mode
    (dict(mps_limits=[pb.MpsLimit(**{**GOOD_MPS, "client_id": ""})]), "mps_limits[0].client_id: ''"),
    (dict(mps_limits=[pb.MpsLimit(**GOOD_MPS), pb.MpsLimit(**{**GOOD_MPS, "gpu_index": 0})]),
     "mps_limits[1].gpu_index: 0"),
    (dict(mig_geometries=[geometry(0, ("1g.5gb", 0))]), "mig_geometries[0].gpu_index: 0"),
    (dict(mig_geometries=[geometry(7, ("1g.5gb", 0))]), "mig_geometries[0].gpu_index: 7"),
    (dict(mig_geometries=[geometry(1, ("3g.20gb", 2))]), "mig_geometries[0].instances"),
    (dict(mig_geometries=[geometry(1, ("4g.20gb", 0), ("4g.20gb", 0))]), "mig_geometries[0].instances"),
    (dict(mig_geometries=[geometry(1, ("9g.99gb", 0))]), "mig_geometries[0].instances"),
]


@pytest.mark.parametrize("fields,message", BAD)
def test_invalid_plan_names_the_field_and_changes_nothing(svc, fields, message):
    svc.backend.create_mig_instance(1, "1g.5gb", 6)
    before = (svc.backend.mig_devices(1), svc.backend._mps.clients())
    # a valid MPS entry before the bad one must not be booked either
    req = plan(**fields)
    e = err(svc.stub.ApplyNodePlan, req)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in e.details()
    assert (svc.backend.mig_devices(1), svc.backend._mps.clients()) == before


def test_plan_that_would_destroy_a_busy_instance_is_refused(svc):
    svc.backend.create_mig_instance(1, "3g.20gb", 4)
    svc.backend.set_mig_busy(1, 4, True)
    e = err(svc.stub.ApplyNodePlan, plan(mps_limits=[pb.MpsLimit(**GOOD_MPS)],
                                         mig_geometries=[geometry(1, ("7g.40gb", 0))]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "busy 3g.20gb at 4" in e.details()
    assert [(d.profile, d.start) for d in svc.backend.mig_devices(1)] == [("3g.20gb", 4)]
    assert svc.backend._mps.clients() == []


# ---- MIG mode changes (MIG lending): only on idle GPUs, validated with the rest of the plan

def test_a_plan_lends_an_idle_mig_gpu_and_takes_it_back(svc):
    # GPU 1 (MIG mode, one idle instance) goes to normal mode: its instance is destroyed first,
    # then the mode changes; then back to MIG mode with a geometry in the same plan
    svc.backend.create_mig_instance(1, "3g.20gb", 4)
    r = svc.stub.ApplyNodePlan(plan(mig_modes=[pb.MigModeChange(gpu_index=1, enabled=False)]),
                               timeout=TIMEOUT)
    assert list(r.mig_mode_changed) == [1]
    assert [(s.op, s.profile, s.start_slot) for s in r.mig_steps] == [
        ("destroy_ci", "3g.20gb", 4), ("destroy_gi", "3g.20gb", 4)]
    t = svc.stub.GetTelemetry(pb.GetTelemetryRequest(), timeout=TIMEOUT)
    assert not t.gpus[1].mig_mode
    # an MPS client may now use GPU 1 -- but not in a plan that puts it back in MIG mode
    e = err(svc.stub.ApplyNodePlan, plan(
        mps_limits=[pb.MpsLimit(**{**GOOD_MPS, "gpu_index": 1})],
        mig_modes=[pb.MigModeChange(gpu_index=1, enabled=True)]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "mps_limits[0].gpu_index: 1" in e.details()
    assert not svc.backend.list_gpus()[1].mig_mode  # nothing changed
    r = svc.stub.ApplyNodePlan(plan(mig_modes=[pb.MigModeChange(gpu_index=1, enabled=True)],
                                    mig_geometries=[geometry(1, ("7g.40gb", 0))]), timeout=TIMEOUT)
    assert list(r.mig_mode_changed) == [1]
    assert [(d.profile, d.start) for d in svc.backend.mig_devices(1)] == [("7g.40gb", 0)]
    # the mode a GPU already has: a no-op, nothing reported
    r = svc.stub.ApplyNodePlan(plan(mig_modes=[pb.MigModeChange(gpu_index=0, enabled=False)]),
                               timeout=TIMEOUT)
    assert list(r.mig_mode_changed) == [] and list(r.mig_steps) == []


def test_a_mig_mode_change_of_a_busy_gpu_is_refused_and_nothing_changes(svc):
    from elastico.perf.activity import ActivityProfile

    svc.backend.run_process(0, 4242, ActivityProfile(level=0.5, dram_level=0.2, kernel=0.5, sync=0.0),
                            mem_gib=2.0)
    e = err(svc.stub.ApplyNodePlan, plan(mig_modes=[pb.MigModeChange(gpu_index=0, enabled=True)],
                                         mps_limits=[pb.MpsLimit(**GOOD_MPS)]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mig_modes[0].gpu_index: 0" in e.details() and "pids [4242]" in e.details()
    assert not svc.backend.list_gpus()[0].mig_mode and svc.backend._mps.clients() == []
    svc.backend.create_mig_instance(1, "1g.5gb", 6)
    svc.backend.set_mig_busy(1, 6, True)
    e = err(svc.stub.ApplyNodePlan, plan(mig_modes=[pb.MigModeChange(gpu_index=1, enabled=False)]))
    assert "mig_modes[0].gpu_index: 1" in e.details() and "busy 1g.5gb at 6" in e.details()
    assert svc.backend.list_gpus()[1].mig_mode and len(svc.backend.mig_devices(1)) == 1


@pytest.mark.parametrize("modes,message", [
    ([(7, True)], "mig_modes[0].gpu_index: 7"),
    ([(1, False), (1, True)], "mig_modes[1].gpu_index: 1 is not allowed (one MIG mode change"),
])
def test_bad_mig_mode_changes_name_the_entry(svc, modes, message):
    e = err(svc.stub.ApplyNodePlan, plan(mig_modes=[pb.MigModeChange(gpu_index=i, enabled=on)
                                                    for i, on in modes]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.details()
    assert svc.backend.list_gpus()[1].mig_mode


def test_mig_mode_on_a_gpu_without_mig_is_refused():
    from elastico.nodeagent.nodeplan import MigModeChange, NodePlan, prepare

    b = SimulatedGpuBackend([GpuInfo(0, "GPU-0", "T4", 16.0)])
    with pytest.raises(Exception) as e:
        prepare(b, NodePlan(modes=(MigModeChange(0, True),)))
    assert "mig_modes[0].gpu_index" in str(e.value) and "T4" in str(e.value)


@pytest.mark.parametrize("service", ["elastico.v1.NodeAgentService", ""])
def test_health_is_serving(svc, service):
    got = health_pb2_grpc.HealthStub(svc.channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
    assert got.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_describes_the_service(svc):
    db = ProtoReflectionDescriptorDatabase(svc.channel)
    assert "elastico.v1.NodeAgentService" in db.get_services()
    fd = db.FindFileContainingSymbol("elastico.v1.NodeAgentService")
    assert {m.name for s in fd.service for m in s.method} == {"GetTelemetry", "ApplyNodePlan"}


def test_build_server_takes_the_simulated_backend_from_the_environment():
    server, port = na_server.build_server(
        "127.0.0.1:0", env={"ELASTICO_GPU_BACKEND": "simulated", "NODE_NAME": "sim-node",
                            "ELASTICO_SIMULATED_GPUS": '[{"model": "H100-80GB", "memory_gib": 79.6}]'})
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            r = nodeagent_pb2_grpc.NodeAgentServiceStub(ch).GetTelemetry(pb.GetTelemetryRequest(), timeout=TIMEOUT)
        assert r.node == "sim-node" and [(g.model, g.mig_model) for g in r.gpus] == [("H100-80GB", "H100-80GB")]
    finally:
        server.stop(0).wait()


def test_build_server_without_a_driver_raises_backend_unavailable(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(BackendUnavailable, match="NVML is not available: pynvml cannot be imported"):
        na_server.build_server("127.0.0.1:0", env={})


@pytest.mark.parametrize("env,field", [
    ({"ELASTICO_GPU_BACKEND": "cuda"}, "ELASTICO_GPU_BACKEND"),
    ({"ELASTICO_GPU_BACKEND": "simulated", "ELASTICO_SIMULATED_GPUS": "{"}, "ELASTICO_SIMULATED_GPUS"),
    ({"ELASTICO_GPU_BACKEND": "simulated", "ELASTICO_SIMULATED_GPUS": "0"}, "simulated_gpus"),
    ({"ELASTICO_GPU_BACKEND": "simulated",
      "ELASTICO_SIMULATED_GPUS": '[{"model": "V100", "memory_gib": 16, "mig_mode": true}]'},
     "simulated_gpus[0].model"),
])
def test_bad_backend_environment_names_the_variable(env, field):
    from elastico.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=f"^{field.replace('[', '.').replace(']', '.')}"):
        na_server.build_server("127.0.0.1:0", env=env)


def test_unknown_keyword_is_refused():
    from elastico.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match="build_server"):
        na_server.build_server("127.0.0.1:0", backend=backend(), colour="red")


def test_nodeagent_command_without_a_driver_exits_2_with_the_reason():
    """The DaemonSet's command on a machine without an NVIDIA driver: one line, status 2."""
    import subprocess
    import sys
    env = {k: v for k, v in __import__("os").environ.items() if k != "ELASTICO_GPU_BACKEND"}
    p = subprocess.run([sys.executable, "-m", "elastico.cli", "nodeagent", "--plaintext", "--no-mps",
                        "--node-name", "n1"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("elastico: error: NVML is not available: ") and "Traceback" not in p.stderr


@pytest.mark.parametrize("model", ["A100", "a100-40gb", "A100-40GB ", "V100", "RTX 4090", ""])
def test_a_simulated_gpu_model_must_be_a_known_name_exactly(model):
    from elastico.errors import InvalidArgument
    with pytest.raises(InvalidArgument) as e:
        SimulatedGpuBackend.from_spec([{"model": model, "memory_gib": 40}])
    assert (e.value.field, e.value.value) == ("simulated_gpus[0].model", model)
    assert "A100-40GB" in e.value.allowed and "V100M16" in e.value.allowed


def test_known_simulated_models_include_nvml_names_and_throughput_models():
    b = SimulatedGpuBackend.from_spec([{"model": "V100M16", "memory_gib": 16},
                                       {"model": "NVIDIA A100-SXM4-40GB", "memory_gib": 39.5},
                                       {"model": "H200", "memory_gib": 139.8}])
    assert [g.model for g in b.list_gpus()] == ["V100M16", "NVIDIA A100-SXM4-40GB", "H200"]


def _nodeagent(*argv, env=None):
    import os
    import subprocess
    import sys
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ELASTICO_")},
           "ELASTICO_GPU_BACKEND": "simulated", **(env or {})}
    return subprocess.run([sys.executable, "-m", "elastico", "nodeagent", "--address",
                           "127.0.0.1:0", "--node-name", "n1", *argv],
                          capture_output=True, text=True, env=env, timeout=60)


def test_nodeagent_without_kubelets_socket_exits_2_naming_the_folder(tmp_path):
    for folder, needle in ((tmp_path / "none", "an existing directory"),
                           (tmp_path, f"{tmp_path / 'kubelet.sock'}")):
        p = _nodeagent("--plaintext", "--socket-dir", str(folder))
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith(f"elastico: error: --socket-dir: '{folder}' is not allowed")
        assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_nodeagent_without_tls_names_the_missing_flags():
    p = _nodeagent()
    assert p.returncode == 2
    assert p.stderr.startswith("elastico: error: --tls-cert and --tls-key: 'missing' is not "
                               "allowed (a certificate and key for NodeAgentService"), p.stderr
    assert "None" not in p.stderr
