"""Offline LLM inference: speed and memory of a model on a GPU configuration.

Who calls it: the ``inference`` job kind's shape families, the simulator, ``elastico llm
plan/predict`` and the live annotations (they ask "how many tokens/s, does it fit, how big a
batch"), and ``bench/llm_model.py`` (which fits and scores it).  Whom it calls: the one GPU
catalogue :mod:`elastico.hardware` (every GPU number), the MIG geometry :mod:`elastico.mig`,
numpy.  Pure: no clock, no I/O at call time except reading the bundled fitted constants
(``llm_constants.json`` beside this file) once.

The model (docs/model.md, "LLM inference", has the worked numbers and the sources):

* **Architecture** (:class:`LlmModel`): parameters, layers, hidden size, attention and KV heads,
  head dimension, vocabulary, MLP width, MoE experts.  Derived: matmul parameters per token
  ``P_body = L * hidden * head_dim * (2 heads + 2 kv_heads) + P_mlp * experts_active / experts``
  with ``P_mlp = params - embeddings - L * attention`` (all experts' MLPs; embeddings
  ``vocab * hidden``, twice unless tied), plus the LM head ``vocab * hidden`` per token.
* **Memory** per GPU of a TP group (:func:`memory`): weights ``params * bytes/weight / tp``;
  KV cache ``2 L kv_heads_local head_dim bytes/KV-element`` per token, ``kv_heads_local =
  kv_heads / tp`` (or 1, replicated, when tp > kv_heads: vLLM's rule); workspace = a runtime
  reserve (CUDA context, NCCL, allocator) + the activations of one prefill chunk; the engine
  keeps a fraction of memory (vLLM ``gpu_memory_utilization`` 0.9; TensorRT-LLM
  ``kv_cache_free_gpu_mem_fraction`` 0.9 of what is left); the KV cache gets the rest.
* **Time** of one engine step on one GPU of the TP group, roofline per kernel class::

      t_gemm = max(F_gemm / (eta_flops P), W / (eta_hbm BW))        weights' matmuls
      t_attn = max(F_attn / (eta_flops P), KV / (eta_hbm BW))       attention (KV read/write)
      t_comm = 2 L (alpha + 2 (tp-1)/tp * S / (eta_link B_link))    two all-reduces per layer
      t_step = max(t_gemm + t_attn + t_comm, L * t_layer) + t_fixed + b * t_seq

  ``P`` peak dense FLOP/s of the compute precision, ``BW`` HBM bandwidth, ``B_link`` NVLink
  bandwidth per direction (half the catalogue's bidirectional figure; PCIe without NVLink),
  ``S`` the activation bytes all-reduced.  ``L * t_layer`` is the host's kernel-launch time,
  overlapped with the GPU (it binds only in eager mode); ``t_fixed`` is the per-step
  overhead and ``t_seq`` the host's work per sequence per step (scheduling, sampling,
  detokenising) for a batch of ``b`` sequences.  Prefill: one step over ``batch * input``
  tokens (FLOPs ``2 P_body`` per token + causal attention ``2 input^2 heads head_dim L`` per
  sequence).
  Decode: one step per output token; attention reads the whole KV cache (linear in the
  context), MoE reads the experts the batch's tokens touch (``E (1 - (1 - k/E)^b)``).  A
  batch larger than the KV cache holds runs in waves.
* **Partitions**: an MPS share scales the SMs (peak FLOP/s x share); HBM bandwidth and memory
  are not partitioned by MPS (NVIDIA MPS docs: the active-thread percentage limits SMs only).
  ``LlmConfig.hbm_by_share`` asks for the placer's planning figure instead: the bandwidth
  scaled by the share too (what the share keeps when its GPU is full).
  A MIG instance gets ``compute_slices / C`` of the SMs, ``memory_slices / M`` of the memory
  bandwidth and its profile's memory (NVIDIA MIG user guide: a GPU instance owns its memory
  slices, i.e. their DRAM, L2 slices and memory controllers); no NVLink, so tp = 1.
* **Efficiencies** ``eta_flops, eta_hbm, t_fixed, t_layer, t_seq`` per (GPU generation,
  engine) are fitted (``bench/llm_model.py --fit``) to the bundled measurements; ``alpha, eta_link`` per
  generation to Vidur's measured NCCL all-reduce times.  Without fitted constants for the
  generation the engine's constants pooled over generations are used, and without those the
  pure roofline (efficiency 1, no overhead) -- :func:`efficiency` says which.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from elastico import hardware, mig
from elastico.errors import InvalidArgument

__all__ = [
    "LlmModel", "LLM_MODELS", "llm_model", "find_llm_model", "from_hf_config",
    "LlmConfig", "LlmMemory", "Efficiency", "ENGINES", "DTYPES",
    "memory", "max_batch", "prefill_s", "decode_step_s", "batch_latency_s", "batch_latencies_s",
    "tokens_per_s",
    "efficiency", "ROOFLINE", "LlmGrid", "evaluate_grid", "LLM_MODEL_ALIASES",
]

GIB = float(1 << 30)

#: bytes per stored weight / KV element, per ``dtype`` name.  ``int4`` is weight-only (AWQ/GPTQ
#: style: computed at the 16-bit rate).
DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5})
DTYPES = tuple(DTYPE_BYTES)
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")
#: the catalogue's peak_tflops key used for matmuls of each weight dtype (weight-only int4 and
#: a GPU without the key fall back to fp16)
_COMPUTE_KEY = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "fp16"}


@dataclass(frozen=True)
class EngineSpec:
    """What an inference engine keeps and allows, from its documented defaults.

    ``memory_fraction``: vLLM ``gpu_memory_utilization`` (default 0.9: the share of the GPU's
    whole memory the engine may use, weights included -- vLLM EngineArgs docs); TensorRT-LLM
    ``kv_cache_free_gpu_mem_fraction`` (default 0.9 of the memory still free after weights and
    activations -- TensorRT-LLM docs, "KV cache"): ``memory_of_free`` says which.
    ``max_seqs``: vLLM ``max_num_seqs`` default 256; TensorRT-LLM ``max_batch_size`` default
    2048 (trtllm-build / trtllm-bench).  ``prefill_chunk_tokens``: the tokens of one forward pass
    whose activations the workspace holds (vLLM ``max_num_batched_tokens`` floor 2048; 8192 for
    TensorRT-LLM's ``max_num_tokens`` default).
    """

    name: str
    memory_fraction: float
    memory_of_free: bool
    max_seqs: int
    prefill_chunk_tokens: int


ENGINES: Mapping[str, EngineSpec] = MappingProxyType({
    "vllm": EngineSpec("vllm", 0.90, False, 256, 2048),
    # vLLM without CUDA graphs (``enforce_eager=True``; every release before 0.2.5): the same
    # memory rules, its own fitted launch overhead.  Splitwise's measurements ran this way.
    "vllm-eager": EngineSpec("vllm-eager", 0.90, False, 256, 2048),
    "tensorrt-llm": EngineSpec("tensorrt-llm", 0.90, True, 2048, 8192),
})

#: ASSUMPTION (no ElastiCo measurement): memory a serving process holds outside weights, KV
#: and activations -- the CUDA context (~0.3-0.5 GiB on A100/H100), cuBLAS/NCCL workspaces and
#: allocator slack -- per GPU.
RUNTIME_RESERVE_GIB = 1.0


# --------------------------------------------------------------------------------------------
# model architecture
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlmModel:
    """A transformer decoder's architecture (what speed and memory depend on).

    ``params_b``: total parameters in billions (all experts of an MoE); ``layers``; ``hidden``
    size; attention ``heads`` and ``kv_heads`` (GQA/MQA: fewer KV heads, dividing ``heads``);
    ``head_dim``; ``vocab`` size; MLP width ``intermediate`` (per expert); ``experts`` and
    ``experts_active`` per token (1 and 1 for a dense model); ``tied_embeddings``: the LM head
    shares the input embedding's weights (BLOOM, OPT).  Validated on construction:
    :class:`~elastico.errors.InvalidArgument` names the field, the value and what is allowed.
    ``source``: where the numbers come from (a ``config.json``), not part of equality.
    """

    name: str
    params_b: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    experts: int = 1
    experts_active: int = 1
    tied_embeddings: bool = False
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument("model.name", self.name, "a non-empty string")
        p = self.params_b
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p <= 0:
            raise InvalidArgument("model.params_b", p, "a finite number of billions > 0")
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "intermediate",
                  "experts", "experts_active"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InvalidArgument(f"model.{f}", v, "an integer >= 1")
        if not isinstance(self.tied_embeddings, bool):
            raise InvalidArgument("model.tied_embeddings", self.tied_embeddings, "true or false")
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise InvalidArgument("model.kv_heads", self.kv_heads,
                                  f"a divisor of heads={self.heads} (MHA: equal; GQA/MQA: fewer)")
        if self.experts_active > self.experts:
            raise InvalidArgument("model.experts_active", self.experts_active,
                                  f"at most experts={self.experts}")
        if self._mlp_params() <= 0:
            raise InvalidArgument(
                "model.params_b", self.params_b,
                f"more than the embeddings and attention of this architecture hold "
                f"({(self._emb_params() + self.layers * self._attn_params()) / 1e9:.3f}e9)")

    # derived sizes (parameters, not bytes)
    def _attn_params(self) -> float:
        """Q, K, V and O projections of one layer."""
        return float(self.hidden) * self.head_dim * (2 * self.heads + 2 * self.kv_heads)

    def _emb_params(self) -> float:
        """Input embedding and LM head (one matrix when tied)."""
        return float(self.vocab) * self.hidden * (1 if self.tied_embeddings else 2)

    def _mlp_params(self) -> float:
        """All experts' MLP (and norm/router) parameters of all layers."""
        return self.params_b * 1e9 - self._emb_params() - self.layers * self._attn_params()

    @property
    def active_params_b(self) -> float:
        """Parameters a token passes through, in billions (MoE: only its active experts)."""
        return (self.params_b * 1e9 - self._mlp_params() * (1 - self.experts_active / self.experts)) / 1e9

    @property
    def body_params(self) -> float:
        """Matmul parameters per token without the LM head (embedding lookup excluded)."""
        return self.layers * self._attn_params() + self._mlp_params() * self.experts_active / self.experts

    @property
    def head_params(self) -> float:
        return float(self.vocab) * self.hidden


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


def _m(name, params_b, layers, hidden, heads, kv_heads, head_dim, vocab, intermediate, repo,
       experts=1, active=1, tied=False) -> LlmModel:
    return LlmModel(name, params_b, layers, hidden, heads, kv_heads, head_dim, vocab, intermediate,
                    experts, active, tied, source=_hf(repo) + " (parameter count: the model card)")


#: The bundled catalogue: public open models' ``config.json`` fields (source per entry).
#: Parameter counts are the model cards' (Llama-2 6.74/13.0/69.0B; Llama-3 8.03/70.6B, ...).
LLM_MODELS: Mapping[str, LlmModel] = MappingProxyType({m.name: m for m in (
    _m("Llama-2-7B", 6.738, 32, 4096, 32, 32, 128, 32000, 11008, "meta-llama/Llama-2-7b-hf"),
    _m("Llama-2-13B", 13.016, 40, 5120, 40, 40, 128, 32000, 13824, "meta-llama/Llama-2-13b-hf"),
    _m("Llama-2-70B", 68.977, 80, 8192, 64, 8, 128, 32000, 28672, "meta-llama/Llama-2-70b-hf"),
    _m("Llama-3-8B", 8.030, 32, 4096, 32, 8, 128, 128256, 14336, "meta-llama/Meta-Llama-3-8B"),
    _m("Llama-3-70B", 70.554, 80, 8192, 64, 8, 128, 128256, 28672, "meta-llama/Meta-Llama-3-70B"),
    _m("Llama-3.1-8B", 8.030, 32, 4096, 32, 8, 128, 128256, 14336, "meta-llama/Llama-3.1-8B"),
    _m("Llama-3.1-70B", 70.554, 80, 8192, 64, 8, 128, 128256, 28672, "meta-llama/Llama-3.1-70B"),
    _m("Llama-3.3-70B", 70.554, 80, 8192, 64, 8, 128, 128256, 28672, "meta-llama/Llama-3.3-70B-Instruct"),
    _m("Llama-3.1-405B", 405.853, 126, 16384, 128, 8, 128, 128256, 53248, "meta-llama/Llama-3.1-405B"),
    _m("LLaMA-7B", 6.738, 32, 4096, 32, 32, 128, 32000, 11008, "huggyllama/llama-7b"),
    _m("CodeLlama-34B", 33.744, 48, 8192, 64, 8, 128, 32000, 22016, "codellama/CodeLlama-34b-Instruct-hf"),
    _m("Mistral-7B", 7.242, 32, 4096, 32, 8, 128, 32000, 14336, "mistralai/Mistral-7B-v0.1"),
    _m("Mixtral-8x7B", 46.703, 32, 4096, 32, 8, 128, 32000, 14336, "mistralai/Mixtral-8x7B-v0.1", 8, 2),
    _m("Qwen1.5-7B", 7.721, 32, 4096, 32, 32, 128, 151936, 11008, "Qwen/Qwen1.5-7B"),
    _m("Qwen2-7B", 7.616, 28, 3584, 28, 4, 128, 152064, 18944, "Qwen/Qwen2-7B"),
    _m("Qwen2-72B", 72.706, 80, 8192, 64, 8, 128, 152064, 29568, "Qwen/Qwen2-72B"),
    _m("BLOOM-7B1", 7.069, 30, 4096, 32, 32, 128, 250880, 16384, "bigscience/bloom-7b1", tied=True),
    _m("BLOOM-176B", 176.247, 70, 14336, 112, 112, 128, 250880, 57344, "bigscience/bloom", tied=True),
    _m("GPT-J-6B", 6.053, 28, 4096, 16, 16, 256, 50400, 16384, "EleutherAI/gpt-j-6b"),
    _m("OPT-6.7B", 6.658, 32, 4096, 32, 32, 128, 50272, 16384, "facebook/opt-6.7b", tied=True),
)})

#: Hugging Face repository ids (and other spellings found in measurements) -> catalogue name.
LLM_MODEL_ALIASES: Mapping[str, str] = MappingProxyType({
    "meta-llama/Llama-2-7b-hf": "Llama-2-7B", "meta-llama/Llama-2-13b-hf": "Llama-2-13B",
    "meta-llama/Llama-2-70b-hf": "Llama-2-70B", "meta-llama/Meta-Llama-3-8B": "Llama-3-8B",
    "meta-llama/Meta-Llama-3-70B": "Llama-3-70B", "meta-llama/Llama-3.1-8B": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B", "Llama-3.1-8B-Instruct": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B", "meta-llama/Llama-3.3-70B-Instruct": "Llama-3.3-70B",
    "Llama-3.3-70B-Instruct": "Llama-3.3-70B", "meta-llama/Llama-3.1-405B": "Llama-3.1-405B",
    "Llama-3.1-405B-Instruct": "Llama-3.1-405B", "huggyllama/llama-7b": "LLaMA-7B",
    "codellama/CodeLlama-34b-Instruct-hf": "CodeLlama-34B", "mistralai/Mistral-7B-v0.1": "Mistral-7B",
    "mistralai/Mixtral-8x7B-v0.1": "Mixtral-8x7B", "Qwen/Qwen1.5-7B": "Qwen1.5-7B",
    "Qwen/Qwen2-7B": "Qwen2-7B", "Qwen/Qwen2-72B": "Qwen2-72B", "bigscience/bloom-7b1": "BLOOM-7B1",
    "bigscience/bloom": "BLOOM-176B", "bloom-176b": "BLOOM-176B", "llama2-70b": "Llama-2-70B",
    "EleutherAI/gpt-j-6b": "GPT-J-6B", "facebook/opt-6.7b": "OPT-6.7B",
})


def llm_model(name: str) -> LlmModel:
    """The catalogue's model called ``name`` (its catalogue name or a Hugging Face id)."""
    if isinstance(name, str):
        m = LLM_MODELS.get(name) or LLM_MODELS.get(LLM_MODEL_ALIASES.get(name, ""))
        if m is not None:
            return m
    raise InvalidArgument("model", name, "one of " + ", ".join(LLM_MODELS))


def find_llm_model(name: str) -> LlmModel:
    """:func:`llm_model` for a name a user typed (``elastico llm --model``, a jobs file's
    ``model``): an exact catalogue name or alias first, else the one model whose catalogue
    name or alias equals ``name`` ignoring case (``llama-2-7b`` -> ``Llama-2-7B``).  Raises
    :func:`llm_model`'s InvalidArgument (field ``model``, the allowed names) for an unknown
    name and for one that matches several models ignoring case.  Not for internal look-ups,
    which use the catalogue's spelling."""
    try:
        return llm_model(name)
    except InvalidArgument:
        if not isinstance(name, str):
            raise
        folded = name.casefold()
        hits = {m for m in (*LLM_MODELS, *LLM_MODEL_ALIASES) if m.casefold() == folded}
        models = {LLM_MODEL_ALIASES.get(m, m) for m in hits}
        if len(models) != 1:
            raise
        return LLM_MODELS[models.pop()]


#: model_type values whose MLP is gated (SwiGLU/GeGLU: three matrices); others have two
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
          "gemma2", "gemma3_text", "phi3", "olmo", "olmo2", "deepseek", "internlm2", "yi", "cohere",
          "granite", "starcoder2_gated"}


#: model_type values whose config class ties the LM head to the embedding when config.json does
#: not say (transformers' BloomConfig, OPTConfig, GPT2Config keep PretrainedConfig's True)
_TIED_BY_DEFAULT = {"bloom", "opt", "gpt2", "falcon"}


def _cfg_int(cfg: Mapping[str, Any], keys: tuple[str, ...], default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
                raise InvalidArgument(f"config.{k}", v, "an integer")
            return int(v)
    if default is None:
        raise InvalidArgument(f"config.{keys[0]}", None, "a key config.json must have; missing here"
                              + (" (also accepted: " + ", ".join(keys[1:]) + ")" if len(keys) > 1 else ""))
    return default


def from_hf_config(cfg: Mapping[str, Any], name: str = "custom") -> LlmModel:
    """A model from a Hugging Face ``config.json`` (already parsed).

    Fields read (with the spellings of GPT-2/BLOOM/OPT/GPT-J-style configs):
    ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
    (default: the heads; ``multi_query``: 1), ``head_dim`` (default hidden/heads),
    ``vocab_size``, ``intermediate_size`` (default 4 hidden), ``num_local_experts`` /
    ``num_experts`` and ``num_experts_per_tok``, ``tie_word_embeddings``.  A config has no
    parameter count: it is counted from the shapes -- embeddings (once when tied), per layer
    Q/K/V/O and the MLP (3 matrices when ``model_type`` is a gated-MLP family such as llama,
    mistral, mixtral, qwen2, gemma; 2 otherwise) per expert, plus an MoE router.  A
    ``params_b`` key (ours, not Hugging Face's) overrides the count.
    """
    if not isinstance(cfg, Mapping):
        raise InvalidArgument("config", type(cfg).__name__, "a JSON object (config.json)")
    layers = _cfg_int(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    hidden = _cfg_int(cfg, ("hidden_size", "n_embd", "d_model"))
    heads = _cfg_int(cfg, ("num_attention_heads", "n_head"))
    kv_default = 1 if cfg.get("multi_query") else heads
    kv_heads = _cfg_int(cfg, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), kv_default)
    head_dim = _cfg_int(cfg, ("head_dim",), hidden // heads if heads and hidden % heads == 0 else 0)
    if head_dim == 0:
        raise InvalidArgument("config.head_dim", None,
                              f"present when hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    vocab = _cfg_int(cfg, ("vocab_size",))
    inter = _cfg_int(cfg, ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"), 4 * hidden)
    experts = _cfg_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), 1)
    active = _cfg_int(cfg, ("num_experts_per_tok", "moe_top_k"), 1 if experts == 1 else 2)
    tied = cfg.get("tie_word_embeddings", str(cfg.get("model_type", "")).lower() in _TIED_BY_DEFAULT)
    if not isinstance(tied, bool):
        raise InvalidArgument("config.tie_word_embeddings", tied, "true or false")
    if "params_b" in cfg:
        params_b = cfg["params_b"]
    else:
        gated = str(cfg.get("model_type", "")).lower() in _GATED
        emb = vocab * hidden * (1 if tied else 2)
        attn = hidden * head_dim * (2 * heads + 2 * kv_heads)
        mlp = (3 if gated else 2) * hidden * inter * experts + (hidden * experts if experts > 1 else 0)
        params_b = (emb + layers * (attn + mlp)) / 1e9
    src = str(cfg.get("_name_or_path", "")) or "config.json"
    return LlmModel(name, params_b, layers, hidden, heads, kv_heads, head_dim, vocab, inter,
                    experts, active, tied,
                    source=f"Hugging Face config ({src})")


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlmConfig:
    """One configuration of an inference job: ``replicas`` independent engine instances, each
    on ``tp`` GPUs of model ``gpu`` (tensor parallel), each GPU whole, an MPS share
    (``mps_share`` in (0, 1]: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100) or a MIG instance
    (``mig_profile``, tp = 1).  ``max_batch`` caps the sequences in flight (default: the
    engine's limit); ``dtype`` of the weights, ``kv_dtype`` of the KV cache (default: fp8 with
    fp8 weights, else 16-bit); ``engine`` one of :data:`ENGINES`.  ``memory_limit_gib``: memory
    per GPU the job may use (an MPS pinned-device-memory limit; default the whole GPU or MIG
    instance).  ``hbm_by_share``: the MPS share also scales the HBM bandwidth (a *planning*
    figure, not what MPS enforces: MPS limits SMs only, so a share alone on its GPU reads at the
    whole GPU's bandwidth, and co-residents compete for it; scaled, it is the bandwidth the share
    keeps when every co-resident reads in proportion to its SMs -- the GPU full, as the pricing
    plans it; docs/model.md 7., "Planning throughput").  No effect without ``mps_share``.
    Checked when used (:func:`memory`), not on construction.
    """

    gpu: str
    tp: int = 1
    replicas: int = 1
    mps_share: float | None = None
    mig_profile: str | None = None
    max_batch: int | None = None
    dtype: str = "fp16"
    kv_dtype: str | None = None
    engine: str = "vllm"
    memory_limit_gib: float | None = None
    hbm_by_share: bool = False


@dataclass(frozen=True)
class LlmMemory:
    """Memory of one replica, per GPU of its TP group, GiB.  ``available_gib``: what the KV cache
    may use (the engine's fraction minus weights and workspace); ``kv_tokens``: the tokens the
    KV cache holds; ``fits``: the weights and at least one token fit (``reason`` says why not)."""

    weights_gib: float
    kv_per_token_gib: float
    workspace_gib: float
    available_gib: float
    kv_tokens: int
    fits: bool
    reason: str


@dataclass(frozen=True)
class Efficiency:
    """The fitted constants of one (GPU generation, engine): achieved fraction of peak dense
    FLOP/s (``eta_flops``) and of HBM bandwidth (``eta_hbm``), a fixed per-step overhead
    (``t_fixed_s``), the host's launch time per layer (``t_layer_s``, overlapped with the GPU),
    the host's time per sequence per step (``t_seq_s``: scheduling, sampling, detokenising), per
    generation the all-reduce latency per call (``alpha_s``) and achieved fraction of the
    link bandwidth (``eta_link``); ``origin``: where they come from."""

    eta_flops: float = 1.0
    eta_hbm: float = 1.0
    t_fixed_s: float = 0.0
    t_layer_s: float = 0.0
    alpha_s: float = 0.0
    eta_link: float = 1.0
    t_seq_s: float = 0.0
    origin: str = "roofline"


#: Pure roofline: the datasheet's peaks reached, no overhead (the ``physics`` fit of the bench).
ROOFLINE = Efficiency()

CONSTANTS_FILE = Path(__file__).with_name("llm_constants.json")
_EFF_FIELDS = ("eta_flops", "eta_hbm", "t_fixed_s", "t_layer_s", "t_seq_s")
_ALL_FIELDS = ("eta_flops", "eta_hbm", "t_fixed_s", "t_layer_s", "alpha_s", "eta_link", "t_seq_s")
_LINK_FIELDS = ("alpha_s", "eta_link")


@lru_cache(maxsize=None)
def _constants(path: str = str(CONSTANTS_FILE)) -> Mapping[str, Any]:
    """The bundled fitted constants (read once); empty when the file is absent."""
    p = Path(path)
    if not p.is_file():
        return MappingProxyType({"engines": {}, "links": {}})
    with p.open() as f:
        return MappingProxyType(json.load(f))


def efficiency(generation: str, engine: str, constants: Mapping[str, Any] | None = None) -> Efficiency:
    """The constants used for ``engine`` on a GPU of ``generation``: the fit for that pair, else
    the engine's fit pooled over generations (``"*"``), else :data:`ROOFLINE`; the link
    constants of the generation (else the pooled ones, else ideal)."""
    c = _constants() if constants is None else constants
    eng = c.get("engines", {}).get(engine, {})
    e, origin = eng.get(generation), f"fitted {engine}/{generation}"
    if e is None:
        e, origin = eng.get("*"), f"fitted {engine}/* (no fit for {generation})"
    links = c.get("links", {})
    lk = links.get(generation) or links.get("*") or {}
    if e is None:
        return replace(ROOFLINE, **{k: lk[k] for k in _LINK_FIELDS if k in lk})
    return Efficiency(**{k: float(e[k]) for k in _EFF_FIELDS},
                      **{k: float(lk[k]) for k in _LINK_FIELDS if k in lk}, origin=origin)


# --------------------------------------------------------------------------------------------
# models and configurations as arrays (every computation below is vectorised: a quantity may
# be a float or a numpy array; a row-aligned set of (model, config) pairs and a grid of jobs x
# configurations use the same code)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _ModelArrays:
    """Per-model numbers of :class:`LlmModel` (floats, or arrays over models)."""

    params: Any         # total parameters
    layers: Any
    hidden: Any
    heads: Any
    kv_heads: Any
    head_dim: Any
    inter_active: Any   # MLP width a token passes through (intermediate x experts_active)
    body: Any           # matmul parameters per token without the LM head
    head: Any           # LM head parameters (vocab x hidden)
    unread: Any         # parameters a step never reads whole (the untied input embedding)
    mlp: Any            # all experts' MLP parameters
    experts: Any
    active: Any
    vocab: Any


@lru_cache(maxsize=4096)
def _model_row(model: LlmModel) -> tuple[float, ...]:
    return (model.params_b * 1e9, float(model.layers), float(model.hidden), float(model.heads),
            float(model.kv_heads), float(model.head_dim), float(model.intermediate * model.experts_active),
            model.body_params, model.head_params,
            0.0 if model.tied_embeddings else float(model.vocab) * model.hidden,
            model._mlp_params(), float(model.experts), float(model.experts_active), float(model.vocab))


def _model_arrays(models, shape: tuple[int, ...] | None = None) -> _ModelArrays:
    if isinstance(models, LlmModel):
        return _ModelArrays(*_model_row(models))
    cols = np.array([_model_row(m) for m in models], dtype=float).T
    if shape is not None:
        cols = cols.reshape((cols.shape[0], *shape))
    return _ModelArrays(*cols)


@dataclass(frozen=True)
class _CfgArrays:
    """Per-configuration numbers: what one GPU of the TP group gives the job after MPS/MIG
    partitioning, the engine's memory rules and the efficiencies (floats, or arrays)."""

    tp: Any
    replicas: Any
    flops: Any          # peak dense FLOP/s of the compute precision (x MPS share / MIG slices)
    hbm: Any            # bytes/s (x MIG memory slices)
    link: Any           # bytes/s per direction between the TP group's GPUs (0 when tp = 1)
    memory_gib: Any     # memory per GPU the job may use
    wb: Any             # bytes per weight
    kvb: Any            # bytes per KV element
    frac: Any           # engine memory fraction
    of_free: Any        # 1.0: the fraction applies to memory left after weights (TensorRT-LLM)
    chunk: Any          # tokens whose activations the workspace holds
    cap: Any            # most sequences in flight (cfg.max_batch or the engine's max)
    eff: Efficiency     # fields floats or arrays


def _check_cfg(cfg: LlmConfig) -> None:
    """Validate a configuration on its own (the model-dependent checks: :func:`_check_pair`)."""
    if not isinstance(cfg, LlmConfig):
        raise InvalidArgument("config", type(cfg).__name__, "an LlmConfig")
    if cfg.engine not in ENGINES:
        raise InvalidArgument("engine", cfg.engine, "one of " + ", ".join(ENGINES))
    if cfg.dtype not in DTYPE_BYTES:
        raise InvalidArgument("dtype", cfg.dtype, "one of " + ", ".join(DTYPES))
    if _kv_dtype(cfg) not in KV_DTYPES:
        raise InvalidArgument("kv_dtype", cfg.kv_dtype, "one of " + ", ".join(KV_DTYPES))
    for f in ("tp", "replicas"):
        v = getattr(cfg, f)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f, v, "an integer >= 1")
    mb = cfg.max_batch
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, (int, np.integer)) or mb < 1):
        raise InvalidArgument("max_batch", mb, "an integer >= 1, or None (the engine's limit)")
    if cfg.mps_share is not None and cfg.mig_profile is not None:
        raise InvalidArgument("mps_share", cfg.mps_share, "None when mig_profile is set (MPS or MIG, not both)")
    s = cfg.mps_share
    if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not (0 < s <= 1)):
        raise InvalidArgument("mps_share", s, "a fraction in (0, 1], or None (the whole GPU)")
    if not isinstance(cfg.hbm_by_share, bool):
        raise InvalidArgument("hbm_by_share", cfg.hbm_by_share, "True or False")
    lim = cfg.memory_limit_gib
    if lim is not None and (isinstance(lim, bool) or not isinstance(lim, (int, float))
                            or not math.isfinite(lim) or lim <= 0):
        raise InvalidArgument("memory_limit_gib", lim, "a finite number of GiB > 0, or None")
    if cfg.mig_profile is not None and cfg.tp != 1:
        raise InvalidArgument("tp", cfg.tp, "1 with a MIG profile (MIG instances have no NVLink/P2P between them)")


def _pair_problem(model: LlmModel, tp: int) -> tuple[str, int, str] | None:
    """Why ``model`` cannot be split over ``tp`` GPUs (field, value, allowed), or None."""
    if model.heads % tp:
        return ("tp", tp, f"a divisor of the model's heads={model.heads}")
    if tp > model.kv_heads and tp % model.kv_heads:
        return ("tp", tp, f"a divisor or multiple of the model's kv_heads={model.kv_heads}")
    if tp < model.kv_heads and model.kv_heads % tp:
        return ("tp", tp, f"a divisor of the model's kv_heads={model.kv_heads}")
    return None


def _check_pair(model: LlmModel, cfg: LlmConfig) -> None:
    if not isinstance(model, LlmModel):
        raise InvalidArgument("model", type(model).__name__, "an LlmModel (llm_model(name) or from_hf_config)")
    _check_cfg(cfg)
    p = _pair_problem(model, cfg.tp)
    if p is not None:
        raise InvalidArgument(*p)


def _kv_dtype(cfg: LlmConfig) -> str:
    if cfg.kv_dtype is not None:
        return cfg.kv_dtype
    return "fp8" if cfg.dtype == "fp8" else ("bf16" if cfg.dtype == "bf16" else "fp16")


def _gpu_spec(name: str):
    try:
        return hardware.gpu_spec(name)
    except InvalidArgument as e:
        raise InvalidArgument("gpu", name, e.allowed) from None
    except LookupError:
        raise InvalidArgument("gpu", name, "one of " + ", ".join(getattr(hardware, "GPUS", {}))) from None


def _peak_flops(spec, dtype: str) -> float:
    """Dense peak FLOP/s of ``dtype``'s matmuls; a GPU without that Tensor Core precision (fp8
    before Ada/Hopper, int8 where the datasheet lists none) runs them as weight-only
    quantisation at the 16-bit rate."""
    peaks = spec.peak_tflops
    v = peaks.get(_COMPUTE_KEY[dtype]) or 0.0
    if not v:  # no such tensor-core precision (e.g. fp8 before Hopper): weight-only, 16-bit math
        v = peaks.get("fp16") or peaks.get("bf16") or 0.0
    return float(v) * 1e12


def _mig_profile(spec, profile: str) -> mig.MigProfile:
    """The MIG profile ``profile`` of ``spec``'s GPU (the MIG tables use the catalogue's name or
    one of its :data:`elastico.hardware.ALIASES`, e.g. H100-80GB for H100-SXM)."""
    if not spec.mig:
        raise InvalidArgument("mig_profile", profile, f"None: {spec.name} has no MIG")
    names = (spec.name, *sorted(a for a, k in hardware.ALIASES.items() if k == spec.name))
    for key in names:
        if key in mig.MIG_PROFILES:
            profiles = mig.MIG_PROFILES[key]
            if profile not in profiles:
                raise InvalidArgument("mig_profile", profile, f"one of {', '.join(profiles)} on {spec.name}")
            return profiles[profile]
    raise InvalidArgument("mig_profile", profile, f"None: no MIG geometry known for {spec.name}")


@lru_cache(maxsize=4096)
def _cfg_row(cfg: LlmConfig) -> tuple[tuple[float, ...], Efficiency]:
    _check_cfg(cfg)
    spec = _gpu_spec(cfg.gpu)
    eng = ENGINES[cfg.engine]
    flops = _peak_flops(spec, cfg.dtype)
    if not flops or not spec.hbm_gbps:
        raise InvalidArgument("gpu", cfg.gpu, "a GPU whose catalogue entry has its peak FLOP/s and memory "
                                              "bandwidth (undisclosed models such as G2/G3 have neither)")
    hbm = float(spec.hbm_gbps) * 1e9
    mem = float(spec.memory_gib)
    if cfg.mig_profile is not None:
        p = _mig_profile(spec, cfg.mig_profile)
        flops *= p.compute_slices / p.gpu_compute_slices
        hbm *= p.memory_slices / p.gpu_memory_slices
        mem = min(mem, p.memory_gib)
    elif cfg.mps_share is not None:
        flops *= float(cfg.mps_share)
        if cfg.hbm_by_share:  # the planning figure (LlmConfig)
            hbm *= float(cfg.mps_share)
    if cfg.memory_limit_gib is not None:
        mem = min(mem, float(cfg.memory_limit_gib))
    link = 0.0
    if cfg.tp > 1:
        bidir = spec.nvlink_gbps or spec.pcie_gbps
        if not bidir:
            raise InvalidArgument("tp", cfg.tp, f"1 on {spec.name}: the catalogue gives it no NVLink or host link bandwidth")
        link = float(bidir) * 1e9 / 2.0
    cap = eng.max_seqs if cfg.max_batch is None else int(cfg.max_batch)
    row = (float(cfg.tp), float(cfg.replicas), flops, hbm, link, mem, DTYPE_BYTES[cfg.dtype],
           DTYPE_BYTES[_kv_dtype(cfg)], eng.memory_fraction, float(eng.memory_of_free),
           float(eng.prefill_chunk_tokens), float(cap))
    return row, efficiency(str(spec.generation), cfg.engine)


def _cfg_arrays(cfgs, shape: tuple[int, ...] | None = None, eff: Efficiency | None = None) -> _CfgArrays:
    """Arrays of ``cfgs`` (one config: floats).  ``eff`` overrides the bundled efficiencies."""
    if isinstance(cfgs, LlmConfig):
        row, e = _cfg_row(cfgs)
        return _CfgArrays(*row, eff=e if eff is None else eff)
    rows = [_cfg_row(c) for c in cfgs]
    cols = np.array([r for r, _ in rows], dtype=float).T
    if eff is None:
        eff = Efficiency(**{f: np.array([getattr(e, f) for _, e in rows], dtype=float) for f in _ALL_FIELDS},
                         origin="per configuration")
    if shape is not None:
        cols = cols.reshape((cols.shape[0], *shape))
        eff = Efficiency(**{f: np.reshape(getattr(eff, f), shape) if np.ndim(getattr(eff, f)) else getattr(eff, f)
                            for f in _ALL_FIELDS}, origin=eff.origin)
    return _CfgArrays(*cols, eff=eff)


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------

def _kv_local(m: _ModelArrays, c: _CfgArrays):
    """KV heads one GPU holds: kv_heads / tp, at least 1 (replicated when tp > kv_heads)."""
    return np.maximum(1.0, np.floor(m.kv_heads / c.tp))


def _compatible(m: _ModelArrays, c: _CfgArrays):
    """tp divides the heads, and divides or is a multiple of the KV heads."""
    kv_ok = np.where(c.tp <= m.kv_heads, np.mod(m.kv_heads, c.tp) == 0, np.mod(c.tp, m.kv_heads) == 0)
    return (np.mod(m.heads, c.tp) == 0) & kv_ok


def _memory_arrays(m: _ModelArrays, c: _CfgArrays):
    """(weights, KV GiB per token, workspace, available for KV, KV tokens, weights fit) per GPU.

    Workspace = :data:`RUNTIME_RESERVE_GIB` + the activations of one forward pass over the
    engine's chunk of tokens: per token about 4 hidden (residual stream, attention block) + 2
    intermediate / tp (the MLP's gate and up projections), 16-bit -- ASSUMPTION: what a
    forward pass keeps alive at once (inference frees each layer's activations)."""
    weights = m.params * c.wb / c.tp / GIB
    kv_tok = 2.0 * m.layers * _kv_local(m, c) * m.head_dim * c.kvb / GIB
    work = RUNTIME_RESERVE_GIB + c.chunk * (4.0 * m.hidden + 2.0 * m.inter_active / c.tp) * 2.0 / GIB
    usable = np.where(c.of_free > 0, c.memory_gib, c.frac * c.memory_gib)
    avail = np.where(c.of_free > 0, c.frac * (c.memory_gib - weights - work), c.frac * c.memory_gib - weights - work)
    fit_w = weights + work <= usable
    tokens = np.where(fit_w & (avail > 0), np.floor(np.maximum(avail, 0.0) / kv_tok), 0.0)
    return weights, kv_tok, work, avail, tokens, fit_w, usable


def memory(model: LlmModel, cfg: LlmConfig) -> LlmMemory:
    """Memory of one replica per GPU of its TP group, and how many KV tokens fit."""
    _check_pair(model, cfg)
    m, c = _model_arrays(model), _cfg_arrays(cfg)
    weights, kv_tok, work, avail, tokens, fit_w, usable = (float(x) for x in _memory_arrays(m, c))
    if not fit_w:
        reason = (f"weights {weights:.1f} GiB + workspace {work:.1f} GiB per GPU exceed the "
                  f"{usable:.1f} GiB {cfg.engine} may use on {cfg.gpu}"
                  + (f" {cfg.mig_profile}" if cfg.mig_profile else ""))
        return LlmMemory(weights, kv_tok, work, avail, 0, False, reason)
    if tokens < 1:
        return LlmMemory(weights, kv_tok, work, avail, 0, False, "no room left for the KV cache")
    return LlmMemory(weights, kv_tok, work, avail, int(tokens), True, "")


def _concurrency(m: _ModelArrays, c: _CfgArrays, input_tokens, output_tokens):
    """Most sequences whose whole KV cache fits at once, capped; 0 where none fits."""
    tokens = _memory_arrays(m, c)[4]
    b = np.minimum(c.cap, np.floor(tokens / (np.asarray(input_tokens, float) + output_tokens)))
    return np.where(_compatible(m, c), b, 0.0)


def max_batch(model: LlmModel, cfg: LlmConfig, input_tokens: int, output_tokens: int) -> int:
    """The most sequences of ``input_tokens + output_tokens`` whose whole KV cache fits at once,
    capped by ``cfg.max_batch`` and the engine's limit; 0 when not even one fits."""
    _check_tokens(input_tokens, output_tokens)
    _check_pair(model, cfg)
    return int(_concurrency(_model_arrays(model), _cfg_arrays(cfg), input_tokens, output_tokens))


def _check_tokens(input_tokens: int, output_tokens: int, output_min: int = 1) -> None:
    for f, v, lo in (("input_tokens", input_tokens, 1), ("output_tokens", output_tokens, output_min)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise InvalidArgument(f, v, f"an integer >= {lo}")


def _check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InvalidArgument("batch", batch, "an integer >= 1")


# --------------------------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Step:
    """The physics of the engine steps of one wave of ``b`` sequences, per GPU of the TP group,
    independent of the efficiencies.  Prefill: one step.  Decode: ``steps`` steps whose context
    runs from ``ctx0`` to ``ctx0 + steps - 1``; attention terms are per context token."""

    p_gemm_flops: Any
    p_weight_bytes: Any
    p_attn_flops: Any
    p_kv_bytes: Any
    p_ar_bytes: Any
    d_gemm_flops: Any
    d_weight_bytes: Any
    d_attn_flops_per_ctx: Any
    d_kv_bytes_per_ctx: Any
    d_ar_bytes: Any
    ctx0: Any
    steps: Any
    b: Any
    layers: Any
    tp: Any
    flops: Any
    hbm: Any
    link: Any


def _weight_bytes(m: _ModelArrays, c: _CfgArrays, tokens):
    """Weight bytes a step over ``tokens`` tokens reads per GPU.  MoE: only the experts touched,
    tokens routed uniformly at random: ``E (1 - (1 - k/E)^tokens)`` distinct experts per layer."""
    e, k = m.experts, m.active
    touched = e * (1.0 - np.power(1.0 - k / e, np.asarray(tokens, dtype=float)))
    mlp_read = np.where(e > 1, m.mlp * touched / e, m.mlp)
    return (m.params - m.unread - m.mlp + mlp_read) * c.wb / c.tp


def _step_physics(m: _ModelArrays, c: _CfgArrays, b, input_tokens, output_tokens) -> _Step:
    b = np.asarray(b, dtype=float)
    i = np.asarray(input_tokens, dtype=float)
    hd = m.heads * m.head_dim
    kv_tok = 2.0 * m.layers * _kv_local(m, c) * m.head_dim * c.kvb      # bytes per token per GPU
    n_pre = b * i
    return _Step(
        p_gemm_flops=2.0 * (m.body * n_pre + m.head * b) / c.tp,
        p_weight_bytes=_weight_bytes(m, c, n_pre),
        p_attn_flops=2.0 * b * i * i * hd * m.layers / c.tp,
        p_kv_bytes=n_pre * kv_tok,
        p_ar_bytes=n_pre * m.hidden * 2.0,
        d_gemm_flops=2.0 * (m.body + m.head) * b / c.tp,
        d_weight_bytes=_weight_bytes(m, c, b),
        d_attn_flops_per_ctx=4.0 * b * hd * m.layers / c.tp,
        d_kv_bytes_per_ctx=b * kv_tok,
        d_ar_bytes=b * m.hidden * 2.0,
        ctx0=i, steps=np.asarray(output_tokens, dtype=float), b=b,
        layers=m.layers, tp=c.tp, flops=c.flops, hbm=c.hbm, link=c.link,
    )


def _comm(s: _Step, ar_bytes, eff: Efficiency):
    """Two all-reduces per layer of ``ar_bytes`` each (ring: 2 (tp-1)/tp of the bytes cross
    each GPU's link), plus a latency per call."""
    tp = np.asarray(s.tp, dtype=float)
    link = np.where(np.asarray(s.link) > 0, s.link, 1.0)
    t = 2.0 * s.layers * (eff.alpha_s + 2.0 * (tp - 1) / tp * ar_bytes / (eff.eta_link * link))
    return np.where(tp > 1, t, 0.0)


def _prefill_time(s: _Step, eff: Efficiency):
    f, mb = eff.eta_flops * s.flops, eff.eta_hbm * s.hbm
    gpu = (np.maximum(s.p_gemm_flops / f, s.p_weight_bytes / mb)
           + np.maximum(s.p_attn_flops / f, s.p_kv_bytes / mb) + _comm(s, s.p_ar_bytes, eff))
    return np.maximum(gpu, s.layers * eff.t_layer_s) + eff.t_fixed_s + s.b * eff.t_seq_s


def _decode_parts(s: _Step, eff: Efficiency):
    """A decode step at context c takes ``max(a + k c, cpu) + t_fixed``: (a, k, cpu)."""
    f, mb = eff.eta_flops * s.flops, eff.eta_hbm * s.hbm
    a = np.maximum(s.d_gemm_flops / f, s.d_weight_bytes / mb) + _comm(s, s.d_ar_bytes, eff)
    k = np.maximum(s.d_attn_flops_per_ctx / f, s.d_kv_bytes_per_ctx / mb)
    return a, k, s.layers * eff.t_layer_s


def _decode_total(s: _Step, eff: Efficiency):
    """Sum of the decode steps' times (contexts ctx0 .. ctx0+steps-1), exact: ``max(a + k c,
    cpu)`` is flat below the crossing and linear above it."""
    a, k, cpu = _decode_parts(s, eff)
    c0, n = np.asarray(s.ctx0, dtype=float), np.asarray(s.steps, dtype=float)
    kk = np.where(k > 0, k, 1.0)
    j = np.clip(np.ceil((cpu - a) / kk - c0), 0.0, n)  # first step with a + k c >= cpu
    j = np.where(k > 0, j, np.where(a >= cpu, 0.0, n))
    rest = n - j
    lin = rest * a + k * (rest * (c0 + j) + rest * (rest - 1) / 2.0)
    return j * cpu + lin + n * (eff.t_fixed_s + s.b * eff.t_seq_s)


def _decode_step(s: _Step, eff: Efficiency, ctx):
    a, k, cpu = _decode_parts(s, eff)
    return np.maximum(a + k * np.asarray(ctx, dtype=float), cpu) + eff.t_fixed_s + s.b * eff.t_seq_s


def _wave_latency(s: _Step, eff: Efficiency):
    return _prefill_time(s, eff) + _decode_total(s, eff)


def _scalar(model: LlmModel, cfg: LlmConfig) -> tuple[_ModelArrays, _CfgArrays]:
    _check_pair(model, cfg)
    return _model_arrays(model), _cfg_arrays(cfg)


def prefill_s(model: LlmModel, cfg: LlmConfig, batch: int, input_tokens: int) -> float:
    """Seconds to prefill ``batch`` prompts of ``input_tokens`` tokens (one engine step)."""
    _check_batch(batch)
    _check_tokens(input_tokens, 0, output_min=0)
    m, c = _scalar(model, cfg)
    return float(_prefill_time(_step_physics(m, c, batch, input_tokens, 0), c.eff))


def decode_step_s(model: LlmModel, cfg: LlmConfig, batch: int, context_tokens: int) -> float:
    """Seconds of one decode step of ``batch`` sequences whose context is ``context_tokens``
    tokens each (prompt + tokens generated so far)."""
    _check_batch(batch)
    _check_tokens(context_tokens, 0, output_min=0)
    m, c = _scalar(model, cfg)
    return float(_decode_step(_step_physics(m, c, batch, context_tokens, 1), c.eff, context_tokens))


def _batch_latency(m: _ModelArrays, c: _CfgArrays, batch, input_tokens, output_tokens, conc=None):
    """Seconds to run ``batch`` sequences in waves of at most ``conc`` (default: the largest
    batch that fits) at once; inf where none fits."""
    batch = np.asarray(batch, dtype=float)
    if conc is None:
        conc = _concurrency(m, c, input_tokens, output_tokens)
    conc = np.minimum(np.asarray(conc, dtype=float), batch)
    ok = conc >= 1
    w = np.where(ok, conc, 1.0)
    full, rest = np.floor(batch / w), np.mod(batch, w)
    t_full = _wave_latency(_step_physics(m, c, w, input_tokens, output_tokens), c.eff)
    t_rest = _wave_latency(_step_physics(m, c, np.maximum(rest, 1.0), input_tokens, output_tokens), c.eff)
    t = full * t_full + np.where(rest > 0, t_rest, 0.0)
    return np.where(ok, t, np.inf)


def batch_latency_s(model: LlmModel, cfg: LlmConfig, batch: int, input_tokens: int, output_tokens: int) -> float:
    """Seconds to finish ``batch`` sequences (prefill + every decode step), as an offline engine
    runs them: all at once when their KV cache fits, else in waves of the largest batch that
    fits.  ``inf`` when not even one sequence fits."""
    _check_batch(batch)
    _check_tokens(input_tokens, output_tokens)
    m, c = _scalar(model, cfg)
    return float(_batch_latency(m, c, batch, input_tokens, output_tokens))


def batch_latencies_s(model: LlmModel, cfg: LlmConfig, batches: Sequence[int],
                      input_tokens: Sequence[int], output_tokens: Sequence[int]) -> np.ndarray:
    """:func:`batch_latency_s` of several batches at once on one configuration (element ``i``:
    ``batches[i]`` sequences of ``input_tokens[i]`` + ``output_tokens[i]`` tokens), one
    evaluation of the model's arrays: shape ``(len(batches),)``, seconds, ``inf`` where not
    even one sequence fits.  The same figures as :func:`batch_latency_s` element by element
    (the model is elementwise).  InvalidArgument names ``batches[i]`` / ``input_tokens[i]`` /
    ``output_tokens[i]`` for a bad element, ``batches`` for lengths that differ or none."""
    n = len(batches)
    if n == 0 or len(input_tokens) != n or len(output_tokens) != n:
        raise InvalidArgument("batches", n, "one or more, as many as input_tokens and "
                              f"output_tokens ({len(input_tokens)}, {len(output_tokens)})")
    for i in range(n):
        try:
            _check_batch(batches[i])
            _check_tokens(input_tokens[i], output_tokens[i])
        except InvalidArgument as e:
            raise InvalidArgument(f"{'batches' if e.field == 'batch' else e.field}[{i}]",
                                  e.value, e.allowed) from None
    m, c = _scalar(model, cfg)
    return _batch_latency(m, c, np.asarray(batches, dtype=float),
                          np.asarray(input_tokens, dtype=float),
                          np.asarray(output_tokens, dtype=float))


def _tokens_per_s(m: _ModelArrays, c: _CfgArrays, input_tokens, output_tokens, batch=None):
    b = _concurrency(m, c, input_tokens, output_tokens)
    if batch is not None:
        b = np.minimum(b, batch)
    ok = b >= 1
    bb = np.where(ok, b, 1.0)
    lat = _wave_latency(_step_physics(m, c, bb, input_tokens, output_tokens), c.eff)
    return np.where(ok, c.replicas * bb * (np.asarray(input_tokens, float) + output_tokens) / lat, 0.0), b


def tokens_per_s(model: LlmModel, cfg: LlmConfig, input_tokens: int, output_tokens: int) -> float:
    """Steady-state throughput of the job in prompt + generated tokens/s (as LLM-Inference-Bench
    counts), all replicas, at the largest batch that fits (or ``cfg.max_batch``); 0.0 when it
    does not fit."""
    _check_tokens(input_tokens, output_tokens)
    m, c = _scalar(model, cfg)
    return float(_tokens_per_s(m, c, input_tokens, output_tokens)[0])


@dataclass(frozen=True)
class LlmGrid:
    """Jobs x configurations, evaluated at once (:func:`evaluate_grid`); arrays of shape
    (jobs, configurations).  ``batch``: sequences in flight (0: does not fit);
    ``tokens_per_s`` as :func:`tokens_per_s`; ``memory_gib``: per GPU, weights + workspace +
    the KV cache of ``batch`` sequences (what a booking needs); ``fits``."""

    tokens_per_s: np.ndarray
    batch: np.ndarray
    fits: np.ndarray
    weights_gib: np.ndarray
    memory_gib: np.ndarray


def evaluate_grid(models, cfgs, input_tokens, output_tokens) -> LlmGrid:
    """Every job (``models[j]`` with ``input_tokens[j]`` / ``output_tokens[j]`` per sequence)
    in every configuration ``cfgs[c]``, vectorised -- what building a round's shape families
    needs.  A model that cannot be split over a configuration's TP degree does not fit there
    (no error); a malformed configuration raises InvalidArgument."""
    models = list(models)
    cfgs = list(cfgs)
    if not models or not cfgs:
        shape = (len(models), len(cfgs))
        return LlmGrid(np.zeros(shape), np.zeros(shape, int), np.zeros(shape, bool), np.zeros(shape), np.zeros(shape))
    for j, mdl in enumerate(models):
        if not isinstance(mdl, LlmModel):
            raise InvalidArgument(f"models[{j}]", type(mdl).__name__, "an LlmModel")
    i = np.asarray(input_tokens, dtype=float).reshape(-1, 1)
    o = np.asarray(output_tokens, dtype=float).reshape(-1, 1)
    for f, v in (("input_tokens", i), ("output_tokens", o)):
        if v.shape[0] != len(models) or not np.all(np.isfinite(v)) or np.any(v < 1) or np.any(v != np.floor(v)):
            raise InvalidArgument(f, v.ravel()[:8].tolist(), f"{len(models)} integers >= 1 (one per model)")
    m = _model_arrays(models, (len(models), 1))
    c = _cfg_arrays(cfgs, (1, len(cfgs)))
    tps, b = _tokens_per_s(m, c, i, o)
    weights, kv_tok, work, _, _, _, _ = _memory_arrays(m, c)
    mem = weights + work + b * (i + o) * kv_tok
    fits = b >= 1
    return LlmGrid(tps, b.astype(int), fits, np.broadcast_to(weights, fits.shape), np.where(fits, mem, 0.0))
