"""Informer-style cache of one Kubernetes resource: list, then watch from the list's
resourceVersion; re-watch when a stream ends, relist on ``410 Gone`` or any error, and relist
every ``resync_s`` anyway.  Failures back off exponentially with jitter, as client-go's
reflector does (0.8 s doubling to 30 s, each delay stretched by a uniform factor in [1, 2),
back to 0.8 s after 2 minutes without a failure), so an unreachable API server, or one that
lists but cuts every watch, is asked about once per half minute, not every second.

Who calls it: :class:`elastico.placer.kube.loop.SchedulerLoop` (one thread per resource).
Whom it calls: a list function of the official client (``CoreV1Api.list_*``) and
``kubernetes.watch.Watch``.  Objects are the API's plain JSON dicts (``raw_object`` of each
event: the client's ``deserialize=False`` path raises KeyError on an ERROR event, so the
deserializing path is used and its raw dict kept).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from typing import Callable, Mapping

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from .bookings import pod_key

__all__ = ["Informer"]

log = logging.getLogger(__name__)

#: Seconds without a failure after which the backoff starts again from its first delay
#: (client-go's reflector backoff manager: 2 minutes).
BACKOFF_RESET_S = 120.0


def _rv(obj: Mapping) -> int | None:
    """The resourceVersion as an integer, or None.  Opaque by the API's contract, but integers
    (etcd revisions) on every etcd-backed server; kube-scheduler's assume cache orders them
    the same way.  Without an integer nothing is ordered and the last write wins."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


class Informer:
    """A list+watch cache of one resource (plain API dicts keyed ``namespace/name``).

    ``list_fn``: e.g. ``CoreV1Api.list_pod_for_all_namespaces``.  ``on_change`` is called after
    every change (to wake the loop).  Counters ``lists`` and ``watches`` are for tests and logs.
    """

    def __init__(self, name: str, list_fn: Callable, *, on_change: Callable[[], None] = lambda: None,
                 watch_timeout_s: int = 60, resync_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 backoff_s: tuple[float, float] = (0.8, 30.0), rng: random.Random | None = None):
        self.name, self.list_fn, self.on_change = name, list_fn, on_change
        # (first, largest) delay after consecutive failures (module docstring)
        self.backoff_s, self._rng = backoff_s, rng or random.Random()
        self.failures = 0
        self._failed_at = -float("inf")
        self.watch_timeout_s, self.resync_s, self.clock = watch_timeout_s, resync_s, clock
        self._lock = threading.Lock()
        self._cache: dict[str, dict] = {}
        self.synced = threading.Event()
        self.lists = self.watches = 0
        self._watch: watch.Watch | None = None

    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._cache)

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._cache.get(key)

    def assume(self, obj: dict) -> None:
        """Put the API's answer to our own write into the cache now (see module docstring)."""
        self._apply("MODIFIED", obj)

    def _apply(self, kind: str, obj: dict) -> None:
        key = pod_key(obj) if (obj.get("metadata") or {}).get("namespace") else \
            (obj.get("metadata") or {}).get("name", "")
        with self._lock:
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                old = self._cache.get(key)
                new_rv, old_rv = _rv(obj), (_rv(old) if old else None)
                if old is not None and new_rv is not None and old_rv is not None \
                        and new_rv < old_rv and old["metadata"].get("uid") == obj["metadata"].get("uid"):
                    return  # an event older than what we already hold (our own write)
                self._cache[key] = obj
        self.on_change()

    def relist(self) -> str:
        """Replace the cache with a fresh list; returns the list's resourceVersion."""
        resp = self.list_fn(_preload_content=False)
        data = json.loads(resp.data)
        items = {}
        for obj in data.get("items") or []:
            meta = obj.get("metadata") or {}
            items[pod_key(obj) if meta.get("namespace") else meta.get("name", "")] = obj
        with self._lock:
            self._cache = items
        self.lists += 1
        self.synced.set()
        self.on_change()
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def run(self, stop: threading.Event) -> None:
        """The informer thread: list, watch, re-watch, relist until ``stop`` is set."""
        rv = None
        listed_at = -float("inf")
        while not stop.is_set():
            try:
                if rv is None or self.clock() - listed_at >= self.resync_s:
                    rv = self.relist()
                    listed_at = self.clock()
                self.watches += 1
                self._watch = watch.Watch()
                for ev in self._watch.stream(self.list_fn, resource_version=rv,
                                             timeout_seconds=self.watch_timeout_s,
                                             allow_watch_bookmarks=True):
                    raw = ev.get("raw_object") or {}
                    new = (raw.get("metadata") or {}).get("resourceVersion")
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(ev["type"], raw)
                    if new:
                        rv = new
                    if stop.is_set() or self.clock() - listed_at >= self.resync_s:
                        break
                # the stream ended (server timeout or a dropped connection): re-watch from rv
            except ApiException as e:
                if e.status == 410:
                    log.info("%s watch: resourceVersion %s expired (410 Gone); relisting", self.name, rv)
                else:
                    delay = self.next_delay()
                    log.warning("%s watch failed (%s %s); relisting in %.1f s", self.name,
                                e.status, e.reason, delay)
                    stop.wait(delay)
                rv = None
            except Exception as e:  # dropped connection, bad chunk: relist, never die
                if stop.is_set():
                    break
                delay = self.next_delay()
                log.warning("%s watch broke (%s: %s); relisting in %.1f s", self.name,
                            type(e).__name__, e, delay)
                rv = None
                stop.wait(delay)

    def next_delay(self) -> float:
        """Seconds to wait after one more failure: ``min(largest, first x 2**(failures-1))``
        x a uniform factor in [1, 2) (client-go's jitter 1.0), where ``failures`` counts
        those since the last quiet period of :data:`BACKOFF_RESET_S` (a list that works but
        a watch that fails at once is not a recovery)."""
        now = self.clock()
        if now - self._failed_at >= BACKOFF_RESET_S:
            self.failures = 0
        self._failed_at = now
        self.failures += 1
        first, largest = self.backoff_s
        return min(largest, first * 2.0 ** min(self.failures - 1, 60)) * (1.0 + self._rng.random())

    def stop(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()
