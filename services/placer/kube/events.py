"""Kubernetes Events on pods (``core/v1``), with de-duplication.

Who calls it: the scheduler loop (reasons ``Scheduled``, ``Waiting``, ``Rejected``,
``BookingConflict``; docs/annotations.md).  Whom it calls: ``CoreV1Api.create_namespaced_event``.
A pod that waits for many rounds would otherwise write one Event per round: the same
(pod uid, reason, message) is written at most once per ``interval_s``, like client-go's
event correlator.  Only the leader writes (``leading``).  Time is an argument.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

__all__ = ["EventRecorder", "COMPONENT"]

log = logging.getLogger(__name__)
COMPONENT = "elastico-placer"


class EventRecorder:
    """``identity``: this replica (``reportingInstance``); ``interval_s``: de-duplication
    window, seconds."""

    def __init__(self, core: CoreV1Api, identity: str, *, interval_s: float = 300.0,
                 leading: Callable[[], bool] = lambda: True):
        self.core, self.identity, self.interval_s, self.leading = core, identity, interval_s, leading
        self._last: dict[tuple, float] = {}
        self._seq = 0

    def emit(self, pod: Mapping, reason: str, message: str, now: float, *,
             warning: bool = False) -> bool:
        """Write the Event unless it is a duplicate inside the window or this replica does
        not lead; True when written.  An API error is logged, never raised (an Event is
        information, not state)."""
        meta = pod.get("metadata") or {}
        key = (meta.get("uid"), reason, message)
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        if not self.leading():
            return False
        self._last[key] = now
        self._seq += 1
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        ns = meta.get("namespace") or "default"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{int(now * 1e6):x}{self._seq:x}",
                         "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                               "namespace": ns, "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.identity,
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        try:
            self.core.create_namespaced_event(ns, body, _preload_content=False)
        except ApiException as e:
            log.warning("event %s on %s/%s not written: %s %s", reason, ns, meta.get("name"),
                        e.status, e.reason)
            return False
        return True

    def prune(self, live_uids: Iterable[str]) -> None:
        """Forget the windows of pods that are gone (bounded memory)."""
        live = set(live_uids)
        for k in [k for k in self._last if k[0] not in live]:
            del self._last[k]
