"""Kubernetes Node objects -> :class:`elastico.model.Node` (what the round places onto).

Who calls it: the scheduler loop, every round, on its informer's Node cache.  Pure: nodes are
the plain JSON dicts of the API; CPU/memory quantities are parsed by the ``quantity`` function
the caller passes (the loop passes ``kubernetes.utils.parse_quantity``); no kubernetes import.

The node agent writes the annotation ``elastico.io/gpu-inventory`` on its Node: a JSON list of
``{"index": int, "uuid": str, "model": str, "memory_gib": float, "healthy": bool,
"mig_mode": bool}`` (docs/annotations.md).  A node hosts ElastiCo pods only when it is Ready,
schedulable, and has a valid inventory of one GPU model the throughput model knows (GPUs in
MIG mode only on a model with a MIG profile table); any other node is reported with the reason
(the loop logs it once) and gets nothing.

MPS: the agent's ``elastico.io/mps`` annotation, ``{"ready": bool, "reason": str}``, becomes
:attr:`NodeInventory.mps_down` (None = MPS shares may be booked; else why not).  An absent
annotation counts as ready (an agent before this annotation existed); a malformed one as not
ready, with the parse error as the reason.  Either way the node still hosts whole-GPU and MIG
pods.

MIG mode: :attr:`NodeInventory.mig_gpus` names the GPUs (the placement state books MIG
instances only there); the built :class:`~elastico.model.Node` also carries their *count* as
the label :data:`elastico.model.MIG_GPUS_LABEL` (:func:`~elastico.model.with_mig_count`:
replacing any such label on the Node object), which is what the policy reads to offer MIG instances (and, with
``PolicyEnv(mig_pools=True)``, to price the model's MIG-mode GPUs as a pool of their own,
:func:`elastico.model.capacity_of`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Iterable, Mapping

from elastico.model import with_mig_count
from elastico.contract import INVENTORY, MPS_STATUS
from elastico.model import Node
from elastico.hardware import NVML_NAMES, gpu_model_name
from elastico.mig import MIG_PROFILES

__all__ = ["INVENTORY", "NVML_NAMES", "NodeInventory", "node_inventory", "gpu_model_name",
           "mps_down"]

_GIB = Decimal(1 << 30)

@dataclass(frozen=True)
class NodeInventory:
    """A usable node: the model node, the UUID of each GPU index, and the indices of GPUs in
    MIG mode.  ``mps_down``: None when the node's MPS control daemon is ready, else the
    reason no new MPS share may be booked there (module docstring)."""

    node: Node
    uuids: tuple[str, ...]
    mig_gpus: tuple[int, ...] = ()
    mps_down: str | None = None


def mps_down(annotations: Mapping | None) -> str | None:
    """None when the ``elastico.io/mps`` value in ``annotations`` says ready (or is absent),
    else why MPS is unavailable: the agent's reason, or what is wrong with the value."""
    raw = (annotations or {}).get(MPS_STATUS)
    if raw is None:
        return None
    try:
        d = json.loads(raw)
        ready, reason = d["ready"], d.get("reason", "")
        if not isinstance(ready, bool) or not isinstance(reason, str):
            raise ValueError("ready must be a boolean, reason a string")
    except RecursionError:
        return f"invalid {MPS_STATUS} annotation (JSON nested too deep)"
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return (f"invalid {MPS_STATUS} annotation {str(raw)[:200]!r} ({e}); expected "
                '{"ready": true|false, "reason": "..."}')
    return None if ready else (reason or "no reason given by the node agent")


def _ready(status: Mapping) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def node_inventory(obj: Mapping, *, known_models: Iterable[str],
                   quantity: Callable[[str], Decimal]) -> NodeInventory | str:
    """The node's :class:`NodeInventory`, or a string saying why it hosts no ElastiCo pod.

    ``cpu`` = allocatable cores, ``mem_gib`` = allocatable memory / 2**30; GPU memory per GPU
    = the smallest GPU's ``memory_gib``; ``unhealthy_gpus`` = indices with ``healthy`` false;
    ``labels`` = the node's labels (sorted), so placement's topology preferences can use e.g.
    ``topology.kubernetes.io/zone``."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    status = obj.get("status") or {}
    if (obj.get("spec") or {}).get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    if not _ready(status):
        return "not Ready"
    raw = (meta.get("annotations") or {}).get(INVENTORY)
    if raw is None:
        return f"no {INVENTORY} annotation (is the node agent running?)"
    try:
        gpus = json.loads(raw)
        if not isinstance(gpus, list) or not gpus:
            raise ValueError("expected a non-empty JSON list")
        rows = []
        for g in gpus:
            idx, uuid, model = g["index"], g["uuid"], g["model"]
            mem, healthy, mig = g["memory_gib"], g["healthy"], g["mig_mode"]
            if not (isinstance(idx, int) and not isinstance(idx, bool) and isinstance(uuid, str)
                    and uuid and isinstance(model, str) and isinstance(healthy, bool)
                    and isinstance(mig, bool) and isinstance(mem, (int, float))
                    and math.isfinite(mem) and mem > 0):
                raise ValueError(f"bad entry {g!r}")
            rows.append((idx, uuid, model, float(mem), healthy, mig))
    except RecursionError:
        return f"invalid {INVENTORY}: JSON nested too deep"
    except (ValueError, KeyError, TypeError) as e:
        return f"invalid {INVENTORY}: {e}"
    rows.sort()
    if [r[0] for r in rows] != list(range(len(rows))):
        return f"invalid {INVENTORY}: indices {[r[0] for r in rows]} are not 0..{len(rows) - 1}"
    models = {r[2] for r in rows}
    if len(models) != 1:
        return f"mixed GPU models {sorted(models)} (one model per node)"
    model = gpu_model_name(models.pop(), known_models)
    if model is None:
        return f"GPU model {rows[0][2]!r} unknown to the throughput model"
    mig_gpus = tuple(r[0] for r in rows if r[5])
    if mig_gpus and model not in MIG_PROFILES:
        return f"GPUs {list(mig_gpus)} in MIG mode, but {model} has no MIG profiles"
    alloc = status.get("allocatable") or {}
    try:
        cpu = float(quantity(str(alloc.get("cpu", "0"))))
        mem_gib = float(quantity(str(alloc.get("memory", "0"))) / _GIB)
    except (ValueError, ArithmeticError) as e:
        return f"bad status.allocatable {alloc!r}: {e}"
    node = Node(name=name, gpu_model=model, num_gpus=len(rows),
                gpu_mem_gib=min(r[3] for r in rows), cpu=cpu, mem_gib=mem_gib,
                labels=with_mig_count(meta.get("labels") or {}, len(mig_gpus)),
                unhealthy_gpus=frozenset(r[0] for r in rows if not r[4]))
    return NodeInventory(node, tuple(r[1] for r in rows), mig_gpus,
                         mps_down(meta.get("annotations")))
