"""An offline LLM inference pod through the live path (issue 21, deliverable 5): the kmock API
server and the real SchedulerLoop bind it with its decision, and the device plugin over its
unix socket gives the container the booked memory as its limit (tests/test_live_memory_shares.py's
harness).

Hand-worked: Llama-3-8B at ``gpu-fraction 0.5`` on an A100-80GB node books 0.5 x 80 = 40 GiB,
pinned ``0=40G``, tensor parallel 1 (one engine); Llama-2-70B on a 2-GPU node with
``elastico.io/gpus: 2`` is one TP-2 engine on whole GPUs (80 GiB each, no MPS limit), and
asking one GPU it is Rejected (128.5 GiB of weights).
"""

from __future__ import annotations

import pytest

pytest.importorskip("kmock")

from elastico.placer.kube import annotations as A  # noqa: E402
from test_kube_loop import NS, core, emu, events, make_loop, make_node, make_pod, pod, step  # noqa: E402,F401
from test_live_memory_shares import allocate_bound_pod, booking, plugin_for, rejected  # noqa: E402,F401

LLM = {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-3-8B", A.LLM_REQUESTS: "512:128x1000"}


def test_an_llm_pod_at_half_a_gpu_is_pinned_its_booked_memory(core, make_loop, plugin_for):
    make_node(core, "a80", model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "sum", {**LLM, A.GPU_FRACTION: "0.5"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/sum"], (rep.rejected, rep.waiting)
    b = booking(core, "sum")
    assert (b.gpu_share, b.gpu_mem_gib, b.tensor_parallel, b.job_type) == (
        0.5, 40.0, 1, "LLM Llama-3-8B")
    ann = pod(core, "sum")["metadata"]["annotations"]
    assert (ann[A.MPS_PINNED_MEM_LIMIT_GIB], ann[A.TENSOR_PARALLEL]) == ("40", "1")
    envs = allocate_bound_pod(core, "sum", plugin_for, "a80", "A100-80GB", 80.0, 1)
    assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40G"
    assert (envs["ELASTICO_GPU_MEMORY_GIB"], envs["ELASTICO_GPU_MEMORY_FRACTION"]) == ("40", "0.5")
    assert (envs["ELASTICO_LLM_TENSOR_PARALLEL"], envs["ELASTICO_LLM_REPLICAS"]) == ("1", "1")
    # a later round rebuilds the book from the pod and keeps it booked as it is
    rep = step(loop, core)
    assert not rep.rejected and booking(core, "sum") == b


def test_a_70b_pod_runs_one_tp2_engine_on_two_whole_gpus_and_one_gpu_is_rejected(
        core, make_loop, plugin_for):
    make_node(core, "h2", model="A100-80GB", gpus=2, mem=80.0)
    make_pod(core, "eval", {**LLM, A.LLM_MODEL: "Llama-2-70B", A.GPUS: "2"}, gpu="1")
    make_pod(core, "small", {**LLM, A.LLM_MODEL: "Llama-2-70B", A.GPU_MODEL: "A100-80GB"})
    loop = make_loop()
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/eval"], (rep.rejected, rep.waiting)
    b = booking(core, "eval")
    assert (len(b.gpu_indices), b.gpu_share, b.gpu_mem_gib, b.tensor_parallel) == (2, 1.0, 80.0, 2)
    assert A.MPS_PINNED_MEM_LIMIT_GIB not in pod(core, "eval")["metadata"]["annotations"]
    envs = allocate_bound_pod(core, "eval", plugin_for, "h2", "A100-80GB", 80.0, 2)
    assert (envs["ELASTICO_GPU_MEMORY_GIB"], envs["ELASTICO_LLM_TENSOR_PARALLEL"],
            envs["ELASTICO_LLM_REPLICAS"]) == ("80", "2", "1")
    (msg,) = rejected(core, "small")
    assert "elastico.io/llm-model: 'Llama-2-70B' is not allowed" in msg and "128.5 GiB" in msg
