"""The pure half of Allocate: parsing the placer's decision annotations, finding the one pod
an Allocate is for, the container environment, the inventory annotation and MIG instance
creation order on the simulated backend."""

from __future__ import annotations

import json

import pytest

from elastico.contract import INVENTORY
from elastico.errors import Infeasible, InvalidArgument
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
from elastico.nodeagent.allocation import (
    PodInfo, allocated_value, build_allocation, find_target, parse_decision)
from elastico.nodeagent.backend import pinned_mem_limit_env
from elastico.nodeagent.gpu_models import mig_table_model
from elastico.nodeagent.inventory import HealthWatcher, InventoryPublisher
from elastico.nodeagent.kubeapi import FakeNodeApi
from elastico.nodeagent.nodeplan import ensure_mig_instance

BASE = {"elastico.io/round-id": "r1", "elastico.io/configuration": "c", "elastico.io/gpu-uuids": "GPU-a"}


@pytest.mark.parametrize("gib,n,want", [(16, 2, "0=16G,1=16G"), (2.5, 1, "0=2560M"),
                                        (0.1, 1, "0=102M")])  # 0.1 GiB = 102.4 MiB, rounded down
def test_pinned_mem_limit_format(gib, n, want):
    assert pinned_mem_limit_env(gib, n) == want


@pytest.mark.parametrize("extra,field", [
    ({"elastico.io/gpu-uuids": "GPU-a,GPU-a"}, "elastico.io/gpu-uuids"),
    ({"elastico.io/round-id": " "}, "elastico.io/round-id"),
    ({"elastico.io/mig-profile": "1g.5gb"}, "elastico.io/mig-start-slot"),
    ({"elastico.io/mig-profile": "1g.5gb", "elastico.io/mig-start-slot": "-1"}, "elastico.io/mig-start-slot"),
    ({"elastico.io/mps-active-thread-percentage": "50"}, "elastico.io/mps-pinned-device-mem-limit-gib"),
    ({"elastico.io/mps-active-thread-percentage": "12.5", "elastico.io/mps-pinned-device-mem-limit-gib": "4"},
     "elastico.io/mps-active-thread-percentage"),
    ({"elastico.io/mps-active-thread-percentage": "50", "elastico.io/mps-pinned-device-mem-limit-gib": "-4"},
     "elastico.io/mps-pinned-device-mem-limit-gib"),
    ({"elastico.io/predicted-slowdown": "0.9"}, "elastico.io/predicted-slowdown"),
])
def test_malformed_decisions_name_the_annotation(extra, field):
    with pytest.raises(InvalidArgument) as e:
        parse_decision({**BASE, **extra})
    assert e.value.field == f"annotation {field}"


def pod(name, uid, ann, containers=("main",), **kw):
    return PodInfo("ns", name, uid, "n1", "elastico", ann, containers, **kw)


def test_find_target_walks_a_pods_containers_then_ignores_it():
    p = pod("two", "u2", BASE, containers=("init-gpu", "main"))
    t = find_target([p, pod("gone", "u3", BASE, deleting=True), pod("old", "u4", BASE, phase="Succeeded")], "n1")
    assert (t.pod.name, t.container) == ("two", "init-gpu")
    p2 = PodInfo(**{**p.__dict__, "annotations": {**BASE, "elastico.io/allocated": allocated_value(p, "init-gpu")}})
    assert find_target([p2], "n1").container == "main"
    p3 = PodInfo(**{**p.__dict__, "annotations": {**BASE, "elastico.io/allocated": allocated_value(p2, "main")}})
    assert p3.annotations["elastico.io/allocated"] == "u2/init-gpu,u2/main"
    with pytest.raises(Infeasible, match="found 0"):
        find_target([p3], "n1")
    # an entry written for an earlier pod of the same name (another uid) does not count
    stale = pod("two", "u9", {**BASE, "elastico.io/allocated": "u2/main"})
    assert find_target([stale], "n1").pod.uid == "u9"


def test_build_allocation_refuses_foreign_and_unhealthy_gpus():
    gpus = [GpuInfo(0, "GPU-a", "A100-40GB", 40.0, healthy=False), GpuInfo(1, "GPU-b", "A100-40GB", 40.0)]
    with pytest.raises(Infeasible, match="unhealthy"):
        build_allocation(parse_decision(BASE), gpus)
    with pytest.raises(InvalidArgument, match="gpu-uuids"):
        build_allocation(parse_decision({**BASE, "elastico.io/gpu-uuids": "GPU-z"}), gpus)
    a = build_allocation(parse_decision({**BASE, "elastico.io/gpu-uuids": "GPU-b"}), gpus,
                         exists=lambda p: p != "/dev/nvidia-uvm-tools")
    assert [d.host_path for d in a.devices] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"]


def test_ensure_mig_instance_replaces_idle_overlap_and_refuses_busy():
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-m", "A100-40GB", 40.0, mig_mode=True)])
    b.create_mig_instance(0, "7g.40gb", 0)
    d = ensure_mig_instance(b, 0, "3g.20gb", 4)
    assert [(x.profile, x.start) for x in b.mig_devices(0)] == [("3g.20gb", 4)]
    assert ensure_mig_instance(b, 0, "3g.20gb", 4) == d  # exists: reused, same UUID
    b.set_mig_busy(0, 4, True)
    with pytest.raises(InvalidArgument, match="busy 3g.20gb at 4"):
        ensure_mig_instance(b, 0, "7g.40gb", 0)  # needs memory slices 0-7; 3g at 4 holds 4-7
    ensure_mig_instance(b, 0, "4g.20gb", 0)  # slices 0-3 beside the busy 3g (4g + 3g is valid)
    assert [(x.profile, x.start) for x in b.mig_devices(0)] == [("4g.20gb", 0), ("3g.20gb", 4)]


def test_ensure_mig_instance_replaces_an_idle_instance_the_geometry_rules_exclude():
    # A100-40GB has one media extension: a second 1g.5gb+me cannot stand beside the first
    # although their slices are apart (memory 0 and 6), so the idle one goes; the plain 1g
    # at 2 stays
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-m", "A100-40GB", 40.0, mig_mode=True)])
    b.create_mig_instance(0, "1g.5gb+me", 0)
    b.create_mig_instance(0, "1g.5gb", 2)
    ensure_mig_instance(b, 0, "1g.5gb+me", 6)
    assert [(x.profile, x.start) for x in b.mig_devices(0)] == [("1g.5gb", 2), ("1g.5gb+me", 6)]
    b.set_mig_busy(0, 6, True)
    with pytest.raises(InvalidArgument, match="busy 1g.5gb\\+me at 6"):
        ensure_mig_instance(b, 0, "1g.5gb+me", 0)
    assert [(x.profile, x.start) for x in b.mig_devices(0)] == [("1g.5gb", 2), ("1g.5gb+me", 6)]


@pytest.mark.parametrize("name,mem,want", [
    ("NVIDIA A100-SXM4-40GB", 40.0, "A100-40GB"), ("NVIDIA A100 80GB PCIe", 79.2, "A100-80GB"),
    ("NVIDIA H100 80GB HBM3", 79.6, "H100-80GB"), ("NVIDIA H100 NVL", 93.6, "H100-94GB"),
    ("NVIDIA GH200 480GB", 95.6, "H100-96GB"), ("NVIDIA H200", 139.8, "H200"),
    ("NVIDIA A30", 24.0, "A30"), ("Tesla V100-SXM2-16GB", 16.0, None)])
def test_mig_table_model_from_nvml_names(name, mem, want):
    assert mig_table_model(name, mem) == want


def test_inventory_annotation_follows_health():
    b = SimulatedGpuBackend([GpuInfo(0, "GPU-a", "A100-40GB", 40.0),
                             GpuInfo(1, "GPU-b", "A100-40GB", 40.0, mig_mode=True)])
    api = FakeNodeApi()
    pub = InventoryPublisher(b, api, "n1")
    w = HealthWatcher(b)
    w.subscribe(pub.publish)
    assert w.check() is True and w.check() is False  # published once, nothing changed since
    b.set_health(0, False)
    assert w.check() is True
    assert json.loads(api.node_annotations["n1"][INVENTORY]) == [
        {"index": 0, "uuid": "GPU-a", "model": "A100-40GB", "memory_gib": 40.0, "healthy": False, "mig_mode": False},
        {"index": 1, "uuid": "GPU-b", "model": "A100-40GB", "memory_gib": 40.0, "healthy": True, "mig_mode": True}]
    assert [c for c in api.calls if c[0] == "patch_node"] == [("patch_node", "n1")] * 2


def test_an_unreachable_api_server_is_a_kube_api_error_naming_the_call():
    # urllib3 gives up after its retries; the caller gets one line, not a MaxRetryError
    from kubernetes import client

    from elastico.nodeagent.kube.client import KubeApiError, KubernetesNodeApi

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: nothing listens
    cfg.retries = 0
    api = KubernetesNodeApi(client.CoreV1Api(client.ApiClient(cfg)))
    with pytest.raises(KubeApiError, match="patch node n1: Kubernetes API unreachable"):
        api.patch_node_annotations("n1", {"a": "b"})
    with pytest.raises(KubeApiError, match="list pods on node n1: Kubernetes API unreachable"):
        api.list_node_pods("n1")
