"""gRPC ``elastico.v1.NodeAgentService``: a thin adapter over the node agent's backend and
:mod:`elastico.nodeagent.nodeplan`.

* ``GetTelemetry`` -- every GPU's readings (:data:`elastico.nodeagent.TELEMETRY_KEYS`
  converted to the wire's units), health, MIG mode and instances.
* ``ApplyNodePlan`` -- MPS client limits, MIG geometries and MIG mode changes of idle GPUs
  (MIG lending).  The whole request is converted
  and validated (:func:`elastico.nodeagent.nodeplan.prepare`) before anything is applied: one
  bad entry -> ``INVALID_ARGUMENT`` naming its field path (``mps_limits[2].gpu_index``,
  ``mig_geometries[0].instances``) and value, and nothing changed.

Backend: given (tests, ``elastico nodeagent``) or chosen by the environment
(:func:`elastico.nodeagent.backend.backend_from_env`: ``ELASTICO_GPU_BACKEND=simulated`` with
``ELASTICO_SIMULATED_GPUS``, NVML otherwise -- without an NVIDIA driver building the server
raises :class:`~elastico.nodeagent.BackendUnavailable`, which the CLI reports with exit status
2, never a traceback).

Who calls it: the placer (node plans), ``grpcurl``, probes (health).  Whom it calls: the
backend, :mod:`elastico.nodeagent.nodeplan`, grpc.  An adapter: exempt from the layering rule.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from typing import Any, Mapping

import grpc

from elastico.errors import InvalidArgument
from elastico.runtime.grpc_server import abort_if_expired, serve_one
from elastico.runtime.metrics import ServiceMetrics
from elastico.nodeagent.backend import GpuBackend, backend_from_env
from elastico.nodeagent.nodeplan import (MigModeChange, MigTarget, NodePlan, apply,
                                         client_limits_from_entries, prepare)
from elastico.tracing import NOOP, Tracer
from elastico.v1 import nodeagent_pb2, nodeagent_pb2_grpc

__all__ = ["SERVICE_NAME", "NodeAgentServicer", "build_server", "plan_from_request"]

#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME: str = nodeagent_pb2.DESCRIPTOR.services_by_name["NodeAgentService"].full_name
MAX_MESSAGE_BYTES = 4 * 2**20
_MAX_ENTRIES = 4096


def _finite(field: str, v: float) -> float:
    if not math.isfinite(v):
        raise InvalidArgument(field, v, "a finite number")
    return v


def plan_from_request(request: nodeagent_pb2.ApplyNodePlanRequest) -> tuple[NodePlan, list[int]]:
    """The :class:`NodePlan` of a request and, per client of the plan, the index of its first
    ``mps_limits`` entry (to name wire fields in errors).  Raises InvalidArgument for what only
    the wire can get wrong (sizes, non-finite numbers, a client's entries disagreeing)."""
    sizes = (len(request.mps_limits), len(request.mig_geometries), len(request.mig_modes))
    if max(sizes) > _MAX_ENTRIES:
        raise InvalidArgument("request", sizes,
                              f"at most {_MAX_ENTRIES} mps_limits, mig_geometries and mig_modes")
    entries, first = [], {}
    for i, m in enumerate(request.mps_limits):
        entries.append((m.client_id, m.gpu_index,
                        _finite(f"mps_limits[{i}].active_thread_percentage", m.active_thread_percentage),
                        _finite(f"mps_limits[{i}].pinned_mem_limit_gib", m.pinned_mem_limit_gib)))
        first.setdefault(m.client_id, i)
    limits = client_limits_from_entries(entries)
    mig = tuple(MigTarget(g.gpu_index, tuple((x.profile, x.start_slot) for x in g.instances))
                for g in request.mig_geometries)
    modes = tuple(MigModeChange(m.gpu_index, bool(m.enabled)) for m in request.mig_modes)
    return NodePlan(limits, mig, modes), [first[c.client_id] for c in limits]


def _wire_error(e: InvalidArgument, first: list[int]) -> InvalidArgument:
    """``mps_limits[<client k>].x`` (the plan's numbering) -> ``mps_limits[<wire i>].x``."""
    head, sep, rest = e.field.partition("].")
    if head.startswith("mps_limits[") and sep:
        k = int(head[len("mps_limits["):])
        if rest == "gpu_indices":
            rest = "gpu_index"
        return InvalidArgument(f"mps_limits[{first[k]}].{rest}", e.value, e.allowed)
    return e


class NodeAgentServicer(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    """GetTelemetry and ApplyNodePlan over ``backend``.  Plans are applied one at a time."""

    def __init__(self, backend: GpuBackend, node_name: str, tracer: Tracer = NOOP):
        self.backend, self.node_name, self._tracer = backend, node_name, tracer
        self._lock = threading.Lock()

    def GetTelemetry(self, request, context):
        out = []
        for g in self.backend.list_gpus():
            t = self.backend.telemetry(g.index)
            out.append(nodeagent_pb2.GpuTelemetry(
                index=g.index, uuid=g.uuid, model=g.model, memory_total_gib=g.memory_total_gib,
                memory_used_gib=t["memory_used_gib"],
                sm_activity=t["utilization_gpu_percent"] / 100.0,
                dram_activity=t["utilization_memory_percent"] / 100.0,
                pcie_rx_gbs=t.get("pcie_rx_gbs", math.nan), pcie_tx_gbs=t.get("pcie_tx_gbs", math.nan),
                power_w=t["power_w"], temperature_c=t["temperature_c"], sm_clock_mhz=t["sm_clock_mhz"],
                healthy=g.healthy, mig_mode=g.mig_mode, mig_model=g.mig_model or "",
                mig_instances=[nodeagent_pb2.MigInstance(profile=d.profile, start_slot=d.start,
                                                         uuid=d.uuid, busy=d.busy)
                               for d in self.backend.mig_devices(g.index)]))
        return nodeagent_pb2.GetTelemetryResponse(node=self.node_name, gpus=out)

    def ApplyNodePlan(self, request, context):
        abort_if_expired(context, "deadline passed before the plan was applied")
        plan, first = plan_from_request(request)
        with self._lock, self._tracer.span("nodeagent.apply_plan",
                                           {"nodeagent.mps_clients": len(plan.mps),
                                            "nodeagent.mig_gpus": len(plan.mig),
                                            "nodeagent.mig_mode_changes": len(plan.modes)}):
            try:
                prepared = prepare(self.backend, plan)
            except InvalidArgument as e:
                raise _wire_error(e, first) from None
            abort_if_expired(context, "deadline passed before the plan was applied; nothing changed")
            done = apply(self.backend, prepared)
        return nodeagent_pb2.ApplyNodePlanResponse(
            mig_steps=[nodeagent_pb2.MigStepDone(gpu_index=i, op=s.op.value, profile=s.profile,
                                                 start_slot=s.start) for i, s in done.steps],
            mps_clients=list(done.clients), mig_mode_changed=list(done.mode_changed))


def build_server(address: str = "127.0.0.1:0", *, max_workers: int = 4,
                 max_concurrent_rpcs: int = 32,
                 credentials: grpc.ServerCredentials | None = None,
                 metrics: ServiceMetrics | None = None,
                 tracer: Tracer = NOOP,
                 backend: GpuBackend | None = None,
                 node_name: str | None = None,
                 env: Mapping[str, str] | None = None,
                 **extra: Any) -> tuple[grpc.Server, int]:
    """A NodeAgentService server bound to ``address`` (port 0 picks a free port), not started;
    the same contract as :func:`elastico.pricing.server.build_server` (health for ``""`` and
    :data:`SERVICE_NAME`, reflection, the error interceptor, ``RESOURCE_EXHAUSTED`` beyond
    ``max_concurrent_rpcs``, TLS by ``credentials``, ``metrics``, ``tracer``).

    ``backend``: the GPUs; None chooses by ``env`` (the process environment when None):
    :func:`elastico.nodeagent.backend.backend_from_env` -- raises
    :class:`~elastico.nodeagent.BackendUnavailable` without an NVIDIA driver.  ``node_name``:
    reported by GetTelemetry (default: ``NODE_NAME`` from ``env``, else the host name).
    Unknown keyword arguments raise InvalidArgument.  Returns ``(server, port)``.
    """
    if extra:
        raise InvalidArgument("build_server", sorted(extra),
                              "no keyword arguments besides backend, node_name and env")
    env = os.environ if env is None else env
    if backend is None:
        backend = backend_from_env(env)
    node = node_name or env.get("NODE_NAME") or socket.gethostname()
    return serve_one(address, SERVICE_NAME,
                     lambda server: nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server(
                         NodeAgentServicer(backend, node, tracer), server),
                     thread_name="elastico-nodeagent", max_workers=max_workers,
                     max_concurrent_rpcs=max_concurrent_rpcs, max_message_bytes=MAX_MESSAGE_BYTES,
                     credentials=credentials, metrics=metrics, tracer=tracer)
