"""What the interference model needs to know about one job on one GPU.

Who builds it: the scheduling round (from a job's type and chosen configuration); who reads
it: :mod:`elastico.predictor.analytic` and the placer (:mod:`elastico.placer.placement`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastico.errors import InvalidArgument

__all__ = ["JobProfile"]


@dataclass(frozen=True)
class JobProfile:
    """A job's footprint on each GPU it runs on.

    ``job_type``: a workload name (e.g. a Gavel job type ``"ResNet-50 (batch size 64)"``).
    ``kind``: :class:`elastico.model.JobKind` value (``"training"``, ``"inference"``, ``"service"``).
    ``gpu_activity``: fraction of the GPU's SMs (0..1) the job keeps busy while running at its
    share, i.e. ``p * normalized speed`` where ``p`` is the job's Amdahl parallel fraction
    (computed by the caller from the throughput model).  0 means the job never touches the SMs.
    ``mem_gib``: GPU memory footprint per GPU, GiB.
    """

    job_type: str
    kind: str
    gpu_activity: float
    mem_gib: float = 0.0

    def __post_init__(self) -> None:
        a = self.gpu_activity
        if not (isinstance(a, (int, float)) and math.isfinite(a) and 0.0 <= a <= 1.0):
            raise InvalidArgument("profile.gpu_activity", a, "a fraction in [0, 1]")
        m = self.mem_gib
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m >= 0.0):
            raise InvalidArgument("profile.mem_gib", m, "finite GiB >= 0")
