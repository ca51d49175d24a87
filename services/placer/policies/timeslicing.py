"""``time-slicing``: naive GPU sharing, what Kubernetes offers with the NVIDIA device plugin's
time-slicing / shared-GPU mode.

Every pod gets exactly its requested shape -- a sharing pod (``gpu_milli`` < 1000) its
requested fraction of one GPU, not a whole GPU -- packed best-fit onto GPUs that other pods
already use, in arrival order (FIFO, later pods may pass a pod that does not fit).  There is
no interference awareness: placement checks compute and memory only (the slowdown model it
decides with is :class:`~elastico.predictor.NoInterference`), so co-located pods run at
whatever slowdown the simulator's ground truth gives them, bounds or not.  Running pods never
move and are never reshaped.  The requested share is a *placement* quantity only: time-slicing
enforces no share, so a pod alone on its GPU runs at the whole GPU's speed and co-resident pods
take turns (``sharing``; docs/model.md, "Sharing mechanisms").
"""

from __future__ import annotations

import dataclasses

from elastico.predictor import NoInterference

from ..placement import ClusterState
from ..round import RoundInput, RoundResult
from .common import JobCatalog, PolicyEnv, place_requested_shapes


class TimeSlicingPolicy:
    name = "time-slicing"
    #: how co-resident pods share a GPU: the device plugin's time-slicing (no share cap;
    #: the simulator's ground truth, docs/model.md "Sharing mechanisms")
    sharing = "time-slicing"

    def __init__(self, env: PolicyEnv):
        # decisions ignore interference: every co-location is assumed free
        self.env = dataclasses.replace(env, slowdown=NoInterference())
        self.catalog = JobCatalog(self.env)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        return place_requested_shapes(self.catalog, inp, state, whole_gpus=False, scorer="bestfit")

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
