"""The scheduling round: its contract, in one place, and the one function that runs it.

Who calls it: the trace-driven simulator (:mod:`elastico.sim.simulator`) with a virtual clock,
the placer service (:mod:`elastico.placer.server`, ``RunRound``) and the live Kubernetes loop
(:mod:`elastico.placer.kube.loop`) with a wall clock -- the *same* code (STYLE.md 1 and 5).
Whom it calls: a :class:`Policy` (``exclusive``, ``elastico``; see
:mod:`elastico.placer.policies`; the ``elastico`` round's stages and their data flow:
:mod:`elastico.placer.policies.pipeline`), which in turn uses Resource Shape Transformation
(:mod:`elastico.shapes`), the pricing solver (:mod:`elastico.pricing`), the slowdown model
(:mod:`elastico.predictor`) and the placement state (:mod:`elastico.placer.placement`).

Contract of one round
---------------------
Input (:class:`RoundInput`): the time ``now`` (seconds; an argument, never read from a clock
here), the cluster's nodes, the placement state holding every running job's booking, and the
active jobs (arrived, unfinished), each with its current configuration if running.

Output (:class:`RoundResult`): one :class:`Decision` per active job, with a status from a
small vocabulary (:class:`Status`): ``placed`` (runs with ``config`` at ``assignment``),
``waiting`` (why), ``unplaceable`` (why: no node can ever host it), ``degraded`` (placed, but
with a fallback, why), ``error``.  Plus the new placement state and the pricing result.

The round is all-or-nothing: the policy works on a copy of the placement state and the
caller swaps it in only when the round returns, so a failing round leaves the previous
allocation in force (nothing half-applied).  A running job whose configuration or GPUs change
pays a restart (``changed=True``); the policy decides when that is worth it (hysteresis).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from elastico.model import Configuration, Job, Node
from elastico.tracing import NOOP, Tracer

from .placement import Assignment, ClusterState

__all__ = ["UNKNOWN_PREFIX", "unknown_reason", "Status", "ActiveJob", "Decision", "RoundInput", "RoundResult", "Policy", "RoundObserver",
           "MarkDegraded", "run_round"]


#: Every reason the unknown-job rule (issue 23; :func:`elastico.placer.policies.pipeline.
#: mark_unknown`) adds to a decision starts with this; :func:`run_round` puts those reasons in
#: the round's span and the Kubernetes loop in the pod's ``UnknownProfile`` Event.
UNKNOWN_PREFIX = "unknown profile: "


def unknown_reason(reason: str) -> str:
    """The unknown-job rule's part of a decision's ``reason`` ("" when it has none)."""
    i = reason.find(UNKNOWN_PREFIX)
    return reason[i:] if i >= 0 else ""


class Status(str, enum.Enum):
    """What happens next for a job (the same value feeds the trace span, the pod Event and the
    metric)."""

    PLACED = "placed"
    WAITING = "waiting"
    UNPLACEABLE = "unplaceable"
    DEGRADED = "degraded"
    ERROR = "error"


@dataclass(frozen=True)
class ActiveJob:
    """An arrived, unfinished job as the round sees it.  ``config`` is the configuration it runs
    with now (None when pending or preempted)."""

    job: Job
    config: Configuration | None = None

    @property
    def running(self) -> bool:
        return self.config is not None and not self.config.is_wait


@dataclass(frozen=True)
class Decision:
    job_id: str
    status: Status
    config: Configuration | None
    assignment: Assignment | None = None
    slowdown: float = 1.0
    reason: str = ""
    changed: bool = False


@dataclass(frozen=True)
class RoundInput:
    now: float
    nodes: Sequence[Node]
    state: ClusterState
    jobs: Sequence[ActiveJob]


@dataclass
class RoundResult:
    decisions: dict[str, Decision]
    state: ClusterState
    pricing: object | None = None
    # names of ``pricing.prices`` (the policy's resource space, elastico.model.ResourceSpace)
    resource_names: tuple[str, ...] = ()
    phase_seconds: dict[str, float] = field(default_factory=dict)
    degraded: str = ""
    # the policy's next round is due at this time (seconds, RoundInput.now's clock) even if
    # no job arrives or finishes by then (e.g. a gavel lease ends); None = only at events.
    # The simulator honours it; the Kubernetes loop runs rounds on its own timer.
    wake_at_s: float | None = None
    # running jobs the priority rule took GPUs from this round (evicted, or shrunk) -> the job
    # they made room for (elastico.placer.policies.priority, step 6); the Kubernetes loop
    # evicts such a bound pod and holds the other job back until the pod is gone
    preempted: dict[str, str] = field(default_factory=dict)
    # MIG mode changes the round made on empty nodes (elastico.placer.policies.mig_lending
    # MigSwitch: node, GPUs, on/off, why); the state carries them
    mig_switches: list = field(default_factory=list)


class Policy(Protocol):
    """A scheduling policy: one call per round.  Must not mutate ``inp.state`` (it gets a copy
    from :func:`run_round`)."""

    name: str

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult: ...


class MarkDegraded:
    """``policy``, plus: when ``model`` (the round's slowdown model) fell back during the round
    -- its ``degraded`` attribute is a non-empty reason, e.g. the predictor service was
    unreachable -- the result says why (``RoundResult.degraded``) and every job placed or
    moved in the round gets status ``degraded`` with the reason appended.  A model without
    ``degraded`` never degrades a round.  Used by the placer service and the Kubernetes loop."""

    def __init__(self, policy: Policy, model: object):
        self.policy, self.model, self.name = policy, model, policy.name

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        res = self.policy(inp, state)
        why = getattr(self.model, "degraded", "")
        if why:
            res.degraded = why
            for jid, d in list(res.decisions.items()):
                if d.status is Status.PLACED and d.changed:
                    res.decisions[jid] = dataclasses.replace(d, status=Status.DEGRADED,
                                                             reason=f"{d.reason}; {why}")
        return res


class RoundObserver(Protocol):
    """Records a finished round (e.g. :class:`elastico.runtime.metrics.ServiceMetrics`: duration,
    jobs by status, GPU allocation, prices)."""

    def observe_round(self, inp: RoundInput, result: RoundResult) -> None: ...


def run_round(policy: Policy, inp: RoundInput,
              timer: Callable[[], float] = time.perf_counter,
              tracer: Tracer = NOOP, metrics: RoundObserver | None = None) -> RoundResult:
    """Run one round of ``policy`` on ``inp``.

    The policy decides on a private copy of the placement state; the result carries the new
    state, so the caller commits the whole round or none of it.  Every active job gets exactly
    one decision (checked: a policy that drops or invents jobs is a bug and raises
    RuntimeError).  ``timer`` only measures the round's own duration for metrics.
    ``tracer``: the round is one ``elastico.round`` span (attributes: policy, jobs, virtual
    time, decisions by status); the policy's phases are its children when the policy was
    built with the same tracer (``PolicyEnv.tracer``).  The per-status counts are the
    attributes ``round.placed``, ``round.waiting``, ``round.unplaceable``, ``round.degraded``,
    ``round.error`` (ints); a degraded round (``result.degraded``, e.g. the predictor was
    unreachable) also says why in ``round.degraded_reason`` (a string); jobs with status
    ``error`` are named in ``round.error_jobs`` (comma-separated job ids).  Jobs placed with
    no solo profile yet (issue 23) are named in ``round.unknown_jobs`` (comma-separated) and
    ``round.unknown_reasons`` (strings ``"<job id>: unknown profile: <why>"``); MIG mode
    changes (``result.mig_switches``) in ``round.mig_switches`` (strings ``"<node> gpus <i,j,..>
    on|off: <why>"``).
    ``metrics``: told about every round that returns (not about one that raises).
    """
    t0 = timer()
    with tracer.span("elastico.round", {"round.policy": policy.name,
                                        "round.jobs": len(inp.jobs),
                                        "round.now_s": float(inp.now)}) as span:
        result = _decide(policy, inp)
        for status in Status:
            span.set_attribute(f"round.{status.value}", sum(
                1 for d in result.decisions.values() if d.status is status))
        if result.degraded:
            span.set_attribute("round.degraded_reason", result.degraded)
        unknown = sorted((j, unknown_reason(d.reason)) for j, d in result.decisions.items()
                         if UNKNOWN_PREFIX in d.reason)
        if unknown:
            span.set_attribute("round.unknown_jobs", ",".join(j for j, _ in unknown))
            span.set_attribute("round.unknown_reasons", [f"{j}: {r}" for j, r in unknown])
        if result.mig_switches:  # "node-3 gpus 0-7 off" per change (mig_lending)
            span.set_attribute("round.mig_switches", [
                f"{s.node} gpus {','.join(map(str, s.gpus))} {'on' if s.on else 'off'}: {s.reason}"
                for s in result.mig_switches])
        errs = sorted(j for j, d in result.decisions.items() if d.status is Status.ERROR)
        if errs:
            span.set_attribute("round.error_jobs", ",".join(errs))
    result.phase_seconds["round"] = timer() - t0
    if metrics is not None:
        metrics.observe_round(inp, result, unknown=unknown_job_ids(result.state))
    return result


def unknown_job_ids(state) -> frozenset[str]:
    """Ids of the jobs booked in ``state`` (a ClusterState) with no solo profile yet: their
    booked profile is the worst case (:func:`elastico.predictor.prior.is_worst_case`), not
    what they do.  For the round's metrics (``elastico_gpu_unknown_allocation``)."""
    from elastico.predictor.prior import is_worst_case

    return frozenset(a.job_id for a in state.assignments()
                     if is_worst_case(state.profile(a.job_id)))


def _decide(policy: Policy, inp: RoundInput) -> RoundResult:
    state = inp.state.copy()
    result = policy(inp, state)
    ids = {a.job.id for a in inp.jobs}
    if set(result.decisions) != ids:
        missing = sorted(ids - set(result.decisions))[:5]
        extra = sorted(set(result.decisions) - ids)[:5]
        raise RuntimeError(f"policy {policy.name!r} decided for the wrong jobs: "
                           f"missing {missing}, unknown {extra}")
    return result
