"""Trace pods -> simulator jobs (the default workload of ``elastico simulate``).

Who calls it: the simulator and the CLI.  It calls :mod:`elastico.trace` types,
:mod:`elastico.perf.throughput` (job types) and builds :class:`elastico.model.Job`.  Deterministic
for a seed (numpy ``default_rng(seed)``); no clock, no global state.

Rules (docs/model.md, "Workload"), applied in this order, each exclusion counted by reason:

1. ``cpu_only``: pods with ``num_gpus == 0`` (ElastiCo schedules GPUs).
2. ``no_times``: pods without timestamps (the 5-column ``multigpu*`` lists).
3. ``never_scheduled``: pods with no ``scheduled_s`` (Pending: never ran, no observed runtime).
   Failed pods are kept and treated as having run from scheduled to deletion (they consumed
   what they used); Running pods' deletion time is the observation cut-off (censored).
4. ``no_fit``: the request fits no node of ``nodes`` (allowed model, GPUs on one node, CPU,
   host memory, GPU-memory footprint) or uses a GPU model the throughput model does not know.
5. ``not_sampled``: kept with probability ``min(1, cluster_gpus / 6212)`` (6212 = GPUs of the
   trace's cluster), one seeded uniform draw per remaining pod in trace order, so that a
   sub-cluster gets a proportional share of the trace.

Each kept pod becomes a job: ``work = max(1, deletion_s - scheduled_s)`` seconds; kind from
qos (LS / Guaranteed / Burstable -> service; BE -> a batch job of unknown kind, simulated as
``JobKind.TRAINING``: its only scale-out is a data-parallel gang at Gavel's measured
multi-GPU throughput -- the trace says nothing that makes a BE pod an inference job, and no
measurement says how replicas would scale); ``job_type`` drawn uniformly (seeded) from the
Gavel job types (for multi-GPU pods: from the 19 that Gavel measured on 2/4/8 GPUs) -- a
stand-in for the unknown model, whose measured data then set its speeds; priority 1.0;
slowdown bound 1.1 (service) or 1.5 (elastic); ``censored`` when the pod's phase is not
``Succeeded`` (Failed or Running: its lifetime is not a completed job's length).

Arrival times keep the trace's order and relative spacing, compressed by a factor ``k``:
``arrival = max(0, scheduled_s - t_head) x k`` where ``t_head`` is the 1st percentile of the
kept pods' scheduled times -- the few pods scheduled months before the trace's dense period
(mostly long-running services) are already present when the replay starts.  ``k`` is chosen
(by bisection; the load is monotone in k) so that the *offered load*

    load = sum_j g_j x min(work_j, S) / (cluster_gpus x S),    S = arrival span,

equals ``load``: the average fraction of the cluster's GPUs requested during the arrival
window, where ``g_j`` is the request in GPUs (``request.gpus_total``) and a job longer than
the window counts only for the window (long-running services otherwise dominate any
average).  The load cannot exceed ``sum_j g_j / cluster_gpus`` (every job at once); a larger
``load`` raises InvalidArgument naming the maximum.  When the span is 0 (fewer than two
distinct times) ``k = 1`` and every job arrives at 0.

:func:`build_continuous_workload` instead draws the eligible pods (rules 1-4) with
replacement into a Poisson process over a warm-up, a measurement window and a drain
(:class:`Window`, sized from the trace's batch durations by :func:`default_window`), at the
rate that offers ``load`` in the window (docs/model.md, "Continuous arrivals").  Either way a
job is ``censored`` when its pod was still Running at the end of the observation.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.shapes import FOOTPRINT_GIB
from elastico.perf.throughput import ThroughputModel
from elastico.trace import TRACE_CLUSTER_GPUS, TracePod, job_kind

__all__ = ["Workload", "rate_for_demand", "build_workload", "job_kind", "load_is_too_low", "offered_load",
           "EXCLUSION_REASONS", "CENSORED_PHASES", "Window", "default_window", "batch_durations",
           "is_censored", "build_continuous_workload", "window_demand", "user_estimates"]

EXCLUSION_REASONS = ("cpu_only", "no_times", "never_scheduled", "no_fit", "not_sampled")
# load=None picks 1.0, or this fraction of the maximum (every sampled job at once) if smaller
AUTO_LOAD_FRACTION = 0.9
SLOWDOWN_BOUND = {JobKind.SERVICE: 1.1, JobKind.TRAINING: 1.5, JobKind.INFERENCE: 1.5}


@dataclass(frozen=True)
class Workload:
    """Jobs sorted by arrival (ties: trace order) and how they were made.

    ``excluded[reason]`` pod counts (reasons :data:`EXCLUSION_REASONS`, all present);
    ``scale`` the arrival-time factor k (simulated s per trace s); ``cluster_gpus``;
    ``sample_probability``; ``offered_load`` recomputed from the jobs (inf when span is 0);
    ``kinds`` job counts per kind.  Iterating yields the jobs.
    """

    jobs: list[Job]
    excluded: Mapping[str, int]
    scale: float
    cluster_gpus: int
    sample_probability: float
    offered_load: float
    kinds: Mapping[str, int] = field(default_factory=dict)
    #: continuous arrivals (:func:`build_continuous_workload`): the warm-up, measurement
    #: window and drain the jobs were generated for; None for the trace's own arrivals
    window: "Window | None" = None

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


def offered_load(jobs: Sequence[Job], cluster_gpus: int) -> float:
    """``sum(g_j x min(work_j, S)) / (cluster_gpus x S)`` with S the arrival span (module
    docstring); inf if the span is 0."""
    if not jobs:
        return 0.0
    arr = np.array([j.arrival_s for j in jobs])
    span = float(arr.max() - arr.min())
    if span <= 0:
        return math.inf
    g = np.array([j.request.gpus_total for j in jobs])
    w = np.array([j.work for j in jobs])
    return float((g * np.minimum(w, span)).sum() / (cluster_gpus * span))


#: trace phases whose deletion time is not a completion: the pod was killed or is still running
#: trace pod phases whose recorded lifetime is cut off by the end of the observation
#: (:func:`is_censored`)
CENSORED_PHASES = frozenset({"Running"})


#: the longest arrival span the load search considers, seconds (~31,700 years)
_MAX_SPAN_S = 1e12
_TOO_LOW = "must be >="  # how the error for a load below what that span gives begins


def load_is_too_low(e: InvalidArgument) -> bool:
    """Whether ``e``, a ``load`` error of :func:`build_workload`, says the load is below the
    least the arrival span can give (raise it) rather than above the most the jobs can offer
    (lower it, or replay more pods).  For the CLIs' hints."""
    return e.field == "load" and e.allowed.startswith(_TOO_LOW)


def _solve_span(g: np.ndarray, w: np.ndarray, cluster_gpus: int, load: float) -> float:
    """The span S > 0 with sum(g min(w, S)) / (G S) == load (decreasing in S), by bisection in
    log space.  Raises InvalidArgument if load is above the supremum sum(g)/G, or so low that
    S would exceed :data:`_MAX_SPAN_S`."""
    sup = float(g.sum()) / cluster_gpus
    if load >= sup:
        # truncated, not rounded: every value below the number shown is allowed
        shown = math.floor(sup * 1e4) / 1e4
        bound = f"{shown:.4f}" + ("" if shown == sup else "...")
        raise InvalidArgument("load", load, f"must be < {bound} = {float(g.sum()):g} requested "
                                            f"GPUs / {cluster_gpus} cluster GPUs for this "
                                            "cluster and trace (every sampled job running at "
                                            "once)")
    f = lambda s: float((g * np.minimum(w, s)).sum()) / (cluster_gpus * s) - load
    lo, hi = 1e-6, _MAX_SPAN_S
    if f(hi) > 0:  # even the longest span offers more: refuse rather than give another load
        least = f(hi) + load
        raise InvalidArgument("load", load, f"{_TOO_LOW} {least:.3g} for this cluster and "
                                            f"trace (a lower load would spread the arrivals "
                                            f"over more than {_MAX_SPAN_S:g} s)")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


def _fits(pod: TracePod, nodes: Sequence[Node], known: frozenset[str]) -> bool:
    foot = pod.gpu_share * FOOTPRINT_GIB
    for n in nodes:
        if (n.num_gpus >= pod.num_gpus and n.gpu_model in known
                and (not pod.gpu_models or n.gpu_model in pod.gpu_models)
                and pod.cpu <= n.cpu and pod.mem_gib <= n.mem_gib and foot <= n.gpu_mem_gib):
            return True
    return False


def build_workload(pods: Sequence[TracePod], nodes: Sequence[Node], *, seed: int = 0,
                   load: float | None = 1.0, model: ThroughputModel,
                   jobs: int | None = None) -> Workload:
    """Jobs for a cluster of ``nodes`` from trace ``pods`` (rules in the module docstring).

    ``load`` > 0: target offered load (1.0 = the GPU-seconds asked for equal the cluster's GPU
    capacity over the arrival span); ``None`` = 1.0, or :data:`AUTO_LOAD_FRACTION` of the
    maximum when the sampled jobs cannot offer 1.0.  Raises InvalidArgument for load <= 0,
    NaN or inf, a load at or above the maximum, a cluster without GPUs, or an unknown qos on
    a pod that would be kept.
    """
    if load is not None and (isinstance(load, bool) or not isinstance(load, (int, float))
                             or not math.isfinite(load) or load <= 0):
        raise InvalidArgument("load", load, "must be a finite number > 0")
    cluster_gpus = _check_seed_and_gpus(seed, nodes)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer))
                             or jobs <= 0):
        raise InvalidArgument("jobs", jobs, "must be a positive integer (or None)")
    rng = np.random.default_rng(seed)
    prob = min(1.0, cluster_gpus / TRACE_CLUSTER_GPUS) if jobs is None else 1.0
    types = model.job_types()
    multi_types = model.multi_gpu_job_types()
    eligible, excluded = _eligible(pods, nodes, model)
    kept: list[tuple[TracePod, JobKind]] = []
    for pod, kind in eligible:  # one draw per eligible pod, in trace order
        if rng.random() >= prob:
            excluded["not_sampled"] += 1
        else:
            kept.append((pod, kind))
    if jobs is not None and jobs < len(kept):
        pick = np.sort(rng.choice(len(kept), size=jobs, replace=False))
        excluded["not_sampled"] += len(kept) - jobs
        kept = [kept[i] for i in pick]
    drafts = []
    for pod, kind in kept:
        pool = types if pod.num_gpus == 1 else multi_types
        jt = pool[int(rng.integers(len(pool)))]
        assert pod.scheduled_s is not None and pod.deletion_s is not None
        work = max(1.0, pod.deletion_s - pod.scheduled_s)
        req = Request(pod.num_gpus, pod.gpu_share, pod.cpu, pod.mem_gib, pod.gpu_models)
        drafts.append((pod, kind, jt, work, req))
    k, t0 = 1.0, 0.0
    if drafts:
        sched = np.array([d[0].scheduled_s for d in drafts], dtype=float)
        t0 = float(np.quantile(sched, 0.01))
        rel = np.maximum(sched - t0, 0.0)
        span0 = float(rel.max())
        if span0 > 0:
            g = np.array([d[4].gpus_total for d in drafts])
            w = np.array([d[3] for d in drafts])
            if load is None:
                load = min(1.0, AUTO_LOAD_FRACTION * float(g.sum()) / cluster_gpus)
            k = _solve_span(g, w, cluster_gpus, load) / span0
    jobs = [Job(id=pod.name, kind=kind, arrival_s=max(pod.scheduled_s - t0, 0.0) * k, work=work,
                request=req, job_type=jt, priority=1.0, slowdown_bound=SLOWDOWN_BOUND[kind],
                censored=is_censored(pod))
            for pod, kind, jt, work, req in drafts]
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival_s, i))
    jobs = [jobs[i] for i in order]
    kinds = Counter(j.kind.value for j in jobs)
    return Workload(jobs, dict(excluded), k, cluster_gpus, prob,
                    offered_load(jobs, cluster_gpus),
                    {kd.value: kinds.get(kd.value, 0) for kd in JobKind})


# ---- continuous arrivals (docs/model.md, "Continuous arrivals") ----------------------------

#: the quantile of the trace's batch (BE) durations that sets the window lengths
WINDOW_QUANTILE = 0.95


def is_censored(pod: TracePod) -> bool:
    """Whether the pod's recorded lifetime is cut off by the end of the observation: the
    trace saw it still ``Running``, so ``deletion - scheduled`` is a lower bound of its
    work.  (A ``Failed`` pod's lifetime ended inside the trace and is replayed as
    observed; docs/metrics.md, "Censored jobs".)"""
    return pod.phase in CENSORED_PHASES


@dataclass(frozen=True)
class Window:
    """The time frame of a continuous-arrival run, seconds from the first arrival (t = 0).

    Jobs arrive during ``[0, horizon)``; ``[0, lo)`` is the *warm-up* (excluded from every
    metric), ``[lo, hi)`` the *measurement window* (``lo = warmup_s``, ``hi = lo +
    measure_s``), ``[hi, horizon)`` the *drain* (``horizon = hi + drain_s``): arrivals go on,
    so the jobs that arrived in the window finish under the same load, and the replay stops
    at ``horizon``."""

    warmup_s: float
    measure_s: float
    drain_s: float

    def __post_init__(self) -> None:
        for name in ("warmup_s", "measure_s", "drain_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0 or (name == "measure_s" and v <= 0):
                raise InvalidArgument(f"window.{name}", v, "a finite number of seconds >= 0 "
                                                           "(> 0 for measure_s)")

    @property
    def lo(self) -> float:
        return float(self.warmup_s)

    @property
    def hi(self) -> float:
        return float(self.warmup_s + self.measure_s)

    @property
    def horizon(self) -> float:
        return float(self.warmup_s + self.measure_s + self.drain_s)


def batch_durations(pods: Sequence[TracePod]) -> np.ndarray:
    """Durations ``max(1, deletion - scheduled)`` (s) of the trace's batch pods: BE pods
    asking GPUs that ran (rules 1-3 of the module docstring), in trace order."""
    return np.array([max(1.0, p.deletion_s - p.scheduled_s) for p in pods
                     if p.num_gpus > 0 and p.qos == "BE" and p.deletion_s is not None
                     and p.scheduled_s is not None], dtype=float)


def default_window(pods: Sequence[TracePod], quantile: float = WINDOW_QUANTILE) -> Window:
    """The evaluation's window from the trace's batch-duration distribution: with ``q`` its
    ``quantile`` (numpy linear interpolation; 17,219 s = 4.8 h for the bundled trace's 2,510
    BE pods at 0.95), warm-up ``q``, measurement window ``2 q``, drain ``q`` (docs/model.md,
    "Continuous arrivals", says why).  Raises InvalidArgument when the pods hold no batch pod."""
    d = batch_durations(pods)
    if d.size == 0:
        raise InvalidArgument("pods", len(pods), "at least one BE pod asking GPUs that ran, to "
                                                 "size the window from")
    q = float(np.quantile(d, quantile))
    return Window(q, 2.0 * q, q)


def window_demand(jobs: Sequence[Job], cluster_gpus: int, lo: float, hi: float) -> float:
    """The demand offered in ``[lo, hi)``: requested GPU-seconds of the jobs' lifetimes at
    their requested shape that fall inside it, ``sum_j g_j |[a_j, a_j + work_j) & [lo, hi)|``,
    over ``cluster_gpus x (hi - lo)`` -- the average fraction of the cluster's GPUs the jobs
    ask for during the window if each ran from its arrival at its requested speed.  0 for an
    empty window."""
    if hi <= lo or not jobs or cluster_gpus <= 0:
        return 0.0
    a = np.array([j.arrival_s for j in jobs])
    g = np.array([j.request.gpus_total for j in jobs])
    w = np.array([j.work for j in jobs])
    return float(_overlap_demand(a, g, w, lo, hi) / (cluster_gpus * (hi - lo)))


def _overlap_demand(a, g, w, lo, hi) -> float:
    return float((g * np.clip(np.minimum(a + w, hi) - np.maximum(a, lo), 0.0, None)).sum())


def _check_seed_and_gpus(seed: object, nodes: Sequence[Node]) -> int:
    """The cluster's GPU count; InvalidArgument for a ``seed`` that is not an integer >= 0 or
    a cluster without GPUs (both workload builders' checks)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgument("seed", seed, "must be an integer >= 0")
    cluster_gpus = sum(n.num_gpus for n in nodes)
    if cluster_gpus <= 0:
        raise InvalidArgument("nodes", len(nodes), "the cluster must have at least one GPU")
    return cluster_gpus


def _eligible(pods: Sequence[TracePod], nodes: Sequence[Node],
              model: ThroughputModel) -> tuple[list[tuple[TracePod, JobKind]], Counter]:
    """Rules 1-4 of the module docstring (no sampling): the pods that can run here."""
    known = frozenset(model.gpu_models())
    excluded = Counter({r: 0 for r in EXCLUSION_REASONS})
    kept = []
    for pod in pods:
        if pod.num_gpus == 0:
            excluded["cpu_only"] += 1
        elif pod.deletion_s is None:
            excluded["no_times"] += 1
        elif pod.scheduled_s is None:
            excluded["never_scheduled"] += 1
        elif not _fits(pod, nodes, known):
            excluded["no_fit"] += 1
        else:
            kept.append((pod, job_kind(pod)))
    return kept, excluded


#: the largest offered load a continuous workload takes: 10x the cluster (as evaluate's
#: --sweep-loads); beyond it the arrivals take minutes (and GiB) to draw and every policy saturates
MAX_LOAD = 10.0


def build_continuous_workload(pods: Sequence[TracePod], nodes: Sequence[Node], *,
                              seed: int = 0, load: float = 1.0, model: ThroughputModel,
                              window: Window) -> Workload:
    """Continuous arrivals over ``window`` (docs/model.md, "Continuous arrivals").

    A Poisson process of rate ``lam`` on ``[0, window.horizon)``; each arrival is a pod drawn
    uniformly, with replacement, from the pods that can run on ``nodes`` (rules 1-4 of the
    module docstring; seeded), made into a job as in :func:`build_workload` (id
    ``<pod name>#<arrival index>``, kind, work, a seeded job type, ``censored`` for a
    ``Running`` pod).  The pod sequence and the unit-rate inter-arrival gaps are drawn once
    for the seed; ``lam`` only rescales the gaps, and is found by bisection so that the
    demand offered in the measurement window (:func:`window_demand`) equals ``load``
    (GPU-seconds requested per second / cluster GPUs).  ``Workload.offered_load`` is that
    demand as built (the arrivals are discrete, so it can differ from ``load`` by the last
    arrival's share); ``scale`` = ``lam`` (arrivals per second); ``window`` = ``window``.

    Raises InvalidArgument for ``load`` not a number in (0, :data:`MAX_LOAD`], a bad ``seed``, a cluster
    without GPUs, or no pod that can run on ``nodes``.
    """
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not math.isfinite(load) \
            or not 0 < load <= MAX_LOAD:
        raise InvalidArgument("load", load, f"a number in (0, {MAX_LOAD:g}] (the demand offered "
                                            "in the window over the cluster's GPUs)")
    cluster_gpus = _check_seed_and_gpus(seed, nodes)
    kept, excluded = _eligible(pods, nodes, model)
    if not kept:
        raise InvalidArgument("nodes", len(nodes), "no trace pod that ran fits these nodes")
    rng = np.random.default_rng(seed)
    g_pool = np.array([p.num_gpus * p.gpu_share for p, _ in kept])
    w_pool = np.array([max(1.0, p.deletion_s - p.scheduled_s) for p, _ in kept])
    lo, hi, horizon = window.lo, window.hi, window.horizon
    # expected demand in the window of a rate-1 process (every job arriving in [0, hi) and
    # alive in it): a first guess for lam and the size of the draw
    e_demand = float(np.mean(g_pool * np.minimum(w_pool, hi - lo)))
    lam0 = load * cluster_gpus / max(e_demand, 1e-12)
    n = int(math.ceil(4.0 * lam0 * horizon)) + 64
    epochs = np.cumsum(rng.exponential(1.0, size=n))  # unit-rate arrival epochs
    pick = rng.integers(len(kept), size=n)
    g, w = g_pool[pick], w_pool[pick]

    def demand(lam: float) -> float:
        a = epochs / lam
        m = a < horizon
        return _overlap_demand(a[m], g[m], w[m], lo, hi) / (cluster_gpus * (hi - lo))

    lo_l, hi_l = lam0 / 16.0, lam0 * 3.0  # epochs cover lam up to 4 lam0 over the horizon
    if demand(hi_l) < load:
        raise InvalidArgument("load", load, f"must be <= {demand(hi_l):.3g} for this window "
                                            "(the arrival draw is too short)")
    lam = rate_for_demand(demand, load, lo_l, hi_l)  # demand grows with lam
    arrivals = epochs / lam
    count = int(np.searchsorted(arrivals, horizon, side="left"))
    types = model.job_types()
    multi_types = model.multi_gpu_job_types()
    jobs: list[Job] = []
    for i in range(count):
        pod, kind = kept[int(pick[i])]
        pool = types if pod.num_gpus == 1 else multi_types
        jt = pool[int(rng.integers(len(pool)))]
        req = Request(pod.num_gpus, pod.gpu_share, pod.cpu, pod.mem_gib, pod.gpu_models)
        jobs.append(Job(id=f"{pod.name}#{i}", kind=kind, arrival_s=float(arrivals[i]),
                        work=float(w_pool[int(pick[i])]), request=req, job_type=jt,
                        priority=1.0, slowdown_bound=SLOWDOWN_BOUND[kind],
                        censored=is_censored(pod)))
    kinds = Counter(j.kind.value for j in jobs)
    return Workload(jobs, dict(excluded), lam, cluster_gpus, 1.0,
                    window_demand(jobs, cluster_gpus, lo, hi),
                    {kd.value: kinds.get(kd.value, 0) for kd in JobKind}, window)


def user_estimates(jobs, badness: float, seed: int) -> dict[str, float]:
    """Job id -> a user's estimate of its work (seconds): uniform in ``[work, (badness + 1)
    x work]`` (the f-model of Mu'alem & Feitelson, IEEE TPDS 12(6), 2001: users overestimate,
    never under, as a job is killed at its estimate), one draw per job in id order from
    ``default_rng(seed)``.  Tsafrir (JSSPP'10) shows real estimates are coarser (a few round
    values), so this gives a policy more information than real users do."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ordered = sorted(jobs, key=lambda j: j.id)
    u = rng.random(len(ordered))
    return {j.id: j.work * (1.0 + badness * float(x)) for j, x in zip(ordered, u)}


def rate_for_demand(demand: Callable[[float], float], target: float, lo: float, hi: float,
                    rel_tol: float = 1e-9) -> float:
    """The smallest arrival rate (jobs/s, to a relative ``rel_tol``) in ``[lo, hi]`` at which
    ``demand(rate)`` (non-decreasing in the rate: more arrivals, earlier) reaches ``target``:
    bisection on a log scale (the rates span orders of magnitude), returning the upper end of
    the final bracket, so ``demand(result) >= target`` whenever ``demand(hi) >= target``.
    Shared by the continuous openb workload and :mod:`elastico.sim.llm_mix`."""
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if demand(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + rel_tol:
            break
    return hi
