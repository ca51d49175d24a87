"""The Kubernetes scheduler loop against a real HTTP API (tests/kube_emulator.py: kmock's
emulator plus resourceVersions, 410 Gone, 409 Conflict, Binding, Leases), driven through the
official ``kubernetes`` client exactly as in a cluster.

Hand-worked values: a ``shape-family: fixed`` pod keeps its requested shape, so
``gpu-fraction 0.5`` on a V100M16 node is one GPU at MPS active-thread percentage 50 with a
pinned memory limit of 0.5 x the GPU's 16 GiB = 8 GiB (a live pod's GPU memory is its share
of the GPU's real memory, elastico.shapes.gpu_memory_gib; tests/test_live_memory_shares.py);
``gpu-fraction 1`` is a whole GPU, so a 4-GPU node holds exactly four such pods and a fifth
waits.
"""

from __future__ import annotations

import json
import re
import time

import pytest

pytest.importorskip("kmock")
from kubernetes import client  # noqa: E402

from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.leader import LeaseElector  # noqa: E402
from elastico.placer.kube.loop import LoopConfig, SchedulerLoop  # noqa: E402
from kube_emulator import Emulator  # noqa: E402

NS = "default"


@pytest.fixture()
def emu():
    e = Emulator().start()
    yield e
    e.stop()


@pytest.fixture()
def core(emu):
    return client.CoreV1Api(emu.api_client())


def uuids(node: str, n: int) -> list[str]:
    return [f"GPU-{node}-{i}" for i in range(n)]


def make_node(core, name, *, model="V100M16", gpus=4, mem=16.0, ready=True, mig=False,
              labels=None):
    inv = [{"index": i, "uuid": u, "model": model, "memory_gib": mem, "healthy": True,
            "mig_mode": mig} for i, u in enumerate(uuids(name, gpus))]
    core.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels or {},
                     "annotations": {"elastico.io/gpu-inventory": json.dumps(inv)}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def set_ready(core, name, ready):
    core.patch_node_status(name, {"status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}},
        _content_type="application/merge-patch+json")


def make_pod(core, name, annotations=None, *, labels=None, finalizers=None, gpu="1"):
    res = {"requests": {"cpu": "2", "memory": "8Gi"}}
    if gpu is not None:
        res["requests"][A.GPU_RESOURCE] = gpu
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {},
                     "labels": labels or {}, "finalizers": finalizers or []},
        "spec": {"schedulerName": "elastico",
                 "containers": [{"name": "main", "image": "trainer", "resources": res}]}})


def pod(core, name) -> dict:
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


def events(core, name=None) -> list[dict]:
    items = json.loads(core.list_namespaced_event(NS, _preload_content=False).data)["items"]
    return [e for e in items if name is None or e["involvedObject"]["name"] == name]


def ack(core, name):
    """What the device plugin does after Allocate: ``<uid>/<container>`` for each GPU
    container (elastico.nodeagent.allocation.allocated_value)."""
    p = json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)
    value = ",".join(f"{p['metadata']['uid']}/{c['name']}" for c in p["spec"]["containers"])
    core.patch_namespaced_pod(name, NS, {"metadata": {"annotations": {A.ALLOCATED: value}}},
                              _content_type="application/merge-patch+json")


def wait_until(pred, timeout=30.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def synced(loop, core):
    """Wait until the loop's caches hold exactly the API's pods and nodes (same versions)."""
    def same():
        want = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
                for p in json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]}
        have = {k: v["metadata"]["resourceVersion"] for k, v in loop.pods.snapshot().items()}
        nodes = {n["metadata"]["name"]: n["metadata"]["resourceVersion"]
                 for n in json.loads(core.list_node(_preload_content=False).data)["items"]}
        return want == have and nodes == {k: v["metadata"]["resourceVersion"]
                                          for k, v in loop.nodes.snapshot().items()}
    wait_until(same)


@pytest.fixture()
def make_loop(core):
    loops = []

    def build(**kw):
        cfg = kw.pop("config", None) or LoopConfig(identity=kw.pop("identity", "placer-a"),
                                                   watch_timeout_s=5)
        loop = SchedulerLoop(kw.pop("api", core), config=cfg, **kw)
        loop.start()
        assert loop.wait_synced(10)
        loops.append(loop)
        return loop
    yield build
    for lp in loops:
        lp.stop()


def step(loop, core):
    synced(loop, core)
    return loop.run_round()


def test_a_pod_is_scheduled_with_its_decision_annotations_and_an_event(core, make_loop, emu):
    make_node(core, "n1")
    make_pod(core, "svc", {A.WORKLOAD: "service"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == ["default/svc"]
    p = pod(core, "svc")
    ann = p["metadata"]["annotations"]
    assert p["spec"]["nodeName"] == "n1"
    assert ann[A.ROUND_ID] == rep.round_id
    assert ann[A.CONFIGURATION] == "V100M16 x1 @1.00"     # a service keeps its shape
    assert ann[A.GPU_UUIDS] in uuids("n1", 4)
    assert float(ann[A.PREDICTED_SLOWDOWN]) == 1.0         # alone on its GPU
    for absent in (A.MPS_ACTIVE_THREAD_PERCENTAGE, A.MPS_PINNED_MEM_LIMIT_GIB, A.MIG_PROFILE,
                   A.MIG_START_SLOT):
        assert absent not in ann                           # a whole GPU: no MPS limits
    b = A.parse_booking(ann)
    assert (b.node, len(b.gpu_indices), b.gpu_share, b.cpu, b.mem_gib) == ("n1", 1, 1.0, 2.0, 8.0)
    assert emu.server.binds == [(NS, "svc", "n1")]
    ev = [e for e in events(core, "svc") if e["reason"] == "Scheduled"]
    assert len(ev) == 1 and "n1" in ev[0]["message"] and ev[0]["type"] == "Normal"


def test_an_elastic_pod_gets_every_gpu_and_the_mps_limits_of_its_configuration(core, make_loop):
    make_node(core, "n1")
    make_pod(core, "train", {A.WORKLOAD: "training", A.GPU_FRACTION: "0.5", A.WORK: "7200"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == ["default/train"]
    ann = pod(core, "train")["metadata"]["annotations"]
    b = A.parse_booking(ann)
    assert ann[A.CONFIGURATION] == b.config_name == f"V100M16 x{len(b.gpu_indices)} @{b.gpu_share:.2f}"
    assert ann[A.GPU_UUIDS].split(",") == [uuids("n1", 4)[i] for i in b.gpu_indices]
    if b.gpu_share < 1:
        assert ann[A.MPS_ACTIVE_THREAD_PERCENTAGE] == str(round(b.gpu_share * 100))
        assert float(ann[A.MPS_PINNED_MEM_LIMIT_GIB]) == b.gpu_mem_gib
    else:
        assert A.MPS_ACTIVE_THREAD_PERCENTAGE not in ann


def test_one_unacknowledged_pod_per_node_then_the_next_after_the_ack(core, make_loop):
    make_node(core, "n1")
    make_pod(core, "a", {A.WORKLOAD: "service", A.GPU_FRACTION: "0.5"})
    make_pod(core, "b", {A.WORKLOAD: "service", A.GPU_FRACTION: "0.5"})
    loop = make_loop()
    rep = step(loop, core)
    assert sorted(rep.reserved) == ["default/a", "default/b"]
    assert len(rep.bound) == 1 and len(rep.held) == 1
    held = rep.held[0].split("/")[1]
    assert "nodeName" not in pod(core, held)["spec"]
    assert step(loop, core).bound == []          # still no ack: still held
    ack(core, rep.bound[0].split("/")[1])
    assert step(loop, core).bound == [rep.held[0]]
    # the two halves never overcommit a GPU: per UUID the shares sum to <= 1
    per = {}
    for n in ("a", "b"):
        b = A.parse_booking(pod(core, n)["metadata"]["annotations"])
        for u in b.gpu_uuids:
            per[u] = per.get(u, 0) + b.gpu_share
    assert max(per.values()) <= 1.0


def _fill(core, loop, names):
    """Schedule ``names`` (whole-GPU services) one bind per ack, as kubelet would."""
    for n in names:
        make_pod(core, n, {A.WORKLOAD: "service"})
    for _ in names:
        rep = step(loop, core)
        assert len(rep.bound) == 1
        ack(core, rep.bound[0].split("/")[1])


def test_a_restarted_placer_rebuilds_every_booking_and_never_double_books(core, make_loop):
    make_node(core, "n1")
    first = make_loop(identity="placer-a")
    _fill(core, first, ["p0", "p1", "p2", "p3"])
    taken = {pod(core, n)["metadata"]["annotations"][A.GPU_UUIDS] for n in ("p0", "p1", "p2", "p3")}
    assert taken == set(uuids("n1", 4))
    first.stop()
    make_pod(core, "late", {A.WORKLOAD: "service"})
    second = make_loop(identity="placer-b")
    rep = step(second, core)
    assert rep.bound == [] and "default/late" in rep.waiting
    assert any(e["reason"] == "Waiting" for e in events(core, "late"))
    assert "nodeName" not in pod(core, "late")["spec"]


def test_a_terminating_pod_holds_its_gpu_until_it_is_gone(core, make_loop):
    make_node(core, "n1", gpus=1)
    loop = make_loop()
    make_pod(core, "old", {A.WORKLOAD: "service"}, finalizers=["example.com/hold"])
    assert step(loop, core).bound == ["default/old"]
    ack(core, "old")
    gpu = pod(core, "old")["metadata"]["annotations"][A.GPU_UUIDS]
    core.delete_namespaced_pod("old", NS)
    assert pod(core, "old")["metadata"].get("deletionTimestamp")   # terminating
    make_pod(core, "new", {A.WORKLOAD: "service"})
    assert step(loop, core).bound == []                            # still held by "old"
    core.patch_namespaced_pod("old", NS, {"metadata": {"finalizers": None}},
                              _content_type="application/merge-patch+json")
    wait_until(lambda: "default/old" not in loop.pods.snapshot())
    assert step(loop, core).bound == ["default/new"]               # the deleted pod freed it
    assert pod(core, "new")["metadata"]["annotations"][A.GPU_UUIDS] == gpu


def test_a_dropped_watch_or_410_loses_and_duplicates_nothing(core, make_loop, emu):
    make_node(core, "n1")
    loop = make_loop()
    make_pod(core, "x", {A.WORKLOAD: "service"})
    synced(loop, core)
    watches = loop.pods.watches
    emu.call(lambda s: s.drop_watches())
    make_pod(core, "y", {A.WORKLOAD: "service"})   # while the stream is down / re-opening
    core.delete_namespaced_pod("x", NS)
    synced(loop, core)
    assert sorted(loop.pods.snapshot()) == ["default/y"]
    assert loop.pods.watches > watches
    lists = loop.pods.lists
    emu.call(lambda s: s.compact())                 # the next re-watch gets 410 Gone...
    emu.call(lambda s: s.drop_watches())
    wait_until(lambda: loop.pods.lists > lists)     # ...and the informer relists
    make_pod(core, "z", {A.WORKLOAD: "service"})
    synced(loop, core)
    assert sorted(loop.pods.snapshot()) == ["default/y", "default/z"]
    rep = step(loop, core)
    assert len(rep.bound) == 1 and len(rep.reserved) == 2   # one bind per node until the ack


class FakeClock:
    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_two_replicas_one_lease_only_the_leader_binds(core, make_loop, emu):
    make_node(core, "n1")
    coord = client.CoordinationV1Api(emu.api_client())
    clock = FakeClock()
    ea = LeaseElector(coord, NS, "elastico-placer", "placer-a", clock=clock)
    eb = LeaseElector(coord, NS, "elastico-placer", "placer-b", clock=clock)
    a = make_loop(identity="placer-a", elector=ea)
    b = make_loop(identity="placer-b", elector=eb)
    make_pod(core, "p0", {A.WORKLOAD: "service"})
    assert step(a, core).bound == ["default/p0"]
    assert step(b, core).leader is False
    ack(core, "p0")
    make_pod(core, "p1", {A.WORKLOAD: "service"})
    assert step(b, core).leader is False             # a holds a fresh lease
    assert emu.server.binds == [(NS, "p0", "n1")]
    # a stops renewing (hung or partitioned); after the lease duration b takes over
    clock.t += 16.0
    assert not ea.is_leader()                        # past its renew deadline: a stops binding
    rep = step(b, core)
    assert rep.leader and rep.bound == ["default/p1"]
    ack(core, "p1")
    make_pod(core, "p2", {A.WORKLOAD: "service"})
    rep = step(a, core)
    assert rep.leader is False and rep.bound == []
    lease = coord.read_namespaced_lease("elastico-placer", NS)
    assert lease.spec.holder_identity == "placer-b" and lease.spec.lease_transitions == 1
    assert [x[1] for x in emu.server.binds] == ["p0", "p1"]
    by = {e["involvedObject"]["name"]: e["reportingInstance"] for e in events(core)
          if e["reason"] == "Scheduled"}
    assert by == {"p0": "placer-a", "p1": "placer-b"}


class RacingApi:
    """b's view of the API: between b's read of the Lease and its replace, a runs a whole
    election step -- the interleaving of two replicas racing for one expired Lease."""

    def __init__(self, api, rival):
        self.api, self.rival = api, rival

    def read_namespaced_lease(self, *args):
        out = self.api.read_namespaced_lease(*args)
        if self.rival is not None:
            rival, self.rival = self.rival, None
            assert rival.try_acquire_or_renew() is True
        return out

    def __getattr__(self, name):
        return getattr(self.api, name)


def test_racing_candidates_for_an_expired_lease_yield_one_leader(emu):
    coord = client.CoordinationV1Api(emu.api_client())
    clock = FakeClock()
    old = LeaseElector(coord, NS, "l", "old", clock=clock)
    assert old.try_acquire_or_renew() is True
    ea = LeaseElector(coord, NS, "l", "a", clock=clock)
    racing = RacingApi(coord, None)
    eb = LeaseElector(racing, NS, "l", "b", clock=clock)
    assert (ea.try_acquire_or_renew(), eb.try_acquire_or_renew()) == (False, False)
    clock.t += 16.0                                   # "old" died; its lease expired
    racing.rival = ea
    assert eb.try_acquire_or_renew() is False         # a won between b's read and write: 409
    assert (ea.is_leader(), eb.is_leader(), old.is_leader()) == (True, False, False)
    assert coord.read_namespaced_lease("l", NS).spec.holder_identity == "a"


@pytest.mark.parametrize("key,value", [
    (A.GPU_FRACTION, "0"), (A.GPU_FRACTION, "-0.5"), (A.GPU_FRACTION, "1.5"),
    (A.GPU_FRACTION, "50m"), (A.GPU_FRACTION, "NaN"), (A.GPU_MEMORY_GIB, "-1"),
    (A.GPU_MODEL, "A100"), (A.GPU_MODEL, "V100"), (A.GPUS, "0"),
    ("elastico.io/gpu-fractoin", "0.5"), (A.WORKLOAD, "batch"),
])
def test_invalid_annotations_are_rejected_with_an_event_naming_field_and_value(
        core, make_loop, key, value):
    make_node(core, "n1")
    make_pod(core, "bad", {key: value})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [] and rep.reserved == []
    assert "nodeName" not in pod(core, "bad")["spec"]
    ev = [e for e in events(core, "bad") if e["reason"] == "Rejected"]
    assert len(ev) == 1 and ev[0]["type"] == "Warning"
    assert key in ev[0]["message"] and repr(value) in ev[0]["message"]


def test_a_pod_without_the_gpu_handle_is_rejected(core, make_loop):
    make_node(core, "n1")
    make_pod(core, "nohandle", {}, gpu=None)
    rep = step(make_loop(), core)
    assert "default/nohandle" in rep.rejected and A.GPU_RESOURCE in rep.rejected["default/nohandle"]


def test_conflicts_on_patch_and_bind_are_retried_without_double_booking(core, make_loop, emu):
    make_node(core, "n1")
    make_pod(core, "c", {A.WORKLOAD: "service"})
    loop = make_loop()
    synced(loop, core)
    emu.call(lambda s: s.inject("PATCH", "pods", status=409))
    emu.call(lambda s: s.inject("POST", "pods", "binding", status=409))
    rep = loop.run_round()
    assert rep.bound == ["default/c"]
    assert emu.server.binds == [(NS, "c", "n1")]
    assert len([e for e in events(core, "c") if e["reason"] == "Scheduled"]) == 1


def test_waiting_pods_do_not_flood_events(core, make_loop):
    make_node(core, "n1", gpus=1)
    make_pod(core, "big", {A.WORKLOAD: "service", A.GPUS: "2"})
    loop = make_loop()
    for _ in range(4):
        assert "default/big" in step(loop, core).waiting
    assert len([e for e in events(core, "big") if e["reason"] == "Waiting"]) == 1


def test_a_gang_waits_until_complete_then_gets_distinct_gpus_on_one_node(core, make_loop):
    make_node(core, "n1")
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "2"}
    make_pod(core, "w0", gang, labels={A.JOB_LABEL: "g"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.waiting["default/w0"].startswith("gang incomplete: 1 of 2")
    make_pod(core, "w1", gang, labels={A.JOB_LABEL: "g"})
    rep = step(loop, core)
    assert sorted(rep.reserved) == ["default/w0", "default/w1"] and rep.bound == ["default/w0"]
    ack(core, "w0")
    assert step(loop, core).bound == ["default/w1"]
    u0 = pod(core, "w0")["metadata"]["annotations"][A.GPU_UUIDS]
    u1 = pod(core, "w1")["metadata"]["annotations"][A.GPU_UUIDS]
    assert u0 != u1 and {u0, u1} <= set(uuids("n1", 4))
    assert pod(core, "w0")["spec"]["nodeName"] == pod(core, "w1")["spec"]["nodeName"] == "n1"


def test_a_gang_larger_than_a_node_gets_one_node_per_pod_all_bound_or_none(core, make_loop):
    # two pods of 2 GPUs each: 4 GPUs in all, more than either 2-GPU node has, so each pod
    # takes one whole node (its own part) and both are bound in the same round (one
    # unacknowledged pod per node)
    make_node(core, "n1", gpus=2)
    make_node(core, "n2", gpus=2)
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "2", A.GPUS: "2"}
    for name in ("w0", "w1"):
        make_pod(core, name, gang, labels={A.JOB_LABEL: "big"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.waiting == {} and rep.rejected == {}
    assert sorted(rep.reserved) == sorted(rep.bound) == ["default/w0", "default/w1"]
    d = rep.decisions["default/label/big"]
    assert d.status.value == "placed" and len(d.assignment.parts) == 2
    nodes = {}
    for name in ("w0", "w1"):
        p = pod(core, name)
        b = A.parse_booking(p["metadata"]["annotations"])
        # each pod carries its own part: the node it is bound to and both GPUs of that node,
        # half the gang's CPU (2 of 2 x 2 cores) and host memory (8 of 2 x 8 GiB)
        assert p["spec"]["nodeName"] == b.node
        assert b.gpu_indices == (0, 1) and b.gpu_uuids == tuple(uuids(b.node, 2))
        assert p["metadata"]["annotations"][A.GPU_UUIDS] == ",".join(uuids(b.node, 2))
        assert (b.cpu, b.mem_gib, b.gpu_share) == (2.0, 8.0, 1.0)
        nodes[name] = b.node
    assert sorted(nodes.values()) == ["n1", "n2"]
    # the next round rebuilds both bookings from the pods: nothing is placed twice
    again = step(loop, core)
    assert again.reserved == [] and again.bound == [] and again.waiting == {}

    # a second gang of the same size cannot fit whole now (no free GPU anywhere): it books
    # no pod, and each of its pods gets a Waiting Event
    for name in ("x0", "x1"):
        make_pod(core, name, gang, labels={A.JOB_LABEL: "late"})
    rep = step(loop, core)
    assert rep.reserved == [] and rep.bound == []
    assert rep.decisions["default/label/late"].status.value == "waiting"
    assert set(rep.waiting) == {"default/x0", "default/x1"}
    for name in ("x0", "x1"):
        p = pod(core, name)
        assert "nodeName" not in p["spec"] and A.BOOKING not in p["metadata"]["annotations"]
        assert [e["reason"] for e in events(core, name)] == ["Waiting"]


def test_a_gang_that_cannot_fit_whole_binds_no_pod(core, make_loop, emu):
    # three pods of 2 GPUs on two 2-GPU nodes: two pods would fit, the third never does at
    # the same time, so none is reserved (all or nothing), and every pod is told why
    make_node(core, "n1", gpus=2)
    make_node(core, "n2", gpus=2)
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "3", A.GPUS: "2"}
    for name in ("y0", "y1", "y2"):
        make_pod(core, name, gang, labels={A.JOB_LABEL: "wide"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.reserved == [] and rep.bound == [] and emu.server.binds == []
    d = rep.decisions["default/label/wide"]
    assert d.status.value == "waiting" and "gang" in d.reason and "room for 2" in d.reason
    for name in ("y0", "y1", "y2"):
        p = pod(core, name)
        assert "nodeName" not in p["spec"] and A.BOOKING not in p["metadata"]["annotations"]
        ev = [e for e in events(core, name) if e["reason"] == "Waiting"]
        assert len(ev) == 1 and "gang" in ev[0]["message"]
    # a third node makes room for the whole gang: all three pods, one per node
    make_node(core, "n3", gpus=2)
    rep = step(loop, core)
    assert sorted(rep.bound) == ["default/y0", "default/y1", "default/y2"]
    assert sorted(pod(core, n)["spec"]["nodeName"] for n in ("y0", "y1", "y2")) == ["n1", "n2", "n3"]


def test_a_reservation_waits_for_its_node_to_come_back(core, make_loop):
    make_node(core, "n1", gpus=2)
    make_pod(core, "a", {A.WORKLOAD: "service"})
    make_pod(core, "b", {A.WORKLOAD: "service"})
    loop = make_loop()
    rep = step(loop, core)
    assert len(rep.bound) == 1 and len(rep.held) == 1
    held = rep.held[0].split("/")[1]
    set_ready(core, "n1", False)
    ack(core, rep.bound[0].split("/")[1])
    rep = step(loop, core)
    assert rep.bound == [] and A.BOOKING in pod(core, held)["metadata"]["annotations"]
    set_ready(core, "n1", True)
    assert step(loop, core).bound == [f"default/{held}"]


def test_a_reservation_on_a_node_that_stays_away_is_given_up(core, make_loop):
    make_node(core, "n1", gpus=2)
    make_node(core, "n2", gpus=2)
    make_pod(core, "a", {A.WORKLOAD: "service"})
    make_pod(core, "b", {A.WORKLOAD: "service"})
    clock = FakeClock()
    loop = make_loop(clock=clock, config=LoopConfig(identity="p", watch_timeout_s=5,
                                                    reservation_timeout_s=60))
    rep = step(loop, core)
    held = rep.held[0].split("/")[1]
    node = A.parse_booking(pod(core, held)["metadata"]["annotations"]).node
    set_ready(core, node, False)
    step(loop, core)
    clock.t += 61
    step(loop, core)                                 # gives the reservation up...
    assert A.BOOKING not in pod(core, held)["metadata"]["annotations"]
    rep = step(loop, core)                           # ...and places the pod again elsewhere
    other = "n2" if node == "n1" else "n1"
    assert A.parse_booking(pod(core, held)["metadata"]["annotations"]).node == other


class Recorder:
    """A Tracer that keeps (name, attributes) of every finished span."""

    def __init__(self):
        self.spans = []

    def span(self, name, attributes=None):
        from contextlib import contextmanager

        rec = self

        @contextmanager
        def cm():
            attrs = dict(attributes or {})

            class S:
                def set_attribute(self, k, v):
                    attrs[k] = v
            yield S()
            rec.spans.append((name, attrs))
        return cm()


def test_each_bind_is_one_placer_bind_span_under_the_round(core, make_loop):
    make_node(core, "n1")
    make_pod(core, "t", {A.WORKLOAD: "service"})
    tracer = Recorder()
    loop = make_loop(tracer=tracer)
    rep = step(loop, core)
    binds = [a for n, a in tracer.spans if n == "placer.bind"]
    assert binds == [{"bind.pod": "default/t", "bind.node": "n1", "bind.round_id": rep.round_id,
                      "bind.configuration": "V100M16 x1 @1.00", "bind.outcome": "bound"}]
    assert [n for n, _ in tracer.spans].count("elastico.round") == 1


def test_elastico_schedule_binds_through_a_kubeconfig_and_stops_on_sigterm(core, emu, tmp_path):
    import signal
    import subprocess
    import sys

    make_node(core, "n1")
    make_pod(core, "cli", {A.WORKLOAD: "service"})
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "emu", "user": "u"}}]}))
    proc = subprocess.Popen([sys.executable, "-m", "elastico.cli", "schedule", "--kubeconfig",
                             str(kubeconfig), "--identity", "cli-1", "--lease-namespace", NS,
                             "--round-interval", "0.2",
                             # any free port: the default 127.0.0.1:50053 may be taken
                             "--health-address", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: pod(core, "cli")["spec"].get("nodeName") == "n1", timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    port = re.search(r"health on 127\.0\.0\.1:(\d+)", out)
    assert port and int(port.group(1)) > 0, out      # port 0 was resolved to a real one
    lease = client.CoordinationV1Api(emu.api_client()).read_namespaced_lease("elastico-placer", NS)
    assert lease.spec.holder_identity == ""           # released on shutdown: no failover wait


def test_cpu_taken_by_other_schedulers_pods_is_not_offered(core, make_loop):
    make_node(core, "n1")                              # 32 cores allocatable
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "31"}}}]}})
    make_pod(core, "needs2", {A.WORKLOAD: "service"})  # asks 2 cores: 32 - 31 = 1 is too few
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [] and "default/needs2" in rep.waiting
    core.delete_namespaced_pod("web", NS)
    assert step(loop, core).bound == ["default/needs2"]


class _RecordingTracer:
    """Span attributes by span name (the last span of each name)."""

    def __init__(self):
        self.attrs: dict[str, dict] = {}

    def span(self, name, attributes=None):
        import contextlib

        rec = self.attrs.setdefault(name, {})
        rec.clear()
        rec.update(attributes or {})

        class _S:
            def set_attribute(self, k, v):
                rec[k] = v

        return contextlib.nullcontext(_S())


def test_an_unknown_job_gets_an_event_and_a_trace_attribute_with_the_reason(core, make_loop):
    # issue 23: no stored solo profile -> the unknown-job rule; it is alone on an empty
    # node, and both the pod's Event and the round's span say so and why
    make_node(core, "n1")
    make_pod(core, "svc", {A.WORKLOAD: "service"})
    asked = []
    tracer = _RecordingTracer()

    def lookup(keys):
        asked.append(list(keys))
        return set()
    loop = make_loop(profile_lookup=lookup, tracer=tracer)
    rep = step(loop, core)
    assert rep.bound == ["default/svc"]
    assert asked == [["default/pod/svc"]]
    ev = [e for e in events(core, "svc") if e["reason"] == "UnknownProfile"]
    assert len(ev) == 1 and ev[0]["message"].startswith("unknown profile: alone on its GPUs")
    assert "worst case" in ev[0]["message"]
    span = tracer.attrs["elastico.round"]
    # the round's job id of a one-pod job is its pod key
    assert span["round.unknown_jobs"] == "default/svc"
    assert span["round.unknown_reasons"][0].startswith("default/svc: unknown profile: alone")


def test_a_profiled_job_gets_no_unknown_event(core, make_loop):
    make_node(core, "n1")
    make_pod(core, "svc", {A.WORKLOAD: "service"})
    loop = make_loop(profile_lookup=lambda keys: set(keys))
    assert step(loop, core).bound == ["default/svc"]
    assert not [e for e in events(core, "svc") if e["reason"] == "UnknownProfile"]
