"""Issue 18, failure class 3: MPS capacity while the MPS control daemon is down, and MPS
sharing across Linux users -- through the real protocol: the device plugin over its unix socket
(FakeKubelet, FakeNodeApi, the MPS manager against a fake ``nvidia-cuda-mps-control``), and
the kmock API server with the real SchedulerLoop.

Hand-worked values: two ``gpu-fraction 0.5`` training pods on a 1-GPU V100M16 node are priced
half a GPU each (the pricing splits the one GPU; the tests assert the booked share 0.5), so
the second can only go on GPU 0, next to the first, and whether it binds is decided by the MPS
rules alone.  A ``service`` with ``gpu-fraction 1`` takes a whole GPU and needs no daemon.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

import grpc
import pytest
from kubernetes.utils import parse_quantity

from elastico.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from elastico.errors import InvalidArgument, NotFound
from elastico.model import Configuration, Node
from elastico.nodeagent import SimulatedGpuBackend
from elastico.nodeagent.kube.deviceplugin import DevicePlugin, DevicePluginConfig, DevicePluginServicer
from elastico.nodeagent.inventory import InventoryPublisher
from elastico.nodeagent.kubeapi import FakeNodeApi
from elastico.nodeagent.mps import MpsManager, MpsStatus, StaticMps
from elastico.placer.kube import annotations as A
from elastico.placer.kube.inventory import node_inventory
from elastico.placer.kube.mps import UNSPECIFIED, mps_user
from elastico.placer.placement import ClusterState, FailedShapes
from elastico.predictor import JobProfile
from test_device_plugin import DECIDED, NODE, TIMEOUT, FakeKubelet, gpus, pod as dp_pod
from test_nodeagent_mps import FakeControl

pytest.importorskip("kmock")
from test_kube_loop import NS, ack, core, emu, events, make_loop, pod, step, uuids  # noqa: E402,F401

MPS = "elastico.io/mps"
DAEMON_MSG = "An instance of this daemon is already running"


# ---- node agent: the device plugin and the Node annotation ------------------------------------
@pytest.fixture
def agent(tmp_path):
    """A device plugin serving on a unix socket, kubelet registration included, with the MPS
    manager (fake control binary) and the inventory publisher wired as nodeagent_cli does."""
    d = Path(tempfile.mkdtemp(prefix="emps", dir="/tmp"))  # unix socket paths stay short
    kubelet = FakeKubelet(d / "kubelet.sock")
    backend = SimulatedGpuBackend(gpus())
    api = FakeNodeApi()
    fake = FakeControl()
    mps = MpsManager(tmp_path / "pipe", tmp_path / "log", runner=fake)
    publisher = InventoryPublisher(backend, api, NODE, refresh_s=60, mps=mps)
    mps.subscribe(publisher.publish_mps)
    cfg = DevicePluginConfig(node_name=NODE, socket_dir=str(d), devices=8, watch_s=0.1)
    servicer = DevicePluginServicer(backend, api, cfg, exists=lambda p: True, mps=mps)
    plugin = DevicePlugin(servicer)
    plugin.start()
    ch = grpc.insecure_channel(f"unix://{d / cfg.endpoint}")
    stub = api_pb2_grpc.DevicePluginStub(ch)

    def allocate():
        return stub.Allocate(api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=["elastico-gpu-0"])]), timeout=TIMEOUT)

    def node_mps():
        return json.loads(api.node_annotations[NODE][MPS])

    yield type("Agent", (), dict(api=api, fake=fake, mps=mps, publisher=publisher,
                                 allocate=staticmethod(allocate), node_mps=staticmethod(node_mps)))
    ch.close()
    plugin.stop(0)
    kubelet.stop()
    shutil.rmtree(d, ignore_errors=True)


MPS_POD = {**DECIDED, "elastico.io/gpu-uuids": "GPU-aaaa",
           "elastico.io/mps-active-thread-percentage": "50",
           "elastico.io/mps-pinned-device-mem-limit-gib": "8"}


def test_the_device_plugin_refuses_an_mps_share_while_the_daemon_is_down_and_the_node_says_so(agent):
    agent.mps.start()                                     # what the agent does at start
    assert agent.mps.check() == MpsStatus(True)
    agent.publisher.publish()
    assert agent.node_mps() == {"ready": True, "reason": ""}
    agent.fake.running = False                            # the daemon dies...
    agent.fake.start_fails = True                         # ...and cannot be restarted
    # a whole-GPU pod needs no daemon: allocated as before
    agent.api.add_pod(dp_pod("whole", "uid-w", {**DECIDED, "elastico.io/gpu-uuids": "GPU-bbbb"}))
    assert agent.allocate().container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-bbbb"
    agent.api.add_pod(dp_pod("half", "uid-h", MPS_POD))
    with pytest.raises(grpc.RpcError) as e:
        agent.allocate()
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"MPS control daemon on node {NODE} is down" in e.value.details()
    assert DAEMON_MSG in e.value.details() and "team-a/half" in e.value.details()
    assert "elastico.io/allocated" not in agent.api.pod("team-a", "half").annotations
    st = agent.node_mps()                                 # the Node says so, at once
    assert st["ready"] is False and DAEMON_MSG in st["reason"]
    agent.publisher.publish()                             # and keeps saying so on republish
    assert agent.node_mps()["ready"] is False
    agent.fake.start_fails = False                        # the daemon can start again
    c = agent.allocate().container_responses[0]           # Allocate restarts it first
    assert c.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert agent.mps.restarts == 1 and agent.node_mps() == {"ready": True, "reason": ""}


def test_the_agents_watch_publishes_a_dead_daemon_and_its_return_without_any_allocate(agent):
    agent.mps.start()
    agent.publisher.publish()                             # the inventory carries the state
    seen, stop = [], threading.Event()
    agent.fake.running, agent.fake.start_fails = False, True   # dies, cannot restart

    def log(msg):                                         # one line per change
        seen.append((msg, agent.node_mps()))
        agent.fake.start_fails = False                    # the next tick restarts it
        if len(seen) == 2:
            stop.set()
    agent.mps.watch(stop, interval_s=0.001, log=log)
    (down, st_down), (up, st_up) = seen
    assert "restart failed" in down and st_down["ready"] is False and DAEMON_MSG in st_down["reason"]
    assert up == "MPS control daemon was dead; restarted" and st_up == {"ready": True, "reason": ""}


def test_no_mps_offers_no_mps_share_at_all(tmp_path):
    """``elastico nodeagent --no-mps`` runs a StaticMps that is never ready: the Node says
    so, and the placer reads the node as one without MPS (whole GPUs still offered)."""
    api = FakeNodeApi()
    off = StaticMps(MpsStatus(False, "MPS is disabled on this node (elastico nodeagent --no-mps)"))
    InventoryPublisher(SimulatedGpuBackend(gpus()), api, NODE, mps=off).publish()
    st = json.loads(api.node_annotations[NODE][MPS])
    assert st == {"ready": False, "reason": "MPS is disabled on this node (elastico nodeagent --no-mps)"}
    inv = node_inventory({"metadata": {"name": NODE, "annotations": api.node_annotations[NODE]},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                     "allocatable": {"cpu": "8", "memory": "64Gi"}}},
                         known_models=["A100-40GB"], quantity=parse_quantity)
    assert inv.mps_down == st["reason"] and inv.node.num_gpus == 3   # still hosts whole GPUs


@pytest.mark.parametrize("flag,want", [
    ("--no-mps", {"ready": False,
                  "reason": "MPS is disabled on this node (elastico nodeagent --no-mps)"}),
    ("--mps", {"ready": True, "reason": "simulated backend: no MPS control daemon"}),
])
def test_the_nodeagent_command_publishes_its_mps_state(monkeypatch, flag, want):
    """``elastico nodeagent`` as the DaemonSet runs it (simulated GPUs, kubelet faked, the
    Kubernetes API in memory), stopped at once: the Node carries elastico.io/mps."""
    import contextlib
    import functools

    import elastico.nodeagent.inventory as inventory
    import elastico.nodeagent.kube.client as kc
    import elastico.cli.nodeagent as cli
    from elastico.cli import main

    api = FakeNodeApi()
    monkeypatch.setattr(kc, "KubernetesNodeApi", lambda: api)
    monkeypatch.setattr(inventory, "HealthWatcher",        # stops within 0.05 s, not 5
                        functools.partial(inventory.HealthWatcher, poll_s=0.05))
    stopped = threading.Event()
    stopped.set()
    monkeypatch.setattr(cli, "stop_on_signals", lambda: contextlib.nullcontext(stopped))
    monkeypatch.setenv("ELASTICO_GPU_BACKEND", "simulated")
    monkeypatch.setenv("ELASTICO_SIMULATED_GPUS", '[{"model": "V100M16", "memory_gib": 16}]')
    d = Path(tempfile.mkdtemp(prefix="ecli", dir="/tmp"))
    kubelet = FakeKubelet(d / "kubelet.sock")
    try:
        assert main(["nodeagent", "--node-name", NODE, "--plaintext", "--address", "127.0.0.1:0",
                     "--socket-dir", str(d), flag]) == 0
    finally:
        kubelet.stop()
        shutil.rmtree(d, ignore_errors=True)
    assert json.loads(api.node_annotations[NODE][MPS]) == want


@pytest.mark.parametrize("raw,why", [
    (None, None),
    ('{"ready":true,"reason":""}', None),
    ('{"ready":false,"reason":"exit 1: no daemon"}', "exit 1: no daemon"),
    ('{"ready":false}', "no reason given by the node agent"),
    ('{"ready":"no"}', "invalid elastico.io/mps annotation"),
    ("down", "invalid elastico.io/mps annotation"),
    ("[true]", "invalid elastico.io/mps annotation"),
])
def test_the_placer_reads_the_mps_annotation_and_a_bad_one_counts_as_down(raw, why):
    ann = {"elastico.io/gpu-inventory": json.dumps([{"index": 0, "uuid": "G0", "model": "T4",
                                                     "memory_gib": 15.0, "healthy": True,
                                                     "mig_mode": False}])}
    if raw is not None:
        ann[MPS] = raw
    inv = node_inventory({"metadata": {"name": "n", "annotations": ann},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                         known_models=["T4"], quantity=parse_quantity)
    if why is None:
        assert inv.mps_down is None
    else:
        assert why in inv.mps_down
        if why.startswith("invalid"):
            assert repr(raw) in inv.mps_down and '"ready"' in inv.mps_down


# ---- pods: the effective user, and bad input ---------------------------------------------------
def spec_pod(*, pod_user=None, users=(None,), gpu=(True,), init=None):
    def ctx(u):
        return {} if u is None else {"securityContext": {"runAsUser": u}}
    containers = [{"name": f"c{i}", **ctx(u),
                   "resources": {"requests": {A.GPU_RESOURCE: "1"}} if g else {}}
                  for i, (u, g) in enumerate(zip(users, gpu))]
    spec = {"containers": containers}
    if pod_user is not None:
        spec["securityContext"] = {"runAsUser": pod_user}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "securityContext": {"runAsUser": init},
                                   "resources": {"limits": {A.GPU_RESOURCE: "1"}}}]
    return {"spec": spec}


def test_the_effective_user_is_the_containers_then_the_pods_then_unspecified():
    assert mps_user(spec_pod()) == UNSPECIFIED
    assert mps_user(spec_pod(pod_user=1000)) == "user 1000"
    assert mps_user(spec_pod(pod_user=1000, users=(2000,))) == "user 2000"
    assert mps_user(spec_pod(pod_user=0)) == "user 0"
    # a sidecar without the GPU resource is no MPS client: its user does not matter
    assert mps_user(spec_pod(users=(1000, 3000), gpu=(True, False))) == "user 1000"
    assert mps_user(spec_pod(pod_user=5, users=(None, 5))) == "user 5"


@pytest.mark.parametrize("pod_spec,field,value", [
    (spec_pod(users=("1000",)), "spec.containers[c0].securityContext.runAsUser", "1000"),
    (spec_pod(users=(-1,)), "spec.containers[c0].securityContext.runAsUser", -1),
    (spec_pod(users=(True,)), "spec.containers[c0].securityContext.runAsUser", True),
    (spec_pod(users=(2**31,)), "spec.containers[c0].securityContext.runAsUser", 2**31),
    (spec_pod(pod_user=1.5), "spec.securityContext.runAsUser", 1.5),
    (spec_pod(users=(1000, 2000), gpu=(True, True)), "spec.containers[].securityContext.runAsUser",
     "c0=1000, c1=2000"),
    (spec_pod(users=(1000, None), gpu=(True, True)), "spec.containers[].securityContext.runAsUser",
     "c0=1000, c1=unset"),
    (spec_pod(users=(1000,), init=0), "spec.containers[].securityContext.runAsUser",
     "init=0, c0=1000"),
])
def test_a_bad_or_mixed_run_as_user_is_refused_with_field_and_value(pod_spec, field, value):
    with pytest.raises(InvalidArgument) as e:
        mps_user(pod_spec)
    assert (e.value.field, e.value.value) == (field, value)
    if "[]" in field:
        assert e.value.allowed.startswith("one user for every container that requests elastico.io/gpu")
    else:
        assert e.value.allowed == "an integer user ID in 0..2147483647"


# ---- placement: the rules are per job, so a failure must not be remembered for others ---------
def test_placement_keeps_users_apart_without_poisoning_other_jobs_shapes():
    st = ClusterState([Node("n0", "V100M16", 1, 16.0, 8.0, 64.0)])
    half = Configuration("half", "V100M16", 1, 0.5, 4.0, 1.0, 4.0, 1.0)
    quarter = Configuration("quarter", "V100M16", 1, 0.25, 2.0, 1.0, 4.0, 1.0)
    prof = JobProfile("t", "service", 0.0)       # no interference: only the MPS rules decide
    for jid, user in (("a", "user 1000"), ("b", "user 2000"), ("c", "user 1000")):
        st.set_mps_user(jid, user)
    assert st.place("a", half, prof, 10.0).placed
    failed = FailedShapes()
    out = st.place_unless_dominated("b", quarter, prof, 10.0, failed)
    assert not out.placed
    assert out.reason == "GPU 0 of n0 is shared under MPS by user 1000; this pod runs as user 2000"
    assert len(failed) == 0                # job-specific: not a "no room" fact for job c
    assert st.place_unless_dominated("c", half, prof, 10.0, failed).placed
    # without users (the simulator) every job shares, as before
    plain = ClusterState([Node("n0", "V100M16", 1, 16.0, 8.0, 64.0)])
    assert plain.place("a", half, prof, 10.0).placed and plain.place("b", quarter, prof, 10.0).placed


def test_the_user_of_a_gpu_follows_its_bookings_in_copies_releases_and_rebooks():
    one = [Node("n0", "V100M16", 1, 16.0, 8.0, 64.0)]
    half = Configuration("half", "V100M16", 1, 0.5, 4.0, 1.0, 4.0, 1.0)
    prof = JobProfile("t", "service", 0.0)
    st = ClusterState(one)
    st.set_mps_user("a", "user 1")
    a = st.place("a", half, prof, 10.0).assignment
    cp = st.copy()                                   # a round's copy: its own bookings
    st.release("a")                                  # GPU 0 empty again: any user may come
    st.set_mps_user("b", "user 2")
    assert st.place("b", half, prof, 10.0).placed
    cp.set_mps_user("b", "user 2")
    assert not cp.place("b", half, prof, 10.0).placed   # the copy still has user 1 there
    # rebuild_book's order: rebook first, the user after; the rule holds all the same
    rb = ClusterState(one)
    rb.rebook(a, prof, 10.0)
    rb.set_mps_user("a", "user 1")
    rb.set_mps_user("c", "user 2")
    out = rb.place("c", half, prof, 10.0)
    assert not out.placed and "shared under MPS by user 1; this pod runs as user 2" in out.reason
    rb.set_mps_user("a", None)                       # forgotten: matches anyone again
    assert rb.place("c", half, prof, 10.0).placed


def test_the_mps_setters_refuse_bad_input():
    st = ClusterState([Node("n0", "V100M16", 1, 16.0, 8.0, 64.0)])
    with pytest.raises(InvalidArgument, match="mps_user"):
        st.set_mps_user("a", "")
    with pytest.raises(InvalidArgument, match="mps_user"):
        st.set_mps_user("a", 1000)
    with pytest.raises(InvalidArgument, match="reason"):
        st.set_mps_down(0, "")
    with pytest.raises(NotFound, match="node_index"):
        st.set_mps_down(1, "down")


# ---- the live loop (kmock + SchedulerLoop) -----------------------------------------------------
def make_node(core, name, gpus, mps=None):
    inv = [{"index": i, "uuid": u, "model": "V100M16", "memory_gib": 16.0, "healthy": True,
            "mig_mode": False} for i, u in enumerate(uuids(name, gpus))]
    ann = {"elastico.io/gpu-inventory": json.dumps(inv)}
    if mps is not None:
        ann[MPS] = json.dumps(mps)
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "annotations": ann},
                      "status": {"allocatable": {"cpu": "32", "memory": "256Gi"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})


def set_mps(core, name, ready, reason=""):
    """What the node agent's publisher writes."""
    core.patch_node(name, {"metadata": {"annotations": {MPS: json.dumps(
        {"ready": ready, "reason": reason})}}}, _content_type="application/merge-patch+json")


def make_pod(core, name, fraction, *, pod_user=None, user=None, workload="training"):
    c = {"name": "main", "image": "trainer",
         "resources": {"requests": {"cpu": "2", "memory": "8Gi", A.GPU_RESOURCE: "1"}}}
    if user is not None:
        c["securityContext"] = {"runAsUser": user}
    spec = {"schedulerName": "elastico", "containers": [c]}
    if pod_user is not None:
        spec["securityContext"] = {"runAsUser": pod_user}
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "annotations": {A.WORKLOAD: workload, A.GPU_FRACTION: fraction}},
        "spec": spec})


def gpu_of(core, name):
    return pod(core, name)["metadata"]["annotations"][A.GPU_UUIDS]


def waiting_events(core, name):
    return [e["message"] for e in events(core, name) if e["reason"] == "Waiting"]


DOWN = "nvidia-cuda-mps-control -d did not start a daemon on /run/nvidia-mps (exit 1)"


def share_of(core, name):
    return A.parse_booking(pod(core, name)["metadata"]["annotations"]).gpu_share


def bind_all(loop, core, names):
    """Rounds until ``names`` are bound, acknowledging each (one bind per node at a time)."""
    for _ in names:
        for key in step(loop, core).bound:
            ack(core, key.split("/")[1])
    assert all(pod(core, n)["spec"].get("nodeName") for n in names)


def test_no_new_mps_pod_is_bound_while_the_daemon_is_down_and_it_is_bound_when_it_is_back(
        core, make_loop):
    make_node(core, "n1", gpus=1, mps={"ready": True, "reason": ""})
    loop = make_loop()
    make_pod(core, "a", "0.5")
    make_pod(core, "b", "0.5")
    bind_all(loop, core, ["a", "b"])                 # two jobs, one GPU: half each, under MPS
    assert share_of(core, "a") == share_of(core, "b") == 0.5
    core.delete_namespaced_pod("b", NS)              # half of GPU 0 is free again
    set_mps(core, "n1", False, DOWN)                 # the daemon dies; the agent says so
    make_node(core, "n2", gpus=1, mps={"ready": False, "reason": DOWN})
    make_pod(core, "c", "0.5")                       # an MPS share: only next to a fits
    make_pod(core, "w", "1", workload="service")     # a whole GPU: needs no daemon
    rep = step(loop, core)
    assert rep.bound == ["default/w"] and pod(core, "w")["spec"]["nodeName"] == "n2"
    assert "default/c" in rep.waiting and "nodeName" not in pod(core, "c")["spec"]
    want = f"MPS control daemon on node n1 is down: {DOWN}"
    assert want in rep.waiting["default/c"]
    assert any(want in m for m in waiting_events(core, "c"))
    # the pod bound before keeps its booking: no conflict, still booked on GPU 0
    assert not [e for e in events(core, "a") if e["reason"] == "BookingConflict"]
    assert pod(core, "a")["spec"]["nodeName"] == "n1"
    ack(core, "w")
    assert step(loop, core).bound == []             # still down: still waiting
    set_mps(core, "n1", True)                        # back
    assert step(loop, core).bound == ["default/c"]
    assert gpu_of(core, "c") == gpu_of(core, "a") and share_of(core, "c") == 0.5


def test_a_reserved_mps_pod_is_not_bound_while_the_daemon_is_down(core, make_loop):
    """Reserved (decision written) but not yet bound when the daemon dies: the bind is held,
    since the device plugin would refuse its Allocate; it keeps its reservation and is bound
    when the daemon is back."""
    make_node(core, "n1", gpus=1)
    loop = make_loop()
    make_pod(core, "a", "0.5")
    make_pod(core, "b", "0.5")
    rep = step(loop, core)
    assert sorted(rep.reserved) == ["default/a", "default/b"] and len(rep.held) == 1
    first, second = rep.bound[0].split("/")[1], rep.held[0].split("/")[1]
    set_mps(core, "n1", False, DOWN)
    ack(core, first)                                 # the node may take the next bind now...
    rep = step(loop, core)
    assert rep.bound == [] and rep.held == [f"default/{second}"]     # ...but not an MPS share
    assert any(f"held: MPS control daemon on node n1 is down: {DOWN}" in m
               for m in waiting_events(core, second))
    assert A.BOOKING in pod(core, second)["metadata"]["annotations"]  # still reserved
    set_mps(core, "n1", True)
    assert step(loop, core).bound == [f"default/{second}"]


def test_a_held_mps_reservation_is_given_up_after_the_timeout_and_placed_elsewhere(core, make_loop):
    """A daemon that stays down must not pin a reserved pod to its node: after
    reservation_timeout_s (as for a node that is not usable) the pod is pending again and
    goes where MPS works."""
    t = [1000.0]
    make_node(core, "n1", gpus=1)
    loop = make_loop(clock=lambda: t[0])
    make_pod(core, "a", "0.5")
    make_pod(core, "b", "0.5")
    rep = step(loop, core)
    first, second = rep.bound[0].split("/")[1], rep.held[0].split("/")[1]
    set_mps(core, "n1", False, DOWN)
    ack(core, first)
    assert step(loop, core).held == [f"default/{second}"]       # held from t = 1000
    make_node(core, "n2", gpus=1)                               # MPS works there
    t[0] += loop.config.reservation_timeout_s - 1
    assert step(loop, core).held == [f"default/{second}"]       # not yet
    t[0] += 1
    rep = step(loop, core)                                      # given up: decision cleared
    assert rep.held == [] and A.BOOKING not in pod(core, second)["metadata"]["annotations"]
    rep = step(loop, core)                                      # pending again: placed on n2
    assert rep.bound == [f"default/{second}"] and pod(core, second)["spec"]["nodeName"] == "n2"


def test_pods_of_two_users_never_share_an_mps_gpu_even_after_a_placer_restart(core, make_loop):
    make_node(core, "n1", gpus=1)
    make_pod(core, "a-1000", "0.5", pod_user=1000)
    make_pod(core, "b-2000", "0.5", user=2000)
    first = make_loop(identity="placer-a")
    rep = step(first, core)
    assert len(rep.reserved) == 1 and rep.bound == rep.reserved
    assert share_of(core, rep.bound[0].split("/")[1]) == 0.5
    placed, other = rep.bound[0], ({"default/a-1000", "default/b-2000"} - set(rep.bound)).pop()
    users = {"default/a-1000": "user 1000", "default/b-2000": "user 2000"}
    want = f"GPU 0 of n1 is shared under MPS by {users[placed]}; this pod runs as {users[other]}"
    assert want in rep.waiting[other]
    assert any(want in m for m in waiting_events(core, other.split("/")[1]))
    ack(core, placed.split("/")[1])
    first.stop()
    second = make_loop(identity="placer-b")         # a restarted placer reads the users again
    rep = step(second, core)
    assert rep.bound == [] and want in rep.waiting[other]
    assert "nodeName" not in pod(core, other.split("/")[1])["spec"]


@pytest.mark.parametrize("users", [((1000, None), (None, 1000)),   # pod-level, container-level
                                   ((None, None), (None, None))])  # both unspecified
def test_pods_of_one_user_share_the_gpu(core, make_loop, users):
    make_node(core, "n1", gpus=1)
    (pu1, cu1), (pu2, cu2) = users
    make_pod(core, "p1", "0.5", pod_user=pu1, user=cu1)
    make_pod(core, "p2", "0.5", pod_user=pu2, user=cu2)
    loop = make_loop()
    bind_all(loop, core, ["p1", "p2"])                             # one GPU, both halves
    assert gpu_of(core, "p1") == gpu_of(core, "p2") == uuids("n1", 1)[0]
    assert share_of(core, "p1") == share_of(core, "p2") == 0.5


def test_an_unspecified_user_does_not_share_with_a_specified_one(core, make_loop):
    make_node(core, "n1", gpus=1)
    make_pod(core, "a-root", "0.5")
    make_pod(core, "b-1000", "0.5", pod_user=1000)
    rep = step(make_loop(), core)
    assert len(rep.reserved) == 1
    placed, other = rep.reserved[0], ({"default/a-root", "default/b-1000"} - set(rep.reserved)).pop()
    users = {"default/a-root": UNSPECIFIED, "default/b-1000": "user 1000"}
    assert (f"GPU 0 of n1 is shared under MPS by {users[placed]}; this pod runs as {users[other]}"
            in rep.waiting[other])


def test_a_pod_whose_gpu_containers_run_as_two_users_is_rejected_naming_the_field(core, make_loop):
    """(A runAsUser that is no integer never gets this far -- the API refuses it -- and is
    covered on mps_user above.)"""
    make_node(core, "n1", gpus=1)
    gpu = {"requests": {"cpu": "1", "memory": "1Gi", A.GPU_RESOURCE: "1"}}
    core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mixed", "namespace": NS, "annotations": {A.GPU_FRACTION: "0.5"}},
        "spec": {"schedulerName": "elastico", "securityContext": {"runAsUser": 1000},
                 "containers": [{"name": "main", "resources": gpu},
                                {"name": "side", "resources": gpu,
                                 "securityContext": {"runAsUser": 2000}}]}})
    rep = step(make_loop(), core)
    msg = rep.rejected["default/mixed"]
    assert msg.startswith("spec.containers[].securityContext.runAsUser: 'main=1000, side=2000' "
                          "is not allowed (one user for every container that requests "
                          "elastico.io/gpu")
    assert [e["type"] for e in events(core, "mixed") if e["reason"] == "Rejected"] == ["Warning"]
    assert "nodeName" not in pod(core, "mixed")["spec"]
