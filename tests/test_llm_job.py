"""Offline LLM inference as a job kind (issue 21, deliverable 4): its work in tokens, its shape
family (memory fit, replicas, TP, shares, MIG), its start-up cost.

Hand-worked numbers (elastico.perf.llm's memory rules, docs/model.md "LLM inference jobs"):

* Llama-3-8B (8.030e9 parameters, 32 layers, 8 KV heads of 128) in fp16: weights
  8.030e9 x 2 B = 16.06 GB = 14.957 GiB; KV cache 2 x 32 x 8 x 128 x 2 B = 131,072 B = 1/8192
  GiB per token.  Start-up at the PCIe 4.0 x4 NVMe ceiling 16 x 4 x 128/130 / 8 = 7.877 GB/s:
  16.06 / 7.877 = 2.039 s (an A100's host link, 64 GB/s both ways = 32 one way, is faster).
* Llama-2-70B (68.977e9) in fp16 is 128.5 GiB of weights: more than one 80 GiB GPU, so no
  TP-1 configuration of it exists; at TP 2 each GPU holds 64.2 GiB, within vLLM's 0.9 x 80 = 72.
"""

from __future__ import annotations

import math

import pytest

from elastico import llm_job as LJ
from elastico import llm_shapes as LS
from elastico.errors import InvalidArgument
from elastico.model import JobKind, Node
from elastico.perf import llm as P
from elastico.perf.throughput import ThroughputModel
from elastico.shapes import FitsNoModel, build_family, candidate_configurations

TM = ThroughputModel.bundled()
L8 = P.llm_model("Llama-3-8B")
L70 = P.llm_model("Llama-2-70B")
A80 = {"A100-80GB": (8, 80.0)}
GIB = float(1 << 30)


def job8(requests="512:128x1000", **kw):
    work = LJ.requests_work((i, o, int(n)) for i, o, n in
                            LJ.parse_classes(requests, "requests", counts=True))
    return LJ.llm_job("j8", L8, work, reference_gpu="A100-80GB", **kw)


# ------------------------------------------------------------------------------- work
def test_requests_merge_equal_lengths_and_count_prompt_plus_generated_tokens():
    w = LJ.requests_work([(512, 128, 10), (2048, 256, 5), (512, 128, 2)])
    assert [(c.input_tokens, c.output_tokens, c.requests) for c in w.classes] == [
        (512, 128, 12), (2048, 256, 5)]
    assert w.total_requests == 17
    assert w.total_tokens == 12 * 640 + 5 * 2304


def test_a_token_budget_is_cut_into_requests_by_the_distribution():
    # two classes of equal weight: mean 0.5 x 300 + 0.5 x 1100 = 700 tokens per request,
    # 7,000 tokens -> 10 requests, 5 of each
    w = LJ.budget_work(7000, "100:200x1,1000:100x1")
    assert [(c.input_tokens, c.output_tokens, c.requests) for c in w.classes] == [
        (100, 200, 5), (1000, 100, 5)]
    assert w.total_tokens == 7000


def test_the_bundled_length_distributions_are_eight_azure_classes_summing_to_one():
    for name in LJ.LENGTH_DISTRIBUTIONS:
        d = LJ.length_distribution(name)
        assert len(d) == 8 and sum(s for _, _, s in d) == pytest.approx(1.0, abs=1e-5)
    # the conversation trace's mean prompt / output lengths (PROVENANCE.md: 1155 / 211)
    conv = LJ.length_distribution("azure-conv")
    assert sum(s * i for i, _, s in conv) == pytest.approx(1155, rel=0.01)
    assert sum(s * o for _, o, s in conv) == pytest.approx(211, rel=0.01)


def test_replicas_split_every_class_and_the_busiest_takes_the_rounded_up_share():
    w = LJ.requests_work([(512, 128, 101), (64, 64, 1)])
    half = w.split(2)
    assert [c.requests for c in half.classes] == [51, 1]


@pytest.mark.parametrize("text, field", [
    ("512x128", "requests"), ("512:0x5", "requests"), ("512:128x0", "requests"),
    ("a:b", "requests"), ("", "requests"), ("512:128x1.5", "requests")])
def test_bad_request_classes_are_refused_naming_the_field_and_the_format(text, field):
    with pytest.raises(InvalidArgument) as e:
        LJ.parse_classes(text, field, counts=True)
    assert e.value.field == field and e.value.value == text and "INPUT:OUTPUT" in e.value.allowed


def test_bad_budgets_and_distributions_are_refused():
    with pytest.raises(InvalidArgument) as e:
        LJ.budget_work(0, "azure-conv")
    assert e.value.field == "tokens" and "[1, 1e+13]" in e.value.allowed
    with pytest.raises(InvalidArgument) as e:
        LJ.budget_work(1e6, "azure-chat")
    assert e.value.field == "lengths" and "azure-conv" in e.value.allowed


# ----------------------------------------------------------------------- the job
def test_an_llm_job_works_in_tokens_over_its_reference_speed():
    j = job8()
    spec = j.llm
    assert j.kind is JobKind.INFERENCE and j.job_type == "LLM Llama-3-8B"
    cfg = P.LlmConfig("A100-80GB", memory_limit_gib=80.0)
    # reference: the requested shape (one whole A100-80GB) -- the whole batch's latency
    t = P.batch_latency_s(L8, cfg, 1000, 512, 128)
    assert spec.reference_tokens_per_s == pytest.approx(1000 * 640 / t)
    assert j.work == pytest.approx(t)          # seconds at the requested shape
    assert LJ.tokens_done(j) == 0.0


def test_a_requested_shape_that_does_not_fit_its_reference_gpu_is_refused():
    w = LJ.requests_work([(1024, 256, 10)])
    with pytest.raises(InvalidArgument) as e:
        LJ.llm_job("big", L70, w, reference_gpu="A100-80GB", tp=1)
    assert e.value.field == "reference_gpu" and "128.5 GiB" in e.value.allowed


# ------------------------------------------------------------------ shape family
def _fits(job, c) -> bool:
    cfg = LS.llm_config_of(job, c)
    if not P.memory(job.llm.model, cfg).fits:
        return False
    return all(P.max_batch(job.llm.model, cfg, k.input_tokens, k.output_tokens) >= 1
               for k in job.llm.work.classes)


def test_every_configuration_offered_fits_and_none_that_does_not_fit_is_offered():
    w = LJ.requests_work([(1024, 256, 2000)])
    job = LJ.llm_job("j70", L70, w, reference_gpu="A100-80GB", tp=2)
    gpus = {"A100-80GB": (8, 80.0), "A100-40GB": (8, 40.0), "H100-80GB": (8, 80.0)}
    cands = candidate_configurations(job, gpus, TM, mig_models=("A100-40GB",))
    assert cands and all(_fits(job, c) for c in cands)
    # weights 128.5 GiB: nothing at TP 1 anywhere, nothing on a MIG instance (TP 1)
    assert not any(c.replica_gpus == 1 for c in cands)
    # an A100-40GB at TP 2 holds 64.2 GiB of weights per GPU: more than 0.9 x 40 GiB
    assert not any(c.gpu_model == "A100-40GB" and c.replica_gpus == 2 for c in cands)
    fam = build_family(job, gpus, TM, mig_models=("A100-40GB",))
    assert fam.configs[0].is_wait and all(_fits(job, c) for c in fam.configs[1:])


def test_a_family_holds_tp_degrees_replicas_shares_and_mig_within_twice_the_request():
    job = job8()
    cands = candidate_configurations(job, {"A100-40GB": (8, 40.0)}, TM, mig_models=("A100-40GB",))
    assert {c.replica_gpus for c in cands if c.mig_profile is None} >= {1, 2}
    assert any(c.replicas == 2 for c in cands)
    assert any(c.mig_profile == "7g.40gb" for c in cands)
    assert all(c.gpus_total <= 2 * job.request.gpus_total + 1e-9 for c in cands)
    # names say GPUs, share and TP degree
    assert any(c.name == "A100-40GB x2 @1.00 tp2" for c in cands)


def test_memory_booked_per_gpu_is_whole_gpu_share_or_mig_slice_and_the_model_is_told():
    job = job8()
    cands = candidate_configurations(job, {"A100-40GB": (8, 40.0)}, TM, mig_models=("A100-40GB",))
    by = {c.name: c for c in cands}
    assert by["A100-40GB x1 @1.00 tp1"].gpu_mem_gib == 40.0
    assert by["A100-40GB x1 @0.75 tp1"].gpu_mem_gib == 30.0        # 0.75 x 40, whole MiB
    assert by["A100-40GB x1 mig 7g.40gb"].gpu_mem_gib == 40.0      # 8 of 8 memory slices
    for c in by.values():
        assert LS.llm_config_of(job, c).memory_limit_gib == c.gpu_mem_gib


def test_replicas_speed_up_the_job_by_splitting_its_requests():
    job = job8("512:128x1000")
    one = LS.llm_configuration(job, "A100-80GB", 80.0, 1, 1)
    two = LS.llm_configuration(job, "A100-80GB", 80.0, 1, 2)
    cfg = P.LlmConfig("A100-80GB", memory_limit_gib=80.0)
    t1 = P.batch_latency_s(L8, cfg, 1000, 512, 128)
    t2 = P.batch_latency_s(L8, cfg, 500, 512, 128)          # each replica half the requests
    assert one.throughput == pytest.approx(1.0)
    assert two.throughput == pytest.approx(t1 / t2)
    assert (two.num_gpus, two.replicas, two.replica_gpus) == (2, 2, 1)


def test_a_model_that_fits_no_gpu_of_the_cluster_fits_no_model():
    w = LJ.requests_work([(1024, 256, 10)])
    job = LJ.llm_job("j70", L70, w, reference_gpu="A100-80GB", tp=2)
    with pytest.raises(FitsNoModel):
        build_family(job, {"A100-40GB": (8, 40.0)}, TM)
    # the trace's undisclosed G2 has no LLM figures: never a configuration there
    assert not LS.llm_gpu_known("G2") and LS.llm_gpu_known("A100-80GB")


def test_startup_is_the_weights_over_the_nvme_ceiling():
    job = job8()
    c = LS.requested_configuration(job, "A100-80GB", 80.0, whole_gpus=False)
    assert LS.LOAD_GBPS == pytest.approx(7.877, abs=1e-3)
    assert LS.startup_s(job, c) == pytest.approx(8.030e9 * 2 / (LS.LOAD_GBPS * 1e9))
    assert LS.startup_s(job, c) == pytest.approx(2.039, abs=1e-3)
    # a slower store: 1 GB/s -> 16.06 s; a faster one is capped by the host link (32 GB/s)
    assert LS.startup_s(job, c, 1.0) == pytest.approx(16.06)
    assert LS.startup_s(job, c, 100.0) == pytest.approx(16.06 / 32)
    with pytest.raises(InvalidArgument) as e:
        LS.startup_s(job, c, 0.0)
    assert e.value.field == "load_gbps"


def test_hand_worked_memory_of_llama3_8b():
    m = P.memory(L8, P.LlmConfig("A100-80GB"))
    assert m.weights_gib == pytest.approx(8.030e9 * 2 / GIB)
    assert m.weights_gib == pytest.approx(14.957, abs=1e-3)
    assert m.kv_per_token_gib == pytest.approx(131072 / GIB)


def test_a_live_style_job_that_keeps_its_shape_gets_only_its_requested_configurations():
    job = job8(reshape=False)
    fam_models = {"A100-80GB": (8, 80.0), "A100-40GB": (8, 40.0)}
    from elastico.placer.policies.common import JobCatalog, PolicyEnv
    from elastico.predictor import NoInterference

    nodes = [Node("a", "A100-80GB", 8, 80.0, 128, 1024), Node("b", "A100-40GB", 8, 40.0, 128, 1024)]
    cat = JobCatalog(PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference()))
    fam = cat.family(job)
    assert [c.name for c in fam.configs[1:]] == ["A100-80GB x1 @1.00 tp1", "A100-40GB x1 @1.00 tp1"]
    assert set(cat.gpu_models) == set(fam_models)
    prof = cat.profile(job, fam.configs[1])
    assert prof.job_type == "LLM Llama-3-8B" and prof.gpu_activity == 1.0


def test_the_placer_values_an_mps_share_at_the_bandwidth_it_keeps_on_a_full_gpu():
    # docs/model.md 7., "Planning throughput": JobCatalog.arrays (what the round prices)
    # holds llm_shapes.planning_throughput -- an MPS-shared configuration at the HBM
    # bandwidth x share (hbm_by_share), whole GPUs and MIG instances at their own throughput
    # -- while each Configuration keeps its solo throughput (what the job runs at).
    from dataclasses import replace

    import numpy as np

    from elastico.model import resource_space_for
    from elastico.placer.policies.common import JobCatalog, PolicyEnv
    from elastico.predictor import NoInterference

    nodes = [Node("n0", "A100-40GB", 8, 40.0, 64.0, 512.0,
                  labels=(("elastico.io/mig-gpus", "8"),)),
             Node("n1", "A100-40GB", 8, 40.0, 64.0, 512.0)]
    cat = JobCatalog(PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference()))
    job = job8()
    fam = cat.family(job)
    tput, _ = cat.arrays(job, resource_space_for(nodes))
    shared = [k for k, c in enumerate(fam.configs)
              if not c.is_wait and c.mig_profile is None and c.gpu_share < 1.0]
    others = [k for k, c in enumerate(fam.configs) if k not in shared]
    assert shared and any(fam.configs[k].mig_profile for k in others)
    for k in shared:
        c = fam.configs[k]
        # the model's figure for the same configuration with hbm_by_share, over the job's
        # reference tokens/s (test_llm_model.py checks that figure against the roofline by hand)
        tps = LS._evaluate(job, replace(LS.llm_config_of(job, c), hbm_by_share=True))
        assert tput[k] == pytest.approx(tps / job.llm.reference_tokens_per_s)
        assert tput[k] <= c.throughput
    # decode-bound: at least one share is valued strictly below its solo speed
    assert any(tput[k] < fam.configs[k].throughput * 0.99 for k in shared)
    assert np.array_equal(tput[others], np.array([fam.configs[k].throughput for k in others]))
