"""The scheduler places on every GPU of the catalogue (issue 21, gap 3): the GPU models it
accepts by name are elastico.hardware's (every GpuSpec key and alias; one source of truth),
and every catalogue NVML product name maps to one of them -- an L4, H200 or B200 node is no
longer refused as "unknown to the throughput model", and a pod runs there.  On main the
scheduler knew ten names (the trace's and the MIG clusters'): L4, L40S, H200, B200, GH200, A30,
A40, H100 PCIe/NVL and the older ones were refused."""

from __future__ import annotations

import json

import pytest

from elastico import hardware
from elastico.mig import MIG_PROFILES
from elastico.perf.throughput import SCHEDULER_GPU_MODELS, ThroughputModel

TM = ThroughputModel.bundled()


def test_the_accepted_names_are_the_catalogues():
    assert SCHEDULER_GPU_MODELS is hardware.SCHEDULER_NAMES
    assert set(TM.gpu_models()) == set(hardware.GPUS) | set(hardware.ALIASES)
    for name in ("L4", "L40S", "A30", "A40", "H100-PCIE", "H100-NVL", "H200", "GH200", "B200"):
        assert name in TM.gpu_models()
    # every one has a training speed (the scheduler prices training jobs on it) ...
    for g in TM.gpu_models():
        assert TM.solo("ResNet-50 (batch size 64)", g) > 0
    # ... and every NVML product name of the catalogue is placed as one of them, the MIG-capable
    # H100 and GH200 as their MIG table's name
    names = {n for s in hardware.GPUS.values() for n in s.nvml_names}
    assert set(hardware.NVML_NAMES) == names
    for n, m in hardware.NVML_NAMES.items():
        assert m in TM.gpu_models(), n
    assert hardware.NVML_NAMES["NVIDIA H100 80GB HBM3"] == "H100-80GB" in MIG_PROFILES
    assert hardware.NVML_NAMES["NVIDIA H200"] == "H200" in MIG_PROFILES
    assert hardware.NVML_NAMES["NVIDIA L4"] == "L4" and hardware.NVML_NAMES["NVIDIA B200"] == "B200"
    # the trace's pools keep their members (a V100 PCIe joins V100M16)
    assert hardware.NVML_NAMES["Tesla V100-PCIE-16GB"] == "V100M16"


def _node(model: str, mem: float, gpus: int = 2, mig: bool = False) -> dict:
    inv = [{"index": i, "uuid": f"GPU-{model}-{i}", "model": model, "memory_gib": mem,
            "healthy": True, "mig_mode": mig} for i in range(gpus)]
    return {"metadata": {"name": f"n-{model}", "annotations": {"elastico.io/gpu-inventory":
                                                               json.dumps(inv)}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("reported, placed_as", [
    ("L4", "L4"), ("NVIDIA L4", "L4"), ("H200", "H200"), ("NVIDIA H200", "H200"),
    ("B200", "B200"), ("NVIDIA B200", "B200"), ("NVIDIA L40S", "L40S"), ("NVIDIA A30", "A30"),
    ("NVIDIA H100 80GB HBM3", "H100-80GB"), ("NVIDIA GH200 480GB", "H100-96GB"),
    ("Tesla K80", "K80"), ("A100-80GB", "A100-80GB"),
])
def test_a_node_of_a_catalogue_gpu_is_in_the_inventory(reported, placed_as):
    from kubernetes.utils import parse_quantity

    from elastico.placer.kube.inventory import node_inventory

    mem = hardware.gpu_spec(reported).memory_gib * 0.99  # NVML reports a little less
    inv = node_inventory(_node(reported, mem), known_models=TM.gpu_models(), quantity=parse_quantity)
    assert not isinstance(inv, str), inv
    assert inv.node.gpu_model == placed_as and inv.node.num_gpus == 2


def test_an_h200_in_mig_mode_finds_its_profile_table_and_an_unknown_name_is_still_refused():
    from kubernetes.utils import parse_quantity

    from elastico.placer.kube.inventory import node_inventory

    inv = node_inventory(_node("NVIDIA H200", 139.8, mig=True), known_models=TM.gpu_models(),
                         quantity=parse_quantity)
    assert not isinstance(inv, str) and inv.mig_gpus == (0, 1)
    why = node_inventory(_node("NVIDIA Z100", 80.0), known_models=TM.gpu_models(),
                         quantity=parse_quantity)
    assert isinstance(why, str) and "Z100" in why


kmock = pytest.importorskip("kmock")

from elastico.placer.kube import annotations as A  # noqa: E402
from test_kube_loop import NS, core, emu, make_loop, make_node, make_pod, pod, step  # noqa: E402,F401


def test_the_live_loop_binds_pods_on_l4_h200_and_b200_nodes(core, make_loop):
    # an L4 (24 GB) for a training pod, an H200 (141 GB) for Llama-2-70B at TP 1 in fp8
    # (64 GiB of weights: more than an L4 holds), a B200 for a service
    make_node(core, "l4", model="NVIDIA L4", gpus=1, mem=22.0)
    make_node(core, "h200", model="NVIDIA H200", gpus=1, mem=139.8)
    make_node(core, "b200", model="B200", gpus=1, mem=178.0)
    make_pod(core, "train", {A.GPU_MODEL: "L4", A.JOB_TYPE: "ResNet-50 (batch size 64)",
                             A.WORK: "600"})
    make_pod(core, "llm", {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-2-70B",
                           A.LLM_DTYPE: "fp8", A.LLM_REQUESTS: "512:128x100",
                           A.GPU_MODEL: "H200"})
    make_pod(core, "svc", {A.WORKLOAD: "service", A.GPU_MODEL: "B200"})
    loop = make_loop()
    rep = step(loop, core)
    assert sorted(rep.bound) == [f"{NS}/llm", f"{NS}/svc", f"{NS}/train"], (rep.rejected,
                                                                            rep.waiting)
    assert pod(core, "train")["spec"]["nodeName"] == "l4"
    assert pod(core, "llm")["spec"]["nodeName"] == "h200"
    assert pod(core, "svc")["spec"]["nodeName"] == "b200"
    assert pod(core, "llm")["metadata"]["annotations"][A.CONFIGURATION].startswith("H200 x1")
