"""The LLM inference model (elastico.perf.llm): roofline limits worked by hand, monotonicity,
MPS and MIG partitions, memory fit worked by hand (3 models x 3 GPUs x 2 TP degrees), "does not
fit", refused inputs (field, value, what is allowed), the grid agreeing with the scalar calls,
and the bundled constants reproduced by refitting the bundled data.

Datasheet figures used by hand below are the catalogue's (elastico.hardware): A100-40GB 1555
GB/s, 312 dense FP16 TFLOP/s, 40 GiB; A100-80GB 2039 GB/s, 80 GiB; H100-SXM 3350 GB/s, 989.5
TFLOP/s, 80 GiB.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.perf import llm
from elastico.perf.llm import LlmConfig, LlmModel

GIB = 2.0 ** 30
LLAMA2_7B = llm.llm_model("Llama-2-7B")


@pytest.fixture
def roofline(monkeypatch):
    """The pure roofline: no fitted constants (efficiency 1, no overhead)."""
    monkeypatch.setattr(llm, "_constants", lambda *a, **k: {"engines": {}, "links": {}})
    llm._cfg_row.cache_clear()
    yield
    llm._cfg_row.cache_clear()


def cfg(gpu="A100-40GB", **kw) -> LlmConfig:
    return LlmConfig(gpu, **kw)


# --- roofline limits by hand ------------------------------------------------------------------

def test_a_7b_decode_step_cannot_beat_reading_its_weights(roofline):
    # Llama-2-7B: 6.738e9 parameters; the input embedding (32000 x 4096 = 0.131e9) is only
    # looked up, every other weight is read once per step: (6.738e9 - 0.131e9) x 2 bytes =
    # 13.214 GB.  A100-40GB 1555 GB/s -> 8.498 ms; the KV cache of 128 tokens adds 128 x
    # 2 x 32 layers x 32 heads x 128 x 2 bytes = 67.1 MB -> 0.043 ms.
    weights = (6.738e9 - 32000 * 4096) * 2
    kv = 128 * 2 * 32 * 32 * 128 * 2
    t = llm.decode_step_s(LLAMA2_7B, cfg(), 1, 128)
    assert t >= weights / 1555e9
    assert t == pytest.approx((weights + kv) / 1555e9, rel=1e-9)


def test_the_fitted_model_is_slower_than_the_roofline_never_faster():
    for gpu in ("A100-40GB", "A100-80GB", "H100-SXM"):
        weights = (6.738e9 - 32000 * 4096) * 2
        assert llm.decode_step_s(LLAMA2_7B, cfg(gpu), 1, 128) > weights / (
            {"A100-40GB": 1555e9, "A100-80GB": 2039e9, "H100-SXM": 3350e9}[gpu])


def test_prefill_of_a_long_prompt_is_bound_by_flops(roofline):
    # 2048 tokens: matmuls 2 x (6.738e9 - 2 x 0.131e9 embedding and head) x 2048 + the LM head
    # on the last token 2 x 0.131e9; causal attention 2 x 2048^2 x 4096 x 32 layers.  At 312
    # TFLOP/s: 27.3e12 / 312e12 = 87.5 ms (weights 13.2 GB / 1555 GB/s = 8.5 ms: compute binds).
    body = 6.738e9 - 2 * 32000 * 4096
    flops = 2 * body * 2048 + 2 * 32000 * 4096 + 2 * 2048 ** 2 * 4096 * 32
    assert llm.prefill_s(LLAMA2_7B, cfg(), 1, 2048) == pytest.approx(flops / 312e12, rel=1e-9)


def test_tensor_parallel_adds_two_all_reduces_per_layer(roofline):
    # TP2 on A100 (NVLink 600 GB/s bidirectional -> 300 GB/s each way): decode at batch 1 moves
    # 4096 x 2 bytes per all-reduce, 2 x 32 of them; a ring sends 2 (n-1)/n of the bytes.
    one = llm.decode_step_s(LLAMA2_7B, cfg(), 1, 128)
    two = llm.decode_step_s(LLAMA2_7B, cfg(tp=2), 1, 128)
    comm = 2 * 32 * (2 * 1 / 2 * 4096 * 2 / 300e9)
    assert two == pytest.approx(one / 2 + comm, rel=1e-9)


def test_moe_decode_reads_only_the_experts_its_tokens_touch(roofline):
    mix = llm.llm_model("Mixtral-8x7B")
    # one token: 2 of 8 experts; 64 tokens: all 8 with near certainty (1 - (6/8)^64 ~ 1)
    assert mix.active_params_b == pytest.approx(12.88, abs=0.01)
    one = llm.decode_step_s(mix, cfg("H100-SXM", tp=2), 1, 1)
    full = llm.decode_step_s(mix, cfg("H100-SXM", tp=2), 64, 1)
    assert one < 0.35 * full


# --- monotonicity -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Llama-2-7B", "Llama-3-8B", "Mixtral-8x7B"])
def test_more_sms_are_never_slower(name):
    m = llm.llm_model(name)
    gpu = "H100-SXM" if name == "Mixtral-8x7B" else "A100-80GB"
    tp = 2 if name == "Mixtral-8x7B" else 1
    shares = [0.1, 0.25, 0.5, 0.75, 1.0]
    tps = [llm.tokens_per_s(m, cfg(gpu, tp=tp, mps_share=s), 512, 256) for s in shares]
    assert all(b >= a for a, b in zip(tps, tps[1:])), tps
    pre = [llm.prefill_s(m, cfg(gpu, tp=tp, mps_share=s), 8, 1024) for s in shares]
    assert all(b <= a for a, b in zip(pre, pre[1:])), pre
    mig = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    if name != "Mixtral-8x7B":
        steps = [llm.decode_step_s(m, cfg("A100-80GB", mig_profile=p), 4, 512) for p in mig]
        assert all(b <= a for a, b in zip(steps, steps[1:])), steps


@pytest.mark.parametrize("name, gpu, tp", [("Llama-2-7B", "A100-40GB", 1), ("Llama-3-8B", "H100-SXM", 1),
                                           ("Llama-2-70B", "A100-80GB", 4), ("Mixtral-8x7B", "H100-SXM", 2)])
def test_a_bigger_batch_never_gives_fewer_tokens_per_s_until_memory_runs_out(name, gpu, tp):
    m, c = llm.llm_model(name), cfg(gpu, tp=tp)
    i, o = 512, 512
    top = llm.max_batch(m, c, i, o)
    assert top >= 8
    rates = [b * (i + o) / llm.batch_latency_s(m, c, b, i, o) for b in range(1, top + 1)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(rates, rates[1:]))
    assert llm.tokens_per_s(m, c, i, o) == pytest.approx(rates[-1])


# --- MPS and MIG --------------------------------------------------------------------------------

def test_mps_shares_sms_not_memory_bandwidth(roofline):
    c = dict(gpu="A100-80GB")
    # decode at batch 1 is bound by HBM: a 30 % share of the SMs reads as fast
    assert llm.decode_step_s(LLAMA2_7B, cfg(**c, mps_share=0.3), 1, 128) == pytest.approx(
        llm.decode_step_s(LLAMA2_7B, cfg(**c), 1, 128))
    # a long prefill is bound by FLOPs: half the SMs, twice the time
    assert llm.prefill_s(LLAMA2_7B, cfg(**c, mps_share=0.5), 1, 4096) == pytest.approx(
        2 * llm.prefill_s(LLAMA2_7B, cfg(**c), 1, 4096))
    # MPS does not partition memory: the whole GPU's
    assert llm.memory(LLAMA2_7B, cfg(**c, mps_share=0.3)) == llm.memory(LLAMA2_7B, cfg(**c))


def test_the_planning_figure_scales_bandwidth_by_the_share_too(roofline):
    # hbm_by_share (the placer's planning figure, docs/model.md 7.): a decode step at batch 1
    # reads the 13.2 GB of Llama-2-7B's weights; at a 30 % share over 30 % of A100-80GB's
    # 2039 GB/s it takes 1/0.3 as long as on the whole GPU (the roofline: bandwidth-bound
    # both ways), where plain MPS (bandwidth unpartitioned) takes as long as the whole GPU
    c = dict(gpu="A100-80GB")
    whole = llm.decode_step_s(LLAMA2_7B, cfg(**c), 1, 128)
    assert llm.decode_step_s(LLAMA2_7B, cfg(**c, mps_share=0.3, hbm_by_share=True), 1, 128) \
        == pytest.approx(whole / 0.3)
    # a long prefill is FLOP-bound: the planning figure changes nothing there
    assert llm.prefill_s(LLAMA2_7B, cfg(**c, mps_share=0.5, hbm_by_share=True), 1, 4096) \
        == pytest.approx(llm.prefill_s(LLAMA2_7B, cfg(**c, mps_share=0.5), 1, 4096))
    # no effect without a share, nor on a MIG instance (which owns its bandwidth slices)
    assert llm.decode_step_s(LLAMA2_7B, cfg(**c, hbm_by_share=True), 1, 128) == whole
    mig = dict(gpu="A100-80GB", mig_profile="3g.40gb")
    assert llm.decode_step_s(LLAMA2_7B, cfg(**mig, hbm_by_share=True), 1, 128) \
        == llm.decode_step_s(LLAMA2_7B, cfg(**mig), 1, 128)


def test_mig_slices_partition_sms_memory_and_bandwidth(roofline):
    # 3g.40gb on A100-80GB: 3 of 7 SM slices, 4 of 8 memory slices (40 GiB, half the 2039 GB/s)
    whole, part = cfg("A100-80GB"), cfg("A100-80GB", mig_profile="3g.40gb")
    assert llm.decode_step_s(LLAMA2_7B, part, 1, 128) == pytest.approx(
        2 * llm.decode_step_s(LLAMA2_7B, whole, 1, 128))
    assert llm.prefill_s(LLAMA2_7B, part, 1, 4096) == pytest.approx(
        7 / 3 * llm.prefill_s(LLAMA2_7B, whole, 1, 4096))
    mem = llm.memory(LLAMA2_7B, part)
    assert mem.available_gib == pytest.approx(0.9 * 40 - mem.weights_gib - mem.workspace_gib)
    # H100-80GB is the MIG tables' name of H100-SXM
    assert llm.memory(LLAMA2_7B, cfg("H100-SXM", mig_profile="2g.20gb")).fits


@pytest.mark.parametrize("kw, field, needle", [
    (dict(gpu="A100-80GB", mig_profile="3g.40gb", tp=2), "tp", "MIG"),
    (dict(gpu="A100-80GB", mig_profile="3g.40gb", mps_share=0.5), "mps_share", "MPS or MIG"),
    (dict(gpu="L40S", mig_profile="1g.10gb"), "mig_profile", "L40S has no MIG"),
    (dict(gpu="A100-80GB", mig_profile="1g.5gb"), "mig_profile", "1g.10gb"),
    (dict(gpu="A100-80GB", mps_share=0.0), "mps_share", "(0, 1]"),
    (dict(gpu="A100-80GB", mps_share=1.5), "mps_share", "(0, 1]"),
    (dict(gpu="Z100"), "gpu", "A100-80GB"),
    (dict(gpu="G2"), "gpu", "peak FLOP/s"),
    (dict(gpu="A100-80GB", engine="tgi"), "engine", "vllm"),
    (dict(gpu="A100-80GB", dtype="fp4"), "dtype", "fp16"),
    (dict(gpu="A100-80GB", kv_dtype="int4"), "kv_dtype", "fp8"),
    (dict(gpu="A100-80GB", tp=0), "tp", ">= 1"),
    (dict(gpu="A100-80GB", replicas=True), "replicas", ">= 1"),
    (dict(gpu="A100-80GB", max_batch=0), "max_batch", ">= 1"),
    (dict(gpu="A100-80GB", memory_limit_gib=-1.0), "memory_limit_gib", "> 0"),
    (dict(gpu="A100-80GB", mps_share=0.5, hbm_by_share=1), "hbm_by_share", "True or False"),
    (dict(gpu="A100-80GB", tp=3), "tp", "heads=32"),
])
def test_bad_configurations_are_refused_naming_field_value_and_allowed(kw, field, needle):
    with pytest.raises(InvalidArgument) as e:
        llm.memory(LLAMA2_7B, LlmConfig(**kw))
    assert e.value.field == field
    assert needle in e.value.allowed
    assert e.value.value == kw.get(field, kw.get("gpu"))


# --- memory by hand ------------------------------------------------------------------------------

#: (parameters, layers, KV heads, hidden, intermediate) from the models' config.json
HAND = {"Llama-2-7B": (6.738e9, 32, 32, 4096, 11008), "Mistral-7B": (7.242e9, 32, 8, 4096, 14336),
        "Llama-2-13B": (13.016e9, 40, 40, 5120, 13824)}
GPU_GIB = {"A100-40GB": 40, "A100-80GB": 80, "H100-SXM": 80}


def hand_max_batch(name: str, gpu: str, tp: int, tokens: int) -> int:
    """vLLM's rule written out: the engine may use 0.9 of the GPU; weights (2 bytes each) / tp,
    1 GiB runtime reserve + the activations of a 2048-token pass (4 hidden + 2 intermediate / tp
    values of 2 bytes per token) are taken first; the rest holds KV tokens of 2 (K and V) x
    layers x KV heads / tp x 128 (head_dim) x 2 bytes; at most 256 sequences."""
    params, layers, kv, hidden, inter = HAND[name]
    weights = params * 2 / tp / GIB
    work = 1 + 2048 * (4 * hidden + 2 * inter / tp) * 2 / GIB
    kv_token = 2 * layers * (kv / tp) * 128 * 2 / GIB
    tokens_fit = math.floor((0.9 * GPU_GIB[gpu] - weights - work) / kv_token)
    return min(256, tokens_fit // tokens)


def test_a_worked_memory_example():
    # Llama-2-7B on one A100-40GB: weights 6.738e9 x 2 B = 12.5505 GiB; KV 2 x 32 x 32 x 128 x
    # 2 B = 0.5 MiB per token; workspace 1 + 2048 x (4 x 4096 + 2 x 11008) x 2 B = 1.1465 GiB;
    # KV room 0.9 x 40 - 12.5505 - 1.1465 = 22.303 GiB = 45,676 tokens: 44 sequences of 1,024.
    m = llm.memory(LLAMA2_7B, cfg())
    assert m.weights_gib == pytest.approx(12.5505, abs=1e-4)
    assert m.kv_per_token_gib == 0.5 / 1024
    assert m.workspace_gib == pytest.approx(1.146484375)
    assert m.kv_tokens == 45676 and m.fits
    assert llm.max_batch(LLAMA2_7B, cfg(), 512, 512) == 44


@pytest.mark.parametrize("name", sorted(HAND))
@pytest.mark.parametrize("gpu", sorted(GPU_GIB))
@pytest.mark.parametrize("tp", [1, 2])
def test_the_largest_batch_that_fits_agrees_with_the_hand_calculation(name, gpu, tp):
    assert llm.max_batch(llm.llm_model(name), cfg(gpu, tp=tp), 1000, 1000) == hand_max_batch(name, gpu, tp, 2000)


def test_a_configuration_that_does_not_fit_says_so_everywhere():
    big = llm.llm_model("Llama-2-70B")  # 128.5 GiB of fp16 weights
    c = cfg("A100-80GB")
    m = llm.memory(big, c)
    assert not m.fits and m.kv_tokens == 0 and "weights 128.5 GiB" in m.reason
    assert llm.max_batch(big, c, 128, 128) == 0
    assert llm.tokens_per_s(big, c, 128, 128) == 0.0
    assert llm.batch_latency_s(big, c, 4, 128, 128) == math.inf
    grid = llm.evaluate_grid([big, LLAMA2_7B], [c, cfg("A100-80GB", tp=2)], [128, 128], [128, 128])
    assert grid.fits.tolist() == [[False, True], [True, True]]
    assert grid.tokens_per_s[0, 0] == 0.0 and grid.batch[0, 0] == 0 and grid.memory_gib[0, 0] == 0.0
    # weights fit but no sequence of 30,000 tokens does
    assert llm.max_batch(LLAMA2_7B, cfg("A100-40GB", mig_profile="3g.20gb"), 15000, 15000) == 0


def test_fp8_weights_halve_the_weights_and_use_the_fp8_peak_where_there_is_one(roofline):
    m8 = llm.memory(llm.llm_model("Llama-3-8B"), cfg("H100-SXM", dtype="fp8"))
    m16 = llm.memory(llm.llm_model("Llama-3-8B"), cfg("H100-SXM"))
    assert m8.weights_gib == pytest.approx(m16.weights_gib / 2)
    assert m8.kv_per_token_gib == pytest.approx(m16.kv_per_token_gib / 2)  # fp8 KV by default
    h = llm.prefill_s(LLAMA2_7B, cfg("H100-SXM", dtype="fp8"), 1, 4096)
    assert h == pytest.approx(llm.prefill_s(LLAMA2_7B, cfg("H100-SXM"), 1, 4096) / 2, rel=0.01)
    # an A100 has no fp8 tensor cores: weight-only fp8, 16-bit math
    a = llm.prefill_s(LLAMA2_7B, cfg("A100-80GB", dtype="fp8"), 1, 4096)
    assert a == pytest.approx(llm.prefill_s(LLAMA2_7B, cfg("A100-80GB"), 1, 4096), rel=0.01)


# --- models ------------------------------------------------------------------------------------

def model(**kw) -> LlmModel:
    base = dict(name="m", params_b=6.738, layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128,
                vocab=32000, intermediate=11008)
    return LlmModel(**{**base, **kw})


@pytest.mark.parametrize("kw, field, needle", [
    (dict(layers=0), "model.layers", ">= 1"),
    (dict(hidden=-4096), "model.hidden", ">= 1"),
    (dict(params_b=-7.0), "model.params_b", "> 0"),
    (dict(params_b=float("nan")), "model.params_b", "finite"),
    (dict(kv_heads=5), "model.kv_heads", "divisor of heads=32"),
    (dict(kv_heads=64), "model.kv_heads", "divisor of heads=32"),
    (dict(experts=8, experts_active=9), "model.experts_active", "at most experts=8"),
    (dict(params_b=0.1), "model.params_b", "embeddings and attention"),
    (dict(layers=2.5), "model.layers", "integer"),
    (dict(name=""), "model.name", "non-empty"),
])
def test_bad_model_fields_are_refused_naming_field_value_and_allowed(kw, field, needle):
    with pytest.raises(InvalidArgument) as e:
        model(**kw)
    assert e.value.field == field and needle in e.value.allowed
    want = kw[field.split(".")[1]]
    assert e.value.value == want or math.isnan(want)


def test_a_tp_degree_that_does_not_divide_the_heads_is_refused():
    with pytest.raises(InvalidArgument) as e:
        llm.tokens_per_s(llm.llm_model("Qwen2-7B"), cfg("H100-SXM", tp=8), 128, 128)  # 28 heads
    assert (e.value.field, e.value.value) == ("tp", 8) and "heads=28" in e.value.allowed
    # Qwen2-7B: 28 heads, 4 KV heads.  TP 14 divides the heads but splits no whole KV head
    # (14 > 4 and not a multiple: vLLM replicates KV heads only when tp is a multiple)
    with pytest.raises(InvalidArgument) as e:
        llm.memory(llm.llm_model("Qwen2-7B"), cfg("H100-SXM", tp=14))
    assert (e.value.field, e.value.value) == ("tp", 14) and "kv_heads=4" in e.value.allowed
    # Mistral-7B: 32 heads, 8 KV heads; TP 16 keeps one (replicated) KV head per GPU
    m = llm.memory(llm.llm_model("Mistral-7B"), cfg("H100-SXM", tp=16))
    assert m.kv_per_token_gib == 2 * 32 * 1 * 128 * 2 / GIB


def test_the_catalogue_and_hugging_face_configs_agree():
    cfg_json = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                "num_key_value_heads": 32, "vocab_size": 32000, "intermediate_size": 11008,
                "tie_word_embeddings": False}
    m = llm.from_hf_config(cfg_json, "Llama-2-7B")
    assert replace(m, params_b=LLAMA2_7B.params_b) == LLAMA2_7B  # every architecture field
    assert m.params_b == pytest.approx(LLAMA2_7B.params_b, rel=1e-3)
    mix = llm.from_hf_config({"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
                              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                              "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert mix.params_b == pytest.approx(46.70, abs=0.01) and mix.experts_active == 2
    bloom = llm.from_hf_config({"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112,
                                "vocab_size": 250880})
    assert bloom.tied_embeddings and bloom.params_b == pytest.approx(176.2, abs=0.1)
    with pytest.raises(InvalidArgument) as e:
        llm.from_hf_config({"hidden_size": 4096})
    assert e.value.field == "config.num_hidden_layers"


def test_unknown_models_are_refused_listing_the_catalogue():
    assert llm.llm_model("meta-llama/Llama-2-70b-hf") is llm.LLM_MODELS["Llama-2-70B"]
    with pytest.raises(InvalidArgument) as e:
        llm.llm_model("GPT-5")
    assert e.value.field == "model" and "Mixtral-8x7B" in e.value.allowed


def test_every_catalogue_model_has_a_config_source_and_a_consistent_mlp():
    for m in llm.LLM_MODELS.values():
        assert m.source.startswith("https://huggingface.co/")
        # the MLP parameters the count leaves are 3 (gated) or 2 matrices of hidden x intermediate
        ratio = m._mlp_params() / (m.layers * m.hidden * m.intermediate * m.experts)
        assert min(abs(ratio - 3), abs(ratio - 2)) < 0.02, (m.name, ratio)


# --- the grid and the scalar calls --------------------------------------------------------------

def test_the_grid_agrees_with_the_scalar_calls():
    models = [llm.llm_model(n) for n in ("Llama-2-7B", "Llama-3-70B", "Mixtral-8x7B", "Qwen2-7B")]
    cfgs = [cfg("A100-80GB"), cfg("H100-SXM", tp=4, replicas=2), cfg("H100-SXM", tp=8),
            cfg("A100-80GB", mig_profile="3g.40gb"), cfg("L40S", mps_share=0.5, engine="tensorrt-llm")]
    i, o = [128, 1024, 512, 2000], [256, 64, 512, 100]
    g = llm.evaluate_grid(models, cfgs, i, o)
    for j, m in enumerate(models):
        for k, c in enumerate(cfgs):
            try:
                want = llm.tokens_per_s(m, c, i[j], o[j])
                batch = llm.max_batch(m, c, i[j], o[j])
            except InvalidArgument:  # Qwen2-7B's 28 heads on TP 8
                want, batch = 0.0, 0
            assert g.tokens_per_s[j, k] == pytest.approx(want, rel=1e-12)
            assert g.batch[j, k] == batch and g.fits[j, k] == (batch > 0)
    assert g.tokens_per_s[1, 1] > 0  # 2 replicas
    half = llm.evaluate_grid(models[1:2], [cfg("H100-SXM", tp=4)], [1024], [64])
    assert g.tokens_per_s[1, 1] == pytest.approx(2 * half.tokens_per_s[0, 0])


def test_the_grid_refuses_malformed_token_counts():
    with pytest.raises(InvalidArgument) as e:
        llm.evaluate_grid([LLAMA2_7B], [cfg()], [0], [10])
    assert e.value.field == "input_tokens"


# --- the fit -------------------------------------------------------------------------------------

def test_the_bundled_constants_are_what_refitting_the_bundled_data_gives():
    from bench_loader import load_bench

    bench = load_bench("llm_model")
    fresh = bench.fit_all()
    bundled = json.loads(llm.CONSTANTS_FILE.read_text())
    assert fresh["data"] == bundled["data"]  # the same bundled files (sha256)
    for eng, gens in bundled["engines"].items():
        for gen, consts in gens.items():
            for k in bench.EFF:
                assert fresh["engines"][eng][gen][k] == pytest.approx(consts[k], rel=1e-4, abs=1e-9), (eng, gen, k)
    for gen, consts in bundled["links"].items():
        assert fresh["links"][gen]["alpha_s"] == pytest.approx(consts["alpha_s"], rel=1e-4)
        assert fresh["links"][gen]["eta_link"] == pytest.approx(consts["eta_link"], rel=1e-4)


def test_fitted_constants_are_physical():
    c = json.loads(llm.CONSTANTS_FILE.read_text())
    for eng, gens in c["engines"].items():
        assert eng in llm.ENGINES
        for gen, e in gens.items():
            assert 0 < e["eta_flops"] <= 1 and 0 < e["eta_hbm"] <= 1
            assert e["t_fixed_s"] >= 0 and e["t_layer_s"] >= 0 and e["t_seq_s"] >= 0
    # a generation with no measurement falls back to the engine's pooled fit
    assert llm.efficiency("ada", "vllm").origin == "fitted vllm/* (no fit for ada)"
    assert llm.efficiency("hopper", "vllm").origin == "fitted vllm/hopper"


def test_batch_latencies_agree_with_the_scalar_call_element_by_element():
    # one evaluation of the model's arrays (what a family build uses for a job's classes)
    # gives each element what batch_latency_s gives it alone: one wave, several waves (batch
    # above what fits: the largest that fits, then the rest), and inf where none fits
    c = cfg("A100-40GB")
    top = llm.max_batch(LLAMA2_7B, c, 2000, 2000)
    assert top >= 1
    batches, inputs, outputs = [1, 7, 3 * top + 1, 2], [512, 128, 2000, 40000], [128, 64, 2000, 40000]
    got = llm.batch_latencies_s(LLAMA2_7B, c, batches, inputs, outputs)
    want = [llm.batch_latency_s(LLAMA2_7B, c, b, i, o) for b, i, o in zip(batches, inputs, outputs)]
    assert got.shape == (4,) and got.tolist() == want
    assert math.isfinite(want[2]) and want[3] == math.inf  # 80,000 tokens fit no KV cache here


@pytest.mark.parametrize("args, field", [
    (([], [], []), "batches"),
    (([1, 2], [128], [128]), "batches"),
    (([1, 0], [128, 128], [128, 128]), "batches[1]"),
    (([1, 2], [128, 0], [128, 128]), "input_tokens[1]"),
    (([True], [128], [128]), "batches[0]"),
    (([1], [128], [1.5]), "output_tokens[0]"),
])
def test_batch_latencies_refuse_bad_elements_by_index(args, field):
    with pytest.raises(InvalidArgument) as e:
        llm.batch_latencies_s(LLAMA2_7B, cfg(), *args)
    assert e.value.field == field
