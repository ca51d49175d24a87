"""The Linux user a pod's MPS clients run as (docs/placement.md, "MPS: the daemon and users").

NVIDIA MPS runs one MPS server per Linux user ID; a client of another user is queued by the
control daemon until that server exits (NVIDIA's MPS documentation), so a pod sharing a GPU
with pods of another user waits -- wedged -- instead of running.  The placer therefore never
puts MPS shares of different users on one GPU (:meth:`elastico.placer.placement.ClusterState.
set_mps_user`).

The effective user of a container that requests ``elastico.io/gpu``: its
``securityContext.runAsUser``, else the pod's ``spec.securityContext.runAsUser``, else
*unspecified* -- the image's ``USER``, which the placer cannot see.  Unspecified is one class of
its own: such pods share an MPS GPU only with each other (an operator mixing images with
different ``USER`` lines sets ``runAsUser``).  Every GPU container of a pod (init containers
included) must have the same effective user, else the pod is refused.

Who calls it: the scheduler loop (pending pods) and :func:`~elastico.placer.kube.bookings.
rebuild_book` (booked pods: the spec cannot change, so a restarted placer reads the same
user).  Pure: pods are the plain JSON dicts of the API; no kubernetes import.
"""

from __future__ import annotations

from typing import Mapping

from elastico.contract import GPU_RESOURCE
from elastico.errors import InvalidArgument

__all__ = ["UNSPECIFIED", "MAX_UID", "mps_user", "requests_gpu"]

#: The user phrase of pods that leave ``runAsUser`` to their image.
UNSPECIFIED = "the image's default user (no runAsUser)"
#: Largest ``runAsUser`` Kubernetes accepts (int32 range, as kube-apiserver validates).
MAX_UID = 2**31 - 1
_ALLOWED = f"an integer user ID in 0..{MAX_UID}"


def _uid(field: str, ctx: object) -> int | None:
    if ctx is None:
        return None
    if not isinstance(ctx, Mapping):
        raise InvalidArgument(field.rsplit(".", 1)[0], ctx, "an object (a securityContext)")
    v = ctx.get("runAsUser")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_UID:
        raise InvalidArgument(field, v, _ALLOWED)
    return v


def requests_gpu(c: Mapping) -> bool:
    """Whether container ``c`` (a pod spec's container dict) requests or limits
    :data:`~elastico.contract.GPU_RESOURCE`."""
    res = c.get("resources") or {}
    return any(GPU_RESOURCE in (res.get(k) or {}) for k in ("requests", "limits"))


def mps_user(pod: Mapping) -> str:
    """The user phrase of ``pod``'s GPU containers (module docstring): ``"user <uid>"`` or
    :data:`UNSPECIFIED`.  Raises InvalidArgument naming the field (e.g.
    ``spec.containers[main].securityContext.runAsUser``), its value and what is allowed for a
    runAsUser that is not an integer user ID, or when GPU containers run as different users."""
    spec = pod.get("spec") or {}
    pod_uid = _uid("spec.securityContext.runAsUser", spec.get("securityContext"))
    users: dict[str, int | None] = {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            if not isinstance(c, Mapping) or not requests_gpu(c):
                continue
            name = c.get("name", "")
            own = _uid(f"spec.{kind}[{name}].securityContext.runAsUser", c.get("securityContext"))
            users[name] = own if own is not None else pod_uid
    distinct = set(users.values()) if users else {pod_uid}
    if len(distinct) > 1:
        shown = ", ".join(f"{n}={'unset' if u is None else u}" for n, u in users.items())
        raise InvalidArgument(
            "spec.containers[].securityContext.runAsUser", shown,
            f"one user for every container that requests {GPU_RESOURCE} (NVIDIA MPS runs one "
            "server per Linux user; clients of two users on one GPU wait for each other)")
    uid = distinct.pop()
    return UNSPECIFIED if uid is None else f"user {uid}"
