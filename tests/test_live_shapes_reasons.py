"""Live shapes Kubernetes can honour, and waiting reasons that name their cause (issue 18,
classes 4 and 7), against the kmock API server with the real SchedulerLoop.

Hand-worked values:

* A pod without ``elastico.io/resize-policy: restart`` keeps its requested shape: a 0.5 pod
  is one GPU at MPS active-thread percentage 50, a 0.4 pod one GPU at 40.  Eight A100-80GB
  GPUs hold sixteen 0.5 pods exactly (2 x 0.5 = 1 per GPU); bestfit puts a share on the GPU
  it leaves fullest, so the pods pair up, and seven of them fill GPUs 0-2 and half of GPU 3,
  leaving four whole GPUs for a whole-GPU pod.
* GPU memory: each 0.5 pod says ``gpu-memory-gib: 8`` (booked 8 GiB whether memory comes from
  the 16 GiB footprint, 0.5 x 16, or from the annotation); two of them on a GPU whose
  inventory reports 12 GiB need 16 > 12, while their shares sum to 1: memory binds, and
  the second sees ``4 of 12 GiB free``.
* Slowdown bound: a 0.5 ResNet-50 pod alone on the only GPU, with bound 1.0; a second 0.5
  ResNet-50 pod would slow it to ``1 + kappa x p x share_speed(0.5)`` (analytic model,
  docs/placement.md "Slowdown model"), above 1.0.
* Host CPU: 32 allocatable cores, 31 requested by the first pod; the second asks 4 (1 free).
  Host memory: 20 GiB allocatable, 16 GiB taken; the second asks 8 (4 free).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kmock")

from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.loop import LoopConfig  # noqa: E402
from elastico.predictor.analytic import DEFAULT_KAPPA  # noqa: E402
from elastico.perf.throughput import ThroughputModel  # noqa: E402
from test_kube_loop import (NS, ack, core, emu, events, make_loop,  # noqa: E402,F401
                            pod, synced)

A100 = "A100-80GB"
RESIZE = "elastico.io/resize-policy"  # (a literal: the annotation is the API)
OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid-1",
         "controller": True}


def node(core, name="n1", *, model=A100, gpus=8, mem=80.0, cpu="32", memory="256Gi"):
    inv = [{"index": i, "uuid": f"GPU-{name}-{i}", "model": model, "memory_gib": mem,
            "healthy": True, "mig_mode": False} for i in range(gpus)]
    core.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {},
                     "annotations": {"elastico.io/gpu-inventory": json.dumps(inv)}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory},
                   "conditions": [{"type": "Ready", "status": "True"}]}})


def make(core, name, annotations=None, *, cpu="2", memory="8Gi", created=None, owner=None):
    meta = {"name": name, "namespace": NS, "annotations": annotations or {}}
    if created:
        meta["creationTimestamp"] = created
    if owner:
        meta["ownerReferences"] = [owner]
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"schedulerName": "elastico", "containers": [{
            "name": "main", "image": "trainer",
            "resources": {"requests": {"cpu": cpu, "memory": memory, A.GPU_RESOURCE: "1"}}}]}})


def rounds(loop, core, n=1):
    """``n`` rounds; every pod bound is acknowledged as the device plugin would."""
    rep = None
    for _ in range(n):
        synced(loop, core)
        rep = loop.run_round()
        for key in rep.bound:
            ack(core, key.split("/", 1)[1])
    return rep


def ann(core, name) -> dict:
    return pod(core, name)["metadata"].get("annotations") or {}


def waiting_events(core, name) -> list[str]:
    return [e["message"] for e in events(core, name) if e["reason"] == "Waiting"]


# ----------------------------------------------------------------------- class 4: shapes
def test_a_half_and_a_0_4_pod_each_get_one_gpu_at_their_share(core, make_loop):
    node(core)
    make(core, "half", {A.GPU_FRACTION: "0.5"})
    make(core, "forty", {A.GPU_FRACTION: "0.4"})
    loop = make_loop()
    rounds(loop, core, 3)
    for name, share, pct in (("half", 0.5, "50"), ("forty", 0.4, "40")):
        a = ann(core, name)
        assert pod(core, name)["spec"]["nodeName"] == "n1"
        assert a[A.CONFIGURATION] == f"{A100} x1 @{share:.2f}"
        assert len(a[A.GPU_UUIDS].split(",")) == 1
        assert a[A.MPS_ACTIVE_THREAD_PERCENTAGE] == pct


@pytest.mark.parametrize("arrival", ["burst", "one per round"])
def test_sixteen_half_gpu_pods_all_bind_two_per_gpu(core, make_loop, arrival):
    node(core)
    loop = make_loop()
    names = [f"p{i:02d}" for i in range(16)]
    if arrival == "burst":
        for n in names:
            make(core, n, {A.GPU_FRACTION: "0.5"})
        rounds(loop, core, 17)  # one bind per round on the node (one unacknowledged pod)
    else:
        for n in names:
            make(core, n, {A.GPU_FRACTION: "0.5"})
            rounds(loop, core, 1)
        rounds(loop, core, 1)
    per_gpu: dict[str, int] = {}
    for n in names:
        a = ann(core, n)
        assert pod(core, n)["spec"].get("nodeName") == "n1", (n, a.get(A.CONFIGURATION))
        assert a[A.CONFIGURATION] == f"{A100} x1 @0.50"
        per_gpu[a[A.GPU_UUIDS]] = per_gpu.get(a[A.GPU_UUIDS], 0) + 1
    assert per_gpu == {f"GPU-n1-{g}": 2 for g in range(8)}


def test_a_whole_gpu_pod_after_seven_half_gpu_pods_binds_on_a_fresh_gpu(core, make_loop):
    node(core)
    loop = make_loop()
    for i in range(7):
        make(core, f"h{i}", {A.GPU_FRACTION: "0.5"})
        rounds(loop, core, 1)
    held = sorted(ann(core, f"h{i}")[A.GPU_UUIDS] for i in range(7))
    assert held == sorted([f"GPU-n1-{g}" for g in (0, 0, 1, 1, 2, 2, 3)])  # packed in pairs
    make(core, "whole", {A.GPU_FRACTION: "1"})
    rounds(loop, core, 2)
    a = ann(core, "whole")
    assert pod(core, "whole")["spec"].get("nodeName") == "n1"
    assert a[A.CONFIGURATION] == f"{A100} x1 @1.00"
    assert a[A.GPU_UUIDS] in {f"GPU-n1-{g}" for g in (4, 5, 6, 7)}


# ----------------------------------------------------------------------- class 4: opt-in
@pytest.mark.parametrize("extra, owner, allowed", [
    ({RESIZE: "yes"}, OWNER, "one of ['none', 'restart']"),
    ({RESIZE: "restart", A.SHAPE_FAMILY: "fixed"}, OWNER, "single elastic training"),
    ({RESIZE: "restart", A.WORKLOAD: "service", A.SHAPE_FAMILY: "fixed"}, OWNER,
     "single elastic training"),
    ({RESIZE: "restart"}, None, "controller owner reference"),
])
def test_a_bad_resize_policy_is_rejected_naming_field_value_and_what_is_allowed(
        core, make_loop, extra, owner, allowed):
    node(core)
    make(core, "bad", {A.GPU_FRACTION: "0.5", **extra}, owner=owner)
    loop = make_loop()
    rep = rounds(loop, core, 1)
    msg = rep.rejected["default/bad"]
    assert msg.startswith(f"{RESIZE}: '{extra[RESIZE]}' is not allowed (")
    assert allowed in msg
    assert [e["reason"] for e in events(core, "bad")] == ["Rejected"]


def test_a_restartable_pod_grown_into_free_gpus_is_evicted_to_give_them_back(core, make_loop):
    """Two A100 GPUs.  ``grow`` (0.5, resize-policy restart, owned by a Job) is alone and may
    take more than it asked.  ``whole`` (a whole GPU) then waits; once ``grow`` has run the
    minimum time (300 s), the placer evicts it, and with a budget of one restart the pod its
    controller recreates gets its requested shape: both fit (1 + 0.5 <= 2 GPUs)."""
    node(core, gpus=2)
    t = [1767225600.0 + 10.0]  # 10 s after the pod's creationTimestamp, 2026-01-01T00:00:00Z
    loop = make_loop(config=LoopConfig(identity="placer-a", watch_timeout_s=5,
                                       resize_max_restarts=1), clock=lambda: t[0])
    opt = {A.GPU_FRACTION: "0.5", RESIZE: "restart"}
    make(core, "grow", opt, owner=OWNER, created="2026-01-01T00:00:00Z")
    rounds(loop, core, 2)
    a = ann(core, "grow")
    grown = a[A.CONFIGURATION]
    assert grown != f"{A100} x1 @0.50", grown  # alone, it was given more than it asked
    make(core, "whole", {A.GPU_FRACTION: "1"})
    rep = rounds(loop, core, 1)
    assert "default/whole" in rep.waiting and "default/grow" in rep.waiting["default/whole"]
    assert pod(core, "grow")  # ran less than 300 s: not evicted yet (hysteresis)
    t[0] += 301.0
    rep = rounds(loop, core, 1)
    assert "evicting default/grow" in rep.waiting["default/whole"]
    names = {p["metadata"]["name"] for p in json.loads(
        core.list_namespaced_pod(NS, _preload_content=False).data)["items"]}
    assert "grow" not in names
    assert [e["reason"] for e in events(core, "grow")].count("Resizing") == 1
    rounds(loop, core, 1)  # the GPUs are free: the waiting pod gets one
    assert pod(core, "whole")["spec"].get("nodeName") == "n1"
    # its controller recreates it; alone with a free GPU it would grow into it, but its one
    # restart is spent, so it gets what it asked
    make(core, "grow-2", opt, owner=OWNER)
    rounds(loop, core, 2)
    assert pod(core, "grow-2")["spec"].get("nodeName") == "n1"
    assert ann(core, "grow-2")[A.CONFIGURATION] == f"{A100} x1 @0.50"
    assert ann(core, "whole")[A.GPU_UUIDS] != ann(core, "grow-2")[A.GPU_UUIDS]


def test_a_restartable_pod_is_not_grown_into_room_a_waiting_pod_needs(core, make_loop):
    """Two A100 GPUs, one burst: ``r`` (0.5, resize-policy restart) and ``w`` (a whole GPU).
    Pricing alone gives ``r`` two GPUs at 0.5 (``A100-80GB x2 @0.50``) and leaves ``w``
    waiting; growing ``r`` while ``w`` waits is not allowed, so the round is decided again at
    requested shapes: ``r`` one GPU at 0.5, ``w`` the other."""
    node(core, gpus=2)
    make(core, "r", {A.GPU_FRACTION: "0.5", RESIZE: "restart"}, owner=OWNER,
         created="2026-01-01T00:00:00Z")
    make(core, "w", {A.GPU_FRACTION: "1"}, created="2026-01-01T00:00:01Z")
    loop = make_loop()
    rep = rounds(loop, core, 1)
    assert sorted(rep.reserved) == ["default/r", "default/w"]
    rounds(loop, core, 3)
    assert ann(core, "r")[A.CONFIGURATION] == f"{A100} x1 @0.50"
    assert ann(core, "w")[A.CONFIGURATION] == f"{A100} x1 @1.00"
    assert {ann(core, "r")[A.GPU_UUIDS], ann(core, "w")[A.GPU_UUIDS]} == {"GPU-n1-0", "GPU-n1-1"}


# ----------------------------------------------------------------------- class 7: reasons
def test_waiting_for_gpu_memory_names_memory_and_the_pod_holding_it(core, make_loop):
    node(core, model="V100M16", gpus=1, mem=12.0)
    spec = {A.GPU_FRACTION: "0.5", A.GPU_MEMORY_GIB: "8"}
    make(core, "a", spec)
    loop = make_loop()
    rounds(loop, core, 2)
    make(core, "b", spec)
    rep = rounds(loop, core, 1)
    why = rep.waiting["default/b"]
    assert "GPU memory: GPU 0 of node n1 has the share but 4 of 12 GiB free" in why
    assert "held by default/a" in why
    assert any("GPU memory" in m for m in waiting_events(core, "b"))


def test_waiting_for_a_slowdown_bound_names_the_pod_and_its_predicted_slowdown(core, make_loop):
    node(core, gpus=1)
    make(core, "a", {A.GPU_FRACTION: "0.5", A.SLOWDOWN_BOUND: "1"})
    loop = make_loop()
    rounds(loop, core, 2)
    make(core, "b", {A.GPU_FRACTION: "0.5"})
    rep = rounds(loop, core, 1)
    tm = ThroughputModel.bundled()
    jt = A.DEFAULTS[A.JOB_TYPE]
    predicted = 1 + DEFAULT_KAPPA * tm.parallel_fraction(jt) * tm.share_speed(jt, 0.5)
    why = rep.waiting["default/b"]
    assert "slowdown bound" in why
    assert f"job default/a predicted {predicted:.3f} > bound 1.000" in why


def test_waiting_behind_a_whole_gpu_names_the_share_and_the_pod_holding_it(core, make_loop):
    node(core, model="V100M16", gpus=1, mem=16.0)
    make(core, "a", {A.GPU_FRACTION: "1"})
    loop = make_loop()
    rounds(loop, core, 2)
    make(core, "b", {A.GPU_FRACTION: "0.5"})
    rep = rounds(loop, core, 1)
    why = rep.waiting["default/b"]
    assert "GPU share: the freest GPU, GPU 0 of node n1, has 0 of the GPU and 0 GiB free" in why
    assert "held by default/a (1 of the GPU" in why


@pytest.mark.parametrize("resource, first, second, node_kw, words", [
    ("cpu", {"cpu": "31"}, {"cpu": "4"}, {}, "host CPU: node n1 has 1 of 32 cores free"),
    ("memory", {"memory": "16Gi"}, {"memory": "8Gi"}, {"memory": "20Gi"},
     "host memory: node n1 has 4 of 20 GiB free"),
])
def test_waiting_for_host_cpu_or_memory_names_it(core, make_loop, resource, first, second,
                                                 node_kw, words):
    node(core, **node_kw)
    make(core, "a", {A.GPU_FRACTION: "0.5"}, **first)
    loop = make_loop()
    rounds(loop, core, 2)
    make(core, "b", {A.GPU_FRACTION: "0.5"}, **second)
    rep = rounds(loop, core, 1)
    assert words in rep.waiting["default/b"]


def test_of_two_identical_pods_the_earlier_is_placed_and_the_later_says_who_holds_the_gpu(
        core, make_loop):
    """Names sort against creation order: ``zeta`` was created first."""
    node(core, model="V100M16", gpus=1, mem=16.0)
    make(core, "zeta", {A.GPU_FRACTION: "1"}, created="2026-01-01T00:00:00Z")
    make(core, "alpha", {A.GPU_FRACTION: "1"}, created="2026-01-01T00:00:05Z")
    loop = make_loop()
    rep = rounds(loop, core, 1)
    assert rep.reserved == ["default/zeta"]
    assert "held by default/zeta" in rep.waiting["default/alpha"]


def test_of_two_identical_pods_that_cannot_share_the_earlier_gets_the_free_gpu(core, make_loop):
    """Two GPUs, ``r`` (0.5) on one.  ``zeta`` then ``alpha`` (created in that order; names sort
    the other way), 0.5 each with slowdown bound 1.0, so neither may share a GPU: only one
    fits, on the free GPU, and it is the earlier; the later's reason names the bound and the
    pod beside it."""
    node(core, model="V100M16", gpus=2, mem=16.0)
    loop = make_loop()
    make(core, "r", {A.GPU_FRACTION: "0.5"}, created="2026-01-01T00:00:00Z")
    rounds(loop, core, 2)
    tight = {A.GPU_FRACTION: "0.5", A.SLOWDOWN_BOUND: "1"}
    make(core, "zeta", tight, created="2026-01-01T00:00:10Z")
    make(core, "alpha", tight, created="2026-01-01T00:00:20Z")
    rep = rounds(loop, core, 1)
    assert rep.reserved == ["default/zeta"]
    why = rep.waiting["default/alpha"]
    assert "slowdown bound" in why and "> bound 1.000 beside default/" in why


def test_waiting_names_unhealthy_gpus_and_nodes_not_usable(core, make_loop):
    """n1's only GPU is unhealthy (inventory ``healthy: false``), n2 is NotReady: the pod
    waits, and the reason says both."""
    inv = [{"index": 0, "uuid": "GPU-n1-0", "model": "V100M16", "memory_gib": 16.0,
            "healthy": False, "mig_mode": False}]
    core.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "annotations": {"elastico.io/gpu-inventory": json.dumps(inv)}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
    node(core, "n2", model="V100M16", gpus=1, mem=16.0)
    core.patch_node_status("n2", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
                           _content_type="application/merge-patch+json")
    make(core, "a", {A.GPU_FRACTION: "0.5"})
    loop = make_loop()
    why = rounds(loop, core, 1).waiting["default/a"]
    assert "unhealthy GPUs: at most 0 healthy GPU(s) of model V100M16 on one node (1 unhealthy)" in why
    assert why.endswith("; nodes not usable now: n2: not Ready")
