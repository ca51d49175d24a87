"""``mps-static``: GPU sharing as the NVIDIA Kubernetes device plugin's MPS mode does it.

What the real system does (NVIDIA/k8s-device-plugin, README "With CUDA MPS", v0.15.0 and
later; ``sharing: mps: resources: - name: nvidia.com/gpu  replicas: N``):

* every physical GPU is advertised as ``N`` replicas of ``nvidia.com/gpu`` ("If this
  configuration were applied to a node with 8 GPUs on it, the plugin would now advertise 80
  ``nvidia.com/gpu`` resources" for ``replicas: 10``);
* each replica has "the same fraction (1/10) of the total memory and compute resources of the
  GPU": the MPS control daemon sets the client's active thread percentage to ``100 / N`` and
  its pinned device memory limit to ``memory / N``;
* a pod asking for ``nvidia.com/gpu: 1`` gets one replica -- whatever share it "meant";
  requests for more than one replica are refused: the plugin forces
  ``failRequestsGreaterThanOne`` on for MPS (``api/config/v1/config.go``, "Preserve the
  historical MPS behavior"), and "Sharing with MPS is currently not supported on devices with
  MIG enabled" (README);
* Kubernetes counts replicas only: no interference awareness, no reshaping, running pods
  never move.

How this policy models it (:class:`MpsStaticPolicy`; ``N`` is ``replicas``, default 2 -- the
GPU Operator's example "a cluster-wide configuration could create two replicas for each GPU";
the plugin README's example uses 10):

* a single-GPU pod (``num_gpus == 1``, any requested share) gets exactly one replica: share
  ``1/N`` of one GPU (its throughput is the throughput model's at that MPS share) and
  ``memory / N`` GiB of it, FIFO in arrival order, best-fit on GPUs other replicas use;
* a pod that needs more GPU memory than ``memory / N`` on every GPU model it may use would
  exceed its pinned limit and die of out-of-memory in the real cluster (CrashLoopBackOff,
  never finishing); here it is ``unplaceable`` at once with that reason (the same outcome
  for the metrics -- it never completes -- without simulating the crash loop);
* a multi-GPU pod (``num_gpus > 1``: multi-GPU training, a tensor-parallel or multi-replica
  LLM job) cannot use MPS replicas (the plugin refuses requests > 1); a real operator serves
  such pods from GPUs left unshared (a per-node plugin configuration,
  ``nvidia.com/device-plugin.config``).  DOCUMENTED CHOICE: they get whole GPUs as
  ``exclusive`` gives them, on any GPU with no replica in use -- an optimistic stand-in for a
  static split of the nodes (it never strands unshared nodes);
* MIG: none (``uses_mig = False``), as the plugin cannot combine MPS and MIG.

Jobs run with the simulator's MPS ground truth (the same as ``elastico``'s:
:class:`elastico.sim.contention_truth.GroundTruth`, ``sharing = "mps"``).
"""

from __future__ import annotations

import dataclasses
import math

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job
from elastico.predictor import NoInterference
from elastico.perf.throughput import REFERENCE_GPU
from elastico.shapes import fits_on, memory_need_gib, requested_configuration

from ..placement import ClusterState, FailedShapes
from ..round import ActiveJob, Decision, RoundInput, RoundResult, Status
from .common import JobCatalog, PolicyEnv, keep_running, place_fixed_shape

#: Default replicas per GPU: 2, the NVIDIA GPU Operator's MPS example ("a cluster-wide
#: configuration could create two replicas for each GPU on each node", docs "Multi-Process
#: Service in Kubernetes"); the device plugin README's example uses 10.
DEFAULT_REPLICAS = 2
#: Most replicas per GPU accepted: 48, the most MPS clients one GPU serves on Volta and later
#: (CUDA MPS documentation, "Limitations": 48 client CUDA contexts per device).
MAX_REPLICAS = 48


def check_replicas(replicas: object) -> int:
    """``replicas`` as an int in 1..:data:`MAX_REPLICAS`; InvalidArgument naming
    ``mps_replicas`` otherwise."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) \
            or not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidArgument("mps_replicas", replicas, f"an integer in 1..{MAX_REPLICAS}")
    return replicas


def replica_share(replicas: int) -> float:
    """The compute share of one replica: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = ``100 / N``
    in whole percent (the percentage is an integer; 100 // N), over 100: 0.5 for 2, 0.33 for
    3, 0.25 for 4."""
    return (100 // check_replicas(replicas)) / 100.0


def replica_memory_gib(gpu_mem_gib: float, replicas: int) -> float:
    """The pinned device memory limit of one replica, GiB: ``gpu_mem_gib / replicas`` (the
    plugin's equal fraction of the device memory), in whole MiB rounded down (the limit is
    set in MiB; ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``)."""
    return math.floor(gpu_mem_gib / replicas * 1024 + 1e-6) / 1024


class MpsStaticPolicy:
    """The device plugin's MPS sharing with ``env.mps_replicas`` replicas per GPU (module
    docstring)."""

    name = "mps-static"
    #: MPS: the configuration's throughput at its share, over the measured interference
    sharing = "mps"
    uses_mig = False

    def __init__(self, env: PolicyEnv, replicas: int | None = None):
        n = check_replicas(env.mps_replicas if replicas is None else replicas)
        self.replicas = n
        # Kubernetes counts replicas; it knows nothing of interference
        self.env = dataclasses.replace(env, slowdown=NoInterference())
        self.catalog = JobCatalog(self.env)
        self._replica: dict[str, tuple[tuple, tuple[Configuration, ...] | str]] = {}

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
        self._replica.pop(job_id, None)

    def replica_configs(self, job: Job) -> tuple[Configuration, ...] | str:
        """The one-replica configuration of a single-GPU ``job`` on every allowed GPU model
        where it fits in a replica's memory (share ``1/N``, ``memory / N`` GiB), or, when it
        fits on none, the reason (a string: it would run out of memory)."""
        # a live job id may come back with another request (a pod recreated under its
        # name): the cached entry holds for the request it was built from only
        spec = (job.kind, job.job_type, job.request, job.llm, job.llm_train)
        hit = self._replica.get(job.id)
        if hit is not None and hit[0] == spec:
            return hit[1]
        n = self.replicas
        share = replica_share(n)
        allowed = job.request.gpu_models or frozenset(self.catalog.gpu_models)
        configs, short = [], []
        for m, (mx, mem) in self.catalog.gpu_models.items():
            if m not in allowed:
                continue
            limit = replica_memory_gib(mem, n)
            # the job as the replica runs it: share 1/N; an LLM job's memory fit decided by
            # the LLM model with the replica's memory limit
            req = dataclasses.replace(job.request, num_gpus=1, gpu_share=share,
                                      gpu_mem_gib=limit if job.request.device_memory
                                      else job.request.gpu_mem_gib)
            as_replica = dataclasses.replace(job, request=req)
            if job.llm is not None or job.llm_train is not None:
                ok = fits_on(as_replica, m, mem)
                need = f"{job.job_type} does not fit"
            else:
                need_gib = memory_need_gib(job, mem)
                ok = need_gib <= limit + 1e-9
                need = f"needs {need_gib:g} GiB"
            if not ok:
                short.append(f"{m}: {need} in a replica's {limit:g} GiB")
                continue
            try:
                c = requested_configuration(as_replica, m, mem, whole_gpus=False,
                                            model=self.env.throughput)
            except InvalidArgument as e:  # e.g. the LLM model refuses the share
                short.append(f"{m}: {e}")
                continue
            if job.llm is None and job.llm_train is None:
                # normalized to the job's *requested* shape on the reference GPU (1.0), as
                # every policy's throughput: the replica's speed over the request's
                tm = self.env.throughput
                ref = tm.solo(job.job_type, REFERENCE_GPU, 1, job.request.gpu_share)
                c = dataclasses.replace(c, throughput=tm.solo(job.job_type, m, 1, share) / ref)
            configs.append(dataclasses.replace(c, gpu_mem_gib=limit))
        out = tuple(configs) if configs else (
            "would run out of memory in an MPS replica (pinned device memory limit = GPU "
            f"memory / {n}): " + "; ".join(short) if short
            else f"no allowed GPU model {sorted(job.request.gpu_models)} in the cluster")
        self._replica[job.id] = (spec, out)
        return out

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        decisions: dict[str, Decision] = {}
        pending = []
        for a in inp.jobs:
            if a.running:
                decisions[a.job.id] = keep_running(a, state)
            else:
                pending.append(a)
        pending.sort(key=lambda a: (a.job.arrival_s, a.job.id))
        failed = FailedShapes()
        for a in pending:
            decisions[a.job.id] = self.place(a, state, failed)
        return RoundResult(decisions, state)

    def place_preemptor(self, a: ActiveJob, state: ClusterState) -> Decision:
        """A preemptor's placement (policies/priority.py): as any pending job's."""
        return self.place(a, state)

    def place(self, a: ActiveJob, state: ClusterState,
              failed: FailedShapes | None = None) -> Decision:
        """Place one pending job (module docstring): one replica, or whole GPUs for a
        multi-GPU pod."""
        job = a.job
        failed = FailedShapes() if failed is None else failed
        if job.request.num_gpus != 1:
            return place_fixed_shape(self.catalog, state, a, whole_gpus=True, scorer="bestfit",
                                     failed=failed)
        configs = self.replica_configs(job)
        if isinstance(configs, str):
            return Decision(job.id, Status.UNPLACEABLE, None, reason=configs)
        reasons = []
        for c in configs:
            out = state.place_unless_dominated(job.id, c, self.catalog.profile(job, c),
                                               job.slowdown_bound, failed, self.env.slowdown,
                                               scorer="bestfit")
            if out.assignment is not None:
                return Decision(job.id, Status.PLACED, c, out.assignment, changed=True,
                                reason=f"placed in one MPS replica (1/{self.replicas} GPU)")
            reasons.append(out.reason)
        return Decision(job.id, Status.WAITING, None, reason="; ".join(reasons))
