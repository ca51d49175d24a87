"""LLM training and fine-tuning jobs: step time from model FLOPs at a stated MFU, memory per GPU
from parameters, optimizer state and activations, and the data/tensor-parallel plans that fit.

Who calls it: the LLM training job family (:mod:`elastico.llm_train_job`: a job's speed,
memory fit and plan in every configuration of its shape family), tests and ``bench``.  Whom it
calls: the model catalogue of
:mod:`elastico.perf.llm` (:class:`~elastico.perf.llm.LlmModel`: parameters, layers, hidden size,
heads), the GPU catalogue :mod:`elastico.hardware` (dense peak FLOP/s per precision, memory);
nothing else.  Pure: no clock, no I/O.

**Step time** (docs/model.md 9. has the worked numbers)::

    t_step = 6 N T / (gpus x peak x MFU)

* ``6 N T``: the model FLOPs of one step over ``T`` tokens -- 2 N per token forward, 4 N
  backward (Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361, 2020,
  section 2.1: ``C ~ 6 N`` per token; Narayanan et al., "Efficient Large-Scale Language Model
  Training on GPU Clusters Using Megatron-LM", SC'21, eq. 3: ``96 B s l h^2 (1 + s/6h +
  V/16lh)`` counts 4 passes with activation recomputation, 3 without, i.e. ``72 B s l h^2`` =
  ``6 x 12 l h^2`` per token, the ``6 N`` rule plus the attention and LM-head terms).  ``N``:
  the parameters a token passes through (:attr:`LlmModel.active_params_b`: all of a dense
  model, the active experts' of an MoE).  The attention-score FLOPs (``12 l s h`` per token)
  are left out, as in the MFU figures below computed from tokens/s by ``6 N``.
* ``peak``: the catalogue's dense peak at the training precision (``bf16`` default);
* ``MFU`` (model-FLOPs utilisation: model FLOPs per second over peak, recomputation not
  credited; PaLM, Chowdhery et al., arXiv:2204.02311, appendix B, defines it): the caller's, or
  the public figure for the GPU (:data:`MFU`), each cited; another GPU without one is refused.
  ASSUMPTION: the figure holds at the job's scale -- it was measured on 2,048 / 8,192 GPUs,
  where communication is part of it; a job on one node has less of that, so this is
  conservative for small jobs.

**Memory per GPU** (:func:`memory`), bytes for ``Psi`` parameters, tensor parallel ``t``, data
parallel ``d``, ZeRO stage ``z``:

* model states of mixed-precision Adam: 16 bytes per parameter -- fp16/bf16 parameters (2) and
  gradients (2), fp32 master parameters, momentum and variance (4 + 4 + 4) (Rajbhandari et
  al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC'20, section
  3.1: ``(2 + 2 + K) Psi`` with ``K = 12``), over ``t`` ranks; ZeRO partitions the optimizer
  states (``z >= 1``), gradients (``z >= 2``) and parameters (``z = 3``) over the ``d`` ranks
  (same paper, Figure 1);
* activations of one micro-batch of ``b`` sequences of ``s`` tokens, ``L`` layers, hidden ``h``,
  ``a`` heads, 16-bit (Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", MLSys 2023, eqs. 1-5 and Table 2): per layer ``s b h (34 + 5 a s / h)``
  without recomputation, ``34 s b h`` with selective recomputation (the attention scores
  recomputed; FlashAttention stores none either), ``2 s b h`` with full recomputation (the
  layer's input only); with tensor parallelism and sequence parallelism all of it divided by
  ``t`` (without sequence parallelism ``10 s b h`` of the first case stays whole); pipeline
  parallelism is not modelled; the embedding and loss terms are left out (small beside L
  layers);
* a runtime reserve per GPU (CUDA context, NCCL and cuBLAS workspaces), the LLM inference
  model's :data:`elastico.perf.llm.RUNTIME_RESERVE_GIB` (an ASSUMPTION there).

**Plans** (:func:`plans`): on ``gpus`` GPUs of one model, every tensor-parallel degree ``t`` in
{1, 2, 4, 8} that divides the heads and the KV heads and fits a node, data parallel ``d =
gpus / t``, the smallest ZeRO stage and then the largest micro-batch (a power of two dividing
the per-rank batch; gradient accumulation makes up the rest) that fit the GPU's memory; the
step time does not depend on the plan (the MFU is per GPU), the memory does.

Named jobs (:data:`TRAINING_JOBS`) carry their hyper-parameters' sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from elastico import hardware
from elastico.errors import InvalidArgument
from elastico.perf.llm import LlmModel, RUNTIME_RESERVE_GIB, llm_model

__all__ = [
    "Mfu", "MFU", "MFU_FIGURES", "LlmTrainingJob", "TRAINING_JOBS", "training_job",
    "TrainingMemory",
    "TrainingPlan", "RECOMPUTE", "PRECISIONS", "model_flops_per_token", "step_flops", "mfu_for",
    "step_time_s", "memory", "plans", "BYTES_PER_PARAM_ADAM",
]

GIB = float(1 << 30)
#: mixed-precision Adam's bytes per parameter (ZeRO paper, section 3.1): 2 + 2 + 12
BYTES_PER_PARAM_ADAM = 16.0
#: activation recomputation choices (Korthikanti et al. 2022)
RECOMPUTE = ("none", "selective", "full")
#: training precisions (the catalogue's peak key of the matmuls)
PRECISIONS = ("bf16", "fp16", "fp8")
TP_DEGREES = (1, 2, 4, 8)


# ------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------

def _int(field: str, v: object, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise InvalidArgument(field, v, f"an integer >= {lo}")
    return v


def _positive(field: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise InvalidArgument(field, v, "a finite number > 0")
    return float(v)


@dataclass(frozen=True)
class Mfu:
    """A model-FLOPs utilisation, the GPU model it was measured on and where."""

    value: float
    gpu: str
    source: str


#: Public MFU figures (dense BF16 training of a decoder LLM), one per GPU model.
MFU_FIGURES: tuple[Mfu, ...] = (
    # 6 x 65.2e9 x 380 / 312e12 = 0.4765
    Mfu(0.4765, "A100-80GB",
        "LLaMA-65B: 'around 380 tokens/sec/GPU on 2048 A100 GPU with 80GB of RAM' (Touvron et "
        "al., 'LLaMA: Open and Efficient Foundation Language Models', arXiv:2302.13971, 2023, "
        "section 2.4; 65.2B parameters, Table 2) -> 6 x 65.2e9 x 380 / 312e12 (the A100's BF16 "
        "dense peak)"),
    Mfu(0.4765, "A100-40GB",
        "the A100-80GB figure (LLaMA-65B); ASSUMPTION: the same GA100 SXM4 silicon and peak, "
        "only the memory differs"),
    Mfu(0.43, "H100-SXM",
        "Llama 3 405B pre-training on 8,192 H100 SXM GPUs (TP 8, PP 16, DP 64, 430 TFLOP/s per "
        "GPU): BF16 MFU 43 % (Dubey et al., 'The Llama 3 Herd of Models', arXiv:2407.21783, "
        "2024, Table 4; 38-41 % on 16,384 GPUs)"),
)
#: :data:`MFU_FIGURES` by GPU model (the catalogue's name)
MFU: Mapping[str, Mfu] = MappingProxyType({m.gpu: m for m in MFU_FIGURES})


@dataclass(frozen=True)
class LlmTrainingJob:
    """An LLM training or fine-tuning job: ``model`` (a catalogue name or an
    :class:`LlmModel`), ``seq_len`` tokens per sequence, ``global_batch`` sequences per
    optimizer step, ``tokens`` to train on (the work; None: not given), ``mode``
    (``"pretrain"`` or ``"finetune"``: both full-parameter training with Adam -- LoRA is not
    modelled), ``precision`` (:data:`PRECISIONS`), ``source`` of the hyper-parameters."""

    name: str
    model: LlmModel
    seq_len: int
    global_batch: int
    tokens: float | None = None
    mode: str = "finetune"
    precision: str = "bf16"
    source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.model, str):
            object.__setattr__(self, "model", llm_model(self.model))
        if not isinstance(self.model, LlmModel):
            raise InvalidArgument("job.model", self.model, "a catalogue model name or an LlmModel")
        _int("job.seq_len", self.seq_len)
        _int("job.global_batch", self.global_batch)
        if self.tokens is not None:
            _positive("job.tokens", self.tokens)
        if self.mode not in ("pretrain", "finetune"):
            raise InvalidArgument("job.mode", self.mode, "'pretrain' or 'finetune'")
        if self.precision not in PRECISIONS:
            raise InvalidArgument("job.precision", self.precision, f"one of {list(PRECISIONS)}")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


_LLAMA2 = ("Touvron et al., 'Llama 2: Open Foundation and Fine-Tuned Chat Models', "
           "arXiv:2307.09288, 2023")
#: Named jobs; each hyper-parameter from its paper.
TRAINING_JOBS: Mapping[str, LlmTrainingJob] = MappingProxyType({j.name: j for j in (
    LlmTrainingJob("LLaMA-7B-pretrain", "LLaMA-7B", 2048, 2048, 1.0e12, "pretrain",
                   source="LLaMA (arXiv:2302.13971) Table 2: 7B, batch 4M tokens, 1.0T tokens; "
                          "context 2,048 (section 2.2)"),
    LlmTrainingJob("Llama-2-7B-pretrain", "Llama-2-7B", 4096, 1024, 2.0e12, "pretrain",
                   source=_LLAMA2 + ", section 2.2 and Table 1: context 4k, global batch 4M "
                                    "tokens, 2.0T tokens"),
    *(LlmTrainingJob(f"Llama-2-{size}-sft", f"Llama-2-{size}", 4096, 64, None, "finetune",
                     source=_LLAMA2 + ", section 3.1: SFT with 'a batch size of 64 and "
                                      "sequence length of 4096 tokens'")
      for size in ("7B", "13B", "70B")),
)})


def training_job(name: str) -> LlmTrainingJob:
    """The named job of :data:`TRAINING_JOBS`."""
    if name not in TRAINING_JOBS:
        raise InvalidArgument("job", name, f"one of {list(TRAINING_JOBS)}")
    return TRAINING_JOBS[name]


def _peak_tflops(gpu: str, precision: str) -> float:
    if precision not in PRECISIONS:
        raise InvalidArgument("precision", precision, f"one of {list(PRECISIONS)}")
    spec = hardware.gpu_spec(gpu)
    peak = spec.peak_tflops.get(precision)
    if peak is None:
        have = sorted(k for k in spec.peak_tflops if k in PRECISIONS)
        raise InvalidArgument("precision", precision,
                              f"one the catalogue lists for {spec.name}: {have}")
    return peak


# ------------------------------------------------------------------------------------------
# time
# ------------------------------------------------------------------------------------------

def model_flops_per_token(model: LlmModel) -> float:
    """``6 N``: model FLOPs of one training token (forward 2 N + backward 4 N)."""
    return 6.0 * model.active_params_b * 1e9


def step_flops(model: LlmModel, tokens: int) -> float:
    """``6 N T``: model FLOPs of a step over ``tokens`` tokens."""
    return model_flops_per_token(model) * _int("tokens", tokens)


def mfu_for(gpu: str, mfu: float | None = None) -> Mfu:
    """``mfu`` when given (a fraction in (0, 1]), else the cited figure for ``gpu``
    (:data:`MFU`); a GPU without one is refused, naming the ones that have one."""
    if mfu is not None:
        if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not (0 < mfu <= 1):
            raise InvalidArgument("mfu", mfu, "a fraction in (0, 1]")
        return Mfu(float(mfu), hardware.gpu_spec(gpu).name, "given")
    name = hardware.gpu_spec(gpu).name
    if name not in MFU:
        raise InvalidArgument("gpu", gpu, "a GPU with a published MFU (" + ", ".join(MFU)
                              + "), or give mfu explicitly")
    return MFU[name]


def step_time_s(model: LlmModel, gpu: str, *, tokens: int, gpus: int = 1,
                precision: str = "bf16", mfu: float | None = None) -> float:
    """Seconds of one optimizer step over ``tokens`` tokens on ``gpus`` GPUs of ``gpu``:
    ``6 N T / (gpus x peak x MFU)`` (module docstring)."""
    _int("gpus", gpus)
    m = mfu_for(gpu, mfu).value
    peak = _peak_tflops(gpu, precision) * 1e12
    return step_flops(model, tokens) / (gpus * peak * m)


# ------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingMemory:
    """Memory per GPU, GiB: ``params``, ``grads``, ``optimizer`` (the model states, after TP
    and ZeRO), ``activations`` (one micro-batch), ``reserve`` (runtime), ``total``."""

    params: float
    grads: float
    optimizer: float
    activations: float
    reserve: float

    @property
    def model_states(self) -> float:
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.reserve


def _check_tp(model: LlmModel, tp: int) -> None:
    _int("tp", tp)
    if model.heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
        raise InvalidArgument("tp", tp, f"a divisor of the model's heads={model.heads} "
                                        f"(and of kv_heads={model.kv_heads} or a multiple of it)")


def memory(model: LlmModel, *, seq_len: int, micro_batch: int = 1, tp: int = 1, dp: int = 1,
           zero: int = 0, recompute: str = "selective",
           sequence_parallel: bool = True) -> TrainingMemory:
    """Memory per GPU of full-parameter mixed-precision Adam training (module docstring)."""
    _int("seq_len", seq_len)
    _int("micro_batch", micro_batch)
    _check_tp(model, tp)
    _int("dp", dp)
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise InvalidArgument("zero", zero, "a ZeRO stage: 0, 1, 2 or 3")
    if recompute not in RECOMPUTE:
        raise InvalidArgument("recompute", recompute, f"one of {list(RECOMPUTE)}")
    if not isinstance(sequence_parallel, bool):
        raise InvalidArgument("sequence_parallel", sequence_parallel, "true or false")
    psi = model.params_b * 1e9 / tp  # every parameter is stored, active or not
    params = 2 * psi / (dp if zero >= 3 else 1)
    grads = 2 * psi / (dp if zero >= 2 else 1)
    optim = 12 * psi / (dp if zero >= 1 else 1)
    s, b, h, a = seq_len, micro_batch, model.hidden, model.heads
    sbh = float(s) * b * h
    if recompute == "full":
        per_layer = 2 * sbh / (tp if sequence_parallel else 1)
    elif recompute == "selective":
        per_layer = 34 * sbh / tp if sequence_parallel else sbh * (10 + 24 / tp)
    else:
        attn = 5 * a * s / h
        per_layer = (sbh * (34 + attn) / tp if sequence_parallel
                     else sbh * (10 + 24 / tp + attn / tp))
    acts = model.layers * per_layer
    return TrainingMemory(params / GIB, grads / GIB, optim / GIB, acts / GIB, RUNTIME_RESERVE_GIB)


# ------------------------------------------------------------------------------------------
# plans
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingPlan:
    """One way to run ``job`` on ``gpus`` GPUs of ``gpu``: tensor parallel ``tp``, data
    parallel ``dp``, ZeRO stage ``zero``, ``micro_batch`` sequences per rank per forward pass
    and ``accumulation`` of them per step; ``step_s``, ``tokens_per_s``, ``memory`` per GPU;
    ``fits`` (``reason`` says why not)."""

    gpu: str
    gpus: int
    tp: int
    dp: int
    zero: int
    micro_batch: int
    accumulation: int
    step_s: float
    tokens_per_s: float
    memory: TrainingMemory
    fits: bool
    reason: str = ""


def plans(job: LlmTrainingJob, gpu: str, gpus: int, *, gpus_per_node: int = 8,
          mfu: float | None = None, recompute: str = "selective",
          memory_gib: float | None = None, zero: int | None = None) -> list[TrainingPlan]:
    """One plan per tensor-parallel degree (module docstring), fitting ones first in order of
    tp; ``memory_gib``: usable memory per GPU (default the catalogue's); ``zero``: the one
    ZeRO stage the job runs with (None: the smallest that fits; on one data-parallel rank
    every stage partitions over one rank, so the stage is moot there and reported as 0)."""
    if not isinstance(job, LlmTrainingJob):
        raise InvalidArgument("job", type(job).__name__, "an LlmTrainingJob")
    _int("gpus", gpus)
    _int("gpus_per_node", gpus_per_node)
    if zero is not None and (isinstance(zero, bool) or zero not in (0, 1, 2, 3)):
        raise InvalidArgument("zero", zero, "a ZeRO stage: 0, 1, 2 or 3, or None")
    cap = hardware.gpu_spec(gpu).memory_gib if memory_gib is None else _positive("memory_gib",
                                                                                  memory_gib)
    step = step_time_s(job.model, gpu, tokens=job.tokens_per_step, gpus=gpus,
                       precision=job.precision, mfu=mfu)
    out: list[TrainingPlan] = []
    for tp in TP_DEGREES:
        try:
            _check_tp(job.model, tp)
        except InvalidArgument:
            continue
        if tp > min(gpus, gpus_per_node) or gpus % tp:
            continue
        dp = gpus // tp
        if job.global_batch % dp:
            continue
        per_rank = job.global_batch // dp
        best = None
        stages = (0,) if dp == 1 else ((0, 1, 2, 3) if zero is None else (zero,))
        for stage in stages:
            mb = 1 << int(math.log2(per_rank))
            while mb >= 1:
                if per_rank % mb == 0:
                    m = memory(job.model, seq_len=job.seq_len, micro_batch=mb, tp=tp, dp=dp,
                               zero=stage, recompute=recompute)
                    if m.total <= cap:
                        best = (stage, mb, m)
                        break
                mb //= 2
            if best is not None:
                break
        if best is None:
            stage = stages[-1]
            m = memory(job.model, seq_len=job.seq_len, micro_batch=1, tp=tp, dp=dp, zero=stage,
                       recompute=recompute)
            out.append(TrainingPlan(gpu, gpus, tp, dp, stage, 1, per_rank, step,
                                    job.tokens_per_step / step, m, False,
                                    f"needs {m.total:.1f} GiB per GPU at micro-batch 1, ZeRO-"
                                    f"{stage}; {cap:g} GiB available"))
            continue
        stage, mb, m = best
        out.append(TrainingPlan(gpu, gpus, tp, dp, stage, mb, per_rank // mb, step,
                                job.tokens_per_step / step, m, True))
    return sorted(out, key=lambda p: (not p.fits, p.tp))
