"""A live ElastiCo cluster in one process, driven step by step: the kmock API server
(:class:`kube_emulator.Emulator`), the real placer loop
(:class:`elastico.placer.kube.loop.SchedulerLoop`), and per node the real node agent over the
simulated GPU backend -- the health watcher, the ``elastico.io/gpu-inventory`` publisher, the
kubelet device plugin on its unix socket (registered with a fake kubelet) and the MPS manager
(over a fake ``nvidia-cuda-mps-control``) -- all talking to the API server through the official
``kubernetes`` client (the agent through :class:`elastico.nodeagent.kube.client.KubernetesNodeApi`,
the adapter the DaemonSet uses).

Nothing runs on its own: the harness moves time forward.  :meth:`LiveCluster.round` waits until
the placer's caches hold the API's state (as ``step()`` in tests/test_kube_loop.py does) and runs
one round; :meth:`LiveCluster.kubelet_step` plays kubelet on every Ready node: for each pod
bound there and not yet started it calls the device plugin's ``Allocate`` over the plugin's
socket (as kubelet's device manager does; the plugin finds the pod and writes
``elastico.io/allocated``) and then sets the pod ``Running``.  A failed Allocate leaves the pod
pending; kubelet tries again at its next step.  Deleting a pod removes it (no finalizers: its
containers are gone with it); a finished pod is ``Succeeded``.  Faults: a GPU's health (the
backend changes, the agent's health watcher notices and republishes), a node NotReady/Ready, a
placer restart (a fresh SchedulerLoop listing the API), dropped watches and a compaction
(informers re-watch, or relist on 410 Gone), and the MPS control daemon dying (and failing to
restart) and coming back.

:meth:`LiveCluster.violations` checks the cluster's invariants, computed from the API's pods and
nodes and from what the device plugin handed out -- never from the placer's own structures (the
placer's view is the book :func:`elastico.placer.kube.bookings.rebuild_book` rebuilds from the
API, what any placer would see next).  A pod's *booking* is its ``elastico.io/booking``
annotation; the GPUs of a node are the backend's (UUID, memory as NVML reports it).

0. a round never raises (one job's error must not stop scheduling; checked by the caller: the
   exception propagates);
1. no GPU over-committed: per GPU UUID, the shares of the non-terminal pods whose booking names
   it sum to <= 1, a whole-GPU booking is alone there, their booked GPU memory is <= the GPU's
   memory, the UUIDs are GPUs of the booked node, and an MPS-shared GPU serves pods of one
   ``runAsUser`` only (MPS runs one server per user);
2. every bound pod keeps its booking: its decision annotations are those it was bound with,
   its booking names the node it is bound to, and -- while that node is usable (Ready, with an
   inventory) -- the rebuilt book holds it, not in conflict;
3. the device plugin's view equals the placer's: for every pod the plugin allocated, the GPU
   UUIDs, MPS active thread percentage and pinned device memory limit it handed out equal the
   pod's booking (a share is enforced as exactly that many percent, the memory limit is the
   booked GiB rounded down to whole MiB), and an Allocate acknowledges the pod kubelet asked
   for and no other;
4. the MPS daemon's health is honoured: while a node's MPS control daemon is down (and the
   agent has seen it), the device plugin hands out no MPS share there and the placer books no
   new MPS share there;
5. a pod of fixed shape -- a ``service``, ``shape-family: fixed``, or a gang member (docs:
   they keep their requested shape) -- is booked with exactly ``elastico.io/gpus`` GPUs at
   ``elastico.io/gpu-fraction``;
7. offline LLM inference is low priority, and the loop carries the priority rule out
   (docs/annotations.md, "Priority"): a pod leaves the API only when the harness deleted or
   finished it or the placer evicted it through the ``policy/v1`` Eviction API; the placer
   evicts a pod at most once, only an offline LLM inference pod (``llm-*`` annotations) that
   kubelet started at least ``min_run_s`` seconds (the placer's clock) before the round; in
   the round that evicts it, its GPUs are given to no one (the pods booked in that round fit
   beside the evicted pod's booking: it holds its GPUs until it is gone); and the book
   rebuilt from the API sees every booked LLM inference pod as low priority and no other;
8. MIG lending (a node whose agent follows the bookings' MIG mode): no GPU is booked in both
   modes at once, and every pod the device plugin allocated finds its GPUs in the mode its
   booking names (normal mode for a whole GPU or an MPS share; MIG mode with the booked
   instance for a MIG pod) -- the device plugin's view, the mode included, equals the placer's;
6. (:meth:`LiveCluster.settle`, after the faults are cleared and rounds run until nothing
   changes) every pending pod has been told why (an Event on it: ``Waiting``, ``Rejected``,
   or any other reason but ``Scheduled``), and no single-pod whole-GPU request waits while a
   healthy GPU nobody books, in normal mode, sits on a Ready node with the host CPU and memory
   the pod asks.

Who uses it: tests/test_live_properties.py.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import grpc
from kubernetes import client
from kubernetes.utils import parse_quantity

from elastico.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from elastico.errors import ElasticoError
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
from elastico.nodeagent.kube.deviceplugin import DevicePlugin, DevicePluginConfig, DevicePluginServicer
from elastico.nodeagent.inventory import HealthWatcher, InventoryPublisher
from elastico.nodeagent.kube.client import KubernetesNodeApi
from elastico.nodeagent.mps import MpsManager
from elastico.placer.kube import annotations as A
from elastico.placer.kube.bookings import is_elastico, is_terminal, rebuild_book
from elastico.placer.kube.inventory import node_inventory
from elastico.placer.kube.loop import LoopConfig, SchedulerLoop
from elastico.placer.policies import PolicyEnv
from elastico.placer.policies.common import JobCatalog
from elastico.placer.policies.priority import low_priority
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel
from kube_emulator import Emulator
from test_device_plugin import FakeKubelet
from test_nodeagent_mps import FakeControl

__all__ = ["NS", "NodeSpec", "NodeAgent", "LiveCluster", "Violation", "VIOLATIONS"]

log = logging.getLogger(__name__)
NS = "default"
TM = ThroughputModel.bundled()
TIMEOUT = 10.0
MPS_PCT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
#: What every pod requests of its node's host (one container): CPU cores, memory GiB.
POD_CPU, POD_MEM_GIB = 2.0, 8.0
NODE_CPU, NODE_MEM_GIB = 32.0, 256.0


@dataclass(frozen=True)
class NodeSpec:
    """A node: ``gpus`` GPUs of ``model`` with ``memory_gib`` each (NVML's total); ``mig``:
    every GPU starts in MIG mode (the operator's setting, the node's home mode); ``follow``:
    its agent runs with ``--follow-mig-mode`` (the placer may lend it, MIG lending)."""

    name: str
    model: str
    gpus: int
    memory_gib: float
    mig: bool = False
    follow: bool = False

    def gpu_infos(self) -> list[GpuInfo]:
        return [GpuInfo(i, f"GPU-{self.name}-{i}", self.model, self.memory_gib,
                        mig_mode=self.mig) for i in range(self.gpus)]


class Violation(AssertionError):
    """An invariant of the module docstring broke; the message lists every broken one.  One
    subclass per invariant (``VIOLATIONS[n]``, raised for the lowest-numbered one broken), so
    that hypothesis reports a minimal example for each invariant separately."""


VIOLATIONS = {n: type(f"Violation{n}", (Violation,), {"__module__": __name__}) for n in range(1, 9)}


class _OneTurn:
    """A stop event for ``MpsManager.watch`` that lets exactly one turn run."""

    def __init__(self):
        self.turns = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.turns += 1
        return self.turns > 1

    def is_set(self) -> bool:
        return self.turns > 1


class NodeAgent:
    """One node's agent, assembled as ``elastico nodeagent`` assembles it
    (:func:`elastico.cli.nodeagent.run`): backend -> health watcher -> (inventory publisher,
    device plugin); the MPS manager watched alongside.  The watcher's thread is not started:
    :meth:`health_tick` is one turn of it (the same ``check()``), and :meth:`mps_tick` one
    turn of ``MpsManager.watch``, so the harness decides when the agent notices a change."""

    def __init__(self, emu: Emulator, spec: NodeSpec, backend: SimulatedGpuBackend | None = None,
                 follow: bool | None = None):
        # backend: the node's GPUs as a restarted agent finds them (modes, MIG instances);
        # follow: --follow-mig-mode (None = the spec's)
        self.spec, self.name = spec, spec.name
        self.follow = spec.follow if follow is None else follow
        self.dir = Path(tempfile.mkdtemp(prefix="elive", dir="/tmp"))   # short socket paths
        self.backend = backend or SimulatedGpuBackend(spec.gpu_infos())
        self.memory = {g.uuid: g.memory_total_gib for g in spec.gpu_infos()}
        self.api = KubernetesNodeApi(client.CoreV1Api(emu.api_client()))
        self.kubelet = FakeKubelet(self.dir / "kubelet.sock")
        self.cfg = DevicePluginConfig(node_name=spec.name, socket_dir=str(self.dir), devices=16,
                                      mps_pipe_dir=str(self.dir / "mps-pipe"),
                                      mps_log_dir=str(self.dir / "mps-log"), watch_s=0.2,
                                      follow_mig_mode=self.follow)
        # The MPS manager, watched as `elastico nodeagent` watches it (mps_tick).  What the
        # agent does with the daemon's health (inventory, device plugin) must be wired here
        # exactly as nodeagent_cli.run wires it: invariant 4 checks that it reaches the placer
        # and the device plugin.
        self.mps_control = FakeControl()
        self.mps = MpsManager(self.cfg.mps_pipe_dir, self.cfg.mps_log_dir, runner=self.mps_control)
        self.mps.start()
        self.mps.check()
        self.mps_down = False          # the agent has seen its MPS daemon down (mps_tick)
        self.publisher = InventoryPublisher(self.backend, self.api, spec.name, refresh_s=3600,
                                            mps=self.mps, follow_mig_mode=self.follow)
        self.servicer = DevicePluginServicer(self.backend, self.api, self.cfg,
                                             exists=lambda p: True, mps=self.mps,
                                             on_mode_change=self.publisher.publish)
        self.watcher = HealthWatcher(self.backend, poll_s=0.05)
        self.watcher.subscribe(self.publisher.publish)
        self.watcher.subscribe(self.servicer.update)
        self.mps.subscribe(self.publisher.publish_mps)
        self.plugin = DevicePlugin(self.servicer)
        self.plugin.start()
        self.channel = grpc.insecure_channel(f"unix://{self.plugin.socket}")
        self.stub = api_pb2_grpc.DevicePluginStub(self.channel)
        self.health_tick()             # the watcher's first turn publishes the inventory

    def health_tick(self) -> None:
        self.watcher.check()

    def set_health(self, index: int, healthy: bool) -> None:
        """An XID (or its clearing) on GPU ``index``; the agent notices at once."""
        self.backend.set_health(index, healthy)
        self.health_tick()

    def mps_tick(self) -> None:
        """One turn of the agent's MPS watch (``MpsManager.watch``, the loop ``elastico
        nodeagent`` runs): restart a dead daemon, say so when it cannot."""
        said: list[str] = []
        self.mps.watch(_OneTurn(), 0.0, said.append)
        self.mps_down = not self.mps.status.ready
        for msg in said:
            log.info("node %s: %s", self.name, msg)

    def set_mps(self, alive: bool) -> None:
        """The MPS control daemon dies and cannot be restarted (``alive`` False), or can be
        again (True); the agent's watch notices at its next turn, which is now."""
        if not alive:
            self.mps_control.running = False
        self.mps_control.start_fails = not alive
        self.mps_tick()

    def allocate(self) -> tuple[dict[str, str] | None, str]:
        """kubelet's Allocate for one container asking one handle: (envs, "") or (None, why)."""
        try:
            resp = self.stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=["elastico-gpu-0"])]), timeout=TIMEOUT)
        except grpc.RpcError as e:
            return None, f"{e.code().name}: {e.details()}"
        return dict(resp.container_responses[0].envs), ""

    def close(self) -> None:
        self.channel.close()
        self.plugin.stop(0)
        self.kubelet.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class _Allocation:
    uid: str
    node: str
    envs: dict[str, str]


@dataclass
class _Record:
    """What the harness remembers between steps (the invariants' history)."""

    bound_with: dict[str, tuple[str, dict]] = field(default_factory=dict)   # key -> (uid, ann)
    started: dict[str, float] = field(default_factory=dict)                # key -> start (clock)
    evicted: set[str] = field(default_factory=set)                          # keys evicted
    deleted: set[str] = field(default_factory=set)                          # keys the harness removed
    allocations: dict[str, _Allocation] = field(default_factory=dict)      # key -> Allocate
    problems: list[tuple[int, str]] = field(default_factory=list)          # seen during steps


def _key(pod: dict) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace') or NS}/{m.get('name')}"


def _user(pod: dict) -> int | None:
    """The Linux user the pod's GPU containers run as (Kubernetes' rule: a container's own
    securityContext.runAsUser, else the pod's); None when unset.  Independent of the
    placer's own code (elastico.placer.kube.mps)."""
    spec = pod.get("spec") or {}
    default = (spec.get("securityContext") or {}).get("runAsUser")
    users = {(c.get("securityContext") or {}).get("runAsUser", default)
             for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
             if A.GPU_RESOURCE in ((c.get("resources") or {}).get("requests") or {})}
    return next(iter(users)) if len(users) == 1 else default


def _pod_spec(pod: dict) -> A.PodSpec:
    """A pod's parsed annotations, as the placer parses them (``rebuild_book``'s ``job_of``)."""
    return A.parse_pod_annotations(pod["metadata"].get("annotations"),
                                   gpu_models=TM.gpu_models(), job_types=TM.job_types())


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _gib(text: str) -> float:
    """``16G`` / ``2560M`` (an MPS pinned memory amount) -> GiB."""
    if text.endswith("G"):
        return float(text[:-1])
    if text.endswith("M"):
        return float(text[:-1]) / 1024
    raise ValueError(text)


def _requested(ann: dict) -> tuple[int, float, bool] | None:
    """(GPUs, share, fixed shape) a pod's annotations ask (docs/annotations.md: defaults 1 GPU,
    fraction 1; a ``service``, ``shape-family: fixed`` or a gang of several pods keeps its
    shape); None when they do not read as numbers (the placer rejects such a pod)."""
    try:
        gpus = int(ann.get(A.GPUS, "1"))
        share = float(ann.get(A.GPU_FRACTION, "1"))
        gang = int(ann.get(A.GANG_SIZE, "1"))
    except ValueError:
        return None
    fixed = ann.get(A.WORKLOAD) == "service" or ann.get(A.SHAPE_FAMILY) == "fixed" or gang > 1
    return gpus, share, fixed


class LiveCluster:
    """The API server, the placer and one :class:`NodeAgent` per node of ``nodes`` (module
    docstring).  :meth:`close` stops everything."""

    def __init__(self, nodes: list[NodeSpec], *, identity: str = "placer-a",
                 unknown: bool = False, min_run_s: float = 300.0):
        # unknown: the placer's profile lookup finds no job profiled (issue 23's unknown-job
        # rule on for every job)
        self.profile_lookup = (lambda keys: set()) if unknown else None
        self.emu = Emulator().start()
        self.core = client.CoreV1Api(self.emu.api_client())
        self.identity = identity
        # the placer's clock (seconds since the epoch): wall time plus what advance() added
        self.min_run_s = min_run_s
        self.offset = 0.0
        self.rec = _Record()
        self.names = 0
        self.rounds = 0
        self.agents: dict[str, NodeAgent] = {}
        self.loop: SchedulerLoop | None = None
        try:
            for spec in nodes:
                self._create_node(spec.name)
                self.agents[spec.name] = NodeAgent(self.emu, spec)
            self.restart_placer()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    def _create_node(self, name: str) -> None:
        """What kubelet does when it registers the node (the agent adds the inventory)."""
        self.core.create_node({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": f"{NODE_CPU:g}", "memory": f"{NODE_MEM_GIB:g}Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}})

    def _stop_loop(self) -> None:
        loop, self.loop = self.loop, None
        if loop is None:
            return
        # an informer leaves its watch only when the stream ends: end them until it has
        t = threading.Thread(target=loop.stop, daemon=True)
        t.start()
        while t.is_alive():
            self.emu.call(lambda s: s.drop_watches())
            t.join(0.05)

    def restart_placer(self) -> None:
        """The placer process dies and a fresh one starts (nothing kept in memory)."""
        self._stop_loop()
        loop = SchedulerLoop(self.core, throughput=TM, profile_lookup=self.profile_lookup,
                             config=LoopConfig(identity=self.identity, watch_timeout_s=60,
                                               min_run_s=self.min_run_s), clock=self.now)
        loop.start()
        self.loop = loop
        if not loop.wait_synced(TIMEOUT):
            raise RuntimeError("the placer's informers did not sync")

    def restart_agent(self, node: str, follow: bool | None = None) -> None:
        """Node ``node``'s agent process restarts (``follow``: now with or without
        ``--follow-mig-mode``; None = as before): the GPUs keep their modes and MIG instances,
        the device plugin registers anew, the inventory is published again."""
        old = self.agents[node]
        old.close()
        self.agents[node] = NodeAgent(self.emu, old.spec, backend=old.backend,
                                      follow=old.follow if follow is None else follow)

    def now(self) -> float:
        """The cluster's time (the placer's clock, kubelet's ``startTime``)."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Time passes (rounds, guarantees and Event intervals see it)."""
        self.offset += seconds

    def drain(self) -> int:
        """kubelet finishes terminating every pod being deleted (their containers are gone):
        its finalizers are removed and the pod with them.  Returns how many."""
        n = 0
        for p in self.pods():
            meta = p["metadata"]
            if meta.get("deletionTimestamp"):
                self.core.patch_namespaced_pod(meta["name"], NS, {"metadata": {"finalizers": None}},
                                               _content_type="application/merge-patch+json")
                try:
                    self.core.delete_namespaced_pod(meta["name"], NS)
                except client.ApiException as e:
                    if e.status != 404:
                        raise
                n += 1
        return n

    def close(self) -> None:
        self._stop_loop()
        for a in self.agents.values():
            a.close()
        self.emu.stop()

    # ------------------------------------------------------------------ API helpers
    def _items(self, what: str) -> list[dict]:
        fn = {"pods": self.core.list_pod_for_all_namespaces, "nodes": self.core.list_node,
              "events": self.core.list_event_for_all_namespaces}[what]
        return json.loads(fn(_preload_content=False).data)["items"]

    def pods(self) -> list[dict]:
        return self._items("pods")

    def nodes(self) -> list[dict]:
        return self._items("nodes")

    @staticmethod
    def booking(pod: dict) -> A.PodBooking | None:
        """The pod's booking (None when it has none or an unreadable one)."""
        try:
            return A.parse_booking((pod.get("metadata") or {}).get("annotations"))
        except ElasticoError:
            return None

    def synced(self) -> list[dict]:
        """Wait until the placer's caches hold exactly the API's pods and nodes; returns the
        API's pods."""
        loop = self.loop
        t0 = time.monotonic()
        while True:
            pods = self.pods()
            want = {_key(p): p["metadata"]["resourceVersion"] for p in pods}
            have = {k: v["metadata"]["resourceVersion"] for k, v in loop.pods.snapshot().items()}
            if want == have:
                nodes = {n["metadata"]["name"]: n["metadata"]["resourceVersion"]
                         for n in self.nodes()}
                if nodes == {k: v["metadata"]["resourceVersion"]
                             for k, v in loop.nodes.snapshot().items()}:
                    return pods
            if time.monotonic() - t0 > 30:
                raise AssertionError("the placer's caches did not catch up with the API")
            time.sleep(0.01)

    # ------------------------------------------------------------------ users
    def create_pod(self, annotations: dict[str, str], *, labels: dict | None = None,
                   user: int | None = None, finalizers: list[str] | None = None) -> str:
        """A pod for the elastico scheduler (one container requesting ``elastico.io/gpu: 1``,
        :data:`POD_CPU` cores, :data:`POD_MEM_GIB` GiB); ``user``: the pod's
        ``securityContext.runAsUser``.  Returns its name (``p01``, ``p02``, ...)."""
        self.names += 1
        name = f"p{self.names:02d}"          # names sort as they were created
        spec = {"schedulerName": "elastico",
                "containers": [{"name": "main", "image": "trainer", "resources": {"requests": {
                    "cpu": f"{POD_CPU:g}", "memory": f"{POD_MEM_GIB:g}Gi", A.GPU_RESOURCE: "1"}}}]}
        if user is not None:
            spec["securityContext"] = {"runAsUser": user}
        self.core.create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "annotations": dict(annotations),
                         "labels": labels or {}, "finalizers": list(finalizers or [])},
            "spec": spec})
        return name

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, NS)
        self.rec.deleted.add(f"{NS}/{name}")
        self._forget(f"{NS}/{name}")

    def finish_pod(self, name: str, phase: str = "Succeeded") -> None:
        """The pod's containers exit: kubelet reports the phase; it holds no GPU any more."""
        self.core.patch_namespaced_pod_status(name, NS, {"status": {"phase": phase}})
        self._forget(f"{NS}/{name}")

    def _forget(self, key: str) -> None:
        self.rec.bound_with.pop(key, None)
        self.rec.allocations.pop(key, None)

    # ------------------------------------------------------------------ faults
    def set_ready(self, node: str, ready: bool) -> None:
        self.core.patch_node_status(node, {"status": {"conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}},
            _content_type="application/merge-patch+json")

    def drop_watches(self, compact: bool = False) -> None:
        """Every watch stream ends; with ``compact`` the event log is compacted first, so a
        re-watch from any resourceVersion seen gets 410 Gone and must relist."""
        if compact:
            self.emu.call(lambda s: s.compact())
        self.emu.call(lambda s: s.drop_watches())

    # ------------------------------------------------------------------ time passes
    def round(self):
        """One placer round on caches that hold the API's state; returns its report.  An
        exception of the round propagates (invariant 0)."""
        pods = self.synced()
        down = {n for n, a in self.agents.items() if a.mps_down}
        before = {_key(p): p["metadata"]["uid"] for p in pods
                  if A.BOOKING in (p["metadata"].get("annotations") or {})}
        t = self.now()
        n_evicted = len(self.emu.server.evictions)
        rep = self.loop.run_round()
        self.rounds += 1
        self._check_evictions(pods, before, self.emu.server.evictions[n_evicted:], t)
        for p in self.pods():
            key = _key(p)
            if before.get(key) == p["metadata"]["uid"]:
                continue
            b = self.booking(p)
            if b is not None and b.node in down and b.mig_profile is None and b.gpu_share < 1:
                self.rec.problems.append((4, f"{key}: booked a {b.gpu_share:g} MPS share on "
                                             f"{b.node} while its MPS control daemon is down"))
        return rep

    def _check_evictions(self, pods: list[dict], before: dict[str, str], evicted: list,
                         t: float) -> None:
        """Invariant 7 for the round just run at time ``t``: ``pods`` the API's pods before it,
        ``before`` their keys with a booking, ``evicted`` the Evictions it asked for."""
        prev = {_key(p): p for p in pods}
        victims = []
        for ns, name in evicted:
            key = f"{ns}/{name}"
            p = prev.get(key)
            if key in self.rec.evicted:
                self.rec.problems.append((7, f"{key}: evicted a second time"))
            self.rec.evicted.add(key)
            if p is None:
                self.rec.problems.append((7, f"{key}: evicted, but it did not exist"))
                continue
            ann = p["metadata"].get("annotations") or {}
            if A.LLM_MODEL not in ann and A.LLM_MODEL_CONFIG not in ann:
                self.rec.problems.append((7, f"{key}: evicted, but it is not offline LLM "
                                             "inference (normal priority)"))
            since = self.rec.started.get(key)
            if since is None or t - since < self.min_run_s - 1e-6:
                self.rec.problems.append((7, f"{key}: evicted at {t:.0f} having run "
                                             f"{'never' if since is None else f'{t - since:.0f} s'}"
                                             f" (minimum guaranteed run {self.min_run_s:g} s)"))
            b = self.booking(p)
            if b is not None:
                victims.append((key, b))
            self._forget(key)
        after = self.pods()
        gone = sorted(set(prev) - {_key(p) for p in after} - self.rec.deleted - self.rec.evicted)
        for key in gone:
            self.rec.problems.append((7, f"{key}: gone from the API, but neither deleted by the "
                                         "harness nor evicted by the placer"))
        if victims:
            # the evicted pods hold their GPUs until they are gone: what was booked this round
            # must fit beside them
            new = [p for p in after if _key(p) not in before and not is_terminal(p)
                   and self.booking(p) is not None]
            share: dict[str, float] = defaultdict(float)
            who: dict[str, list[str]] = defaultdict(list)
            for key, b in victims:
                for u in b.gpu_uuids:
                    share[u] += b.gpu_share
                    who[u].append(f"{key}@{b.gpu_share:g} (evicted)")
            live = [(_key(p), self.booking(p)) for p in after if is_elastico(p)
                    and not is_terminal(p) and self.booking(p) is not None]
            for key, b in live:
                for u in b.gpu_uuids:
                    if u in share:
                        share[u] += b.gpu_share
                        who[u].append(f"{key}@{b.gpu_share:g}")
            newkeys = {_key(p) for p in new}
            for u, total in sorted(share.items()):
                if total > 1.0 + 1e-9 and any(w.split("@")[0] in newkeys for w in who[u]):
                    self.rec.problems.append((7, f"GPU {u} given away in the round that evicted "
                                                 f"its pod: {who[u]}"))

    def kubelet_step(self) -> int:
        """kubelet on every Ready node: Allocate and start each bound, not yet started pod
        (oldest first), as kubelet admits pods.  Returns how many pods it started."""
        ready = {n["metadata"]["name"] for n in self.nodes() if _ready(n)}
        pods = self.pods()
        started = 0
        for p in sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), _key(p))):
            node = (p.get("spec") or {}).get("nodeName")
            phase = (p.get("status") or {}).get("phase", "Pending")
            if not node or node not in ready or phase != "Pending" \
                    or p["metadata"].get("deletionTimestamp") or node not in self.agents:
                continue
            after = self._start(p, self.agents[node], pods)
            if after is not None:
                started += 1
                pods = after
        return started

    def _start(self, pod: dict, agent: NodeAgent, pods: list[dict]) -> list[dict] | None:
        """Allocate for ``pod`` (``pods``: the API's pods now) and start it; returns the API's
        pods after the Allocate, or None when it failed."""
        key, uid = _key(pod), pod["metadata"]["uid"]
        ns, name = key.split("/", 1)
        acked = {_key(p): (p["metadata"].get("annotations") or {}).get(A.ALLOCATED) for p in pods}
        envs, why = agent.allocate()
        if envs is None:
            log.info("kubelet %s: Allocate for %s failed (retried later): %s", agent.name, key, why)
            if "expected exactly one pod" in why and "found 0" not in why:
                self.rec.problems.append((3, f"{agent.name}: the device plugin cannot tell which "
                                             f"pod kubelet's Allocate for {key} is for: {why}"))
            return None
        after = self.pods()
        now = {_key(p): (p["metadata"].get("annotations") or {}).get(A.ALLOCATED) for p in after}
        changed = sorted(k for k in now if now[k] != acked.get(k))
        if changed != [key]:
            self.rec.problems.append((3, f"{agent.name}: kubelet's Allocate for {key} "
                                         f"acknowledged {changed or 'no pod'}"))
            return None
        if agent.mps_down and MPS_PCT_ENV in envs:
            self.rec.problems.append((4, f"{agent.name}: Allocate handed {key} an MPS share "
                                         f"({MPS_PCT_ENV}={envs[MPS_PCT_ENV]}) while the node's "
                                         "MPS control daemon is down"))
        self.rec.allocations[key] = _Allocation(uid, agent.name, envs)
        t = self.now()
        self.rec.started[key] = t
        self.core.patch_namespaced_pod_status(name, ns, {"status": {
            "phase": "Running", "startTime": datetime.fromtimestamp(t, timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ")}})
        return after

    def settle(self, max_ticks: int = 50) -> None:
        """Clear every fault (GPUs healthy, nodes Ready, MPS daemons up), then rounds and
        kubelet steps until one changes nothing, checking the invariants after each; then
        the liveness invariant 6.  Raises :class:`Violation`."""
        for name, a in self.agents.items():
            for g in a.backend.list_gpus():
                if not g.healthy:
                    a.set_health(g.index, True)
            if a.mps_down:
                a.set_mps(True)
            self.set_ready(name, True)
        self.check()
        for _ in range(max_ticks):
            n_evicted = len(self.emu.server.evictions)
            rep = self.round()
            drained = self.drain()
            started = self.kubelet_step()
            self.check()
            if not (rep.reserved or rep.bound or started or drained
                    or len(self.emu.server.evictions) > n_evicted):
                break
        else:
            raise VIOLATIONS[6](f"(6) not settled after {max_ticks} rounds")
        bad = self._liveness()
        if bad:
            raise VIOLATIONS[6]("invariants broken after settling:\n  " + "\n  ".join(bad))

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        """Raise the :class:`Violation` of the lowest-numbered broken invariant, listing every
        broken one."""
        bad = self.violations()
        if bad:
            lowest = min(n for n, _ in bad)
            raise VIOLATIONS[lowest]("invariants broken:\n  " + "\n  ".join(
                f"({n}) {msg}" for n, msg in sorted(bad, key=lambda x: x[0])))

    def violations(self) -> list[tuple[int, str]]:
        """Every broken safety invariant 1-5 (module docstring) as (number, what); [] when none."""
        out = list(self.rec.problems)
        self.rec.problems.clear()
        # a reservation of a pod being deleted was never bound and holds nothing (the placer
        # drops it; its annotations stay until the pod is gone)
        pods = [p for p in self.pods() if is_elastico(p) and not is_terminal(p)
                and not (p["metadata"].get("deletionTimestamp")
                         and not (p.get("spec") or {}).get("nodeName"))]
        bookings = {}
        for p in pods:
            try:
                b = A.parse_booking(p["metadata"].get("annotations"))
            except ElasticoError as e:
                out.append((1, f"{_key(p)}: unreadable booking: {e}"))
                continue
            if b is not None:
                bookings[_key(p)] = b
        out += self._gpus_not_overcommitted(pods, bookings)
        out += self._bound_pods_keep_bookings(pods, bookings)
        out += self._device_plugin_agrees(pods, bookings)
        out += self._fixed_shapes_kept(pods, bookings)
        out += self._modes_agree(pods, bookings)
        return out

    def _modes_agree(self, pods, bookings) -> list[tuple[int, str]]:
        """Invariant 8 (MIG lending): no GPU is booked in both modes at once (a MIG instance
        beside a whole-GPU or MPS booking: owned twice across a mode change), and every pod the
        device plugin allocated finds its GPUs in the mode its booking names -- normal mode
        for a whole GPU or an MPS share, MIG mode with the booked instance for a MIG pod."""
        out = []
        modes: dict[str, dict[bool, list[str]]] = defaultdict(lambda: defaultdict(list))
        for p in pods:
            b = bookings.get(_key(p))
            if b is not None:
                for u in b.gpu_uuids:
                    modes[u][b.mig_profile is not None].append(_key(p))
        for u, by in sorted(modes.items()):
            if by[True] and by[False]:
                out.append((8, f"GPU {u} booked in both modes: MIG {by[True]}, normal "
                               f"{by[False]}"))
        live = {_key(p): p for p in pods}
        for key, al in sorted(self.rec.allocations.items()):
            p, b = live.get(key), bookings.get(key)
            if p is None or p["metadata"]["uid"] != al.uid or b is None or b.node not in self.agents:
                continue
            backend = self.agents[b.node].backend
            gpus = {g.index: g for g in backend.list_gpus()}
            for i, g in enumerate(b.gpu_indices):
                if b.mig_profile is None and gpus[g].mig_mode:
                    out.append((8, f"{key}: booked GPU {g} of {b.node} whole (or an MPS "
                                   "share), but the GPU is in MIG mode"))
                elif b.mig_profile is not None:
                    have = {(d.profile, d.start) for d in backend.mig_devices(g)} \
                        if gpus[g].mig_mode else set()
                    want = (b.mig_profile, b.mig_starts[i] if i < len(b.mig_starts) else None)
                    if want not in have:
                        out.append((8, f"{key}: booked MIG {want[0]} at slot {want[1]} on GPU "
                                       f"{g} of {b.node}, the GPU has "
                                       f"{sorted(have) if gpus[g].mig_mode else 'MIG mode off'}"))
        return out

    def _gpus_not_overcommitted(self, pods, bookings) -> list[tuple[int, str]]:
        out = []
        gpu_node = {u: n for n, a in self.agents.items() for u in a.memory}
        memory = {u: m for a in self.agents.values() for u, m in a.memory.items()}
        share: dict[str, float] = defaultdict(float)
        mem: dict[str, float] = defaultdict(float)
        on_gpu: dict[str, list[str]] = defaultdict(list)
        whole: dict[str, list[str]] = defaultdict(list)
        users: dict[str, set] = defaultdict(set)
        for p in pods:
            key = _key(p)
            b = bookings.get(key)
            if b is None or b.mig_profile is not None:
                continue
            for u in b.gpu_uuids:
                if gpu_node.get(u) != b.node:
                    out.append((1, f"{key}: booked GPU {u} is not a GPU of {b.node}"))
                share[u] += b.gpu_share
                mem[u] += b.gpu_mem_gib
                on_gpu[u].append(f"{key}@{b.gpu_share:g}")
                if b.gpu_share >= 1.0:
                    whole[u].append(key)
                else:
                    users[u].add(_user(p))
        for u in sorted(on_gpu):
            if share[u] > 1.0 + 1e-9:
                out.append((1, f"GPU {u} over-committed: shares sum to {share[u]:g} ({on_gpu[u]})"))
            elif whole[u] and len(on_gpu[u]) > 1:
                out.append((1, f"GPU {u}: whole-GPU booking {whole[u]} not alone ({on_gpu[u]})"))
            if u in memory and mem[u] > memory[u] + 1e-9:
                out.append((1, f"GPU {u}: {mem[u]:g} GiB booked on {memory[u]:g} GiB "
                               f"({on_gpu[u]})"))
            if len(users[u]) > 1:
                out.append((1, f"GPU {u}: MPS-shared by runAsUser {sorted(users[u], key=str)} "
                               f"({on_gpu[u]})"))
        return out

    def _bound_pods_keep_bookings(self, pods, bookings) -> list[tuple[int, str]]:
        out = []
        usable, invs = set(), []
        for n in self.nodes():
            inv = node_inventory(n, known_models=TM.gpu_models(), quantity=parse_quantity)
            if not isinstance(inv, str):
                usable.add(inv.node.name)
                invs.append(inv)
        cat = JobCatalog(PolicyEnv(nodes=[i.node for i in invs], throughput=TM,
                                   slowdown=AnalyticSlowdown()))
        book = rebuild_book(invs, pods, slowdown_model=AnalyticSlowdown(), profile=cat.profile,
                            job_of=_pod_spec)
        by_key = {_key(p): p for p in pods}
        for a in book.running:  # invariant 7: a restarted placer knows who is low priority
            ann = by_key[a.job.id]["metadata"].get("annotations") or {}
            llm = A.LLM_MODEL in ann or A.LLM_MODEL_CONFIG in ann
            if low_priority(a.job) != llm:
                out.append((7, f"{a.job.id}: the rebuilt book takes it as "
                               f"{'low' if low_priority(a.job) else 'normal'} priority, its pod "
                               f"declares {'offline LLM inference' if llm else 'no LLM inference'}"))
        for p in pods:
            key, uid = _key(p), p["metadata"]["uid"]
            node = (p.get("spec") or {}).get("nodeName")
            if not node:
                continue
            ann = p["metadata"].get("annotations") or {}
            decision = {k: ann.get(k) for k in A.DECISION_KEYS}
            first = self.rec.bound_with.get(key)
            if first is None or first[0] != uid:      # bound now (a recreated pod: anew)
                first = self.rec.bound_with[key] = (uid, decision)
            if first[1] != decision:
                changed = sorted(k for k in decision if decision[k] != first[1][k])
                out.append((2, f"{key} (bound to {node}): decision annotations changed: {changed}"))
            b = bookings.get(key)
            if b is None or b.node != node:
                out.append((2, f"{key}: bound to {node} but booked on "
                               f"{b.node if b else 'nothing'}"))
                continue
            if node in usable:
                if key in book.conflicts:
                    out.append((2, f"{key} (bound to {node}, GPUs {list(b.gpu_uuids)}): the "
                                   f"rebuilt book drops it: {book.conflicts[key]}"))
                elif key not in book.bookings:
                    out.append((2, f"{key} (bound to {node}): not in the rebuilt book"))
        return out

    def _device_plugin_agrees(self, pods, bookings) -> list[tuple[int, str]]:
        out = []
        live = {_key(p): p for p in pods}
        for key, al in sorted(self.rec.allocations.items()):
            p = live.get(key)
            if p is None or p["metadata"]["uid"] != al.uid:
                continue
            b = bookings.get(key)
            ann = p["metadata"].get("annotations") or {}
            if b is None:
                out.append((3, f"{key}: allocated by the device plugin but has no booking"))
                continue
            envs = al.envs
            got = envs.get("NVIDIA_VISIBLE_DEVICES", "").split(",")
            want = list(b.gpu_uuids)
            if b.mig_profile is not None and b.node in self.agents:
                # a MIG pod sees its instance: the MIG device at the booked slot of each GPU
                backend = self.agents[b.node].backend
                want = [next((d.uuid for d in backend.mig_devices(g) if d.start == s), f"none at "
                             f"GPU {g} slot {s}") for g, s in zip(b.gpu_indices, b.mig_starts)]
            if got != want or ann.get(A.GPU_UUIDS, "").split(",") != list(b.gpu_uuids):
                seen = f" (MIG devices {want})" if b.mig_profile is not None else ""
                out.append((3, f"{key}: device plugin gave GPUs {got}, booking "
                               f"{list(b.gpu_uuids)}{seen}, annotation {ann.get(A.GPU_UUIDS)}"))
            if b.mig_profile is not None:
                continue
            if b.gpu_share < 1.0:
                pct = envs.get(MPS_PCT_ENV)
                if pct is None or abs(float(pct) - b.gpu_share * 100) > 1e-6:
                    out.append((3, f"{key}: booked share {b.gpu_share:g} but the device plugin "
                                   f"enforces {MPS_PCT_ENV}={pct}"))
                if ann.get(A.MPS_ACTIVE_THREAD_PERCENTAGE) != pct:
                    out.append((3, f"{key}: annotation {A.MPS_ACTIVE_THREAD_PERCENTAGE}="
                                   f"{ann.get(A.MPS_ACTIVE_THREAD_PERCENTAGE)}, enforced {pct}"))
                limits = [x.partition("=")[2] for x in envs.get(MPS_MEM_ENV, "").split(",") if x]
                ok = len(limits) == len(b.gpu_uuids)
                for lim in limits:
                    try:
                        gib = _gib(lim)
                    except ValueError:
                        ok = False
                        break
                    # the limit is the booked GiB in whole MiB, rounded down
                    ok = ok and b.gpu_mem_gib - 1 / 1024 - 1e-9 < gib <= b.gpu_mem_gib + 1e-9
                if not ok:
                    out.append((3, f"{key}: booked {b.gpu_mem_gib:g} GiB per GPU but the device "
                                   f"plugin pins {MPS_MEM_ENV}={envs.get(MPS_MEM_ENV)}"))
            elif MPS_PCT_ENV in envs or MPS_MEM_ENV in envs:
                out.append((3, f"{key}: a whole-GPU booking given MPS limits "
                               f"{envs.get(MPS_PCT_ENV)}, {envs.get(MPS_MEM_ENV)}"))
        return out

    def _fixed_shapes_kept(self, pods, bookings) -> list[tuple[int, str]]:
        out = []
        for p in pods:
            key = _key(p)
            b = bookings.get(key)
            asked = _requested(p["metadata"].get("annotations") or {})
            if b is None or asked is None or not asked[2] or b.mig_profile is not None:
                continue
            gpus, share, _ = asked
            if len(b.gpu_uuids) != gpus or abs(b.gpu_share - share) > 1e-9:
                out.append((5, f"{key}: asked {gpus} GPU(s) at {share:g} (a fixed shape), booked "
                               f"{len(b.gpu_uuids)} at {b.gpu_share:g} ({b.config_name})"))
        return out

    def _liveness(self) -> list[str]:
        """Invariant 6 on a settled cluster (see :meth:`settle`)."""
        out = []
        pods = [p for p in self.pods() if is_elastico(p) and not is_terminal(p)]
        told = {(e.get("involvedObject") or {}).get("uid") for e in self._items("events")
                if e.get("reason") != "Scheduled"}
        ready = {n["metadata"]["name"] for n in self.nodes() if _ready(n)}
        used: dict[str, list[float]] = {n: [0.0, 0.0] for n in self.agents}
        booked = set()
        for p in pods:
            b = self.booking(p)
            if b is not None:
                booked.update(b.gpu_uuids)
                if b.node in used:
                    used[b.node][0] += b.cpu
                    used[b.node][1] += b.mem_gib
        free = []        # healthy GPUs nobody books, on Ready nodes with room for one pod
        for n, a in sorted(self.agents.items()):
            if n in ready and used[n][0] + POD_CPU <= NODE_CPU \
                    and used[n][1] + POD_MEM_GIB <= NODE_MEM_GIB:
                # a GPU in MIG mode serves MIG instances, not a whole-GPU pod (MIG lending
                # switches only a whole empty node; tests/test_live_lending.py)
                free += [g.uuid for g in a.backend.list_gpus()
                         if g.healthy and g.uuid not in booked and not g.mig_mode]
        for p in pods:
            ann = p["metadata"].get("annotations") or {}
            if (p.get("spec") or {}).get("nodeName") or A.BOOKING in ann:
                continue
            key = _key(p)
            if p["metadata"]["uid"] not in told:
                out.append(f"(6) {key} is pending and was never told why (no Event but "
                           "Scheduled)")
            asked = _requested(ann)
            plain = not {A.GPU_MODEL, A.GPU_MEMORY_GIB} & set(ann)
            if asked is not None and asked[:2] == (1, 1.0) and ann.get(A.GANG_SIZE, "1") == "1" \
                    and plain and free:
                out.append(f"(6) {key} asks one whole GPU and waits while GPUs {free} are free")
        return out
