"""What the interference model needs to know about one job on one GPU.

Who builds it: the scheduling round (from a job's type and chosen configuration), the
observation CSV reader (:mod:`elastico.predictor.observations`) and the gRPC adapter; who
reads it: :mod:`elastico.predictor.analytic`, :mod:`elastico.predictor.features` and the
placer (:mod:`elastico.placer.placement`).  The optional fields are the feature schema of
:mod:`elastico.predictor.schema` (docs/predictor.md); ``None`` means "not measured".
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from elastico.errors import InvalidArgument
from elastico.predictor.schema import GPU_SPECS, JOB_FIELDS, KINDS, MAX_MEM_GIB, check_job_field

__all__ = ["JobProfile", "OPTIONAL_FIELDS"]

_NUMERIC_CHECKS: tuple = ()  # set after the class below
_OTHER_CHECKS: tuple = ()

#: The optional schema fields of a profile (everything but job_type, kind, gpu_activity,
#: mem_gib and gpu_model), validated by :func:`elastico.predictor.schema.check_job_field`.
OPTIONAL_FIELDS = ("model_family", "batch_size", "precision", "sharing", "mps_share",
                   "solo_tput", "sm_activity", "dram_activity", "pcie_rx_gbs", "pcie_tx_gbs",
                   "tensor_activity", "power_frac")


@dataclass(frozen=True)
class JobProfile:
    """A job's footprint on each GPU it runs on.

    ``job_type``: a workload name (e.g. a Gavel job type ``"ResNet-50 (batch size 64)"``).
    ``kind``: :class:`elastico.model.JobKind` value (``"training"``, ``"inference"``,
    ``"service"``) or ``""`` when unknown.
    ``gpu_activity``: fraction of the GPU's SMs (0..1) the job keeps busy while running at its
    share, i.e. ``p * normalized speed`` where ``p`` is the job's Amdahl parallel fraction
    (computed by the caller from the throughput model); the analytic model's only input.
    0 means the job never touches the SMs.
    ``mem_gib``: GPU memory footprint per GPU, GiB (0 = not known; at most
    ``schema.MAX_MEM_GIB``, the bound the CSV and gRPC readers apply).
    ``gpu_model``: the GPU model it runs on (a key of ``schema.GPU_SPECS``) or ``""``.
    Optional schema fields (``None`` = missing; units in docs/predictor.md): ``model_family``,
    ``batch_size``, ``precision``, ``sharing``, ``mps_share``, ``solo_tput`` (steps/s alone on
    a whole GPU of ``gpu_model``), ``sm_activity``, ``dram_activity``, ``pcie_rx_gbs``,
    ``pcie_tx_gbs``, ``tensor_activity``, ``power_frac``.
    Raises InvalidArgument (field ``profile.<name>``) for a value out of its range -- the
    schema's ranges and upper bounds (``batch_size`` <= ``schema.MAX_BATCH_SIZE``), so a
    profile built directly is held to what the CSV and gRPC paths accept.
    """

    job_type: str
    kind: str
    gpu_activity: float
    mem_gib: float = 0.0
    gpu_model: str = ""
    model_family: str | None = None
    batch_size: int | None = None
    precision: str | None = None
    sharing: str | None = None
    mps_share: float | None = None
    solo_tput: float | None = None
    sm_activity: float | None = None
    dram_activity: float | None = None
    pcie_rx_gbs: float | None = None
    pcie_tx_gbs: float | None = None
    tensor_activity: float | None = None
    power_frac: float | None = None

    def __post_init__(self) -> None:
        a = self.gpu_activity
        if not (isinstance(a, (int, float)) and math.isfinite(a) and 0.0 <= a <= 1.0):
            raise InvalidArgument("profile.gpu_activity", a, "a fraction in [0, 1]")
        m = self.mem_gib
        if not (isinstance(m, (int, float)) and math.isfinite(m) and 0.0 <= m <= MAX_MEM_GIB):
            raise InvalidArgument("profile.mem_gib", m, f"finite GiB in [0, {MAX_MEM_GIB:g}]")
        if self.kind not in KINDS and self.kind != "":
            raise InvalidArgument("profile.kind", self.kind, "one of " + ", ".join(KINDS)
                                  + " or '' (unknown)")
        if self.gpu_model and self.gpu_model not in GPU_SPECS:
            raise InvalidArgument("profile.gpu_model", self.gpu_model,
                                  "one of " + ", ".join(GPU_SPECS) + " or '' (unknown)")
        d = self.__dict__
        for name, lo, hi, lo_open in _NUMERIC_CHECKS:
            v = d[name]
            if v is None:
                continue
            # fast path: a float in range is kept as it is; anything else goes through the
            # schema's check, which normalises (ints -> float) or raises naming the field
            if type(v) is float and (lo < v if lo_open else lo <= v) and v <= hi:
                continue
            d[name] = check_job_field(name, v, "profile.")
        for name in _OTHER_CHECKS:
            if d[name] is not None:
                d[name] = check_job_field(name, d[name], "profile.")
        # profiles key the predictor's caches: hash the fields once, not on every lookup
        d["_hash"] = hash(tuple(d.values()))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]


_BIG = sys.float_info.max  # finite upper end: inf and nan leave the fast path
_RANGES = {"fraction": (0.0, 1.0, False), "share": (0.0, 1.0, True),
           "nonneg": (0.0, _BIG, False), "positive": (0.0, _BIG, True)}
#: (field, low, high, low excluded) of the optional numeric fields checked on the fast path
_NUMERIC_CHECKS = tuple((f.name, lo, hi if f.maximum is None else min(hi, f.maximum), lo_open)
                        for f in JOB_FIELDS if f.name in OPTIONAL_FIELDS and f.check in _RANGES
                        for lo, hi, lo_open in [_RANGES[f.check]])
_OTHER_CHECKS = tuple(n for n in OPTIONAL_FIELDS if n not in {c[0] for c in _NUMERIC_CHECKS})
