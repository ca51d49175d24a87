"""The GPU catalogue: every fact about a GPU model that ElastiCo uses, each with its source.

One table per fact, keyed by ElastiCo's model names (the trace's ``T4``, ``V100M32``, ...;
``A100-80GB``, ``H100-80GB``, ...): GPU memory (:data:`GPU_MEMORY_GIB`) and the names NVML
reports (:data:`NVML_NAMES`).  MIG geometry lives in :mod:`elastico.mig`; training speed per
model in :mod:`elastico.perf.throughput`.  Every other module reads GPU numbers from here.
Pure: constants and lookups.
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["GPU_MEMORY_GIB", "NVML_NAMES", "gpu_model_name"]

#: Memory of one GPU in GiB per trace model name.
#:
#: * P100 16 GiB  -- NVIDIA Tesla P100 datasheet (16 GB HBM2 variant; a 12 GB PCIe variant
#:   exists, the trace does not say which; we take 16).
#: * T4 16 GiB    -- NVIDIA T4 datasheet (16 GB GDDR6).
#: * V100M16 16 GiB, V100M32 32 GiB -- NVIDIA V100 datasheet (16/32 GB HBM2); the trace's
#:   model names carry the size.
#: * A10 24 GiB   -- NVIDIA A10 datasheet (24 GB GDDR6).
#: * G2, G3: anonymised by Alibaba ("undisclosed internal codes", trace README).
#:   ASSUMPTION: 16 GiB, the smallest size among the disclosed models of the same cluster, so
#:   nothing that we place on them could fail to fit a real device of that class.
#: * A100-40GB 40, A100-80GB 80 (NVIDIA A100 datasheet) -- not in the trace; listed so that a
#:   MIG-capable cluster (MISO's A100-40GB) can be described.
#: * H100-80GB 80 (NVIDIA H100 datasheet, SXM5 and PCIe: 80 GB HBM3/HBM2e) -- not in the
#:   trace; the throughput model has a speed for it (data/clusters/a100h100-mig.yaml).
GPU_MEMORY_GIB: dict[str, float] = {
    "P100": 16.0,
    "T4": 16.0,
    "V100M16": 16.0,
    "V100M32": 32.0,
    "A10": 24.0,
    "G2": 16.0,
    "G3": 16.0,
    "A100-40GB": 40.0,
    "A100-80GB": 80.0,
    "H100-80GB": 80.0,
}

#: NVML product names (``nvmlDeviceGetName``) -> the GPU model names of
#: :mod:`elastico.perf.throughput`.  Exact strings only: a name not listed must be written by the
#: node agent in ElastiCo's own spelling (e.g. ``A100-40GB``), never guessed from a substring.
NVML_NAMES: Mapping[str, str] = {
    "Tesla P100-PCIE-16GB": "P100", "Tesla P100-SXM2-16GB": "P100",
    "Tesla V100-SXM2-16GB": "V100M16", "Tesla V100-PCIE-16GB": "V100M16",
    "Tesla V100-SXM2-32GB": "V100M32", "Tesla V100-PCIE-32GB": "V100M32",
    "Tesla V100S-PCIE-32GB": "V100M32",
    "Tesla T4": "T4", "NVIDIA A10": "A10",
    "NVIDIA A100-SXM4-40GB": "A100-40GB", "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA A100 80GB PCIe": "A100-80GB",
}


def gpu_model_name(name: str, known: Iterable[str]) -> str | None:
    """ElastiCo's name of a GPU model reported as ``name`` (itself when known, else the
    :data:`NVML_NAMES` entry when that is known), or None."""
    known = set(known)
    if name in known:
        return name
    mapped = NVML_NAMES.get(name)
    return mapped if mapped in known else None
