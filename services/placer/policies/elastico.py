"""``elastico``: Resource Shape Transformation + Elastic Shadow Pricing + interference-aware
placement (DESIGN.md), and its ablations.

:class:`ElasticoPolicy` is built once from a :class:`~elastico.placer.policies.common.PolicyEnv`
and called once per round (by :func:`elastico.placer.round.run_round`, from the simulator,
the placer service and the Kubernetes loop alike).  Its ``__call__`` is the pipeline of
:mod:`elastico.placer.policies.pipeline` (where the data flow of one round is drawn), one
named stage a line:

1. *hold* -- services are placed (whole GPUs, or MIG instances) or keep their place; running
   jobs within their dwell time keep theirs; their demand comes off the priced capacity.
2. *shape* -- every other job gets its shape family (RST), batched as CSR arrays.
3. *value* -- the utility of every configuration, with the restart cost charged (hysteresis).
4. *price* -- one configuration per job under the capacity (ESP), warm-started from the
   previous round's prices.
5. *place* -- keep, move, start, then backfill onto GPUs, bounded by predicted slowdowns (IAC).
6. *record_changes* -- the dwell clock of every job started or moved.
7. *lend* (on by default, ``PolicyEnv.mig_lending``) -- an empty node whose home mode is MIG
   lends its GPUs whole while jobs wait that only whole GPUs of its model serve, as many nodes
   as they need, and returns to MIG mode when they are covered without it or MIG demand
   waits; before stage 1 a lent node is kept for those jobs, or drains while a job with no
   booking could use a MIG instance (:mod:`.mig_lending`).

What the policy keeps between rounds is one :class:`~elastico.placer.policies.pipeline.RoundMemory`
(warm-start prices, dwell clock, running configurations) and the catalog's shape families.

The ablations are the same pipeline with one part switched off by a constructor parameter:
``esp`` (stage 4 chooses greedily: ``elastico-no-esp``), ``iac`` (the placer's slowdown
model predicts no interference: ``elastico-no-iac``), ``rst`` (the requested shape only:
``elastico-no-rst``) and RST's parts ``growth``, ``model_choice`` and ``mig``
(``elastico-no-growth``, ``elastico-no-model-choice``, ``elastico-no-mig``: stage 2's
families filtered by :class:`PartialRstCatalog`).
"""

from __future__ import annotations

import dataclasses
import zlib

from elastico.model import WAIT, JobKind, ShapeFamily, capacity_of, mig_gpus_of, resource_space_for
from elastico.predictor import NoInterference
from elastico.pricing import UTILITIES
from elastico.shapes import FitsNoModel

from ..placement import ClusterState
from ..round import RoundInput, RoundResult, Status
from .common import JobCatalog, PolicyEnv, round_typical_pods
from .pipeline import (Placing, PricingSettings, RoundMemory, RunningConfigs, hold, place, price,
                       mark_unknown, record_changes, shape, value)
from .mig_lending import lend_mig_nodes, keep_lent_nodes
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
        # remaining work as a live system can know it (policies/remaining.py): never the
        # job's true remaining work unless env.remaining_estimate is "oracle"
        self.remaining = RemainingEstimator(env.remaining_estimate,
                                            user_estimates=env.user_estimates)
        # IAC with the bound rule (issues 23, 24): a job with no solo profile yet is booked
        # at its worst case, and on a GPU with such a job or with a pair of residents outside
        # the predictor's validated domain every resident's slowdown is checked against the
        # mechanism bound (elastico.predictor.prior.UnknownSafe; a no-op on GPUs whose pairs
        # the learned model covers).  Without IAC the placer believes co-location is free.
        from elastico.predictor.prior import UnknownSafe

        slowdown = UnknownSafe(env.slowdown) if iac else env.slowdown
        #: the simulator starts jobs unknown (catalog.unknown) only for a policy that says so
        self.handles_unknown = iac
        self.placing = Placing(self.catalog, slowdown, env.scorer, env.replica_pods,
                               self.uses_mig)
        self.pricing = PricingSettings(env.pricer if esp else None, env.pricing_max_iterations,
                                       env.pricing_gap_tolerance, self.space.names)
        self.memory = RoundMemory(RunningConfigs(self.space))
        # MIG lending (mig_lending.py): the GPUs whose home mode is MIG, by node (the nodes'
        # labels, as the simulator sets them up for a policy that uses MIG)
        self.mig_home: dict[int, tuple[int, ...]] = {}
        if self.uses_mig and env.mig_lending and not env.mig_pools:
            if env.mig_home is not None:  # the Kubernetes loop: real indices, agents that follow
                self.mig_home = {n: tuple(g) for n, g in env.mig_home.items() if g}
            else:
                for n, g in mig_gpus_of(env.nodes):
                    self.mig_home.setdefault(n, ())
                    self.mig_home[n] += (g,)

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
        self.memory.forget(job_id)

    def _unknown(self, decisions: dict, state: ClusterState) -> dict:
        """The unknown-job rule's reasons (:func:`~.pipeline.mark_unknown`) when any job is
        unknown; ``decisions`` as they are otherwise."""
        if self.catalog.unknown:
            decisions = dict(decisions)
            mark_unknown(decisions, state, self.catalog, self.placing.slowdown)
        return decisions

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        """One round: the stages of :mod:`~elastico.placer.policies.pipeline`, in order."""
        env, mem, tracer = self.env, self.memory, self.env.tracer
        if env.scorer == "elastico":  # fragmentation term: this round's typical shapes
            state.set_typical_pods(round_typical_pods(inp.jobs))
        if self.mig_home:  # stage 7's lent nodes are kept for the jobs they were lent for
            self._keep_lent(inp, state)
        held = hold(inp.jobs, state, self.capacity, self.placing, mem.running, now=inp.now,
                    changed_at=mem.changed_at, dwell_s=env.dwell_factor * env.restart_s)
        if not held.jobs:
            return self._lend(inp, RoundResult(self._unknown(held.decisions, state), state))
        shapes, held = shape(held, state, self.catalog, self.space, mem.running, tracer=tracer)
        if not shapes.jobs:
            return self._lend(inp, RoundResult(self._unknown(held.decisions, state), state))
        values = value(shapes, estimate=self.remaining, utility=self.utility_fn,
                       restart_s=env.restart_s)
        keys = mem.keys.of_all(shapes)  # interned per job: not hashed again every round
        priced = price(shapes, values, held.capacity, mem.prices, self.pricing, tracer=tracer,
                       keys=keys)
        mem.prices = priced.prices
        decisions = {**held.decisions,
                     **place(shapes, values, priced, state, self.placing, tracer=tracer,
                             keys=keys)}
        decisions = self._unknown(decisions, state)
        record_changes(decisions, inp.now, mem.changed_at)
        return self._lend(inp, RoundResult(decisions, state, pricing=priced.result,
                                           resource_names=self.space.names))

    def _keep_lent(self, inp: RoundInput, state: ClusterState) -> None:
        """Keep each lent node for the jobs only whole GPUs of its model serve, or for none
        (it drains) while a job with no booking could use a MIG instance of the model
        (:func:`~.mig_lending.keep_lent_nodes`)."""
        lent = any(not state.is_mig(n, g[0]) for n, g in self.mig_home.items() if g)
        families = self._families(inp.jobs) if lent else {}
        keep_lent_nodes(state, self.mig_home, families, [j for j in families if j not in state])

    def _families(self, jobs) -> dict:
        """Job id -> shape family of each of ``jobs`` (ActiveJobs) that fits some GPU model."""
        out = {}
        for a in jobs:
            try:
                out[a.job.id] = self.catalog.family(a.job)
            except FitsNoModel:
                continue
        return out

    def _lend(self, inp: RoundInput, result: RoundResult) -> RoundResult:
        """Stage 7, *lend*: MIG lending on ``result.state`` (:mod:`.mig_lending`) when this
        policy has home-MIG nodes; the changes go in ``result.mig_switches``."""
        if not self.mig_home:
            return result
        waiting = [a for a in inp.jobs if (d := result.decisions.get(a.job.id)) is not None
                   and d.status is Status.WAITING]
        result.mig_switches = lend_mig_nodes(result.state, self.mig_home,
                                             self._families(waiting).values())
        return result

    def shrink_options(self, job, config) -> list:
        """Smaller configurations for running low-priority ``job`` (now in ``config``) so
        that a higher-priority job may fit (:mod:`~elastico.placer.policies.priority`, step
        4): its family's configurations on the same GPU model with less GPU compute (fewer
        replicas, a smaller MPS share), fastest first."""
        try:
            fam = self.catalog.family(job)
        except FitsNoModel:
            return []
        return sorted((c for c in fam.configs if not c.is_wait and c.throughput > 0
                       and c.gpu_model == config.gpu_model
                       and c.gpus_total < config.gpus_total - 1e-9),
                      key=lambda c: (-c.throughput, c.name))

    def place_shrunk(self, job, config, state: ClusterState, now: float, was: str = ""):
        """Book ``job`` (not booked in ``state``) in ``config``, one of
        :meth:`shrink_options`, where the placer puts it; its Decision (changed: it restarts
        in that configuration), or None -- ``state`` unchanged -- when it finds no room."""
        from ..round import Decision, Status

        out = state.place(job.id, config, self.catalog.profile(job, config), job.slowdown_bound,
                          self.env.slowdown, scorer=self.env.scorer)
        if out.assignment is None:
            return None
        return Decision(job.id, Status.PLACED, config, out.assignment, slowdown=out.slowdown,
                        changed=True, reason=f"shrunk from {was} for a higher-priority job")

    def shrunk(self, job_id: str, now: float) -> None:
        """A shrink of :meth:`place_shrunk` was kept: the job's dwell clock starts ``now``
        (stage 1 keeps it in its new configuration for the dwell time)."""
        self.memory.changed_at[job_id] = now


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
