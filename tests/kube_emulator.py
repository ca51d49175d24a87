"""An in-process Kubernetes API server for the scheduler-loop tests: kmock's
``KubernetesEmulator`` (real HTTP, real watch streams, the official ``kubernetes`` client talks
to it unchanged) plus the API-server behaviour the loop relies on and kmock 0.8 lacks:

* ``metadata.resourceVersion`` on every write (one counter, as etcd's revision), list
  responses carrying it, and watches that start *after* a given resourceVersion from an event
  log (kmock replays every object as ADDED and ignores ``resourceVersion``);
* ``410 Gone`` for a watch from a compacted resourceVersion (:meth:`ApiServer.compact`);
* optimistic concurrency: a PATCH or PUT whose body carries a stale ``resourceVersion`` gets
  ``409 Conflict`` (kmock merges blindly); PUT (replace, which kmock does not route) for Leases;
* the Binding subresource: ``POST .../pods/{name}/binding`` sets ``spec.nodeName`` and returns
  201, or 409 when the pod is already bound (what kube-apiserver does);
* graceful deletion of pods with finalizers keeps kmock's behaviour (``deletionTimestamp``);
* fault injection: :meth:`ApiServer.inject` (an HTTP status for the next matching requests,
  changing nothing) and :meth:`ApiServer.drop_watches` (end every open watch stream).

:class:`Emulator` runs it on 127.0.0.1 in a background thread with its own event loop, so the
synchronous official client and the code under test use it like a real cluster.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import threading
import uuid
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums

__all__ = ["ApiServer", "Emulator"]


class _Recorder:
    """Stands in for kmock's per-resource event buses: every event kmock emits goes to the
    server's log (with its resourceVersion) instead."""

    def __init__(self, server: "ApiServer"):
        self.server = server

    def __getitem__(self, resource):
        server = self.server

        class _Put:
            async def put(self, event):
                server._record(resource, event)
        return _Put()


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    _rv: int = attrs.field(default=0, init=False)
    _floor: int = attrs.field(default=0, init=False)
    _log: list = attrs.field(factory=list, init=False)
    _faults: list = attrs.field(factory=list, init=False)
    _drop_gen: int = attrs.field(default=0, init=False)
    _cond: Any = attrs.field(default=None, init=False)
    watches: int = attrs.field(default=0, init=False)
    binds: list = attrs.field(factory=list, init=False)
    evictions: list = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._buses = _Recorder(self)
        self._cond = asyncio.Condition()
        for res in ("v1/pods", "v1/nodes", "v1/events", "coordination.k8s.io/v1/leases"):
            self.resources[res] = {}

    # ------------------------------------------------------------------ test hooks (loop thread)
    def compact(self) -> None:
        """Compact: forget the event log and advance the revision (as an etcd compaction
        followed by writes would), so a watch from any resourceVersion seen so far gets
        410 Gone and only a fresh list (at the new revision) can continue."""
        self._rv += 1
        self._floor = self._rv
        self._log.clear()

    async def drop_watches(self) -> None:
        self._drop_gen += 1
        async with self._cond:
            self._cond.notify_all()

    def inject(self, method: str, plural: str, subresource: str | None = None,
               status: int = 409, times: int = 1) -> None:
        self._faults.append([method.upper(), plural, subresource, status, times])

    # ------------------------------------------------------------------ internals
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _record(self, resource, event) -> None:
        event = copy.deepcopy(event)
        meta = event["object"].setdefault("metadata", {})
        if event["type"] == "DELETED":
            meta["resourceVersion"] = self._next_rv()
        rv = int(meta.get("resourceVersion") or self._next_rv())
        self._log.append((rv, resource, event))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    def _error(self, status: int, reason: str, message: str) -> aiohttp.web.StreamResponse:
        return aiohttp.web.json_response({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": status, "reason": reason, "message": message}, status=status)

    def _stored(self, request):
        key = (request.resource, request.namespace, request.name)
        obj = self._objects[key] if key in self._objects else None
        return None if obj is None or obj.deleted else obj

    async def _handle(self, request) -> aiohttp.web.StreamResponse:
        if request.resource is None:
            return await super()._handle(request)
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        for f in self._faults:
            if f[4] > 0 and f[0] == method and f[1] == request.resource.plural \
                    and f[2] == request.subresource:
                f[4] -= 1
                return self._error(f[3], "Conflict" if f[3] == 409 else "Injected",
                                   f"injected {f[3]} for {method} {request.url.path}")
        if method == "POST" and request.subresource == "binding":
            return await self._bind(request)
        if method == "POST" and request.subresource == "eviction":
            return await self._evict(request)
        if method == "PUT" and request.name:
            return await self._replace(request)
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta["resourceVersion"] = self._next_rv()
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.datetime.now(datetime.UTC)
                            .strftime("%Y-%m-%dT%H:%M:%SZ"))
            if request.namespace and request.resource.plural != "nodes":
                meta.setdefault("namespace", request.namespace)
        elif request.action == enums.action.UPDATE and isinstance(request.data, dict):
            obj = self._stored(request)
            if obj is None:
                return self._error(404, "NotFound", f"{request.resource.plural} {request.name!r} not found")
            meta = request.data.setdefault("metadata", {}) or {}
            want = meta.get("resourceVersion")
            have = (obj.get("metadata") or {}).get("resourceVersion")
            if want is not None and str(want) != str(have):
                return self._error(409, "Conflict", f"the object has been modified "
                                   f"(resourceVersion {want} != {have})")
            request.data["metadata"] = {**meta, "resourceVersion": self._next_rv()}
        elif request.action == enums.action.DELETE and request.resource.plural == "pods":
            obj = self._stored(request)
            if obj is not None and (obj.get("metadata") or {}).get("finalizers"):
                if not obj["metadata"].get("deletionTimestamp"):
                    obj.patch({"metadata": {
                        "deletionTimestamp": datetime.datetime.now(datetime.UTC)
                        .strftime("%Y-%m-%dT%H:%M:%SZ"), "resourceVersion": self._next_rv()}})
                    self._record(request.resource, {"type": "MODIFIED", "object": obj.raw})
                return aiohttp.web.json_response(obj.raw)
        return await super()._handle(request)

    async def _bind(self, request) -> aiohttp.web.StreamResponse:
        obj = self._stored(request)
        if obj is None:
            return self._error(404, "NotFound", f'pods "{request.name}" not found')
        node = ((request.data or {}).get("target") or {}).get("name")
        if not node:
            return self._error(400, "BadRequest", "binding: target.name is required")
        bound = (obj.get("spec") or {}).get("nodeName")
        if bound:
            return self._error(409, "Conflict",
                               f"pod {request.name} is already assigned to node \"{bound}\"")
        obj.patch({"spec": {"nodeName": node}, "metadata": {"resourceVersion": self._next_rv()}})
        self._record(request.resource, {"type": "MODIFIED", "object": obj.raw})
        self.binds.append((request.namespace, request.name, node))
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {},
                                          "status": "Success", "code": 201}, status=201)

    async def _evict(self, request) -> aiohttp.web.StreamResponse:
        """policy/v1 Eviction: delete the pod as DELETE does (a pod with finalizers only gets
        its deletionTimestamp); ``deleteOptions.preconditions.uid`` must match (else 409).
        No PodDisruptionBudgets here: every eviction is allowed."""
        obj = self._stored(request)
        if obj is None:
            return self._error(404, "NotFound", f'pods "{request.name}" not found')
        want = (((request.data or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if want and want != obj["metadata"].get("uid"):
            return self._error(409, "Conflict", f"precondition failed: uid {want}")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj.patch({"metadata": {"deletionTimestamp": now, "resourceVersion": self._next_rv()}})
                self._record(request.resource, {"type": "MODIFIED", "object": obj.raw})
        else:
            raw = copy.deepcopy(obj.raw)
            obj.delete()
            self._record(request.resource, {"type": "DELETED", "object": raw})
        self.evictions.append((request.namespace, request.name))
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {},
                                          "status": "Success", "code": 201}, status=201)

    async def _replace(self, request) -> aiohttp.web.StreamResponse:
        obj = self._stored(request)
        if obj is None:
            return self._error(404, "NotFound", f"{request.resource.plural} {request.name!r} not found")
        new = copy.deepcopy(request.data or {})
        meta = new.setdefault("metadata", {})
        have = obj["metadata"].get("resourceVersion")
        if meta.get("resourceVersion") is not None and str(meta["resourceVersion"]) != str(have):
            return self._error(409, "Conflict", f"the object has been modified "
                               f"(resourceVersion {meta['resourceVersion']} != {have})")
        for k in ("uid", "creationTimestamp", "namespace", "name"):
            if k in obj["metadata"]:
                meta[k] = obj["metadata"][k]
        meta["resourceVersion"] = self._next_rv()
        obj.create(new)
        self._record(request.resource, {"type": "MODIFIED", "object": obj.raw})
        return aiohttp.web.json_response(obj.raw)

    async def _serve_list(self, request):
        out = await super()._serve_list(request)
        out["metadata"] = {"resourceVersion": str(self._rv)}
        return out

    async def _serve_watch(self, request):
        yield b""
        self.watches += 1
        gen = self._drop_gen
        loop = asyncio.get_running_loop()
        timeout = float(request.params.get("timeoutSeconds") or 300)
        deadline = loop.time() + timeout
        rv = request.params.get("resourceVersion")
        if rv in (None, "", "0"):
            cursor = self._rv
            for (res, ns, name), obj in list(self._objects.items()):
                if res == request.resource and not obj.deleted \
                        and (request.namespace is None or ns == request.namespace):
                    yield {"type": "ADDED", "object": obj.raw}
        else:
            cursor = int(rv)
            if cursor < self._floor:
                yield {"type": "ERROR", "object": {
                    "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                    "code": 410, "reason": "Expired",
                    "message": f"too old resource version: {cursor} ({self._floor})"}}
                return
        while True:
            for erv, res, event in list(self._log):
                ns = event["object"].get("metadata", {}).get("namespace")
                if erv > cursor and res == request.resource \
                        and (request.namespace is None or ns == request.namespace):
                    cursor = erv
                    yield event
            if gen != self._drop_gen or loop.time() >= deadline:
                return
            async with self._cond:
                try:
                    await asyncio.wait_for(self._cond.wait(), max(0.01, deadline - loop.time()))
                except asyncio.TimeoutError:
                    pass


class Emulator:
    """:class:`ApiServer` on 127.0.0.1 (a free port) in a daemon thread.  ``api_client()``
    gives an official ``kubernetes.client.ApiClient`` pointed at it; ``call(fn)`` runs
    ``fn(server)`` (or awaits it when it returns a coroutine) on the server's loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),),
                                        daemon=True, name="kube-emulator")
        self.server: ApiServer | None = None
        self.port = 0

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with ApiServer() as server, kmock.Server(server) as http:
            self.server, self.port = server, http.port
            self._ready.set()
            await self._stop.wait()

    def start(self) -> "Emulator":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kube emulator did not start")
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api_client(self):
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    def call(self, fn):
        async def run():
            out = fn(self.server)
            if asyncio.iscoroutine(out):
                out = await out
            return out
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)
