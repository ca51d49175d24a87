"""The pod and Node contract between the placer and the node agent: the one place the
``elastico.io/*`` names they exchange are defined (docs/annotations.md sections 3 and 5,
docs/nodeagent.md).

Written by the placer on a pod before its Binding, read by the node agent's device plugin in
``Allocate``:

===============================================  ================================================
:data:`ROUND_ID` ``round-id``                    the round that decided (any non-empty text)
:data:`CONFIGURATION` ``configuration``          the chosen configuration's name
:data:`GPU_UUIDS` ``gpu-uuids``                  comma-separated GPU UUIDs of the pod's node
:data:`MIG_PROFILE` ``mig-profile``              MIG profile (with ``mig-start-slot``), MIG only
:data:`MIG_START_SLOT` ``mig-start-slot``        memory slice the MIG instance starts at
``mps-active-thread-percentage``                 integer 1..100, MPS-shared only
``mps-pinned-device-mem-limit-gib``              GiB per GPU (> 0), MPS-shared only
:data:`TENSOR_PARALLEL` ``tensor-parallel``       GPUs per engine replica, LLM inference only
:data:`PREDICTED_SLOWDOWN` ``predicted-slowdown``  >= 1, informational
===============================================  ================================================

Written by the node agent: :data:`ALLOCATED` on the pod once Allocate handed out its devices
(``<pod uid>/<container>``, comma-separated for several containers), and :data:`INVENTORY` on
its Node (the GPU list the placer builds its model nodes from).  Pods request
:data:`GPU_RESOURCE` and name :data:`SCHEDULER_NAME`.

Who imports it: :mod:`elastico.placer.kube.annotations` (writes the decision),
:mod:`elastico.placer.kube.inventory`, :mod:`elastico.placer.kube.bookings` (reads
:data:`ALLOCATED`), :mod:`elastico.nodeagent.allocation` (reads the decision, writes
:data:`ALLOCATED`) and :mod:`elastico.nodeagent.inventory`.  Constants, and the one reader of
the :data:`ALLOCATED` value both sides use (:func:`allocated_containers`); no imports beyond
the standard library.
"""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = [
    "PREFIX", "SCHEDULER_NAME", "GPU_RESOURCE", "ROUND_ID", "CONFIGURATION", "GPU_UUIDS",
    "MIG_PROFILE", "MIG_START_SLOT", "MPS_ACTIVE_THREAD_PERCENTAGE", "MPS_PINNED_MEM_LIMIT_GIB",
    "PREDICTED_SLOWDOWN", "TENSOR_PARALLEL", "ALLOCATED", "INVENTORY", "MPS_STATUS",
    "MIG_FOLLOW", "MIG_LENDING", "allocated_containers", "JOB_LABEL", "job_key",
]

PREFIX = "elastico.io/"
#: ``spec.schedulerName`` of the pods the placer schedules.
SCHEDULER_NAME = "elastico"
#: The extended resource a GPU container requests (1 per container) and the device plugin
#: registers: a handle that makes kubelet call the plugin; the GPUs and share come from the
#: decision.
GPU_RESOURCE = PREFIX + "gpu"

ROUND_ID = PREFIX + "round-id"
CONFIGURATION = PREFIX + "configuration"
GPU_UUIDS = PREFIX + "gpu-uuids"
MIG_PROFILE = PREFIX + "mig-profile"
MIG_START_SLOT = PREFIX + "mig-start-slot"
MPS_ACTIVE_THREAD_PERCENTAGE = PREFIX + "mps-active-thread-percentage"
MPS_PINNED_MEM_LIMIT_GIB = PREFIX + "mps-pinned-device-mem-limit-gib"
PREDICTED_SLOWDOWN = PREFIX + "predicted-slowdown"
#: An offline LLM inference pod's tensor-parallel degree: the pod's GPUs run ``GPUs / value``
#: engine replicas of ``value`` GPUs each (docs/annotations.md); absent for other pods.
TENSOR_PARALLEL = PREFIX + "tensor-parallel"

ALLOCATED = PREFIX + "allocated"
#: On the Node: a JSON list, one object per GPU (:mod:`elastico.nodeagent.inventory` writes
#: it, :mod:`elastico.placer.kube.inventory` reads it).
INVENTORY = PREFIX + "gpu-inventory"
#: On the Node: the MPS control daemon's state, JSON ``{"ready": bool, "reason": str}``
#: (:mod:`elastico.nodeagent.inventory` writes it with the inventory and at once when it
#: changes; :mod:`elastico.placer.kube.inventory` reads it: no new MPS booking while not ready).
MPS_STATUS = PREFIX + "mps"
#: On the Node: ``"true"`` when the node agent's device plugin switches an idle GPU to the MIG
#: mode its pod's booking needs (``elastico nodeagent --follow-mig-mode``), else ``"false"``
#: (:mod:`elastico.nodeagent.inventory` writes it with the inventory); the placer lends only
#: such nodes (:mod:`elastico.placer.kube.lending`).
MIG_FOLLOW = PREFIX + "mig-follow"
#: On the Node, written by the placer (the leader) only: the node's MIG-mode GPUs it has lent
#: whole, JSON ``{"lent": [GPU index, ...], "returning": [GPU index, ...]}`` -- ``returning``:
#: given back to MIG mode, not yet switched back by the agent (it switches at the next MIG
#: booking); absent = none (:mod:`elastico.placer.kube.lending`, docs/annotations.md).
MIG_LENDING = PREFIX + "mig-lending"


def allocated_containers(value: str | None, uid: str | None) -> list[str]:
    """The containers an :data:`ALLOCATED` ``value`` lists for the pod with ``uid``: each
    comma-separated ``<uid>/<container>`` entry of that uid, in order.  Entries of another
    uid (an earlier pod of the same name) or of another form (``"true"`` written by hand)
    count not; a missing ``uid`` (None) matches nothing."""
    out = []
    for entry in str(value or "").split(","):
        u, _, container = entry.strip().partition("/")
        if u == uid and container:
            out.append(container)
    return out


#: Pod label naming the job a pod belongs to (docs/annotations.md, "Jobs and gangs").
JOB_LABEL = PREFIX + "job"


def job_key(namespace: str, pod_name: str, labels: Mapping[str, str] | None = None,
            owners: Sequence[tuple[str, str, bool]] = ()) -> str:
    """The identity of the job a pod belongs to, as the placer groups pods
    (``elastico.placer.kube.annotations.job_group``): ``ns/label/<elastico.io/job>`` when the
    label is set, else ``ns/<Kind>/<name>`` of the controller owner reference (the first
    owner when none is marked controller; ``owners`` = ``(kind, name, controller)``), else
    ``ns/pod/<pod name>``.  The node agent keys solo activity profiles by it."""
    ns = namespace or "default"
    label = (labels or {}).get(JOB_LABEL)
    if label:
        return f"{ns}/label/{label}"
    owner = next((o for o in owners if o[2]), owners[0] if owners else None)
    if owner:
        return f"{ns}/{owner[0]}/{owner[1]}"
    return f"{ns}/pod/{pod_name}"
