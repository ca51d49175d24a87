"""LLM training and fine-tuning jobs as a job family (issue 22, deliverable 3): the job, its
shape family, its activity, the simulator's replay and the jobs file.

Hand-worked numbers (the catalogue's datasheet peaks, the cited MFUs, the models' published
sizes), never the model's output:

* Llama-2-7B (6.738e9 parameters) SFT on 8 A100-80GB at MFU 0.4765 (LLaMA-65B's 380
  tokens/s/GPU on A100-80GB): 8 x 312e12 = 2.496e15 FLOP/s x 0.4765 = 1.189344e15; 6 x
  6.738e9 = 4.0428e10 FLOPs per token; tokens/s = 1.189344e15 / 4.0428e10 = 29,418.8; a step of
  64 x 4,096 = 262,144 tokens takes 262,144 / 29,418.8 = 8.911 s.
* Memory per GPU, 8 GPUs, sequences of 4,096, global batch 64 (8 per rank at d = 8), selective
  recomputation with sequence parallelism: model states ``2 P / t`` (parameters), ``2 P / t``
  (gradients), ``12 P / t`` (optimizer), ZeRO-1/2/3 dividing optimizer / + gradients / +
  parameters by ``d``; activations ``L x 34 s b h / t``; 1 GiB reserve (GiB = 2^30 B).
  Llama-2-7B: P = 6.738e9 B = 6.2753 GiB per byte, L = 32, h = 4,096 -> 17.0 GiB of
  activations per sequence at t = 1.
    - A100-80GB: ZeRO-0 100.4 GiB of states: no; ZeRO-1 12.55 + 12.55 + 9.41 + 1 = 35.51,
      + 2 sequences (34.0) = 69.51 fits (4: 103.5 no) -> t 1, ZeRO-1, micro-batch 2.
    - A100-40GB: ZeRO-1 35.51 + 17 = 52.5 no; ZeRO-2 12.55 + 1.57 + 9.41 + 1 + 17 = 41.53 no;
      ZeRO-3 1.57 + 1.57 + 9.41 + 1 + 17 = 30.55 fits -> t 1, ZeRO-3, micro-batch 1.
  Llama-2-13B: P = 13.016e9 B = 12.122 GiB, L = 40, h = 5,120 -> 26.56 GiB per sequence.
    - A100-80GB: ZeRO-1 24.25 + 24.25 + 18.18 + 1 + 26.56 = 94.2 no; ZeRO-2 24.25 + 3.03 +
      18.18 + 1 + 26.56 = 73.02 fits -> t 1, ZeRO-2, micro-batch 1.
    - A100-40GB: t 1 fails even at ZeRO-3 (193.96 / 8 + 1 + 26.56 = 51.8); t 2, d 4: ZeRO-2
      12.12 + 3.03 + 18.18 + 1 + 13.28 = 47.6 no; ZeRO-3 96.98 / 4 + 1 + 13.28 = 38.53 fits
      -> t 2, ZeRO-3, micro-batch 1.
"""

from __future__ import annotations

import dataclasses

import pytest

from elastico import llm_train_job as LTJ
from elastico.errors import InvalidArgument
from elastico.model import JobKind, Node
from elastico.perf import activity as A
from elastico.perf import llm_training as LT
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.shapes import FitsNoModel, build_family, candidate_configurations
from elastico.sim.llm_workload import llm_jobs_from, load_llm_jobs
from elastico.sim.simulator import simulate
from elastico.sim.utilisation import UtilisationMeter

TM = ThroughputModel.bundled()
A100 = {"A100-80GB": (8, 80.0), "A100-40GB": (8, 40.0)}
L7_TPS = 8 * 312e12 * 0.4765 / (6 * 6.738e9)   # 29,418.8 tokens/s (module docstring)


def sft(size="7B", tokens=2.0e8):
    return dataclasses.replace(LT.training_job(f"Llama-2-{size}-sft"), tokens=tokens)


def job(size="7B", ref="A100-80GB", tokens=2.0e8, **kw):
    return LTJ.llm_train_job(f"sft-{size}", sft(size, tokens), reference_gpu=ref, **kw)


# ------------------------------------------------------------------ speed

def test_llama2_7b_sft_on_8_a100s_hand_worked():
    assert L7_TPS == pytest.approx(29_418.8, abs=0.1)
    j = job()
    assert j.kind is JobKind.TRAINING and j.job_type == "LLM train Llama-2-7B"
    assert j.llm_train.reference_tokens_per_s == pytest.approx(L7_TPS, rel=1e-12)
    assert j.work == pytest.approx(2.0e8 / 29_418.8, rel=1e-5)
    c = LTJ.requested_configuration(j, "A100-80GB", 80.0)
    assert (c.num_gpus, c.gpu_share, c.throughput) == (8, 1.0, pytest.approx(1.0))
    assert 262_144 / (c.throughput * L7_TPS) == pytest.approx(8.911, abs=1e-3)
    # on 8 H100 SXM: 989.5 TFLOP/s BF16 dense at MFU 0.43 (Llama 3): 8 x 989.5e12 x 0.43 / 4.0428e10
    h = LTJ.requested_configuration(j, "H100-80GB", 80.0)
    assert h.throughput * L7_TPS == pytest.approx(8 * 989.5e12 * 0.43 / 4.0428e10, rel=1e-9)


# ------------------------------------------------------------------ memory fit

@pytest.mark.parametrize("size,gpu,mem,tp,zero,mb,total", [
    ("7B", "A100-80GB", 80.0, 1, 1, 2, 69.51),
    ("7B", "A100-40GB", 40.0, 1, 3, 1, 30.55),
    ("13B", "A100-80GB", 80.0, 1, 2, 1, 73.02),
    ("13B", "A100-40GB", 40.0, 2, 3, 1, 38.53),
])
def test_memory_fit_hand_worked(size, gpu, mem, tp, zero, mb, total):
    spec = job(size).llm_train
    p = LTJ.best_plan(spec, gpu, 8, 8, mem)
    assert (p.tp, p.dp, p.zero, p.micro_batch) == (tp, 8 // tp, zero, mb)
    assert p.memory.total == pytest.approx(total, abs=0.02)
    c = LTJ.train_configuration(job(size), gpu, 8, mem, 8)
    assert c.name == f"{gpu} x8 @1.00 tp{tp} dp{8 // tp} zero{zero}" and c.replica_gpus == tp


def test_a_stated_zero_stage_is_kept_or_the_gpu_count_is_not_offered():
    # ZeRO-1 only: Llama-2-7B fits 8 A100-80GB at t 1 (69.51 GiB) but 8 A100-40GB only at t 2
    # (t 1: 52.5 GiB; t 2, d 4: parameters and gradients 6.27 + 6.27, optimizer 12 x 3.369e9 /
    # 4 B = 9.41, reserve 1: 22.96 GiB, and 17.0 / 2 = 8.5 GiB a sequence: two of them fit,
    # 39.96 GiB; three do not divide the 16 sequences of a rank, four need 56.96)
    j = job(zero=1)
    assert LTJ.best_plan(j.llm_train, "A100-80GB", 8, 8, 80.0).zero == 1
    p = LTJ.best_plan(j.llm_train, "A100-40GB", 8, 8, 40.0)
    assert (p.tp, p.zero, p.micro_batch) == (2, 1, 2)
    assert p.memory.total == pytest.approx(39.96, abs=0.02)


# ------------------------------------------------------------------ the family

def test_more_gpus_never_fewer_tokens_per_s():
    for size in ("7B", "13B"):
        j = job(size)
        for gpu, mem in (("A100-80GB", 80.0), ("A100-40GB", 40.0), ("H100-80GB", 80.0)):
            xs = [(n, c.throughput) for n in LTJ.GPU_COUNTS
                  if (c := LTJ.train_configuration(j, gpu, 8, mem, n)) is not None]
            assert xs, (size, gpu)
            assert all(b[1] >= a[1] for a, b in zip(xs, xs[1:])), (size, gpu, xs)
            # and a count that fits stays fitting with more GPUs (states and batch split further)
            ns = [n for n, _ in xs]
            assert ns == list(LTJ.GPU_COUNTS[LTJ.GPU_COUNTS.index(ns[0]):]), (size, gpu, ns)


def test_the_family_offers_whole_gpus_with_cited_mfus_only():
    j = job()
    models = {**A100, "H100-80GB": (8, 80.0), "G2": (8, 16.0), "T4": (4, 16.0),
              "V100M32": (8, 32.0)}
    fam = build_family(j, models, TM, mig_models={"A100-80GB", "H100-80GB"})
    body = fam.configs[1:]
    assert body and {c.gpu_model for c in body} <= {"A100-80GB", "A100-40GB", "H100-80GB"}
    assert all(c.gpu_share == 1.0 and c.mig_profile is None for c in body)
    # 7B needs more than one 80 GB GPU: 118.4 GiB at one (docs/model.md 9.)
    assert min(c.num_gpus for c in body) == 2


def test_a_gpu_without_a_cited_mfu_is_refused_naming_it():
    for gpu in ("T4", "V100M16", "G2"):
        with pytest.raises(InvalidArgument) as e:
            job(ref=gpu)
        assert (e.value.field, e.value.value) == ("reference_gpu", gpu)
        assert "A100-80GB" in e.value.allowed and "H100-SXM" in e.value.allowed
    # on a cluster with none of them the job fits no model, each GPU's reason named
    with pytest.raises(FitsNoModel) as e:
        candidate_configurations(job(), {"T4": (4, 16.0), "G2": (8, 16.0)}, TM)
    assert "T4 has none" in e.value.allowed and "G2 has none" in e.value.allowed


def test_a_model_that_fits_no_node_is_refused_with_its_memory():
    # Llama-2-70B SFT: 1.1 TB of model states fit no 8-GPU H100 node (docs/model.md 9.)
    seventy = sft("70B")
    with pytest.raises(InvalidArgument) as e:
        LTJ.llm_train_job("big", seventy, reference_gpu="H100-80GB")
    assert e.value.field == "reference_gpu" and "GiB" in e.value.allowed


@pytest.mark.parametrize("kw,field,allowed", [
    (dict(gpus=16), "gpus", "1..8"),
    (dict(zero=4), "zero", "0..3"),
    (dict(recompute="some"), "recompute", "selective"),
])
def test_bad_job_fields_are_refused(kw, field, allowed):
    with pytest.raises(InvalidArgument) as e:
        job(**kw)
    assert e.value.field == field and allowed in e.value.allowed


def test_fp8_and_a_job_without_tokens_are_refused():
    with pytest.raises(InvalidArgument) as e:
        LTJ.llm_train_job("x", dataclasses.replace(sft(), precision="fp8"),
                          reference_gpu="H100-80GB")
    assert (e.value.field, e.value.value) == ("precision", "fp8") and "bf16" in e.value.allowed
    with pytest.raises(InvalidArgument) as e:
        LTJ.llm_train_job("x", LT.training_job("Llama-2-7B-sft"), reference_gpu="A100-80GB")
    assert e.value.field == "tokens"


# ------------------------------------------------------------------ activity

def test_the_all_reduce_share_is_berts_on_the_data_parallel_ranks():
    nodes = [Node("n0", "A100-40GB", 8, 40.0, 128.0, 1024.0)]
    meter = UtilisationMeter(nodes, seed=0)
    j13 = job("13B")
    c = LTJ.train_configuration(j13, "A100-40GB", 8, 40.0, 8)          # tp 2, dp 4
    p = meter.profile(j13, c, 1)
    share, step = A.sync_share("bert", "A100-40GB", 4, 1)
    assert share > 0 and p.sia_job == "bert"
    assert p.sync == pytest.approx(min(share, p.kernel)) and p.step_s == step
    # level and kernel are the job's own draws, as for every job
    free = A.draw_profile(j13.id, seed=0, gpus=4, gpu_model="A100-40GB")
    assert (p.level, p.kernel) == (free.level, free.kernel)


# ------------------------------------------------------------------ the simulator

def run(nodes, jobs, policy="exclusive"):
    env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=AnalyticSlowdown())
    pol = make_policy(policy, env)
    return simulate(nodes, jobs, pol, activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                    validate=True, restart_s=30.0)


@pytest.mark.parametrize("policy", ["exclusive", "elastico"])
def test_the_simulator_trains_the_tokens(policy):
    nodes = [Node("n0", "A100-80GB", 8, 80.0, 128.0, 2048.0)]
    j = job()
    res = run(nodes, [j], policy)
    (rec,) = res.records
    assert rec.status == "finished", rec.reason
    assert rec.tokens == 2.0e8 and rec.tokens_done == pytest.approx(2.0e8)
    assert rec.progress == pytest.approx(rec.work)
    if policy == "exclusive":   # alone at its requested shape: tokens / 29,418.8 tokens/s
        assert rec.finish_s == pytest.approx(2.0e8 / 29_418.8, rel=1e-5)
        assert rec.config == "A100-80GB x8 @1.00 tp1 dp8 zero1"


def test_train_demo_loads_and_replays_beside_trace_like_training():
    jobs = load_llm_jobs("train-demo")
    kinds = {j.id: (j.kind, j.llm_train is not None) for j in jobs}
    assert sum(t for _, t in kinds.values()) == 3 and len(jobs) == 5
    assert kinds["sft-llama2-7b"] == (JobKind.TRAINING, True)
    cpt = next(j for j in jobs if j.id == "cpt-llama3-8b")
    # Llama 3 section 3.4.1: 8,192-token sequences, 8 M-token batches
    assert cpt.llm_train.job.global_batch == 1024 and cpt.llm_train.job.seq_len == 8192


@pytest.mark.parametrize("entry,field,allowed", [
    ({"mode": "lora"}, "jobs[0].mode", "not modelled"),
    ({"precision": "fp8"}, "jobs[0].precision", "bf16"),
    ({"tokens": None}, "jobs[0].tokens", "number"),
    ({"global_batch_tokens": 1000}, "jobs[0].global_batch", "exactly one"),
    ({"reference_gpu": "T4"}, "jobs[0].reference_gpu", "cited MFU"),
    ({"tp": 2}, "jobs[0].tp", "a key of a training job"),
    ({"kind": "serving"}, "jobs[0].kind", "training"),
])
def test_bad_training_entries_are_refused_with_their_path(entry, field, allowed):
    e0 = {"id": "a", "kind": "training", "model": "Llama-2-7B", "seq_len": 4096,
          "global_batch": 64, "tokens": 1e8, "reference_gpu": "A100-80GB", **entry}
    with pytest.raises(InvalidArgument) as e:
        llm_jobs_from({"jobs": [e0]})
    assert e.value.field == field and allowed in e.value.allowed, e.value


def test_global_batch_in_tokens_must_be_whole_sequences():
    e0 = {"id": "a", "kind": "training", "model": "Llama-2-7B", "seq_len": 4096,
          "global_batch_tokens": 262_144, "tokens": 1e8, "reference_gpu": "A100-80GB"}
    (j,) = llm_jobs_from({"jobs": [e0]})
    assert j.llm_train.job.global_batch == 64
    with pytest.raises(InvalidArgument) as e:
        llm_jobs_from({"jobs": [{**e0, "global_batch_tokens": 262_145}]})
    assert e.value.field == "jobs[0].global_batch_tokens" and "multiple" in e.value.allowed


def test_a_training_job_from_hf_config_fields():
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
           "model_type": "llama", "_name_or_path": "my-7b"}
    e0 = {"id": "a", "kind": "training", "model_config": cfg, "seq_len": 4096,
          "global_batch": 64, "tokens": 1e8, "reference_gpu": "A100-80GB"}
    (j,) = llm_jobs_from({"jobs": [e0]})
    # the same architecture as Llama-2-7B: its 6.738 B parameters, to the HF count's rounding
    assert j.llm_train.reference_tokens_per_s == pytest.approx(L7_TPS, rel=2e-3)


@pytest.mark.parametrize("policy", ["elastico", "time-slicing", "gavel", "fgd", "exclusive"])
def test_every_policy_finishes_an_llm_training_job_beside_gavel_training(policy):
    from elastico.model import Job, Request

    nodes = [Node("n0", "A100-80GB", 8, 80.0, 128.0, 2048.0),
             Node("n1", "A100-40GB", 8, 40.0, 128.0, 1024.0)]
    gav = Job("t", JobKind.TRAINING, 0.0, 500.0, Request(1, 1.0, 1.0, 2.0),
              job_type="ResNet-50 (batch size 64)")
    llm = job(tokens=2e7)
    res = run(nodes, [llm, gav], policy)
    for r in res.records:
        assert r.status == "finished", (r.job_id, r.reason)
        assert r.progress == pytest.approx(r.work, rel=1e-9)
    rec = next(r for r in res.records if r.job_id == llm.id)
    assert rec.tokens_done == pytest.approx(2e7) and " tp" in rec.config


def test_simulate_replays_train_demo_and_refuses_a_bad_undisclosed_speed(tmp_path, capsys):
    import json

    from elastico.cli import main

    out = tmp_path / "m.json"
    assert main(["simulate", "--cluster", "a100h100-mig", "--gpus", "64", "--jobs", "16",
                 "--llm-jobs", "train-demo", "--policy", "exclusive", "--no-progress",
                 "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "LLM jobs, exclusive" in text.out and "3 of them training" in text.err
    rows = {x["job"]: x for x in json.loads(out.read_text())["llm_jobs"]}
    assert rows["sft-llama2-7b"]["kind"] == "training"
    assert rows["sft-llama2-7b"]["tokens"] == 2.26e8
    # exclusive: its requested 8 A100-80GB, 2.26e8 / 29,418.8 tokens/s, if it started at once
    r = rows["sft-llama2-7b"]
    assert r["status"] == "finished" and r["tokens_done"] == pytest.approx(2.26e8)
    assert r["jct_s"] - (r["first_start_s"] - r["arrival_s"]) == pytest.approx(2.26e8 / 29_418.8,
                                                                               rel=1e-5)
    for bad in ("0", "-1", "nan", "21"):
        assert main(["simulate", "--gpus", "64", "--jobs", "8", "--undisclosed-gpu-speed", bad,
                     "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "--undisclosed-gpu-speed" in err and "(0, 20]" in err
