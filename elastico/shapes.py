"""Resource Shape Transformation (RST): a job's shape family.

Who calls it: the scheduling round (placer) and the simulator, once per job (families are
immutable; rebuild when the cluster's GPU models change).  It calls
:class:`elastico.perf.throughput.ThroughputModel` for solo throughputs and builds
:class:`elastico.model.Configuration` / :class:`elastico.model.ShapeFamily`.  Pure: no I/O.

Normalized throughput (DESIGN.md, docs/model.md): 1.0 = the job's requested shape
(``request.num_gpus`` GPUs at ``request.gpu_share``) on the reference GPU
:data:`elastico.perf.throughput.REFERENCE_GPU` (V100), so a job given exactly its request on a V100
finishes in its trace duration.  Configuration c on model m:
``x_c = solo(type, m, n_c, s_c) / solo(type, V100, n_req, s_req)`` (training, service) or
``r_c * solo(type, m, 1, s_c) / (n_req * solo(type, V100, 1, s_req))`` (inference replicas,
independent; never more replicas than requested, ``r_c <= n_req``: no measurement says how a
job's throughput grows with replicas it did not ask for, :data:`MAX_REPLICAS_UP`).

No speed-up without a measurement or a cited model behind it: a gang of n GPUs on one node
gets its job type's scale-out (:meth:`ThroughputModel.speedup`): Gavel's measured n-GPU
throughput on the models Gavel measured (at most linear), Pollux's model fitted to Sia's
measured placements elsewhere; job types Gavel did not measure on several GPUs
(:meth:`ThroughputModel.multi_gpu_measured`) keep their requested GPU count.  Every training
and job-type inference configuration carries its :class:`elastico.model.Provenance` per factor
(:meth:`ThroughputModel.provenance`).

Resources of a configuration (units of :mod:`elastico.model`):

* GPU compute ``num_gpus x gpu_share`` of model m;
* GPU memory per GPU (:func:`gpu_memory_gib`), by the request's rule
  (:class:`elastico.model.Request`):

  - a live pod's request (``device_memory``) takes it from the GPU's real memory M (the node
    inventory's, per model the smallest): ``request.gpu_mem_gib`` when the pod names it (up
    to M: memory is not tied to the compute share, and the placer keeps each GPU's booked
    sum within M), else the configuration's share s of it, ``s x M``; a whole GPU books all
    of M (no MPS limit applies to it, so the pod can use all of it).  Models with
    ``gpu_mem_gib`` > M are left out;
  - the trace workload (the default) keeps the simulator's footprint, ``request.gpu_share
    x`` :data:`FOOTPRINT_GIB` on every configuration (ASSUMPTION: memory does not shrink with
    compute share; the trace has no GPU-memory column, 16 GiB is the smallest GPU of the
    trace cluster, so a whole-GPU pod is taken to fill it);
* MPS shares are whole percent (:func:`elastico.model.mps_percentage`): the requested share
  must be one, and :data:`SHARES` are;
* CPU cores and host GiB scale with the GPU compute given, ``request x gpus_total(c) /
  request.gpus_total``, never below ``min(request, floor)`` (floors :data:`CPU_FLOOR_CORES`,
  :data:`MEM_FLOOR_GIB`) and never above ``request x num_gpus(c) / request.num_gpus`` (a
  worker or replica never gets more than the pod asked for per GPU: without the cap a 0.22-GPU
  pod asking 4 cores / 15 GiB would ask 36 cores / 135 GiB at 2 whole GPUs, more than a node
  has per GPU).

Offline LLM inference jobs (``Job.llm``) and LLM training jobs (``Job.llm_train``) have
families of their own, built from their performance models: :mod:`elastico.llm_shapes` and
:mod:`elastico.llm_train_job` (every function here hands such a job there).

MIG configurations (``mig_profile`` set; only on models in ``mig_models`` that have a MIG
profile table, :data:`elastico.mig.MIG_PROFILES`, and a speed): one instance per GPU,
``gpu_share`` = the profile's compute slices / the GPU's, GPU memory = the profile's memory
slices x the GPU's memory / memory slices (:func:`memory_need_gib` must fit), throughput from
:meth:`~elastico.perf.throughput.ThroughputModel.mig`.  MIG instances are hardware-isolated
(NVIDIA MIG user guide: own SMs, L2 slices and memory paths), so a job on one sees no
interference and its speed is its solo MIG speed.  Only single-instance configurations per
job or per replica: the guide lists GPU-to-GPU peer-to-peer (PCIe and NVLink) as unsupported
between MIG instances, so Gavel's multi-GPU speedups (measured with P2P) do not carry over to
a gang of instances.

* training: one instance of each profile the footprint fits;
* inference: r in 1..:data:`MAX_REPLICAS_UP` x requested replicas, each on one instance of one
  profile (fewer replicas than requested: proportionally slower);
* service (single-GPU requests only): an instance whose speed is at least the requested
  shape's on the same GPU model (:func:`requested_configuration`), so the service runs at
  least as fast as it asked and, isolated, never exceeds its slowdown bound.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from elastico.errors import InvalidArgument
from elastico.hardware import GPU_MEMORY_GIB
from elastico.model import WAIT, Configuration, Job, JobKind, Node, ShapeFamily, mps_percentage
from elastico.perf.throughput import REFERENCE_GPU, ThroughputModel
from elastico.trace import TRACE_GPU_MODELS

__all__ = [
    "FitsNoModel",
    "fits_memory",
    "fits_on",
    "gpu_memory_gib",
    "memory_need_gib",
    "pareto_prune",
    "requested_configuration",
    "build_family",
    "candidate_configurations",
    "gpu_models_of",
    "config_name",
    "TRAINING_GPU_COUNTS",
    "SHARES",
    "FOOTPRINT_GIB",
    "CPU_FLOOR_CORES",
    "MEM_FLOOR_GIB",
    "mig_configurations",
    "mig_config_name",
]

#: GPU counts a training gang may use (one node; Gavel measured 1/2/4/8).
TRAINING_GPU_COUNTS = (1, 2, 4, 8)
#: A training gang may grow to this many times its requested GPUs.  Gavel's multi-GPU
#: throughputs were measured with a fixed per-GPU batch, so a larger gang trains with a larger
#: global batch, whose effect on convergence (statistical efficiency; Pollux, OSDI'21) the
#: throughput model does not capture: growth is kept small.
MAX_SCALE_UP = 2
#: An inference job runs at most this many times its requested replicas: 1, no growth.
#: Linear scaling in replicas it did not ask for is measured nowhere (no start-up, sharding
#: or input-pipeline cost known), and the former bound of 4 was picked on the evaluation's
#: own results (issue 19): no speed-up that is not measured.  It may still run fewer
#: replicas than requested (each one a whole job share of the input: proportionally slower).
MAX_REPLICAS_UP = 1
#: Per-GPU MPS compute shares offered (plus the requested share for single-GPU configs);
#: whole percent, as MPS enforces them (:func:`elastico.model.mps_percentage`).
SHARES = (0.25, 0.5, 0.75, 1.0)
#: GPU memory footprint of a whole-GPU request of the trace workload, GiB: the smallest GPU of
#: the trace cluster by the GPU catalogue, 16 (module docstring; never a live pod's: those take
#: the GPU's real memory).
FOOTPRINT_GIB = min(GPU_MEMORY_GIB[m] for m in TRACE_GPU_MODELS)
#: Floors for scaled-down CPU (cores) and host memory (GiB); a configuration never gets less
#: than ``min(request, floor)``.  Engineering choice: one core / 1 GiB keeps a data loader alive.
CPU_FLOOR_CORES = 1.0
MEM_FLOOR_GIB = 1.0

_EPS = 1e-12


def config_name(gpu_model: str, num_gpus: int, gpu_share: float) -> str:
    """Readable name, e.g. ``"V100M16 x2 @0.50"``."""
    return f"{gpu_model} x{num_gpus} @{gpu_share:.2f}"


def mig_config_name(gpu_model: str, count: int, profile: str) -> str:
    """Readable name of a MIG configuration, e.g. ``"A100-40GB x1 mig 3g.20gb"``."""
    return f"{gpu_model} x{count} mig {profile}"


def gpu_models_of(nodes: Iterable[Node]) -> dict[str, tuple[int, float]]:
    """``{model: (max GPUs on one node, GPU memory GiB)}`` for the GPU nodes, first-seen order
    (the ``gpu_models`` argument of :func:`build_family`)."""
    out: dict[str, tuple[int, float]] = {}
    for n in nodes:
        if n.num_gpus:
            g, mem = out.get(n.gpu_model, (0, n.gpu_mem_gib))
            out[n.gpu_model] = (max(g, n.num_gpus), min(mem, n.gpu_mem_gib))
    return out


def _vector(c: Configuration) -> tuple[float, float, float, float]:
    # The configuration's demand restricted to its own model's coordinates of a ResourceSpace:
    # gpu:m, gpumem:m, cpu, mem.
    return (c.gpus_total, c.num_gpus * c.gpu_mem_gib, c.cpu, c.mem_gib)


def pareto_prune(configs: Sequence[Configuration]) -> list[Configuration]:
    """The Pareto frontier of ``configs``, order kept.

    Drops every configuration c for which another uses <= of every resource (per GPU model:
    GPUs, GPU memory, CPU, host memory -- its coordinates of the cluster's ResourceSpace) and
    gives >= throughput, strictly better in one.  Configurations on different GPU models use
    different resources and never dominate each other.  Of exact duplicates (same model,
    resources and throughput) the first is kept.  Wait is always kept (once).  MIG and
    non-MIG configurations never dominate each other either: they run on different GPUs (MIG
    mode is per GPU), so one cannot stand in for the other when only one kind has room.
    O(k^2) per model for k configurations on it; families are small.
    """
    groups: dict[tuple[str | None, bool], list[int]] = {}
    for i, c in enumerate(configs):
        if not c.is_wait:
            groups.setdefault((c.gpu_model, c.mig_profile is not None), []).append(i)
    drop: set[int] = set()
    for idx in groups.values():
        vecs = [(_vector(configs[i]), configs[i].throughput) for i in idx]
        for a, i in enumerate(idx):
            va, xa = vecs[a]
            for b, j in enumerate(idx):
                if a == b:
                    continue
                vb, xb = vecs[b]
                if xb < xa - _EPS or any(y > x + _EPS for x, y in zip(va, vb)):
                    continue  # j is not at least as good as i
                strictly = xb > xa + _EPS or any(y < x - _EPS for x, y in zip(va, vb))
                if strictly or b < a:  # dominated, or an exact duplicate of an earlier one
                    drop.add(i)
                    break
    out: list[Configuration] = []
    seen_wait = False
    for i, c in enumerate(configs):
        if c.is_wait:
            if not seen_wait:
                out.append(c)
                seen_wait = True
        elif i not in drop:
            out.append(c)
    return out


def gpu_memory_gib(job: Job, gpu_mem_gib: float, share: float) -> float:
    """GPU memory per GPU, GiB, that a configuration of ``job`` giving ``share`` (fraction of
    one GPU, MPS or whole) of GPUs with ``gpu_mem_gib`` GiB each books (module docstring):
    live (``request.device_memory``): ``gpu_mem_gib`` for a whole GPU, else
    ``request.gpu_mem_gib`` when set, else ``share x gpu_mem_gib``; trace workload:
    ``request.gpu_mem_gib`` when set, else ``request.gpu_share x`` :data:`FOOTPRINT_GIB`."""
    req = job.request
    if req.device_memory:
        if share >= 1.0 - _EPS:
            return float(gpu_mem_gib)
        return req.gpu_mem_gib if req.gpu_mem_gib is not None else share * gpu_mem_gib
    return req.gpu_mem_gib if req.gpu_mem_gib is not None else req.gpu_share * FOOTPRINT_GIB


def memory_need_gib(job: Job, gpu_mem_gib: float) -> float:
    """GPU memory per GPU, GiB, ``job`` needs on a GPU of ``gpu_mem_gib`` GiB: what its
    requested shape books there (:func:`gpu_memory_gib`), except that a live whole-GPU
    request needs only what it named (``request.gpu_mem_gib``, else nothing beyond the GPU).
    A MIG instance must have at least this much memory."""
    req = job.request
    if req.device_memory and req.gpu_share >= 1.0 - _EPS:
        return req.gpu_mem_gib if req.gpu_mem_gib is not None else float(gpu_mem_gib)
    return gpu_memory_gib(job, gpu_mem_gib, req.gpu_share)


def fits_memory(job: Job, gpu_mem_gib: float, *, whole_gpus: bool = False) -> bool:
    """Whether ``job``'s requested shape fits GPUs of ``gpu_mem_gib`` GiB by memory
    (:func:`memory_need_gib` <= ``gpu_mem_gib``): the condition under which
    :func:`requested_configuration` does not raise.  ``whole_gpus``: the shape bumped to
    whole GPUs, which only a named ``request.gpu_mem_gib`` can outgrow."""
    if whole_gpus:
        need = job.request.gpu_mem_gib
        return need is None or need <= gpu_mem_gib + _EPS
    return memory_need_gib(job, gpu_mem_gib) <= gpu_mem_gib + _EPS


def _host(job: Job, num_gpus: int, gpus_total: float) -> tuple[float, float]:
    """CPU cores and host GiB of a configuration with ``num_gpus`` GPUs (gang members or
    replicas) giving ``gpus_total`` GPUs of compute: the request scaled by compute,
    at least ``min(request, floor)``, at most the request per GPU/replica x num_gpus."""
    req = job.request
    ratio = gpus_total / req.gpus_total
    cap = num_gpus / req.num_gpus
    cpu = max(min(req.cpu * ratio, req.cpu * cap), min(req.cpu, CPU_FLOOR_CORES))
    mem = max(min(req.mem_gib * ratio, req.mem_gib * cap), min(req.mem_gib, MEM_FLOOR_GIB))
    return cpu, mem


def fits_on(job: Job, gpu_model: str, gpu_mem_gib: float, *, whole_gpus: bool = False) -> bool:
    """Whether ``job``'s requested shape fits GPUs of ``gpu_model`` with ``gpu_mem_gib`` GiB:
    :func:`fits_memory` for every job but an offline LLM one (``job.llm``), whose fit the
    LLM memory model decides on that GPU model (:func:`elastico.llm_shapes.fits_on`), and an
    LLM training one (``job.llm_train``), whose fit its plans decide
    (:func:`elastico.llm_train_job.fits_on`)."""
    if job.llm is not None:
        from elastico import llm_shapes

        return llm_shapes.fits_on(job, gpu_model, gpu_mem_gib, whole_gpus=whole_gpus)
    if job.llm_train is not None:
        from elastico import llm_train_job

        return llm_train_job.fits_on(job, gpu_model, gpu_mem_gib, whole_gpus=whole_gpus)
    return fits_memory(job, gpu_mem_gib, whole_gpus=whole_gpus)


class FitsNoModel(InvalidArgument):
    """A job's request fits no GPU model of the cluster (allowed models, GPUs per node, GPU
    memory).  A fact about this job on this cluster, not a malformed input: a scheduling
    round makes the job unplaceable and goes on with the others."""

    def __init__(self, job: Job, why: str):
        req = job.request
        mem = f" with {req.gpu_mem_gib:g} GiB of GPU memory each" if req.gpu_mem_gib else ""
        super().__init__(
            f"job[{job.id}].request",
            f"{req.num_gpus} GPU(s) @{req.gpu_share:g}{mem} on {sorted(req.gpu_models) or 'any'}",
            why)


def _check_job(job: Job, model: ThroughputModel) -> None:
    if job.request.num_gpus < 1:
        raise InvalidArgument(f"job[{job.id}].request.num_gpus", job.request.num_gpus,
                              "must be >= 1: CPU-only jobs have no shape family")
    # every configuration generated is enforceable: the requested share too
    mps_percentage(job.request.gpu_share, f"job[{job.id}].request.gpu_share")
    if job.llm is not None or job.llm_train is not None:
        return  # an LLM job's speed comes from its model, not from a job type
    if job.job_type not in model.job_types():
        raise InvalidArgument(f"job[{job.id}].job_type", job.job_type,
                              "must be one of the throughput model's job types")


def _reference(job: Job, model: ThroughputModel) -> float:
    req = job.request
    if job.kind is JobKind.INFERENCE:
        return req.num_gpus * model.solo(job.job_type, REFERENCE_GPU, 1, req.gpu_share)
    return model.solo(job.job_type, REFERENCE_GPU, req.num_gpus, req.gpu_share)


def requested_configuration(job: Job, gpu_model: str, gpu_mem_gib: float, *,
                            whole_gpus: bool, model: ThroughputModel) -> Configuration:
    """The pod's requested shape on ``gpu_model`` (GPUs with ``gpu_mem_gib`` GiB each).

    ``whole_gpus=True`` is what Kubernetes' default device plugin does: a sharing pod gets one
    whole GPU (share 1.0, all of its memory; its speed is that of the requested share bumped
    to 1.0).  Otherwise the requested share with its GPU memory (:func:`gpu_memory_gib`).
    CPU and host memory as requested.  Throughput normalized (1.0 = requested shape on
    REFERENCE_GPU).  Raises InvalidArgument for CPU-only jobs, a share MPS cannot enforce,
    unknown job types or GPU models, or a job that needs more GPU memory than
    ``gpu_mem_gib`` (:func:`fits_memory`).  An offline LLM job (``job.llm``):
    :func:`elastico.llm_shapes.requested_configuration`.
    """
    _check_job(job, model)
    if job.llm is not None:
        from elastico import llm_shapes

        return llm_shapes.requested_configuration(job, gpu_model, gpu_mem_gib,
                                                  whole_gpus=whole_gpus)
    if job.llm_train is not None:
        from elastico import llm_train_job

        return llm_train_job.requested_configuration(job, gpu_model, gpu_mem_gib,
                                                     whole_gpus=whole_gpus)
    req = job.request
    share = 1.0 if whole_gpus else req.gpu_share
    mem = gpu_mem_gib if whole_gpus else gpu_memory_gib(job, gpu_mem_gib, share)
    if not fits_memory(job, gpu_mem_gib, whole_gpus=whole_gpus):
        need = req.gpu_mem_gib if whole_gpus else memory_need_gib(job, gpu_mem_gib)
        raise InvalidArgument("gpu_mem_gib", gpu_mem_gib,
                              f"must be >= the GPU memory the job needs, {need:g} GiB")
    n = 1 if job.kind is JobKind.INFERENCE else req.num_gpus
    x = (req.num_gpus // n) * model.solo(job.job_type, gpu_model, n, share)
    return Configuration(config_name(gpu_model, req.num_gpus, share), gpu_model, req.num_gpus,
                         share, mem, req.cpu, req.mem_gib, x / _reference(job, model),
                         provenance=model.provenance(job.job_type, gpu_model, n, share))


def mig_configurations(job: Job, gpu_model: str, gpu_mem_gib: float,
                       model: ThroughputModel) -> list[Configuration]:
    """The MIG configurations of ``job`` on ``gpu_model`` GPUs of ``gpu_mem_gib`` GiB (module
    docstring): [] when the model has no MIG profile table or the throughput model no speed
    for it, and for a service that asks for more than one GPU.  Throughput normalized like
    :func:`build_family`'s; a service only gets profiles at least as fast as its requested
    shape on ``gpu_model``.  Order: profile table order, then replicas.  An offline LLM job:
    :func:`elastico.llm_shapes.mig_configurations`."""
    from elastico.mig import MIG_PROFILES as GPU_MIG_PROFILES

    _check_job(job, model)
    if job.llm is not None:
        from elastico import llm_shapes

        return llm_shapes.mig_configurations(job, gpu_model, gpu_mem_gib)
    if job.llm_train is not None:
        from elastico import llm_train_job

        return llm_train_job.mig_configurations(job, gpu_model, gpu_mem_gib)
    table = GPU_MIG_PROFILES.get(gpu_model)
    if table is None or gpu_model not in model.gpu_models():
        return []
    req = job.request
    if job.kind is JobKind.SERVICE and req.num_gpus != 1:
        return []
    if (job.kind is JobKind.TRAINING and req.num_gpus != 1
            and not model.multi_gpu_measured(job.job_type)):
        return []  # one instance would shrink the gang: no measured speed for that
    foot = memory_need_gib(job, gpu_mem_gib)
    ref = _reference(job, model)
    floor = None
    if job.kind is JobKind.SERVICE:
        floor = requested_configuration(job, gpu_model, gpu_mem_gib, whole_gpus=False,
                                        model=model).throughput
    counts = range(1, MAX_REPLICAS_UP * req.num_gpus + 1) if job.kind is JobKind.INFERENCE else (1,)
    out: list[Configuration] = []
    for name, prof in table.items():
        mem = gpu_mem_gib * prof.memory_fraction
        if foot > mem + _EPS:
            continue
        one = model.mig(job.job_type, name, gpu_model) / ref
        if floor is not None and one < floor - _EPS:
            continue
        prov = model.provenance(job.job_type, gpu_model, mig_profile=name)
        for r in counts:
            cpu, hmem = _host(job, r, r * prof.share)
            out.append(Configuration(mig_config_name(gpu_model, r, name), gpu_model, r,
                                     prof.share, mem, cpu, hmem, r * one, mig_profile=name,
                                     provenance=prov))
    return out


def candidate_configurations(job: Job, gpu_models: Mapping[str, tuple[int, float]],
                             model: ThroughputModel, *,
                             mig_models: Iterable[str] = ()) -> list[Configuration]:
    """Every configuration :func:`build_family` chooses from, before Pareto pruning and the
    ``max_configs`` cut: the requested shape on each allowed model first, then MIG
    instances, then the training/inference shapes of :func:`build_family`'s docstring.
    (For bounds over all the shapes a policy could pick, e.g.
    :func:`elastico.sim.ceiling.job_envelope`.)  Raises InvalidArgument like
    :func:`build_family`."""
    return _candidates(job, gpu_models, model, mig_models)[1]


def _candidates(job: Job, gpu_models: Mapping[str, tuple[int, float]], model: ThroughputModel,
                mig_models: Iterable[str]) -> tuple[list[Configuration], list[Configuration]]:
    """(requested shapes, all candidates incl. the requested ones) of ``job``."""
    _check_job(job, model)
    if job.llm is not None:  # offline LLM inference: its own family (elastico.llm_shapes)
        from elastico import llm_shapes

        return llm_shapes.candidates(job, gpu_models, mig_models)
    if job.llm_train is not None:  # LLM training: its own family (elastico.llm_train_job)
        from elastico import llm_train_job

        return llm_train_job.candidates(job, gpu_models, mig_models)
    req = job.request
    allowed = [m for m, (size, mem) in gpu_models.items()
               if (not req.gpu_models or m in req.gpu_models)
               and req.num_gpus <= size and fits_memory(job, mem)]
    if not allowed:
        raise FitsNoModel(
            job, "fits no GPU model of the cluster: " + ", ".join(
                f"{m} ({s} GPUs/node, {g:g} GiB)" for m, (s, g) in gpu_models.items()))
    ref = _reference(job, model)
    requested = [requested_configuration(job, m, gpu_models[m][1], whole_gpus=False, model=model)
                 for m in allowed]
    cands: list[Configuration] = list(requested)
    mig_models = set(mig_models)
    for m in allowed:
        if m in mig_models:
            cands += mig_configurations(job, m, gpu_models[m][1], model)
    if job.kind is not JobKind.SERVICE:
        for m in allowed:
            size = gpu_models[m][0]
            if job.kind is JobKind.TRAINING:
                counts = [n for n in TRAINING_GPU_COUNTS if n <= min(MAX_SCALE_UP * req.num_gpus, size)]
                if not model.multi_gpu_measured(job.job_type):  # no measured scale-out
                    counts = [req.num_gpus] if req.num_gpus <= size else []
            else:
                counts = list(range(1, MAX_REPLICAS_UP * req.num_gpus + 1))
            for n in counts:
                shares = set(SHARES)
                if n == 1 or job.kind is JobKind.INFERENCE:
                    shares.add(req.gpu_share)
                for s in sorted(shares):
                    gang = n if job.kind is JobKind.TRAINING else 1
                    x = (n // gang) * model.solo(job.job_type, m, gang, s)
                    cpu, mem = _host(job, n, n * s)
                    cands.append(Configuration(config_name(m, n, s), m, n, s,
                                               gpu_memory_gib(job, gpu_models[m][1], s), cpu,
                                               mem, x / ref,
                                               provenance=model.provenance(job.job_type, m,
                                                                           gang, s)))
    return requested, cands


def build_family(job: Job, gpu_models: Mapping[str, tuple[int, float]],
                 model: ThroughputModel, *, max_configs: int = 16,
                 mig_models: Iterable[str] = ()) -> ShapeFamily:
    """The shape family of ``job`` on a cluster whose GPU models are ``gpu_models``
    (``{model: (max GPUs on one node, GPU memory GiB)}``, see :func:`gpu_models_of`).

    Only models in ``job.request.gpu_models`` (when non-empty) on which the requested shape
    fits (num_gpus <= the model's node size, :func:`fits_memory`) are used.

    * training: gang of n in {1,2,4,8}, n <= min(2 x requested, node size) (only the
      requested count for job types Gavel did not measure on several GPUs), each gang at
      its measured or modelled n-GPU throughput (:meth:`ThroughputModel.speedup`); per-GPU
      share in {0.25,0.5,0.75,1.0} (+ the requested share when n = 1);
    * inference: r in 1..MAX_REPLICAS_UP (1) x requested independent replicas (no more than
      requested), each one GPU at a share in {0.25,0.5,0.75,1.0} + the requested share;
    * service: the requested shape on each allowed model only;
    * on every allowed model in ``mig_models`` (models with MIG-mode GPUs in the cluster),
      also :func:`mig_configurations`.

    Pruned to the Pareto frontier (:func:`pareto_prune`), then cut to ``max_configs``: wait,
    the requested shape on every model, the highest-throughput configuration per model, then
    the best throughput per GPU (ties: higher throughput, then name).  Result: wait first, then
    by model (order of ``gpu_models``), GPUs, throughput.  Raises InvalidArgument when
    ``max_configs`` < 2 or the requested shape fits no allowed model.
    """
    if isinstance(max_configs, bool) or not isinstance(max_configs, int) or max_configs < 2:
        raise InvalidArgument("max_configs", max_configs, "must be an integer >= 2")
    requested, cands = _candidates(job, gpu_models, model, mig_models)
    allowed = [c.gpu_model for c in requested]
    frontier = [c for c in pareto_prune(cands) if not c.is_wait]
    # Every requested shape survives pruning unless an equal-or-better config dominates it;
    # keep it regardless (the scheduler must always be able to give a job what it asked for).
    keep: dict[str, Configuration] = {c.name: c for c in requested}
    if len(keep) > max_configs - 1:
        keep = dict(sorted(keep.items(), key=lambda kv: (-kv[1].throughput, kv[0]))[:max_configs - 1])
    for m in allowed:
        best = max((c for c in frontier if c.gpu_model == m),
                   key=lambda c: (c.throughput, -c.gpus_total), default=None)
        if best is not None and len(keep) < max_configs - 1:
            keep.setdefault(best.name, best)
    for c in sorted(frontier, key=lambda c: (-c.throughput / c.gpus_total, -c.throughput, c.name)):
        if len(keep) >= max_configs - 1:
            break
        keep.setdefault(c.name, c)
    order = {m: i for i, m in enumerate(gpu_models)}
    body = sorted(keep.values(),
                  key=lambda c: (order[c.gpu_model], c.gpus_total, c.throughput, c.name))
    return ShapeFamily((WAIT, *body))
