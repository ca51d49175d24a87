"""The kubelet device plugin (API ``v1beta1``) for the extended resource ``elastico.io/gpu``.

Protocol (kubelet device manager): the plugin serves ``v1beta1.DevicePlugin`` on a unix
socket in kubelet's device-plugin directory (``/var/lib/kubelet/device-plugins``), then calls
``v1beta1.Registration/Register`` on ``kubelet.sock`` there with its socket's file name, the
resource name and its options.  kubelet then opens ``ListAndWatch`` (a stream of the device
list, resent on every health change), may call ``GetPreferredAllocation``, and calls
``Allocate`` for each container that requests the resource.  When kubelet restarts it deletes
every socket in that directory and recreates ``kubelet.sock``; the plugin notices (its own
socket gone or ``kubelet.sock`` replaced), serves again and re-registers.

Devices: ``devices`` virtual handles ``elastico-gpu-0`` .. ``elastico-gpu-<n-1>`` -- pods
request ``elastico.io/gpu: 1`` each, so the handle count bounds the pods co-located on the
node (configurable).  Health: with ``h`` of ``G`` GPUs healthy, the first
``floor(devices * h / G)`` handles are ``Healthy`` and the rest ``Unhealthy`` (all healthy when
every GPU is, none when no GPU is), so kubelet's allocatable count shrinks with the node's
healthy GPUs.

Allocate: the request names only handles, so the pod is found by the placer's invariant
(:func:`elastico.nodeagent.allocation.find_target`); with ``follow_mig_mode`` (off by default),
a GPU of the decision in the other MIG mode than it needs is switched first when idle (MIG
lending:
:func:`elastico.nodeagent.nodeplan.ensure_mig_mode`; busy -> ``FAILED_PRECONDITION`` naming
the pod, nothing allocated); for a MIG decision the instance is created
if missing (:func:`elastico.nodeagent.nodeplan.ensure_mig_instance`); the answer is built by
:func:`elastico.nodeagent.allocation.build_allocation`; then the pod is annotated
``elastico.io/allocated``.  Allocate calls are serialised (one pod at a time per node).  Errors
map to status codes through :class:`elastico.runtime.grpc_errors.ErrorInterceptor`: no matching pod ->
``FAILED_PRECONDITION`` naming the candidates, malformed decision -> ``INVALID_ARGUMENT``.

MPS health: with an MPS status source (``mps``: the node's
:class:`~elastico.nodeagent.mps.MpsManager`, or a :class:`~elastico.nodeagent.mps.StaticMps`),
an Allocate of an MPS share first calls its ``check()`` (which restarts a dead daemon); while it
is not ready the Allocate fails with ``FAILED_PRECONDITION`` naming the node, the reason and
the pod, and nothing is acknowledged.  The handles stay ``Healthy``: they are the same for
whole-GPU, MIG and MPS pods, so marking them unhealthy would turn away pods that need no
daemon; the placer books no new MPS share on the node meanwhile (docs/nodeagent.md).

Who calls it: ``elastico nodeagent`` (:mod:`elastico.cli.nodeagent`); kubelet over the socket.
Whom it calls: grpc (the socket's server is :func:`elastico.runtime.grpc_server.serve_one`'s, like every
service's: it also answers gRPC health checking and reflection there), the generated
``elastico.deviceplugin.v1beta1`` modules, the pure modules of this package.  An adapter
(exempt from the layering rule).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import grpc

from elastico.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from elastico.contract import ALLOCATED, GPU_RESOURCE
from elastico.errors import Infeasible, InvalidArgument
from elastico.runtime.grpc_server import serve_one
from elastico.nodeagent.allocation import (
    ContainerAllocation, allocated_value, build_allocation, find_target)
from elastico.nodeagent.backend import GpuBackend, GpuInfo
from elastico.nodeagent.kubeapi import NodeApi
from elastico.nodeagent.nodeplan import ensure_mig_instance, ensure_mig_mode

__all__ = ["API_VERSION", "MAX_DEVICES", "DevicePluginConfig", "DevicePluginServicer",
           "DevicePlugin", "check_devices", "handle_ids", "handle_health"]

_LOG = logging.getLogger(__name__)

#: The device plugin API version kubelet expects in RegisterRequest.version.
API_VERSION = "v1beta1"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME: str = api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].full_name
#: kubelet's messages are small (a device list, one Allocate); grpc's default receive limit.
MAX_MESSAGE_BYTES = 4 * 2**20
#: Most virtual handles advertised (``DevicePluginConfig.devices``, ``--devices``).
MAX_DEVICES = 1024


def check_devices(n: int, field: str = "devices") -> int:
    """``n`` as a handle count, 1..:data:`MAX_DEVICES`; InvalidArgument naming ``field``."""
    if not 1 <= n <= MAX_DEVICES:
        raise InvalidArgument(field, n, f"a handle count in 1..{MAX_DEVICES}")
    return n


@dataclass(frozen=True)
class DevicePluginConfig:
    """``socket_dir``: kubelet's device-plugin directory; ``endpoint``: this plugin's socket
    file name in it; ``kubelet_socket``: kubelet's registration socket name there;
    ``devices``: virtual handles advertised (1..:data:`MAX_DEVICES`); ``mps_pipe_dir`` /
    ``mps_log_dir``: host MPS directories given to MPS clients; ``watch_s``: seconds between
    checks for a kubelet restart; ``follow_mig_mode``: switch an idle GPU to the MIG mode a
    booking needs (MIG lending; off: such a booking is refused, the GPU's mode being the
    operator's)."""

    node_name: str
    socket_dir: str = "/var/lib/kubelet/device-plugins"
    endpoint: str = "elastico-gpu.sock"
    kubelet_socket: str = "kubelet.sock"
    resource_name: str = GPU_RESOURCE
    devices: int = 16
    mps_pipe_dir: str = "/run/nvidia-mps"
    mps_log_dir: str = "/var/log/nvidia-mps"
    watch_s: float = 1.0
    follow_mig_mode: bool = False


def handle_ids(n: int) -> list[str]:
    return [f"elastico-gpu-{k}" for k in range(n)]


def handle_health(n: int, gpus: Sequence[GpuInfo]) -> list[str]:
    """Health of the ``n`` handles for ``gpus`` (module docstring)."""
    total = len(gpus)
    healthy = sum(g.healthy for g in gpus)
    k = n * healthy // total if total else 0
    return [HEALTHY if i < k else UNHEALTHY for i in range(n)]


def _options() -> api_pb2.DevicePluginOptions:
    """What the plugin offers kubelet: no PreStartContainer, a GetPreferredAllocation (sent
    in Register and answered by GetDevicePluginOptions alike)."""
    return api_pb2.DevicePluginOptions(pre_start_required=False,
                                       get_preferred_allocation_available=True)


def _response(a: ContainerAllocation) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=dict(a.envs),
        mounts=[api_pb2.Mount(container_path=m.container_path, host_path=m.host_path,
                              read_only=m.read_only) for m in a.mounts],
        devices=[api_pb2.DeviceSpec(container_path=d.container_path, host_path=d.host_path,
                                    permissions=d.permissions) for d in a.devices])


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """The ``v1beta1.DevicePlugin`` service.  :meth:`update` (the health watcher's
    subscriber) changes the device list and wakes every ListAndWatch stream.  ``mps``: the
    MPS status source checked before an MPS share is allocated (module docstring; None: not
    checked)."""

    def __init__(self, backend: GpuBackend, api: NodeApi, cfg: DevicePluginConfig, *,
                 exists: Callable[[str], bool] = os.path.exists, mps=None,
                 on_allocate: Callable[[], None] | None = None,
                 on_mode_change: Callable[[], None] | None = None):
        check_devices(cfg.devices)
        self.backend, self.api, self.cfg, self.exists = backend, api, cfg, exists
        self.mps = mps
        #: called after each successful Allocate (the activity sampler re-reads placements)
        self.on_allocate = on_allocate
        #: called after an Allocate changed a GPU's MIG mode (the inventory is republished)
        self.on_mode_change = on_mode_change
        self._cond = threading.Condition()
        self._version = 0
        self._closed = False
        self._health = handle_health(cfg.devices, backend.list_gpus())
        self._alloc_lock = threading.Lock()

    # -- device list ------------------------------------------------------------------------
    def devices(self) -> list[api_pb2.Device]:
        with self._cond:
            return [api_pb2.Device(ID=i, health=h)
                    for i, h in zip(handle_ids(self.cfg.devices), self._health)]

    def update(self, gpus: Sequence[GpuInfo]) -> None:
        health = handle_health(self.cfg.devices, gpus)
        with self._cond:
            if health != self._health:
                self._health = health
                self._version += 1
                self._cond.notify_all()

    def close(self) -> None:
        """Ends every ListAndWatch stream."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- RPCs -------------------------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return _options()

    def ListAndWatch(self, request, context) -> Iterator[api_pb2.ListAndWatchResponse]:
        with self._cond:
            seen = self._version
        yield api_pb2.ListAndWatchResponse(devices=self.devices())
        while context.is_active():
            with self._cond:
                self._cond.wait_for(lambda: self._version != seen or self._closed, timeout=1.0)
                if self._closed:
                    return
                changed, seen = self._version != seen, self._version
            if changed:
                yield api_pb2.ListAndWatchResponse(devices=self.devices())

    def GetPreferredAllocation(self, request, context):
        """Any handles serve alike (the decision, not the handle, picks the GPU): the
        required ones, then the lowest-numbered available, up to the size asked."""
        order = {h: k for k, h in enumerate(handle_ids(self.cfg.devices))}
        out = []
        for r in request.container_requests:
            ids = list(r.must_include_deviceIDs)
            rest = sorted((d for d in r.available_deviceIDs if d not in ids),
                          key=lambda d: order.get(d, len(order)))
            ids += rest[:max(0, r.allocation_size - len(ids))]
            out.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api_pb2.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request, context):
        out = []
        with self._alloc_lock:
            for _r in request.container_requests:
                target = find_target(self.api.list_node_pods(self.cfg.node_name), self.cfg.node_name)
                d = target.decision
                if d.mps and self.mps is not None:
                    st = self.mps.check()
                    if not st.ready:
                        raise Infeasible(
                            f"MPS control daemon on node {self.cfg.node_name} is down: {st.reason}; "
                            f"not allocating the MPS share ({d.mps_active_thread_percentage} % "
                            f"active threads) of pod {target.pod.key} (whole-GPU and MIG pods "
                            "are unaffected)")
                gpus = self.backend.list_gpus()
                if self.cfg.follow_mig_mode and self._follow_mode(d, gpus, target.pod.key):
                    gpus = self.backend.list_gpus()
                mig_uuid = None
                if d.mig:
                    gpu = next((g for g in gpus if g.uuid == d.gpu_uuids[0]), None)
                    if gpu is not None and gpu.mig_mode:
                        mig_uuid = ensure_mig_instance(self.backend, gpu.index, d.mig_profile,
                                                       d.mig_start_slot).uuid
                alloc = build_allocation(d, gpus, mig_uuid=mig_uuid, mps_pipe_dir=self.cfg.mps_pipe_dir,
                                         mps_log_dir=self.cfg.mps_log_dir, exists=self.exists)
                self.api.patch_pod_annotations(
                    target.pod.namespace, target.pod.name,
                    {ALLOCATED: allocated_value(target.pod, target.container)}, uid=target.pod.uid)
                _LOG.info("allocated %s container %s (round %s): %s", target.pod.key,
                          target.container, d.round_id, dict(alloc.envs))
                out.append(_response(alloc))
        if self.on_allocate is not None:
            self.on_allocate()
        return api_pb2.AllocateResponse(container_responses=out)

    def _follow_mode(self, d, gpus: Sequence[GpuInfo], pod: str) -> bool:
        """Put each GPU of decision ``d`` in the mode it needs -- MIG mode for a MIG instance,
        normal mode for a whole GPU or an MPS share -- when it is idle
        (:func:`~elastico.nodeagent.nodeplan.ensure_mig_mode`: MIG lending lent or returned
        the node); Infeasible naming the pod when a GPU is busy.  True when a mode changed
        (then ``on_mode_change`` is told, e.g. to republish the inventory)."""
        by_uuid = {g.uuid: g for g in gpus}
        changed = False
        for u in d.gpu_uuids[:1] if d.mig else d.gpu_uuids:
            g = by_uuid.get(u)
            if g is None or g.mig_mode == bool(d.mig) or (d.mig and g.mig_model is None):
                continue  # unknown GPU or no MIG table: build_allocation says why
            try:
                changed |= ensure_mig_mode(self.backend, g.index, bool(d.mig))
            except Infeasible as e:
                raise Infeasible(f"pod {pod}: {e}") from None
            _LOG.info("GPU %d (%s) to %s mode for pod %s", g.index, u,
                      "MIG" if d.mig else "normal", pod)
        if changed and self.on_mode_change is not None:
            self.on_mode_change()
        return changed

    def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()


class DevicePlugin:
    """Serves :class:`DevicePluginServicer` on ``socket_dir/endpoint``, registers with
    kubelet, and re-serves and re-registers when kubelet restarts."""

    def __init__(self, servicer: DevicePluginServicer):
        self.servicer = servicer
        self.cfg = servicer.cfg
        self.socket = Path(self.cfg.socket_dir) / self.cfg.endpoint
        self.kubelet = Path(self.cfg.socket_dir) / self.cfg.kubelet_socket
        self.registrations = 0
        self._server: grpc.Server | None = None
        self._kubelet_id: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _serve(self) -> None:
        if self.socket.exists() or self.socket.is_symlink():
            self.socket.unlink()
        server, _ = serve_one(
            f"unix://{self.socket}", SERVICE_NAME,
            lambda srv: api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, srv),
            thread_name="elastico-deviceplugin", max_workers=8, max_concurrent_rpcs=32,
            max_message_bytes=MAX_MESSAGE_BYTES, label="device plugin")
        server.start()
        self._server = server

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = self.kubelet.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def register(self, timeout_s: float = 5.0) -> None:
        """``Register`` with kubelet; raises grpc.RpcError when kubelet refuses or is absent."""
        with grpc.insecure_channel(f"unix://{self.kubelet}") as ch:
            api_pb2_grpc.RegistrationStub(ch).Register(api_pb2.RegisterRequest(
                version=API_VERSION, endpoint=self.cfg.endpoint, resource_name=self.cfg.resource_name,
                options=_options()),
                timeout=timeout_s)
        self.registrations += 1
        self._kubelet_id = self._kubelet_identity()
        _LOG.info("registered %s with kubelet at %s", self.cfg.resource_name, self.kubelet)

    def start(self) -> None:
        """Serves, registers, and starts watching for kubelet restarts."""
        self._serve()
        self.register()
        self._thread = threading.Thread(target=self._watch, name="elastico-deviceplugin-watch",
                                        daemon=True)
        self._thread.start()

    def _restart(self) -> None:
        if self._server is not None:
            self._server.stop(0)
        self._serve()
        self.register()

    def _watch(self) -> None:
        while not self._stop.wait(self.cfg.watch_s):
            ident = self._kubelet_identity()
            if ident is None:
                continue  # kubelet is down; wait for its socket
            if ident != self._kubelet_id or not self.socket.exists():
                try:
                    _LOG.info("kubelet restarted (socket %s recreated): serving and registering again", self.kubelet)
                    self._restart()
                except Exception:
                    _LOG.exception("re-registering with kubelet failed; retrying")

    def stop(self, grace: float | None = 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.watch_s + 2)
        self.servicer.close()
        if self._server is not None:
            self._server.stop(grace).wait()
        try:
            self.socket.unlink()
        except OSError:
            pass
