""":class:`~elastico.nodeagent.kubeapi.NodeApi` with the official ``kubernetes`` client.

Configuration: in-cluster (the DaemonSet's ServiceAccount) when running in a pod, else the
local kubeconfig.  Calls: ``list_pod_for_all_namespaces(field_selector="spec.nodeName=...")``,
``patch_namespaced_pod`` and ``patch_node`` with merge patches of ``metadata.annotations``
(a pod patch carries ``metadata.uid`` as a precondition-like check: the API server rejects a
patch whose uid differs from the stored object's, so an annotation never lands on a recreated
pod of the same name).  API errors become :class:`elastico.errors.NotFound` (404) or
:class:`KubeApiError` with the status and reason.

An adapter: imports ``kubernetes``; exempt from the layering rule (tests/test_layers.py).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from elastico.contract import GPU_RESOURCE, job_key
from elastico.errors import ElasticoError, NotFound
from elastico.nodeagent.allocation import PodInfo

__all__ = ["KubeApiError", "KubernetesNodeApi", "pod_info"]


class KubeApiError(ElasticoError):
    """The Kubernetes API refused or failed a call (status and reason in the message)."""


@contextlib.contextmanager
def _calling(what: str) -> Iterator[None]:
    """Turns the client's errors into NotFound / KubeApiError naming ``what``: an HTTP error
    status, and an API server that cannot be reached at all (urllib3 gives up after its retries)."""
    try:
        yield
    except ApiException as e:
        if e.status == 404:
            raise NotFound(f"{what}: not found") from None
        raise KubeApiError(f"{what}: Kubernetes API error {e.status} {e.reason}: "
                           f"{(e.body or '')[:300]}") from None
    except urllib3.exceptions.HTTPError as e:
        raise KubeApiError(f"{what}: Kubernetes API unreachable: {getattr(e, 'reason', e)}") from None


def _requests_gpu(c: Any) -> bool:
    res = c.resources
    for part in (getattr(res, "limits", None), getattr(res, "requests", None)):
        if part and GPU_RESOURCE in part:
            return True
    return False


def pod_info(p: Any) -> PodInfo:
    """A :class:`PodInfo` from a ``V1Pod``."""
    spec, meta = p.spec, p.metadata
    containers = [c.name for c in (spec.init_containers or []) if _requests_gpu(c)]
    containers += [c.name for c in (spec.containers or []) if _requests_gpu(c)]
    owners = [(o.kind or "", o.name or "", bool(o.controller))
              for o in (getattr(meta, "owner_references", None) or [])]
    return PodInfo(meta.namespace, meta.name, meta.uid, spec.node_name or "",
                   spec.scheduler_name or "", dict(meta.annotations or {}), tuple(containers),
                   meta.deletion_timestamp is not None,
                   (p.status.phase if p.status is not None else None) or "Pending",
                   job_key(meta.namespace, meta.name, dict(getattr(meta, "labels", None) or {}),
                           owners))


class KubernetesNodeApi:
    """The node agent's Kubernetes calls through ``kubernetes.client.CoreV1Api``."""

    def __init__(self, api: Any | None = None):
        if api is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                try:
                    config.load_kube_config()
                except (config.ConfigException, OSError) as e:
                    raise KubeApiError(f"no Kubernetes configuration: not in a cluster and no "
                                       f"kubeconfig ({e})") from None
            api = client.CoreV1Api()
        self.api = api

    def list_node_pods(self, node: str) -> list[PodInfo]:
        with _calling(f"list pods on node {node}"):
            pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        return [pod_info(p) for p in pods.items]

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str],
                              *, uid: str | None = None) -> None:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if uid is not None:
            meta["uid"] = uid
        with _calling(f"patch pod {namespace}/{name}"):
            self.api.patch_namespaced_pod(name, namespace, {"metadata": meta})

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str]) -> None:
        with _calling(f"patch node {node}"):
            self.api.patch_node(node, {"metadata": {"annotations": dict(annotations)}})
