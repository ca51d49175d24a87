"""Node plans: MPS client limits and MIG geometries for one node, validated as a whole before
any of it is applied, then applied in an order that keeps every GPU's geometry valid.

A plan (:class:`NodePlan`) holds client limits (:class:`ClientLimit`: a client on one or more
GPUs with one thread percentage and one pinned memory limit), per MIG-mode GPU the whole
target geometry, and MIG mode changes of idle GPUs (:class:`MigModeChange`: MIG lending).  :func:`prepare` checks everything against the backend's GPUs -- client ids,
percentages, memory, GPU indices, MIG mode, profiles and starts against
:mod:`elastico.mig`, and that no busy instance would be destroyed
(:func:`elastico.mig_plan.plan_repartition`) -- and raises InvalidArgument naming the
first bad field, path and value, before anything changes.  :func:`apply` then runs each GPU's
steps in the planner's order (destroy compute instance, destroy GPU instance, then create GPU
instance, create compute instance; every intermediate geometry is valid) and books the MPS
limits.

:func:`ensure_mig_instance` is the device plugin's path: make sure the instance a pod's
decision names exists, destroying idle instances that overlap it, never a busy one; and
:func:`ensure_mig_mode`: put an idle GPU in the mode a pod's decision needs.

Who calls it: :mod:`elastico.nodeagent.server` (ApplyNodePlan) and
:mod:`elastico.nodeagent.kube.deviceplugin` (Allocate).  Whom it calls: the backend,
:mod:`elastico.mig` and :mod:`elastico.mig_plan`.  Pure of gRPC and Kubernetes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from elastico.errors import Infeasible, InvalidArgument
from elastico.nodeagent.backend import GpuBackend, MigDevice, _MpsBook
from elastico.mig import check_geometry, geometry_problems, mig_profile
from elastico.mig_plan import MigInstance, MigPlan, MigStep, StepOp, plan_repartition

__all__ = ["ClientLimit", "MigTarget", "MigModeChange", "NodePlan", "PreparedPlan", "AppliedPlan",
           "prepare", "apply", "ensure_mig_instance", "ensure_mig_mode"]


@dataclass(frozen=True)
class ClientLimit:
    """MPS limits of client ``client_id`` on GPUs ``gpu_indices``: ``active_thread_percentage``
    in (0, 100], ``pinned_mem_limit_gib`` GiB per GPU."""

    client_id: str
    gpu_indices: tuple[int, ...]
    active_thread_percentage: float
    pinned_mem_limit_gib: float


@dataclass(frozen=True)
class MigTarget:
    """The whole target geometry of GPU ``gpu_index``: ``(profile, start slot)`` pairs."""

    gpu_index: int
    instances: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class MigModeChange:
    """GPU ``gpu_index`` to MIG mode (``enabled``) or to normal mode -- MIG lending's change
    (:mod:`elastico.placer.policies.mig_lending`).  Only on an idle GPU: no process on it, no
    busy MIG instance (``nvmlDeviceSetMigMode`` needs the GPU idle; on A100 the change takes
    effect after a GPU reset, which NVML's activation status reports and the agent does not
    do)."""

    gpu_index: int
    enabled: bool


@dataclass(frozen=True)
class NodePlan:
    mps: tuple[ClientLimit, ...] = ()
    mig: tuple[MigTarget, ...] = ()
    modes: tuple[MigModeChange, ...] = ()


@dataclass(frozen=True)
class PreparedPlan:
    """A validated plan: the MPS limits to book, one :class:`MigPlan` per GPU index, and the
    MIG mode changes ``(gpu index, enabled, plan destroying its idle instances first)`` --
    only those that change a mode."""

    mps: tuple[ClientLimit, ...]
    mig: tuple[tuple[int, MigPlan], ...]
    modes: tuple[tuple[int, bool, MigPlan | None], ...] = ()


@dataclass(frozen=True)
class AppliedPlan:
    """What :func:`apply` did: ``(gpu index, step)`` in execution order, the clients booked,
    the instances created and the GPUs whose MIG mode changed."""

    steps: tuple[tuple[int, MigStep], ...] = ()
    clients: tuple[str, ...] = ()
    created: tuple[MigDevice, ...] = ()
    mode_changed: tuple[int, ...] = ()


def _current(backend: GpuBackend, index: int) -> list[MigInstance]:
    return [MigInstance(d.profile, d.start, d.busy, d.has_ci) for d in backend.mig_devices(index)]


def prepare(backend: GpuBackend, plan: NodePlan) -> PreparedPlan:
    """Validates ``plan`` against ``backend``'s GPUs (module docstring); nothing changes.
    Errors name fields by the plan's order (``mps_limits[<client k>]``); the gRPC adapter
    maps them to its wire entries."""
    gpus = {g.index: g for g in backend.list_gpus()}
    modes = _prepare_modes(backend, gpus, plan.modes)
    switched = {i: on for i, on, _ in modes}
    scratch = _MpsBook()  # validates exactly as the backend's own book will
    seen: set[str] = set()
    for i, lim in enumerate(plan.mps):
        where = f"mps_limits[{i}]"
        for gi in lim.gpu_indices:
            if switched.get(gi) is True:
                raise InvalidArgument(f"{where}.gpu_index", gi, "a GPU this plan does not put "
                                      "in MIG mode (MPS clients run on normal-mode GPUs)")
        if lim.client_id in seen:
            raise InvalidArgument(f"{where}.client_id", lim.client_id, "each client once per plan")
        seen.add(lim.client_id)
        try:
            scratch.set(list(gpus.values()), lim.client_id, lim.active_thread_percentage,
                        lim.pinned_mem_limit_gib, lim.gpu_indices)
        except InvalidArgument as e:
            raise InvalidArgument(f"{where}.{e.field}", e.value, e.allowed) from None
    mig: list[tuple[int, MigPlan]] = []
    done: set[int] = set()
    for i, tgt in enumerate(plan.mig):
        where = f"mig_geometries[{i}]"
        g = gpus.get(tgt.gpu_index)
        if g is None:
            raise InvalidArgument(f"{where}.gpu_index", tgt.gpu_index, f"an index of this node's GPUs {sorted(gpus)}")
        if tgt.gpu_index in done:
            raise InvalidArgument(f"{where}.gpu_index", tgt.gpu_index, "one geometry per GPU per plan")
        done.add(tgt.gpu_index)
        in_mig = switched.get(tgt.gpu_index, g.mig_mode)  # the mode after this plan's changes
        if not in_mig or g.mig_model is None:
            raise InvalidArgument(f"{where}.gpu_index", tgt.gpu_index,
                                  f"a GPU in MIG mode with a MIG table (GPU {tgt.gpu_index} is {g.model}, "
                                  f"mig_mode={in_mig})")
        check_geometry(g.mig_model, list(tgt.instances), f"{where}.instances")
        now = [] if tgt.gpu_index in switched else _current(backend, tgt.gpu_index)
        p = plan_repartition(g.mig_model, now, tgt.instances)
        if not p.ok:
            raise InvalidArgument(f"{where}.instances", list(tgt.instances),
                                  f"a geometry that keeps every busy instance ({p.refused})")
        mig.append((tgt.gpu_index, p))
    return PreparedPlan(tuple(plan.mps), tuple(mig), modes)


def _prepare_modes(backend: GpuBackend, gpus: dict, changes: Sequence[MigModeChange]
                   ) -> tuple[tuple[int, bool, MigPlan | None], ...]:
    """The plan's MIG mode changes, checked (:class:`MigModeChange`): the GPU exists, once per
    plan, MIG mode only on a model with a MIG table, and the GPU idle -- no process, no busy
    MIG instance (idle instances are destroyed before MIG mode is disabled).  A change to the
    mode the GPU already has is dropped."""
    out: list[tuple[int, bool, MigPlan | None]] = []
    seen: set[int] = set()
    for i, ch in enumerate(changes):
        where = f"mig_modes[{i}].gpu_index"
        g = gpus.get(ch.gpu_index)
        if g is None:
            raise InvalidArgument(where, ch.gpu_index, f"an index of this node's GPUs {sorted(gpus)}")
        if ch.gpu_index in seen:
            raise InvalidArgument(where, ch.gpu_index, "one MIG mode change per GPU per plan")
        seen.add(ch.gpu_index)
        if ch.enabled and g.mig_model is None:
            raise InvalidArgument(where, ch.gpu_index, f"a GPU model with MIG (GPU {ch.gpu_index} "
                                  f"is {g.model}, which has no MIG profile table)")
        if bool(ch.enabled) == bool(g.mig_mode):
            continue
        pids = sorted({p.pid for r in backend.activity(ch.gpu_index) for p in r.processes})
        if pids:
            raise InvalidArgument(where, ch.gpu_index, f"an idle GPU (MIG mode changes only "
                                  f"without processes; GPU {ch.gpu_index} runs pids {pids})")
        drain = None
        if not ch.enabled:
            drain = plan_repartition(g.mig_model, _current(backend, ch.gpu_index), ())
            if not drain.ok:
                raise InvalidArgument(where, ch.gpu_index, f"a GPU without busy MIG instances "
                                      f"({drain.refused})")
        out.append((ch.gpu_index, bool(ch.enabled), drain))
    return tuple(out)


def _run_step(backend: GpuBackend, index: int, step: MigStep, created: list[MigDevice]) -> None:
    # The backend pairs GI and CI (create/destroy both), so the CI half of each pair is a no-op
    # here unless the GI exists without its CI.
    if step.op is StepOp.DESTROY_GI:
        backend.destroy_mig_instance(index, step.start)
    elif step.op is StepOp.CREATE_GI:
        created.append(backend.create_mig_instance(index, step.profile, step.start))


def apply(backend: GpuBackend, prepared: PreparedPlan) -> AppliedPlan:
    """Runs a :func:`prepare`-d plan: the MIG mode changes (a GPU leaving MIG mode has its idle
    instances destroyed first), each GPU's MIG steps in order, then the MPS bookings.  A driver
    failure midway raises with the steps done so far named (the GPU's geometry is then still
    valid: each step keeps it so)."""
    done: list[tuple[int, MigStep]] = []
    created: list[MigDevice] = []
    changed: list[int] = []
    for index, on, drain in prepared.modes:
        for step in drain.steps if drain is not None else ():
            _step(backend, index, step, created, done)
        try:
            backend.set_mig_mode(index, on)
        except Exception as e:
            did = ", ".join(f"gpu {i}" for i in changed) or "none"
            raise Infeasible(f"MIG mode {'on' if on else 'off'} on GPU {index} failed ({e}); "
                             f"modes changed: {did}") from None
        changed.append(index)
    for index, p in prepared.mig:
        for step in p.steps:
            _step(backend, index, step, created, done)
    for lim in prepared.mps:
        backend.set_mps_limits(lim.client_id, lim.active_thread_percentage,
                               lim.pinned_mem_limit_gib, lim.gpu_indices)
    return AppliedPlan(tuple(done), tuple(lim.client_id for lim in prepared.mps), tuple(created),
                       tuple(changed))


def _step(backend: GpuBackend, index: int, step: MigStep, created: list[MigDevice],
          done: list[tuple[int, MigStep]]) -> None:
    """One MIG step, appended to ``done``; a failure raises Infeasible naming the steps done."""
    try:
        _run_step(backend, index, step, created)
    except Exception as e:
        did = ", ".join(f"gpu {i}: {s}" for i, s in done) or "none"
        raise Infeasible(f"MIG step {step} on GPU {index} failed ({e}); steps done: {did}") from None
    done.append((index, step))


def ensure_mig_instance(backend: GpuBackend, index: int, profile: str, start: int) -> MigDevice:
    """The MIG instance of ``profile`` at ``start`` on GPU ``index``, created if missing;
    idle instances overlapping it are destroyed first (planner order), a busy one refuses
    (InvalidArgument naming it).  Returns the instance with its UUID."""
    gpu = next((g for g in backend.list_gpus() if g.index == index), None)
    if gpu is None or not gpu.mig_mode or gpu.mig_model is None:
        raise InvalidArgument("gpu_index", index, "a GPU of this node in MIG mode")
    for d in backend.mig_devices(index):
        if d.start == start and d.profile == profile and d.uuid:
            return d
    p = mig_profile(gpu.mig_model, profile)
    if start not in p.starts:
        raise InvalidArgument("mig_start_slot", start, f"a valid start of {profile} {list(p.starts)}")
    current = _current(backend, index)
    # the placer's geometry rules decide which instances may stay beside the new one
    keep = [(c.profile, c.start) for c in current
            if not geometry_problems(gpu.mig_model, [(c.profile, c.start), (profile, start)])]
    target = keep + [(profile, start)]
    plan = plan_repartition(gpu.mig_model, current, target)
    if not plan.ok:
        raise InvalidArgument("mig_profile", f"{profile}@{start}",
                              f"an instance that displaces no busy instance ({plan.refused})")
    applied = apply(backend, PreparedPlan((), ((index, plan),)))
    for d in applied.created:
        if d.start == start:
            return d
    raise Infeasible(f"gpu {index}: {profile} at slot {start} not created")  # pragma: no cover


def ensure_mig_mode(backend: GpuBackend, index: int, enabled: bool) -> bool:
    """GPU ``index`` in MIG mode (``enabled``) or normal mode, switched if it is not -- the
    device plugin's path when the placer's booking needs the other mode (MIG lending lent or
    returned the node).  Only an idle GPU switches (:class:`MigModeChange`); a busy one, or MIG
    mode on a model without MIG, raises Infeasible naming the GPU and why, nothing changed.
    Returns True when the mode changed."""
    try:
        prepared = prepare(backend, NodePlan(modes=(MigModeChange(index, bool(enabled)),)))
    except InvalidArgument as e:
        raise Infeasible(f"GPU {index}: the booking needs MIG mode "
                         f"{'on' if enabled else 'off'}, but it cannot change: {e.allowed}") from None
    return bool(apply(backend, prepared).mode_changed)


def client_limits_from_entries(entries: Sequence[tuple[str, int, float, float]]) -> tuple[ClientLimit, ...]:
    """Groups per-GPU entries ``(client_id, gpu_index, pct, mem_gib)`` (the wire's MpsLimit)
    into one :class:`ClientLimit` per client, in first-seen order.  Entries of one client must
    agree on pct and memory and name distinct GPUs; InvalidArgument names the entry."""
    by: dict[str, list] = {}
    for i, (cid, idx, pct, mem) in enumerate(entries):
        if cid in by:
            first = by[cid]
            if not (math.isclose(first[2], pct) and math.isclose(first[3], mem)):
                raise InvalidArgument(f"mps_limits[{i}]", (cid, idx, pct, mem),
                                      f"the same active_thread_percentage and pinned_mem_limit_gib "
                                      f"as the client's first entry ({first[2]:g}, {first[3]:g})")
            if idx in first[1]:
                raise InvalidArgument(f"mps_limits[{i}].gpu_index", idx, f"each GPU once per client {cid!r}")
            first[1].append(idx)
        else:
            by[cid] = [cid, [idx], pct, mem]
    return tuple(ClientLimit(c, tuple(ix), p, m) for c, ix, p, m in by.values())
