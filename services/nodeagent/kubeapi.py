"""The Kubernetes access the node agent needs, as a small interface, and an in-memory fake.

Three calls (and RBAC grants exactly these: docs/nodeagent.md): list the pods bound to this
node (``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``), merge-patch a pod's
annotations, merge-patch this node's annotations.  :class:`elastico.nodeagent.kube.client.
KubernetesNodeApi` implements them with the official ``kubernetes`` client;
:class:`FakeNodeApi` keeps pods and node annotations in memory for tests.

Who calls it: the device plugin (Allocate), the inventory publisher.  Pure: no Kubernetes
import here.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Mapping, Protocol

from elastico.errors import NotFound
from elastico.nodeagent.allocation import PodInfo

__all__ = ["NodeApi", "FakeNodeApi"]


class NodeApi(Protocol):
    def list_node_pods(self, node: str) -> list[PodInfo]:
        """Pods whose ``spec.nodeName`` is ``node`` (any namespace)."""
        ...

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str],
                              *, uid: str | None = None) -> None:
        """Merges ``annotations`` into the pod's; with ``uid``, refuses (NotFound) when the pod
        of that name is now another pod."""
        ...

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str]) -> None:
        """Merges ``annotations`` into the node's."""
        ...


class FakeNodeApi:
    """Pods and node annotations in memory; counts calls (``calls``) so tests see what ran."""

    def __init__(self, pods: list[PodInfo] | None = None):
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], PodInfo] = {(p.namespace, p.name): p for p in pods or []}
        self.node_annotations: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, ...]] = []
        self.fail_patch: Exception | None = None

    def add_pod(self, pod: PodInfo) -> None:
        with self._lock:
            self.pods[(pod.namespace, pod.name)] = pod

    def pod(self, namespace: str, name: str) -> PodInfo:
        with self._lock:
            return self.pods[(namespace, name)]

    def list_node_pods(self, node: str) -> list[PodInfo]:
        with self._lock:
            self.calls.append(("list", node))
            return [p for p in self.pods.values() if p.node_name == node]

    def patch_pod_annotations(self, namespace, name, annotations, *, uid=None) -> None:
        with self._lock:
            self.calls.append(("patch_pod", f"{namespace}/{name}"))
            if self.fail_patch is not None:
                raise self.fail_patch
            p = self.pods.get((namespace, name))
            if p is None or (uid is not None and p.uid != uid):
                raise NotFound(f"pod {namespace}/{name} (uid {uid}) not found")
            self.pods[(namespace, name)] = replace(p, annotations={**p.annotations, **annotations})

    def patch_node_annotations(self, node, annotations) -> None:
        with self._lock:
            self.calls.append(("patch_node", node))
            self.node_annotations.setdefault(node, {}).update(annotations)
