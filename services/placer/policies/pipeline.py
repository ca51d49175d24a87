"""The ``elastico`` policy's round as a pipeline of named stages: shapes -> prices ->
placement -> decisions (DESIGN.md, "Data flow of one round").

Who calls it: :meth:`~elastico.placer.policies.elastico.ElasticoPolicy.__call__`, which is
only the composition of these stages; its ablations (``elastico-no-esp``, ``-no-iac``,
``-no-rst``, ``-no-growth``, ``-no-model-choice``, ``-no-mig``) are the same stages with one
part switched off by a parameter.  Every driver reaches the policy through one function,
:func:`elastico.placer.round.run_round`, so the simulator, the placer service and the live
Kubernetes loop all run this pipeline::

    elastico.sim.simulator        placer.server: RunRound        placer.kube.loop
    (virtual clock)               (PlacerService, gRPC)          (SchedulerLoop, wall clock)
      │ the policy in-process,      │ MarkDegraded(policy)         │ MarkDegraded(
      │ or RemotePlacerPolicy ─────►│                              │   _SkipJobs(policy))
      ▼                             ▼                              ▼
    run_round(policy, RoundInput)   (the same function, in each process)
      │ the policy decides on a private copy of the ClusterState
      ▼
    ElasticoPolicy.__call__(inp, state)          memory across rounds: RoundMemory
      inp.jobs ──► 1 hold ──────► Held: decisions of services and of dwelling jobs,
                                  the jobs left to price, capacity [R] left for them
                   2 shape ─────► Shapes: families as a CSR batch -- offsets [N+1],
                                  throughput [M], demand [M, R], current [N]
                   3 value ─────► Values: utility [M], charged [M], switch_cost [N],
                                  remaining_s [N]
                   4 price ─────► Priced: PricingResult (choice [N], prices [R], gap),
                                  prices [R], reduced [M]     (warm start: RoundMemory.prices)
                   5 place ─────► a Decision per priced job; its GPUs booked in ``state``
                   6 record_changes ──► RoundMemory.changed_at (stage 1's dwell clock)
      ──► RoundResult(decisions, state, pricing, resource names) ──► run_round ──► driver

N jobs are priced, with M configurations in all (job i owns rows ``offsets[i]:offsets[i+1]``,
row ``offsets[i]`` is its ``wait``) over the R resources of the policy's
:class:`~elastico.model.ResourceSpace` (per GPU model: GPU compute in GPUs and GPU memory in
GiB; host CPU in cores and memory in GiB).  Throughput is normalized (1.0 = the job's trace
speed); utilities are in the configured utility's units (``jct``: 1/s); shadow prices in
utility per unit of each resource; times in seconds of the clock of ``RoundInput.now``.

The stages take plain values (dataclasses, numpy arrays, the round's ``ClusterState``) and
return plain values; what a stage changes is said in its docstring (stages 1 and 5 book
GPUs in the round's private ``state``; stage 6 writes the dwell clock).  Whom they call: the
shape families (:class:`~elastico.placer.policies.common.JobCatalog`, over
:mod:`elastico.shapes`), the utilities (:mod:`elastico.pricing.utilities`), the MMKP solver
(``PolicyEnv.pricer``: :func:`elastico.pricing.solve` in-process or PricingService), the
placement state (:class:`~elastico.placer.placement.ClusterState`) with the slowdown model
(:mod:`elastico.predictor`).  Tracing: stages 2, 4 and 5 open the round's child spans
``shapes.generate``, ``pricing.solve`` and ``placer.place`` (:mod:`elastico.tracing`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from elastico.model import Configuration, Job, JobKind, ResourceSpace, ShapeFamily
from elastico.predictor import SlowdownModel
from elastico.pricing import PricingResult
from elastico.pricing.utilities import Utility, charge_switch, switch_cost
from elastico.shapes import FitsNoModel
from elastico.tracing import NOOP, Tracer

from ..placement import ClusterState, FailedShapes, Gang
from ..round import UNKNOWN_PREFIX, ActiveJob, Decision, Status
from .common import JobCatalog, is_service, keep_running, place_fixed_shape

__all__ = ["RunningConfigs", "JobKeys", "RoundMemory", "Placing", "PricingSettings", "Held", "Shapes",
           "Values", "Priced", "hold", "shape", "value", "price", "place", "record_changes",
           "greedy_choice", "fifo_among_equals"]


# -- what the pipeline carries and is built with ------------------------------------------

class RunningConfigs:
    """A cache kept across rounds: per running job, its configuration (the object), that
    configuration's index in the job's family and its demand vector [R] in ``space`` -- so
    a round does not re-derive them for every running job.  An entry holds while the job
    runs with the same configuration object; another object is looked up afresh."""

    def __init__(self, space: ResourceSpace):
        self.space = space
        self._hit: dict[str, tuple[Configuration, int, np.ndarray]] = {}

    def _lookup(self, job_id: str, config: Configuration,
                configs: Sequence[Configuration] | None) -> tuple[int, np.ndarray]:
        hit = self._hit.get(job_id)
        if hit is None or hit[0] is not config or (hit[1] < 0 and configs is not None):
            try:
                k = configs.index(config) if configs is not None else -1
            except ValueError:
                k = -1
            hit = (config, k, config.demand(self.space))
            self._hit[job_id] = hit
        return hit[1], hit[2]

    def demand(self, job_id: str, config: Configuration,
               configs: Sequence[Configuration] | None = None) -> np.ndarray:
        """``config``'s demand [R] (resource units).  ``configs``: the job's family's
        configurations where known, so that the cache learns the index too."""
        return self._lookup(job_id, config, configs)[1]

    def index(self, job_id: str, config: Configuration,
              configs: Sequence[Configuration]) -> int:
        """``config``'s index in ``configs`` (the job's family), -1 when it is not in it."""
        return self._lookup(job_id, config, configs)[0]

    def forget(self, job_id: str) -> None:
        self._hit.pop(job_id, None)


#: Most distinct values :meth:`JobKeys.intern` numbers (then :meth:`JobKeys.of_all` starts
#: over, between rounds, with the per-job keys built from them), so that a long-lived placer's
#: memory stays bounded; a bound on memory, not a model constant (it changes no decision)
INTERNED_LIMIT = 200_000


class JobKeys:
    """A cache kept across rounds: per job, a number for its family's configurations and a
    number for its identity among equal pending jobs (:func:`fifo_among_equals`: kind, job
    type, request, shape rule, priority, slowdown bound, family -- without its remaining
    work).  Equal values get equal numbers (:meth:`intern`), so a round compares numbers
    instead of hashing every waiting job's family again (a queue of thousands of jobs, every
    round).  An entry holds while the job and its family are the same objects."""

    def __init__(self):
        self._keys: dict[str, tuple] = {}
        self._interned: dict[tuple, int] = {}

    def intern(self, value: tuple) -> int:
        """A number per distinct ``value`` (equal values, equal numbers)."""
        n = self._interned.get(value)
        if n is None:
            n = self._interned[value] = len(self._interned)
        return n

    def of(self, job: Job, fam: ShapeFamily) -> tuple[int, int]:
        """(number of ``fam``'s configurations, number of the job's identity for
        :func:`fifo_among_equals` without its remaining work)."""
        hit = self._keys.get(job.id)
        if hit is None or hit[0] is not job or hit[1] is not fam:
            cfg = self.intern(fam.configs)
            ident = self.intern((job.kind, job.job_type, job.request, job.reshape,
                                 job.priority, job.slowdown_bound, cfg))
            hit = self._keys[job.id] = (job, fam, cfg, ident)
        return hit[2], hit[3]

    def of_all(self, shapes: "Shapes") -> list[tuple[int, int]]:
        """:meth:`of` for every job of a batch, in its order; past :data:`INTERNED_LIMIT`
        numbered values every number is dropped first (whole: equal values keep equal
        numbers within the batch)."""
        if len(self._interned) > INTERNED_LIMIT:
            self._interned.clear()
            self._keys.clear()
        return [self.of(a.job, f) for a, f in zip(shapes.jobs, shapes.families)]

    def forget(self, job_id: str) -> None:
        self._keys.pop(job_id, None)


@dataclass
class RoundMemory:
    """All that the policy carries from one round to the next (the shape families are the
    catalog's cache; everything else a round rebuilds).

    ``running``: the running jobs' configuration indices and demands
    (:class:`RunningConfigs`).  ``prices``: the last priced round's shadow prices [R]
    (stage 4's warm start, "dynamic prices"; None before the first).  ``changed_at``: job id
    -> time (s) of its last start or change (written by stage 6, read by stage 1's dwell).
    ``keys``: per job, the numbers of its family and FIFO identity (:class:`JobKeys`, read
    by stages 4 and 5)."""

    running: RunningConfigs
    prices: np.ndarray | None = None
    changed_at: dict[str, float] = field(default_factory=dict)
    keys: JobKeys = field(default_factory=JobKeys)

    def forget(self, job_id: str) -> None:
        self.running.forget(job_id)
        self.changed_at.pop(job_id, None)
        self.keys.forget(job_id)


@dataclass(frozen=True)
class Placing:
    """How stages 1 and 5 place a configuration (from the policy's ``PolicyEnv``):
    ``catalog`` (families, requested shapes, interference profiles), ``slowdown`` (the
    placer's slowdown model: :class:`~elastico.predictor.NoInterference` for
    ``elastico-no-iac``), ``scorer`` (placement scorer name), ``replica_pods`` (offline
    inference replicas are separate pods, placed as a gang) and ``mig`` (services may take
    MIG instances: off without RST or MIG)."""

    catalog: JobCatalog
    slowdown: SlowdownModel
    scorer: str
    replica_pods: bool
    mig: bool


@dataclass(frozen=True)
class PricingSettings:
    """How stage 4 chooses: ``solver`` with the signature and result of
    :func:`elastico.pricing.solve` (``PolicyEnv.pricer``), or None for :func:`greedy_choice`
    (``elastico-no-esp``); the per-round budget ``max_iterations`` and ``gap_tolerance``;
    ``resource_names`` [R] (the ``pricing.price.<name>`` span attributes)."""

    solver: Callable[..., PricingResult] | None
    max_iterations: int
    gap_tolerance: float
    resource_names: tuple[str, ...]


# -- 1. hold: what the round does not price -----------------------------------------------

@dataclass(frozen=True)
class Held:
    """Jobs decided without pricing, and what is left to price.

    ``decisions``: job id -> Decision, in the order decided.  ``jobs``: the jobs left to
    price, in arrival order (ties: job id).  ``capacity`` [R]: what is left of each resource
    for them (resource units, >= 0)."""

    decisions: dict[str, Decision]
    jobs: list[ActiveJob]
    capacity: np.ndarray


def hold(jobs: Sequence[ActiveJob], state: ClusterState, capacity: np.ndarray,
         placing: Placing, running: RunningConfigs, *, now: float,
         changed_at: Mapping[str, float], dwell_s: float) -> Held:
    """Stage 1: services, and running jobs within their dwell time.  Owns the service rule
    and the dwell rule.  Books the services' GPUs in ``state``.

    *Services* (in arrival order): a running one keeps its place; a pending one is placed
    by :func:`place_service`.  A service's first placement is never changed.
    *Dwell*: a running elastic job that started or changed less than ``dwell_s`` seconds
    before ``now`` (``changed_at``: job id -> time of its last start or change) keeps its
    configuration and GPUs this round, so a job cannot thrash between configurations faster
    than its restarts pay off (each move costs a restart).

    The demands of both (``running``) come off ``capacity`` [R] (the cluster's, resource
    units); the rest is clipped at 0 and is what the other jobs are priced against."""
    decisions: dict[str, Decision] = {}
    elastic: list[ActiveJob] = []
    cap = capacity.copy()
    # the loop only adds bookings, so a shape that found no room stays without room for the
    # rest of it (place_fixed_shape's memo)
    failed = FailedShapes()
    for a in sorted(jobs, key=lambda a: (a.job.arrival_s, a.job.id)):
        if not is_service(a.job):
            elastic.append(a)
            continue
        d = keep_running(a, state) if a.running else place_service(a, state, placing, failed)
        decisions[a.job.id] = d
        if d.config is not None and d.status is Status.PLACED:
            cap -= running.demand(a.job.id, d.config)
    priced: list[ActiveJob] = []
    for a in elastic:
        if a.running and now - changed_at.get(a.job.id, -math.inf) < dwell_s:
            decisions[a.job.id] = keep_running(a, state)
            cap -= running.demand(a.job.id, a.config, _configs(placing.catalog, a.job))
        else:
            priced.append(a)
    np.maximum(cap, 0.0, out=cap)
    return Held(decisions, priced, cap)


def place_service(a: ActiveJob, state: ClusterState, placing: Placing,
                  failed: FailedShapes) -> Decision:
    """A pending service's placement: whole GPUs that nothing else shares (first allowed
    model that fits; a job with ``fixed_share``, every live pod, keeps its share) -- a
    service's slowdown bound (1.1) is tighter than the predictor's error (MAE 0.29,
    docs/predictor.md), so only isolation keeps every service within it.  With MIG
    (``placing.mig``) a single-GPU service first tries a MIG instance at least as fast as its
    requested shape (:func:`elastico.shapes.mig_configurations`; hardware isolation, so its
    bound holds by construction), smallest first, and a whole-GPU (7g) instance last.
    ``failed``: the round's shapes that found no room (shared by the round's services)."""
    d = _place_service_mig(a, state, placing, failed, True) if placing.mig else None
    if d is None:
        d = place_fixed_shape(placing.catalog, state, a, whole_gpus=not a.job.fixed_share,
                              scorer=placing.scorer, failed=failed)
    if d.status is not Status.PLACED and placing.mig:
        d = _place_service_mig(a, state, placing, failed, False) or d
    return d


def _place_service_mig(a: ActiveJob, state: ClusterState, placing: Placing,
                       failed: FailedShapes, partial: bool) -> Decision | None:
    """A pending service on a MIG instance of its family (only instances at least as fast
    as its requested shape are in it), smallest instance first; ``partial``: only
    instances smaller than the GPU, else only whole-GPU ones (7g, the fallback when no
    normal-mode GPU is free).  None if none fits."""
    catalog = placing.catalog
    if a.job.request.num_gpus != 1 or not catalog.mig_models:
        return None
    try:
        fam = catalog.family(a.job)
    except FitsNoModel:  # place_fixed_shape says so
        return None
    configs = sorted((c for c in fam.configs
                      if c.mig_profile is not None and (c.gpu_share < 1.0) == partial),
                     key=lambda c: (c.gpus_total, c.gpu_mem_gib, -c.throughput, c.name))
    for c in configs:
        if failed.refusal(c) is not None:  # place_unless_dominated's answer, no profile
            continue
        out = state.place_unless_dominated(a.job.id, c, catalog.profile(a.job, c),
                                           a.job.slowdown_bound, failed, placing.slowdown,
                                           scorer=placing.scorer)
        if out.assignment is not None:
            return Decision(a.job.id, Status.PLACED, c, out.assignment, changed=True,
                            reason="placed on a MIG instance")
    return None


def _configs(catalog: JobCatalog, job: Job) -> tuple[Configuration, ...] | None:
    """The job's family's configurations, or None when its request fits no GPU model (it
    changed while the job ran)."""
    try:
        return catalog.family(job).configs
    except FitsNoModel:
        return None


# -- 2. shape: Resource Shape Transformation ----------------------------------------------

@dataclass(frozen=True)
class Shapes:
    """The priced jobs' shape families as one CSR batch (the pricing instance but for its
    utilities and capacity).

    ``jobs`` [N] and their ``families`` [N]; ``offsets`` [N+1] int64 (job i owns rows
    ``offsets[i]:offsets[i+1]``, the first its ``wait``); ``throughput`` [M] normalized
    throughput as the round values it (:meth:`JobCatalog.arrays`: solo, but an offline LLM
    job's MPS-shared configurations at the bandwidth their share keeps on a full GPU);
    ``demand`` [M, R] resource units; ``current`` [N] int64: the index of a
    running job's configuration in its family, -1 for a pending job (or one whose
    configuration is no longer in its family)."""

    jobs: list[ActiveJob]
    families: list[ShapeFamily]
    offsets: np.ndarray
    throughput: np.ndarray
    demand: np.ndarray
    current: np.ndarray


def shape(held: Held, state: ClusterState, catalog: JobCatalog, space: ResourceSpace,
          running: RunningConfigs, *, tracer: Tracer = NOOP) -> tuple[Shapes, Held]:
    """Stage 2: every job of ``held.jobs`` gets its shape family (the catalog's, built once
    per job: :func:`elastico.shapes.build_family`, or an ablation's subset), batched.  Owns
    the CSR layout.

    A job whose request fits no GPU model is decided here, alone (not the round): a running
    one (its request changed while it ran) keeps what it has and its demand comes off the
    capacity; a pending one is ``unplaceable``.  Returns the batch of the others (N = 0
    when there are none) and ``held`` with those decisions added.  Span
    ``shapes.generate``."""
    decisions = dict(held.decisions)
    cap = held.capacity.copy()
    fams: list[ShapeFamily] = []
    fitting: list[ActiveJob] = []
    with tracer.span("shapes.generate", {"shapes.jobs": len(held.jobs)}) as span:
        for a in held.jobs:
            try:
                fams.append(catalog.family(a.job))
                fitting.append(a)
            except FitsNoModel as e:  # this job only, not the round
                if a.running:
                    decisions[a.job.id] = keep_running(a, state)
                    np.maximum(cap - running.demand(a.job.id, a.config), 0.0, out=cap)
                else:
                    decisions[a.job.id] = Decision(a.job.id, Status.UNPLACEABLE, None,
                                                   reason=f"{e.value} {e.allowed}")
        offsets = np.zeros(len(fams) + 1, dtype=np.int64)
        np.cumsum(np.array([len(f) for f in fams], dtype=np.int64), out=offsets[1:])
        arrs = [catalog.arrays(a.job, space) for a in fitting]
        thr = np.concatenate([x for x, _ in arrs]) if arrs else np.zeros(0)
        demand = np.concatenate([d for _, d in arrs]) if arrs else np.zeros((0, space.size))
        if fitting:
            span.set_attribute("shapes.configurations", int(offsets[-1]))
    current = np.full(len(fitting), -1, dtype=np.int64)
    for i, a in enumerate(fitting):
        if a.running:
            current[i] = running.index(a.job.id, a.config, fams[i].configs)
    return Shapes(fitting, fams, offsets, thr, demand, current), Held(decisions, fitting, cap)


# -- 3. value: utilities with hysteresis --------------------------------------------------

@dataclass(frozen=True)
class Values:
    """What each configuration is worth.

    ``utility`` [M]: the configured utility ``U_c`` (``jct``: 1/s).  ``charged`` [M]: the
    same, less ``switch_cost`` for every configuration of a running job other than its
    current one (what ``elastico-no-esp`` chooses by and placement ranks by).
    ``switch_cost`` [N]: the utility a running job loses while it restarts (0 for a pending
    one).  ``remaining_s`` [N]: remaining work as the policy estimates it (seconds at
    throughput 1.0)."""

    utility: np.ndarray
    charged: np.ndarray
    switch_cost: np.ndarray
    remaining_s: np.ndarray


def value(shapes: Shapes, *, estimate: Callable[[Job], float], utility: Utility,
          restart_s: float) -> Values:
    """Stage 3: the utility of every configuration (``utility``:
    :data:`elastico.pricing.UTILITIES`' signature; ``estimate(job)``: remaining work, s, as
    a live system can know it: policies/remaining.py) and the hysteresis charge.  Owns the
    restart cost.

    A running job is charged, for every configuration but its current one, the utility it
    would lose while restarting: ``u_cur * restart_s / max(remaining time at its current
    configuration, restart_s)`` (:func:`elastico.pricing.utilities.switch_cost`) -- so the
    solver itself only moves a job when the gain over its remaining time beats the restart
    (hysteresis inside the optimisation, not bolted on after it)."""
    jobs, offsets, current = shapes.jobs, shapes.offsets, shapes.current
    remaining = np.array([estimate(a.job) for a in jobs])
    priority = np.array([a.job.priority for a in jobs])
    util = utility(shapes.throughput, offsets, remaining, priority)
    u_cur = np.zeros(len(jobs))
    rem_t = np.zeros(len(jobs))
    for i in np.flatnonzero(current >= 0):
        u_cur[i] = util[offsets[i] + current[i]]
        rem_t[i] = remaining[i] / max(jobs[i].config.throughput, 1e-9)
    cost = switch_cost(u_cur, rem_t, restart_s)
    return Values(util, charge_switch(util, offsets, current, cost), cost, remaining)


# -- 4. price: Elastic Shadow Pricing -----------------------------------------------------

@dataclass(frozen=True)
class Priced:
    """One configuration per job, and its prices.

    ``result``: the solver's :class:`~elastico.pricing.PricingResult` (``choice`` [N]: the
    index in each family, 0 = wait; ``gap``, ``dual_bound``, ...) with the choices of
    identical pending jobs dealt out in arrival order (:func:`fifo_among_equals`).
    ``prices`` [R]: the shadow prices (utility per resource unit; all 0 without ESP).
    ``reduced`` [M]: each configuration's reduced value ``charged - demand . prices``."""

    result: PricingResult
    prices: np.ndarray
    reduced: np.ndarray


def price(shapes: Shapes, values: Values, capacity: np.ndarray,
          warm: np.ndarray | None, settings: PricingSettings, *,
          tracer: Tracer = NOOP, keys: Sequence[tuple[int, int]] | None = None) -> Priced:
    """Stage 4: choose one configuration per job under ``capacity`` [R] (:class:`Held`'s).
    Owns the choice and the prices.

    With ESP, ``settings.solver`` (:func:`elastico.pricing.solve`: Lagrangian prices, primal
    repair, certified gap) prices ``values.utility`` with the switch cost, warm-started from
    ``warm`` (the previous round's prices [R]; ignored when the resources changed); without
    (``solver`` None), :func:`greedy_choice` on ``values.charged``.  Then identical pending
    jobs get their choices in arrival order (the solver is indifferent between them).
    ``keys`` [N]: each job's (family number, identity number) from :class:`JobKeys` (the
    policy's :class:`RoundMemory`; default: numbered afresh).  Span ``pricing.solve``."""
    init = warm if warm is not None and len(warm) == len(capacity) else None
    with tracer.span("pricing.solve", {"pricing.jobs": len(shapes.jobs),
                                       "pricing.resources": len(capacity)}) as span:
        if settings.solver is not None:
            res = settings.solver(values.utility, shapes.demand, shapes.offsets, capacity,
                                  initial_prices=init, max_iterations=settings.max_iterations,
                                  gap_tolerance=settings.gap_tolerance,
                                  primal_every=settings.max_iterations,
                                  current=shapes.current, switch_cost=values.switch_cost)
        else:
            res = greedy_choice(values.charged, shapes.demand, shapes.offsets, capacity,
                                shapes.current)
        span.set_attribute("pricing.iterations", res.iterations)
        span.set_attribute("pricing.gap", res.gap)
        span.set_attribute("pricing.changed", int(res.changed.sum()))
        for name, p in zip(settings.resource_names, res.prices):
            span.set_attribute(f"pricing.price.{name}", float(p))
    keys = JobKeys().of_all(shapes) if keys is None else keys
    fifo = fifo_among_equals(shapes.jobs, res.choice, values.utility, shapes.offsets,
                             values.remaining_s, shapes.families, [k for _, k in keys])
    if fifo is not None:
        res = dataclasses.replace(res, choice=fifo)
    prices = np.asarray(res.prices, dtype=float)
    return Priced(res, prices, values.charged - shapes.demand @ prices)


def greedy_choice(utility: np.ndarray, demand: np.ndarray, offsets: np.ndarray,
                  capacity: np.ndarray, current: np.ndarray) -> PricingResult:
    """The ``elastico-no-esp`` choice: jobs in descending order of their best ``utility``
    [M] (already charged with the switch cost), each taking its highest-utility
    configuration whose ``demand`` [M, R] fits what ``capacity`` [R] has left (ties: the
    lower index), else ``wait`` (index 0).  No prices (all 0) and no bound: ``dual_bound``
    and ``gap`` are NaN.  ``current`` [N]: running configuration index or -1."""
    n = len(offsets) - 1
    left = np.asarray(capacity, dtype=float).copy()
    choice = np.zeros(n, dtype=np.int64)
    best = np.array([utility[offsets[i]:offsets[i + 1]].max() for i in range(n)])
    for i in np.argsort(-best, kind="stable"):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        for c in np.argsort(-utility[lo:hi], kind="stable"):
            if np.all(demand[lo + c] <= left + 1e-9):
                choice[i] = c
                left -= demand[lo + c]
                break
    picked = offsets[:-1] + choice
    changed = (current >= 0) & (choice != current)
    return PricingResult(choice=choice, prices=np.zeros(len(left)),
                         primal_value=float(utility[picked].sum()), dual_bound=math.nan,
                         gap=math.nan, iterations=0, seconds=0.0,
                         totals=demand[picked].sum(axis=0), changed=changed)


def fifo_among_equals(jobs: Sequence[ActiveJob], choice: np.ndarray, util: np.ndarray,
                      offsets: np.ndarray, remaining: np.ndarray,
                      fams: Sequence[ShapeFamily],
                      idents: Sequence[int] | None = None) -> np.ndarray | None:
    """Pricing's ``choice`` [N] with the choices of identical pending jobs (same kind, job
    type, request, shape rule, priority, bound, estimated remaining work ``remaining`` [N]
    and family ``fams`` [N] -- a family may depend on the job's id, e.g.
    ``elastico-no-model-choice``'s: the same family and
    utilities) dealt out again in arrival order, best utility first, so that of two equal
    jobs the earlier never waits while the later is placed (the solver is indifferent between
    them).  None when nothing changes.  ``idents`` [N]: each job's identity without its
    remaining work, equal exactly when those of the list above (kind ... family) are equal
    (:meth:`JobKeys.of`); default: that tuple itself."""
    groups: dict[tuple, list[int]] = {}
    for i, a in enumerate(jobs):
        if not a.running:
            j = a.job
            ident = (j.kind, j.job_type, j.request, j.reshape, j.priority, j.slowdown_bound,
                     fams[i].configs) if idents is None else idents[i]
            groups.setdefault((ident, float(remaining[i])), []).append(i)
    out = None
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda i: (jobs[i].job.arrival_s, jobs[i].job.id))
        picks = sorted((int(choice[i]) for i in members),
                       key=lambda k: (k == 0, -util[offsets[members[0]] + k]))
        for i, k in zip(members, picks):
            if int(choice[i]) != k:
                if out is None:
                    out = np.array(choice, dtype=np.int64, copy=True)
                out[i] = k
    return out


# -- 5. place: interference-aware co-location ---------------------------------------------

def place(shapes: Shapes, values: Values, priced: Priced, state: ClusterState,
          placing: Placing, *, tracer: Tracer = NOOP,
          keys: Sequence[tuple[int, int]] | None = None) -> dict[str, Decision]:
    """Stage 5: priced configurations onto GPUs; a Decision per job of ``shapes.jobs`` (in
    the order decided), each placed one booked in ``state``.  Owns which GPUs, moves,
    preemption and backfill.  Span ``placer.place``.

    Jobs that keep their configuration keep their GPUs.  A running job whose priced
    configuration changed moves (:func:`_move`), pending jobs start (:func:`_start`), and
    waiting jobs take what is left (:func:`_backfill`).  A shape that failed to fit this
    round is not retried, nor any shape at least as large on the same GPU model (a
    heuristic: slowdown bounds differ between jobs); each job's failed shapes and why make
    its waiting reason.  ``keys`` [N]: each job's (family number, identity number)
    (:class:`JobKeys`; default: numbered afresh), by which backfill recognises equal families
    in a queue."""
    jobs, choice = shapes.jobs, priced.result.choice
    keys = JobKeys().of_all(shapes) if keys is None else keys
    decisions: dict[str, Decision] = {}
    with tracer.span("placer.place", {"placer.jobs": len(jobs)}) as span:
        moves: list[int] = []
        starts: list[int] = []
        for i, a in enumerate(jobs):
            k = int(choice[i])
            if a.running and k == shapes.current[i]:
                decisions[a.job.id] = keep_running(a, state)
            elif a.running:
                moves.append(i)
            elif k != 0:
                starts.append(i)
        waiting = [i for i, a in enumerate(jobs) if not a.running and int(choice[i]) == 0]
        failed = FailedShapes()
        tried: dict[str, dict[Configuration, str]] = {}  # job id -> shape -> why it failed
        decisions.update(_move(moves, shapes, priced, state, placing, failed, tried))
        started, unplaced = _start(starts, shapes, values, priced, state, placing, failed, tried)
        decisions.update(started)
        decisions.update(_backfill(waiting + unplaced, shapes, values, state, placing,
                                   failed, tried, [f for f, _ in keys]))
        span.set_attribute("placer.placed", sum(
            1 for a in jobs if decisions[a.job.id].status is Status.PLACED))
    return decisions


def _move(moves: list[int], shapes: Shapes, priced: Priced, state: ClusterState,
          placing: Placing, failed: FailedShapes,
          tried: dict[str, dict[Configuration, str]]) -> dict[str, Decision]:
    """Running jobs ``moves`` (indices into ``shapes.jobs``) whose priced configuration
    changed: released and tried again -- priced out (wait): preempted; else the priced
    configuration, then any whose reduced value is at least that of staying
    (:func:`_candidates`).  If none fits (fragmentation, memory, or a co-resident's slowdown
    bound) the job is booked back exactly where it was: a failed move never costs a
    restart."""
    out: dict[str, Decision] = {}
    for i in moves:
        a, fam = shapes.jobs[i], shapes.families[i]
        lo, hi = shapes.offsets[i], shapes.offsets[i + 1]
        k, cur = int(priced.result.choice[i]), int(shapes.current[i])
        floor = priced.reduced[lo + cur] if cur >= 0 else priced.reduced[lo]
        old = state.assignment(a.job.id)
        old_profile = state.profile(a.job.id)
        state.release(a.job.id)
        if k == 0:  # priced out: preempt
            d = Decision(a.job.id, Status.WAITING, None, changed=True,
                         reason="preempted: priced out")
        else:
            cands = _candidates(fam, priced.reduced[lo:hi], k, floor, {k, cur, 0}, failed)
            d = _place_first(a, state, cands, cands[:1] == [fam.configs[k]], placing,
                             failed=failed, tried=tried)
        if d is None:  # nothing better fits: stay exactly where it was
            state.rebook(old, old_profile, a.job.slowdown_bound)
            d = Decision(a.job.id, Status.PLACED, a.config, old,
                         reason="kept: no better configuration fits")
        out[a.job.id] = d
    return out


def _start(starts: list[int], shapes: Shapes, values: Values, priced: Priced,
           state: ClusterState, placing: Placing, failed: FailedShapes,
           tried: dict[str, dict[Configuration, str]]
           ) -> tuple[dict[str, Decision], list[int]]:
    """Pending jobs ``starts`` with a priced configuration, by utility density (charged
    utility of the choice; equal: arrival order), each its choice, then the others by
    reduced value down to that of waiting.  Returns the placed ones' decisions and the
    indices of those that fit nowhere (for backfill)."""
    jobs, offsets, choice = shapes.jobs, shapes.offsets, priced.result.choice
    order = sorted(starts, key=lambda i: (-values.charged[offsets[i] + choice[i]],
                                          jobs[i].job.arrival_s, jobs[i].job.id))
    out: dict[str, Decision] = {}
    unplaced: list[int] = []
    for i in order:
        a, fam = jobs[i], shapes.families[i]
        lo, hi = offsets[i], offsets[i + 1]
        k = int(choice[i])
        cands = _candidates(fam, priced.reduced[lo:hi], k, priced.reduced[lo], {k, 0}, failed)
        d = _place_first(a, state, cands, cands[:1] == [fam.configs[k]], placing,
                         failed=failed, tried=tried)
        if d is None:
            unplaced.append(i)
        else:
            out[a.job.id] = d
    return out, unplaced


def _backfill(waiting: list[int], shapes: Shapes, values: Values, state: ClusterState,
              placing: Placing, failed: FailedShapes,
              tried: dict[str, dict[Configuration, str]],
              fam_ids: Sequence[int]) -> dict[str, Decision]:
    """Free GPUs go to waiting jobs ``waiting`` (priced to wait, or found no room), best
    (charged) utility first -- equal: the earlier job first, so of identical jobs a later
    one never takes the room -- each taking any configuration that fits, by descending
    utility, so no GPU idles while a job that could use it waits.  A job that fits nowhere
    waits, with the reason from :func:`_why_waiting`.  ``fam_ids`` [N]: each job's family
    number (:class:`JobKeys`): a family whose every configuration dominates a shape that
    failed this round stays so (``failed`` only grows), so its later jobs skip the check, and
    a job that tried nothing gets the reason an earlier one with the same family and request
    got while ``failed`` is unchanged (the same shapes against the same list)."""
    jobs, offsets, util = shapes.jobs, shapes.offsets, values.charged
    order = sorted(waiting, key=lambda i: (-util[offsets[i]:offsets[i + 1]].max(),
                                           jobs[i].job.arrival_s, jobs[i].job.id))
    out: dict[str, Decision] = {}
    shut: set[int] = set()  # families with nothing left to try this round
    why_memo: dict = {}
    for i in order:
        a, fam = jobs[i], shapes.families[i]
        lo, hi = offsets[i], offsets[i + 1]
        if fam_ids[i] in shut:
            configs = []
        else:
            configs = [fam.configs[c] for c in np.argsort(-util[lo:hi], kind="stable")
                       if c != 0]
            configs = [c for c in configs if not failed.dominated(c)]
            if not configs:
                shut.add(fam_ids[i])
        d = _place_first(a, state, configs, False, placing, why="backfill", failed=failed,
                         tried=tried) if configs else None
        if d is None:
            mine = tried.get(a.job.id, {})
            memo = (fam_ids[i], a.job.request) if not mine else None
            hit = why_memo.get(memo) if memo is not None else None
            if hit is not None and hit[0] == len(failed):
                why = hit[1]  # the same shapes against the same failed list
            else:
                why = _why_waiting(a.job, fam, mine, failed)
                if memo is not None:
                    why_memo[memo] = (len(failed), why)
            d = Decision(a.job.id, Status.WAITING, None, reason=why)
        out[a.job.id] = d
    return out


def _place_first(a: ActiveJob, state: ClusterState, configs: list[Configuration],
                 first_is_choice: bool, placing: Placing, why: str = "",
                 failed: FailedShapes | None = None,
                 tried: dict[str, dict[Configuration, str]] | None = None) -> Decision | None:
    """The first of ``configs`` that ``state`` places for ``a`` (a PLACED decision), or
    None.  A shape that fails goes into ``failed`` with the placement's reason, and
    into ``tried[job id]`` (shape -> reason) for the job's waiting reason."""
    # offline-inference replicas are independent pods: one node each, placed all or
    # nothing, preferring one node, then one topology domain (Gang); they may share a GPU
    replicas = a.job.kind is JobKind.INFERENCE and placing.replica_pods
    for j, c in enumerate(configs):
        # (an LLM replica is a TP group: c.replicas = num_gpus / replica_gpus pods)
        gang = Gang(pods=c.replicas, share_gpus=True) if replicas and c.replicas > 1 else None
        out = state.place(a.job.id, c, placing.catalog.profile(a.job, c), a.job.slowdown_bound,
                          placing.slowdown, scorer=placing.scorer, gang=gang)
        if out.assignment is not None:
            reason = why or ("priced choice" if (j == 0 and first_is_choice) else "fallback")
            return Decision(a.job.id, Status.PLACED, c, out.assignment, reason=reason,
                            changed=True)
        if failed is not None and not state.job_limited(a.job.id, c):  # job-specific
            failed.append(c, out.reason)
        if tried is not None:
            tried.setdefault(a.job.id, {}).setdefault(c, out.reason)
    return None


def _candidates(fam: ShapeFamily, red: np.ndarray, k: int, floor: float, exclude: set[int],
                failed: FailedShapes) -> list[Configuration]:
    """Configurations to try for one job: its priced choice ``k``, then the others by
    descending reduced value ``red`` that reach ``floor`` and are not in ``exclude``, leaving
    out any shape at least as large as one that already failed this round."""
    order = [k] + [c for c in np.argsort(-red, kind="stable")
                   if c not in exclude and red[c] >= floor]
    cands = [fam.configs[c] for c in order]
    return [c for c in cands if not failed.dominated(c)]


def _why_waiting(job: Job, fam: ShapeFamily, tried: dict[Configuration, str],
                 failed: FailedShapes) -> str:
    """A waiting job's reason: for its requested shape on each model of its family (else its
    first configuration), the placement's words for why it does not fit -- from this round's
    try of that shape, or of a smaller one it dominates (``failed``)."""
    req = job.request
    shapes = [c for c in fam.configs if not c.is_wait]
    asked = [c for c in shapes if c.mig_profile is None and c.num_gpus == req.num_gpus
             and abs(c.gpu_share - req.gpu_share) < 1e-9] or shapes[:1]
    parts = []
    for c in asked:
        why = tried.get(c)
        if why is None:
            f = failed.first_dominated(c)
            why = (failed.reason(f) or f"no room (as {f.name})") if f is not None else \
                "not tried: priced out by jobs of higher utility"
        parts.append(f"{c.name}: {why}")
    return "; ".join(parts) or "no configuration"


# -- 6. record_changes ---------------------------------------------------------------------

def record_changes(decisions: Mapping[str, Decision], now: float,
                   changed_at: dict[str, float]) -> None:
    """Stage 6: ``changed_at[job id] = now`` for every job the round started, moved or
    preempted (``Decision.changed``): stage 1's dwell clock.  Writes ``changed_at`` (the
    policy's :class:`RoundMemory`) and nothing else."""
    for jid, d in decisions.items():
        if d.changed:
            changed_at[jid] = now



def mark_unknown(decisions: dict[str, Decision], state: ClusterState, catalog: JobCatalog,
                 slowdown: SlowdownModel) -> dict[str, str]:
    """Stage 5b (issue 23, "unknown stays safe"): the reason each placed job with no solo
    profile yet (``catalog.unknown``) runs where it does, appended to its decision's reason
    (``decisions`` is updated in place) and returned as ``{job id: reason}``.  Reasons (each
    starts with :data:`UNKNOWN_PREFIX`): its own MIG instance (isolated, needs no profile);
    alone on its GPUs (no co-location passed the prior's worst case, or none was needed); or
    co-located, with the largest predicted slowdown / bound ratio among the residents of its
    GPUs under ``slowdown`` (the placer's model with the worst-case rule,
    :class:`elastico.predictor.prior.UnknownSafe`).  Plain data in, plain data out."""
    out: dict[str, str] = {}
    pred: dict[str, float] | None = None
    for jid, d in decisions.items():
        if d.config is None or not catalog.is_unknown(jid, d.config) or d.assignment is None \
                or d.status not in (Status.PLACED, Status.DEGRADED):
            continue
        gpus = sorted(set(d.assignment.gpus))
        if d.config.mig_profile is not None:
            why = (f"own MIG instance {d.config.mig_profile} (isolated: needs no profile); "
                   "solo profile measured on this run")
        else:
            others = sorted({r for n, gi in gpus for r in state.residents(n, gi) if r != jid})
            if not others:
                why = ("alone on its GPUs until its solo profile is measured (co-located only "
                       "where the contention prior's worst case, busy 1 and DRAM intensity 1, "
                       "keeps every resident within its bound)")
            else:
                if pred is None:
                    pred = state.predicted_slowdowns(slowdown)
                worst = max(pred.get(r, 1.0) / state.slowdown_bound(r) for r in others + [jid])
                why = (f"co-located with {', '.join(others[:3])}"
                       f"{' ...' if len(others) > 3 else ''}: the contention prior's worst case "
                       f"(busy 1, DRAM intensity 1) keeps every resident within its bound "
                       f"(largest slowdown/bound {worst:.3f})")
        out[jid] = UNKNOWN_PREFIX + why
        decisions[jid] = dataclasses.replace(
            d, reason=f"{d.reason}; {out[jid]}" if d.reason else out[jid])
    return out
