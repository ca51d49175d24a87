"""``exclusive``: what Kubernetes does today.

Every pod gets its requested shape with whole GPUs (a sharing pod's ``gpu_milli`` < 1000 is
rounded up to one GPU, as the default NVIDIA device plugin does), first-fit on nodes in order,
pods considered in arrival order (FIFO); a pod that does not fit waits and later pods may pass
it (the default scheduler does not block the queue).  Running pods never move.
"""

from __future__ import annotations

from ..placement import ClusterState
from ..round import RoundInput, RoundResult
from .common import JobCatalog, PolicyEnv, place_requested_shapes


class ExclusivePolicy:
    name = "exclusive"
    #: whole GPUs for every pod (also a preemptor's: policies/priority.py)
    whole_gpus = True

    def __init__(self, env: PolicyEnv):
        self.env = env
        self.catalog = JobCatalog(env)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        return place_requested_shapes(self.catalog, inp, state, whole_gpus=True, scorer="firstfit")

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
