"""The kubelet device plugin, driven the way kubelet drives it: a fake kubelet serves
``v1beta1.Registration`` on a unix socket in a temporary device-plugin directory, the plugin
registers there, and the test connects to the plugin's own socket as kubelet does
(ListAndWatch, GetPreferredAllocation, Allocate).  Pods come from the in-memory NodeApi."""

from __future__ import annotations

import dataclasses

import queue
import shutil
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from elastico.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
from elastico.nodeagent.allocation import PodInfo
from elastico.nodeagent.kube.deviceplugin import DevicePlugin, DevicePluginConfig, DevicePluginServicer
from elastico.nodeagent.inventory import HealthWatcher
from elastico.nodeagent.kubeapi import FakeNodeApi

NODE = "gpu-node-1"
TIMEOUT = 10


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    """kubelet's Registration service on ``<dir>/kubelet.sock``; every request lands in
    ``requests``."""

    def __init__(self, sock: Path):
        self.requests: queue.Queue = queue.Queue()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        assert self.server.add_insecure_port(f"unix://{sock}")
        self.server.start()

    def Register(self, request, context):
        self.requests.put(request)
        return api_pb2.Empty()

    def stop(self):
        self.server.stop(0).wait()


def gpus():
    return [GpuInfo(0, "GPU-aaaa", "A100-40GB", 40.0),
            GpuInfo(1, "GPU-bbbb", "A100-40GB", 40.0),
            GpuInfo(2, "GPU-cccc", "A100-40GB", 40.0, mig_mode=True)]


def pod(name, uid, annotations, *, node=NODE, scheduler="elastico", containers=("main",)):
    return PodInfo("team-a", name, uid, node, scheduler, annotations, tuple(containers))


DECIDED = {"elastico.io/round-id": "r-17", "elastico.io/configuration": "mps-30"}


@pytest.fixture
def env():
    d = Path(tempfile.mkdtemp(prefix="edp", dir="/tmp"))  # unix socket paths must stay short
    kubelet = FakeKubelet(d / "kubelet.sock")
    backend = SimulatedGpuBackend(gpus())
    api = FakeNodeApi()
    cfg = DevicePluginConfig(node_name=NODE, socket_dir=str(d), devices=8,
                             mps_pipe_dir="/run/nvidia-mps", mps_log_dir="/var/log/nvidia-mps",
                             watch_s=0.1)
    servicer = DevicePluginServicer(backend, api, cfg, exists=lambda p: True)
    plugin = DevicePlugin(servicer)
    plugin.start()
    ch = grpc.insecure_channel(f"unix://{d / cfg.endpoint}")
    stub = api_pb2_grpc.DevicePluginStub(ch)
    box = type("Env", (), dict(dir=d, kubelet=kubelet, backend=backend, api=api, cfg=cfg,
                               plugin=plugin, stub=stub, servicer=servicer))
    yield box
    ch.close()
    plugin.stop(0)
    box.kubelet.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_register_reaches_kubelet_with_resource_and_socket(env):
    req = env.kubelet.requests.get(timeout=TIMEOUT)
    assert (req.version, req.endpoint, req.resource_name) == ("v1beta1", "elastico-gpu.sock", "elastico.io/gpu")
    assert req.options.get_preferred_allocation_available and not req.options.pre_start_required
    opts = env.stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=TIMEOUT)
    assert opts.get_preferred_allocation_available


def test_the_plugin_socket_is_a_shared_server_without_a_plaintext_warning(env, caplog):
    """Built by elastico.runtime.grpc_server.serve_one like every service: health checking answers
    for the plugin's service, and a unix socket (only this host reaches it) is not warned
    about as plaintext reachable from other hosts."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from elastico.nodeagent.kube.deviceplugin import SERVICE_NAME

    assert SERVICE_NAME == "v1beta1.DevicePlugin"
    with grpc.insecure_channel(f"unix://{env.plugin.socket}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=TIMEOUT)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    with caplog.at_level("WARNING", logger="elastico.runtime.grpc_server"):
        env.plugin._restart()  # serves the socket again, as after a kubelet restart
    assert not [r for r in caplog.records if "PLAINTEXT" in r.getMessage()]


def test_list_and_watch_streams_devices_then_a_health_change(env):
    watcher = HealthWatcher(env.backend, poll_s=0.1)
    watcher.subscribe(env.servicer.update)
    watcher.start()
    try:
        stream = env.stub.ListAndWatch(api_pb2.Empty(), timeout=TIMEOUT)
        first = next(stream)
        assert [d.ID for d in first.devices] == [f"elastico-gpu-{k}" for k in range(8)]
        assert {d.health for d in first.devices} == {"Healthy"}
        env.backend.set_health(1, False)  # an XID on GPU 1
        second = next(stream)
        # 2 of 3 GPUs healthy -> floor(8 * 2 / 3) = 5 healthy handles
        assert [d.health for d in second.devices] == ["Healthy"] * 5 + ["Unhealthy"] * 3
        env.backend.set_health(1, True)
        assert {d.health for d in next(stream).devices} == {"Healthy"}
        stream.cancel()
    finally:
        watcher.stop()


def test_preferred_allocation_keeps_required_then_lowest(env):
    r = env.stub.GetPreferredAllocation(api_pb2.PreferredAllocationRequest(container_requests=[
        api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=["elastico-gpu-5", "elastico-gpu-2", "elastico-gpu-7"],
            must_include_deviceIDs=["elastico-gpu-7"], allocation_size=2)]), timeout=TIMEOUT)
    assert list(r.container_responses[0].deviceIDs) == ["elastico-gpu-7", "elastico-gpu-2"]


def allocate(env, n=1):
    return env.stub.Allocate(api_pb2.AllocateRequest(container_requests=[
        api_pb2.ContainerAllocateRequest(devices_ids=[f"elastico-gpu-{k}" for k in range(n)])]),
        timeout=TIMEOUT)


def test_allocate_mps_pod_gets_limits_pipe_dir_and_devices(env):
    env.api.add_pod(pod("done", "uid-0", {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa",
                                          "elastico.io/allocated": "uid-0/main"}))
    env.api.add_pod(pod("other-node", "uid-9", {**DECIDED, "elastico.io/gpu-uuids": "GPU-x"}, node="n2"))
    env.api.add_pod(pod("default-sched", "uid-8", {}, scheduler="default-scheduler"))
    env.api.add_pod(pod("train", "uid-1", {
        **DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa,GPU-bbbb",
        "elastico.io/mps-active-thread-percentage": "30",
        "elastico.io/mps-pinned-device-mem-limit-gib": "16",
        "elastico.io/predicted-slowdown": "1.12"}))
    c = allocate(env).container_responses[0]
    assert dict(c.envs) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=16G,1=16G",
        "CUDA_MPS_PIPE_DIRECTORY": "/run/nvidia-mps",
        "CUDA_MPS_LOG_DIRECTORY": "/var/log/nvidia-mps",
        "ELASTICO_ROUND_ID": "r-17", "ELASTICO_CONFIGURATION": "mps-30",
        # the booked memory per GPU (the pinned limit) and its part of the 40 GiB GPU
        "ELASTICO_GPU_MEMORY_GIB": "16", "ELASTICO_GPU_MEMORY_FRACTION": "0.4"}
    assert [(m.container_path, m.host_path) for m in c.mounts] == [
        ("/run/nvidia-mps", "/run/nvidia-mps"), ("/var/log/nvidia-mps", "/var/log/nvidia-mps")]
    assert [d.host_path for d in c.devices] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1"]
    assert env.api.pod("team-a", "train").annotations["elastico.io/allocated"] == "uid-1/main"
    # acknowledged now: the next Allocate finds no pod waiting
    with pytest.raises(grpc.RpcError) as e:
        allocate(env)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "found 0: none" in e.value.details()


def test_allocate_mig_pod_creates_the_instance_and_names_its_uuid(env):
    env.api.add_pod(pod("infer", "uid-2", {
        **DECIDED, "elastico.io/gpu-uuids": "GPU-cccc",
        "elastico.io/mig-profile": "3g.20gb", "elastico.io/mig-start-slot": "4"}))
    c = allocate(env).container_responses[0]
    [inst] = env.backend.mig_devices(2)
    assert (inst.profile, inst.start) == ("3g.20gb", 4)
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == inst.uuid and inst.uuid.startswith("MIG-")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in c.envs and not c.mounts
    assert [d.host_path for d in c.devices][-1] == "/dev/nvidia2"


def test_allocate_whole_gpu_pod(env):
    env.api.add_pod(pod("big", "uid-3", {**DECIDED, "elastico.io/gpu-uuids": "GPU-bbbb"}))
    c = allocate(env).container_responses[0]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-bbbb"
    assert not any(k.startswith("CUDA_MPS") for k in c.envs)


# ---- MIG lending: the booking needs the other MIG mode; an idle GPU follows it

def test_without_follow_mig_mode_a_booking_in_the_other_mode_is_refused(env):
    # the default: the GPU's mode is the operator's; a whole-GPU booking on a MIG GPU is wrong
    env.api.add_pod(pod("big", "uid-3", {**DECIDED, "elastico.io/gpu-uuids": "GPU-cccc"}))
    with pytest.raises(grpc.RpcError) as e:
        allocate(env)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not in MIG mode" in e.value.details()
    assert env.backend.list_gpus()[2].mig_mode


def test_a_whole_gpu_booking_on_an_idle_mig_gpu_switches_it_to_normal_mode(env):
    # GPU 2 is in MIG mode with one idle instance; the placer lent the node and booked it whole
    env.servicer.cfg = dataclasses.replace(env.servicer.cfg, follow_mig_mode=True)
    env.backend.create_mig_instance(2, "1g.5gb", 6)
    told = []
    env.servicer.on_mode_change = lambda: told.append(1)
    env.api.add_pod(pod("big", "uid-3", {**DECIDED, "elastico.io/gpu-uuids": "GPU-cccc"}))
    c = allocate(env).container_responses[0]
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-cccc"
    assert not env.backend.list_gpus()[2].mig_mode and env.backend.mig_devices(2) == []
    assert told == [1]


def test_a_mig_booking_on_an_idle_normal_gpu_switches_it_to_mig_mode(env):
    # the node came home: a MIG instance booked on GPU 1 (normal mode, idle)
    env.servicer.cfg = dataclasses.replace(env.servicer.cfg, follow_mig_mode=True)
    env.api.add_pod(pod("infer", "uid-2", {
        **DECIDED, "elastico.io/gpu-uuids": "GPU-bbbb",
        "elastico.io/mig-profile": "3g.20gb", "elastico.io/mig-start-slot": "4"}))
    c = allocate(env).container_responses[0]
    [inst] = env.backend.mig_devices(1)
    assert env.backend.list_gpus()[1].mig_mode and (inst.profile, inst.start) == ("3g.20gb", 4)
    assert c.envs["NVIDIA_VISIBLE_DEVICES"] == inst.uuid


def test_a_busy_gpu_keeps_its_mode_and_the_pod_is_not_allocated(env):
    from elastico.perf.activity import ActivityProfile

    env.servicer.cfg = dataclasses.replace(env.servicer.cfg, follow_mig_mode=True)
    env.backend.run_process(1, 777, ActivityProfile(level=0.5, dram_level=0.2, kernel=0.5,
                                                    sync=0.0), mem_gib=1.0)
    env.api.add_pod(pod("infer", "uid-2", {
        **DECIDED, "elastico.io/gpu-uuids": "GPU-bbbb",
        "elastico.io/mig-profile": "3g.20gb", "elastico.io/mig-start-slot": "4"}))
    with pytest.raises(grpc.RpcError) as e:
        allocate(env)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "team-a/infer" in e.value.details() and "pids [777]" in e.value.details()
    assert not env.backend.list_gpus()[1].mig_mode
    assert "elastico.io/allocated" not in env.api.pod("team-a", "infer").annotations


def test_allocate_tells_the_activity_sampler_only_when_it_succeeds(env):
    calls = []
    env.servicer.on_allocate = lambda: calls.append(1)
    for name, uid in (("a", "uid-a"), ("b", "uid-b")):
        env.api.add_pod(pod(name, uid, {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa"}))
    with pytest.raises(grpc.RpcError):
        allocate(env)                       # two candidates: refused, nothing allocated
    assert calls == []
    del env.api.pods[("team-a", "b")]
    allocate(env)
    assert calls == [1]


def test_allocate_refuses_two_candidates_and_names_both(env):
    for name, uid in (("a", "uid-a"), ("b", "uid-b")):
        env.api.add_pod(pod(name, uid, {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa"}))
    with pytest.raises(grpc.RpcError) as e:
        allocate(env)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "found 2: team-a/a (uid uid-a), team-a/b (uid uid-b)" in e.value.details()
    assert all("elastico.io/allocated" not in p.annotations for p in env.api.pods.values())


def test_allocate_malformed_decision_is_invalid_argument_and_unacknowledged(env):
    env.api.add_pod(pod("bad", "uid-4", {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa",
                                         "elastico.io/mps-active-thread-percentage": "130",
                                         "elastico.io/mps-pinned-device-mem-limit-gib": "4"}))
    with pytest.raises(grpc.RpcError) as e:
        allocate(env)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "elastico.io/mps-active-thread-percentage: '130'" in e.value.details()
    assert "elastico.io/allocated" not in env.api.pod("team-a", "bad").annotations


def test_reregisters_when_kubelet_restarts(env):
    assert env.kubelet.requests.get(timeout=TIMEOUT).resource_name == "elastico.io/gpu"
    env.kubelet.stop()
    # kubelet on restart removes every socket of the directory, then serves a new kubelet.sock
    for p in env.dir.iterdir():
        p.unlink()
    time.sleep(0.3)
    env.kubelet = FakeKubelet(env.dir / "kubelet.sock")
    again = env.kubelet.requests.get(timeout=TIMEOUT)
    assert again.endpoint == "elastico-gpu.sock"
    deadline = time.monotonic() + TIMEOUT
    while not (env.dir / "elastico-gpu.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    ch = grpc.insecure_channel(f"unix://{env.dir / 'elastico-gpu.sock'}")
    first = next(api_pb2_grpc.DevicePluginStub(ch).ListAndWatch(api_pb2.Empty(), timeout=TIMEOUT))
    assert len(first.devices) == 8
    ch.close()
    assert env.plugin.registrations >= 2
