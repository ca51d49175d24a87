"""What every policy needs: the cluster's GPU models, cached shape families and profiles, and
the placement of fixed-shape (service / requested-shape) jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from elastico.model import mig_models_of
from elastico.model import WAIT, Configuration, Job, JobKind, Node, ResourceSpace, ShapeFamily
from elastico.predictor import JobProfile, SlowdownModel
from elastico.tracing import NOOP, Tracer
from elastico.shapes import (FitsNoModel, build_family, fits_on, memory_need_gib,
                             mig_configurations, requested_configuration)
from elastico.perf.throughput import ThroughputModel
from elastico.llm_job import LLM_JOB_TYPE_PREFIX

from ..placement import ClusterState, FailedShapes
from ..round import ActiveJob, Decision, RoundInput, RoundResult, Status


@dataclass
class PolicyEnv:
    """Everything a policy is built from (plain data and models, no clock, no I/O).

    ``restart_s``: seconds of lost progress when a running job changes configuration or GPUs
    (checkpoint + restore).  ``utility``: name in :data:`elastico.pricing.UTILITIES`.
    ``tracer``: where the round's phase spans go (``shapes.generate``, ``pricing.solve``,
    ``placer.place``; :mod:`elastico.tracing`).
    ``pricer``: what prices a round, with the signature and result of
    :func:`elastico.pricing.solve` (default: that function, in-process); the placer service
    passes :class:`elastico.placer.rpc.remote.RemotePricer` to price through PricingService.
    """

    nodes: Sequence[Node]
    throughput: ThroughputModel
    slowdown: SlowdownModel
    utility: str = "jct"
    restart_s: float = 30.0
    # a job keeps a new configuration for at least dwell_factor x restart_s seconds, which
    # bounds the time lost to restarts at about 1/dwell_factor of a job's run time
    dwell_factor: float = 10.0
    max_configs: int = 16
    # bestfit, not the elastico scorer: FGD's typical-pod measure does not protect the whole
    # free nodes a rare 8-GPU service needs; with inference replicas spread as gangs it left
    # two such services never placed in `elastico simulate` (docs/placement.md, "Scorers")
    scorer: str = "bestfit"
    # per-round pricing budget: warm-started prices converge in a few iterations, and a
    # round that stops early still returns a feasible choice with its certified gap
    pricing_max_iterations: int = 20
    pricing_gap_tolerance: float = 1e-3
    # spans of the round's phases (elastico.tracing; NOOP = no tracing, no cost)
    tracer: Tracer = NOOP
    # offline-inference replicas are pods the driver creates (the simulator), placed as one
    # gang over nodes; False where a job is the pods its user made (the Kubernetes loop):
    # its replicas then stay on one node, as one pod's GPUs
    replica_pods: bool = True
    # the MMKP solver: elastico.pricing.solve's signature and PricingResult (None = solve)
    pricer: Callable[..., Any] | None = None
    # price a model's MIG-mode GPUs as a pool of their own (gpu:<model>:mig, elastico.model)
    # instead of one pool per model.  Off: measured worse on a100h100-512 (avg JCT +7.3 % and
    # +3.8 % on seeds 0 and 1, restarts 57 -> 124 and 63 -> 97, as jobs move between the two
    # pools whenever their prices cross; a100h100-64, seeds 0-4: +1.2 %); docs/pricing.md
    mig_pools: bool = False
    # MIG lending (policies/mig_lending.py): an empty node whose home mode is MIG goes to normal
    # mode while jobs wait that only whole GPUs of its model serve (as many nodes as they need),
    # is kept for them, and comes back when empty and not needed or when MIG demand waits.  On
    # by default: on llm-mix it lowered average JCT (a100h100-512, 5 seeds: 689.0 -> 623.3 s,
    # -65.7 s [-79.7, -51.7]) and kept the 64-GPU sustainable load (3.5, as fixed MIG mode) --
    # docs/model.md 5.  The Kubernetes loop lends only nodes whose node agent follows the
    # bookings' MIG mode (elastico nodeagent --follow-mig-mode; LoopConfig.mig_lending); the
    # placer service only when the caller asks (PolicyOptions.mig_lending: the caller keeps
    # the modes).  Ignored with mig_pools (the pools' capacity follows labels).
    mig_lending: bool = True
    # the GPUs whose home mode is MIG, by node index, that lending may change (None = every
    # node's MIG GPUs by its elastico.io/mig-gpus label: the first k GPUs, the simulator's
    # nodes); the Kubernetes loop passes the real indices of the nodes whose agent follows
    mig_home: Mapping[int, tuple[int, ...]] | None = None
    # what a policy believes a job's remaining work is (policies/remaining.py): "elapsed"
    # (attained service + the trace's duration distribution), "user" (declared work:
    # user_estimates, else Job.work -- the live loop's elastico.io/work annotation) or
    # "oracle" (Job.remaining: the simulator's truth; a sensitivity run only)
    remaining_estimate: str = "elapsed"
    user_estimates: Any = None  # Mapping[str, float] | None: job id -> declared work, seconds
    # ``mps-static``: MPS replicas per GPU, the device plugin's ``sharing.mps.replicas``
    # (policies/mpsstatic.py: DEFAULT_REPLICAS and its source)
    mps_replicas: int = 2
    # priority preemption of offline LLM inference, the same rule for every policy
    # (policies/priority.py): off, or the minimum guaranteed run, seconds, before a running
    # low-priority job may be evicted (priority.MIN_RUN_S and its source)
    preemption: bool = True
    min_run_s: float = 300.0  # priority.MIN_RUN_S

    def __post_init__(self) -> None:
        from .remaining import check_remaining_estimate

        check_remaining_estimate(self.remaining_estimate)
        from .mpsstatic import check_replicas
        from .priority import check_min_run

        check_replicas(self.mps_replicas)
        check_min_run(self.min_run_s)
        if self.pricer is None:
            from elastico.pricing import solve

            self.pricer = solve


#: Most distinct interference profiles a :class:`JobCatalog` keeps (then it starts over).
_PROFILE_CACHE = 100_000


class JobCatalog:
    """Per-job caches that survive across rounds (families depend only on the job and the
    cluster's GPU models, so they are built once per job)."""

    def __init__(self, env: PolicyEnv):
        self.env = env
        models: dict[str, tuple[int, float]] = {}
        for n in env.nodes:
            if n.num_gpus:
                mx, mem = models.get(n.gpu_model, (0, n.gpu_mem_gib))
                # a model's GPU memory: its smallest GPU's (nodes of one model may report a
                # little less or more), so a shape sized from it fits every such GPU
                models[n.gpu_model] = (max(mx, n.num_gpus), min(mem, n.gpu_mem_gib))
        self.gpu_models = models
        # models with GPUs in MIG mode (node labels): their families get MIG configurations
        self.mig_models = mig_models_of(env.nodes)
        self._families: dict[str, ShapeFamily] = {}
        # what each cached job's entries were built from: a live job id may come back with
        # another request or job type (a pod recreated under its name), and must not keep
        # the old one's shapes (e.g. GPU models it may no longer use)
        self._specs: dict[str, tuple] = {}
        self._requested: dict[tuple[str, bool], tuple[Configuration, ...]] = {}
        # requested() tuples by value: jobs with equal requested shapes share one tuple (and
        # its configurations), so a round can recognise a queue of them by identity
        # (FailedShapes.refused_all)
        self._canonical: dict[tuple, tuple[Configuration, ...]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._profiles: dict[tuple, JobProfile] = {}
        # issue 23, "unknown stays safe": ids of jobs with no solo profile yet (their profile
        # is the worst case, elastico.predictor.prior.worst_case_profile), and the measured
        # solo counters of profiled jobs: (busy fraction -- NVML's per-process SM utilisation,
        # which the profile's sm_activity carries as the prior's u, see
        # elastico.predictor.profiles.StoredProfile.job_profile --, DRAM activity).  Both empty = every job
        # is taken as profiled, today's profiles (the simulator's --assume-profiled).
        #
        # A solo profile is known per *slot* (:func:`profile_slot`: GPU model, mechanism, MPS
        # share, MIG profile -- the key of the predictor's ProfileStore less the job): the
        # counters are not portable across GPU models (a job's SM and DRAM activity depend on
        # the GPU's peak FLOP/s and bandwidth, elastico.perf.contention.compute_bound_on /
        # roofline_dram) nor across MPS shares (the activity is p * speed(share),
        # :meth:`base_profile`; a smaller share stretches the kernels).  So a job in
        # :attr:`unknown` is unknown on every slot but those in :attr:`known`; it is profiled
        # when it runs alone there.  ``known[job id]`` may hold :data:`ANY_SLOT` (a predictor
        # that answers per job only: known everywhere, the old behaviour).  ``measured`` holds
        # the simulator's counters per (job id, slot).  No translation across GPU models.
        self.unknown: set[str] = set()
        self.known: dict[str, set] = {}
        self.measured: dict[tuple, tuple[float | None, float | None]] = {}
        # profile_slot per configuration object (a round asks is_unknown of the same few
        # thousand configurations millions of times): id -> (the configuration, its slot);
        # the configuration is kept, so its id cannot be reused while it is cached
        self._slots: dict[int, tuple[Configuration, tuple]] = {}

    def _current_spec(self, job: Job) -> None:
        """Drops the job's cached entries when its kind, job type or request differ from
        what they were built from (everything a family, its arrays and requested shapes
        depend on besides the cluster)."""
        spec = (job.kind, job.job_type, job.request, job.reshape, job.llm, job.llm_train)
        old = self._specs.get(job.id)
        if old != spec:
            if old is not None:
                self.forget(job.id)
            self._specs[job.id] = spec

    def family(self, job: Job) -> ShapeFamily:
        self._current_spec(job)
        fam = self._families.get(job.id)
        if fam is None:
            fam = self._build(job)
            self._families[job.id] = fam
        return fam

    def _build(self, job: Job) -> ShapeFamily:
        if not job.reshape and job.kind is not JobKind.SERVICE:  # (a service's is already)
            return self.requested_family(job)
        return build_family(job, self.gpu_models, self.env.throughput,
                            max_configs=self.env.max_configs, mig_models=self.mig_models)

    def requested_family(self, job: Job) -> ShapeFamily:
        """The family of a job that keeps its requested shape (``job.reshape`` False): wait,
        the requested GPU count and share on every allowed GPU model where it fits
        (:meth:`requested`), and on MIG-mode models the instances that hold it (as many
        instances as requested GPUs, each with at least the requested share of the GPU's
        compute and the job's memory footprint).  Raises FitsNoModel when there is none."""
        req = job.request
        shapes = list(self.requested(job, False))
        for m, (mx, mem) in self.gpu_models.items():
            if m in self.mig_models and (not req.gpu_models or m in req.gpu_models) \
                    and req.num_gpus <= mx:
                shapes += [c for c in mig_configurations(job, m, mem, self.env.throughput)
                           if c.num_gpus == req.num_gpus and c.gpu_share >= req.gpu_share - 1e-9]
        if not shapes:
            raise FitsNoModel(job, "fits no GPU model of the cluster with its requested shape: "
                              + ", ".join(f"{m} ({s} GPUs/node, {g:g} GiB)"
                                          for m, (s, g) in self.gpu_models.items()))
        return ShapeFamily((WAIT,) + tuple(dict.fromkeys(shapes)))

    def arrays(self, job: Job, space: ResourceSpace) -> tuple[np.ndarray, np.ndarray]:
        """(planning throughputs [K], demands [K, R]) of the job's family, cached: what the
        round values and prices the configurations at.  The solo throughput
        (``Configuration.throughput``) but for an offline LLM inference job's MPS-shared
        configurations, valued at the HBM bandwidth their share keeps on a full GPU
        (:func:`elastico.llm_shapes.planning_throughput`, docs/model.md 7.); a job runs at
        its configuration's own throughput (the simulator's truth, and the GPU's)."""
        self._current_spec(job)
        out = self._arrays.get(job.id)
        if out is None:
            fam = self.family(job)
            tput = fam.throughputs()
            if job.llm is not None:
                from elastico.llm_shapes import planning_throughput

                tput = np.array([planning_throughput(job, c) for c in fam.configs])
            out = (tput, fam.demands(space))
            self._arrays[job.id] = out
        return out

    def requested(self, job: Job, whole_gpus: bool) -> tuple[Configuration, ...]:
        """The job's requested shape on every allowed GPU model of the cluster."""
        self._current_spec(job)
        key = (job.id, whole_gpus)
        out = self._requested.get(key)
        if out is None:
            allowed = job.request.gpu_models or frozenset(self.gpu_models)
            # models where the request fits a node: its GPUs, and the GPU memory it needs
            out = tuple(
                requested_configuration(job, m, mem, whole_gpus=whole_gpus,
                                        model=self.env.throughput)
                for m, (mx, mem) in self.gpu_models.items()
                if m in allowed and job.request.num_gpus <= mx
                and fits_on(job, m, mem, whole_gpus=whole_gpus))
            if len(self._canonical) >= _PROFILE_CACHE:
                self._canonical.clear()
            out = self._requested[key] = self._canonical.setdefault(out, out)
        return out

    def is_unknown(self, job_id: str, config: Configuration | None = None) -> bool:
        """True while the job has no solo profile on ``config``'s slot
        (:func:`profile_slot`; with ``config`` None: on any slot at all)."""
        if job_id not in self.unknown:
            return False
        known = self.known.get(job_id)
        if not known:
            return True
        if config is None:
            return False
        return ANY_SLOT not in known and self.slot_of(config) not in known

    def slot_of(self, config: Configuration) -> tuple[str, str, float | None, str | None]:
        """:func:`profile_slot` of ``config``, cached per configuration object
        (configurations are frozen, so an object's slot never changes)."""
        hit = self._slots.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1]
        slot = profile_slot(config)
        if len(self._slots) >= _PROFILE_CACHE:
            self._slots.clear()
        self._slots[id(config)] = (config, slot)
        return slot

    def mark_profiled(self, job_id: str, config: Configuration,
                      counters: tuple[float | None, float | None] | None = None) -> None:
        """The job's solo profile on ``config``'s slot is known (with its measured
        ``counters`` (busy fraction, DRAM activity) when given: the simulator's)."""
        slot = profile_slot(config)
        self.known.setdefault(job_id, set()).add(slot)
        if counters is not None:
            self.measured[(job_id,) + slot] = counters

    def profile(self, job: Job, config: Configuration) -> JobProfile:
        """The job's interference profile with ``config`` (:meth:`base_profile`), at the
        worst case (:func:`elastico.predictor.prior.worst_case_profile`) while the job is
        :attr:`unknown`, and with its measured solo SM / DRAM activity once it has them
        (:attr:`measured`)."""
        base = self.base_profile(job, config)
        if self.is_unknown(job.id, config):
            from elastico.predictor.prior import worst_case_profile

            return worst_case_profile(base)
        m = self.measured.get((job.id,) + self.slot_of(config)) if self.measured else None
        if m is not None:
            import dataclasses

            return dataclasses.replace(base, sm_activity=m[0], dram_activity=m[1])
        return base

    def base_profile(self, job: Job, config: Configuration) -> JobProfile:
        """Interference profile of ``job`` running with ``config``: the share of the GPU's SMs
        it keeps busy, p * speed(share) with p the Amdahl parallel fraction (docs/model.md),
        plus what the predictor reads (docs/predictor.md): the GPU model, the MPS share
        (None for a whole GPU) and the solo steps/s on a whole GPU of that model."""
        s = config.gpu_share if config.gpu_share > 0 else 1.0
        if job.llm is not None or job.llm_train is not None \
                or job.job_type.startswith(LLM_JOB_TYPE_PREFIX):
            # offline LLM inference (also one rebuilt from its booking) and LLM training
            # (elastico.llm_train_job): no Gavel job type
            return self._llm_profile(job, config, s)
        # a profile depends only on these (not on the job's id), and a round asks for the
        # same few thousand of them again and again: built once, shared (profiles are frozen)
        key = (job.job_type, job.kind, s, config.gpu_mem_gib, config.gpu_model)
        out = self._profiles.get(key)
        if out is None:
            tm = self.env.throughput
            activity = tm.parallel_fraction(job.job_type) * tm.share_speed(job.job_type, s)
            out = JobProfile(job_type=job.job_type, kind=job.kind.value,
                             gpu_activity=activity, mem_gib=config.gpu_mem_gib,
                             gpu_model=config.gpu_model, mps_share=s if s < 1.0 else None,
                             solo_tput=tm.solo(job.job_type, config.gpu_model))
            if len(self._profiles) >= _PROFILE_CACHE:
                self._profiles.clear()
            self._profiles[key] = out
        return out

    def _llm_profile(self, job: Job, config: Configuration, s: float) -> JobProfile:
        """An LLM job's profile: its activity is its compute share
        (:func:`elastico.llm_shapes.activity`); no solo steps/s (tokens are not steps).  An
        LLM training job's too (whole GPUs: 1; ASSUMPTION as for an offline engine: a dense
        training step runs matmul kernels over every SM; what the meter reads over time is
        the activity model's, :mod:`elastico.sim.utilisation`)."""
        from elastico.llm_shapes import activity

        key = (job.job_type, job.kind, s, config.gpu_mem_gib, config.gpu_model, "llm")
        out = self._profiles.get(key)
        if out is None:
            out = JobProfile(job_type=job.job_type, kind=job.kind.value,
                             gpu_activity=activity(config), mem_gib=config.gpu_mem_gib,
                             gpu_model=config.gpu_model, mps_share=s if s < 1.0 else None)
            if len(self._profiles) >= _PROFILE_CACHE:
                self._profiles.clear()
            self._profiles[key] = out
        return out

    def forget(self, job_id: str) -> None:
        self.unknown.discard(job_id)
        for slot in self.known.pop(job_id, ()):
            self.measured.pop((job_id,) + slot, None)
        self._specs.pop(job_id, None)
        self._families.pop(job_id, None)
        self._arrays.pop(job_id, None)
        self._requested.pop((job_id, True), None)
        self._requested.pop((job_id, False), None)


#: A known-slot wildcard (:attr:`JobCatalog.known`): a predictor that answers per job only
#: (an older LookupProfiles without per-configuration answers) -- known on every slot.
ANY_SLOT = ("*", "*", None, None)


def profile_slot(config: Configuration) -> tuple[str, str, float | None, str | None]:
    """The slot a solo profile of a job running with ``config`` is known on: (GPU model,
    mechanism, MPS share, MIG profile), the key of the predictor's ProfileStore
    (services.predictor.profiles.StoredProfile.key) less the job key.  Mechanism ``whole``
    (share 1 or 0), ``mps`` (0 < share < 1, rounded to 4 decimals as both sides store it),
    ``mig`` (its MIG profile)."""
    if config.mig_profile is not None:
        return (config.gpu_model, "mig", None, config.mig_profile)
    s = config.gpu_share
    if 0.0 < s < 1.0:
        return (config.gpu_model, "mps", round(float(s), 4), None)
    return (config.gpu_model, "whole", None, None)


def round_typical_pods(jobs):
    """Typical pod shapes of a round's active jobs for the ``elastico`` scorer: each job's
    requested shape (cpu milli-cores, per-GPU milli, GPU count, allowed models), FGD's 0.95
    popularity threshold (:func:`elastico.placer.fragmentation.typical_pods`); None when there
    are no jobs."""
    from ..fragmentation import typical_pods

    if not jobs:
        return None
    reqs = [a.job.request for a in jobs]
    return typical_pods([round(r.cpu * 1000) for r in reqs],
                        [round(r.gpu_share * 1000) if r.num_gpus else 0 for r in reqs],
                        [r.num_gpus for r in reqs], [r.gpu_models for r in reqs])


def keep_running(active: ActiveJob, state: ClusterState) -> Decision:
    """A running job that keeps its configuration and GPUs."""
    a = state.assignment(active.job.id)
    return Decision(active.job.id, Status.PLACED, active.config, a,
                    reason="running")


def place_fixed_shape(catalog: JobCatalog, state: ClusterState, active: ActiveJob,
                      *, whole_gpus: bool, scorer: str,
                      failed: FailedShapes | None = None) -> Decision:
    """Place a job with its requested shape on the first allowed GPU model where it fits.

    Used for ``service`` jobs by every policy and for all jobs by ``exclusive``.  ``failed``:
    the shapes that already failed for lack of room in this round (while the round only adds
    bookings; :meth:`~elastico.placer.placement.ClusterState.place_unless_dominated`), shared
    by the caller's calls in one round -- without it a queue of thousands of waiting pods
    re-scans the cluster for each of them every round.
    """
    job = active.job
    configs = catalog.requested(job, whole_gpus)
    if not configs:
        # requested() also leaves out models whose GPUs lack the memory the job needs
        return Decision(job.id, Status.UNPLACEABLE, None,
                        reason=f"no node of an allowed GPU model {sorted(job.request.gpu_models)} "
                               f"has {job.request.num_gpus} GPUs"
                               f"{_memory_needed(catalog, job, whole_gpus)}")
    failed = FailedShapes() if failed is None else failed
    why = failed.refused_all(configs)  # an earlier job of this round with the same shapes
    if why is not None:
        return Decision(job.id, Status.WAITING, None, reason=why)
    reasons = []
    tried = False
    for c in configs:
        refused = failed.refusal(c)  # what place_unless_dominated says, without a profile
        if refused is not None:
            reasons.append(refused)
            continue
        tried = True
        model = catalog.env.slowdown
        if catalog.unknown:  # the unknown-job rule, for a resident or this job (.prior)
            from elastico.predictor.prior import UnknownSafe

            model = UnknownSafe(model)
        out = state.place_unless_dominated(job.id, c, catalog.profile(job, c),
                                           job.slowdown_bound, failed, model,
                                           scorer=scorer)
        if out.assignment is not None:
            return Decision(job.id, Status.PLACED, c, out.assignment, changed=True,
                            reason="placed with requested shape")
        reasons.append(out.reason)
    why = "; ".join(reasons)
    if not tried:  # every shape refused: the same answer for the same shapes, until one fails
        failed.note_refused_all(configs, why)
    return Decision(job.id, Status.WAITING, None, reason=why)


def _memory_needed(catalog: JobCatalog, job: Job, whole_gpus: bool) -> str:
    """`` with N GiB of GPU memory each (the cluster's A100-40GB have 40 GiB, ...)`` when
    memory is what left the job without a model, else ``""``."""
    allowed = job.request.gpu_models or frozenset(catalog.gpu_models)
    have = {m: mem for m, (mx, mem) in catalog.gpu_models.items()
            if m in allowed and job.request.num_gpus <= mx}
    short = {m: mem for m, mem in have.items() if not fits_on(job, m, mem, whole_gpus=whole_gpus)}
    if not short:
        return ""
    if job.llm is not None or job.llm_train is not None:
        name = job.llm.model.name if job.llm is not None else job.llm_train.job.model.name
        return (f" where {name} fits (not on " + ", ".join(
            f"{m} with {mem:g} GiB" for m, mem in short.items()) + ")")
    need = job.request.gpu_mem_gib if whole_gpus else memory_need_gib(job, min(short.values()))
    return (f" with {need:g} GiB of GPU memory each (the cluster's "
            + ", ".join(f"{m} have {mem:g} GiB" for m, mem in short.items()) + ")")


def place_requested_shapes(catalog: JobCatalog, inp: RoundInput, state: ClusterState, *,
                           whole_gpus: bool, scorer: str, typical_pods: bool = False
                           ) -> RoundResult:
    """A round of the requested-shape baselines (exclusive, time-slicing, FGD): running jobs
    keep their GPUs, then the others in arrival order (ties by job id) get
    :func:`place_fixed_shape`, sharing one list of the shapes that found no room this round
    (the round only adds bookings).  ``typical_pods``: give ``state`` the round's typical pod
    shapes first (:func:`round_typical_pods`, what the ``elastico`` scorer reads)."""
    decisions: dict[str, Decision] = {}
    pending = []
    for a in inp.jobs:
        if a.running:
            decisions[a.job.id] = keep_running(a, state)
        else:
            pending.append(a)
    if typical_pods and pending:
        state.set_typical_pods(round_typical_pods(inp.jobs))
    pending.sort(key=lambda a: (a.job.arrival_s, a.job.id))
    failed = FailedShapes()
    for a in pending:
        decisions[a.job.id] = place_fixed_shape(catalog, state, a, whole_gpus=whole_gpus,
                                                scorer=scorer, failed=failed)
    return RoundResult(decisions, state)


def is_service(job: Job) -> bool:
    return job.kind is JobKind.SERVICE
