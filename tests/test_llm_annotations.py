"""The live API of an offline LLM inference pod (issue 21, deliverable 5): its ``elastico.io/llm-*``
annotations, validated strictly (each bad value refused naming the annotation, its value and
what is allowed), the job built from them, the decision the placer writes and what the device
plugin gives the container -- a memory limit that is exactly the booking.

Hand-worked (docs/annotations.md, "Offline LLM inference pods"): Llama-3-8B (14.96 GiB of fp16
weights) at ``gpu-fraction 0.5`` of an A100-80GB books 0.5 x 80 = 40 GiB, pinned as
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40G``, ``ELASTICO_GPU_MEMORY_GIB=40``,
``ELASTICO_GPU_MEMORY_FRACTION=0.5``; the LLM model sized its KV cache in those 40 GiB
(0.9 x 40 - 14.96 - workspace).  Llama-2-70B (128.5 GiB) at ``gpus 2`` without
``llm-tensor-parallel`` runs one engine of TP 2 (64.2 GiB per GPU); at ``gpus 1`` it fits no
GPU model (an 80 GiB GPU gives vLLM 72) and is refused.
"""

from __future__ import annotations

import json

import pytest

from elastico.errors import InvalidArgument
from elastico.model import JobKind, Node
from elastico.nodeagent.allocation import build_allocation, parse_decision
from elastico.nodeagent.backend import GpuInfo, pinned_mem_limit_env
from elastico.perf import llm as P
from elastico.perf.throughput import ThroughputModel
from elastico.placer.kube import annotations as A
from elastico.placer.placement import Assignment, Part
from elastico.placer.policies.common import JobCatalog, PolicyEnv
from elastico.predictor import NoInterference
from elastico import llm_shapes as LS

TM = ThroughputModel.bundled()
MODELS, TYPES = TM.gpu_models(), TM.job_types()
LLM = {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-3-8B", A.LLM_REQUESTS: "512:128x1000"}
CONFIG_JSON = json.dumps({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                          "num_attention_heads": 32, "num_key_value_heads": 8,
                          "vocab_size": 128256, "intermediate_size": 14336,
                          "_name_or_path": "my-org/llama3-8b-ft"})


def parse(ann):
    return A.parse_pod_annotations(ann, gpu_models=MODELS, job_types=TYPES)


def test_an_llm_pod_is_read_with_its_model_work_precision_and_engine():
    s = parse({**LLM, A.GPU_MODEL: "A100-80GB,H100-80GB", A.LLM_DTYPE: "bf16",
               A.LLM_ENGINE: "tensorrt-llm"})
    L = s.llm
    assert (L.model.name, L.work.total_requests, L.work.total_tokens) == ("Llama-3-8B", 1000, 640_000)
    assert (L.dtype, L.kv_dtype, L.engine, L.tp) == ("bf16", None, "tensorrt-llm", 1)
    # the reference: the first allowed model (the throughput model's order) where it fits
    assert (L.reference_gpu, L.reference_memory_gib) == ("A100-80GB", 80.0)
    job = A.build_job("default/p", s, 1, 4.0, 16.0, 0.0)
    assert job.kind is JobKind.INFERENCE and job.llm.model.name == "Llama-3-8B"
    assert job.llm.reference_tokens_per_s > 0 and not job.reshape


def test_the_model_annotation_is_matched_ignoring_case_as_the_cli_does():
    # elastico.io/llm-model: llama-3-8b is the catalogue's Llama-3-8B, as `elastico llm
    # --model` and a jobs file read it; a Hugging Face id in any case too
    for raw in ("llama-3-8b", "LLAMA-3-8B", "meta-llama/meta-llama-3-8b"):
        assert parse({**LLM, A.LLM_MODEL: raw}).llm.model.name == "Llama-3-8B", raw
    with pytest.raises(InvalidArgument, match="llm-model: 'llama-3-9b' is not allowed"):
        parse({**LLM, A.LLM_MODEL: "llama-3-9b"})


def test_a_model_given_by_its_config_json_and_a_token_budget():
    s = parse({A.WORKLOAD: "inference", A.LLM_MODEL_CONFIG: CONFIG_JSON, A.LLM_TOKENS: "1e7",
               A.LLM_LENGTHS: "azure-code"})
    assert s.llm.model.name == "my-org/llama3-8b-ft" and s.llm.model.kv_heads == 8
    assert s.llm.work.total_tokens == pytest.approx(1e7, rel=1e-3)


def test_tensor_parallel_defaults_to_all_the_pods_gpus_and_replicas_are_the_rest():
    s = parse({**LLM, A.LLM_MODEL: "Llama-2-70B", A.GPUS: "2"})
    assert s.llm.tp == 2
    s = parse({**LLM, A.GPUS: "4", A.LLM_TENSOR_PARALLEL: "2"})
    job = A.build_job("default/p", s, 1, 4.0, 16.0, 0.0)
    assert (job.llm.tp, job.llm.replicas, job.request.num_gpus) == (2, 2, 4)


@pytest.mark.parametrize("extra, key, value, allowed", [
    ({A.LLM_MODEL: "GPT-9"}, A.LLM_MODEL, "GPT-9", "Llama-3-8B"),
    ({A.LLM_MODEL_CONFIG: "{}"}, A.LLM_MODEL, "Llama-3-8B", "exactly one of"),
    ({A.LLM_REQUESTS: "512x128"}, A.LLM_REQUESTS, "512x128", "INPUT:OUTPUT"),
    ({A.LLM_REQUESTS: "512:128x0"}, A.LLM_REQUESTS, "512:128x0", "INPUT:OUTPUT"),
    ({A.LLM_TOKENS: "1e9"}, A.LLM_REQUESTS, "512:128x1000", "exactly one of"),
    ({A.LLM_LENGTHS: "azure-conv"}, A.LLM_LENGTHS, "azure-conv", "only with"),
    ({A.LLM_DTYPE: "fp4"}, A.LLM_DTYPE, "fp4", "fp16"),
    ({A.LLM_KV_DTYPE: "int4"}, A.LLM_KV_DTYPE, "int4", "fp8"),
    ({A.LLM_ENGINE: "sglang"}, A.LLM_ENGINE, "sglang", "vllm"),
    ({A.LLM_TENSOR_PARALLEL: "0"}, A.LLM_TENSOR_PARALLEL, "0", "an integer in 1..64"),
    ({A.LLM_TENSOR_PARALLEL: "2"}, A.LLM_TENSOR_PARALLEL, "2", "a divisor of elastico.io/gpus=1"),
    ({A.GPUS: "3", A.LLM_TENSOR_PARALLEL: "3"}, A.LLM_TENSOR_PARALLEL, "3",
     "a divisor of the model's heads=32"),
    ({A.WORK: "3600"}, A.WORK, "3600", "absent on an offline LLM inference pod"),
    ({A.JOB_TYPE: "LM (batch size 20)"}, A.JOB_TYPE, "LM (batch size 20)", "absent"),
    ({A.WORKLOAD: "training"}, A.LLM_MODEL, "Llama-3-8B", "only on a pod with elastico.io/workload inference"),
    # on one A100-80GB (0.9 x 80 GiB for vLLM); unrestricted it fits a B200 (below)
    ({A.LLM_MODEL: "Llama-2-70B", A.GPU_MODEL: "A100-80GB"}, A.LLM_MODEL, "Llama-2-70B",
     "exceed the 72.0 GiB vllm may use"),
    ({A.GPU_MODEL: "T4"}, A.LLM_MODEL, "Llama-3-8B", "T4: weights 15.0 GiB"),
    ({A.GPU_MODEL: "G2"}, A.LLM_MODEL, "Llama-3-8B", "no allowed GPU model has LLM figures"),
])
def test_each_bad_llm_value_is_refused_naming_the_annotation_value_and_allowed(
        extra, key, value, allowed):
    with pytest.raises(InvalidArgument) as e:
        parse({**LLM, **extra})
    assert (e.value.field, e.value.value) == (key, value), e.value
    assert allowed in e.value.allowed, e.value.allowed


@pytest.mark.parametrize("raw, allowed", [
    ("not json", "a JSON object"), ("[1, 2]", "a JSON object"),
    ('{"num_hidden_layers": NaN}', "a JSON object"),
    ('{"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000}',
     "config.num_hidden_layers: None is not allowed (a key config.json must have; missing here"),
    ('{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
     '"num_key_value_heads": 5, "vocab_size": 32000}', "model.kv_heads: 5"),
    ('{"num_hidden_layers": 0, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 1}',
     "model.layers: 0 is not allowed (an integer >= 1)"),
])
def test_a_bad_model_config_is_refused_with_the_inner_field(raw, allowed):
    with pytest.raises(InvalidArgument) as e:
        parse({A.WORKLOAD: "inference", A.LLM_MODEL_CONFIG: raw, A.LLM_REQUESTS: "512:128x10"})
    assert e.value.field == A.LLM_MODEL_CONFIG and allowed in e.value.allowed, e.value


def test_the_booking_of_an_llm_pod_is_the_memory_limit_the_device_plugin_gives():
    s = parse({**LLM, A.GPU_FRACTION: "0.5", A.GPU_MODEL: "A100-80GB"})
    job = A.build_job("default/p", s, 1, 4.0, 16.0, 0.0)
    nodes = [Node("n1", "A100-80GB", 1, 80.0, 32.0, 256.0)]
    cat = JobCatalog(PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference()))
    (c,) = [c for c in cat.family(job).configs if c.mig_profile is None and not c.is_wait]
    assert (c.gpu_share, c.gpu_mem_gib, c.replica_gpus) == (0.5, 40.0, 1)
    # the LLM model sized the batch for exactly the booked memory
    assert LS.llm_config_of(job, c).memory_limit_gib == 40.0
    a = Assignment(job.id, (Part("n1", 0, (0,), 4.0, 16.0),), gpu_share=c.gpu_share,
                   gpu_mem_gib=c.gpu_mem_gib, config_name=c.name, gpu_model=c.gpu_model)
    (b,) = A.split_assignment(job, c, a, ["p"], {"n1": ["GPU-a"]}, "r/1", 1.0)
    ann = {k: v for k, v in A.decision_annotations(b).items() if v is not None}
    assert (ann[A.MPS_PINNED_MEM_LIMIT_GIB], ann[A.TENSOR_PARALLEL]) == ("40", "1")
    assert A.parse_booking(ann).configuration().replica_gpus == 1
    alloc = build_allocation(parse_decision(ann), [GpuInfo(0, "GPU-a", "A100-80GB", 80.0)])
    assert alloc.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == pinned_mem_limit_env(c.gpu_mem_gib, 1) == "0=40G"
    assert alloc.envs["ELASTICO_GPU_MEMORY_GIB"] == "40"
    assert alloc.envs["ELASTICO_GPU_MEMORY_FRACTION"] == "0.5"
    assert (alloc.envs["ELASTICO_LLM_TENSOR_PARALLEL"], alloc.envs["ELASTICO_LLM_REPLICAS"]) == ("1", "1")


@pytest.mark.parametrize("share, limit", [(0.3, "24G"), (0.33, "27033M")])
def test_a_fractional_booking_is_whole_mib_as_pinned(share, limit):
    # 0.33 x 80 GiB = 26.4 GiB = 27033.6 MiB: booked (and so given to the LLM model) as 27033
    s = parse({**LLM, A.GPU_FRACTION: str(share), A.GPU_MODEL: "A100-80GB"})
    job = A.build_job("default/p", s, 1, 4.0, 16.0, 0.0)
    c = LS.requested_configuration(job, "A100-80GB", 80.0, whole_gpus=False)
    assert pinned_mem_limit_env(c.gpu_mem_gib, 1) == f"0={limit}"
    assert c.gpu_mem_gib * 1024 == int(c.gpu_mem_gib * 1024)


def test_whole_gpu_and_mig_bookings_give_their_memory():
    dec = parse_decision({A.ROUND_ID: "r", A.CONFIGURATION: "c", A.GPU_UUIDS: "GPU-a,GPU-b",
                          A.TENSOR_PARALLEL: "2"})
    gpus = [GpuInfo(0, "GPU-a", "A100-80GB", 80.0), GpuInfo(1, "GPU-b", "A100-80GB", 80.0)]
    envs = build_allocation(dec, gpus).envs
    assert (envs["ELASTICO_GPU_MEMORY_GIB"], envs["ELASTICO_GPU_MEMORY_FRACTION"]) == ("80", "1")
    assert (envs["ELASTICO_LLM_TENSOR_PARALLEL"], envs["ELASTICO_LLM_REPLICAS"]) == ("2", "1")
    mig = parse_decision({A.ROUND_ID: "r", A.CONFIGURATION: "c", A.GPU_UUIDS: "GPU-c",
                          A.MIG_PROFILE: "3g.40gb", A.MIG_START_SLOT: "4"})
    envs = build_allocation(mig, [GpuInfo(2, "GPU-c", "A100-80GB", 80.0, mig_mode=True)],
                            mig_uuid="MIG-1").envs
    assert envs["ELASTICO_GPU_MEMORY_GIB"] == "40"   # 4 of 8 memory slices of 80 GiB
    with pytest.raises(InvalidArgument) as e:
        parse_decision({A.ROUND_ID: "r", A.CONFIGURATION: "c", A.GPU_UUIDS: "GPU-a,GPU-b",
                        A.TENSOR_PARALLEL: "3"})
    assert e.value.field == f"annotation {A.TENSOR_PARALLEL}"
