"""Faults of issue 9 item 2 not covered elsewhere: the Kubernetes API answering 500 (list,
decision patch, Binding), the placer killed between choosing and binding, the predictor slow
past the round's deadline, a node agent restarting, the MPS control daemon dying.

Already covered (not repeated here): 409s, a dropped watch and 410 Gone, a restarted placer and
two replicas with a Lease (tests/test_kube_loop.py); pricing down and the predictor down for
the loop (tests/test_schedule_remote.py); kubelet restarting (tests/test_device_plugin.py).

After each fault, :func:`check_cluster` rebuilds the book from the API's pods with
:func:`elastico.placer.kube.bookings.rebuild_book` -- what any placer would see next -- and
asserts: no GPU double-booked (no conflict in the rebuilt book, and per GPU UUID the shares of
the pods booked on it sum to <= 1, summed here independently of the book), no booking lost
(every bound elastico pod carries a booking on the node it is bound to), no pod bound twice
(the emulator's Binding log has each pod at most once), and every pod either bound or told
why with a ``Waiting`` / ``Rejected`` Event.
"""

from __future__ import annotations

import collections
import json
import threading
import time

import grpc
import pytest

pytest.importorskip("kmock")
from kubernetes.utils import parse_quantity  # noqa: E402

from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.bookings import is_elastico, rebuild_book  # noqa: E402
from elastico.placer.kube.inventory import node_inventory  # noqa: E402
from elastico.placer.kube.loop import LoopConfig, default_policy_factory  # noqa: E402
from elastico.placer.policies import PolicyEnv  # noqa: E402
from elastico.placer.policies.common import JobCatalog  # noqa: E402
from elastico.placer.rpc.remote import RemoteSlowdownModel, open_channel  # noqa: E402
from elastico.predictor import AnalyticSlowdown  # noqa: E402
from elastico.predictor.server import build_server as predictor_server  # noqa: E402
from elastico.predictor.service import PredictorCore  # noqa: E402
from elastico.perf.throughput import ThroughputModel  # noqa: E402
from test_kube_loop import (NS, ack, core, emu, events, make_loop, make_node,  # noqa: E402,F401
                            make_pod, pod, step, synced, uuids, wait_until)

TM = ThroughputModel.bundled()
SVC = {A.WORKLOAD: "service"}
TRAIN = {A.WORKLOAD: "training", A.GPU_FRACTION: "0.5", A.WORK: "7200"}


# ---- the invariants ---------------------------------------------------------------------------
def _items(core, what) -> list[dict]:
    fn = core.list_pod_for_all_namespaces if what == "pods" else core.list_node
    return json.loads(fn(_preload_content=False).data)["items"]


def check_cluster(core, emu, *, settled: bool = True) -> dict[str, str]:
    """The invariants of the module docstring; ``settled``: every pod must also be bound or
    have been told why.  Returns pod name -> its GPU UUIDs ("" when it has none)."""
    pods = [p for p in _items(core, "pods") if is_elastico(p)]
    invs = [i for i in (node_inventory(n, known_models=TM.gpu_models(), quantity=parse_quantity)
                        for n in _items(core, "nodes")) if not isinstance(i, str)]
    cat = JobCatalog(PolicyEnv(nodes=[i.node for i in invs], throughput=TM,
                               slowdown=AnalyticSlowdown()))
    book = rebuild_book(invs, pods, slowdown_model=AnalyticSlowdown(), profile=cat.profile)
    assert book.conflicts == {}, book.conflicts
    share: dict[str, float] = collections.defaultdict(float)
    out = {}
    for p in pods:
        name = p["metadata"]["name"]
        ann = p["metadata"].get("annotations") or {}
        b = A.parse_booking(ann)
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            assert b is not None and b.node == node, f"{name}: bound to {node}, booking {b}"
        if b is not None:
            assert f"{NS}/{name}" in book.bookings      # the next placer sees it booked
            for u in b.gpu_uuids:
                share[u] += b.gpu_share
        out[name] = ann.get(A.GPU_UUIDS, "")
        if settled and not node:
            told = {e["reason"] for e in events(core, name)}
            assert told & {"Waiting", "Rejected"}, f"{name}: pending and never told why"
    assert all(s <= 1.0 + 1e-9 for s in share.values()), dict(share)
    binds = collections.Counter(n for _, n, _ in emu.server.binds)
    assert all(c == 1 for c in binds.values()), binds
    return out


def settle(loop, core, rounds: int = 8) -> None:
    """Rounds until nothing changes, acknowledging each bound pod as the device plugin would."""
    for _ in range(rounds):
        for p in _items(core, "pods"):
            ann = p["metadata"].get("annotations") or {}
            if is_elastico(p) and p["spec"].get("nodeName") and A.ALLOCATED not in ann:
                ack(core, p["metadata"]["name"])
        rep = step(loop, core)
        if not rep.bound and not rep.reserved and not rep.held:
            return
    raise AssertionError(f"not settled after {rounds} rounds: {rep}")


class FaultyApi:
    """A ``CoreV1Api`` that makes the API answer ``status`` to the ``nth`` call of ``method``
    (1-based; ``kill=True``: the call raises :class:`Killed` instead of being made, as if the
    process died right before it).  The fault is injected in the API server
    (:meth:`kube_emulator.ApiServer.inject`), so the client sees a real HTTP error."""

    def __init__(self, api, emu, method: str, nth, *, status: int = 500, kill: bool = False):
        self.api, self.emu, self.method = api, emu, method
        self.nth = set(nth) if isinstance(nth, (set, list, tuple)) else {nth}
        self.status, self.kill, self.calls = status, kill, 0

    def __getattr__(self, name):
        real = getattr(self.api, name)
        if name != self.method:
            return real

        def call(*args, **kw):
            self.calls += 1
            if self.calls in self.nth:
                if self.kill:
                    raise Killed(f"killed before {name} #{self.calls}")
                http = ("PATCH", "pods", None) if name == "patch_namespaced_pod" else \
                    ("POST", "pods", "binding")
                self.emu.call(lambda s: s.inject(*http, status=self.status))
            return real(*args, **kw)
        return call


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so no ``except Exception`` of the loop stops it."""


# ---- (a) the Kubernetes API answering 500 -----------------------------------------------------
def test_500_on_the_first_lists_delays_sync_then_everything_is_scheduled(core, make_loop, emu):
    make_node(core, "n1", gpus=2)
    make_pod(core, "a", SVC)
    make_pod(core, "b", SVC)
    emu.call(lambda s: s.inject("GET", "pods", status=500, times=2))
    loop = make_loop()                    # make_loop waits for the sync: the informer relisted
    assert emu.call(lambda s: [f[4] for f in s._faults]) == [0]      # both 500s were served
    settle(loop, core)
    gpus = check_cluster(core, emu)
    assert sorted(gpus.values()) == uuids("n1", 2)
    assert sorted(n for _, n, _ in emu.server.binds) == ["a", "b"]


def test_500_on_a_relist_keeps_the_cache_and_the_loop_recovers(core, make_loop, emu):
    make_node(core, "n1", gpus=2)
    make_pod(core, "a", SVC)
    loop = make_loop()
    settle(loop, core)
    lists = loop.pods.lists
    emu.call(lambda s: s.inject("GET", "pods", status=500, times=2))
    emu.call(lambda s: s.compact())       # the re-watch gets 410 -> relist -> 500, 500, ok
    emu.call(lambda s: s.drop_watches())
    make_pod(core, "b", SVC)
    rep = loop.run_round()                # on the cache it holds: "a" stays booked
    assert "default/a" not in rep.reserved
    wait_until(lambda: loop.pods.lists > lists)
    assert emu.call(lambda s: [f[4] for f in s._faults]) == [0]
    settle(loop, core)
    gpus = check_cluster(core, emu)
    assert sorted(gpus.values()) == uuids("n1", 2)


def test_500_on_the_second_decision_patch_of_a_gang_reserves_no_pod_then_both(core, make_loop,
                                                                             emu):
    make_node(core, "n1", gpus=2)
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "2"}
    for n in ("w0", "w1"):
        make_pod(core, n, gang, labels={A.JOB_LABEL: "g"})
    api = FaultyApi(core, emu, "patch_namespaced_pod", 2)
    loop = make_loop(api=api)
    rep = step(loop, core)
    assert api.calls == 3                 # w0 written, w1 refused (500), w0 undone
    assert rep.reserved == [] and rep.bound == [] and emu.server.binds == []
    for n in ("w0", "w1"):                # nothing half-applied
        assert A.BOOKING not in pod(core, n)["metadata"]["annotations"]
    settle(loop, core)                    # the next rounds place the gang whole
    gpus = check_cluster(core, emu)
    assert sorted([gpus["w0"], gpus["w1"]]) == uuids("n1", 2)


def test_500_on_the_patch_and_on_its_undo_leaves_a_part_that_later_rounds_complete(
        core, make_loop, emu):
    # the worst case of a failed write: the undo fails too, so w0 keeps its reservation and
    # w1 has none.  w0's reservation is in the API, so it is booked and bound like any other
    # (this round already); the next round books w0 from its annotations and places w1 as the
    # rest of the gang -- on the other GPU -- so nothing is double-booked or lost
    make_node(core, "n1", gpus=2)
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "2"}
    for n in ("w0", "w1"):
        make_pod(core, n, gang, labels={A.JOB_LABEL: "g"})
    api = FaultyApi(core, emu, "patch_namespaced_pod", {2, 3})
    loop = make_loop(api=api)
    rep = step(loop, core)
    assert rep.reserved == [] and "default/w1" not in rep.bound
    assert A.BOOKING in pod(core, "w0")["metadata"]["annotations"]      # the undo failed
    assert A.BOOKING not in pod(core, "w1")["metadata"]["annotations"]
    check_cluster(core, emu, settled=False)
    settle(loop, core)
    gpus = check_cluster(core, emu)
    assert sorted([gpus["w0"], gpus["w1"]]) == uuids("n1", 2)
    assert sorted(n for _, n, _ in emu.server.binds) == ["w0", "w1"]


def test_500_on_the_binding_keeps_the_reservation_and_binds_next_round(core, make_loop, emu):
    make_node(core, "n1", gpus=1)
    make_pod(core, "a", SVC)
    make_pod(core, "late", SVC)
    loop = make_loop()
    synced(loop, core)
    emu.call(lambda s: s.inject("POST", "pods", "binding", status=500))
    rep = loop.run_round()
    assert rep.bound == [] and emu.server.binds == []
    reserved = [k.split("/")[1] for k in rep.reserved]
    assert len(reserved) == 1
    first = pod(core, reserved[0])["metadata"]["annotations"][A.GPU_UUIDS]
    check_cluster(core, emu, settled=False)
    settle(loop, core)
    gpus = check_cluster(core, emu)
    assert gpus[reserved[0]] == first                 # the same decision, bound once
    assert emu.server.binds == [(NS, reserved[0], "n1")]
    other = "late" if reserved[0] == "a" else "a"
    assert "nodeName" not in pod(core, other)["spec"]  # one GPU: the other one waits, told so


# ---- (b) the placer killed between choosing and binding ---------------------------------------
def test_a_placer_killed_before_its_binding_is_finished_by_a_fresh_one(core, make_loop, emu):
    make_node(core, "n1", gpus=2)
    for n in ("a", "b", "c"):
        make_pod(core, n, SVC)
    api = FaultyApi(core, emu, "create_namespaced_pod_binding", 1, kill=True)
    first = make_loop(api=api, identity="placer-a")
    synced(first, core)
    with pytest.raises(Killed):
        first.run_round()
    first.stop()                                      # the process is gone with its memory
    chosen = {n: pod(core, n)["metadata"]["annotations"].get(A.GPU_UUIDS) for n in "abc"}
    reserved = sorted(n for n, u in chosen.items() if u)
    assert len(reserved) == 2 and emu.server.binds == []
    check_cluster(core, emu, settled=False)

    second = make_loop(identity="placer-b")           # fresh process state
    settle(second, core)
    gpus = check_cluster(core, emu)
    for n in reserved:                                # finished, not decided again
        assert gpus[n] == chosen[n] and pod(core, n)["spec"]["nodeName"] == "n1"
    waiting = ({"a", "b", "c"} - set(reserved)).pop()
    assert "nodeName" not in pod(core, waiting)["spec"] and gpus[waiting] == ""
    assert sorted(n for _, n, _ in emu.server.binds) == reserved


def test_a_placer_killed_between_the_decision_patches_of_a_gang(core, make_loop, emu):
    make_node(core, "n1", gpus=4)
    gang = {A.WORKLOAD: "training", A.GANG_SIZE: "2", A.GPUS: "2"}
    for n in ("w0", "w1"):
        make_pod(core, n, gang, labels={A.JOB_LABEL: "g"})
    make_pod(core, "s", SVC)
    api = FaultyApi(core, emu, "patch_namespaced_pod", 2, kill=True)
    first = make_loop(api=api, identity="placer-a")
    synced(first, core)
    with pytest.raises(Killed):
        first.run_round()
    first.stop()
    half = [n for n in ("w0", "w1") if A.BOOKING in pod(core, n)["metadata"]["annotations"]]
    assert len(half) == 1                             # one pod of the gang reserved, one not
    check_cluster(core, emu, settled=False)

    second = make_loop(identity="placer-b")
    settle(second, core)
    gpus = check_cluster(core, emu)
    taken = [u for n in ("w0", "w1", "s") for u in gpus[n].split(",") if u]
    assert len(taken) == len(set(taken))              # no GPU given twice
    assert all(pod(core, n)["spec"].get("nodeName") == "n1" for n in ("w0", "w1"))
    assert len(gpus["w0"].split(",")) == len(gpus["w1"].split(",")) == 2


# ---- (c) the predictor slow -------------------------------------------------------------------
class SlowCore(PredictorCore):
    """Answers only when ``release`` is set (at most 60 s): a predictor that hangs."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.asked = 0

    def predict(self, *args, **kw):
        self.asked += 1
        self.release.wait(60)
        return super().predict(*args, **kw)


def test_a_slow_predictor_degrades_the_round_within_its_deadline(core, make_loop, emu):
    slow = SlowCore()
    srv, port = predictor_server("127.0.0.1:0", core=slow)
    srv.start()
    try:
        make_node(core, "n1", gpus=1)
        for i in range(3):
            make_pod(core, f"t{i}", TRAIN)           # halves of one GPU: co-location asked
        # no per-call limit: only the round's deadline (2 s) bounds the predictor calls
        slowdown = RemoteSlowdownModel(open_channel(f"127.0.0.1:{port}"), timeout_s=None)
        loop = make_loop(throughput=TM, slowdown=slowdown,
                         policy_factory=default_policy_factory(TM, slowdown),
                         config=LoopConfig(identity="p", watch_timeout_s=5, round_timeout_s=2.0))
        synced(loop, core)
        t0 = time.monotonic()
        rep = loop.run_round()
        took = time.monotonic() - t0
        assert slow.asked >= 1 and not slow.release.is_set()
        # the predictor never answered: the round went on with the analytic model rather
        # than hanging for the 60 s the predictor would take (bound: deadline + slack)
        assert took < 2.0 + 10.0, took
        assert rep.abandoned == "" and rep.reserved and len(rep.bound) == 1
        placed = [d for d in rep.decisions.values() if d.assignment is not None]
        assert placed and {d.status.value for d in placed} == {"degraded"}
        assert all("predictor DEADLINE_EXCEEDED" in d.reason for d in placed)
        settle(loop, core)
        check_cluster(core, emu)
    finally:
        slow.release.set()
        srv.stop(0)


# ---- (d) a node agent restarting --------------------------------------------------------------
def test_a_restarted_node_agent_republishes_and_allocates_only_what_is_pending(tmp_path):
    import shutil
    import tempfile
    from pathlib import Path

    from elastico.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
    from elastico.nodeagent import SimulatedGpuBackend
    from elastico.nodeagent.kube.deviceplugin import DevicePlugin, DevicePluginConfig, DevicePluginServicer
    from elastico.nodeagent.inventory import HealthWatcher, InventoryPublisher
    from elastico.nodeagent.kubeapi import FakeNodeApi
    from test_device_plugin import DECIDED, NODE, TIMEOUT, FakeKubelet, gpus, pod as dp_pod

    d = Path(tempfile.mkdtemp(prefix="eflt", dir="/tmp"))   # unix socket paths stay short
    kubelet = FakeKubelet(d / "kubelet.sock")
    backend = SimulatedGpuBackend(gpus())                     # the node's GPUs outlive the agent
    api = FakeNodeApi()                                       # the API server's view of the node
    cfg = DevicePluginConfig(node_name=NODE, socket_dir=str(d), devices=8, watch_s=0.1)

    def agent():
        """What ``elastico nodeagent`` starts (nodeagent_cli.run), with this test's parts."""
        servicer = DevicePluginServicer(backend, api, cfg, exists=lambda p: True)
        watcher = HealthWatcher(backend, poll_s=0.1)
        publisher = InventoryPublisher(backend, api, NODE, refresh_s=60)
        watcher.subscribe(publisher.publish)
        watcher.subscribe(servicer.update)
        watcher.start()
        plugin = DevicePlugin(servicer)
        plugin.start()
        return plugin, watcher, publisher

    def allocate():
        with grpc.insecure_channel(f"unix://{d / cfg.endpoint}") as ch:
            return api_pb2_grpc.DevicePluginStub(ch).Allocate(api_pb2.AllocateRequest(
                container_requests=[api_pb2.ContainerAllocateRequest(
                    devices_ids=["elastico-gpu-0"])]), timeout=TIMEOUT)

    def inventory():
        return json.loads(api.node_annotations.get(NODE, {}).get("elastico.io/gpu-inventory", "[]"))

    parts = agent()
    try:
        wait_until(lambda: len(inventory()) == 3, timeout=TIMEOUT)
        assert kubelet.requests.get(timeout=TIMEOUT).resource_name == "elastico.io/gpu"
        api.add_pod(dp_pod("first", "uid-1", {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa"}))
        assert allocate().container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"
        assert api.pod("team-a", "first").annotations["elastico.io/allocated"] == "uid-1/main"
    finally:
        for p in parts:
            p.stop()
    # down: GPU 1 fails meanwhile, and the node's annotation is lost (say, the Node was
    # re-created); a pod is bound to the node while no agent runs
    backend.set_health(1, False)
    api.node_annotations.clear()
    api.add_pod(dp_pod("second", "uid-2", {**DECIDED, "elastico.io/gpu-uuids": "GPU-bbbb"}))
    parts = agent()
    try:
        wait_until(lambda: len(inventory()) == 3, timeout=TIMEOUT)    # republished at start
        assert [g["healthy"] for g in inventory()] == [True, False, True]
        assert kubelet.requests.get(timeout=TIMEOUT).endpoint == cfg.endpoint   # re-registered
        with pytest.raises(grpc.RpcError) as e:       # GPU-bbbb is unhealthy: refused, unacked
            allocate()
        assert "unhealthy" in e.value.details()
        assert "elastico.io/allocated" not in api.pod("team-a", "second").annotations
        backend.set_health(1, True)
        c = allocate().container_responses[0]         # the pending pod, not the acked one
        assert c.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-bbbb"
        assert api.pod("team-a", "second").annotations["elastico.io/allocated"] == "uid-2/main"
        assert api.pod("team-a", "first").annotations["elastico.io/allocated"] == "uid-1/main"
        with pytest.raises(grpc.RpcError) as e:        # nothing left: no pod allocated twice
            allocate()
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "found 0" in e.value.details()
    finally:
        for p in parts:
            p.stop()
        kubelet.stop()
        shutil.rmtree(d, ignore_errors=True)


# ---- (e) the MPS control daemon dying ---------------------------------------------------------
def test_a_dead_mps_daemon_is_restarted_with_the_limits_it_had(tmp_path):
    from elastico.nodeagent.mps import MpsManager
    from test_nodeagent_mps import FakeControl

    fake = FakeControl()
    m = MpsManager(tmp_path / "pipe", tmp_path / "log", runner=fake)
    m.start()
    m.set_default_active_thread_percentage(30)
    m.set_default_device_pinned_mem_limit(0, 8)
    m.set_default_device_pinned_mem_limit(1, 2.5)
    m.set_active_thread_percentage(4242, 50)       # a server the new daemon still lists
    m.set_active_thread_percentage(9999, 20)       # a server that died with the daemon
    assert m.ensure_running() is False
    fake.running = False                           # the daemon dies
    fake.log.clear()
    assert m.ensure_running() is True and m.restarts == 1
    assert [a for a, _, _ in fake.log if a[1:] == ("-d",)] == [(m.binary, "-d")]
    sent = [c for c in fake.commands() if c.startswith("set_")]
    assert sent == ["set_default_active_thread_percentage 30",
                    "set_default_device_pinned_mem_limit 0 8G",
                    "set_default_device_pinned_mem_limit 1 2560M",
                    "set_active_thread_percentage 4242 50"]
    fake.running = False                           # dies again: the dead server stays forgotten
    fake.log.clear()
    assert m.ensure_running() is True and m.restarts == 2
    assert [c for c in fake.commands() if c.startswith("set_")] == sent
