"""``elastico``: Resource Shape Transformation + Elastic Shadow Pricing + interference-aware
placement (DESIGN.md).

One round:

1. *Services first.*  Running ``service`` jobs keep their place; pending ones are placed with
   their requested GPU count, as whole GPUs that nothing else shares (first allowed model
   that fits; a job with ``fixed_share``, every live pod, keeps its share): a service's slowdown bound (1.1) is tighter than the predictor's error, so
   only isolation keeps every service within it.  Where the cluster has MIG-mode GPUs, a
   single-GPU service first tries a MIG instance at least as fast as its requested shape
   (:func:`elastico.shapes.mig_configurations`; hardware isolation, so its bound holds by
   construction), smallest first.  A service's first placement is never changed.  Their resources come off the
   capacity the elastic jobs are priced against.
2. *Shapes.*  Every elastic job (training, offline inference) gets its shape family
   (:func:`elastico.shapes.build_family`, cached per job).
3. *Utility with hysteresis.*  ``u_c`` from the configured utility (``jct`` by default).  For a
   running job every configuration other than its current one is charged the utility it
   would lose while restarting: ``u_cur * restart_s / max(remaining_time_at_cur, restart_s)``
   -- so the solver itself only moves a job when the gain over its remaining time beats the
   restart (hysteresis inside the optimisation, not bolted on after it).  A running job that
   started or changed less than ``dwell_factor x restart_s`` seconds ago is not re-priced at
   all this round: it keeps its GPUs and its demand comes off capacity, like a service's.
   Without that, jobs thrash as short jobs come and go (each move costs a restart).
4. *Pricing.*  :func:`elastico.pricing.solve` picks one configuration per job under the
   aggregate capacity per resource, warm-started from the previous round's prices.
5. *Placement.*  Jobs that keep their configuration keep their GPUs.  A running job whose
   priced configuration changed is released and tried again: its priced
   configuration, then any configuration whose reduced value ``u_c - lambda . r_c`` is at
   least that of staying; if none fits (fragmentation, memory, or a co-resident's slowdown
   bound) it is booked back exactly where it was -- a failed move never costs a restart.  Jobs to
   start are then placed by utility density, falling back by reduced value.
6. *Backfill.*  Waiting jobs then take any configuration that fits the GPUs left free, by
   descending utility, so no GPU idles while a job that could use it waits.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np

from elastico.model import WAIT, Configuration, JobKind, ShapeFamily, capacity_of, resource_space_for
from elastico.predictor import NoInterference
from elastico.pricing import UTILITIES, PricingResult
from elastico.pricing.utilities import charge_switch
from elastico.pricing.utilities import switch_cost as pricing_switch_cost
from elastico.shapes import FitsNoModel

from ..placement import ClusterState, FailedShapes, Gang
from ..round import ActiveJob, Decision, RoundInput, RoundResult, Status
from .common import (JobCatalog, PolicyEnv, is_service, keep_running, place_fixed_shape,
                     round_typical_pods)
from .remaining import RemainingEstimator


class ElasticoPolicy:
    """The full policy; ``rst``, ``esp``, ``iac`` switch one mechanism off each (the ablations
    ``elastico-no-rst``, ``elastico-no-esp``, ``elastico-no-iac``; module docstring).  RST's
    parts switch off one at a time (docs/model.md, "Ablations"): ``growth`` (configurations
    with more GPUs or more GPU compute than the request), ``model_choice`` (configurations on
    GPU models other than the one the job is bound to) and ``mig`` (MIG instances; the
    cluster's MIG-labelled GPUs then stay in normal mode).  ``rst=False`` is all three off
    and no shrinking either: the requested shape only."""

    name = "elastico"
    #: offers MIG instances, so the simulator puts the cluster's MIG-labelled GPUs in MIG mode
    #: (per instance: ``rst``; the class value is what a registered policy name gives)
    uses_mig = True

    def __init__(self, env: PolicyEnv, *, rst: bool = True, esp: bool = True, iac: bool = True,
                 growth: bool = True, model_choice: bool = True, mig: bool = True):
        if not iac:  # the placer believes co-location is free; jobs still run at the truth
            env = dataclasses.replace(env, slowdown=NoInterference())
        self.env = env
        self.esp = esp
        if not rst:
            self.catalog = RequestedShapeCatalog(env)
        elif growth and model_choice and mig:
            self.catalog = JobCatalog(env)
        else:
            self.catalog = PartialRstCatalog(env, growth=growth, model_choice=model_choice,
                                             mig=mig)
        # MIG instances are shapes other than the requested one: only with RST (the
        # simulator puts the cluster's MIG-labelled GPUs in MIG mode only when this is set)
        self.uses_mig = rst and mig
        # with env.mig_pools, MIG-mode GPUs are priced as a pool of their own (model.py): a MIG
        # instance and a whole or MPS-shared GPU of one model then never compete for the same
        # GPUs in the prices (off by default: PolicyEnv.mig_pools says why)
        self.space = resource_space_for(env.nodes, mig=self.uses_mig and env.mig_pools)
        self.capacity = capacity_of(env.nodes, self.space)
        self.utility_fn = UTILITIES[env.utility]
        self.prices: np.ndarray | None = None  # warm start ("dynamic prices")
        # remaining work as a live system can know it (policies/remaining.py): never the
        # job's true remaining work unless env.remaining_estimate is "oracle"
        self.remaining = RemainingEstimator(env.remaining_estimate,
                                            user_estimates=env.user_estimates)
        # per running job: (its configuration, index in its family, demand vector) -- saves
        # re-deriving them every round
        self._cur: dict[str, tuple[Configuration, int, np.ndarray]] = {}
        self._changed_at: dict[str, float] = {}  # job id -> time of its last start or change

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
        self._cur.pop(job_id, None)
        self._changed_at.pop(job_id, None)

    def _current(self, job_id: str, config: Configuration, configs) -> tuple[int, np.ndarray]:
        hit = self._cur.get(job_id)
        if hit is None or hit[0] is not config or (hit[1] < 0 and configs is not None):
            try:
                k = configs.index(config) if configs is not None else -1
            except ValueError:
                k = -1
            hit = (config, k, config.demand(self.space))
            self._cur[job_id] = hit
        return hit[1], hit[2]

    # -- the round -------------------------------------------------------------------------
    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        decisions: dict[str, Decision] = {}
        elastic: list[ActiveJob] = []
        cap = self.capacity.copy()
        if self.env.scorer == "elastico":  # fragmentation term: this round's typical shapes
            state.set_typical_pods(round_typical_pods(inp.jobs))

        # 1. services (the loop only adds bookings, so a shape that found no room stays
        #    without room for the rest of it: place_fixed_shape's memo)
        svc_failed = FailedShapes()
        for a in sorted(inp.jobs, key=lambda a: (a.job.arrival_s, a.job.id)):
            if not is_service(a.job):
                elastic.append(a)
                continue
            if a.running:
                d = keep_running(a, state)
            else:
                # a service gets whole GPUs that nothing shares (as Kubernetes gives it
                # today): the predictor's error (MAE 0.29, docs/predictor.md) is larger than
                # a service's 10 % slowdown allowance, so co-locating one cannot be made safe
                # -- unless the job keeps its requested share (a live pod: it cannot give a GPU back)
                d = self._place_service_mig(a, state, svc_failed, True) if self.uses_mig else None
                if d is None:
                    d = place_fixed_shape(self.catalog, state, a, whole_gpus=not a.job.fixed_share,
                                          scorer=self.env.scorer, failed=svc_failed)
                if d.status is not Status.PLACED and self.uses_mig:
                    d = self._place_service_mig(a, state, svc_failed, False) or d
            decisions[a.job.id] = d
            if d.config is not None and d.status is Status.PLACED:
                cap -= self._current(a.job.id, d.config, None)[1]
        # 1b. dwell: a running job changed less than min_dwell_s ago keeps its configuration
        #     and GPUs this round (priced like a service), so a job cannot thrash between
        #     configurations faster than its restarts pay off
        dwell = self.env.dwell_factor * self.env.restart_s
        movable: list[ActiveJob] = []
        for a in elastic:
            if a.running and inp.now - self._changed_at.get(a.job.id, -math.inf) < dwell:
                decisions[a.job.id] = keep_running(a, state)
                cap -= self._current(a.job.id, a.config, self._configs(a))[1]
            else:
                movable.append(a)
        elastic = movable
        np.maximum(cap, 0.0, out=cap)
        if not elastic:
            return RoundResult(decisions, state)

        tracer = self.env.tracer
        # 2. shapes -> CSR batch
        with tracer.span("shapes.generate", {"shapes.jobs": len(elastic)}) as span:
            fams: list[ShapeFamily] = []
            fitting: list[ActiveJob] = []
            for a in elastic:
                try:
                    fams.append(self.catalog.family(a.job))
                    fitting.append(a)
                except FitsNoModel as e:  # this job only, not the round
                    if a.running:  # (its request changed while it ran) it keeps what it has
                        decisions[a.job.id] = keep_running(a, state)
                        np.maximum(cap - self._current(a.job.id, a.config, None)[1], 0.0, out=cap)
                    else:
                        decisions[a.job.id] = Decision(a.job.id, Status.UNPLACEABLE, None,
                                                       reason=f"{e.value} {e.allowed}")
            elastic = fitting
            if not elastic:
                return RoundResult(decisions, state)
            sizes = np.array([len(f) for f in fams], dtype=np.int64)
            offsets = np.zeros(len(fams) + 1, dtype=np.int64)
            np.cumsum(sizes, out=offsets[1:])
            arrs = [self.catalog.arrays(a.job, self.space) for a in elastic]
            demand = np.concatenate([d for _, d in arrs])
            thr = np.concatenate([x for x, _ in arrs])
            span.set_attribute("shapes.configurations", int(offsets[-1]))
        remaining = np.array([self.remaining(a.job) for a in elastic])
        priority = np.array([a.job.priority for a in elastic])

        # 3. utility + hysteresis
        util = self.utility_fn(thr, offsets, remaining, priority)
        current = np.full(len(elastic), -1, dtype=np.int64)
        u_cur = np.zeros(len(elastic))
        rem_t = np.zeros(len(elastic))
        for i, a in enumerate(elastic):
            if a.running:
                k = self._current(a.job.id, a.config, fams[i].configs)[0]
                if k < 0:
                    continue
                current[i] = k
                u_cur[i] = util[offsets[i] + k]
                rem_t[i] = remaining[i] / max(a.config.throughput, 1e-9)
        switch = pricing_switch_cost(u_cur, rem_t, self.env.restart_s)
        charged = charge_switch(util, offsets, current, switch)  # what the solver prices

        # 4. pricing
        init = self.prices if self.prices is not None and len(self.prices) == len(cap) else None
        with tracer.span("pricing.solve", {"pricing.jobs": len(elastic),
                                           "pricing.resources": len(cap)}) as span:
            if self.esp:
                res = self.env.pricer(util, demand, offsets, cap, initial_prices=init,
                                      max_iterations=self.env.pricing_max_iterations,
                                      gap_tolerance=self.env.pricing_gap_tolerance,
                                      primal_every=self.env.pricing_max_iterations,
                                      current=current, switch_cost=switch)
            else:
                res = greedy_choice(charged, demand, offsets, cap, current)
            span.set_attribute("pricing.iterations", res.iterations)
            span.set_attribute("pricing.gap", res.gap)
            span.set_attribute("pricing.changed", int(res.changed.sum()))
            for name, p in zip(self.space.names, res.prices):
                span.set_attribute(f"pricing.price.{name}", float(p))
        fifo = _fifo_among_equals(elastic, res.choice, util, offsets, remaining, fams)
        if fifo is not None:
            res = dataclasses.replace(res, choice=fifo)
        util = charged
        self.prices = np.asarray(res.prices, dtype=float)
        reduced = util - demand @ self.prices

        with tracer.span("placer.place", {"placer.jobs": len(elastic)}) as span:
            # 5. placement: unchanged jobs keep their GPUs; a changed running job moves only if
            #    a configuration at least as good as staying (by reduced value) fits -- otherwise
            #    it is booked back exactly where it was, so a failed move costs nothing
            moves: list[int] = []
            starts: list[int] = []
            for i, a in enumerate(elastic):
                k = int(res.choice[i])
                if a.running and k == current[i]:
                    decisions[a.job.id] = keep_running(a, state)
                elif a.running:
                    moves.append(i)
                elif k != 0:
                    starts.append(i)
            waiting: list[int] = [i for i, a in enumerate(elastic)
                                  if not a.running and int(res.choice[i]) == 0]
            # A shape that failed to fit this round is not retried, nor any shape at least as
            # large on the same GPU model (a heuristic: slowdown bounds differ between jobs).
            failed = FailedShapes()
            tried: dict[str, dict[Configuration, str]] = {}  # job id -> shape -> why it failed
            for i in moves:
                a = elastic[i]
                lo, hi = offsets[i], offsets[i + 1]
                k, cur = int(res.choice[i]), int(current[i])
                floor = reduced[lo + cur] if cur >= 0 else reduced[lo]
                old = state.assignment(a.job.id)
                old_profile = state.profile(a.job.id)
                state.release(a.job.id)
                if k == 0:  # priced out: preempt
                    d = Decision(a.job.id, Status.WAITING, None, changed=True,
                                 reason="preempted: priced out")
                else:
                    cands = _candidates(fams[i], reduced[lo:hi], k, floor, {k, cur, 0}, failed)
                    d = self._place_first(a, state, cands, cands[:1] == [fams[i].configs[k]],
                                          failed=failed, tried=tried)
                if d is None:  # nothing better fits: stay exactly where it was
                    state.rebook(old, old_profile, a.job.slowdown_bound)
                    d = Decision(a.job.id, Status.PLACED, a.config, old,
                                 reason="kept: no better configuration fits")
                decisions[a.job.id] = d
            starts.sort(key=lambda i: (-util[offsets[i] + res.choice[i]],
                                       elastic[i].job.arrival_s, elastic[i].job.id))
            for i in starts:
                a = elastic[i]
                lo, hi = offsets[i], offsets[i + 1]
                k = int(res.choice[i])
                cands = _candidates(fams[i], reduced[lo:hi], k, reduced[lo], {k, 0}, failed)
                d = self._place_first(a, state, cands, cands[:1] == [fams[i].configs[k]],
                                      failed=failed, tried=tried)
                if d is None:
                    waiting.append(i)
                else:
                    decisions[a.job.id] = d

            # 6. backfill: free GPUs go to waiting jobs, best utility first (equal: the
            #    earlier job first, so of identical jobs a later one never takes the room)
            waiting.sort(key=lambda i: (-util[offsets[i]:offsets[i + 1]].max(),
                                        elastic[i].job.arrival_s, elastic[i].job.id))
            for i in waiting:
                a = elastic[i]
                lo, hi = offsets[i], offsets[i + 1]
                order = [fams[i].configs[c] for c in np.argsort(-util[lo:hi], kind="stable") if c != 0]
                order = [c for c in order if not failed.dominated(c)]
                d = self._place_first(a, state, order, False, why="backfill", failed=failed,
                                      tried=tried)
                decisions[a.job.id] = d if d is not None else Decision(
                    a.job.id, Status.WAITING, None,
                    reason=_why_waiting(a.job, fams[i], tried.get(a.job.id, {}), failed))
            span.set_attribute("placer.placed", sum(
                1 for a in elastic if decisions[a.job.id].status is Status.PLACED))
        for jid, d in decisions.items():
            if d.changed:
                self._changed_at[jid] = inp.now
        return RoundResult(decisions, state, pricing=res, resource_names=self.space.names)

    def _configs(self, a: ActiveJob):
        """The job's family's configurations, or None when its request fits no GPU model
        (it changed while the job ran: :meth:`_current` then derives its demand alone)."""
        try:
            return self.catalog.family(a.job).configs
        except FitsNoModel:
            return None

    def _place_service_mig(self, a: ActiveJob, state: ClusterState, failed: FailedShapes,
                           partial: bool) -> Decision | None:
        """A pending service on a MIG instance of its family (only instances at least as fast
        as its requested shape are in it), smallest instance first; ``partial``: only
        instances smaller than the GPU, else only whole-GPU ones (7g, the fallback when no
        normal-mode GPU is free).  None if none fits."""
        if a.job.request.num_gpus != 1 or not self.catalog.mig_models:
            return None
        try:
            fam = self.catalog.family(a.job)
        except FitsNoModel:  # place_fixed_shape says so
            return None
        configs = sorted((c for c in fam.configs
                          if c.mig_profile is not None and (c.gpu_share < 1.0) == partial),
                         key=lambda c: (c.gpus_total, c.gpu_mem_gib, -c.throughput, c.name))
        for c in configs:
            out = state.place_unless_dominated(a.job.id, c, self.catalog.profile(a.job, c),
                                               a.job.slowdown_bound, failed, self.env.slowdown,
                                               scorer=self.env.scorer)
            if out.assignment is not None:
                return Decision(a.job.id, Status.PLACED, c, out.assignment, changed=True,
                                reason="placed on a MIG instance")
        return None

    def _place_first(self, a: ActiveJob, state: ClusterState, configs: list[Configuration],
                     first_is_choice: bool, why: str = "",
                     failed: FailedShapes | None = None,
                     tried: dict[str, dict[Configuration, str]] | None = None) -> Decision | None:
        """The first of ``configs`` that ``state`` places for ``a`` (a PLACED decision), or
        None.  A shape that fails goes into ``failed`` with the placement's reason, and
        into ``tried[job id]`` (shape -> reason) for the job's waiting reason."""
        # offline-inference replicas are independent pods: one node each, placed all or
        # nothing, preferring one node, then one topology domain (Gang); they may share a GPU
        replicas = a.job.kind is JobKind.INFERENCE and self.env.replica_pods
        for j, c in enumerate(configs):
            # (an LLM replica is a TP group: c.replicas = num_gpus / replica_gpus pods)
            gang = Gang(pods=c.replicas, share_gpus=True) if replicas and c.replicas > 1 else None
            out = state.place(a.job.id, c, self.catalog.profile(a.job, c), a.job.slowdown_bound,
                              self.env.slowdown, scorer=self.env.scorer, gang=gang)
            if out.assignment is not None:
                reason = why or ("priced choice" if (j == 0 and first_is_choice) else "fallback")
                return Decision(a.job.id, Status.PLACED, c, out.assignment, reason=reason,
                                changed=True)
            if failed is not None and not state.mps_limited(a.job.id, c):  # job-specific
                failed.append(c, out.reason)
            if tried is not None:
                tried.setdefault(a.job.id, {}).setdefault(c, out.reason)
        return None


class ElasticoNoRst(ElasticoPolicy):
    """Ablation: no Resource Shape Transformation -- every job's family is ``wait`` plus its
    requested shape (requested GPU count and MPS share) on each allowed GPU model."""

    name = "elastico-no-rst"
    uses_mig = False

    def __init__(self, env: PolicyEnv):
        super().__init__(env, rst=False)


class ElasticoNoGrowth(ElasticoPolicy):
    """Ablation (a part of RST): no configuration gives a job more GPUs or more GPU compute
    than it requested (no scale-out, no replicas beyond the request, no larger share);
    shrinking, other GPU models and MIG instances stay."""

    name = "elastico-no-growth"

    def __init__(self, env: PolicyEnv):
        super().__init__(env, growth=False)


class ElasticoNoModelChoice(ElasticoPolicy):
    """Ablation (a part of RST): a job's configurations are all on one GPU model, drawn per
    job in proportion to the models' GPUs (:meth:`PartialRstCatalog.bound_model`); growth,
    shrinking and MIG instances on that model stay."""

    name = "elastico-no-model-choice"

    def __init__(self, env: PolicyEnv):
        super().__init__(env, model_choice=False)


class ElasticoNoMig(ElasticoPolicy):
    """Ablation (a part of RST): no MIG instances; the cluster's MIG-labelled GPUs stay in
    normal mode (whole or MPS-shared).  Growth, shrinking and model choice stay."""

    name = "elastico-no-mig"
    uses_mig = False

    def __init__(self, env: PolicyEnv):
        super().__init__(env, mig=False)


class ElasticoNoEsp(ElasticoPolicy):
    """Ablation: no Elastic Shadow Pricing -- configurations chosen by :func:`greedy_choice`
    (no prices: reduced value = utility)."""

    name = "elastico-no-esp"

    def __init__(self, env: PolicyEnv):
        super().__init__(env, esp=False)


class ElasticoNoIac(ElasticoPolicy):
    """Ablation: no Interference-Aware Co-location -- the placer's slowdown model is
    :class:`~elastico.predictor.NoInterference` (every co-location predicted free, so no
    bound ever refuses one and the ``elastico`` scorer's interference term is 0)."""

    name = "elastico-no-iac"

    def __init__(self, env: PolicyEnv):
        super().__init__(env, iac=False)


class RequestedShapeCatalog(JobCatalog):
    """A :class:`JobCatalog` whose shape family is ``wait`` + the requested shape (sharing
    pods keep their fraction of a GPU) on every allowed GPU model: RST switched off."""

    def _build(self, job) -> ShapeFamily:
        shapes = self.requested(job, False)
        if not shapes:  # as build_family: the round makes this job unplaceable, alone
            raise FitsNoModel(job, "fits no GPU model of the cluster (requested shape only: "
                                   "elastico-no-rst)")
        return ShapeFamily((WAIT,) + tuple(dict.fromkeys(shapes)))


class PartialRstCatalog(JobCatalog):
    """A :class:`JobCatalog` with parts of RST switched off (:class:`ElasticoPolicy`):
    ``mig=False`` offers no MIG instance (to any job, services included); for elastic jobs
    ``growth=False`` drops every configuration with more GPUs than requested or more GPU
    compute (``num_gpus x gpu_share``) than requested, ``model_choice=False`` every
    configuration not on the job's one bound GPU model (:meth:`bound_model`).  The
    full family is built first and then filtered, so the filtered family is a subset of
    what ``elastico`` offers the same job (the requested shape on the kept model always
    stays)."""

    def __init__(self, env: PolicyEnv, *, growth: bool, model_choice: bool, mig: bool):
        super().__init__(env)
        self.growth, self.model_choice = growth, model_choice
        self._gpus: dict[str, int] = {}  # GPU model -> GPUs in the cluster
        for n in env.nodes:
            self._gpus[n.gpu_model] = self._gpus.get(n.gpu_model, 0) + n.num_gpus
        if not mig:
            self.mig_models = type(self.mig_models)()

    def _build(self, job) -> ShapeFamily:
        fam = super()._build(job)
        if job.kind is JobKind.SERVICE:
            return fam
        req = job.request
        keep = [c for c in fam.configs if not c.is_wait]
        if not self.growth:
            keep = [c for c in keep if c.num_gpus <= req.num_gpus
                    and c.gpus_total <= req.gpus_total + 1e-9]
        if not self.model_choice:
            bound = self.bound_model(job)
            keep = [c for c in keep if c.gpu_model == bound]
        return ShapeFamily((WAIT,) + tuple(keep))

    def bound_model(self, job) -> str | None:
        """The one GPU model a job may use without model choice: among the models its
        requested shape fits (:meth:`requested`, cluster order), drawn in proportion to each
        model's GPUs in the cluster by ``u = crc32(job id) / 2**32`` (deterministic across
        processes) -- a scheduler that does not choose models spreads jobs by capacity."""
        models = [c.gpu_model for c in self.requested(job, False)]
        if not models:
            return None
        total = [self._gpus.get(m, 0) for m in models]
        u = zlib.crc32(job.id.encode()) / 2.0 ** 32 * sum(total)
        for m, g in zip(models, total):
            if u < g:
                return m
            u -= g
        return models[-1]


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


def _fifo_among_equals(elastic: list[ActiveJob], choice: np.ndarray, util: np.ndarray,
                       offsets: np.ndarray, remaining: np.ndarray,
                       fams: list[ShapeFamily]) -> np.ndarray | None:
    """Pricing's ``choice`` [N] with the choices of identical pending jobs (same kind, job
    type, request, shape rule, priority, bound, estimated remaining work ``remaining`` [N]
    and family ``fams`` [N] -- a family may depend on the job's id, e.g.
    ``elastico-no-model-choice``'s: the same family and
    utilities) dealt out again in arrival order, best utility first, so that of two equal
    jobs the earlier never waits while the later is placed (the solver is indifferent between
    them).  None when nothing changes."""
    groups: dict[tuple, list[int]] = {}
    for i, a in enumerate(elastic):
        if not a.running:
            j = a.job
            groups.setdefault((j.kind, j.job_type, j.request, j.reshape, j.priority,
                               j.slowdown_bound, float(remaining[i]), fams[i].configs),
                              []).append(i)
    out = None
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda i: (elastic[i].job.arrival_s, elastic[i].job.id))
        picks = sorted((int(choice[i]) for i in members),
                       key=lambda k: (k == 0, -util[offsets[members[0]] + k]))
        for i, k in zip(members, picks):
            if int(choice[i]) != k:
                if out is None:
                    out = np.array(choice, dtype=np.int64, copy=True)
                out[i] = k
    return out


def _why_waiting(job, fam: ShapeFamily, tried: dict[Configuration, str],
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


def _candidates(fam, red: np.ndarray, k: int, floor: float, exclude: set[int],
                failed: FailedShapes) -> list[Configuration]:
    """Configurations to try for one job: its priced choice ``k``, then the others by
    descending reduced value ``red`` that reach ``floor`` and are not in ``exclude``, leaving
    out any shape at least as large as one that already failed this round."""
    order = [k] + [c for c in np.argsort(-red, kind="stable")
                   if c not in exclude and red[c] >= floor]
    cands = [fam.configs[c] for c in order]
    return [c for c in cands if not failed.dominated(c)]
