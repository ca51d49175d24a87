"""Trace-driven discrete-event simulator.

Who calls it: the CLI (``elastico simulate``) and tests.  Whom it calls: the *same* scheduling
round the live loop uses (:func:`elastico.placer.round.run_round` with a policy from
:mod:`elastico.placer.policies`); nothing in the round knows it is simulated.

Model of time (docs/metrics.md): events are job arrivals and completions; a round runs at
every event time.  Between events every placed batch job progresses at its *effective* rate
``config.throughput / slowdown`` (normalized throughput: 1.0 = the job's trace speed, so a job
of ``work`` W seconds finishes after W seconds at rate 1.0; a service progresses at rate 1,
below), where ``slowdown`` comes from its
GPU co-residents: by the ``truth`` model when one is given (``elastico simulate`` passes
:class:`elastico.sim.contention_truth.GroundTruth`: Gavel's measured pairs where they apply,
the contention model :mod:`elastico.perf.contention` elsewhere), else by the placement
state's own (predicted) model.  The placer decides with its predictor; the jobs run at the
true slowdowns (docs/predictor.md, "Simulator").

Sharing mechanisms (docs/model.md, "Sharing mechanisms"): a policy whose ``sharing`` is
``"time-slicing"`` (``time-slicing``, ``fgd``: the NVIDIA device plugin's shared-GPU mode)
gets no share cap -- a pod alone on a GPU runs at the whole GPU's speed
(``config.throughput / share_speed(job_type, gpu_share)``), co-resident pods at that speed
over their time-sliced slowdown (:class:`elastico.predictor.TimeSlicedTruth`: the measured
pair slowdown is the total effect, at most k for k residents).  Every other policy shares by
MPS: its configuration's throughput at the enforced active thread percentage, over the
measured interference.  A running job whose
configuration or GPUs change loses ``restart_s`` seconds (checkpoint/restore), as does a
preempted job when it starts again.  The virtual clock is the simulator's own; wall-clock time
is read only to measure round durations.

Windows (docs/metrics.md, "Which window counts"): every windowed metric is over one
measurement window ``(lo, hi)`` -- given (continuous arrivals: after the warm-up), else the
arrival window -- and a replay given ``horizon_s`` stops there, or, given ``overrun_s``, goes
on past it with no further arrival until every batch job that arrived in the window has
finished (so that every policy's JCT statistics are over the same jobs).  JCT and slowdown
statistics count the batch jobs that arrived in the window, finished and are not ``censored``
(a trace lifetime cut off by the end of the observation); throughput and work count what
finished or was done inside it.

MIG: the GPUs in MIG mode at the start are those the nodes' labels name
(:func:`elastico.model.mig_gpus_of`; an operator's setting) when the policy can use MIG
instances (``policy.uses_mig``), none otherwise.  A policy may change an empty node's mode in
its round (``elastico``'s MIG lending, :mod:`elastico.placer.policies.mig_lending`); the round's
state carries the change and the metric ``mig_mode_switches`` counts them.  A job on a MIG
instance runs at its configuration's (solo MIG) throughput: instances are isolated, so
co-residents of the GPU never slow it.  A
service's recorded slowdown is the larger of its interference slowdown and its requested
shape's speed on the GPU model it runs on over its effective speed (so a service given a
slice slower than it asked for counts against its bound).

Offline LLM inference jobs (``Job.llm``; :mod:`elastico.llm_job`): progress is tokens --
``Job.done`` in normalized seconds times the job's reference tokens/s, reported per job as
``JobRecord.tokens`` -- at their configuration's tokens/s (replicas splitting the requests,
memory fit decided by the LLM model: :mod:`elastico.llm_shapes`).  Each start of such a job,
the first one included, costs its replicas' weight loading (``startup(job, config)``, default
:func:`elastico.llm_shapes.startup_s` at ``llm_load_gbps``) instead of ``restart_s``: no token
is produced before the weights are on the GPUs.  ASSUMPTION: the requests finished before a
reconfiguration stay done (an offline batch writes its outputs as they complete), so a restart
loses the load time only.

Evictions (docs/metrics.md, "Evictions and wasted work"): a running job the round leaves
without a configuration is evicted (``JobRecord.evictions``).  An offline LLM job loses its
in-flight requests (:func:`elastico.llm_shapes.inflight_tokens`, at most what it did since its
current run began): its progress goes back by them and they count as wasted tokens and
GPU-seconds; any evicted job's restart when it starts again counts as wasted GPU-seconds too.
A reconfiguration to less GPU compute is a shrink (``JobRecord.shrinks``).

LLM training jobs (``Job.llm_train``; :mod:`elastico.llm_train_job`): progress is tokens
trained the same way (``JobRecord.tokens``: the tokens to train on), at their configuration's
tokens/s (6 N T at a cited MFU); a restart costs ``restart_s`` (checkpoint / restore) as any
training job's.

Services are not batch work: a service runs until its owner deletes it (the trace's
``deletion - scheduled``) and serves the load its request was sized for, however much GPU it
is given.  So a placed service progresses at rate 1.0 (its lifetime passes in wall time) and
keeps busy only ``min(1, requested speed / effective speed)`` of its configuration's busy
SMs: a 0.47-GPU service given a whole GPU (as ``exclusive`` gives it) keeps the SMs of its
0.47 share busy, not the whole GPU's, and does not leave early.  (Before this rule a
service on a faster GPU than it asked for finished its lifetime early and freed its GPUs,
which flattered every policy that hands out whole or faster GPUs.)
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Node, mig_gpus_of
from elastico.placer.placement import ClusterState
from elastico.placer.round import ActiveJob, Policy, RoundInput, Status, run_round
from elastico.predictor import SlowdownModel
from elastico.sim.utilisation import UtilisationMeter
from elastico.tracing import NOOP, Tracer

__all__ = ["JobRecord", "SimResult", "simulate", "METRIC_KEYS", "backlog_growth", "slowdown_models",
           "backlog_bounded", "backlog_allowed", "BACKLOG_GROWTH_FRACTION", "bound_time_metrics", "BOUND_TIME_GOAL"]

METRIC_KEYS = (
    "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
    "jobs_per_hour", "jobs_completed", "gpu_allocation", "gpu_utilization",
    "round_ms_p50", "round_ms_p99", "service_bound_violations",
    # the measurement window's (docs/metrics.md, "Which window counts")
    "work_per_hour", "avg_slowdown", "p50_slowdown", "p95_slowdown", "p99_slowdown",
    "avg_jct_short_s", "avg_jct_long_s", "p50_slowdown_short", "p50_slowdown_long",
    "jobs_censored", "window_s", "jobs_window_unfinished",
)

_EPS = 1e-9


@dataclass
class JobRecord:
    """What happened to one job (seconds of virtual time)."""

    job_id: str
    kind: str
    arrival_s: float
    work: float
    first_start_s: float | None = None
    finish_s: float | None = None
    restarts: int = 0
    progress: float = 0.0          # integral of the progress rate dt (work conservation check)
    status: str = "pending"        # pending | running | finished | unplaceable | unfinished
    reason: str = ""
    slowdown_bound: float = math.inf
    max_slowdown: float = 1.0      # highest slowdown it ran at (the truth model), 1.0 = alone
    censored: bool = False         # the trace's lifetime is cut off (Job.censored)
    alone_s: float = 0.0           # run time alone at the requested shape (docs/metrics.md)
    gpus: float = 0.0              # requested GPUs (num_gpus x share), for normalised work
    # LLM jobs only -- offline inference (Job.llm): total tokens (prompt + generated), tokens
    # processed, start-up seconds paid (weight loading, every start), the last configuration;
    # training (Job.llm_train): tokens to train on, tokens trained, the last configuration
    tokens: float = 0.0
    tokens_done: float = 0.0
    startup_s: float = 0.0
    # issue 23, "unknown stays safe" (simulate(unknown_profiles=True)): seconds it ran while it
    # had no solo profile, of those seconds how many past its slowdown bound, the largest
    # slowdown / bound seen while unknown, and when its solo profile was recorded (None: never)
    unknown_run_s: float = 0.0
    unknown_over_s: float = 0.0
    unknown_max_ratio: float = 1.0
    profiled_s: float | None = None
    # solo profiles recorded for it: one per slot (GPU model, MPS share / MIG profile) it
    # ran alone on, JobCatalog.known -- a profile is not carried across GPU models
    profiles_recorded: int = 0
    config: str = ""
    # evictions (docs/metrics.md, "Evictions and wasted work"): times it was taken off its
    # GPUs while running, times it was shrunk (reconfigured to less GPU compute), normalized
    # work lost at evictions (redone later), GPU-seconds wasted (the lost work's and the
    # restarts' after evictions) and, for an offline LLM job, tokens lost
    evictions: int = 0
    shrinks: int = 0
    lost_work: float = 0.0
    wasted_gpu_s: float = 0.0
    wasted_tokens: float = 0.0
    # seconds it ran (placed, not restarting) and, of those, seconds at a slowdown as run past
    # its slowdown_bound (docs/metrics.md, ``bound_violation_time_frac``)
    run_s: float = 0.0
    over_s: float = 0.0


@dataclass
class SimResult:
    policy: str
    gpus: int
    metrics: dict[str, float]
    records: list[JobRecord]
    rounds: int
    timeline: dict[str, list[float]] = field(default_factory=dict)
    #: per GPU ("<node>/<gpu>") its DCGM-style time averages over the window (docs/metrics.md)
    gpu_activity: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class _Live:
    job: Job
    config: Configuration | None = None
    restart_until: float = 0.0
    was_preempted: bool = False
    activity: float = 0.0
    run_from: float = 0.0   # Job.done when its current run began (what an eviction may lose)
    rate: float = 0.0       # its progress rate over the last interval
    solo_since: float | None = None  # unknown job alone on its unit(s) since (profiling clock)
    active: ActiveJob | None = None  # what the round sees: (job, config), kept while config is

    def as_active(self) -> ActiveJob:
        """The job as the round sees it; the same object while its configuration is."""
        a = self.active
        if a is None or a.config is not self.config:
            a = self.active = ActiveJob(self.job, self.config)
        return a


def _time_sliced(policy: Policy) -> bool:
    return getattr(policy, "sharing", "mps") == "time-slicing"


def _whole_gpu_speed(policy: Policy) -> Callable[[Job, Configuration], float]:
    """``speed(job, config)``: the configuration's normalized throughput with no share cap
    (time-slicing enforces none): ``config.throughput / share_speed(job_type, gpu_share)``
    for a shared, non-MIG configuration, else ``config.throughput``."""
    env = getattr(policy, "env", None)
    tm = getattr(env, "throughput", None)
    if tm is None:
        from elastico.perf.throughput import ThroughputModel

        tm = ThroughputModel.bundled()

    def speed(job: Job, config: Configuration) -> float:
        if job.llm is not None:
            from elastico.llm_shapes import whole_gpu_throughput

            return whole_gpu_throughput(job, config)
        if config.mig_profile is not None or config.gpu_share >= 1.0 or not job.job_type:
            return config.throughput
        return config.throughput / tm.share_speed(job.job_type, config.gpu_share)

    return speed


def _busy(profile_activity: float, num_gpus: int, slowdown: float) -> float:
    return num_gpus * profile_activity / slowdown


def simulate(nodes: Sequence[Node], jobs: Iterable[Job], policy: Policy, *,
             restart_s: float = 30.0, activity: Callable[[Job, Configuration], float],
             progress: Callable[[int, float], None] | None = None,
             timer: Callable[[], float] = time.perf_counter,
             validate: bool = False, truth: SlowdownModel | None = None,
             tracer: Tracer = NOOP, mig_gpus: Iterable[tuple[int, int]] | None = None,
             requested: Callable[[Job, str], float] | None = None,
             window: tuple[float, float] | None = None,
             horizon_s: float | None = None,
             overrun_s: float = 0.0,
             alone: Callable[[Job], float] | None = None,
             startup: Callable[[Job, Configuration], float] | None = None,
             llm_load_gbps: float | None = None,
             meter: UtilisationMeter | None = None,
             unknown_profiles: bool = False,
             profile_window_s: float = 60.0) -> SimResult:
    """Replay ``jobs`` (each with ``arrival_s`` and ``work``) on ``nodes`` under ``policy``.

    ``activity(job, config)`` gives the fraction of one GPU's SMs the job keeps busy per GPU
    when alone (for utilization; see docs/metrics.md).  ``progress(n, now)`` is called after every
    event with the number of batch jobs that just finished and the virtual time (for a
    progress bar).  Returns per-job records and the
    metrics of :data:`METRIC_KEYS` (plus ``evictions``, ``shrinks``, ``wasted_gpu_s``,
    ``wasted_tokens`` (module docstring, "Evictions"), ``jobs_unfinished``, ``restarts``,
    ``service_avg_queue_s``, ``services_never_placed``, ``batch_bound_violations``).

    ``validate=True`` re-checks the placement state's invariants (no GPU, node or MIG slot
    over-committed, every predicted slowdown within its bound) after every round -- for tests.

    ``truth``: the slowdown model jobs actually run at (default: the placement state's own
    model, i.e. the placer's prediction is taken as exact); one with a ``slowdowns_of(state,
    live, time_sliced, profile)`` method (:class:`elastico.sim.contention_truth.GroundTruth`)
    is asked for every placed job's slowdown at once, with the meter's activity profiles.  ``tracer``: one
    ``elastico.round`` span per round (:func:`elastico.placer.round.run_round`).

    ``mig_gpus``: ``(node_index, gpu_index)`` pairs in MIG mode (default: module docstring).
    ``requested(job, gpu_model)``: normalized throughput of the job's requested shape on
    ``gpu_model`` (for a service's slowdown, module docstring; default: from
    ``policy.catalog`` when the policy has one, else only interference counts).

    ``window``: the measurement window ``(lo, hi)`` in virtual seconds (default: the
    arrival window [first arrival, last arrival], or [first arrival, end] when all arrive
    at once): allocation, utilization, throughput, work and the JCT/slowdown statistics
    are over it (docs/metrics.md, "Which window counts").  ``horizon_s``: stop the replay
    there (jobs still running or waiting are ``unfinished``, reason ``horizon``); default:
    when the last batch job is done.  ``overrun_s`` (seconds >= 0; with ``window`` and
    ``horizon_s``): while a batch job that arrived in the window (not censored) is still
    running or waiting at the horizon, the replay goes on -- nothing arrives after the
    horizon -- until every such job has finished or ``horizon_s + overrun_s``, whichever comes
    first (Gavel's steady-state measurement, Narayanan et al., OSDI '20, 7.: the jobs of a
    window are run to completion; without it a policy that leaves long jobs unfinished has
    them dropped from its JCT statistics).  0 (default): stop at the horizon.  ``alone(job)``: normalized throughput of the job's
    requested shape alone on the best GPU model it may use (for ``alone_s`` and the
    slowdown; default: from ``policy.catalog``, else 1.0 = the reference GPU).

    ``startup(job, config)``: seconds an offline LLM job (``Job.llm``) produces nothing after
    each start in ``config`` (default :func:`elastico.llm_shapes.startup_s` at
    ``llm_load_gbps`` GB/s, default :data:`elastico.llm_shapes.LOAD_GBPS`); other jobs pay
    ``restart_s`` on a restart and nothing at their first start.

    ``meter``: what measures SM activity, GPU utilisation and DRAM activity as DCGM defines
    them (:mod:`elastico.sim.utilisation`; default: activity seed 0) -- the metrics
    ``dcgm_sm_active``, ``dcgm_gpu_util``, ``dcgm_dram_active`` and ``SimResult.gpu_activity``.

    ``unknown_profiles`` (issue 23, docs/predictor.md "Unknown jobs"): every job arrives with
    no solo profile (``policy.catalog.unknown``; only for a policy with ``handles_unknown``,
    i.e. ``elastico`` with IAC), so the placer books it at its worst case and co-locates it only
    where the contention prior's worst case keeps every resident within its bound.  Once it
    has run alone on its unit(s) -- whole GPUs with no other resident, or its own MIG
    instance -- for ``profile_window_s`` seconds in one stretch (default 60 s, the node agent's
    averaging window, :data:`elastico.nodeagent.profiling.DEFAULT_WINDOW_S`) with no restart
    in it, its solo profile is recorded (:func:`_measure_solo`: what the simulated backend
    reads -- the activity model's kernel time and DRAM activity over the window -- never the
    contention truth's parameters) into ``policy.catalog.measured`` and its booking
    is re-entered with that profile.  Adds the metrics ``unknown_*`` (:func:`_unknown_metrics`).
    False (default; the CLI's ``--assume-profiled``): every job is taken as profiled, today's
    behaviour.

    Jobs are not mutated: the simulator works on copies.
    """
    jobs = sorted((Job(**{**j.__dict__, "done": 0.0}) for j in jobs),
                  key=lambda j: (j.arrival_s, j.id))
    if len({j.id for j in jobs}) != len(jobs):
        raise ValueError("jobs: duplicated job id")
    total_gpus = sum(n.num_gpus for n in nodes)
    if mig_gpus is None:
        mig_gpus = mig_gpus_of(nodes) if getattr(policy, "uses_mig", False) else ()
    state = ClusterState(nodes, mig_gpus)
    if requested is None:
        requested = _requested_from(policy)
    time_sliced = _time_sliced(policy)
    if meter is None:
        meter = UtilisationMeter(nodes, time_sliced=time_sliced)
    whole_speed = _whole_gpu_speed(policy) if time_sliced else None
    ref_cache: dict[tuple[str, str], float] = {}
    if alone is None:
        alone = _alone_from(policy)
    if startup is None and any(j.llm is not None for j in jobs):
        startup = _llm_startup(llm_load_gbps)
    records = {j.id: JobRecord(j.id, j.kind.value, j.arrival_s, j.work,
                               slowdown_bound=j.slowdown_bound, censored=j.censored,
                               alone_s=j.work / max(alone(j), _EPS),
                               gpus=j.request.gpus_total,
                               tokens=_tokens(j)) for j in jobs}
    live: dict[str, _Live] = {}
    catalog = getattr(policy, "catalog", None)
    unknown_on = bool(unknown_profiles and getattr(policy, "handles_unknown", False)
                      and catalog is not None)
    if unknown_on and not (isinstance(profile_window_s, (int, float))
                           and math.isfinite(profile_window_s) and profile_window_s > 0):
        raise ValueError(f"profile_window_s: {profile_window_s!r} must be seconds > 0")
    arrivals = list(reversed(jobs))  # pop() from the end = earliest first
    round_ms: list[float] = []
    alloc_int = util_int = 0.0
    t = jobs[0].arrival_s if jobs else 0.0
    # allocation and utilization are averaged over the arrival window (while work is being
    # offered); a workload arriving all at once uses [first arrival, end] instead
    w_lo = t
    w_hi = jobs[-1].arrival_s if jobs and jobs[-1].arrival_s > t else math.inf
    if window is not None:
        w_lo, w_hi = float(window[0]), float(window[1])
        if not (w_hi > w_lo):
            raise ValueError(f"window: {window} must be (lo, hi) with hi > lo")
    horizon = math.inf if horizon_s is None else float(horizon_s)
    if not (isinstance(overrun_s, (int, float)) and math.isfinite(overrun_s) and overrun_s >= 0):
        raise ValueError(f"overrun_s: {overrun_s!r} must be seconds >= 0")
    if overrun_s > 0 and (window is None or horizon_s is None):
        raise ValueError("overrun_s: needs window and horizon_s (it runs the window's jobs "
                         "to completion past the horizon)")
    stop_at = horizon  # the horizon, or past it while the window's batch jobs finish
    overrun: set[str] | None = None  # past the horizon: the window's batch jobs still live
    win_work = 0.0  # requested GPU-seconds of batch work done inside the window
    n_rounds = 0
    mig_switches = 0  # MIG mode changes the policy made (MIG lending), over the replay
    # per event interval starting at t: allocated GPUs, busy GPUs averaged over the part of
    # the interval inside the arrival window ("busy") and over the whole interval
    # ("busy_all"), jobs waiting (arrived, not placed; services included)
    timeline: dict[str, list[float]] = {"t": [], "allocated": [], "busy": [], "busy_all": [],
                                        "queue": []}

    running: list[tuple[str, _Live]] = []  # live jobs with a configuration (after a round)
    elastic_left = sum(1 for j in jobs if j.kind.elastic)
    has_elastic = elastic_left > 0
    while arrivals or live:
        if t >= horizon - _EPS and overrun is None and overrun_s > 0:
            # the horizon, with the window's batch jobs to run to completion: nothing arrives
            # from now on, the replay stops when they are done or at horizon + overrun_s
            overrun = {jid for jid, l in live.items()
                       if l.job.kind.elastic and not l.job.censored
                       and w_lo - _EPS <= l.job.arrival_s <= w_hi + _EPS}
            arrivals.clear()
            stop_at = horizon + overrun_s
        if overrun is not None:
            overrun.intersection_update(live)
        if t >= stop_at - _EPS or (overrun is not None and not overrun):
            # the replay's end: what is still running or waiting did not finish
            for jid in live:
                rec = records[jid]
                rec.status, rec.reason = "unfinished", "horizon"
            break
        if has_elastic and elastic_left == 0 and not arrivals:
            # every batch job is done and everything has arrived: services still running are
            # censored here (they run until deleted; the window of interest is the batch
            # workload's).  Not before the last arrival, so that every policy's allocation
            # and utilization average over the same arrival window.
            for jid in live:
                records[jid].status = "censored"
            break
        while arrivals and arrivals[-1].arrival_s <= t + _EPS:
            j = arrivals.pop()
            live[j.id] = _Live(j)
            if unknown_on:
                catalog.unknown.add(j.id)
        if unknown_on:  # solo profiles whose window is complete (profiled before the round)
            # only a job with a configuration after the last round can have its clock running
            # (``running``, in live's order; one that finished since is no longer live)
            for jid, l in running:
                if l.solo_since is not None and l.config is not None and live.get(jid) is l \
                        and catalog.is_unknown(jid, l.config) \
                        and t >= l.solo_since + profile_window_s - _EPS:
                    _record_profile(catalog, state, l, meter, profile_window_s)
                    if records[jid].profiled_s is None:  # its first solo profile
                        records[jid].profiled_s = t
                    records[jid].profiles_recorded += 1
                    l.solo_since = None
        # ---- one round ----
        inp = RoundInput(now=t, nodes=nodes, state=state,
                         jobs=[l.as_active() for l in live.values()])
        result = run_round(policy, inp, timer=timer, tracer=tracer)
        n_rounds += 1
        mig_switches += len(result.mig_switches)
        round_ms.append(result.phase_seconds["round"] * 1e3)
        state = result.state
        if validate:
            state.check_invariants()
        for jid, d in result.decisions.items():
            l = live[jid]
            rec = records[jid]
            if d.status is Status.UNPLACEABLE:
                rec.status, rec.reason = "unplaceable", d.reason
                elastic_left -= l.job.kind.elastic
                del live[jid]
                _forget(policy, jid)
                continue
            placed = d.status in (Status.PLACED, Status.DEGRADED) and d.config is not None
            if placed:
                llm = l.job.llm is not None
                if rec.first_start_s is None:
                    rec.first_start_s = t
                    rec.status = "running"
                    if llm:  # an LLM job loads its weights before its first token
                        cost = startup(l.job, d.config)
                        l.restart_until = t + cost
                        rec.startup_s += cost
                elif d.changed or l.was_preempted:
                    # a reconfiguration, a move, or a restart after preemption
                    cost = startup(l.job, d.config) if llm else restart_s
                    l.restart_until = t + cost
                    rec.restarts += 1
                    if llm:
                        rec.startup_s += cost
                    if l.was_preempted:  # GPUs held, nothing produced: eviction's waste
                        rec.wasted_gpu_s += cost * d.config.gpus_total
                    elif l.config is not None and d.config.gpus_total < l.config.gpus_total - _EPS:
                        rec.shrinks += 1
                if l.config is None or d.changed or l.was_preempted:
                    l.run_from = l.job.done
                if llm or l.job.llm_train is not None:
                    rec.config = d.config.name
                l.was_preempted = False
                if l.config is not d.config and l.config != d.config:
                    l.activity = activity(l.job, d.config)
                    if whole_speed is not None and d.config.throughput > 0:
                        # time-sliced: the whole GPU's SMs when it runs, not its share's
                        l.activity *= whole_speed(l.job, d.config) / d.config.throughput
                l.config = d.config
            else:
                if l.config is not None:
                    l.was_preempted = True
                    _evict(l, rec, t)
                l.config = None
                l.solo_since = None  # no configuration: no profiling clock
                rec.reason = d.reason
        # the jobs with a configuration, in live's order: what the profiling clock and the
        # rates below look at (every other live job waits; its clock was stopped above)
        running = [(jid, l) for jid, l in live.items() if l.config is not None]
        if validate:  # what the loops over ``running`` rely on: no clock without a config
            stray = [jid for jid, l in live.items() if l.config is None
                     and l.solo_since is not None]
            if stray:
                raise AssertionError(f"profiling clock running without a configuration: {stray}")
        if unknown_on:  # the profiling clock: alone on its unit(s), not restarting
            for jid, l in running:
                if not catalog.is_unknown(jid, l.config) or jid not in state:
                    l.solo_since = None
                    continue
                d = result.decisions.get(jid)
                if d is not None and d.changed:
                    l.solo_since = None
                if _solo(state, jid, l.config):
                    if l.solo_since is None:
                        l.solo_since = max(t, l.restart_until)
                else:
                    l.solo_since = None
        if hasattr(truth, "slowdowns_of"):
            # the simulator's ground truth (elastico.sim.contention_truth): measured pairs
            # where they apply, the contention model elsewhere
            slow = truth.slowdowns_of(state, live, time_sliced, meter.profile)
        elif time_sliced:
            from elastico.predictor import TimeSlicedTruth

            slow = state.predicted_slowdowns(TimeSlicedTruth(truth or state.slowdown_model))
        else:
            slow = state.predicted_slowdowns(truth)

        # ---- rates, next event ----
        rates: dict[str, float] = {}
        seen_at: dict[str, float] = {}  # slowdown as run now of every placed job
        unknown_now: set[str] = set()  # of those, the jobs still unknown
        duty: dict[str, float] = {}  # fraction of its capacity a service's load uses
        alloc_now = state.used_gpus()
        next_t = arrivals[-1].arrival_s if arrivals else math.inf
        for jid, l in running:
            s = slow.get(jid, 1.0)
            if whole_speed is not None:
                # time-sliced: the whole GPU's speed over the total time-slicing slowdown;
                # its slowdown is counted against its configuration's solo speed
                r = whole_speed(l.job, l.config) / s
                seen = max(1.0, l.config.throughput / r) if r > 0 else s
            else:
                r = l.config.throughput / s
                seen = s
            if l.job.kind is JobKind.SERVICE and r > 0:
                # a service lives until its owner deletes it and serves the load its request
                # was sized for, whatever GPU it gets: it progresses at rate 1 and keeps busy
                # only the part of its capacity r that the requested shape's speed needs
                ref = r
                if requested is not None:
                    key = (jid, l.config.gpu_model)
                    ref = ref_cache.get(key)
                    if ref is None:
                        ref = ref_cache[key] = requested(l.job, l.config.gpu_model)
                    seen = max(seen, ref / r)
                duty[jid] = min(1.0, ref / r) if ref > 0 else 1.0
                r = 1.0
            if seen > records[jid].max_slowdown:
                records[jid].max_slowdown = seen
            seen_at[jid] = seen
            if unknown_on and catalog.is_unknown(jid, l.config):
                unknown_now.add(jid)
                if l.solo_since is not None:  # wake when its profiling window completes
                    next_t = min(next_t, l.solo_since + profile_window_s)
            rates[jid] = r
            l.rate = r
            start = max(t, l.restart_until)
            if r > 0:
                next_t = min(next_t, start + l.job.remaining / r)
            elif l.restart_until > t:
                next_t = min(next_t, l.restart_until)
        wake = result.wake_at_s
        if wake is not None and wake > t + _EPS and not math.isinf(next_t):
            # the policy's own next round (e.g. a gavel lease ends); only while something
            # runs or arrives, so a policy that keeps asking cannot stall an idle cluster
            next_t = min(next_t, wake)
        next_t = min(next_t, max(stop_at, t))
        if math.isinf(next_t):
            # nothing runs and nothing will arrive: the remaining jobs can never start
            for jid, l in live.items():
                records[jid].status = "unfinished"
                records[jid].reason = records[jid].reason or "never placed"
            break
        timeline["t"].append(t)
        timeline["allocated"].append(alloc_now)
        timeline["queue"].append(len(live) - len(rates))  # rates: every job with a config
        busy_int = busy_all = 0.0
        in_win = max(0.0, min(next_t, w_hi) - max(t, w_lo))
        for jid, r in rates.items():
            l = live[jid]
            run = max(0.0, next_t - max(t, l.restart_until))
            if run <= 0:
                continue
            gain = r * run
            rec = records[jid]
            rec.run_s += run
            if seen_at[jid] > rec.slowdown_bound + 1e-9:
                rec.over_s += run
            if jid in unknown_now:
                ratio = seen_at[jid] / rec.slowdown_bound
                rec.unknown_run_s += run
                if ratio > 1.0 + 1e-9:
                    rec.unknown_over_s += run
                rec.unknown_max_ratio = max(rec.unknown_max_ratio, ratio)
            l.job.done = min(l.job.work, l.job.done + gain)
            rec.progress += gain
            busy = _busy(l.activity, l.config.num_gpus, slow.get(jid, 1.0)) * duty.get(jid, 1.0)
            busy_all += busy * run
            in_run = min(run, max(0.0, min(next_t, w_hi) - max(t, l.restart_until, w_lo)))
            busy_int += busy * in_run
            if l.job.kind.elastic:
                win_work += r * in_run * rec.gpus
        meter.interval(t, next_t, (w_lo, w_hi), state, live, rates, slow, duty)
        timeline["busy"].append(busy_int / in_win if in_win > 0 else 0.0)
        timeline["busy_all"].append(busy_all / (next_t - t) if next_t > t else 0.0)
        alloc_int += alloc_now * in_win
        util_int += busy_int
        t = next_t
        # A job is done when its remaining work is negligible, or when what is left would take
        # less time than the clock can resolve at this magnitude (at t ~ 1e11 s a float step
        # is ~1e-5 s; without this the clock would stop advancing and the loop never end).
        tick = 4 * math.ulp(max(abs(t), 1.0))
        # the jobs with a configuration (``running``) are rates' keys, in live's order
        finished = [jid for jid, l in running
                    if t >= l.restart_until
                    and (l.job.work - l.job.done <= 1e-9 * max(1.0, l.job.work)
                         or (rates[jid] > 0
                             and (l.job.work - l.job.done) / rates[jid] <= tick))]
        for jid in finished:
            rec = records[jid]
            rec.finish_s, rec.status = t, "finished"
            elastic_left -= live[jid].job.kind.elastic
            live[jid].job.done = live[jid].job.work
            state.release(jid)
            del live[jid]
            _forget(policy, jid)
        if progress is not None:
            progress(sum(1 for jid in finished if records[jid].kind != "service"), t)

    for j in jobs:
        spec = j.llm if j.llm is not None else j.llm_train
        if spec is not None:  # progress in tokens (module docstring)
            rec = records[j.id]
            rec.tokens_done = (j.work if rec.status == "finished" else j.done) \
                * spec.reference_tokens_per_s
    recs = list(records.values())
    span = max(0.0, min(t, w_hi) - w_lo) if recs else 0.0
    metrics = _metrics(recs, span, total_gpus, alloc_int, util_int, round_ms,
                       (w_lo, w_lo + span), win_work)
    metrics["queue_growth"] = backlog_growth(timeline, w_lo, w_lo + span)
    metrics.update(meter.metrics(span))
    metrics.update(bound_time_metrics(recs))
    metrics["mig_mode_switches"] = float(mig_switches)
    if unknown_on:
        metrics.update(_unknown_metrics(recs))
    return SimResult(getattr(policy, "name", "?"), total_gpus, metrics, recs, n_rounds, timeline,
                     meter.per_gpu(span))


#: issue 24's goal: no training job past its slowdown bound for more than 5 % of its run
BOUND_TIME_GOAL = 0.05


def bound_time_metrics(recs: Sequence[JobRecord]) -> dict[str, float]:
    """How long training jobs (kind ``training``) ran past their slowdown bound, over the whole
    replay (docs/metrics.md): ``bound_violation_time_frac`` = sum of their seconds run at a
    slowdown as run above the bound / sum of their seconds run (0 when none ran),
    ``bound_violation_time_frac_max`` = the largest one job's share, and
    ``bound_violation_jobs_5pct`` = training jobs whose share exceeds
    :data:`BOUND_TIME_GOAL` (issue 24's goal: 0)."""
    tr = [r for r in recs if r.kind == "training" and r.run_s > 0]
    run = math.fsum(r.run_s for r in tr)
    return {"bound_violation_time_frac": math.fsum(r.over_s for r in tr) / run if run > 0 else 0.0,
            "bound_violation_time_frac_max": max((r.over_s / r.run_s for r in tr), default=0.0),
            "bound_violation_jobs_5pct": sum(1 for r in tr
                                             if r.over_s > BOUND_TIME_GOAL * r.run_s + 1e-9)}


def _evict(l: _Live, rec: JobRecord, t: float) -> None:
    """A running job is taken off its GPUs at ``t`` (docs/metrics.md, "Evictions and wasted
    work").  An offline LLM job (``Job.llm``) loses its in-flight requests
    (:func:`elastico.llm_shapes.inflight_tokens`: finished requests are kept), at most what
    it did since its current run began; the lost work is redone (``Job.done`` goes back) and
    the GPU-seconds it took are wasted (lost work over the rate it ran at, times the GPUs
    held).  Any other job loses nothing here: its checkpoint/restore is the ``restart_s``
    it pays when it starts again (counted as wasted then)."""
    rec.evictions += 1
    if l.job.llm is None or l.config is None or t < l.restart_until:
        return
    from elastico.llm_shapes import inflight_tokens

    ref = l.job.llm.reference_tokens_per_s
    lost = min(max(0.0, l.job.done - l.run_from), inflight_tokens(l.job, l.config) / ref)
    if lost <= 0:
        return
    l.job.done -= lost
    rec.progress -= lost
    rec.lost_work += lost
    rec.wasted_tokens += lost * ref
    if l.rate > 0:
        rec.wasted_gpu_s += lost / l.rate * l.config.gpus_total


def _solo(state, job_id: str, config: Configuration) -> bool:
    """Is the job alone on its unit(s) -- its own MIG instance(s), or whole GPUs with no
    other resident (what the node agent's sampler needs for a solo window,
    :func:`elastico.nodeagent.profiling.solo_units`)?"""
    if config.mig_profile is not None:
        return True
    a = state.assignment(job_id)
    return all(state.residents(n, gi) == [job_id] for n, gi in set(a.gpus))


def _measure_solo(meter: UtilisationMeter, job: Job, config: Configuration, nodes: int,
                  window_s: float) -> tuple[float, float]:
    """(busy fraction, DRAM activity) of ``job`` alone on its unit as the simulated backend
    measures them over one profiling window of ``window_s`` seconds, the window starting at a
    phase of the job's step drawn from its id (a window does not start on a step boundary):

    * busy fraction: NVML's per-process SM utilisation (``process_sm_util``, the share of
      time a kernel of the process ran) = the activity model's kernel time in the window /
      the window (:class:`elastico.perf.activity.ActivityProfile`: each step is compute,
      then the all-reduce, both kernels, then idle);
    * DRAM activity: DCGM's ``DRAM_ACTIVE`` = its DRAM level (the roofline's
      :func:`elastico.perf.contention.roofline_dram`, not capped by an MPS share: as
      :meth:`UtilisationMeter.resident` reads it and the contention truth charges it) x the
      compute time in the window / the window.

    The measurement noise is that of a finite window over a phased step (a window of a few
    steps reads more or less than the mean), not an invented constant; never the contention
    truth's parameters.  It is what :meth:`elastico.predictor.profiles.StoredProfile.
    job_profile` hands the predictor: the busy fraction as the prior's ``u``."""
    import zlib

    p = meter.profile(job, config, nodes)
    T = p.step_s
    phase = (zlib.crc32(job.id.encode()) % 10_000) / 10_000 * T

    def within(x: float, part: float) -> float:  # time in [0, x) spent in a step's first part
        n, r = divmod(x, T)
        return n * part * T + min(r, part * T)

    def frac(part: float) -> float:
        return (within(phase + window_s, part) - within(phase, part)) / window_s

    busy = frac(p.kernel)
    dram = p.dram_level * frac(p.compute)
    return min(1.0, max(0.0, busy)), min(1.0, max(0.0, dram))


def _record_profile(catalog, state, l: _Live, meter: UtilisationMeter, window_s: float) -> None:
    """The job's solo profile is measured (:func:`_measure_solo`): it is no longer unknown,
    the catalogue keeps its counters and its booking is re-entered with its new profile."""
    jid, config = l.job.id, l.config
    a = state.assignment(jid)
    nodes = len({pt.node_index for pt in a.parts})
    # known on this slot only (GPU model, MPS share / MIG profile: JobCatalog.known);
    # elsewhere it stays unknown until it runs alone there too
    catalog.mark_profiled(jid, config, _measure_solo(meter, l.job, config, nodes, window_s))
    bound = state.slowdown_bound(jid)
    state.release(jid)
    state.rebook(a, catalog.profile(l.job, config), bound, unhealthy_ok=True)


#: The goal of issue 23: no job past its slowdown bound by more than 5 % while unknown.
UNKNOWN_TOLERANCE = 0.05


def _unknown_metrics(recs: list[JobRecord]) -> dict[str, float]:
    """The unknown-job rule's outcome (docs/metrics.md): ``unknown_jobs_profiled`` (solo
    profiles recorded), ``unknown_run_s`` (job-seconds run while unknown),
    ``unknown_bound_violation_jobs`` (jobs whose true slowdown while unknown went past
    ``bound * (1 + UNKNOWN_TOLERANCE)``: the goal is 0), ``unknown_bound_violation_any`` (past
    the bound at all), ``unknown_bound_violation_time_share`` (share of the run time while
    unknown spent past the bound), ``unknown_bound_violation_max`` (largest slowdown / bound
    - 1 while unknown, 0 when never past)."""
    run = sum(r.unknown_run_s for r in recs)
    over = sum(r.unknown_over_s for r in recs)
    worst = max((r.unknown_max_ratio for r in recs if r.unknown_run_s > 0), default=1.0)
    return {
        "unknown_jobs_profiled": sum(1 for r in recs if r.profiled_s is not None),
        "unknown_profiles_recorded": sum(r.profiles_recorded for r in recs),
        "unknown_run_s": run,
        "unknown_bound_violation_jobs": sum(
            1 for r in recs if r.unknown_max_ratio > 1.0 + UNKNOWN_TOLERANCE + 1e-9),
        "unknown_bound_violation_any": sum(1 for r in recs if r.unknown_max_ratio > 1.0 + 1e-9),
        "unknown_bound_violation_time_share": over / run if run > 0 else 0.0,
        "unknown_bound_violation_max": max(0.0, worst - 1.0),
    }


def _tokens(job: Job) -> float:
    """An LLM job's tokens: prompt + generated (inference), to train on (training); else 0."""
    if job.llm is not None:
        return float(job.llm.work.total_tokens)
    if job.llm_train is not None:
        return job.llm_train.tokens
    return 0.0


def _llm_startup(load_gbps: float | None) -> Callable[[Job, Configuration], float]:
    """:func:`elastico.llm_shapes.startup_s` at ``load_gbps`` (None: its default)."""
    from elastico.llm_shapes import LOAD_GBPS, startup_s

    gbps = LOAD_GBPS if load_gbps is None else load_gbps
    # refused before the replay, not at the first LLM job's start
    if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not (math.isfinite(gbps)
                                                                           and gbps > 0):
        raise InvalidArgument("llm_load_gbps", gbps, "a finite number of GB/s > 0")
    return lambda job, config: startup_s(job, config, gbps)


def _requested_from(policy: Policy) -> Callable[[Job, str], float] | None:
    """``requested(job, gpu_model)`` from the policy's job catalog
    (:meth:`~elastico.placer.policies.common.JobCatalog.requested`), or None without one."""
    catalog = getattr(policy, "catalog", None)
    if catalog is None or not hasattr(catalog, "requested"):
        return None

    def requested(job: Job, gpu_model: str) -> float:
        for c in catalog.requested(job, False):
            if c.gpu_model == gpu_model:
                return c.throughput
        return 0.0  # not an allowed model of the job: nothing to compare against

    return requested


def _forget(policy: Policy, job_id: str) -> None:
    f = getattr(policy, "forget", None)
    if f is not None:
        f(job_id)


def _alone_from(policy: Policy) -> Callable[[Job], float]:
    """``alone(job)``: the best normalized throughput of the job's requested shape (GPU count
    and per-GPU share, no co-resident) over the GPU models it may use in the cluster, from
    the policy's job catalog (:meth:`~elastico.placer.policies.common.JobCatalog.requested`);
    1.0 (the reference GPU, where a job runs at its trace speed) without one or when the
    request fits no model."""
    catalog = getattr(policy, "catalog", None)
    if catalog is None or not hasattr(catalog, "requested"):
        return lambda job: 1.0

    def alone(job: Job) -> float:
        try:
            tp = [c.throughput for c in catalog.requested(job, False)]
        except Exception:  # noqa: BLE001 -- a request the catalog refuses: reference speed
            tp = []
        return max(tp) if tp and max(tp) > 0 else 1.0

    return alone


#: the backlog is *bounded* when it grows by at most this fraction of the arrivals
#: (docs/metrics.md, "Sustainable load")
BACKLOG_GROWTH_FRACTION = 0.05


def backlog_growth(timeline: dict[str, list[float]], lo: float, hi: float) -> float:
    """Time-average of the queue (arrived jobs not placed, services included) over the last
    quarter of ``[lo, hi)`` minus its time-average over the second quarter, in jobs: how much
    the backlog grew over half a window.  0 when the timeline does not cover the window.
    The time integrals are exactly rounded sums (``math.fsum``): intervals outside a quarter
    add exact zeros, so a replay stopped at ``hi`` gives the full replay's value to the last
    bit (the load sweep's runs stop there; docs/metrics.md, "Sustainable load")."""
    t = np.asarray(timeline.get("t", []), float)
    if t.size == 0 or hi <= lo:
        return 0.0
    q = np.asarray(timeline["queue"], float)
    ends = np.append(t[1:], max(t[-1], hi))

    def mean(a: float, b: float) -> float:
        w = np.clip(np.minimum(ends, b) - np.maximum(t, a), 0.0, None)
        return math.fsum((w * q).tolist()) / (b - a)

    quarter = (hi - lo) / 4.0
    return mean(lo + 3 * quarter, hi) - mean(lo + quarter, lo + 2 * quarter)


def backlog_allowed(metrics: dict[str, float],
                    fraction: float = BACKLOG_GROWTH_FRACTION) -> float:
    """The queue growth (jobs) a run may show and still count as bounded:
    ``max(1, fraction x arrivals_half_window)`` (:func:`backlog_bounded`)."""
    return max(1.0, fraction * float(metrics.get("arrivals_half_window", 0.0)))


def backlog_bounded(metrics: dict[str, float],
                    fraction: float = BACKLOG_GROWTH_FRACTION) -> bool:
    """Whether a run's backlog stayed bounded (docs/metrics.md, "Sustainable load"): its
    ``queue_growth`` (:func:`backlog_growth`) is at most :func:`backlog_allowed` jobs --
    fewer than one arrival in twenty over the window's second half stayed in the queue (a
    rate-stability test: a stable queue does not grow linearly with time)."""
    return float(metrics.get("queue_growth", 0.0)) <= backlog_allowed(metrics, fraction)


def _metrics(recs: list[JobRecord], span: float, gpus: int, alloc_int: float,
             util_int: float, round_ms: list[float], win: tuple[float, float] = (0.0, 0.0),
             win_work: float = 0.0) -> dict[str, float]:
    """Metrics of docs/metrics.md.  JCT, queueing, makespan and throughput are over the batch
    (training + inference) jobs: a ``service`` runs until its owner deletes it, so its
    "completion time" is not a scheduling outcome; services get their own queueing metric.
    The JCT and slowdown statistics are over the batch jobs that arrived in the window
    ``win`` (inclusive), finished and are not censored; throughput counts the batch jobs that
    finished inside it, ``work_per_hour`` the batch work done inside it."""
    batch = [r for r in recs if r.kind != "service"]
    if not batch:  # a services-only workload: report over services
        batch = recs
    lo, hi = win
    in_win = [r for r in batch if lo - _EPS <= r.arrival_s <= hi + _EPS]
    counted = [r for r in in_win if not r.censored]
    done = [r for r in counted if r.status == "finished"]
    jct = np.array([r.finish_s - r.arrival_s for r in done])
    slow = np.array([(r.finish_s - r.arrival_s) / r.alone_s if r.alone_s > 0 else 1.0
                     for r in done])
    queue = np.array([r.first_start_s - r.arrival_s for r in done])
    # short / long: at most / above the median work of the window's uncensored batch jobs
    # (the same jobs, so the same split, for every policy of a workload)
    split = float(np.median([r.work for r in counted])) if counted else 0.0
    short = np.array([r.work <= split for r in done], bool)
    finished_all = [r for r in batch if r.status == "finished"]
    svc = [r for r in recs if r.kind == "service" and r.first_start_s is not None]
    first = min((r.arrival_s for r in recs), default=0.0)
    last = max((r.finish_s for r in finished_all), default=first)
    makespan = last - first
    q = (lambda a, p: float(np.percentile(a, p)) if len(a) else 0.0)
    mean = (lambda a: float(a.mean()) if len(a) else 0.0)
    denom = gpus * span if gpus and span > 0 else 0.0
    hours = span / 3600.0
    in_window_done = sum(1 for r in batch if r.status == "finished"
                         and lo - _EPS <= r.finish_s <= hi + _EPS)
    half = lo + (hi - lo) / 2.0
    return {
        "avg_jct_s": mean(jct),
        "p50_jct_s": q(jct, 50),
        "p95_jct_s": q(jct, 95),
        "p99_jct_s": q(jct, 99),
        "avg_queue_s": mean(queue),
        "makespan_s": float(makespan),
        "jobs_per_hour": in_window_done / hours if hours > 0 else 0.0,
        # requested GPU-seconds per second = requested GPU-hours per hour
        "work_per_hour": win_work / span if span > 0 else 0.0,
        "jobs_completed": len(finished_all),
        "jobs_unfinished": sum(1 for r in batch if r.status in ("unfinished", "unplaceable")),
        "jobs_censored": sum(1 for r in in_win if r.censored),
        # the window's uncensored batch jobs left out of the JCT statistics (not finished)
        "jobs_window_unfinished": len(counted) - len(done),
        # how many jobs the JCT, queueing and slowdown statistics are over (their 0 is "no
        # value" when this is 0; elastico simulate prints "-"), and how many of them short
        "jobs_in_jct": len(done),
        "jobs_in_jct_short": int(short.sum()),
        "window_s": float(span),
        "avg_slowdown": mean(slow),
        "p50_slowdown": q(slow, 50),
        "p95_slowdown": q(slow, 95),
        "p99_slowdown": q(slow, 99),
        "avg_jct_short_s": mean(jct[short]) if len(jct) else 0.0,
        "avg_jct_long_s": mean(jct[~short]) if len(jct) else 0.0,
        "p50_slowdown_short": q(slow[short], 50) if len(slow) else 0.0,
        "p50_slowdown_long": q(slow[~short], 50) if len(slow) else 0.0,
        "arrivals_half_window": sum(1 for r in recs if half <= r.arrival_s < hi),
        "gpu_allocation": alloc_int / denom if denom else 0.0,
        "gpu_utilization": util_int / denom if denom else 0.0,
        "restarts": sum(r.restarts for r in recs),
        "evictions": sum(r.evictions for r in recs),
        "shrinks": sum(r.shrinks for r in recs),
        "wasted_gpu_s": float(sum(r.wasted_gpu_s for r in recs)),
        "wasted_tokens": float(sum(r.wasted_tokens for r in recs)),
        "service_avg_queue_s": float(np.mean([r.first_start_s - r.arrival_s for r in svc]))
        if svc else 0.0,
        # how many services the service queueing is over (its 0 is "no value" when this is 0)
        "services_placed": len(svc),
        "services_never_placed": sum(1 for r in recs if r.kind == "service"
                                     and r.first_start_s is None),
        "service_bound_violations": sum(
            1 for r in recs if r.kind == "service" and r.max_slowdown > r.slowdown_bound + 1e-9),
        "batch_bound_violations": sum(
            1 for r in recs if r.kind != "service" and r.max_slowdown > r.slowdown_bound + 1e-9),
        "round_ms_p50": q(np.array(round_ms), 50),
        "round_ms_p99": q(np.array(round_ms), 99),
    }


def slowdown_models(kind: str, contention=None):
    """(the placer's slowdown model, the ground truth) of docs/predictor.md, "Simulator":
    truth = Gavel's measured pairs where they apply, the contention model
    (:mod:`elastico.perf.contention` at ``contention``: a preset name, ``name=value`` pairs or
    :class:`~elastico.perf.contention.ContentionParams`; None = default) elsewhere
    (:class:`elastico.sim.contention_truth.GroundTruth`); predictor = LightGBM k-fold by job
    type on the same observations (5 folds, seed 0), or the analytic model -- also the
    fallback, with a note on stderr, when the learned models cannot be built (e.g. lightgbm
    missing; the truth is then the contention model alone)."""
    from elastico.perf.contention import contention_params
    from elastico.predictor import AnalyticSlowdown
    from elastico.sim.contention_truth import GroundTruth

    params = contention_params(contention)  # refused before anything is built

    try:
        from elastico.predictor.learned import MeasuredSlowdown, kfold_by_job_type
        from elastico.predictor.observations import bundled_observations

        obs = bundled_observations()
        truth = GroundTruth(MeasuredSlowdown.from_observations(obs), params)
        if kind == "analytic":
            return AnalyticSlowdown(), truth
        return kfold_by_job_type(obs, k=5, seed=0), truth
    except (ImportError, InvalidArgument, OSError) as e:
        print(f"note: analytic slowdown model for prediction, contention model for truth ({e})",
              file=sys.stderr)
        return AnalyticSlowdown(), GroundTruth(None, params)
