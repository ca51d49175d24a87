"""LLM training and fine-tuning jobs: what such a job names, and its shape family.

Who calls it: :mod:`elastico.shapes` (``build_family``, ``requested_configuration``,
``mig_configurations`` and ``fits_on`` hand a job with ``Job.llm_train`` here), the simulator's
LLM jobs files (:mod:`elastico.sim.llm_workload`, ``"kind": "training"``), the utilisation
meter (the job's data-parallel degree) and tests.  Whom it calls: the LLM training model
:mod:`elastico.perf.llm_training` (step time at a cited MFU, memory, plans), the GPU catalogue
:mod:`elastico.hardware`.  Pure: no clock, no I/O.  It mirrors offline LLM inference
(:mod:`elastico.llm_job`, :mod:`elastico.llm_shapes`; docs/model.md 8.) and is documented in
docs/model.md 9.

**What a job names** (:class:`LlmTrainSpec`): the training job of the model
(:class:`elastico.perf.llm_training.LlmTrainingJob`: an LLM of the catalogue or from a Hugging
Face ``config.json``, ``seq_len`` tokens per sequence, ``global_batch`` sequences per optimizer
step, ``tokens`` to train on -- its work --, ``mode`` pre-train or full fine-tune, precision
``bf16``), the ZeRO stage it runs with (None: the smallest that fits) and its activation
recomputation.  Only full-parameter mixed-precision Adam: LoRA and other parameter-efficient
fine-tuning are not modelled (no cited memory / FLOPs rule in the model), and only ``bf16``
(:data:`PRECISIONS`: the MFU figures are BF16 measurements; an FP8 step at a BF16 MFU would be
an invention).

**Shape family.**  A configuration is (GPU model, ``n`` whole GPUs on one node, its plan: TP
degree ``t``, data parallel ``d = n / t``, ZeRO stage, micro-batch), ``n`` in
:data:`GPU_COUNTS` up to the node's GPUs.  The plan is the first that fits
(:func:`elastico.perf.llm_training.plans`: the smallest TP degree, then the smallest ZeRO stage,
then the largest micro-batch whose memory per GPU fits the GPU's); a GPU count without one is
not offered.  As a :class:`~elastico.model.Configuration`: ``num_gpus = n``, share 1, all of
each GPU's memory, ``replica_gpus = t`` (the TP group), name ``A100-80GB x8 @1.00 tp1 dp8
zero1``.

* *Speed*: ``tokens/s = n x peak x MFU / (6 N)`` (docs/model.md 9.), normalized by the
  reference speed (below).  Every configuration carries its :class:`~elastico.model.Provenance`:
  ``speed`` (model ``6NT-at-cited-MFU``: the GPU's MFU with its source) and, on more than one
  GPU, ``scale-out`` (the same model: the MFU per GPU held constant in the GPU count -- the
  figures were measured at 2,048 and 8,192 GPUs, communication included, so a job on one node
  has less of it: conservative there).  The global batch is the job's on every GPU count (the
  plan splits it into ranks, micro-batches and accumulation), so a different GPU count does
  not change what is trained: unlike Gavel's fixed per-GPU batch (``MAX_SCALE_UP`` in
  :mod:`elastico.shapes`), growth is bounded by the node only.
* *No MPS share, no MIG instance*: the model has no cited rule for either (an MFU measured on
  whole GPUs; tensor-parallel peers need peer-to-peer, which MIG instances lack), so whole GPUs
  only.
* *Which GPUs*: those with a cited MFU (:data:`elastico.perf.llm_training.MFU`: A100-80GB,
  A100-40GB, H100 SXM).  Refused, never defaulted: a job whose reference GPU has none
  (InvalidArgument, field ``reference_gpu``, the value and the GPUs that have one); on a cluster
  model without one the family offers nothing (the trace's G2/G3, T4, V100, ...), and a job
  that fits no model of the cluster is :class:`elastico.shapes.FitsNoModel`.

**Progress.**  As offline inference: throughput 1.0 is the requested shape (``gpus`` whole GPUs
of the reference GPU, one node) and ``Job.work`` is ``tokens / reference_tokens_per_s``;
tokens trained = ``Job.done x reference_tokens_per_s``.  A restart (checkpoint / restore) costs
the simulator's ``restart_s`` as every training job's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterable, Mapping

from elastico import hardware
from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Provenance, Request
from elastico.perf import llm_training as LT
from elastico.perf.llm_training import LlmTrainingJob, TrainingPlan

__all__ = [
    "LlmTrainSpec", "LLM_TRAIN_JOB_TYPE_PREFIX", "GPU_COUNTS", "PRECISIONS", "MAX_GPUS",
    "train_gpu_known", "tokens_per_s", "best_plan", "train_config_name", "train_configuration",
    "provenance", "fits_on", "requested_configuration", "mig_configurations", "candidates",
    "llm_train_job", "llm_train_job_type", "data_parallel",
]

#: ``Job.job_type`` of an LLM training job: this prefix and the model's name.  It starts with
#: :data:`elastico.llm_job.LLM_JOB_TYPE_PREFIX` (``"LLM "``), so the placer gives it an LLM
#: job's interference profile (no Gavel job type has it).
LLM_TRAIN_JOB_TYPE_PREFIX = "LLM train "
#: GPU counts of one node a family offers (tensor parallel within a node: 1, 2, 4, 8).
GPU_COUNTS = (1, 2, 4, 8)
#: most GPUs a job may request: one node of 8 (a configuration is one node; pipeline and
#: multi-node parallelism are not modelled)
MAX_GPUS = 8
#: training precisions a job may name: the cited MFU figures are BF16 measurements
PRECISIONS = ("bf16",)
_MODEL = "6NT-at-cited-MFU"


@dataclass(frozen=True)
class LlmTrainSpec:
    """What an LLM training job names (module docstring): ``job`` (model, sequence length,
    global batch, tokens, mode, precision), ``zero`` (the ZeRO stage it runs with; None: the
    smallest that fits), ``recompute`` (:data:`elastico.perf.llm_training.RECOMPUTE`), and
    the reference: ``reference_gpu`` and the requested shape's ``reference_tokens_per_s``
    there (throughput 1.0)."""

    job: LlmTrainingJob
    zero: int | None = None
    recompute: str = "selective"
    reference_gpu: str = ""
    reference_tokens_per_s: float = 0.0

    @property
    def tokens(self) -> float:
        """Tokens to train on (the work)."""
        return float(self.job.tokens or 0.0)


def llm_train_job_type(spec: LlmTrainSpec) -> str:
    """``Job.job_type`` of a job training ``spec``'s model: ``"LLM train <name>"``."""
    return LLM_TRAIN_JOB_TYPE_PREFIX + spec.job.model.name


@lru_cache(maxsize=None)
def train_gpu_known(gpu_model: str) -> bool:
    """Whether ``gpu_model`` is a catalogue GPU with a cited MFU
    (:data:`elastico.perf.llm_training.MFU`); the family offers nothing elsewhere."""
    try:
        return hardware.gpu_spec(gpu_model).name in LT.MFU
    except (InvalidArgument, KeyError, LookupError):
        return False


def _known_gpus() -> str:
    return ", ".join(LT.MFU) + " (and their aliases, e.g. H100-80GB)"


def tokens_per_s(spec: LlmTrainSpec, gpu_model: str, gpus: int) -> float:
    """Tokens/s of ``spec`` on ``gpus`` GPUs of ``gpu_model``: ``gpus x peak x MFU / (6 N)``
    (:func:`elastico.perf.llm_training.step_time_s`).  InvalidArgument (field ``gpu``) for a
    GPU without a cited MFU."""
    j = spec.job
    return j.tokens_per_step / LT.step_time_s(j.model, gpu_model, tokens=j.tokens_per_step,
                                              gpus=gpus, precision=j.precision)


@lru_cache(maxsize=65536)
def best_plan(spec: LlmTrainSpec, gpu_model: str, gpus: int, gpus_per_node: int,
              memory_gib: float) -> TrainingPlan | None:
    """The plan a configuration of ``gpus`` GPUs of ``gpu_model`` (``memory_gib`` each, nodes of
    ``gpus_per_node``) runs: the first fitting one of
    :func:`elastico.perf.llm_training.plans`, None when none fits or the GPU has no cited MFU."""
    if not train_gpu_known(gpu_model) or gpus > gpus_per_node:
        return None
    ps = LT.plans(spec.job, gpu_model, gpus, gpus_per_node=gpus_per_node,
                  recompute=spec.recompute, memory_gib=float(memory_gib), zero=spec.zero)
    return ps[0] if ps and ps[0].fits else None


def train_config_name(gpu_model: str, plan: TrainingPlan) -> str:
    """``"A100-80GB x8 @1.00 tp1 dp8 zero1"``."""
    return f"{gpu_model} x{plan.gpus} @1.00 tp{plan.tp} dp{plan.dp} zero{plan.zero}"


def provenance(spec: LlmTrainSpec, gpu_model: str, gpus: int) -> tuple[Provenance, ...]:
    """Where a configuration's tokens/s comes from (module docstring): ``speed`` and, on more
    than one GPU, ``scale-out``; both the cited model."""
    m = LT.mfu_for(gpu_model)
    peak = LT._peak_tflops(gpu_model, spec.job.precision)
    out = [Provenance("model", _MODEL,
                      f"6 x {spec.job.model.active_params_b:g}e9 FLOPs per token over "
                      f"{peak:g} TFLOP/s ({spec.job.precision} dense peak, GPU catalogue) x "
                      f"MFU {m.value:g} ({m.source})", "speed")]
    if gpus > 1:
        out.append(Provenance("model", _MODEL,
                              f"{gpus} GPUs x the per-GPU rate: the MFU measured at 2,048-8,192 "
                              f"GPUs (communication included) held on {gpus} GPUs of one node",
                              "scale-out"))
    return tuple(out)


def _spec(job: Job) -> LlmTrainSpec:
    spec = job.llm_train
    if spec is None:
        raise InvalidArgument(f"job[{job.id}].llm_train", None, "an LLM training job")
    if not spec.reference_tokens_per_s > 0:
        raise InvalidArgument(f"job[{job.id}].llm_train.reference_tokens_per_s",
                              spec.reference_tokens_per_s,
                              "> 0 (build LLM training jobs with llm_train_job)")
    return spec


def train_configuration(job: Job, gpu_model: str, gpus_per_node: int, gpu_mem_gib: float,
                        gpus: int) -> Configuration | None:
    """The configuration of ``job`` on ``gpus`` whole GPUs of ``gpu_model`` (``gpu_mem_gib``
    each, nodes of ``gpus_per_node``), or None when no plan fits there (module docstring)."""
    from elastico.shapes import _host

    spec = _spec(job)
    plan = best_plan(spec, gpu_model, gpus, gpus_per_node, float(gpu_mem_gib))
    if plan is None:
        return None
    cpu, mem = _host(job, gpus, float(gpus))
    return Configuration(train_config_name(gpu_model, plan), gpu_model, gpus, 1.0,
                         float(gpu_mem_gib), cpu, mem,
                         plan.tokens_per_s / spec.reference_tokens_per_s,
                         replica_gpus=plan.tp, provenance=provenance(spec, gpu_model, gpus))


def _why_not(job: Job, gpu_model: str, gpus_per_node: int, gpu_mem_gib: float) -> str:
    spec = _spec(job)
    n = job.request.num_gpus
    if not train_gpu_known(gpu_model):
        return f"a GPU model with a cited MFU ({_known_gpus()}); {gpu_model} has none"
    if n > gpus_per_node:
        return f"a GPU model with {n} GPUs on one node ({gpu_model} has {gpus_per_node})"
    ps = LT.plans(spec.job, gpu_model, n, gpus_per_node=gpus_per_node, recompute=spec.recompute,
                  memory_gib=float(gpu_mem_gib), zero=spec.zero)
    why = "; ".join(f"tp {p.tp}: {p.reason}" for p in ps) or (
        f"no TP degree divides both {n} GPUs and the model's heads with a data-parallel degree "
        f"dividing the global batch of {spec.job.global_batch}")
    return f"a GPU model where {spec.job.model.name} fits on {n} GPUs ({why})"


def fits_on(job: Job, gpu_model: str, gpu_mem_gib: float, *, whole_gpus: bool = False,
            gpus_per_node: int = MAX_GPUS) -> bool:
    """Whether ``job``'s requested shape (its GPUs, whole) has a fitting plan on
    ``gpu_model`` GPUs of ``gpu_mem_gib`` GiB."""
    spec = _spec(job)
    return best_plan(spec, gpu_model, job.request.num_gpus, max(gpus_per_node,
                                                                 job.request.num_gpus),
                     float(gpu_mem_gib)) is not None


def requested_configuration(job: Job, gpu_model: str, gpu_mem_gib: float, *,
                            whole_gpus: bool = False, gpus_per_node: int = MAX_GPUS
                            ) -> Configuration:
    """The requested shape of ``job`` on ``gpu_model`` (whole GPUs either way).
    InvalidArgument (field ``gpu_model``, with the reason) when no plan fits there."""
    n = job.request.num_gpus
    size = max(gpus_per_node, n)
    c = train_configuration(job, gpu_model, size, gpu_mem_gib, n)
    if c is None:
        raise InvalidArgument("gpu_model", gpu_model, _why_not(job, gpu_model, size, gpu_mem_gib))
    return c


def mig_configurations(job: Job, gpu_model: str, gpu_mem_gib: float) -> list[Configuration]:
    """None: a MIG instance has no cited MFU and no peer-to-peer path (module docstring)."""
    _spec(job)
    return []


def candidates(job: Job, gpu_models: Mapping[str, tuple[int, float]],
               mig_models: Iterable[str] = ()) -> tuple[list[Configuration], list[Configuration]]:
    """(the requested shape on each allowed model, every candidate) of an LLM training job
    (module docstring).  Raises :class:`elastico.shapes.FitsNoModel` when the requested shape
    fits no allowed GPU model of the cluster."""
    from elastico.shapes import FitsNoModel

    spec = _spec(job)
    req = job.request
    allowed = [m for m, (size, mem) in gpu_models.items()
               if (not req.gpu_models or m in req.gpu_models) and req.num_gpus <= size
               and best_plan(spec, m, req.num_gpus, size, float(mem)) is not None]
    if not allowed:
        why = "; ".join(f"{m} ({s} GPUs/node, {g:g} GiB): "
                        + _why_not(job, m, max(s, req.num_gpus), g)
                        for m, (s, g) in gpu_models.items()
                        if not req.gpu_models or m in req.gpu_models)
        raise FitsNoModel(job, f"{spec.job.model.name} training fits no GPU model of the "
                          "cluster: " + (why or "the cluster has none of the allowed models ("
                                         + ", ".join(gpu_models) + ")"))
    requested = [train_configuration(job, m, gpu_models[m][0], gpu_models[m][1], req.num_gpus)
                 for m in allowed]
    cands: list[Configuration] = list(requested)
    if job.reshape:
        for m in allowed:
            size, mem = gpu_models[m]
            for n in GPU_COUNTS:
                if n > size or n == req.num_gpus:
                    continue
                c = train_configuration(job, m, size, mem, n)
                if c is not None:
                    cands.append(c)
    return requested, cands


def data_parallel(config: Configuration) -> int:
    """The data-parallel degree of an LLM training configuration: ``num_gpus / tp``."""
    return max(1, config.num_gpus // max(1, config.replica_gpus))


def _int(field: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgument(field, v, f"an integer in {lo}..{hi}")
    return v


def llm_train_job(job_id: str, train: LlmTrainingJob, *, reference_gpu: str, gpus: int = 8,
                  gpu_models: Iterable[str] = (), zero: int | None = None,
                  recompute: str = "selective", arrival_s: float = 0.0, cpu: float = 8.0,
                  mem_gib: float = 64.0, priority: float = 1.0, slowdown_bound: float = 1.5,
                  reshape: bool = True, reference_memory_gib: float | None = None) -> Job:
    """A ``training`` :class:`~elastico.model.Job` training ``train`` (which must name its
    ``tokens``) on ``gpus`` whole GPUs of one node (module docstring).

    Its reference: ``gpus`` GPUs of ``reference_gpu`` (``reference_memory_gib`` GiB each,
    default the catalogue's) with a fitting plan; ``work`` = tokens / that tokens/s.  Raises
    InvalidArgument naming the field: ``tokens`` not given, a precision other than
    :data:`PRECISIONS`, ``gpus`` outside 1..:data:`MAX_GPUS`, a ZeRO stage or recomputation
    the model does not know, a ``reference_gpu`` without a cited MFU (the allowed ones listed)
    or where no plan fits."""
    if not isinstance(train, LlmTrainingJob):
        raise InvalidArgument("job", type(train).__name__, "an LlmTrainingJob")
    if train.tokens is None:
        raise InvalidArgument("tokens", None, "the tokens to train on (the job's work)")
    if train.precision not in PRECISIONS:
        raise InvalidArgument("precision", train.precision,
                              f"one of {list(PRECISIONS)} (the cited MFU figures are BF16)")
    _int("gpus", gpus, 1, MAX_GPUS)
    if zero is not None:
        _int("zero", zero, 0, 3)
    if recompute not in LT.RECOMPUTE:
        raise InvalidArgument("recompute", recompute, f"one of {list(LT.RECOMPUTE)}")
    if not train_gpu_known(reference_gpu):
        raise InvalidArgument("reference_gpu", reference_gpu,
                              f"a GPU model with a cited MFU: {_known_gpus()}")
    if reference_memory_gib is None:
        reference_memory_gib = hardware.gpu_spec(reference_gpu).memory_gib
    spec = LlmTrainSpec(train, zero, recompute, reference_gpu, 0.0)
    plan = best_plan(spec, reference_gpu, gpus, max(MAX_GPUS, gpus), float(reference_memory_gib))
    req = Request(gpus, 1.0, cpu, mem_gib, frozenset(gpu_models), device_memory=True)
    if plan is None:
        probe = Job(job_id, JobKind.TRAINING, arrival_s, 1.0, req,
                    llm_train=replace(spec, reference_tokens_per_s=1.0))
        raise InvalidArgument("reference_gpu", reference_gpu,
                              _why_not(probe, reference_gpu, MAX_GPUS, reference_memory_gib))
    spec = replace(spec, reference_tokens_per_s=plan.tokens_per_s)
    work = spec.tokens / plan.tokens_per_s
    if not math.isfinite(work):
        raise InvalidArgument("tokens", train.tokens, "a finite number of tokens")
    return Job(id=job_id, kind=JobKind.TRAINING, arrival_s=arrival_s, work=work, request=req,
               job_type=llm_train_job_type(spec), priority=priority,
               slowdown_bound=slowdown_bound, reshape=reshape, llm_train=spec)
