"""The GPU catalogue (elastico.hardware): lookups, aliases, errors, and datasheet numbers
checked by hand against the NVIDIA datasheets / whitepapers each entry cites."""

from __future__ import annotations

import math

import pytest

from elastico.errors import InvalidArgument
from elastico.hardware import (ALIASES, GENERATIONS, GPU_MEMORY_GIB, GPUS, NVML_NAMES, PRECISIONS,
                               GpuSpec, gpu_spec)


def test_every_entry_is_well_formed():
    for name, s in GPUS.items():
        assert isinstance(s, GpuSpec) and s.name == name
        assert s.memory_gib > 0 and s.generation in GENERATIONS and s.source
        assert set(s.peak_tflops) <= set(PRECISIONS)
        assert all(math.isfinite(v) and v > 0 for v in s.peak_tflops.values())
        assert s.sms is None or s.sms > 0
        for bw in (s.hbm_gbps, s.nvlink_gbps, s.pcie_gbps):
            assert bw is None or (math.isfinite(bw) and bw > 0)
        if s.generation != "unknown":  # a real product: its datasheet has these
            assert s.hbm_gbps and "fp32" in s.peak_tflops and "http" in s.source, name
        else:
            assert s.assumed and not s.peak_tflops and s.sms is None and s.hbm_gbps is None


def test_hand_checked_datasheet_numbers():
    a100 = gpu_spec("A100-80GB")  # A100 datasheet, SXM4 80GB column; A100 whitepaper
    assert (a100.sms, a100.peak_tflops["fp16"], a100.peak_tflops["bf16"], a100.hbm_gbps) == (
        108, 312.0, 312.0, 2039.0)
    assert (a100.memory_gib, a100.nvlink_gbps, a100.pcie_gbps, a100.mig) == (80.0, 600.0, 64.0, True)
    assert gpu_spec("A100-40GB").hbm_gbps == 1555.0
    assert gpu_spec("NVIDIA A100 80GB PCIe").hbm_gbps == 1935.0
    h100 = gpu_spec("H100-SXM")  # H100 datasheet SXM column (1,979 with sparsity); whitepaper 989.4
    assert h100.sms == 132 and h100.hbm_gbps == 3350.0 and h100.nvlink_gbps == 900.0
    assert h100.peak_tflops["fp16"] == pytest.approx(989, abs=1)
    assert h100.peak_tflops["fp8"] == pytest.approx(1979, abs=1)
    assert h100.peak_tflops["fp32"] == 67.0
    pcie = gpu_spec("H100-PCIE")
    assert (pcie.sms, pcie.hbm_gbps, pcie.peak_tflops["bf16"]) == (114, 2000.0, 756.5)
    assert gpu_spec("H200").memory_gib == 141.0 and gpu_spec("H200").hbm_gbps == 4800.0
    v100 = gpu_spec("V100M16")  # V100 datasheet, SXM2 column
    assert (v100.sms, v100.peak_tflops["fp16"], v100.peak_tflops["fp32"], v100.hbm_gbps) == (
        80, 125.0, 15.7, 900.0)
    t4 = gpu_spec("T4")
    assert (t4.sms, t4.peak_tflops["fp16"], t4.hbm_gbps, t4.nvlink_gbps) == (40, 65.0, 320.0, None)
    l40s = gpu_spec("L40S")
    assert (l40s.sms, l40s.peak_tflops["fp8"], l40s.hbm_gbps) == (142, 733.0, 864.0)
    b200 = gpu_spec("B200")  # HGX B200: 36 PFLOPS FP16 with sparsity over 8 GPUs
    assert (b200.peak_tflops["fp16"], b200.hbm_gbps, b200.nvlink_gbps) == (2250.0, 8000.0, 1800.0)


def test_required_models_are_covered():
    for name in ("V100-PCIE-16GB", "V100-PCIE-32GB", "V100-SXM2-16GB", "V100-SXM2-32GB", "T4", "A10",
                 "A30", "A40", "A100-40GB", "A100-80GB", "A100-80GB-PCIE", "A100-PCIE-40GB", "L4",
                 "L40S", "H100-PCIE", "H100-SXM", "H100-NVL", "H200", "GH200", "B200",
                 "P100", "V100M16", "V100M32", "G2", "G3", "H100-80GB", "H100-94GB", "H100-96GB"):
        assert gpu_spec(name).memory_gib > 0


def test_aliases_and_nvml_names_resolve():
    assert gpu_spec("H100-80GB") is GPUS["H100-SXM"]
    assert gpu_spec("V100-SXM2-16GB") is GPUS["V100M16"]
    assert gpu_spec("NVIDIA H100 80GB HBM3") is GPUS["H100-SXM"]
    assert gpu_spec("Tesla V100-PCIE-32GB").name == "V100-PCIE-32GB"
    assert gpu_spec("NVIDIA GH200 480GB").memory_gib == 96.0
    for alias, key in ALIASES.items():
        assert key in GPUS and alias not in GPUS
        assert GPU_MEMORY_GIB[alias] == GPUS[key].memory_gib
    # the scheduler's NVML mapping names catalogue products, placed on a model of equal memory
    for nvml, model in NVML_NAMES.items():
        assert gpu_spec(nvml).memory_gib == gpu_spec(model).memory_gib, nvml


def test_trace_assumption_kept():
    assert {m: GPU_MEMORY_GIB[m] for m in ("P100", "T4", "V100M16", "V100M32", "A10", "G2", "G3")} == {
        "P100": 16.0, "T4": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0, "G2": 16.0, "G3": 16.0}
    assert gpu_spec("G2").peak_tflops == {} and "ASSUMED" in gpu_spec("G2").assumed


@pytest.mark.parametrize("bad", ["A100", "h100-sxm", "", None, 3, "NVIDIA A100"])
def test_unknown_names_are_refused_with_the_known_ones(bad):
    with pytest.raises(InvalidArgument) as e:
        gpu_spec(bad)
    assert e.value.field == "gpu" and e.value.value == bad
    assert "A100-80GB" in e.value.allowed and "H100-SXM" in e.value.allowed


def test_precision_lookup():
    assert gpu_spec("A10").tflops("bf16") == 125.0
    assert gpu_spec("V100M16").tflops("bf16") is None
    with pytest.raises(InvalidArgument):
        gpu_spec("A10").tflops("fp64")
