"""``time-slicing``: naive GPU sharing, what Kubernetes offers with the NVIDIA device plugin's
time-slicing / shared-GPU mode.

Every pod gets exactly its requested shape -- a sharing pod (``gpu_milli`` < 1000) its
requested fraction of one GPU, not a whole GPU -- packed best-fit onto GPUs that other pods
already use, in arrival order (FIFO, later pods may pass a pod that does not fit).  There is
no interference awareness: placement checks compute and memory only (the slowdown model it
decides with is :class:`~elastico.predictor.NoInterference`), so co-located pods run at
whatever slowdown the simulator's ground truth gives them, bounds or not.  Running pods never
move and are never reshaped.
"""

from __future__ import annotations

import dataclasses

from elastico.predictor import NoInterference

from ..placement import ClusterState
from ..round import Decision, RoundInput, RoundResult
from .common import JobCatalog, PolicyEnv, keep_running, place_fixed_shape


class TimeSlicingPolicy:
    name = "time-slicing"

    def __init__(self, env: PolicyEnv):
        # decisions ignore interference: every co-location is assumed free
        self.env = dataclasses.replace(env, slowdown=NoInterference())
        self.catalog = JobCatalog(self.env)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        decisions: dict[str, Decision] = {}
        pending = []
        for a in inp.jobs:
            if a.running:
                decisions[a.job.id] = keep_running(a, state)
            else:
                pending.append(a)
        pending.sort(key=lambda a: (a.job.arrival_s, a.job.id))
        failed: list = []
        for a in pending:
            decisions[a.job.id] = place_fixed_shape(self.catalog, state, a, whole_gpus=False,
                                                    scorer="bestfit", failed=failed)
        return RoundResult(decisions, state)

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
