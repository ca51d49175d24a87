"""The node's GPU inventory on its Node object, and the health watcher that keeps it (and the
device plugin's device list) current.

Annotation ``elastico.io/gpu-inventory`` on the Node: a JSON list, one object per GPU by
index, ``{"index": int, "uuid": str, "model": str, "memory_gib": float, "healthy": bool,
"mig_mode": bool}`` (memory in GiB, NVML's total).  The placer reads it; the agent rewrites it
every ``refresh_s`` seconds and at once when a GPU's health changes.

Annotation ``elastico.io/mps`` on the Node (with ``mps``, an MPS status source: the
:class:`~elastico.nodeagent.mps.MpsManager` or a :class:`~elastico.nodeagent.mps.StaticMps`):
``{"ready": bool, "reason": str}``, the MPS control daemon's state, written with every
inventory and at once when it changes (:meth:`InventoryPublisher.publish_mps`, the MPS
source's subscriber).  While ``ready`` is false the placer books no new MPS share on the node.

:class:`HealthWatcher` runs one thread: it waits on the backend's health events
(:meth:`GpuBackend.wait_health_event`, XID/ECC on NVML) with a poll timeout, reads
``list_gpus()`` and calls every subscriber with the GPU list when the health or MIG mode of a
GPU changed (and once at start).  The device plugin's ListAndWatch and the inventory publisher
subscribe.

Who calls it: ``elastico nodeagent`` (:mod:`elastico.cli.nodeagent`).  Whom it calls: the
backend, a :class:`~elastico.nodeagent.kubeapi.NodeApi`.  No gRPC, no Kubernetes import.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Callable, Sequence

from elastico.contract import INVENTORY, MIG_FOLLOW, MPS_STATUS
from elastico.errors import ElasticoError
from elastico.nodeagent.backend import GpuBackend, GpuInfo
from elastico.nodeagent.kubeapi import NodeApi
from elastico.nodeagent.mps import MpsStatus

__all__ = ["inventory_json", "HealthWatcher", "InventoryPublisher"]

_LOG = logging.getLogger(__name__)


def inventory_json(gpus: Sequence[GpuInfo]) -> str:
    """The annotation value for ``gpus`` (compact JSON, GPUs by index)."""
    return json.dumps([
        {"index": g.index, "uuid": g.uuid, "model": g.model,
         "memory_gib": round(float(g.memory_total_gib), 3), "healthy": bool(g.healthy),
         "mig_mode": bool(g.mig_mode)}
        for g in sorted(gpus, key=lambda g: g.index)], separators=(",", ":"))


def _state(gpus: Sequence[GpuInfo]) -> tuple:
    return tuple((g.index, g.uuid, g.healthy, g.mig_mode) for g in gpus)


class HealthWatcher:
    """Watches ``backend`` and tells subscribers the GPU list when health or MIG mode
    changes.  ``poll_s``: longest wait between two reads (events end a wait earlier)."""

    def __init__(self, backend: GpuBackend, poll_s: float = 5.0):
        self.backend, self.poll_s = backend, poll_s
        self._subs: list[Callable[[list[GpuInfo]], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple | None = None
        self._lock = threading.Lock()

    def subscribe(self, fn: Callable[[list[GpuInfo]], None]) -> None:
        with self._lock:
            self._subs.append(fn)

    def check(self) -> bool:
        """One read; notifies subscribers and returns True when something changed."""
        gpus = self.backend.list_gpus()
        state = _state(gpus)
        with self._lock:
            if state == self._last:
                return False
            self._last = state
            subs = list(self._subs)
        for fn in subs:
            try:
                fn(gpus)
            except ElasticoError as e:  # e.g. the API server is down: one line, not a traceback
                _LOG.warning("health subscriber failed: %s", e)
            except Exception:  # one bad subscriber must not stop health reporting
                _LOG.exception("health subscriber failed")
        return True

    def _run(self) -> None:
        self.check()
        while not self._stop.is_set():
            try:
                self.backend.wait_health_event(self.poll_s)
                self.check()
            except Exception:
                _LOG.exception("health watch failed; retrying")
                self._stop.wait(self.poll_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="elastico-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_s + 1)


class InventoryPublisher:
    """Writes :data:`INVENTORY` on Node ``node`` through ``api``: on every call of
    :meth:`publish` (the health watcher's subscriber) and every ``refresh_s`` seconds; with
    ``mps`` (anything with a ``status`` :class:`MpsStatus`), :data:`MPS_STATUS` too; and
    :data:`MIG_FOLLOW` (``"true"``/``"false"``: whether this agent's device plugin follows
    the bookings' MIG mode, ``follow_mig_mode`` -- the placer lends only such nodes)."""

    def __init__(self, backend: GpuBackend, api: NodeApi, node: str, refresh_s: float = 60.0,
                 mps=None, follow_mig_mode: bool = False):
        self.backend, self.api, self.node, self.refresh_s = backend, api, node, refresh_s
        self.mps = mps
        self.follow_mig_mode = follow_mig_mode
        self.published: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self, gpus: Sequence[GpuInfo] | None = None) -> str:
        value = inventory_json(self.backend.list_gpus() if gpus is None else gpus)
        ann = {INVENTORY: value, MIG_FOLLOW: "true" if self.follow_mig_mode else "false"}
        if self.mps is not None:
            ann[MPS_STATUS] = self.mps.status.annotation()
        self.api.patch_node_annotations(self.node, ann)
        self.published = value
        return value

    def publish_mps(self, status: MpsStatus) -> None:
        """Writes :data:`MPS_STATUS` = ``status`` at once (the MPS source's subscriber)."""
        self.api.patch_node_annotations(self.node, {MPS_STATUS: status.annotation()})

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.publish()
            except ElasticoError as e:
                _LOG.warning("publishing the GPU inventory on node %s failed; retrying: %s",
                             self.node, e)
            except Exception:
                _LOG.exception("publishing the GPU inventory on node %s failed; retrying", self.node)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="elastico-inventory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
