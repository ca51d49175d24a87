"""Issue 18, classes 5 and 6: GPU memory as each GPU really has it, and every MPS share booked
exactly as it is enforced.

Live path: the kmock API server and the real :class:`SchedulerLoop` (tests/test_kube_loop.py's
fixtures), the device plugin over its unix socket (tests/test_device_plugin.py's fake kubelet),
PlacerService.RunRound and NodeAgentService.ApplyNodePlan over real gRPC.

Hand-worked values (docs/annotations.md "GPU memory", "Shares"):

* a T4 reports 15 GiB through NVML (15360 MiB); a whole-GPU pod books the GPU's whole memory,
  15 GiB, so it fits (the old rule booked 16 GiB per whole GPU and nothing fitted);
* ``gpu-fraction 0.5`` of an A100-80GB (80 GiB) books and pins 0.5 x 80 = 40 GiB, the device
  plugin's ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` is ``0=40G``, its active thread percentage 50;
  ``gpu-fraction 0.25`` of a V100M16 (16 GiB) books 4 GiB and enforces 25 %;
* ``gpu-memory-gib 40`` with ``gpu-fraction 0.25`` on an A100-80GB books and pins 40 GiB (memory
  is not tied to the compute share); 90 GiB is more than any GPU model has (the largest, an
  80 GB A100 or H100, has 80), so the pod is Rejected naming the field and 80;
* a share is enforceable when it is a whole percent: 0.995 (99.5 %), 0.025 (2.5 %) and 0.005
  (0.5 %) are refused; 0.25 is 25 %.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

pytest.importorskip("kmock")

from elastico.deviceplugin.v1beta1 import api_pb2_grpc  # noqa: E402
from elastico.errors import InvalidArgument  # noqa: E402
from elastico.model import (Configuration, Job, JobKind, Node, Request,  # noqa: E402
                            check_mps_percentage, mps_percentage)
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend  # noqa: E402
from elastico.nodeagent import server as na_server  # noqa: E402
from elastico.nodeagent.allocation import PodInfo  # noqa: E402
from elastico.nodeagent.kube.deviceplugin import (DevicePlugin, DevicePluginConfig,  # noqa: E402
                                             DevicePluginServicer)
from elastico.nodeagent.kubeapi import FakeNodeApi  # noqa: E402
from elastico.placer.rpc import wire  # noqa: E402
from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.round import ActiveJob, Status  # noqa: E402
from elastico.placer.server import build_server  # noqa: E402
from elastico.predictor import AnalyticSlowdown  # noqa: E402
from elastico.shapes import SHARES, build_family  # noqa: E402
from elastico.perf.throughput import ThroughputModel  # noqa: E402
from elastico.v1 import nodeagent_pb2, nodeagent_pb2_grpc, placer_pb2, placer_pb2_grpc  # noqa: E402
from test_device_plugin import FakeKubelet, allocate  # noqa: E402
from test_kube_loop import (NS, core, emu, events, make_loop, make_node, make_pod,  # noqa: E402,F401
                            pod, step, uuids)

TM = ThroughputModel.bundled()
TIMEOUT = 10


def booking(core, name) -> A.PodBooking:
    return A.parse_booking(pod(core, name)["metadata"]["annotations"])


def rejected(core, name) -> list[str]:
    return [e["message"] for e in events(core, name) if e["reason"] == "Rejected"]


@pytest.fixture
def plugin_for():
    """``plugin_for(node, model, gib, gpus)``: the device plugin of a node whose simulated GPUs
    carry the UUIDs the node's inventory (``make_node``) names, served on a unix socket to a
    fake kubelet; returns (stub, FakeNodeApi)."""
    made = []

    def build(node, model, gib, gpus):
        d = Path(tempfile.mkdtemp(prefix="elm", dir="/tmp"))  # unix socket paths stay short
        kubelet = FakeKubelet(d / "kubelet.sock")
        backend = SimulatedGpuBackend([GpuInfo(i, u, model, gib)
                                       for i, u in enumerate(uuids(node, gpus))])
        api = FakeNodeApi()
        cfg = DevicePluginConfig(node_name=node, socket_dir=str(d), devices=8, watch_s=0.1)
        plugin = DevicePlugin(DevicePluginServicer(backend, api, cfg, exists=lambda p: True))
        plugin.start()
        ch = grpc.insecure_channel(f"unix://{d / cfg.endpoint}")
        made.append((ch, plugin, kubelet, d))
        return type("Env", (), dict(stub=api_pb2_grpc.DevicePluginStub(ch))), api
    yield build
    for ch, plugin, kubelet, d in made:
        ch.close()
        plugin.stop(0)
        kubelet.stop()
        shutil.rmtree(d, ignore_errors=True)


def allocate_bound_pod(core, name, plugin_for, node, model, gib, gpus) -> dict[str, str]:
    """What kubelet gets from the device plugin for the pod the loop bound to ``node``."""
    p = pod(core, name)
    assert p["spec"]["nodeName"] == node
    env, api = plugin_for(node, model, gib, gpus)
    api.add_pod(PodInfo(NS, name, p["metadata"]["uid"], node, "elastico",
                        p["metadata"]["annotations"], ("main",)))
    return dict(allocate(env).container_responses[0].envs)


# ---------------------------------------------------------------- class 5: GPU memory
def test_a_t4_with_15_gib_hosts_a_whole_gpu_pod_booking_its_whole_memory(core, make_loop):
    make_node(core, "t4", model="T4", gpus=1, mem=15.0)
    make_pod(core, "train", {A.WORKLOAD: "training"})      # gpu-fraction 1: a whole GPU
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/train"], rep.waiting
    b = booking(core, "train")
    assert (b.node, b.gpu_model, len(b.gpu_indices)) == ("t4", "T4", 1)
    # memory follows the GPU: its share of the T4's 15 GiB, all of it for a whole GPU
    assert b.gpu_mem_gib == pytest.approx(15.0 * b.gpu_share)
    if b.gpu_share == 1.0:
        assert A.MPS_PINNED_MEM_LIMIT_GIB not in pod(core, "train")["metadata"]["annotations"]


def test_half_an_a100_80gb_books_and_pins_40_gib(core, make_loop, plugin_for):
    make_node(core, "a80", model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "half", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: "0.5"})
    loop = make_loop()
    assert step(loop, core).bound == [f"{NS}/half"]
    b = booking(core, "half")
    assert (b.gpu_share, b.gpu_mem_gib) == (0.5, 40.0)
    ann = pod(core, "half")["metadata"]["annotations"]
    assert (ann[A.MPS_ACTIVE_THREAD_PERCENTAGE], ann[A.MPS_PINNED_MEM_LIMIT_GIB]) == ("50", "40")
    envs = allocate_bound_pod(core, "half", plugin_for, "a80", "A100-80GB", 80.0, 1)
    assert envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40G"


def test_gpu_memory_gib_40_on_an_a100_80gb_binds_and_is_pinned_as_asked(core, make_loop,
                                                                         plugin_for):
    make_node(core, "a80", model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "llm", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: "0.25",
                           A.GPU_MEMORY_GIB: "40"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/llm"], (rep.rejected, rep.waiting)
    b = booking(core, "llm")
    assert (b.gpu_share, b.gpu_mem_gib) == (0.25, 40.0)      # 40 GiB, not 0.25 x 80
    envs = allocate_bound_pod(core, "llm", plugin_for, "a80", "A100-80GB", 80.0, 1)
    assert (envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) == ("25", "0=40G")


def test_gpu_memory_gib_beyond_every_gpu_model_is_rejected_naming_the_field_and_the_max(
        core, make_loop):
    make_node(core, "a80", model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "huge", {A.GPU_MEMORY_GIB: "190"})   # the catalogue's largest: B200, 180
    make_pod(core, "forty-on-v100", {A.GPU_MEMORY_GIB: "40", A.GPU_MODEL: "V100M32"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [] and set(rep.rejected) == {f"{NS}/huge", f"{NS}/forty-on-v100"}
    [msg] = rejected(core, "huge")
    assert msg.startswith(f"{A.GPU_MEMORY_GIB}: '190' is not allowed")
    assert "at most 180" in msg and "B200" in msg
    # the hint is about memory, never "raise gpu-fraction" (it is already 1 here)
    assert A.GPU_FRACTION not in msg
    [msg] = rejected(core, "forty-on-v100")             # a V100M32 has 32 GiB
    assert "at most 32" in msg and "V100M32" in msg


def test_memory_no_node_has_is_a_waiting_reason_that_names_the_memory(core, make_loop):
    make_node(core, "v100", model="V100M16", gpus=4, mem=16.0)
    make_pod(core, "big", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: "0.5",
                           A.GPU_MEMORY_GIB: "40"})
    make_pod(core, "big-elastic", {A.GPU_FRACTION: "0.5", A.GPU_MEMORY_GIB: "40"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == []
    for name in ("big", "big-elastic"):
        why = rep.waiting[f"{NS}/{name}"]
        assert "40 GiB" in why and "16 GiB" in why and A.GPU_FRACTION not in why, why


def test_a_gang_asking_more_memory_than_its_gpus_have_waits_and_the_round_goes_on(core,
                                                                                   make_loop):
    make_node(core, "v100", model="V100M16", gpus=4, mem=16.0)
    for i in range(2):
        make_pod(core, f"g{i}", {A.GANG_SIZE: "2", A.GPU_MEMORY_GIB: "40"},
                 labels={A.JOB_LABEL: "big"})
    make_pod(core, "small", {A.SHAPE_FAMILY: "fixed"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/small"]                 # the round went on for the others
    assert rep.decisions[f"{NS}/label/big"].status is Status.UNPLACEABLE
    for i in range(2):
        assert "40 GiB" in rep.waiting[f"{NS}/g{i}"]


# ---------------------------------------------------------------- class 6: booked = enforced
def test_shape_family_fixed_keeps_its_fraction(core, make_loop):
    make_node(core, "v100", model="V100M16", gpus=4, mem=16.0)
    make_pod(core, "fx", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: "0.5"})
    loop = make_loop()
    assert step(loop, core).bound == [f"{NS}/fx"]
    b = booking(core, "fx")
    assert (b.config_name, len(b.gpu_indices), b.gpu_share, b.gpu_mem_gib) == (
        "V100M16 x1 @0.50", 1, 0.5, 8.0)
    ann = pod(core, "fx")["metadata"]["annotations"]
    assert (ann[A.MPS_ACTIVE_THREAD_PERCENTAGE], ann[A.MPS_PINNED_MEM_LIMIT_GIB]) == ("50", "8")


def test_a_quarter_is_booked_and_enforced_as_25_percent(core, make_loop, plugin_for):
    make_node(core, "v100", model="V100M16", gpus=2, mem=16.0)
    make_pod(core, "q", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: "0.25"})
    loop = make_loop()
    assert step(loop, core).bound == [f"{NS}/q"]
    b = booking(core, "q")
    assert (b.gpu_share, b.gpu_mem_gib) == (0.25, 4.0)
    envs = allocate_bound_pod(core, "q", plugin_for, "v100", "V100M16", 16.0, 2)
    assert (envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) == ("25", "0=4G")


UNENFORCEABLE = ["0.995", "0.025", "0.005"]


@pytest.mark.parametrize("fraction", UNENFORCEABLE)
def test_an_unenforceable_gpu_fraction_is_rejected_naming_field_value_and_rule(
        core, make_loop, fraction):
    make_node(core, "v100", model="V100M16", gpus=1, mem=16.0)
    make_pod(core, "odd", {A.SHAPE_FAMILY: "fixed", A.GPU_FRACTION: fraction})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [] and f"{NS}/odd" in rep.rejected
    [msg] = rejected(core, "odd")
    assert msg.startswith(f"{A.GPU_FRACTION}: '{fraction}' is not allowed")
    assert "multiple of 0.01 in [0.01, 1]" in msg


@pytest.fixture
def placer():
    server, port = build_server(slowdown=AnalyticSlowdown())
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield placer_pb2_grpc.PlacerServiceStub(ch)
    ch.close()
    server.stop(0)


def _round(share: float) -> placer_pb2.RunRoundRequest:
    job = Job("j0", JobKind.TRAINING, 0.0, 3600.0, Request(1, share, 2.0, 8.0),
              job_type="ResNet-50 (batch size 64)")
    return placer_pb2.RunRoundRequest(
        now=1.0, nodes=[wire.node_to_message(Node("n0", "V100M16", 2, 16.0, 32.0, 128.0))],
        jobs=[wire.job_to_message(ActiveJob(job))], policy="elastico")


@pytest.mark.parametrize("share", [0.995, 0.025, 0.005])
def test_run_round_refuses_an_unenforceable_share(placer, share):
    with pytest.raises(grpc.RpcError) as e:
        placer.RunRound(_round(share), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(f"jobs[0].request.gpu_share: {share!r} is not allowed")
    assert "multiple of 0.01 in [0.01, 1]" in e.value.details()


@pytest.mark.parametrize("share", [0.995, 0.025])
def test_place_refuses_a_configuration_whose_share_mps_cannot_enforce(placer, share):
    req = _round(0.25)
    item = placer_pb2.PlaceItem(job=req.jobs[0], configuration=wire.config_to_message(
        Configuration(f"V100M16 x1 @{share}", "V100M16", 1, share, 8.0, 2.0, 8.0, 1.0)))
    with pytest.raises(grpc.RpcError) as e:
        placer.Place(placer_pb2.PlaceRequest(nodes=req.nodes, items=[item]), timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(
        f"items[0].configuration.gpu_share: {share!r} is not allowed")


@pytest.fixture
def agent():
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-0", "A100-80GB", 80.0)])
    server, port = na_server.build_server("127.0.0.1:0", backend=b, node_name="node-1")
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield b, nodeagent_pb2_grpc.NodeAgentServiceStub(ch)
    ch.close()
    server.stop(0).wait()


def _plan(pct: float) -> nodeagent_pb2.ApplyNodePlanRequest:
    return nodeagent_pb2.ApplyNodePlanRequest(mps_limits=[nodeagent_pb2.MpsLimit(
        client_id="uid-1/main", gpu_index=0, active_thread_percentage=pct,
        pinned_mem_limit_gib=40)])


@pytest.mark.parametrize("pct", [99.1, 2.5, 0.5])
def test_apply_node_plan_refuses_a_percentage_mps_cannot_enforce(agent, pct):
    backend, stub = agent
    with pytest.raises(grpc.RpcError) as e:
        stub.ApplyNodePlan(_plan(pct), timeout=TIMEOUT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(
        f"mps_limits[0].active_thread_percentage: {pct!r} is not allowed")
    assert "integer percentage in 1..100" in e.value.details()
    with pytest.raises(Exception):                        # nothing was booked
        backend.mps_limits("uid-1/main")


def test_apply_node_plan_passes_a_whole_percentage_as_an_integer(agent):
    backend, stub = agent
    stub.ApplyNodePlan(_plan(25.0), timeout=TIMEOUT)
    assert backend.mps_env("uid-1/main") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                                             "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"}


# ---------------------------------------------------------------- the rule and the shapes
def test_mps_percentage_is_the_one_rule():
    assert [mps_percentage(s) for s in (0.01, 0.25, 0.29, 0.57, 1.0)] == [1, 25, 29, 57, 100]
    for bad in (0.995, 0.025, 0.005, 0.0, 1.01, float("nan"), True, "0.5", 1.8e306, -1e308):
        with pytest.raises(InvalidArgument) as e:
            mps_percentage(bad, "x.gpu_share")
        assert e.value.field == "x.gpu_share" and "multiple of 0.01" in e.value.allowed
    assert check_mps_percentage(25.0) == 25
    for bad in (99.1, 1e308, float("inf")):
        with pytest.raises(InvalidArgument):
            check_mps_percentage(bad)


def test_every_shape_is_enforceable_and_sized_from_the_gpu():
    assert all(mps_percentage(s) for s in SHARES)
    live = Job("j", JobKind.TRAINING, 0.0, 100.0,
               Request(1, 0.5, 2.0, 8.0, device_memory=True), job_type="ResNet-50 (batch size 64)")
    fam = build_family(live, {"A100-80GB": (8, 80.0), "T4": (4, 15.0)}, TM, max_configs=64)
    for c in fam.configs[1:]:
        mps_percentage(c.gpu_share)
        m = 80.0 if c.gpu_model == "A100-80GB" else 15.0
        assert c.gpu_mem_gib == pytest.approx(m * c.gpu_share)  # its share of the GPU's memory
    named = Job("k", JobKind.TRAINING, 0.0, 100.0,
                Request(1, 0.25, 2.0, 8.0, gpu_mem_gib=30.0, device_memory=True),
                job_type="ResNet-50 (batch size 64)")
    fam = build_family(named, {"A100-80GB": (8, 80.0), "T4": (4, 15.0)}, TM, max_configs=64)
    assert {c.gpu_model for c in fam.configs[1:]} == {"A100-80GB"}   # a T4 has 15 < 30 GiB
    assert {c.gpu_mem_gib for c in fam.configs[1:] if c.gpu_share < 1} == {30.0}
    with pytest.raises(InvalidArgument, match="request.gpu_share"):
        build_family(Job("o", JobKind.TRAINING, 0.0, 1.0, Request(1, 0.995, 1.0, 1.0),
                         job_type="ResNet-50 (batch size 64)"), {"T4": (4, 15.0)}, TM)


def test_the_booking_annotation_never_rounds_a_share():
    b = A.PodBooking(job_id="ns/p", node="n1", gpu_indices=(0,), gpu_uuids=("GPU-a",),
                     gpu_share=0.995, gpu_mem_gib=8.0, cpu=1.0, mem_gib=1.0,
                     config_name="V100M16 x1 @0.99", gpu_model="V100M16", throughput=1.0,
                     slowdown_bound=1.5, job_type="ResNet-50 (batch size 64)", kind="training",
                     round_id="r/1/1")
    with pytest.raises(InvalidArgument) as e:
        A.decision_annotations(b)
    assert e.value.field == f"{A.BOOKING}.gpu_share" and e.value.value == 0.995
    assert json.loads(A.decision_annotations(
        A.PodBooking(**{**b.__dict__, "gpu_share": 0.25}))[A.BOOKING])["gpu_share"] == 0.25
