"""Which of ElastiCo's MIG tables (:data:`elastico.mig.MIG_GEOMETRY`) describes a GPU.

NVML names a GPU by its product name ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe",
"NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A30"); the MIG tables are
keyed by model and memory ("A100-40GB", "H100-94GB", ...).  The memory decides between the
sizes of one model (A100 40 vs 80 GB; H100 80 vs 94 vs 96 GB), read from NVML's total memory
in GiB, which is a little under the marketing size (an H100 80GB reports ~79.6 GiB, an H200
~139.8 GiB).  A simulated GPU may be named by the table key itself.

Who calls it: the node agent (inventory, MIG plans, device plugin).  Whom it calls:
:mod:`elastico.mig` (the table keys) and :mod:`elastico.hardware` (each table's GPU memory).
Pure.
"""

from __future__ import annotations

import re

from elastico.hardware import gpu_spec
from elastico.mig import MIG_GEOMETRY

__all__ = ["mig_table_model", "simulated_model_names"]


#: NVML product-name pattern (after "NVIDIA ", upper case) -> the MIG tables of that GPU family;
#: the one whose catalogue memory is nearest the GPU's reported memory applies.
_FAMILIES = (
    (re.compile(r"^A30\b"), ("A30",)),
    (re.compile(r"^A100\b"), ("A100-40GB", "A100-80GB")),
    (re.compile(r"^H200\b"), ("H200",)),
    (re.compile(r"^(H100|GH200)\b"), ("H100-80GB", "H100-94GB", "H100-96GB")),
)


def mig_table_model(name: str, memory_gib: float) -> str | None:
    """The MIG table key for a GPU called ``name`` with ``memory_gib`` GiB of memory, or None
    when ElastiCo has no MIG table for it (e.g. a V100 or T4).  Within a family the table whose
    GPU memory (:func:`elastico.hardware.gpu_spec`) is nearest ``memory_gib`` wins (a tie: the
    smaller)."""
    if name in MIG_GEOMETRY:
        return name
    n = re.sub(r"^NVIDIA\s+", "", str(name).strip(), flags=re.I).upper()
    for pattern, tables in _FAMILIES:
        if pattern.match(n):
            return min(tables, key=lambda t: (abs(gpu_spec(t).memory_gib - memory_gib),
                                              gpu_spec(t).memory_gib))
    return None


def simulated_model_names() -> tuple[str, ...]:
    """The names a simulated GPU (``ELASTICO_SIMULATED_GPUS``) may have, exactly as written:
    ElastiCo's GPU models (the throughput model's and the MIG tables' keys) and the NVML
    product names the scheduler maps to them (:data:`elastico.hardware.NVML_NAMES`)
    -- a name outside these would advertise a GPU the scheduler never places on."""
    from elastico.hardware import NVML_NAMES
    from elastico.perf.throughput import ThroughputModel

    return tuple(sorted(set(ThroughputModel.bundled().gpu_models()) | set(MIG_GEOMETRY)
                        | set(NVML_NAMES)))
