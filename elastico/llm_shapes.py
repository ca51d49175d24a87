"""Resource Shape Transformation for offline LLM inference: an LLM job's shape family.

Who calls it: :mod:`elastico.shapes` (``build_family``, ``requested_configuration``,
``mig_configurations`` and ``fits_on`` hand a job with ``Job.llm`` here), the simulator (start-up
cost, whole-GPU speed), ``elastico llm plan`` and the live annotations.  Whom it calls: the LLM
model :mod:`elastico.perf.llm` (memory, tokens/s), :mod:`elastico.llm_job` (the request mix),
the GPU catalogue :mod:`elastico.hardware` and the MIG tables.  Pure: no clock, no I/O.

A configuration is (GPU model, TP degree ``tp``, replicas ``r``, MPS share ``s`` or MIG
profile): ``r`` independent replicas, each on ``tp`` GPUs of one node (a gang of ``r`` pods
across nodes in the simulator), every GPU at share ``s`` (whole: 1) or one MIG instance
(``tp`` = 1: MIG instances have no peer-to-peer path between them).  As a
:class:`~elastico.model.Configuration`: ``num_gpus = tp x r``, ``replica_gpus = tp``.

* **Memory booked per GPU** (what pricing and placement count and what the device plugin
  enforces): a whole GPU all of its memory; an MPS share the request's ``gpu_mem_gib`` when
  the pod named one, else the share's part of the GPU's memory, ``s x M``
  (:func:`elastico.shapes.gpu_memory_gib`'s live rule) -- in whole MiB, rounded down, as the
  MPS pinned device memory limit is written; a MIG instance its memory slices.  The LLM model
  is told that much (``LlmConfig.memory_limit_gib``), so the batch it sizes is the batch that
  fits the booking.
* **Fit**: the model's :func:`~elastico.perf.llm.memory` (weights / tp + workspace within what
  the engine may use, at least one token of KV cache) and every request class's sequence
  fits the KV cache (:func:`elastico.llm_job.mix_seconds` finite).  A configuration that does
  not fit is never offered (:func:`llm_configuration` returns None).
* **Speed**: normalized throughput = the job's tokens/s on the configuration
  (:func:`elastico.llm_job.mix_tokens_per_s`, replicas splitting the requests) over its
  reference tokens/s.
* **Which**: on every allowed GPU model the catalogue can model (:func:`llm_gpu_known`: the
  trace's undisclosed G2/G3 have no figures) where the requested shape fits (its GPUs on one
  node, as every policy's requested shape, and its memory):
  ``tp`` in :data:`TP_DEGREES` (the model refuses degrees that do not divide its heads),
  shares :data:`elastico.shapes.SHARES` and the requested one, and replicas ``r >= 1`` while
  the GPU compute ``tp x r x s`` stays within ``MAX_SCALE_UP`` (2) x the requested compute
  (growth kept as small as training's) and ``r`` does not exceed the job's requests; MIG
  instances on the cluster's MIG-mode models, ``r`` of one profile under the same bound.
  Pruning and the ``max_configs`` cut are :func:`elastico.shapes.build_family`'s.

**Start-up** (:func:`startup_s`): a replica loads its weights before its first token, at the
first start and at every restart: ``weight bytes / B``, ``B = min(load_gbps, tp x host link
per direction)``.  The default ``load_gbps`` is :data:`LOAD_GBPS`, the PCIe 4.0 x4 interface
ceiling of one NVMe drive (PCI-SIG, PCI Express Base Specification 4.0: 16 GT/s per lane,
128b/130b encoding: ``16 x 4 x 128/130 / 8 = 7.877 GB/s``); the host link is the GPU's
(:attr:`elastico.hardware.GpuSpec.pcie_gbps`, bidirectional, halved).  A rule, not a
measurement, and optimistic: it assumes the checkpoint on a local Gen4 NVMe drive read at its
interface rate.  Measured loads are often storage-bound and slower (vLLM maintainers,
vllm-project/vllm#5405: a 144 GB model from a ~200 MB/s file system takes ~2,000 s), so
``elastico simulate --llm-load-gbps`` sets it.  Engine start-up beyond the weights (CUDA graph
capture, memory profiling) is not counted.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Iterable, Mapping

from elastico import hardware
from elastico.errors import InvalidArgument
from elastico.llm_job import LlmJobSpec, mix_tokens_per_s
from elastico.model import Configuration, Job, JobKind, Request, mps_percentage
from elastico.perf import llm as perf_llm
from elastico.perf.llm import LlmConfig

__all__ = [
    "TP_DEGREES", "LOAD_GBPS", "llm_gpu_known", "booked_memory_gib", "requested_llm_config",
    "llm_config_name", "llm_configuration", "requested_configuration", "fits_on",
    "mig_configurations", "candidates", "startup_s", "whole_gpu_throughput", "llm_config_of",
    "activity", "planning_throughput",
]

#: Tensor-parallel degrees offered (within one node; the model refuses those that do not
#: divide the model's attention heads or KV heads).
TP_DEGREES = (1, 2, 4, 8)
#: Weight-loading bandwidth, GB/s: the PCIe 4.0 x4 ceiling of one NVMe drive (module docstring).
LOAD_GBPS = 16.0 * 4 * 128 / 130 / 8
_EPS = 1e-9


@lru_cache(maxsize=None)
def llm_gpu_known(gpu_model: str) -> bool:
    """Whether the GPU catalogue has what the LLM model needs for ``gpu_model``: its memory,
    HBM bandwidth and a 16-bit peak.  The trace's undisclosed G2/G3 (and any name the
    catalogue lacks) have not: no LLM configuration is offered on them."""
    try:
        spec = hardware.gpu_spec(gpu_model)
    except (InvalidArgument, KeyError, LookupError):
        return False
    peaks = getattr(spec, "peak_tflops", {}) or {}
    return bool(spec.memory_gib and spec.hbm_gbps and (peaks.get("fp16") or peaks.get("bf16")))


def _mib_floor(gib: float) -> float:
    return math.floor(gib * 1024 + 1e-6) / 1024


def booked_memory_gib(request: Request, gpu_mem_gib: float, share: float) -> float:
    """GPU memory per GPU an LLM configuration at ``share`` books on GPUs of ``gpu_mem_gib``
    GiB (module docstring): all of it for a whole GPU; the request's ``gpu_mem_gib`` (at most
    the GPU's) or ``share x gpu_mem_gib`` for an MPS share, in whole MiB rounded down."""
    if share >= 1.0 - _EPS:
        return float(gpu_mem_gib)
    want = request.gpu_mem_gib if request.gpu_mem_gib is not None else share * gpu_mem_gib
    return _mib_floor(min(want, gpu_mem_gib))


def requested_llm_config(spec: LlmJobSpec, request: Request, gpu: str, gpu_mem_gib: float, *,
                         whole_gpus: bool = False) -> LlmConfig:
    """The requested shape (``spec.tp``, ``spec.replicas``, ``request.gpu_share``; a whole GPU
    with ``whole_gpus``) on ``gpu`` as an LlmConfig with its booked memory as the limit."""
    share = 1.0 if whole_gpus else request.gpu_share
    mem = booked_memory_gib(request, gpu_mem_gib, share)
    return spec.config(gpu, spec.tp, spec.replicas, mps_share=share if share < 1.0 - _EPS else None,
                       memory_limit_gib=mem)


def llm_config_name(gpu_model: str, num_gpus: int, share: float, tp: int,
                    mig_profile: str | None = None) -> str:
    """``"A100-80GB x4 @0.50 tp2"`` (4 GPUs at 0.5 each, 2 replicas of TP 2);
    ``"A100-40GB x2 mig 3g.20gb"`` (2 replicas, each on one instance)."""
    if mig_profile is not None:
        return f"{gpu_model} x{num_gpus} mig {mig_profile}"
    return f"{gpu_model} x{num_gpus} @{share:.2f} tp{tp}"


def _spec(job: Job) -> LlmJobSpec:
    spec = job.llm
    if spec is None:
        raise InvalidArgument(f"job[{job.id}].llm", None, "an LLM job (Job.llm set)")
    if not spec.reference_tokens_per_s > 0:
        raise InvalidArgument(f"job[{job.id}].llm.reference_tokens_per_s",
                              spec.reference_tokens_per_s,
                              "> 0 (build LLM jobs with elastico.llm_job.llm_job)")
    return spec


def _host(job: Job, num_gpus: int, gpus_total: float) -> tuple[float, float]:
    from elastico.shapes import _host as host

    return host(job, num_gpus, gpus_total)


def _evaluate(job: Job, cfg: LlmConfig) -> float:
    """The job's tokens/s on ``cfg``, 0.0 when it does not fit or the model refuses it."""
    spec = _spec(job)
    try:
        if not perf_llm.memory(spec.model, cfg).fits:
            return 0.0
        return mix_tokens_per_s(spec.model, cfg, spec.work)
    except InvalidArgument:
        return 0.0


def llm_configuration(job: Job, gpu_model: str, gpu_mem_gib: float, tp: int, replicas: int,
                      share: float = 1.0, mig_profile: str | None = None,
                      mig_memory_gib: float | None = None) -> Configuration | None:
    """The :class:`Configuration` of ``replicas`` replicas of TP ``tp`` at ``share`` (or one
    MIG instance of ``mig_profile`` each, with ``mig_memory_gib`` per instance) on
    ``gpu_model`` GPUs of ``gpu_mem_gib`` GiB, or None when it does not fit (module
    docstring).  CPU and host memory scale with the GPU compute as for other jobs."""
    spec = _spec(job)
    if not llm_gpu_known(gpu_model):
        return None
    n = tp * replicas
    if mig_profile is not None:
        mem = float(mig_memory_gib)
        cfg = spec.config(gpu_model, 1, replicas, mig_profile=mig_profile, memory_limit_gib=mem)
    else:
        mem = booked_memory_gib(job.request, gpu_mem_gib, share)
        cfg = spec.config(gpu_model, tp, replicas, mps_share=share if share < 1.0 - _EPS else None,
                          memory_limit_gib=mem)
    tps = _evaluate(job, cfg)
    if tps <= 0:
        return None
    cpu, hmem = _host(job, n, n * share)
    return Configuration(llm_config_name(gpu_model, n, share, tp, mig_profile), gpu_model, n,
                         share, mem, cpu, hmem, tps / spec.reference_tokens_per_s,
                         mig_profile=mig_profile, replica_gpus=tp if mig_profile is None else 1)


def llm_config_of(job: Job, config: Configuration, *, share: float | None = None) -> LlmConfig:
    """The LlmConfig a configuration of ``job`` stands for (``share`` overrides its MPS
    share: 1.0 = the whole GPU with the same memory)."""
    spec = _spec(job)
    s = config.gpu_share if share is None else share
    if config.mig_profile is not None and share is None:
        return spec.config(config.gpu_model, 1, config.replicas, mig_profile=config.mig_profile,
                           memory_limit_gib=config.gpu_mem_gib)
    return spec.config(config.gpu_model, config.replica_gpus, config.replicas,
                       mps_share=s if s < 1.0 - _EPS else None,
                       memory_limit_gib=config.gpu_mem_gib)


def _requested_fits_node(job: Job, gpu_model: str, size: int) -> bool:
    # the requested GPUs on one node, as every policy's requested shape
    # (JobCatalog.requested); larger families spread replicas over nodes
    return job.request.num_gpus <= size and llm_gpu_known(gpu_model)


def requested_configuration(job: Job, gpu_model: str, gpu_mem_gib: float, *,
                            whole_gpus: bool) -> Configuration:
    """The requested shape of ``job`` on ``gpu_model`` (a whole GPU per GPU with
    ``whole_gpus``, what Kubernetes' default device plugin gives).  InvalidArgument when it
    does not fit there (field ``gpu_model``, with the model's reason)."""
    spec = _spec(job)
    share = 1.0 if whole_gpus else job.request.gpu_share
    c = llm_configuration(job, gpu_model, gpu_mem_gib, spec.tp, spec.replicas, share)
    if c is None:
        raise InvalidArgument("gpu_model", gpu_model, _why_not(job, gpu_model, gpu_mem_gib, share))
    return c


def _why_not(job: Job, gpu_model: str, gpu_mem_gib: float, share: float) -> str:
    spec = _spec(job)
    if not llm_gpu_known(gpu_model):
        return f"a GPU model the catalogue has LLM figures for ({gpu_model} has none)"
    cfg = spec.config(gpu_model, spec.tp, spec.replicas,
                      mps_share=share if share < 1.0 - _EPS else None,
                      memory_limit_gib=booked_memory_gib(job.request, gpu_mem_gib, share))
    try:
        m = perf_llm.memory(spec.model, cfg)
    except InvalidArgument as e:
        return f"a configuration the LLM model accepts ({e})"
    why = m.reason or "every request class's sequence must fit the KV cache"
    return (f"a GPU model where {spec.model.name} fits at tp {spec.tp} with "
            f"{cfg.memory_limit_gib:g} GiB per GPU: {why}")


def fits_on(job: Job, gpu_model: str, gpu_mem_gib: float, *, whole_gpus: bool = False) -> bool:
    """Whether ``job``'s requested shape fits ``gpu_model`` GPUs of ``gpu_mem_gib`` GiB."""
    spec = _spec(job)
    share = 1.0 if whole_gpus else job.request.gpu_share
    return llm_configuration(job, gpu_model, gpu_mem_gib, spec.tp, spec.replicas, share) is not None


def _growth_ok(job: Job, compute: float, replicas: int) -> bool:
    from elastico.shapes import MAX_SCALE_UP

    return (compute <= MAX_SCALE_UP * job.request.gpus_total + _EPS
            and replicas <= _spec(job).work.total_requests)


def mig_configurations(job: Job, gpu_model: str, gpu_mem_gib: float) -> list[Configuration]:
    """The MIG configurations of ``job`` on ``gpu_model``: ``r`` replicas of one profile each
    (``r`` up to the growth bound; only the requested replica count for a job that keeps its
    shape, ``job.reshape`` False or a service), each fitting its instance; a service only
    profiles at least as fast as its requested shape on the same model.  [] without a MIG
    profile table."""
    from elastico.mig import MIG_PROFILES

    spec = _spec(job)
    table = MIG_PROFILES.get(gpu_model)
    if table is None or not llm_gpu_known(gpu_model):
        return []
    fixed = job.kind is JobKind.SERVICE or not job.reshape
    if spec.tp != 1 and fixed:
        return []  # a TP group cannot be split over MIG instances
    floor = None
    if job.kind is JobKind.SERVICE:
        req = llm_configuration(job, gpu_model, gpu_mem_gib, spec.tp, spec.replicas,
                                job.request.gpu_share)
        floor = req.throughput if req is not None else math.inf
    out: list[Configuration] = []
    for name, prof in table.items():
        counts = [spec.replicas] if fixed else range(1, 1 + max(1, job.request.num_gpus) * 8)
        for r in counts:
            if not fixed and not _growth_ok(job, r * prof.share, r):
                break
            c = llm_configuration(job, gpu_model, gpu_mem_gib, 1, r, prof.share, mig_profile=name,
                                  mig_memory_gib=gpu_mem_gib * prof.memory_fraction)
            if c is None:
                break  # more replicas of a profile that does not fit do not fit either
            if floor is not None and c.throughput < floor - _EPS:
                continue
            out.append(c)
    return out


def candidates(job: Job, gpu_models: Mapping[str, tuple[int, float]],
               mig_models: Iterable[str]) -> tuple[list[Configuration], list[Configuration]]:
    """(the requested shape on each allowed model, every candidate) of an LLM job (module
    docstring).  Raises :class:`elastico.shapes.FitsNoModel` when the requested shape fits no
    allowed GPU model of the cluster."""
    from elastico.shapes import SHARES, FitsNoModel

    spec = _spec(job)
    req = job.request
    mps_percentage(req.gpu_share, f"job[{job.id}].request.gpu_share")
    allowed = [m for m, (size, mem) in gpu_models.items()
               if (not req.gpu_models or m in req.gpu_models)
               and _requested_fits_node(job, m, size) and fits_on(job, m, mem)]
    if not allowed:
        raise FitsNoModel(job, f"{spec.model.name} (tp {spec.tp}) fits no GPU model of the "
                          "cluster: " + ", ".join(f"{m} ({s} GPUs/node, {g:g} GiB)"
                                                  for m, (s, g) in gpu_models.items()))
    requested = [requested_configuration(job, m, gpu_models[m][1], whole_gpus=False)
                 for m in allowed]
    cands: list[Configuration] = list(requested)
    mig_models = set(mig_models)
    for m in allowed:
        if m in mig_models:
            cands += mig_configurations(job, m, gpu_models[m][1])
    if job.kind is JobKind.SERVICE or not job.reshape:
        return requested, cands
    for m in allowed:
        size, mem = gpu_models[m]
        for tp in TP_DEGREES:
            if tp > size:
                break
            try:
                perf_llm.memory(spec.model, spec.config(m, tp, 1))
            except InvalidArgument:
                continue  # a degree the model refuses (heads, KV heads)
            for s in sorted(set(SHARES) | {req.gpu_share}):
                r = 1
                while _growth_ok(job, tp * r * s, r):
                    c = llm_configuration(job, m, mem, tp, r, s)
                    if c is None:
                        break  # more replicas of what does not fit do not fit either
                    cands.append(c)
                    r += 1
    return requested, cands


def _weight_bytes(job: Job) -> float:
    spec = _spec(job)
    return spec.model.params_b * 1e9 * perf_llm.DTYPE_BYTES[spec.dtype]


def startup_s(job: Job, config: Configuration, load_gbps: float = LOAD_GBPS) -> float:
    """Seconds before a replica of ``job`` in ``config`` produces a token: its weights over
    ``min(load_gbps, tp x the GPU's host link per direction)`` GB/s (module docstring).
    Replicas load at the same time, so this is the job's start-up too.  InvalidArgument for
    a ``load_gbps`` that is not a finite number > 0."""
    if isinstance(load_gbps, bool) or not isinstance(load_gbps, (int, float)) \
            or not (math.isfinite(load_gbps) and load_gbps > 0):
        raise InvalidArgument("load_gbps", load_gbps, "a finite number of GB/s > 0")
    bw = float(load_gbps)
    try:
        link = hardware.gpu_spec(config.gpu_model).pcie_gbps
    except (InvalidArgument, KeyError, LookupError):
        link = None
    if link:
        bw = min(bw, config.replica_gpus * float(link) / 2.0)
    return _weight_bytes(job) / (bw * 1e9)


def whole_gpu_throughput(job: Job, config: Configuration) -> float:
    """Normalized throughput of ``config`` with no MPS cap (time-slicing enforces none: a pod
    alone on its GPU computes at the whole GPU's rate, with the memory it booked)."""
    if config.mig_profile is not None or config.gpu_share >= 1.0 - _EPS:
        return config.throughput
    tps = _evaluate(job, llm_config_of(job, config, share=1.0))
    return tps / _spec(job).reference_tokens_per_s if tps > 0 else config.throughput


def planning_throughput(job: Job, config: Configuration) -> float:
    """Normalized throughput the placer values ``config`` of offline LLM inference ``job`` at
    (docs/model.md 7., "Planning throughput"): ``config.throughput`` (solo) except for an
    MPS-shared configuration (0 < share < 1, no MIG instance), which is valued at the HBM
    bandwidth its share keeps when its GPUs are full (:class:`~elastico.perf.llm.LlmConfig`
    ``hbm_by_share``: bandwidth x share as well as SMs x share).  MPS partitions SMs, not
    bandwidth, so a decode-bound replica alone at share 0.25 reads at the whole GPU's
    bandwidth -- and competes for it with whoever fills the other 0.75.  The pricing plans for
    full GPUs, so it values the share at what it keeps then.  At most ``config.throughput``;
    0.0 when the model refuses the configuration."""
    if config.mig_profile is not None or not 0.0 < config.gpu_share < 1.0 - _EPS:
        return config.throughput
    tps = _evaluate(job, replace(llm_config_of(job, config), hbm_by_share=True))
    return min(config.throughput, tps / _spec(job).reference_tokens_per_s) if tps > 0 else 0.0


def activity(config: Configuration) -> float:
    """Fraction of one GPU's SMs an LLM job keeps busy per GPU of ``config``: its compute
    share (whole: 1; MIG: the instance's compute slices).  ASSUMPTION: an offline engine runs
    kernels back to back (continuous batching over a queue of requests, no idle phases), so
    the SMs it may use are active (DCGM_FI_PROF_SM_ACTIVE counts an SM with a resident warp,
    memory-bound decode included)."""
    return min(1.0, max(0.0, float(config.gpu_share)))


def inflight_tokens(job: Job, config: Configuration) -> float:
    """Tokens an offline LLM job in ``config`` loses when it is evicted: the work of its
    in-flight requests (docs/model.md 8., "Eviction").

    RULE: a finished request's output is written when it completes and is kept; the requests
    in flight are lost with their KV cache and run again from their prompt.  Each replica
    keeps ``B`` sequences in flight (continuous batching, vLLM's scheduler): the most whose
    KV cache fits at once (:func:`elastico.perf.llm.max_batch`) for the job's mean request
    (prompt and output tokens averaged over its requests, rounded), at most the replica's
    share of the requests.  ASSUMPTION: in steady state the sequences in flight are spread
    evenly over their lifetimes, so on average half of each one's tokens are done:
    ``replicas x B x (mean prompt + mean output) / 2``.  0 when not one sequence fits."""
    spec = _spec(job)
    cfg = llm_config_of(job, config)
    replicas = max(1, int(cfg.replicas))
    share = spec.work.split(replicas)
    n = share.total_requests
    inp = max(1, round(sum(c.requests * c.input_tokens for c in share.classes) / n))
    out = max(1, round(sum(c.requests * c.output_tokens for c in share.classes) / n))
    from dataclasses import replace as _replace

    b = min(perf_llm.max_batch(spec.model, _replace(cfg, replicas=1), inp, out), n)
    return replicas * b * (inp + out) / 2.0
