"""First-version placement: pack chosen configurations onto physical GPUs (DESIGN.md, IAC).

Who calls it: the scheduling round (after pricing picked one configuration per job) and the
simulator, through the same code.  Whom it calls: a :class:`elastico.predictor.SlowdownModel`
(analytic by default) and :mod:`elastico.placer.mig`.  No clock, no I/O, no global state.

:class:`ClusterState` is the placer's book of who runs where.  Units: GPU compute in fractions
of one GPU (MPS active thread percentage / 100), GPU and host memory in GiB, CPU in cores.

Rules every placement keeps (docs/placement.md):

* the configuration's ``gpu_model`` equals the node's model;
* gang: a job's ``num_gpus`` GPUs are distinct GPUs of ONE node, all or nothing;
* per GPU: compute shares sum to <= 1 (+1e-9), memory <= the GPU's memory; a whole-GPU
  configuration (share 1.0) only takes a GPU with no resident;
* per node: CPU cores and host memory are never over-committed (a configuration's ``cpu`` and
  ``mem_gib`` are totals over the job, booked on its node);
* MPS configurations only on GPUs not in MIG mode; MIG configurations only on MIG-mode GPUs, at
  a valid, free start slot (:class:`elastico.placer.mig.MigGpu`); a MIG instance books
  ``compute_slices / 7`` of the GPU and ``memory_slices / 8`` of its memory;
* interference: no placement may push ANY resident's predicted slowdown (the new job's
  included) past that resident's bound.  Slowdowns come from the residents of each MPS GPU
  (``SlowdownModel.gpu_slowdowns``); MIG instances are isolated (slowdown 1.0); a job on
  several GPUs has the max over its GPUs.

Scorers (``SCORERS``): ``bestfit`` chooses the candidate with the least free share left on the
chosen GPUs, then the least free share left on the node, then the lowest node index, then the
lowest GPU indices; ``firstfit`` the lowest node index, then the lowest GPU indices.  Within a
node, GPUs are taken in score order, skipping any whose residents' bounds would break.  Nodes
are visited in order of an optimistic key (their best GPUs ignoring slowdown), and the search
stops as soon as the best real candidate beats the next node's optimistic key (branch and
bound), so one placement costs O(GPUs) numpy work plus slowdown checks on few nodes.

Booking lifecycle (STYLE.md 3): ``place`` books at once ("assumed"); the caller keeps the
booking when the bind is confirmed and calls ``release`` when the bind fails or the job ends or
changes configuration.  A failed ``place`` changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.model import Configuration, Node
from elastico.placer.fragmentation import MILLI, FragmentationModel, TypicalPods, typical_pods
from elastico.placer.mig import COMPUTE_SLICES, MIG_PROFILES, MigGpu, MigProfile, mig_profile
from elastico.predictor import AnalyticSlowdown, JobProfile, SlowdownModel

__all__ = ["Assignment", "PlaceOutcome", "ClusterState", "SCORERS", "EPS", "elastico_cost",
           "interference_loss", "CONSOLIDATION_GPU", "INTERFERENCE_WEIGHT"]

EPS = 1e-9  # tolerance on every capacity comparison (fractions of a GPU, GiB, cores)
SCORERS = ("bestfit", "firstfit", "elastico")
#: elastico scorer: GPU-equivalents of cost per position in the cluster's node order
#: (consolidation; measured on FGD's benchmark, docs/placement.md)
CONSOLIDATION_GPU = 0.003
#: elastico scorer: weight of the interference term (GPU-equivalents per GPU of throughput lost)
INTERFERENCE_WEIGHT = 1.0


def interference_loss(shares, slowdowns) -> float:
    """GPU throughput lost to co-location on one GPU, in GPUs: ``sum_j s_j (1 - 1/sigma_j)``
    for residents with booked share ``s_j`` (fraction of a GPU) and predicted slowdown
    ``sigma_j >= 1`` (a job slowed by sigma does the work of ``s / sigma`` of a GPU)."""
    s = np.asarray(shares, dtype=float)
    sig = np.asarray(slowdowns, dtype=float)
    return float((s * (1.0 - 1.0 / sig)).sum())


def elastico_cost(frag_increase_gpus, interference_gpus, node_position,
                  weight: float = INTERFERENCE_WEIGHT, consolidation: float = CONSOLIDATION_GPU):
    """ElastiCo's one placement score (lower is better), in GPU-equivalents of capacity lost:

    ``cost = dF + weight x dI + consolidation x position``

    * ``dF`` (``frag_increase_gpus``): increase of FGD's expected fragmentation of the node
      for the workload's typical pods, in GPUs (:mod:`elastico.placer.fragmentation`; Weng et
      al., ATC'23, ``pkg/utils/frag.go``) -- capacity future pods are expected not to use;
    * ``dI`` (``interference_gpus``): increase of the GPU throughput lost to co-location on
      the chosen GPUs, :func:`interference_loss` before and after, from the slowdown model --
      capacity the co-located jobs lose (hard limit: every slowdown within its bound);
    * ``position``: the node's index in the cluster's node order; ``consolidation`` GPUs per
      position fill nodes in one order (first-fit pressure), which leaves whole nodes free.

    Scalars or numpy arrays (broadcast)."""
    return np.asarray(frag_increase_gpus) + weight * np.asarray(interference_gpus) \
        + consolidation * np.asarray(node_position)
_WHOLE = 1.0 - 1e-12


@dataclass(frozen=True)
class Assignment:
    """Where one job runs.  ``gpu_share`` (fraction of a GPU) and ``gpu_mem_gib`` (GiB) are per
    GPU as booked (for MIG: the instance's compute_slices/7 and memory_slices/8 of the GPU's
    memory); ``cpu`` (cores) and ``mem_gib`` (GiB host memory) are totals on the node.
    ``mig_starts[i]`` is the instance's start slot on ``gpu_indices[i]`` (MIG only)."""

    job_id: str
    node: str
    node_index: int
    gpu_indices: tuple[int, ...]
    gpu_share: float
    gpu_mem_gib: float
    cpu: float
    mem_gib: float
    mig_profile: str | None = None
    mig_starts: tuple[int, ...] = ()
    config_name: str = ""
    gpu_model: str | None = None


@dataclass(frozen=True)
class PlaceOutcome:
    """Result of :meth:`ClusterState.place`: the assignment, or None and why not.
    ``slowdown``: the new job's predicted slowdown right after placement (1.0 if alone)."""

    assignment: Assignment | None
    reason: str = ""
    slowdown: float = 1.0

    @property
    def placed(self) -> bool:
        return self.assignment is not None


class ClusterState:
    """Per-GPU and per-node bookings of a cluster (module docstring has the rules).

    ``nodes``: the cluster.  ``mig_gpus``: ``(node_index, gpu_index)`` pairs whose GPU is in MIG
    mode (only models with a MIG profile table, :data:`elastico.placer.mig.MIG_PROFILES`).
    ``slowdown_model``: used by ``place`` and ``predicted_slowdowns`` unless a call passes
    another; default :class:`AnalyticSlowdown` with the Gavel-fitted kappa.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        mig_gpus: Iterable[tuple[int, int]] = (),
        slowdown_model: SlowdownModel | None = None,
    ):
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.slowdown_model: SlowdownModel = slowdown_model or AnalyticSlowdown()
        n = len(self.nodes)
        counts = np.array([nd.num_gpus for nd in self.nodes], dtype=np.int64)
        self._offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        G = int(self._offset[-1])
        self._models: dict[str, int] = {}
        for nd in self.nodes:
            self._models.setdefault(nd.gpu_model, len(self._models))
        self._node_model = np.array([self._models[nd.gpu_model] for nd in self.nodes], dtype=np.int64)
        self._node_cpu = np.array([nd.cpu for nd in self.nodes], dtype=float)
        self._node_mem = np.array([nd.mem_gib for nd in self.nodes], dtype=float)
        self._node_cpu_used = np.zeros(n)
        self._node_mem_used = np.zeros(n)
        self._node_jobs: list[dict[str, tuple[float, float]]] = [{} for _ in range(n)]
        # flat per-GPU arrays
        self._gpu_node = np.repeat(np.arange(n, dtype=np.int64), counts)
        self._gpu_local = np.arange(G, dtype=np.int64) - self._offset[self._gpu_node]
        self._gpu_model = self._node_model[self._gpu_node] if G else np.zeros(0, np.int64)
        self._gpu_cap_mem = np.array([nd.gpu_mem_gib for nd in self.nodes for _ in range(nd.num_gpus)], float)
        self._used_share = np.zeros(G)
        self._used_mem = np.zeros(G)
        self._n_res = np.zeros(G, dtype=np.int64)
        self._is_mig = np.zeros(G, dtype=bool)
        self._mig_occ = np.zeros(G, dtype=np.int64)
        self._mig_cs = np.full(G, COMPUTE_SLICES, dtype=np.int64)  # SM slices per MIG GPU
        self._mig_comp = np.zeros(G, dtype=np.int64)
        self._mig: dict[int, MigGpu] = {}
        self._gpu_jobs: list[dict[str, tuple[float, float]]] = [{} for _ in range(G)]
        self._healthy = np.ones(G, dtype=bool)
        for ni, nd in enumerate(self.nodes):
            for gi in nd.unhealthy_gpus:
                if not (isinstance(gi, (int, np.integer)) and 0 <= gi < nd.num_gpus):
                    raise InvalidArgument(f"nodes[{ni}].unhealthy_gpus", gi,
                                          f"GPU indices in 0..{nd.num_gpus - 1}")
                self._healthy[int(self._offset[ni]) + int(gi)] = False
        self.typical: TypicalPods | None = None
        self._frag_model: FragmentationModel | None = None
        for pair in mig_gpus:
            try:
                ni, gi = (int(x) for x in pair)
            except (TypeError, ValueError):
                raise InvalidArgument("mig_gpus", pair, "(node_index, gpu_index) pairs") from None
            if not (0 <= ni < n and 0 <= gi < self.nodes[ni].num_gpus):
                raise InvalidArgument("mig_gpus", pair, "an existing (node_index, gpu_index)")
            model = self.nodes[ni].gpu_model
            if not self.nodes[ni].mig_capable or model not in MIG_PROFILES:
                raise InvalidArgument(
                    f"mig_gpus[{pair!r}]", model, f"a MIG-capable model with a profile table {sorted(MIG_PROFILES)}"
                )
            f = self._flat(ni, gi)
            self._is_mig[f] = True
            # the model's SM slices (7 on A100/H100/H200, 4 on A30; mig.py tables)
            self._mig_cs[f] = next(iter(MIG_PROFILES[model].values())).gpu_compute_slices
            self._mig[f] = MigGpu(model)
        self._jobs: dict[str, tuple[Assignment, JobProfile, float]] = {}

    def copy(self) -> "ClusterState":
        """An independent copy for a round to decide on (run_round commits it or drops it).

        Cluster shape (nodes, capacities, MIG mode) is shared; every booking is copied.
        Much cheaper than ``copy.deepcopy``: bookings are immutable tuples and dataclasses.
        """
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        for name in ("_node_cpu_used", "_node_mem_used", "_used_share", "_used_mem", "_n_res",
                     "_mig_occ", "_mig_comp", "_healthy"):
            setattr(new, name, getattr(self, name).copy())
        new._node_jobs = [d.copy() for d in self._node_jobs]
        new._gpu_jobs = [d.copy() for d in self._gpu_jobs]
        new._mig = {f: m.copy() for f, m in self._mig.items()}
        new._jobs = dict(self._jobs)
        return new

    # ----------------------------------------------------------------------------- health
    def mark_unhealthy(self, node_index: int, gpu_index: int) -> list[str]:
        """Mark a GPU unhealthy (node agent / node condition): from now on it is never free,
        no scorer chooses it and ``rebook`` refuses it.  Jobs already on it keep their booking
        (the caller moves them: ``release`` then ``place``); returns their ids.  NotFound for a
        GPU that does not exist."""
        f = self._flat(node_index, gpu_index)
        self._healthy[f] = False
        return list(self._gpu_jobs[f])

    def mark_healthy(self, node_index: int, gpu_index: int) -> None:
        """Return a GPU to service (NotFound for a GPU that does not exist)."""
        self._healthy[self._flat(node_index, gpu_index)] = True

    def is_healthy(self, node_index: int, gpu_index: int) -> bool:
        return bool(self._healthy[self._flat(node_index, gpu_index)])

    def unhealthy_gpus(self) -> list[tuple[int, int]]:
        """``(node_index, gpu_index)`` of every GPU marked unhealthy, in flat order."""
        f = np.flatnonzero(~self._healthy)
        return list(zip(self._gpu_node[f].tolist(), self._gpu_local[f].tolist()))

    def set_typical_pods(self, typical: TypicalPods | None) -> None:
        """The workload's typical pod shapes for the ``elastico`` scorer's fragmentation term
        (:func:`elastico.placer.fragmentation.typical_pods`, CPU in milli-cores, GPU in
        milli-GPU).  None: each placement uses the job's own shape as the only typical pod."""
        if typical is not None and not isinstance(typical, TypicalPods):
            raise InvalidArgument("typical", type(typical).__name__, "a TypicalPods or None")
        self.typical = typical
        self._frag_model = None if typical is None else FragmentationModel(typical, tuple(self._models))

    # ----------------------------------------------------------------------------- queries
    def _flat(self, node_index: int, gpu_index: int) -> int:
        if not (0 <= node_index < len(self.nodes) and 0 <= gpu_index < self.nodes[node_index].num_gpus):
            raise NotFound(f"gpu: no GPU {gpu_index} on node {node_index}")
        return int(self._offset[node_index]) + gpu_index

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def job_ids(self) -> list[str]:
        return list(self._jobs)

    def assignment(self, job_id: str) -> Assignment:
        try:
            return self._jobs[job_id][0]
        except KeyError:
            raise NotFound(f"job_id: {job_id!r} is not placed") from None

    def profile(self, job_id: str) -> JobProfile:
        self.assignment(job_id)
        return self._jobs[job_id][1]

    def slowdown_bound(self, job_id: str) -> float:
        self.assignment(job_id)
        return self._jobs[job_id][2]

    def assignments(self) -> list[Assignment]:
        return [a for a, _, _ in self._jobs.values()]

    def residents(self, node_index: int, gpu_index: int) -> list[str]:
        """Job ids on one GPU, in placement order."""
        return list(self._gpu_jobs[self._flat(node_index, gpu_index)])

    def is_mig(self, node_index: int, gpu_index: int) -> bool:
        return bool(self._is_mig[self._flat(node_index, gpu_index)])

    def mig_state(self, node_index: int, gpu_index: int) -> MigGpu | None:
        """A copy of the GPU's MIG state, or None if it is not in MIG mode."""
        m = self._mig.get(self._flat(node_index, gpu_index))
        return m.copy() if m is not None else None

    def free_share(self, node_index: int, gpu_index: int) -> float:
        """Free compute of one GPU, fraction of a GPU."""
        return 1.0 - float(self._used_share[self._flat(node_index, gpu_index)])

    def free_mem_gib(self, node_index: int, gpu_index: int) -> float:
        f = self._flat(node_index, gpu_index)
        return float(self._gpu_cap_mem[f] - self._used_mem[f])

    def node_free(self, node_index: int) -> tuple[float, float]:
        """(free CPU cores, free host memory GiB) of a node."""
        return (
            float(self._node_cpu[node_index] - self._node_cpu_used[node_index]),
            float(self._node_mem[node_index] - self._node_mem_used[node_index]),
        )

    def gpu_usage(self) -> dict[str, np.ndarray]:
        """Copies of the per-GPU book (flat GPU order, node by node): node, gpu, used_share,
        used_mem_gib, residents, mig_occupied (memory-slice bit mask), mig_compute."""
        return {
            "node": self._gpu_node.copy(),
            "gpu": self._gpu_local.copy(),
            "used_share": self._used_share.copy(),
            "used_mem_gib": self._used_mem.copy(),
            "residents": self._n_res.copy(),
            "mig_occupied": self._mig_occ.copy(),
            "mig_compute": self._mig_comp.copy(),
        }

    def used_gpus(self) -> float:
        """Allocated GPU compute, in GPUs (sum of booked shares)."""
        return math.fsum(self._used_share.tolist())

    def _gpu_profiles(self, f: int) -> tuple[list[JobProfile], list[float]]:
        ids = self._gpu_jobs[f]
        return [self._jobs[j][1] for j in ids], [self._jobs[j][2] for j in ids]

    def predicted_slowdowns(self, slowdown_model: SlowdownModel | None = None) -> dict[str, float]:
        """Every placed job's predicted slowdown from its co-residents (1.0 alone or on MIG;
        max over a multi-GPU job's GPUs)."""
        model = slowdown_model or self.slowdown_model
        out = {j: 1.0 for j in self._jobs}
        for f in np.flatnonzero((self._n_res >= 2) & ~self._is_mig).tolist():
            profiles, _ = self._gpu_profiles(f)
            sig = model.gpu_slowdowns(profiles)
            for j, s in zip(self._gpu_jobs[f], np.asarray(sig, float).tolist()):
                if s > out[j]:
                    out[j] = s
        return out

    # ----------------------------------------------------------------------------- placement
    def _validate(self, job_id: str, config: Configuration, profile: JobProfile, bound: float) -> None:
        if job_id in self._jobs:
            raise InvalidArgument("job_id", job_id, "a job that is not placed yet (release it first)")
        if not isinstance(config, Configuration):
            raise InvalidArgument("config", type(config).__name__, "an elastico.model.Configuration")
        if config.is_wait:
            raise InvalidArgument("config", config.name, "a non-wait configuration (wait needs no placement)")
        if not isinstance(profile, JobProfile):
            raise InvalidArgument("profile", type(profile).__name__, "an elastico.predictor.JobProfile")
        if not (isinstance(bound, (int, float)) and bound >= 1.0 and not math.isnan(bound)):
            raise InvalidArgument("slowdown_bound", bound, "a number >= 1")
        if not (isinstance(config.num_gpus, int) and config.num_gpus >= 0):
            raise InvalidArgument("config.num_gpus", config.num_gpus, "an integer >= 0")
        for name in ("cpu", "mem_gib", "gpu_mem_gib"):
            v = getattr(config, name)
            if not (math.isfinite(v) and v >= 0):
                raise InvalidArgument(f"config.{name}", v, "finite and >= 0")
        if config.num_gpus:
            if config.gpu_model is None:
                raise InvalidArgument("config.gpu_model", None, "a GPU model when num_gpus > 0")
            if not (0.0 < config.gpu_share <= 1.0):
                raise InvalidArgument("config.gpu_share", config.gpu_share, "a fraction in (0, 1]")
        if config.mig_profile is not None:
            if not config.num_gpus:
                raise InvalidArgument("config.mig_profile", config.mig_profile, "only with num_gpus > 0")
            table = MIG_PROFILES.get(config.gpu_model or "")
            if table is not None:
                p = table.get(config.mig_profile)
                if p is None:
                    raise InvalidArgument("config.mig_profile", config.mig_profile, f"one of {list(table)}")
                if abs(config.gpu_share - p.share) > 1e-3:
                    raise InvalidArgument(
                        "config.gpu_share", config.gpu_share,
                        f"{p.share:.6f} = {p.compute_slices}/{p.gpu_compute_slices} for MIG profile {p.name}",
                    )

    def fits(self, config: Configuration) -> list[tuple[int, tuple[int, ...]]]:
        """Nodes that can host ``config`` ignoring interference: ``(node_index, GPU indices
        that could take one member)``, nodes in index order, GPUs in index order."""
        plan = self._candidates(config)
        if isinstance(plan, str):
            return []
        nodes, gpus_by_node = plan
        return [(int(n), tuple(int(self._gpu_local[g]) for g in sorted(gpus_by_node[n]))) for n in nodes]

    def _mig_profile(self, config: Configuration) -> MigProfile | None:
        if config.mig_profile is None:
            return None
        table = MIG_PROFILES.get(config.gpu_model or "")
        return None if table is None else table.get(config.mig_profile)

    def _host_ok(self, config: Configuration) -> np.ndarray:
        return (self._node_cpu_used + config.cpu <= self._node_cpu + EPS) & (
            self._node_mem_used + config.mem_gib <= self._node_mem + EPS
        )

    def _eligible(self, config: Configuration) -> tuple[np.ndarray, np.ndarray] | str:
        """(eligible flat GPU mask, leftover free share per GPU after placement) or a reason."""
        model = config.gpu_model
        code = self._models.get(model) if model is not None else None
        if code is None:
            return f"no node with GPU model {model}"
        same = self._gpu_model == code
        share = config.gpu_share
        if config.mig_profile is not None:
            p = self._mig_profile(config)
            if p is None or not (same & self._is_mig).any():
                return f"no MIG-mode GPU of model {model}"
            mem_ok = self._gpu_cap_mem * p.memory_fraction + EPS >= config.gpu_mem_gib
            fits = np.zeros_like(same)
            for s in p.starts:
                fits |= (self._mig_occ & p.mask(s)) == 0
            elig = same & self._is_mig & self._healthy & fits & mem_ok & (self._mig_comp + p.compute_slices <= self._mig_cs)
            left = (self._mig_cs - self._mig_comp - p.compute_slices) / self._mig_cs
            return elig, left
        if not (same & ~self._is_mig).any():
            return f"no MPS (non-MIG) GPU of model {model}"
        elig = (
            same
            & ~self._is_mig
            & self._healthy
            & (self._used_share + share <= 1.0 + EPS)
            & (self._used_mem + config.gpu_mem_gib <= self._gpu_cap_mem + EPS)
        )
        if share >= _WHOLE:
            elig &= self._n_res == 0
        return elig, 1.0 - self._used_share - share

    def _gpu_phrase(self, config: Configuration) -> str:
        k, m = config.num_gpus, config.gpu_model
        if config.mig_profile is not None:
            return f"{k} GPU(s) of model {m} with a free {config.mig_profile} MIG slot for {config.gpu_mem_gib:g} GiB"
        return f"{k} GPU(s) of model {m} with share {config.gpu_share:g} and memory {config.gpu_mem_gib:g} GiB free"

    def _candidates(self, config: Configuration):
        """(candidate node indices, {node: [flat GPU indices]}) or a reason string."""
        host = self._host_ok(config)
        if config.num_gpus == 0:
            ok = host if config.gpu_model is None else host & (self._node_model == self._models.get(config.gpu_model, -1))
            nodes = np.flatnonzero(ok)
            if nodes.size == 0:
                return f"no node with cpu {config.cpu:g} cores and memory {config.mem_gib:g} GiB free"
            return nodes, {int(n): [] for n in nodes}
        e = self._eligible(config)
        if isinstance(e, str):
            return e
        elig, _ = e
        counts = np.bincount(self._gpu_node[elig], minlength=len(self.nodes))
        gpu_ok = counts >= config.num_gpus
        if not gpu_ok.any():
            return f"no node with {self._gpu_phrase(config)}"
        both = gpu_ok & host
        if not both.any():
            return (
                f"no node with {self._gpu_phrase(config)} that also has cpu {config.cpu:g} cores "
                f"and memory {config.mem_gib:g} GiB free"
            )
        nodes = np.flatnonzero(both)
        idx = np.flatnonzero(elig & both[self._gpu_node])
        by: dict[int, list[int]] = {int(n): [] for n in nodes}
        for g, n in zip(idx.tolist(), self._gpu_node[idx].tolist()):
            by[n].append(g)
        return nodes, by

    def place(
        self,
        job_id: str,
        config: Configuration,
        profile: JobProfile,
        slowdown_bound: float,
        slowdown_model: SlowdownModel | None = None,
        scorer: str = "bestfit",
    ) -> PlaceOutcome:
        """Book ``config`` for ``job_id`` (module docstring: rules and scorers).  Returns the
        assignment, or None with a reason; a failed placement changes nothing.  Bad input ->
        InvalidArgument (nothing changes)."""
        if scorer not in SCORERS:
            raise InvalidArgument("scorer", scorer, f"one of {list(SCORERS)}")
        self._validate(job_id, config, profile, slowdown_bound)
        model = slowdown_model or self.slowdown_model
        if config.num_gpus == 0:
            return self._place_host_only(job_id, config, profile, float(slowdown_bound), scorer)
        host = self._host_ok(config)
        e = self._eligible(config)
        if isinstance(e, str):
            return PlaceOutcome(None, e)
        elig, leftover = e
        k = config.num_gpus
        idx = np.flatnonzero(elig & host[self._gpu_node])
        if idx.size == 0 or np.bincount(self._gpu_node[idx]).max() < k:
            reason = self._candidates(config)
            return PlaceOutcome(None, reason if isinstance(reason, str) else "no candidate node")
        if scorer == "elastico":
            return self._place_elastico(job_id, config, profile, float(slowdown_bound), model, idx)
        node_of = self._gpu_node[idx]
        local = self._gpu_local[idx]
        left = np.round(leftover[idx], 9)
        if scorer == "bestfit":
            order = np.lexsort((local, left, node_of))
        else:
            order = np.lexsort((local, node_of))
        idx, node_of, left = idx[order], node_of[order], left[order]
        left_of = dict(zip(idx.tolist(), left.tolist()))
        uniq, first, counts = np.unique(node_of, return_index=True, return_counts=True)
        keep = counts >= k
        uniq, first, counts = uniq[keep], first[keep], counts[keep]
        if scorer == "bestfit":
            # optimistic: the k tightest GPUs of each node, ignoring interference
            opt_left = np.array([left[f:f + k].sum() for f in first.tolist()]) if k > 1 else left[first]
            opt_left = np.round(opt_left, 9)
            node_free = np.bincount(self._gpu_node, weights=1.0 - self._used_share, minlength=len(self.nodes))
            node_after = np.round(node_free[uniq] - k * config.gpu_share, 9)
            node_order = np.lexsort((uniq, node_after, opt_left))
            opt_keys = [(float(opt_left[i]), float(node_after[i]), int(uniq[i])) for i in node_order.tolist()]
        else:
            node_order = np.arange(uniq.size)
            opt_keys = [(int(uniq[i]),) for i in node_order.tolist()]

        best: tuple | None = None
        best_choice: tuple[int, list[int], float] | None = None
        worst_seen: tuple[float, str] | None = None  # smallest bound violation, for the reason
        is_mig = config.mig_profile is not None
        for pos, i in enumerate(node_order.tolist()):
            if best is not None and best[: len(opt_keys[pos])] <= opt_keys[pos]:
                break
            chosen: list[int] = []
            sig_new = 1.0
            for q in range(int(first[i]), int(first[i] + counts[i])):
                g = int(idx[q])
                if not is_mig and self._n_res[g] > 0:
                    ok, s_new, viol = self._check_bounds(g, profile, float(slowdown_bound), model)
                    if not ok:
                        if worst_seen is None or viol[0] < worst_seen[0]:
                            worst_seen = viol
                        continue
                    sig_new = max(sig_new, s_new)
                chosen.append(g)
                if len(chosen) == k:
                    break
            if len(chosen) < k:
                continue
            n = int(uniq[i])
            locs = tuple(sorted(int(self._gpu_local[g]) for g in chosen))
            if scorer == "bestfit":
                key = (
                    round(float(sum(left_of[g] for g in chosen)), 9),
                    opt_keys[pos][1],
                    n,
                    locs,
                )
            else:
                key = (n, locs)
            if best is None or key < best:
                best, best_choice = key, (n, chosen, sig_new)
        if best_choice is None:
            detail = f" ({worst_seen[1]})" if worst_seen else ""
            return PlaceOutcome(None, f"slowdown bound: every candidate GPU would push a resident past its bound{detail}")
        n, chosen, sig_new = best_choice
        a = self._commit(job_id, config, profile, float(slowdown_bound), n, sorted(chosen))
        return PlaceOutcome(a, "", float(sig_new))

    # ----------------------------------------------------------------------- elastico scorer
    def _frag_rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([U, Gmax] free milli-GPU of each GPU of ``nodes`` (0-padded; unhealthy GPUs 0;
        MIG-mode GPUs by free compute slices / 7), [U] free milli-CPU)."""
        ng = np.diff(self._offset)[nodes]
        gmax = max(1, int(ng.max()))
        flat = self._offset[nodes][:, None] + np.arange(gmax)[None, :]
        valid = np.arange(gmax)[None, :] < ng[:, None]
        flat = np.where(valid, flat, 0)
        free = np.where(self._is_mig, (self._mig_cs - self._mig_comp) / self._mig_cs, 1.0 - self._used_share)
        free = np.where(self._healthy, free, 0.0)
        rows = np.where(valid, np.round(free[flat] * MILLI), 0).astype(np.int64)
        cpu = np.round((self._node_cpu[nodes] - self._node_cpu_used[nodes]) * 1000).astype(np.int64)
        return rows, cpu

    def _interference(self, g: int, profile: JobProfile, share: float, bound: float,
                      model: SlowdownModel):
        """Bound check and interference increase of adding ``profile`` (``share`` of a GPU)
        to MPS GPU ``g``: (ok, new job's slowdown, violation, dI in GPUs)."""
        if self._n_res[g] == 0:
            return True, 1.0, (0.0, ""), 0.0
        ok, s_new, viol = self._check_bounds(g, profile, bound, model)
        if not ok:
            return False, s_new, viol, math.inf
        profiles, _ = self._gpu_profiles(g)
        shares = [v[0] for v in self._gpu_jobs[g].values()]
        before = model.gpu_slowdowns(profiles) if len(profiles) >= 2 else np.ones(len(profiles))
        after = model.gpu_slowdowns(profiles + [profile])
        dI = interference_loss(shares + [share], after) - interference_loss(shares, before)
        return True, s_new, viol, max(0.0, dI)

    def _place_elastico(self, job_id: str, config: Configuration, profile: JobProfile,
                        bound: float, model: SlowdownModel, idx: np.ndarray) -> PlaceOutcome:
        """The ``elastico`` scorer (:func:`elastico_cost`; docs/placement.md, "Scorers").

        ``idx``: eligible flat GPUs on nodes with the host resources.  Per candidate GPU the
        fragmentation increase of taking it (FGD's measure, typical pods from
        :meth:`set_typical_pods`); per node the k GPUs of least cost; nodes visited by their
        cost without interference (a lower bound for single-GPU jobs, since dI >= 0), then
        the real cost with the predicted interference; stop when the best real cost is no
        worse than the next node's lower bound."""
        k = config.num_gpus
        mp = self._mig_profile(config)
        share = mp.share if mp is not None else float(config.gpu_share)
        m = int(round(share * MILLI))
        cpu_m = int(round(config.cpu * 1000))
        fm = self._frag_model
        if fm is None:
            fm = FragmentationModel(typical_pods([cpu_m], [max(1, min(m, MILLI))], [k]), tuple(self._models))
        node_of = self._gpu_node[idx]
        uniq, inv, counts = np.unique(node_of, return_inverse=True, return_counts=True)
        rows, cpu = self._frag_rows(uniq)
        models = self._node_model[uniq]
        cnt, S = fm.counts(rows)
        L = rows.sum(axis=1)
        f_before = fm.from_counts(cpu, L, cnt, S, models)
        old = rows[inv, self._gpu_local[idx]]
        new = np.maximum(old - m, 0)
        c1, s1 = fm.shift(cnt[inv], S[inv], old, new)
        d_gpu = (fm.from_counts(cpu[inv] - cpu_m, L[inv] - (old - new), c1, s1, models[inv]) - f_before[inv]) / MILLI
        d_gpu = np.round(d_gpu, 9)
        # per node, GPUs by (cost, least free after, index)
        order = np.lexsort((self._gpu_local[idx], new, d_gpu, inv))
        starts = np.concatenate([[0], np.cumsum(counts)])
        ok_nodes = np.flatnonzero(counts >= k)

        def set_cost(u: int, gpus: list[int]) -> float:
            """Exact fragmentation increase (GPUs) of node uniq[u] taking ``gpus`` (flat)."""
            c, sm, left = cnt[u:u + 1], S[u:u + 1], int(L[u])
            row = rows[u].copy()
            for g in gpus:
                j = int(self._gpu_local[g])
                o = int(row[j])
                w = max(o - m, 0)
                c, sm = fm.shift(c, sm, np.array([o]), np.array([w]))
                row[j] = w
                left -= o - w
            after = fm.from_counts(np.array([cpu[u] - cpu_m]), np.array([left]), c, sm, models[u:u + 1])[0]
            return round(float(after - f_before[u]) / MILLI, 9)

        opt = np.empty(ok_nodes.size)
        for i, u in enumerate(ok_nodes.tolist()):
            pos = order[starts[u]:starts[u] + k]
            opt[i] = float(d_gpu[pos[0]]) if k == 1 else set_cost(u, idx[pos].tolist())
        opt_key = np.round(elastico_cost(opt, 0.0, uniq[ok_nodes]), 9)
        visit = np.lexsort((uniq[ok_nodes], opt_key))
        is_mig = mp is not None
        best = None
        best_choice = None
        worst_seen = None
        for vpos, i in enumerate(visit.tolist()):
            if best is not None and best[0] <= opt_key[i]:
                break
            u = int(ok_nodes[i])
            cands = []
            for q in order[starts[u]:starts[u + 1]].tolist():
                g = int(idx[q])
                if is_mig:
                    ok, s_new, viol, dI = True, 1.0, (0.0, ""), 0.0
                else:
                    ok, s_new, viol, dI = self._interference(g, profile, share, bound, model)
                if not ok:
                    if worst_seen is None or viol[0] < worst_seen[0]:
                        worst_seen = viol
                    continue
                cands.append((round(float(d_gpu[q]) + INTERFERENCE_WEIGHT * dI, 9), int(new[q]),
                              int(self._gpu_local[g]), g, dI, s_new))
            if len(cands) < k:
                continue
            cands.sort()
            chosen = cands[:k]
            gpus = [c[3] for c in chosen]
            cost = round(float(elastico_cost(set_cost(u, gpus), sum(c[4] for c in chosen), uniq[u])), 9)
            key = (cost, int(uniq[u]))
            if best is None or key < best:
                best, best_choice = key, (int(uniq[u]), gpus, max(c[5] for c in chosen))
        if best_choice is None:
            detail = f" ({worst_seen[1]})" if worst_seen else ""
            return PlaceOutcome(None, f"slowdown bound: every candidate GPU would push a resident past its bound{detail}")
        n, chosen, sig_new = best_choice
        a = self._commit(job_id, config, profile, bound, n, sorted(chosen))
        return PlaceOutcome(a, "", float(sig_new))

    def _check_bounds(self, g: int, profile: JobProfile, bound: float, model: SlowdownModel):
        """Would adding ``profile`` to MPS GPU ``g`` keep every resident within its bound?
        Returns (ok, new job's slowdown, (violation ratio, description))."""
        profiles, bounds = self._gpu_profiles(g)
        sig = np.asarray(model.gpu_slowdowns(profiles + [profile]), float)
        b = np.array(bounds + [bound])
        over = sig > b + EPS
        if not over.any():
            return True, float(sig[-1]), (0.0, "")
        ratio = sig / b
        w = int(np.argmax(ratio))
        who = "the new job" if w == len(profiles) else f"job {list(self._gpu_jobs[g])[w]}"
        n = int(self._gpu_node[g])
        desc = (
            f"e.g. node {self.nodes[n].name} GPU {int(self._gpu_local[g])}: {who} predicted "
            f"{sig[w]:.3f} > bound {b[w]:.3f}"
        )
        return False, float(sig[-1]), (float(ratio[w]), desc)

    def _place_host_only(self, job_id, config, profile, bound, scorer) -> PlaceOutcome:
        plan = self._candidates(config)
        if isinstance(plan, str):
            return PlaceOutcome(None, plan)
        nodes, _ = plan
        if scorer in ("bestfit", "elastico"):
            left = np.round(self._node_cpu[nodes] - self._node_cpu_used[nodes] - config.cpu, 9)
            n = int(nodes[np.lexsort((nodes, left))[0]])
        else:
            n = int(nodes[0])
        return PlaceOutcome(self._commit(job_id, config, profile, bound, n, []), "", 1.0)

    def _commit(self, job_id, config, profile, bound, n: int, chosen: list[int]) -> Assignment:
        p = self._mig_profile(config)
        starts: list[int] = []
        if p is not None:  # compute every start before changing anything (all or nothing)
            for g in chosen:
                s = self._mig[g].best_start(p)
                assert s is not None, "eligible MIG GPU without a free start"
                starts.append(s)
            share = p.share
            mem = float(self.nodes[n].gpu_mem_gib) * p.memory_fraction
        else:
            share, mem = float(config.gpu_share), float(config.gpu_mem_gib)
        for i, g in enumerate(chosen):
            if p is not None:
                self._mig[g].place(p, starts[i])
                self._mig_occ[g] = self._mig[g].occupied_mask
                self._mig_comp[g] = self._mig[g].compute_used
            self._gpu_jobs[g][job_id] = (share, mem)
            self._refresh_gpu(g)
        self._node_jobs[n][job_id] = (float(config.cpu), float(config.mem_gib))
        self._refresh_node(n)
        a = Assignment(
            job_id=job_id,
            node=self.nodes[n].name,
            node_index=n,
            gpu_indices=tuple(int(self._gpu_local[g]) for g in chosen),
            gpu_share=share if chosen else 0.0,
            gpu_mem_gib=mem if chosen else 0.0,
            cpu=float(config.cpu),
            mem_gib=float(config.mem_gib),
            mig_profile=config.mig_profile,
            mig_starts=tuple(starts),
            config_name=config.name,
            gpu_model=config.gpu_model if chosen else None,
        )
        self._jobs[job_id] = (a, profile, bound)
        return a

    def _refresh_gpu(self, g: int) -> None:
        vals = self._gpu_jobs[g].values()
        self._used_share[g] = math.fsum(v[0] for v in vals)
        self._used_mem[g] = math.fsum(v[1] for v in vals)
        self._n_res[g] = len(self._gpu_jobs[g])

    def _refresh_node(self, n: int) -> None:
        vals = self._node_jobs[n].values()
        self._node_cpu_used[n] = math.fsum(v[0] for v in vals)
        self._node_mem_used[n] = math.fsum(v[1] for v in vals)

    def place_unless_dominated(self, job_id: str, config: Configuration, profile: JobProfile,
                               slowdown_bound: float, failed: list[Configuration],
                               slowdown_model: SlowdownModel | None = None,
                               scorer: str = "bestfit") -> PlaceOutcome:
        """:meth:`place`, except that a shape which :func:`dominates` one in ``failed`` is
        refused without a search, and a shape that finds no room (not a slowdown bound, which
        depends on the job) is appended to ``failed``.  Valid while the cluster only fills up
        -- within one round, before any release -- since a larger shape cannot fit where a
        smaller one did not."""
        f = next((f for f in failed if dominates(config, f)), None)
        if f is not None:
            return PlaceOutcome(None, f"no room: a smaller or equal shape "
                                      f"({f.num_gpus} x {f.gpu_share:g} {f.gpu_model}) "
                                      f"already failed this round")
        res = self.place(job_id, config, profile, slowdown_bound, slowdown_model, scorer=scorer)
        if not res.placed and not res.reason.startswith("slowdown bound"):
            failed.append(config)
        return res

    def place_many(self, requests: Sequence[tuple[str, Configuration, JobProfile, float]],
                   scorer: str = "bestfit") -> list[PlaceOutcome]:
        """Place ``(job_id, config, profile, slowdown_bound)`` requests one after the other, as
        a round does, and return one outcome each (:meth:`place_unless_dominated`: a shape
        dominating one that already failed for lack of room is refused without a search).
        Bad input raises InvalidArgument at that request; the requests before it stay
        booked."""
        failed: list[Configuration] = []
        return [self.place_unless_dominated(job_id, config, profile, bound, failed,
                                            scorer=scorer)
                for job_id, config, profile, bound in requests]

    def release(self, job_id: str) -> Assignment:
        """Free everything ``job_id`` booked; returns its assignment.  NotFound if unknown."""
        a = self.assignment(job_id)
        for i, gi in enumerate(a.gpu_indices):
            g = self._flat(a.node_index, gi)
            if a.mig_profile is not None:
                self._mig[g].release(a.mig_starts[i])
                self._mig_occ[g] = self._mig[g].occupied_mask
                self._mig_comp[g] = self._mig[g].compute_used
            del self._gpu_jobs[g][job_id]
            self._refresh_gpu(g)
        del self._node_jobs[a.node_index][job_id]
        self._refresh_node(a.node_index)
        del self._jobs[job_id]
        return a

    def rebook(self, a: Assignment, profile: JobProfile, bound: float) -> Assignment:
        """Book ``a`` again exactly as it was (same node, GPUs, shares, MIG starts): undoes a
        :meth:`release` when a planned move is abandoned.  All or nothing: raises Infeasible,
        changing nothing, if any of those resources has been taken meanwhile."""
        if a.job_id in self._jobs:
            raise Infeasible(f"job {a.job_id!r} is already booked")
        n = a.node_index
        flats = [self._flat(n, gi) for gi in a.gpu_indices]
        if self._node_cpu_used[n] + a.cpu > self._node_cpu[n] + EPS or \
                self._node_mem_used[n] + a.mem_gib > self._node_mem[n] + EPS:
            raise Infeasible(f"job {a.job_id!r}: node {a.node} no longer has its CPU/memory free")
        for g in flats:
            if not self._healthy[g]:
                raise Infeasible(f"job {a.job_id!r}: GPU {self._gpu_local[g]} of {a.node} is unhealthy")
        prof = None
        if a.mig_profile is not None:
            prof = mig_profile(self.nodes[n].gpu_model, a.mig_profile)
            for g, st in zip(flats, a.mig_starts):
                if st not in self._mig[g].free_starts(prof):
                    raise Infeasible(f"job {a.job_id!r}: MIG slot {st} taken on {a.node}")
        else:
            for g in flats:
                if self._used_share[g] + a.gpu_share > 1.0 + EPS or \
                        self._used_mem[g] + a.gpu_mem_gib > self._gpu_cap_mem[g] + EPS:
                    raise Infeasible(f"job {a.job_id!r}: GPU {self._gpu_local[g]} of {a.node} "
                                     "no longer has its share free")
        for i, g in enumerate(flats):
            if prof is not None:
                self._mig[g].place(prof, a.mig_starts[i])
                self._mig_occ[g] = self._mig[g].occupied_mask
                self._mig_comp[g] = self._mig[g].compute_used
            self._gpu_jobs[g][a.job_id] = (a.gpu_share, a.gpu_mem_gib)
            self._refresh_gpu(g)
        self._node_jobs[n][a.job_id] = (a.cpu, a.mem_gib)
        self._refresh_node(n)
        self._jobs[a.job_id] = (a, profile, bound)
        return a

    # ----------------------------------------------------------------------------- checks
    def check_invariants(self, slowdown_model: SlowdownModel | None = None) -> None:
        """Recompute every booking from the assignments; AssertionError on any over-commit,
        invalid MIG geometry, mismatch with the cached arrays, or slowdown past a bound."""
        G = self._gpu_node.size
        share = [[] for _ in range(G)]
        mem = [[] for _ in range(G)]
        cpu = [[] for _ in self.nodes]
        hmem = [[] for _ in self.nodes]
        mig_occ = [0] * G
        mig_comp = [0] * G
        for j, (a, _, _) in self._jobs.items():
            node = self.nodes[a.node_index]
            assert node.name == a.node, f"{j}: node name mismatch"
            assert len(set(a.gpu_indices)) == len(a.gpu_indices), f"{j}: repeated GPU"
            if a.gpu_indices:
                assert a.gpu_model == node.gpu_model, f"{j}: model {a.gpu_model} on {node.gpu_model}"
            cpu[a.node_index].append(a.cpu)
            hmem[a.node_index].append(a.mem_gib)
            for i, gi in enumerate(a.gpu_indices):
                g = self._flat(a.node_index, gi)
                share[g].append(a.gpu_share)
                mem[g].append(a.gpu_mem_gib)
                if a.mig_profile is None:
                    assert not self._is_mig[g], f"{j}: MPS job on MIG GPU {a.node_index}/{gi}"
                    if a.gpu_share >= _WHOLE:
                        assert len(self._gpu_jobs[g]) == 1, f"{j}: whole GPU shared"
                else:
                    assert self._is_mig[g], f"{j}: MIG job on non-MIG GPU {a.node_index}/{gi}"
                    p = MIG_PROFILES[node.gpu_model][a.mig_profile]
                    s = a.mig_starts[i]
                    assert s in p.starts, f"{j}: invalid start {s} for {p.name}"
                    assert not mig_occ[g] & p.mask(s), f"{j}: MIG slices overlap on {a.node_index}/{gi}"
                    mig_occ[g] |= p.mask(s)
                    mig_comp[g] += p.compute_slices
                assert j in self._gpu_jobs[g], f"{j}: not listed on its GPU"
        for g in range(G):
            assert math.fsum(share[g]) <= 1.0 + EPS, f"GPU {g}: compute {math.fsum(share[g])} > 1"
            assert math.fsum(mem[g]) <= self._gpu_cap_mem[g] + EPS, f"GPU {g}: memory over capacity"
            assert mig_comp[g] <= self._mig_cs[g], f"GPU {g}: MIG compute slices {mig_comp[g]} > {self._mig_cs[g]}"
            assert mig_occ[g] == int(self._mig_occ[g]), f"GPU {g}: cached MIG mask differs"
            if g in self._mig:
                assert self._mig[g].occupied_mask == mig_occ[g], f"GPU {g}: MIG state differs"
            assert abs(math.fsum(share[g]) - self._used_share[g]) <= EPS, f"GPU {g}: cached share differs"
            assert len(share[g]) == self._n_res[g] == len(self._gpu_jobs[g]), f"GPU {g}: resident count differs"
        for n, nd in enumerate(self.nodes):
            assert math.fsum(cpu[n]) <= nd.cpu + EPS, f"node {nd.name}: cpu over-committed"
            assert math.fsum(hmem[n]) <= nd.mem_gib + EPS, f"node {nd.name}: memory over-committed"
        for j, s in self.predicted_slowdowns(slowdown_model).items():
            assert s <= self._jobs[j][2] + EPS, f"{j}: slowdown {s} > bound {self._jobs[j][2]}"


def dominates(c: Configuration, f: Configuration) -> bool:
    """``c`` needs at least what ``f`` needs on the same GPU model and MIG profile (GPUs, share,
    GPU memory, CPU, host memory), so if ``f`` did not fit, ``c`` will not either -- up to
    slowdown bounds, which depend on the job's profile."""
    return (c.gpu_model == f.gpu_model and c.mig_profile == f.mig_profile
            and c.num_gpus >= f.num_gpus and c.gpu_share >= f.gpu_share
            and c.gpu_mem_gib >= f.gpu_mem_gib and c.cpu >= f.cpu and c.mem_gib >= f.mem_gib)
