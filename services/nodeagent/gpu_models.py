"""Which of ElastiCo's MIG tables (:data:`elastico.mig.MIG_GEOMETRY`) describes a GPU.

NVML names a GPU by its product name ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe",
"NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A30"); the MIG tables are
keyed by model and memory ("A100-40GB", "H100-94GB", ...).  The memory decides between the
sizes of one model (A100 40 vs 80 GB; H100 80 vs 94 vs 96 GB), read from NVML's total memory
in GiB, which is a little under the marketing size (an H100 80GB reports ~79.6 GiB, an H200
~139.8 GiB).  A simulated GPU may be named by the table key itself.

Who calls it: the node agent (inventory, MIG plans, device plugin).  Whom it calls:
:mod:`elastico.mig` (the table keys).  Pure.
"""

from __future__ import annotations

import re

from elastico.mig import MIG_GEOMETRY

__all__ = ["mig_table_model", "simulated_model_names"]


def mig_table_model(name: str, memory_gib: float) -> str | None:
    """The MIG table key for a GPU called ``name`` with ``memory_gib`` GiB of memory, or None
    when ElastiCo has no MIG table for it (e.g. a V100 or T4)."""
    if name in MIG_GEOMETRY:
        return name
    n = re.sub(r"^NVIDIA\s+", "", str(name).strip(), flags=re.I).upper()
    if re.match(r"^A30\b", n):
        return "A30"
    if re.match(r"^A100\b", n):
        return "A100-80GB" if memory_gib > 60 else "A100-40GB"
    if re.match(r"^H200\b", n):
        return "H200"
    if re.match(r"^(H100|GH200)\b", n):
        if memory_gib < 88:
            return "H100-80GB"
        return "H100-94GB" if memory_gib < 95 else "H100-96GB"
    return None


def simulated_model_names() -> tuple[str, ...]:
    """The names a simulated GPU (``ELASTICO_SIMULATED_GPUS``) may have, exactly as written:
    ElastiCo's GPU models (the throughput model's and the MIG tables' keys) and the NVML
    product names the scheduler maps to them (:data:`elastico.placer.kube.inventory.NVML_NAMES`)
    -- a name outside these would advertise a GPU the scheduler never places on."""
    from elastico.hardware import NVML_NAMES
    from elastico.perf.throughput import ThroughputModel

    return tuple(sorted(set(ThroughputModel.bundled().gpu_models()) | set(MIG_GEOMETRY)
                        | set(NVML_NAMES)))
