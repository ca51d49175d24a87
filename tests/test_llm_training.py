"""LLM training and fine-tuning jobs (elastico.perf.llm_training, issue 22 deliverable 3):
step time = 6 N T / (GPUs x peak x MFU) and memory = 16 bytes per parameter (mixed-precision
Adam) + Korthikanti's activations, worked by hand; monotone where physics says so; bad input
refused naming the field, the value and what is allowed."""

from __future__ import annotations

import math

import pytest

from elastico.errors import InvalidArgument
from elastico.perf import llm_training as lt
from elastico.perf.llm import LlmModel, llm_model

GIB = 2.0 ** 30


def tiny() -> LlmModel:
    """A 100M-parameter GPT-style model (12 layers, hidden 768, 12 heads: GPT-2-small's shape)."""
    return LlmModel("tiny-100M", 0.1, 12, 768, 12, 12, 64, 32000, 3072)


# --- step time ---------------------------------------------------------------------------

def test_step_time_of_a_small_model_on_an_a100_at_a_stated_mfu_by_hand():
    # 6 x 1e8 params x 8,192 tokens = 4.9152e12 FLOPs; A100 BF16 dense peak 312 TFLOP/s at
    # MFU 0.5 = 156e12 FLOP/s -> 0.0315077 s
    t = lt.step_time_s(tiny(), "A100-80GB", tokens=8 * 1024, mfu=0.5)
    assert t == pytest.approx(4.9152e12 / 156e12, rel=1e-12)
    assert t == pytest.approx(0.0315077, rel=1e-5)
    # two GPUs: half; FP16 has the same peak on an A100
    assert lt.step_time_s(tiny(), "A100-80GB", tokens=8192, gpus=2, mfu=0.5) == pytest.approx(t / 2)
    assert lt.step_time_s(tiny(), "A100-80GB", tokens=8192, mfu=0.5, precision="fp16") == t


def test_the_cited_mfu_figures_and_a_llama2_7b_sft_step():
    # LLaMA-65B at 380 tokens/s/GPU on A100s: 6 x 65.2e9 x 380 / 312e12
    assert lt.MFU["A100-80GB"].value == pytest.approx(6 * 65.2e9 * 380 / 312e12, abs=5e-5)
    assert lt.MFU["H100-SXM"].value == 0.43 and "Table 4" in lt.MFU["H100-SXM"].source
    assert lt.mfu_for("H100-80GB").value == 0.43  # the catalogue's alias of the SXM part
    # Llama 2 SFT (batch 64 x 4,096 tokens) of the 7B model (6.738e9) on 8 A100-80GB:
    # 6 x 6.738e9 x 262,144 = 1.0597958e16 FLOPs over 8 x 312e12 x 0.4765 = 1.189344e15 FLOP/s
    job = lt.training_job("Llama-2-7B-sft")
    assert job.tokens_per_step == 262_144
    t = lt.step_time_s(job.model, "A100-80GB", tokens=job.tokens_per_step, gpus=8)
    assert t == pytest.approx(1.0597958e16 / 1.189344e15, rel=1e-6)
    assert t == pytest.approx(8.9108, abs=1e-3)


def test_moe_counts_only_the_active_parameters():
    m = llm_model("Mixtral-8x7B")
    assert lt.model_flops_per_token(m) == pytest.approx(6 * m.active_params_b * 1e9)
    assert m.active_params_b < m.params_b / 3


@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 16])
def test_step_time_falls_with_gpus_and_mfu_and_grows_with_tokens(gpus):
    m = llm_model("Llama-2-7B")
    t = lt.step_time_s(m, "H100-SXM", tokens=1 << 18, gpus=gpus)
    assert lt.step_time_s(m, "H100-SXM", tokens=1 << 18, gpus=gpus * 2) < t
    assert lt.step_time_s(m, "H100-SXM", tokens=1 << 19, gpus=gpus) > t
    assert lt.step_time_s(m, "H100-SXM", tokens=1 << 18, gpus=gpus, mfu=0.5) < t
    # the faster GPU at its own figure is faster
    assert lt.step_time_s(m, "A100-80GB", tokens=1 << 18, gpus=gpus) > t


# --- memory ------------------------------------------------------------------------------

def test_memory_of_a_7b_full_fine_tune_with_adam_by_hand():
    m = llm_model("Llama-2-7B")  # 6.738e9 parameters, 32 layers, hidden 4096, 32 heads
    mem = lt.memory(m, seq_len=4096, micro_batch=1)
    # model states: 16 bytes x 6.738e9 = 107.808e9 bytes = 100.40 GiB (2 + 2 + 12 per param)
    assert mem.params == pytest.approx(2 * 6.738e9 / GIB)
    assert mem.grads == pytest.approx(2 * 6.738e9 / GIB)
    assert mem.optimizer == pytest.approx(12 * 6.738e9 / GIB)
    assert mem.model_states == pytest.approx(107.808e9 / GIB) == pytest.approx(100.404, abs=1e-3)
    # activations, selective recomputation: 34 s b h x L = 34 x 4096 x 4096 x 32 = 17 x 2^30
    assert mem.activations == 17.0
    assert mem.total == pytest.approx(100.404 + 17.0 + 1.0, abs=1e-3)
    assert mem.total > 80  # a 7B full fine-tune does not fit one 80 GB GPU
    # no recomputation: s b h (34 + 5 a s / h) = (34 + 160) s b h per layer -> 97 GiB;
    # full recomputation: 2 s b h per layer -> 1 GiB
    assert lt.memory(m, seq_len=4096, recompute="none").activations == 97.0
    assert lt.memory(m, seq_len=4096, recompute="full").activations == 1.0
    # ZeRO-3 over 8 data-parallel ranks: 100.40 / 8 = 12.55 GiB of model states per GPU
    z3 = lt.memory(m, seq_len=4096, dp=8, zero=3)
    assert z3.model_states == pytest.approx(107.808e9 / 8 / GIB)
    assert z3.total == pytest.approx(12.5505 + 17 + 1, abs=1e-3)
    # tensor parallel 2 with sequence parallelism halves states and activations
    tp2 = lt.memory(m, seq_len=4096, tp=2)
    assert tp2.model_states == pytest.approx(mem.model_states / 2) and tp2.activations == 8.5
    # ... and without sequence parallelism 10 s b h of the 34 stays whole: (10 + 24/2) x 2^29 x 32
    assert lt.memory(m, seq_len=4096, tp=2, sequence_parallel=False).activations == 11.0


def test_zero_stages_partition_what_the_paper_says():
    m = llm_model("Llama-2-7B")
    z = [lt.memory(m, seq_len=2048, dp=4, zero=s) for s in range(4)]
    psi = 6.738e9 / GIB
    assert [x.optimizer for x in z] == pytest.approx([12 * psi, 3 * psi, 3 * psi, 3 * psi])
    assert [x.grads for x in z] == pytest.approx([2 * psi, 2 * psi, psi / 2, psi / 2])
    assert [x.params for x in z] == pytest.approx([2 * psi, 2 * psi, 2 * psi, psi / 2])
    assert all(a.total > b.total for a, b in zip(z, z[1:]))


def test_memory_is_monotone():
    m = llm_model("Llama-2-13B")
    base = lt.memory(m, seq_len=2048, micro_batch=2, tp=2, dp=2, zero=1)
    assert lt.memory(m, seq_len=4096, micro_batch=2, tp=2, dp=2, zero=1).total > base.total
    assert lt.memory(m, seq_len=2048, micro_batch=4, tp=2, dp=2, zero=1).total > base.total
    assert lt.memory(m, seq_len=2048, micro_batch=2, tp=4, dp=2, zero=1).total < base.total
    assert lt.memory(m, seq_len=2048, micro_batch=2, tp=2, dp=4, zero=1).total < base.total
    for rc in lt.RECOMPUTE:
        assert lt.memory(m, seq_len=2048, recompute=rc).activations > 0
    assert (lt.memory(m, seq_len=2048, recompute="full").activations
            < lt.memory(m, seq_len=2048, recompute="selective").activations
            < lt.memory(m, seq_len=2048, recompute="none").activations)


# --- plans -------------------------------------------------------------------------------

def test_plans_of_a_7b_sft_on_eight_a100s_all_fit_at_one_step_time():
    job = lt.training_job("Llama-2-7B-sft")
    ps = lt.plans(job, "A100-80GB", 8)
    assert [p.tp for p in ps] == [1, 2, 4, 8] and all(p.fits for p in ps)
    for p in ps:
        assert p.tp * p.dp == 8 and p.micro_batch * p.accumulation * p.dp == 64
        assert p.memory.total <= 80 and p.step_s == pytest.approx(8.9108, abs=1e-3)
        assert p.tokens_per_s == pytest.approx(262_144 / p.step_s)
    # data parallel alone needs ZeRO-1 to hold a micro-batch of 2 (69.5 GiB)
    assert (ps[0].zero, ps[0].micro_batch) == (1, 2)


def test_a_70b_full_fine_tune_fits_no_plan_on_one_8_gpu_node():
    # 16 bytes x 68.977e9 = 1.10 TB of model states: at least 13.8 of 80 GiB GPUs before
    # any activation
    ps = lt.plans(lt.training_job("Llama-2-70B-sft"), "H100-80GB", 8)
    assert ps and not any(p.fits for p in ps)
    assert all("GiB per GPU" in p.reason and "80 GiB available" in p.reason for p in ps)
    assert any(p.fits for p in lt.plans(lt.training_job("Llama-2-70B-sft"), "H100-80GB", 32))


def test_named_jobs_say_where_their_numbers_come_from():
    for job in lt.TRAINING_JOBS.values():
        assert job.source and ("arXiv" in job.source)
        assert job.tokens_per_step == job.seq_len * job.global_batch
    assert lt.training_job("Llama-2-7B-pretrain").tokens_per_step == 4 * 1024 * 1024


# --- refusals ----------------------------------------------------------------------------

@pytest.mark.parametrize("call, field", [
    (lambda: lt.step_time_s(tiny(), "T4", tokens=8192), "gpu"),  # no published MFU
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=8192, mfu=1.5), "mfu"),
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=8192, mfu=0), "mfu"),
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=0, mfu=0.5), "tokens"),
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=8192, gpus=0, mfu=0.5), "gpus"),
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=8192, mfu=0.5, precision="fp8"),
     "precision"),  # the A100's datasheet lists no FP8
    (lambda: lt.step_time_s(tiny(), "A100-80GB", tokens=8192, mfu=0.5, precision="int4"),
     "precision"),
    (lambda: lt.step_time_s(tiny(), "nosuch", tokens=8192, mfu=0.5), "gpu"),
    (lambda: lt.memory(tiny(), seq_len=0), "seq_len"),
    (lambda: lt.memory(tiny(), seq_len=512, micro_batch=1.5), "micro_batch"),
    (lambda: lt.memory(tiny(), seq_len=512, tp=5), "tp"),
    (lambda: lt.memory(tiny(), seq_len=512, zero=4), "zero"),
    (lambda: lt.memory(tiny(), seq_len=512, zero=True), "zero"),
    (lambda: lt.memory(tiny(), seq_len=512, recompute="some"), "recompute"),
    (lambda: lt.memory(tiny(), seq_len=512, sequence_parallel="yes"), "sequence_parallel"),
    (lambda: lt.LlmTrainingJob("x", "nosuch-model", 512, 8), "model"),
    (lambda: lt.LlmTrainingJob("x", "Llama-2-7B", 512, 8, mode="lora"), "job.mode"),
    (lambda: lt.LlmTrainingJob("x", "Llama-2-7B", 512, 0), "job.global_batch"),
    (lambda: lt.LlmTrainingJob("x", "Llama-2-7B", 512, 8, tokens=math.inf), "job.tokens"),
    (lambda: lt.training_job("nosuch"), "job"),
    (lambda: lt.plans(lt.training_job("Llama-2-7B-sft"), "A100-80GB", 8, memory_gib=-1),
     "memory_gib"),
])
def test_bad_input_is_refused_with_field_value_and_what_is_allowed(call, field):
    with pytest.raises(InvalidArgument) as e:
        call()
    assert e.value.field == field
    assert e.value.allowed and str(e.value).startswith(f"{field}: ")


def test_a_gpu_without_an_mfu_is_refused_naming_those_with_one():
    with pytest.raises(InvalidArgument) as e:
        lt.mfu_for("L40S")
    assert "A100-80GB" in e.value.allowed and "H100-SXM" in e.value.allowed
    assert "mfu explicitly" in e.value.allowed
    assert lt.mfu_for("L40S", 0.35).value == 0.35  # given: used as stated
