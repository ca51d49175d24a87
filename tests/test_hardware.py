"""The GPU catalogue (elastico.hardware): lookups, aliases, errors, and datasheet numbers
checked by hand against the NVIDIA datasheets / whitepapers each entry cites."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import yaml

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


def test_specs_are_hashable_and_picklable():
    import pickle

    for s in GPUS.values():
        back = pickle.loads(pickle.dumps(s))
        assert back == s and hash(back) == hash(s)
        with pytest.raises(TypeError):
            back.peak_tflops["fp32"] = 1.0  # read-only after the trip too


def test_precision_lookup():
    assert gpu_spec("A10").tflops("bf16") == 125.0
    assert gpu_spec("V100M16").tflops("bf16") is None
    with pytest.raises(InvalidArgument):
        gpu_spec("A10").tflops("fp64")


def test_mig_tables_agree_with_the_catalogue():
    from elastico.mig import MIG_GEOMETRY, MIG_PROFILES
    from elastico.model import MIG_CAPABLE_MODELS

    for model, table in MIG_PROFILES.items():
        spec = gpu_spec(model)
        assert spec.mig, model
        C, M = MIG_GEOMETRY[model]
        whole = [p for p in table.values() if p.compute_slices == C and p.memory_slices == M]
        assert len(whole) == 1 and whole[0].memory_gib == spec.memory_gib, model
    assert MIG_CAPABLE_MODELS == {m for m in MIG_PROFILES if gpu_spec(m).mig}
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H200", "A30"} <= MIG_CAPABLE_MODELS
    assert not any(gpu_spec(m).mig for m in ("T4", "V100M16", "A10", "L4", "L40S", "A40"))


# --- one catalogue: no second copy of a GPU number -------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
#: Where GPU numbers may be written: the catalogue, and the MIG geometry (per-profile slices).
_ALLOWED = {"elastico/hardware.py", "elastico/mig.py"}
_NAMES = (set(GPUS) | set(ALIASES) | set(NVML_NAMES)
          | {n for s in GPUS.values() for n in s.nvml_names})


def _figures(name: str) -> set[float]:
    """Every number the catalogue holds for GPU ``name``."""
    s = gpu_spec(name)
    return {float(v) for v in (s.memory_gib, s.sms, s.hbm_gbps, s.nvlink_gbps, s.pcie_gbps,
                               *s.peak_tflops.values()) if v is not None}


def _numbers(node: ast.AST) -> list[float]:
    return [float(n.value) for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]


def _gpu_name(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in _NAMES else None


def second_copies(source: str) -> list[str]:
    """GPU numbers written in ``source`` beside a GPU's name: a dict keyed by a catalogue name
    with a number in its value (``{"A100-40GB": 40.0}``, ``{"T4": GpuSpec(8.1, 320)}``), or a
    dict / call / tuple / list holding a catalogue name and, directly, one of that GPU's
    catalogue figures (``{"model": "A100-40GB", "memory_gib": 40.0}``,
    ``GpuInfo(0, "u", "A100-40GB", 40.0)``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if k is not None and _gpu_name(k) and _numbers(v):
                    out.append(f"line {node.lineno}: {k.value!r}: {_numbers(v)}")
            parts = list(node.values)
        elif isinstance(node, ast.Call):
            parts = list(node.args) + [k.value for k in node.keywords]
        elif isinstance(node, (ast.Tuple, ast.List)):
            parts = list(node.elts)
        else:
            continue
        names = [n for n in map(_gpu_name, parts) if n]
        nums = [float(p.value) for p in parts if isinstance(p, ast.Constant)
                and isinstance(p.value, (int, float)) and not isinstance(p.value, bool)]
        for n in names:
            same = sorted(set(nums) & _figures(n))
            if same:
                out.append(f"line {node.lineno}: {n!r} with {same}")
    return out


def test_the_scan_finds_copies():
    assert second_copies('X = {"A100-40GB": 40.0}')
    assert second_copies('X = {"T4": GpuSpec(8.1, 320.0)}')
    assert second_copies('X = {"H100-80GB": 1.0}')  # any number keyed by a GPU: not here
    assert second_copies('x = [{"model": "A100-40GB", "memory_gib": 40.0}]')
    assert second_copies('g = GpuInfo(0, "u", "NVIDIA A100-SXM4-80GB", 80.0)')
    assert not second_copies('o = Observation(gpu_model="T4", slowdown=1.2)')
    assert not second_copies('m = {"A100-40GB": "A100-40GB"}')


def test_no_second_copy_of_a_gpu_number_in_the_code():
    found = []
    for folder in ("elastico", "services", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in _ALLOWED:
                found += [f"{rel} {c}" for c in second_copies(path.read_text())]
    assert not found, ("GPU numbers outside elastico/hardware.py; read them from "
                       "elastico.hardware.gpu_spec instead:\n" + "\n".join(found))


def test_cluster_files_hold_no_gpu_memory_of_a_catalogue_model():
    # the loader refuses a gpu_mem_gib that disagrees with the catalogue; the bundled files
    # do not repeat the catalogue at all
    from elastico.sim.clusters import parse_cluster

    files = sorted((ROOT / "data" / "clusters").glob("*.yaml"))
    assert files
    for f in files:
        doc = yaml.safe_load(f.read_text())
        for i, pool in enumerate(doc["pools"]):
            assert "gpu_mem_gib" not in pool or pool["gpu_model"] not in GPU_MEMORY_GIB, (f, i)
        for pool in parse_cluster(doc, str(f)).pools:
            assert pool.gpu_mem_gib == gpu_spec(pool.gpu_model).memory_gib
