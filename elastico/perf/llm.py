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
      t_step = max(t_gemm + t_attn + t_comm, L * t_layer) + t_fixed

  ``P`` peak dense FLOP/s of the compute precision, ``BW`` HBM bandwidth, ``B_link`` NVLink
  bandwidth per direction (half the catalogue's bidirectional figure; PCIe without NVLink),
  ``S`` the activation bytes all-reduced.  ``L * t_layer`` is the host's kernel-launch time,
  overlapped with the GPU (it binds only in eager mode); ``t_fixed`` is the per-step
  scheduling/sampling overhead.  Prefill: one step over ``batch * input`` tokens (FLOPs
  ``2 P_body`` per token + causal attention ``2 input^2 heads head_dim L`` per sequence).
  Decode: one step per output token; attention reads the whole KV cache (linear in the
  context), MoE reads the experts the batch's tokens touch (``E (1 - (1 - k/E)^b)``).  A
  batch larger than the KV cache holds runs in waves.
* **Partitions**: an MPS share scales the SMs (peak FLOP/s x share); HBM bandwidth and memory
  are not partitioned by MPS (NVIDIA MPS docs: the active-thread percentage limits SMs only).
  A MIG instance gets ``compute_slices / C`` of the SMs, ``memory_slices / M`` of the memory
  bandwidth and its profile's memory (NVIDIA MIG user guide: a GPU instance owns its memory
  slices, i.e. their DRAM, L2 slices and memory controllers); no NVLink, so tp = 1.
* **Efficiencies** ``eta_flops, eta_hbm, t_fixed, t_layer`` per (GPU generation, engine) are
  fitted (``bench/llm_model.py --fit``) to the bundled measurements; ``alpha, eta_link`` per
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
from typing import Any, Mapping

import numpy as np

from elastico import hardware, mig
from elastico.errors import InvalidArgument

__all__ = [
    "LlmModel", "LLM_MODELS", "llm_model", "from_hf_config",
    "LlmConfig", "LlmMemory", "Efficiency", "ENGINES", "DTYPES",
    "memory", "max_batch", "prefill_s", "decode_step_s", "batch_latency_s", "tokens_per_s",
    "efficiency", "ROOFLINE",
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
        raise InvalidArgument(f"config.{keys[0]}", None, "present (also accepted: " + ", ".join(keys[1:]) + ")"
                              if len(keys) > 1 else "present")
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
    instance).  Checked when used (:func:`memory`), not on construction.
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
    per generation the all-reduce latency per call (``alpha_s``) and achieved fraction of the
    link bandwidth (``eta_link``); ``origin``: where they come from."""

    eta_flops: float = 1.0
    eta_hbm: float = 1.0
    t_fixed_s: float = 0.0
    t_layer_s: float = 0.0
    alpha_s: float = 0.0
    eta_link: float = 1.0
    origin: str = "roofline"


#: Pure roofline: the datasheet's peaks reached, no overhead (the ``physics`` fit of the bench).
ROOFLINE = Efficiency()

CONSTANTS_FILE = Path(__file__).with_name("llm_constants.json")
_EFF_FIELDS = ("eta_flops", "eta_hbm", "t_fixed_s", "t_layer_s")
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
# the resources one replica's GPU gets
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Gpu:
    """What one GPU of the TP group gives the job after MPS/MIG partitioning."""

    flops: float          # peak dense FLOP/s of the compute precision
    hbm: float            # bytes/s
    link: float           # bytes/s per direction between the TP group's GPUs (0: tp = 1)
    memory_gib: float     # memory the job may use
    generation: str


def _check_cfg(model: LlmModel, cfg: LlmConfig) -> tuple[Any, EngineSpec, float, float]:
    """Validate ``cfg`` for ``model``; the GPU spec, engine, weight and KV bytes."""
    if not isinstance(model, LlmModel):
        raise InvalidArgument("model", type(model).__name__, "an LlmModel (llm_model(name) or from_hf_config)")
    if not isinstance(cfg, LlmConfig):
        raise InvalidArgument("config", type(cfg).__name__, "an LlmConfig")
    if cfg.engine not in ENGINES:
        raise InvalidArgument("engine", cfg.engine, "one of " + ", ".join(ENGINES))
    if cfg.dtype not in DTYPE_BYTES:
        raise InvalidArgument("dtype", cfg.dtype, "one of " + ", ".join(DTYPES))
    kv = _kv_dtype(cfg)
    if kv not in KV_DTYPES:
        raise InvalidArgument("kv_dtype", cfg.kv_dtype, "one of " + ", ".join(KV_DTYPES))
    for f in ("tp", "replicas"):
        v = getattr(cfg, f)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(f, v, "an integer >= 1")
    if model.heads % cfg.tp:
        raise InvalidArgument("tp", cfg.tp, f"a divisor of the model's heads={model.heads}")
    if cfg.tp > model.kv_heads and cfg.tp % model.kv_heads:
        raise InvalidArgument("tp", cfg.tp, f"a divisor or multiple of the model's kv_heads={model.kv_heads}")
    if cfg.tp < model.kv_heads and model.kv_heads % cfg.tp:
        raise InvalidArgument("tp", cfg.tp, f"a divisor of the model's kv_heads={model.kv_heads}")
    if cfg.max_batch is not None and (isinstance(cfg.max_batch, bool) or not isinstance(cfg.max_batch, (int, np.integer))
                                      or cfg.max_batch < 1):
        raise InvalidArgument("max_batch", cfg.max_batch, "an integer >= 1, or None (the engine's limit)")
    if cfg.mps_share is not None and cfg.mig_profile is not None:
        raise InvalidArgument("mps_share", cfg.mps_share, "None when mig_profile is set (MPS or MIG, not both)")
    s = cfg.mps_share
    if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not (0 < s <= 1)):
        raise InvalidArgument("mps_share", s, "a fraction in (0, 1], or None (the whole GPU)")
    lim = cfg.memory_limit_gib
    if lim is not None and (isinstance(lim, bool) or not isinstance(lim, (int, float))
                            or not math.isfinite(lim) or lim <= 0):
        raise InvalidArgument("memory_limit_gib", lim, "a finite number of GiB > 0, or None")
    spec = _gpu_spec(cfg.gpu)
    if cfg.mig_profile is not None and cfg.tp != 1:
        raise InvalidArgument("tp", cfg.tp, "1 with a MIG profile (MIG instances have no NVLink/P2P between them)")
    return spec, ENGINES[cfg.engine], DTYPE_BYTES[cfg.dtype], DTYPE_BYTES[kv]


def _kv_dtype(cfg: LlmConfig) -> str:
    if cfg.kv_dtype is not None:
        return cfg.kv_dtype
    return "fp8" if cfg.dtype == "fp8" else ("bf16" if cfg.dtype == "bf16" else "fp16")


def _gpu_spec(name: str):
    try:
        return hardware.gpu_spec(name)
    except InvalidArgument as e:
        raise InvalidArgument("gpu", name, e.allowed) from None
    except (KeyError, LookupError):
        raise InvalidArgument("gpu", name, "one of " + ", ".join(getattr(hardware, "GPUS", {}))) from None


def _peak_flops(spec, dtype: str) -> float:
    peaks = spec.peak_tflops
    v = peaks.get(_COMPUTE_KEY[dtype]) or 0.0
    if not v:  # no such tensor-core precision (e.g. fp8 before Hopper): weight-only, 16-bit math
        v = peaks.get("fp16") or peaks.get("bf16") or 0.0
    return float(v) * 1e12


def _mig_profile(spec, profile: str) -> mig.MigProfile:
    if not getattr(spec, "mig", False):
        raise InvalidArgument("mig_profile", profile, f"None: {spec.name} has no MIG")
    for key in (spec.name, *getattr(spec, "mig_names", ())):
        if key in mig.MIG_PROFILES:
            profiles = mig.MIG_PROFILES[key]
            if profile not in profiles:
                raise InvalidArgument("mig_profile", profile, f"one of {', '.join(profiles)} on {spec.name}")
            return profiles[profile]
    raise InvalidArgument("mig_profile", profile, f"None: no MIG geometry known for {spec.name}")


def _resources(spec, cfg: LlmConfig) -> _Gpu:
    flops = _peak_flops(spec, cfg.dtype)
    hbm = float(spec.hbm_gbps) * 1e9
    mem = float(spec.memory_gib)
    if cfg.mig_profile is not None:
        p = _mig_profile(spec, cfg.mig_profile)
        flops *= p.compute_slices / p.gpu_compute_slices
        hbm *= p.memory_slices / p.gpu_memory_slices
        mem = min(mem, p.memory_gib)
    elif cfg.mps_share is not None:
        flops *= float(cfg.mps_share)
    if cfg.memory_limit_gib is not None:
        mem = min(mem, float(cfg.memory_limit_gib))
    link = 0.0
    if cfg.tp > 1:
        bidir = spec.nvlink_gbps if spec.nvlink_gbps else spec.pcie_gbps
        link = float(bidir) * 1e9 / 2.0
    return _Gpu(flops, hbm, link, mem, str(spec.generation))


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------

def _activation_gib(model: LlmModel, tp: int, tokens: int) -> float:
    """Peak activations of one forward pass over ``tokens`` tokens, per GPU, 16-bit: the
    residual stream and the attention block (about 4 hidden per token) plus the MLP's widest
    tensors (2 intermediate / tp, the gate and up projections) -- ASSUMPTION: a forward pass
    keeps about that much alive at once (inference frees each layer's activations)."""
    per_token = (4.0 * model.hidden + 2.0 * model.intermediate * model.experts_active / tp) * 2.0
    return tokens * per_token / GIB


def memory(model: LlmModel, cfg: LlmConfig) -> LlmMemory:
    """Memory of one replica per GPU of its TP group, and how many KV tokens fit."""
    spec, eng, wb, kvb = _check_cfg(model, cfg)
    res = _resources(spec, cfg)
    return _memory(model, cfg, eng, wb, kvb, res.memory_gib)


def _memory(model: LlmModel, cfg: LlmConfig, eng: EngineSpec, wb: float, kvb: float,
            mem_gib: float) -> LlmMemory:
    tp = cfg.tp
    weights = model.params_b * 1e9 * wb / tp / GIB
    kv_local = max(1, model.kv_heads // tp)
    kv_tok = 2.0 * model.layers * kv_local * model.head_dim * kvb / GIB
    work = RUNTIME_RESERVE_GIB + _activation_gib(model, tp, eng.prefill_chunk_tokens)
    if eng.memory_of_free:
        avail = eng.memory_fraction * (mem_gib - weights - work)
    else:
        avail = eng.memory_fraction * mem_gib - weights - work
    tokens = int(math.floor(avail / kv_tok)) if avail > 0 else 0
    if weights + work > mem_gib * (1.0 if eng.memory_of_free else eng.memory_fraction):
        reason = (f"weights {weights:.1f} GiB + workspace {work:.1f} GiB per GPU exceed the "
                  f"{mem_gib * (1.0 if eng.memory_of_free else eng.memory_fraction):.1f} GiB {eng.name} may use")
        return LlmMemory(weights, kv_tok, work, avail, 0, False, reason)
    if tokens < 1:
        return LlmMemory(weights, kv_tok, work, avail, 0, False, "no room left for the KV cache")
    return LlmMemory(weights, kv_tok, work, avail, tokens, True, "")


def max_batch(model: LlmModel, cfg: LlmConfig, input_tokens: int, output_tokens: int) -> int:
    """The most sequences of ``input_tokens + output_tokens`` whose whole KV cache fits at once,
    capped by ``cfg.max_batch`` and the engine's limit; 0 when not even one fits."""
    _check_tokens(input_tokens, output_tokens)
    m = memory(model, cfg)
    if not m.fits:
        return 0
    cap = ENGINES[cfg.engine].max_seqs if cfg.max_batch is None else int(cfg.max_batch)
    return int(min(cap, m.kv_tokens // (input_tokens + output_tokens)))


def _check_tokens(input_tokens: int, output_tokens: int, output_min: int = 1) -> None:
    for f, v, lo in (("input_tokens", input_tokens, 1), ("output_tokens", output_tokens, output_min)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise InvalidArgument(f, v, f"an integer >= {lo}")


def _check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise InvalidArgument("batch", batch, "an integer >= 1")


# --------------------------------------------------------------------------------------------
# time (vectorised: every quantity may be a numpy array of rows)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Step:
    """The physics of the engine steps of one wave of ``b`` sequences, per GPU of the TP group,
    independent of the efficiencies.  Prefill: one step.  Decode: ``steps`` steps whose context
    runs from ``ctx0`` to ``ctx0 + steps - 1``; attention terms are per context token."""

    # prefill
    p_gemm_flops: Any
    p_weight_bytes: Any
    p_attn_flops: Any
    p_kv_bytes: Any
    p_ar_bytes: Any
    # decode, per step
    d_gemm_flops: Any
    d_weight_bytes: Any
    d_attn_flops_per_ctx: Any
    d_kv_bytes_per_ctx: Any
    d_ar_bytes: Any
    ctx0: Any
    steps: Any
    # shared
    layers: Any
    tp: Any
    flops: Any
    hbm: Any
    link: Any


def _moe_weight_bytes(model: LlmModel, tokens, wb: float, tp: int):
    """Weight bytes a step over ``tokens`` tokens reads per GPU (MoE: only touched experts;
    tokens routed uniformly at random: ``E (1 - (1 - k/E)^tokens)`` distinct experts)."""
    total = model.params_b * 1e9
    # the input embedding is a lookup, not read whole (unless it is also the LM head)
    emb = 0.0 if model.tied_embeddings else float(model.vocab) * model.hidden
    if model.experts == 1:
        return (total - emb) * wb / tp + 0.0 * tokens
    e, k = model.experts, model.experts_active
    touched = e * (1.0 - (1.0 - k / e) ** np.asarray(tokens, dtype=float))
    mlp = model._mlp_params()
    return (total - emb - mlp + mlp * touched / e) * wb / tp


def _step_physics(model: LlmModel, cfg: LlmConfig, b, input_tokens, output_tokens, res: _Gpu,
                  wb: float, kvb: float) -> _Step:
    tp = cfg.tp
    b = np.asarray(b, dtype=float)
    i = np.asarray(input_tokens, dtype=float)
    o = np.asarray(output_tokens, dtype=float)
    hd = float(model.heads) * model.head_dim
    kv_local = max(1, model.kv_heads // tp)
    kv_tok = 2.0 * model.layers * kv_local * model.head_dim * kvb      # bytes per token per GPU
    n_pre = b * i
    return _Step(
        p_gemm_flops=2.0 * (model.body_params * n_pre + model.head_params * b) / tp,
        p_weight_bytes=_moe_weight_bytes(model, n_pre, wb, tp),
        p_attn_flops=2.0 * b * i * i * hd * model.layers / tp,
        p_kv_bytes=n_pre * kv_tok,
        p_ar_bytes=n_pre * model.hidden * 2.0,
        d_gemm_flops=2.0 * (model.body_params + model.head_params) * b / tp,
        d_weight_bytes=_moe_weight_bytes(model, b, wb, tp),
        d_attn_flops_per_ctx=4.0 * b * hd * model.layers / tp,
        d_kv_bytes_per_ctx=b * kv_tok,
        d_ar_bytes=b * model.hidden * 2.0,
        ctx0=i, steps=o,
        layers=float(model.layers), tp=float(tp), flops=res.flops, hbm=res.hbm, link=res.link,
    )


def _comm(s: _Step, ar_bytes, eff: Efficiency):
    if np.all(np.asarray(s.tp) <= 1):
        return 0.0 * np.asarray(ar_bytes, dtype=float)
    tp = np.asarray(s.tp, dtype=float)
    link = np.where(np.asarray(s.link) > 0, s.link, 1.0)
    t = 2.0 * s.layers * (eff.alpha_s + 2.0 * (tp - 1) / tp * ar_bytes / (eff.eta_link * link))
    return np.where(tp > 1, t, 0.0)


def _prefill_time(s: _Step, eff: Efficiency):
    f, m = eff.eta_flops * s.flops, eff.eta_hbm * s.hbm
    gpu = (np.maximum(s.p_gemm_flops / f, s.p_weight_bytes / m)
           + np.maximum(s.p_attn_flops / f, s.p_kv_bytes / m) + _comm(s, s.p_ar_bytes, eff))
    return np.maximum(gpu, s.layers * eff.t_layer_s) + eff.t_fixed_s


def _decode_parts(s: _Step, eff: Efficiency):
    """Per decode step ``max(a + k c, cpu) + t_fixed`` at context c: (a, k, cpu)."""
    f, m = eff.eta_flops * s.flops, eff.eta_hbm * s.hbm
    a = np.maximum(s.d_gemm_flops / f, s.d_weight_bytes / m) + _comm(s, s.d_ar_bytes, eff)
    k = np.maximum(s.d_attn_flops_per_ctx / f, s.d_kv_bytes_per_ctx / m)
    return a, k, s.layers * eff.t_layer_s


def _decode_total(s: _Step, eff: Efficiency):
    """Sum over the decode steps (context ctx0 .. ctx0+steps-1) of the step time, exact:
    ``max(a + k c, cpu)`` is linear in c above the crossing and flat below it."""
    a, k, cpu = _decode_parts(s, eff)
    c0, n = np.asarray(s.ctx0, dtype=float), np.asarray(s.steps, dtype=float)
    kk = np.where(k > 0, k, 1e-300)
    # first step index j at which a + k (c0 + j) >= cpu
    j = np.clip(np.ceil((cpu - a) / kk - c0), 0.0, n)
    j = np.where(k > 0, j, np.where(a >= cpu, 0.0, n))
    flat = j * cpu
    m = n - j  # steps above the crossing, contexts c0+j .. c0+n-1
    lin = m * a + k * (m * (c0 + j) + m * (m - 1) / 2.0)
    return flat + lin + n * eff.t_fixed_s


def _decode_step(s: _Step, eff: Efficiency, ctx):
    a, k, cpu = _decode_parts(s, eff)
    return np.maximum(a + k * np.asarray(ctx, dtype=float), cpu) + eff.t_fixed_s


def _wave_latency(s: _Step, eff: Efficiency):
    return _prefill_time(s, eff) + _decode_total(s, eff)


def _prepare(model: LlmModel, cfg: LlmConfig):
    spec, eng, wb, kvb = _check_cfg(model, cfg)
    res = _resources(spec, cfg)
    return spec, eng, wb, kvb, res, efficiency(res.generation, cfg.engine)


def prefill_s(model: LlmModel, cfg: LlmConfig, batch: int, input_tokens: int) -> float:
    """Seconds to prefill ``batch`` prompts of ``input_tokens`` tokens (one engine step)."""
    _check_batch(batch)
    _check_tokens(input_tokens, 0, output_min=0)
    _, _, wb, kvb, res, eff = _prepare(model, cfg)
    s = _step_physics(model, cfg, batch, input_tokens, 1, res, wb, kvb)
    return float(_prefill_time(s, eff))


def decode_step_s(model: LlmModel, cfg: LlmConfig, batch: int, context_tokens: int) -> float:
    """Seconds of one decode step of ``batch`` sequences whose context is ``context_tokens``
    tokens each (prompt + tokens generated so far)."""
    _check_batch(batch)
    _check_tokens(context_tokens, 0, output_min=0)
    _, _, wb, kvb, res, eff = _prepare(model, cfg)
    s = _step_physics(model, cfg, batch, context_tokens, 1, res, wb, kvb)
    return float(_decode_step(s, eff, context_tokens))


def _waves(batch: int, concurrency: int) -> list[tuple[int, int]]:
    """(sequences, how many such waves) for ``batch`` sequences at most ``concurrency`` at once."""
    full, rest = divmod(batch, concurrency)
    return [(concurrency, full)] * (full > 0) + [(rest, 1)] * (rest > 0)


def batch_latency_s(model: LlmModel, cfg: LlmConfig, batch: int, input_tokens: int, output_tokens: int) -> float:
    """Seconds to finish ``batch`` sequences (prefill + every decode step), as an offline engine
    runs them: all at once when their KV cache fits, else in waves of the largest batch that
    fits.  ``inf`` when not even one sequence fits."""
    _check_batch(batch)
    _check_tokens(input_tokens, output_tokens)
    _, eng, wb, kvb, res, eff = _prepare(model, cfg)
    conc = _concurrency(model, cfg, eng, wb, kvb, res, input_tokens, output_tokens)
    if conc == 0:
        return math.inf
    total = 0.0
    for b, times in _waves(batch, conc):
        s = _step_physics(model, cfg, b, input_tokens, output_tokens, res, wb, kvb)
        total += times * float(_wave_latency(s, eff))
    return total


def _concurrency(model, cfg, eng, wb, kvb, res, input_tokens, output_tokens) -> int:
    m = _memory(model, cfg, eng, wb, kvb, res.memory_gib)
    if not m.fits:
        return 0
    cap = eng.max_seqs if cfg.max_batch is None else int(cfg.max_batch)
    return int(min(cap, m.kv_tokens // (input_tokens + output_tokens)))


def tokens_per_s(model: LlmModel, cfg: LlmConfig, input_tokens: int, output_tokens: int) -> float:
    """Steady-state throughput of the job in prompt + generated tokens/s (as LLM-Inference-Bench
    counts), all replicas, at the largest batch that fits (or ``cfg.max_batch``); 0.0 when it
    does not fit."""
    _check_tokens(input_tokens, output_tokens)
    _, eng, wb, kvb, res, eff = _prepare(model, cfg)
    b = _concurrency(model, cfg, eng, wb, kvb, res, input_tokens, output_tokens)
    if b == 0:
        return 0.0
    s = _step_physics(model, cfg, b, input_tokens, output_tokens, res, wb, kvb)
    return float(cfg.replicas * b * (input_tokens + output_tokens) / _wave_latency(s, eff))
