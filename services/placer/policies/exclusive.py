"""``exclusive``: what Kubernetes does today.

Every pod gets its requested shape with whole GPUs (a sharing pod's ``gpu_milli`` < 1000 is
rounded up to one GPU, as the default NVIDIA device plugin does), first-fit on nodes in order,
pods considered in arrival order (FIFO); a pod that does not fit waits and later pods may pass
it (the default scheduler does not block the queue).  Running pods never move.
"""

from __future__ import annotations

from ..placement import ClusterState
from ..round import Decision, RoundInput, RoundResult
from .common import JobCatalog, PolicyEnv, keep_running, place_fixed_shape


class ExclusivePolicy:
    name = "exclusive"

    def __init__(self, env: PolicyEnv):
        self.env = env
        self.catalog = JobCatalog(env)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        decisions: dict[str, Decision] = {}
        pending = []
        for a in inp.jobs:
            if a.running:
                decisions[a.job.id] = keep_running(a, state)
            else:
                pending.append(a)
        pending.sort(key=lambda a: (a.job.arrival_s, a.job.id))
        failed: list = []  # shapes that found no room this round (the round only adds bookings)
        for a in pending:
            decisions[a.job.id] = place_fixed_shape(self.catalog, state, a, whole_gpus=True,
                                                    scorer="firstfit", failed=failed)
        return RoundResult(decisions, state)

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
