"""First-version placement: pack chosen configurations onto physical GPUs (DESIGN.md, IAC).

Who calls it: the scheduling round (after pricing picked one configuration per job) and the
simulator, through the same code.  Whom it calls: a :class:`elastico.predictor.SlowdownModel`
(analytic by default) and :mod:`elastico.mig`.  No clock, no I/O, no global state.

:class:`ClusterState` is the placer's book of who runs where.  Units: GPU compute in fractions
of one GPU (MPS active thread percentage / 100), GPU and host memory in GiB, CPU in cores.

Rules every placement keeps (docs/placement.md):

* the configuration's ``gpu_model`` equals the node's model;
* gang: a job is booked all or nothing; a plain job's ``num_gpus`` GPUs are distinct GPUs of
  ONE node; a :class:`Gang` splits a job into pods (each on one node) or lets one pod span
  nodes, preferring one node, then one topology domain (node label ``topology_key``), then
  anywhere, and never puts two pods of a job on one GPU unless ``share_gpus``
  (:meth:`ClusterState._place_gang`);
* per GPU: compute shares sum to <= 1 (+1e-9), memory <= the GPU's memory; a whole-GPU
  configuration (share 1.0) only takes a GPU with no resident;
* per node: CPU cores and host memory are never over-committed (a configuration's ``cpu`` and
  ``mem_gib`` are totals over the job, booked on its node);
* MPS configurations only on GPUs not in MIG mode; MIG configurations only on MIG-mode GPUs, at
  a valid, free start slot (:class:`elastico.mig.MigGpu`); a MIG instance books
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
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Sequence

import numpy as np

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.model import Configuration, Node
from elastico.placer.fragmentation import MILLI, FragmentationModel, NodeSummaries, TypicalPods, typical_pods
from elastico.mig import COMPUTE_SLICES, MIG_PROFILES, MigGpu, MigProfile, mig_profile
from elastico.predictor import AnalyticSlowdown, JobProfile, SlowdownModel

__all__ = ["Assignment", "Part", "Gang", "TOPOLOGY_KEY", "PlaceOutcome", "ClusterState", "SCORERS",
           "EPS", "elastico_cost", "interference_loss", "CONSOLIDATION_GPU", "INTERFERENCE_WEIGHT",
           "FailedShapes", "dominates"]

EPS = 1e-9  # tolerance on every capacity comparison (fractions of a GPU, GiB, cores)
SCORERS = ("bestfit", "firstfit", "elastico")
#: default node label naming a node's topology domain (gangs prefer one domain)
TOPOLOGY_KEY = "topology.kubernetes.io/zone"
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


def _loss(shares: list[float], slowdowns: list[float]) -> float:
    """:func:`interference_loss` of Python lists, bit for bit: below 8 terms numpy's sum is
    the plain left-to-right sum (its pairwise sum unrolls only from 8 on; Python's own
    ``sum`` of floats is compensated from 3.12 on, so not that)."""
    if len(shares) >= 8:
        return interference_loss(shares, slowdowns)
    total = 0.0
    for s, g in zip(shares, slowdowns):
        total += s * (1.0 - 1.0 / g)
    return total


def _round9(x: float) -> float:
    """``np.round(x, 9)`` for one Python float, the same IEEE operations (numpy scales by
    1e9, rounds half to even, scales back; ``round`` of a float rounds half to even too),
    without numpy's per-call cost; infinities pass through.  Only the sign of a zero result
    may differ, which no comparison sees."""
    return round(x * 1e9) / 1e9 if math.isfinite(x) else x


_DELTA_CACHE_SHAPES = 256  # job shapes whose per-GPU fragmentation increase is kept
#: up to this many stale nodes, their increases are worked out one node at a time (native
#: kernel or plain Python: one booking leaves one node stale, and numpy's per-call cost
#: dominates at that size); more go to the batched numpy path, whose float sums run in another
#: order -- the limit stays where it was so that placements stay bit for bit the same
_PYTHON_STALE_NODES = 64
_DELTA_MEMO_SIZE = 1 << 14  # (node state, shape) pairs kept by ClusterState._cached_deltas


@dataclass(frozen=True)
class Gang:
    """How a job's configuration is split into pods (docs/placement.md, "Gangs and topology").

    ``pods``: the configuration's totals (GPUs, CPU, host memory) split evenly into this many
    pods, each on one node, placed all or nothing; ``num_gpus`` must be a multiple of it.
    ``share_gpus``: two pods of the job may be packed onto the same GPU (MPS share or MIG
    instances side by side); by default every pod gets GPUs no other pod of the job uses.
    ``span_nodes`` (one-pod jobs only): the job's GPUs may be split across nodes, one pod per
    node, when no single node has room for all of them -- a distributed job, e.g. one that
    needs more GPUs than any node has.  Off by default: a plain job stays on one node."""

    pods: int = 1
    share_gpus: bool = False
    span_nodes: bool = False


@dataclass(frozen=True)
class Part:
    """One pod of a job: ``gpu_indices`` on node ``node`` (index ``node_index``), ``cpu``
    cores and ``mem_gib`` GiB host memory booked there, ``mig_starts[i]`` the MIG instance's
    start slot on ``gpu_indices[i]`` (MIG only)."""

    node: str
    node_index: int
    gpu_indices: tuple[int, ...]
    cpu: float
    mem_gib: float
    mig_starts: tuple[int, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """Where one job runs: one :class:`Part` per pod (a job that spans nodes without pods of
    its own gets one part per node).  ``gpu_share`` (fraction of a GPU) and ``gpu_mem_gib``
    (GiB) are per GPU as booked, the same on every GPU of the job (for MIG: the instance's
    compute_slices/7 and memory_slices/8 of the GPU's memory).

    Readers of a one-node job keep using ``node``, ``node_index``, ``gpu_indices`` and
    ``mig_starts`` (the parts' GPUs in part order); on a job that spans nodes these raise
    ValueError, so nothing silently reads one node of several -- read ``parts``.  ``cpu``
    and ``mem_gib`` are totals over the parts."""

    job_id: str
    parts: tuple[Part, ...]
    gpu_share: float
    gpu_mem_gib: float
    mig_profile: str | None = None
    config_name: str = ""
    gpu_model: str | None = None

    @property
    def node_indices(self) -> tuple[int, ...]:
        """The job's nodes, each once, in part order."""
        return tuple(dict.fromkeys(p.node_index for p in self.parts))

    @property
    def single_node(self) -> bool:
        return len(self.node_indices) == 1

    def _one(self) -> Part:
        if not self.single_node:
            names = ", ".join(dict.fromkeys(p.node for p in self.parts))
            raise ValueError(f"assignment of job {self.job_id!r} spans nodes {names}: read .parts")
        return self.parts[0]

    @property
    def node(self) -> str:
        return self._one().node

    @property
    def node_index(self) -> int:
        return self._one().node_index

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        self._one()
        return tuple(g for p in self.parts for g in p.gpu_indices)

    @property
    def mig_starts(self) -> tuple[int, ...]:
        self._one()
        return tuple(s for p in self.parts for s in p.mig_starts)

    @property
    def cpu(self) -> float:
        return math.fsum(p.cpu for p in self.parts) if len(self.parts) > 1 else self.parts[0].cpu

    @property
    def mem_gib(self) -> float:
        return math.fsum(p.mem_gib for p in self.parts) if len(self.parts) > 1 else self.parts[0].mem_gib

    @property
    def gpus(self) -> tuple[tuple[int, int], ...]:
        """``(node_index, gpu_index)`` of every GPU booking, part by part (a GPU appears
        twice when two pods of a ``share_gpus`` gang share it)."""
        return tuple((p.node_index, g) for p in self.parts for g in p.gpu_indices)


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


_ONE_POD = Gang()


class ClusterState:
    """Per-GPU and per-node bookings of a cluster (module docstring has the rules).

    ``nodes``: the cluster.  ``mig_gpus``: ``(node_index, gpu_index)`` pairs whose GPU is in MIG
    mode (only models with a MIG profile table, :data:`elastico.mig.MIG_PROFILES`).
    ``slowdown_model``: used by ``place`` and ``predicted_slowdowns`` unless a call passes
    another; default :class:`AnalyticSlowdown` with the Gavel-fitted kappa.
    ``topology_key``: the node label whose value names a node's topology domain (gangs prefer
    one domain; nodes without the label are in no domain).  ``frag_cache``: keep the
    ``elastico`` scorer's fragmentation summaries incrementally (False: recompute them at
    every placement -- the reference the cache is tested and benchmarked against).
    ``frag_native``: keep those summaries and per-shape increases with the native kernel
    (:class:`elastico.placer.fragmentation.NodeSummaries` ``native``; the same numbers, so
    the same placements; False: plain Python, the reference it is tested and benchmarked
    against).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        mig_gpus: Iterable[tuple[int, int]] = (),
        slowdown_model: SlowdownModel | None = None,
        frag_cache: bool = True,
        topology_key: str = TOPOLOGY_KEY,
        frag_native: bool = True,
    ):
        if not (isinstance(topology_key, str) and topology_key):
            raise InvalidArgument("topology_key", topology_key, "a non-empty node label key")
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.topology_key = topology_key
        domains: dict[str, int] = {}  # label value -> domain index, first-seen order
        values = [dict(nd.labels).get(topology_key) for nd in self.nodes]
        self._domain = np.array([-1 if v is None else domains.setdefault(v, len(domains)) for v in values],
                                dtype=np.int64)
        self._domain_names = tuple(domains)
        self.slowdown_model: SlowdownModel = slowdown_model or AnalyticSlowdown()
        n = len(self.nodes)
        counts = np.array([nd.num_gpus for nd in self.nodes], dtype=np.int64)
        self._offset = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        G = int(self._offset[-1])
        self._models: dict[str, int] = {}
        for nd in self.nodes:
            self._models.setdefault(nd.gpu_model, len(self._models))
        self._node_model = np.array([self._models[nd.gpu_model] for nd in self.nodes], dtype=np.int64)
        self._model_max_gpus: dict[str, int] = {}
        for nd in self.nodes:
            self._model_max_gpus[nd.gpu_model] = max(self._model_max_gpus.get(nd.gpu_model, 0), nd.num_gpus)
        self._node_cpu = np.array([nd.cpu for nd in self.nodes], dtype=float)
        self._node_mem = np.array([nd.mem_gib for nd in self.nodes], dtype=float)
        self._node_cpu_used = np.zeros(n)
        self._node_mem_used = np.zeros(n)
        self._node_jobs: list[dict[str, tuple[float, float]]] = [{} for _ in range(n)]  # cpu, mem
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
        # per GPU: job id -> (share, GPU memory GiB, copies); copies > 1 only for the pods of
        # a share_gpus gang packed onto one GPU (each copy is one resident)
        self._gpu_jobs: list[dict[str, tuple[float, float, int]]] = [{} for _ in range(G)]
        self._healthy = np.ones(G, dtype=bool)
        # per GPU model code: healthy MPS GPUs of that model (built on demand; replaced, never
        # changed, when a GPU's health changes, so copies may share the arrays)
        self._mps_base: dict[int, np.ndarray] = {}
        self._node_cpu_cap = self._node_cpu + EPS   # capacity + tolerance, the same sums
        self._node_mem_cap = self._node_mem + EPS   # every check would form
        self._gpu_mem_cap = self._gpu_cap_mem + EPS
        for ni, nd in enumerate(self.nodes):
            for gi in nd.unhealthy_gpus:
                if not (isinstance(gi, (int, np.integer)) and 0 <= gi < nd.num_gpus):
                    raise InvalidArgument(f"nodes[{ni}].unhealthy_gpus", gi,
                                          f"GPU indices in 0..{nd.num_gpus - 1}")
                self._healthy[int(self._offset[ni]) + int(gi)] = False
        self.typical: TypicalPods | None = None
        self._frag_model: FragmentationModel | None = None
        self._frag_cache: NodeSummaries | None = None  # built on first use, see _frag_summaries
        self._frag_cache_on = bool(frag_cache)
        self._frag_native = bool(frag_native)
        self._node_version = np.zeros(n, dtype=np.int64)  # bumped on every booking change
        # per job shape: (increase [G], free milli-GPU after [G], node versions seen [N])
        self._delta_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._slots: np.ndarray | None = None  # see _node_slots
        self._offset_list: list[int] = self._offset.tolist()
        # (node state, shape) -> that node's rows of a _delta_cache entry; a pure function of
        # the key for one set of typical pods, so copies share it
        self._delta_memo: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
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
        self._mig_nodes = frozenset(int(self._gpu_node[f]) for f in self._mig)  # nodes with MIG GPUs
        self._jobs: dict[str, tuple[Assignment, JobProfile, float]] = {}
        # MPS rules of the live loop (set_mps_user, set_mps_down); empty in the simulator.
        # _mps_code [G]: the code (_mps_names, grow-only, shared by copies) of the one user of
        # a GPU's residents, -1 none, -2 several; kept by _refresh_gpu and set_mps_user
        self._mps_user: dict[str, str] = {}
        self._mps_down: dict[int, str] = {}
        self._mps_names: dict[str, int] = {}
        self._mps_code = np.full(G, -1, dtype=np.int64)

    def copy(self) -> "ClusterState":
        """An independent copy for a round to decide on (run_round commits it or drops it).

        Cluster shape (nodes, capacities, MIG mode) is shared; every booking is copied.
        Much cheaper than ``copy.deepcopy``: bookings are immutable tuples and dataclasses.
        """
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        for name in ("_node_cpu_used", "_node_mem_used", "_used_share", "_used_mem", "_n_res",
                     "_mig_occ", "_mig_comp", "_healthy", "_mps_code"):
            setattr(new, name, getattr(self, name).copy())
        new._node_jobs = [d.copy() for d in self._node_jobs]
        new._gpu_jobs = [d.copy() for d in self._gpu_jobs]
        new._mig = {f: m.copy() for f, m in self._mig.items()}
        new._mps_base = dict(self._mps_base)
        new._jobs = dict(self._jobs)
        new._mps_user, new._mps_down = dict(self._mps_user), dict(self._mps_down)
        if self._frag_cache is not None:
            new._frag_cache = self._frag_cache.copy()
        new._node_version = self._node_version.copy()
        new._delta_cache = {k: tuple(a.copy() for a in e) for k, e in self._delta_cache.items()}
        return new

    # ----------------------------------------------------------------------------- health
    def mark_unhealthy(self, node_index: int, gpu_index: int) -> list[str]:
        """Mark a GPU unhealthy (node agent / node condition): from now on it is never free,
        no scorer chooses it and ``rebook`` refuses it.  Jobs already on it keep their booking
        (the caller moves them: ``release`` then ``place``); returns their ids.  NotFound for a
        GPU that does not exist."""
        f = self._flat(node_index, gpu_index)
        self._healthy[f] = False
        self._mps_base = {}
        self._frag_touch(node_index)
        return list(self._gpu_jobs[f])

    def mark_healthy(self, node_index: int, gpu_index: int) -> None:
        """Return a GPU to service (NotFound for a GPU that does not exist)."""
        self._healthy[self._flat(node_index, gpu_index)] = True
        self._mps_base = {}
        self._frag_touch(node_index)

    def is_healthy(self, node_index: int, gpu_index: int) -> bool:
        return bool(self._healthy[self._flat(node_index, gpu_index)])

    def unhealthy_gpus(self) -> list[tuple[int, int]]:
        """``(node_index, gpu_index)`` of every GPU marked unhealthy, in flat order."""
        f = np.flatnonzero(~self._healthy)
        return list(zip(self._gpu_node[f].tolist(), self._gpu_local[f].tolist()))

    # ----------------------------------------------------------------------------- MPS
    def set_mps_user(self, job_id: str, user: str | None) -> None:
        """The Linux user ``job_id``'s MPS clients run as, as a phrase for reasons (the live
        loop passes ``"user 1000"``, or one phrase for every pod that leaves it to its image);
        None forgets it.  NVIDIA MPS runs one server per user, and a client of another user
        waits until that server is gone: an MPS share (``gpu_share`` < 1, no MIG profile) is
        placed only on a GPU whose residents have its user.  A job or resident without a user
        matches any (the simulator's case: every job shares as before).  A booking already
        made is never checked again (``rebook``)."""
        if user is None:
            self._mps_user.pop(job_id, None)
        elif not (isinstance(user, str) and user):
            raise InvalidArgument("mps_user", user, "a non-empty string or None")
        else:
            self._mps_user[job_id] = user
        if job_id in self._jobs:  # a resident's user changed: its GPUs' codes
            for n, gi in self._jobs[job_id][0].gpus:
                g = self._flat(n, gi)
                self._mps_code[g] = self._user_code(g)

    def _user_code(self, g: int) -> int:
        users = {self._mps_user.get(j) for j in self._gpu_jobs[g]} - {None}
        if len(users) > 1:
            return -2
        return self._mps_names.setdefault(users.pop(), len(self._mps_names)) if users else -1

    def set_mps_down(self, node_index: int, reason: str | None) -> None:
        """The MPS control daemon of node ``node_index`` is down (``reason``, a non-empty
        phrase) or back (None): no new MPS share is placed on that node's GPUs; whole-GPU and
        MIG placements and the bookings already there are unaffected.  NotFound for a node
        that does not exist."""
        if not (isinstance(node_index, (int, np.integer)) and 0 <= node_index < len(self.nodes)):
            raise NotFound(f"node_index: no node {node_index}")
        if reason is None:
            self._mps_down.pop(int(node_index), None)
        elif not (isinstance(reason, str) and reason):
            raise InvalidArgument("reason", reason, "a non-empty string or None")
        else:
            self._mps_down[int(node_index)] = reason

    def mps_limited(self, job_id: str, config: Configuration) -> bool:
        """True when the MPS rules keep ``config`` of ``job_id`` off some GPU, so a failure to
        place it says nothing about other jobs or whole-GPU shapes (``FailedShapes`` must not
        record it)."""
        return self._mps_excl(job_id, config) is not None

    def mps_obstacle(self, job_id: str, config: Configuration) -> str:
        """Why the MPS rules keep ``config`` of ``job_id`` off every node that would otherwise
        take it (free share, GPU memory, CPU and host memory; slowdown bounds not), naming
        the GPUs or nodes; "" when they do not (not an MPS share, no rule applies, or some node
        takes it anyway)."""
        e = self._mps_excl(job_id, config)
        return "" if e is None else self._mps_reason(config, *e)

    def _mps_excl(self, job_id: str, config: Configuration) -> tuple[np.ndarray, str | None] | None:
        """([G] GPUs the MPS rules exclude for this job, the job's user), or None when they
        exclude none (:meth:`set_mps_user`, :meth:`set_mps_down`)."""
        if (config.mig_profile is not None or config.num_gpus == 0 or config.gpu_share >= 1.0
                or not (self._mps_down or self._mps_user)):
            return None
        excl = np.zeros(self._gpu_node.size, dtype=bool)
        for n in self._mps_down:
            excl[self._offset_list[n]:self._offset_list[n + 1]] = True
        user = self._mps_user.get(job_id)
        if user is not None:
            c, mine = self._mps_code, self._mps_names.get(user, -3)
            excl |= ((c == -2) | ((c >= 0) & (c != mine))) & ~self._is_mig
        return (excl, user) if excl.any() else None

    def _mps_reason(self, config: Configuration, excl: np.ndarray, user: str | None) -> str:
        e = self._eligible(config, leftover=False)
        if isinstance(e, str):
            return ""
        elig = e[0] & self._host_ok(config)[self._gpu_node]
        k, n = config.num_gpus, len(self.nodes)
        fit = np.bincount(self._gpu_node[elig], minlength=n) >= k
        if not fit.any() or (np.bincount(self._gpu_node[elig & ~excl], minlength=n) >= k).any():
            return ""
        msgs: dict[str, None] = {}
        for g in np.flatnonzero(elig & excl & fit[self._gpu_node]).tolist():
            ni = int(self._gpu_node[g])
            if ni in self._mps_down:
                msgs[f"MPS control daemon on node {self.nodes[ni].name} is down: {self._mps_down[ni]}"] = None
            else:
                others = sorted({self._mps_user.get(j) for j in self._gpu_jobs[g]} - {None, user})
                msgs[f"GPU {int(self._gpu_local[g])} of {self.nodes[ni].name} is shared under MPS "
                     f"by {others[0]}; this pod runs as {user}"] = None
        out = list(msgs)
        more = f" (and {len(out) - 3} more)" if len(out) > 3 else ""
        return "; ".join(out[:3]) + more

    def set_typical_pods(self, typical: TypicalPods | None) -> None:
        """The workload's typical pod shapes for the ``elastico`` scorer's fragmentation term
        (:func:`elastico.placer.fragmentation.typical_pods`, CPU in milli-cores, GPU in
        milli-GPU).  None: each placement uses the job's own shape as the only typical pod."""
        if typical is not None and not isinstance(typical, TypicalPods):
            raise InvalidArgument("typical", type(typical).__name__, "a TypicalPods or None")
        self.typical = typical
        self._frag_model = None if typical is None else FragmentationModel(typical, tuple(self._models))
        self._frag_cache = None
        self._delta_cache = {}
        self._delta_memo = {}

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
        """Profiles and bounds of GPU ``f``'s residents, one per copy (:meth:`_residents`)."""
        ids = self._residents(f)
        return [self._jobs[j][1] for j in ids], [self._jobs[j][2] for j in ids]

    def _residents(self, f: int) -> list[str]:
        """Job id of each resident of GPU ``f`` in placement order, repeated per copy."""
        d = self._gpu_jobs[f]
        if len(d) == self._n_res[f]:
            return list(d)
        return [j for j, v in d.items() for _ in range(v[2])]

    def predicted_slowdowns(self, slowdown_model: SlowdownModel | None = None) -> dict[str, float]:
        """Every placed job's predicted slowdown from its co-residents (1.0 alone or on MIG;
        max over a multi-GPU job's GPUs)."""
        model = slowdown_model or self.slowdown_model
        out = {j: 1.0 for j in self._jobs}
        for f in np.flatnonzero((self._n_res >= 2) & ~self._is_mig).tolist():
            profiles, _ = self._gpu_profiles(f)
            sig = model.gpu_slowdowns(profiles)
            for j, s in zip(self._residents(f), np.asarray(sig, float).tolist()):
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
        return (self._node_cpu_used + config.cpu <= self._node_cpu_cap) & (
            self._node_mem_used + config.mem_gib <= self._node_mem_cap
        )

    def _eligible(self, config: Configuration, leftover: bool = True) -> tuple[np.ndarray, np.ndarray | None] | str:
        """(eligible flat GPU mask, leftover free share per GPU after placement -- None unless
        ``leftover``) or a reason."""
        model = config.gpu_model
        code = self._models.get(model) if model is not None else None
        if code is None:
            return f"no node with GPU model {model}"
        share = config.gpu_share
        if config.mig_profile is not None:
            same = self._gpu_model == code
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
        base = self._mps_base.get(code)
        if base is None:
            same = self._gpu_model == code
            if not (same & ~self._is_mig).any():  # MIG mode is fixed at construction
                return f"no MPS (non-MIG) GPU of model {model}"
            base = self._mps_base[code] = same & ~self._is_mig & self._healthy
        elig = (
            base
            & (self._used_share + share <= 1.0 + EPS)
            & (self._used_mem + config.gpu_mem_gib <= self._gpu_mem_cap)
        )
        if share >= _WHOLE:
            elig &= self._n_res == 0
        return elig, (1.0 - self._used_share - share) if leftover else None

    def _gpu_phrase(self, config: Configuration) -> str:
        k, m = config.num_gpus, config.gpu_model
        if config.mig_profile is not None:
            return f"{k} GPU(s) of model {m} with a free {config.mig_profile} MIG slot for {config.gpu_mem_gib:g} GiB"
        return f"{k} GPU(s) of model {m} with share {config.gpu_share:g} and memory {config.gpu_mem_gib:g} GiB free"

    def _holders(self, g: int) -> str:
        """``held by <job> (<share>, <GiB>), ...`` for GPU ``g``'s residents (three at most)."""
        items = list(self._gpu_jobs[g].items())
        if not items:
            return "no resident"
        out = ", ".join(f"{j} ({v[0]:g} of the GPU, {v[1]:g} GiB)" for j, v in items[:3])
        return "held by " + out + (f" and {len(items) - 3} more" if len(items) > 3 else "")

    def _why_no_gpus(self, config: Configuration, counts: np.ndarray) -> str:
        """``: <binding constraint> ...`` for a configuration no node has the GPUs for
        (``counts``: eligible GPUs per node): unhealthy GPUs, GPU share or GPU memory, named
        on the GPU closest to fitting with the jobs that hold it.  "" for MIG shapes (their
        phrase names the slot)."""
        if config.mig_profile is not None:
            return ""
        code = self._models.get(config.gpu_model or "")
        same = (self._gpu_model == code) & ~self._is_mig
        good = same & self._healthy
        sick = int((same & ~self._healthy).sum())
        k = config.num_gpus
        per_node = np.bincount(self._gpu_node[good], minlength=len(self.nodes))
        if per_node.max(initial=0) < k:
            return (f": unhealthy GPUs: at most {int(per_node.max(initial=0))} healthy GPU(s) of "
                    f"model {config.gpu_model} on one node ({sick} unhealthy)")
        if counts.max(initial=0) > 0:  # some GPUs fit, too few on one node
            n = int(np.argmax(counts))
            return (f": at most {int(counts[n])} such GPU(s) on one node "
                    f"({self.nodes[n].name})")
        share_ok = self._used_share + config.gpu_share <= 1.0 + EPS
        if config.gpu_share >= _WHOLE:
            share_ok &= self._n_res == 0
        mem_ok = self._used_mem + config.gpu_mem_gib <= self._gpu_mem_cap
        free_mem = self._gpu_cap_mem - self._used_mem
        if (good & share_ok).any():  # the share is there, the memory is not
            g = int(np.argmax(np.where(good & share_ok, free_mem, -np.inf)))
            what = (f"GPU memory: GPU {int(self._gpu_local[g])} of node "
                    f"{self.nodes[int(self._gpu_node[g])].name} has the share but "
                    f"{free_mem[g]:g} of {self._gpu_cap_mem[g]:g} GiB free")
        else:
            free = np.where(good, 1.0 - self._used_share, -np.inf)
            g = int(np.argmax(free))
            extra = "" if mem_ok[g] else f" and {free_mem[g]:g} GiB"
            what = (f"GPU share: the freest GPU, GPU {int(self._gpu_local[g])} of node "
                    f"{self.nodes[int(self._gpu_node[g])].name}, has {max(0.0, free[g]):g} of the "
                    f"GPU{extra} free")
        return f": {what}, {self._holders(g)}"

    def _why_no_host(self, config: Configuration, gpu_ok: np.ndarray) -> str:
        """``: host CPU|memory: ...`` for a configuration whose GPUs only nodes without the
        host resources have (``gpu_ok``), named on the freest such node."""
        cpu_free = self._node_cpu - self._node_cpu_used
        mem_free = self._node_mem - self._node_mem_used
        cpu_ok = gpu_ok & (self._node_cpu_used + config.cpu <= self._node_cpu_cap)
        if cpu_ok.any():  # CPU is there, host memory is not
            n = int(np.argmax(np.where(cpu_ok, mem_free, -np.inf)))
            return (f": host memory: node {self.nodes[n].name} has {mem_free[n]:g} of "
                    f"{self._node_mem[n]:g} GiB free")
        n = int(np.argmax(np.where(gpu_ok, cpu_free, -np.inf)))
        return f": host CPU: node {self.nodes[n].name} has {cpu_free[n]:g} of {self._node_cpu[n]:g} cores free"

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
            return f"no node with {self._gpu_phrase(config)}{self._why_no_gpus(config, counts)}"
        both = gpu_ok & host
        if not both.any():
            return (
                f"no node with {self._gpu_phrase(config)} that also has cpu {config.cpu:g} cores "
                f"and memory {config.mem_gib:g} GiB free{self._why_no_host(config, gpu_ok)}"
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
        gang: Gang | None = None,
    ) -> PlaceOutcome:
        """Book ``config`` for ``job_id`` (module docstring: rules and scorers).  Returns the
        assignment, or None with a reason; a failed placement changes nothing.  Bad input ->
        InvalidArgument (nothing changes).

        ``gang`` (default: one pod, on one node): split the job into ``gang.pods`` pods, or
        let one pod's GPUs span nodes (``gang.span_nodes``), placed all or nothing
        (:meth:`_place_gang`)."""
        if scorer not in SCORERS:
            raise InvalidArgument("scorer", scorer, f"one of {list(SCORERS)}")
        self._validate(job_id, config, profile, slowdown_bound)
        gang = self._validate_gang(gang, config)
        model = slowdown_model or self.slowdown_model
        if gang.pods > 1 or (gang.span_nodes and config.num_gpus > 0):
            return self._place_gang(job_id, config, profile, float(slowdown_bound), model, scorer, gang)
        # the MPS rules (set_mps_user, set_mps_down); the live loop's gangs are whole GPUs
        mps = self._mps_excl(job_id, config)
        out = self._place_single(job_id, config, profile, float(slowdown_bound), model, scorer,
                                 gpu_excl=None if mps is None else mps[0])
        if mps is None or out.placed or out.reason.startswith("slowdown bound"):
            return out
        why = self._mps_reason(config, *mps) or self._candidates(config)
        return PlaceOutcome(None, why if isinstance(why, str) else "no candidate node")

    def _place_single(self, job_id: str, config: Configuration, profile: JobProfile, bound: float,
                      model: SlowdownModel, scorer: str, node_mask: np.ndarray | None = None,
                      gpu_excl: np.ndarray | None = None) -> PlaceOutcome:
        """One pod on one node.  ``node_mask`` [N]: only these nodes; ``gpu_excl`` [G]: not
        these GPUs (a gang's other pods).  Input already validated."""
        slowdown_bound = bound
        if config.num_gpus == 0:
            return self._place_host_only(job_id, config, profile, float(slowdown_bound), scorer, node_mask)
        host = self._host_ok(config)
        if node_mask is not None:
            host = host & node_mask
        e = self._eligible(config, leftover=scorer != "elastico")
        if isinstance(e, str):
            return PlaceOutcome(None, e)
        elig, leftover = e
        if gpu_excl is not None:
            elig = elig & ~gpu_excl
        k = config.num_gpus
        idx = np.flatnonzero(elig & host[self._gpu_node])
        per_node = np.bincount(self._gpu_node[idx]) if idx.size else None
        if per_node is None or per_node.max() < k:
            reason = self._candidates(config) if node_mask is None and gpu_excl is None else ""
            return PlaceOutcome(None, reason if isinstance(reason, str) and reason else "no candidate node")
        if scorer == "elastico":
            return self._place_elastico(job_id, config, profile, float(slowdown_bound), model, idx, per_node)
        node_of = self._gpu_node[idx]
        local = self._gpu_local[idx]
        left = np.round(leftover[idx], 9)
        if scorer == "bestfit":
            order = np.lexsort((local, left, node_of))
        else:
            order = np.lexsort((local, node_of))
        idx, node_of, left = idx[order], node_of[order], left[order]
        # node_of is sorted (the lexsorts' primary key): its runs are np.unique's groups,
        # found without unique's own sort
        starts = np.empty(node_of.size, dtype=bool)  # idx is not empty here
        starts[0] = True
        np.not_equal(node_of[1:], node_of[:-1], out=starts[1:])
        first = np.flatnonzero(starts)
        counts = np.empty_like(first)
        np.subtract(first[1:], first[:-1], out=counts[:-1])
        counts[-1] = node_of.size - first[-1]
        uniq = node_of[first]
        keep = counts >= k
        uniq, first, counts = uniq[keep], first[keep], counts[keep]
        if scorer == "bestfit":
            # optimistic: the k tightest GPUs of each node, ignoring interference
            opt_left = np.array([left[f:f + k].sum() for f in first.tolist()]) if k > 1 else left[first]
            opt_left = np.round(opt_left, 9)
            node_free = np.bincount(self._gpu_node, weights=1.0 - self._used_share, minlength=len(self.nodes))
            node_after = np.round(node_free[uniq] - k * config.gpu_share, 9)
            node_order = np.lexsort((uniq, node_after, opt_left))
            # the search stops after a node or two: keys are built as it reaches them
            key_cols = (opt_left[node_order].tolist(), node_after[node_order].tolist(),
                        uniq[node_order].tolist())
        else:
            node_order = np.arange(uniq.size)
            key_cols = (uniq.tolist(),)

        def opt_key(pos: int) -> tuple:
            return tuple(col[pos] for col in key_cols)

        best: tuple | None = None
        best_choice: tuple[int, list[int], float] | None = None
        worst_seen: tuple[float, str] | None = None  # smallest bound violation, for the reason
        is_mig = config.mig_profile is not None
        for pos, i in enumerate(node_order.tolist()):
            if best is not None and best[: len(key_cols)] <= opt_key(pos):
                break
            chosen: list[int] = []
            left_sum = 0.0  # what sum(leftover of chosen) was, added in the same order
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
                left_sum += float(left[q])
                if len(chosen) == k:
                    break
            if len(chosen) < k:
                continue
            n = int(uniq[i])
            locs = tuple(sorted(int(self._gpu_local[g]) for g in chosen))
            if scorer == "bestfit":
                key = (
                    round(left_sum, 9),
                    key_cols[1][pos],
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
    def _frag_rows(self, nodes: np.ndarray, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """([U, Gmax] free milli-GPU of each GPU of ``nodes`` (0-padded to at least ``width``;
        unhealthy GPUs 0; MIG-mode GPUs by free compute slices / 7), [U] free milli-CPU)."""
        ng = np.diff(self._offset)[nodes]
        gmax = max(1, int(ng.max()), width)
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
        to MPS GPU ``g``: (ok, new job's slowdown, violation, dI in GPUs).  The violation is
        None when ok, else :meth:`_check_bounds`' worst resident as ``(slowdown / bound, g,
        its position among the residents, its slowdown, its bound)``, put in words by
        :meth:`_violation` only if the placement fails."""
        if self._n_res[g] == 0:
            return True, 1.0, None, 0.0
        # _check_bounds, sharing its slowdowns with dI; the bound test in plain Python (a
        # GPU has a handful of residents: numpy's per-call cost would dominate)
        profiles, bounds = self._gpu_profiles(g)
        sig = np.asarray(model.gpu_slowdowns(profiles + [profile]), float).tolist()
        bounds.append(bound)
        if any(s > b + EPS for s, b in zip(sig, bounds)):
            # the same float64 ratios and first-largest choice as _check_bounds' numpy
            ratio = [s / b for s, b in zip(sig, bounds)]
            w = ratio.index(max(ratio))
            return False, sig[-1], (ratio[w], g, w, sig[w], bounds[w]), math.inf
        shares = [v[0] for v in self._gpu_jobs[g].values() for _ in range(v[2])]
        before = np.asarray(model.gpu_slowdowns(profiles), float).tolist() if len(profiles) >= 2 \
            else [1.0] * len(profiles)
        dI = _loss(shares + [share], sig) - _loss(shares, before)
        return True, sig[-1], None, max(0.0, dI)

    def _place_elastico(self, job_id: str, config: Configuration, profile: JobProfile,
                        bound: float, model: SlowdownModel, idx: np.ndarray,
                        per_node: np.ndarray) -> PlaceOutcome:
        """The ``elastico`` scorer (:func:`elastico_cost`; docs/placement.md, "Scorers").

        ``idx``: eligible flat GPUs on nodes with the host resources, in flat order;
        ``per_node``: ``np.bincount(self._gpu_node[idx])``, how many of them each node has.  Per candidate GPU the
        fragmentation increase of taking it (FGD's measure, typical pods from
        :meth:`set_typical_pods`); per node the k GPUs of least cost; nodes visited by their
        cost without interference (a lower bound for single-GPU jobs, since dI >= 0), then
        the real cost with the predicted interference; stop when the best real cost is no
        worse than the next node's lower bound.

        With typical pods set (and ``frag_cache``), node summaries and per-GPU increases
        come from the incremental caches (:meth:`_frag_summaries`, :meth:`_cached_deltas`),
        with ``frag_native`` together with the candidate order in one native call
        (:meth:`_native_plan`: the same numbers as the numpy code here); otherwise they are
        worked out here from every candidate node's GPUs."""
        k = config.num_gpus
        mp = self._mig_profile(config)
        share = mp.share if mp is not None else float(config.gpu_share)
        m = int(round(share * MILLI))
        cpu_m = int(round(config.cpu * 1000))
        fm = self._frag_model
        cached = fm is not None and self._frag_cache_on
        if fm is None:
            fm = FragmentationModel(typical_pods([cpu_m], [max(1, min(m, MILLI))], [k]), tuple(self._models))
        plan = self._native_plan(idx, m, cpu_m) if cached and self._frag_native else None
        if plan is not None:  # what the numpy code below works out, from the native kernel
            src = self._frag_cache
            uniq, counts, first, order, d_gpu, new, opt_key, visit = plan
            rix = uniq
        else:
            node_of = self._gpu_node[idx]
            # idx is in flat (node-major) order, so node_of is sorted: one run per node, of
            # per_node[n] GPUs, the runs in node order
            uniq = per_node.nonzero()[0]
            counts = per_node[uniq]
            first = counts.cumsum() - counts
            if cached:
                src = self._frag_summaries()        # rows indexed by node
                rix = uniq
                d_all, new_all = self._cached_deltas(src, uniq, m, cpu_m)
                d_gpu, new = d_all[idx], new_all[idx]
                # per node, GPUs by (cost, least free after, index): lexsort is stable and idx
                # is in flat order, so ties keep the GPU index order
                order = np.lexsort((new, d_gpu, node_of))
            else:
                local = self._gpu_local[idx]
                rows, cpu = self._frag_rows(uniq)
                src = NodeSummaries(fm, rows, cpu, self._node_model[uniq])   # rows indexed by run
                rix = np.arange(uniq.size)
                inv = np.repeat(rix, counts)
                old = src.rows[inv, local]
                new = np.maximum(old - m, 0)
                c1, s1 = fm.shift(src.cnt[inv], src.S[inv], old, new)
                after = fm.from_counts(src.cpu[inv] - cpu_m, src.L[inv] - (old - new), c1, s1, src.model[inv])
                d_gpu = np.round((after - src.F[inv]) / MILLI, 9)
                # per node, GPUs by (cost, least free after, index)
                order = np.lexsort((local, new, d_gpu, node_of))

        def set_cost(r: int, gpus: list[int]) -> float:
            """Exact fragmentation increase (GPUs) of the node in row ``r`` of ``src`` taking
            ``gpus`` (flat)."""
            row = src.rows[r:r + 1].copy()
            j = self._gpu_local[gpus]
            row[0, j] = np.maximum(row[0, j] - m, 0)
            # the integer summaries of the row after: what FragmentationModel.shift gives
            # GPU by GPU from src's (which are counts(src.rows)), so the same from_counts
            c, sm = fm.counts(row)
            after = fm.from_counts(np.array([src.cpu[r] - cpu_m]), row.sum(axis=1), c, sm, src.model[r:r + 1])[0]
            return round(float(after - src.F[r]) / MILLI, 9)

        if k == 1 and plan is not None:  # opt_key and visit come with the plan
            ok_runs = None
        elif k == 1:  # every run qualifies: ok_runs would be arange(uniq.size)
            ok_runs, runs = None, uniq
            opt = np.minimum.reduceat(d_gpu, first)  # each run's least increase
        else:
            ok_runs = np.flatnonzero(counts >= k)
            runs = uniq[ok_runs]
            opt = np.array([set_cost(int(rix[u]), idx[order[first[u]:first[u] + k]].tolist())
                            for u in ok_runs.tolist()])
        if k > 1 or plan is None:
            # elastico_cost(opt, 0.0, position) rounded to 1e-9, inlined: this runs once per
            # placement; np.round(x, 9) is these three operations, without its per-call cost
            opt_key = opt + CONSOLIDATION_GPU * runs
            opt_key *= 1e9
            np.rint(opt_key, out=opt_key)
            opt_key /= 1e9
            visit = np.lexsort((runs, opt_key))
        is_mig = mp is not None
        best = None
        best_choice = None
        worst_seen = None
        for i in visit.tolist():
            if best is not None and best[0] <= opt_key[i]:
                break
            u = i if ok_runs is None else int(ok_runs[i])
            cands = []
            # GPUs come by increasing dF and a GPU's cost is >= its dF: for one GPU, the rest
            # of the node cannot beat the least cost once dF passes it
            least = math.inf
            for q in order[first[u]:first[u] + counts[u]].tolist():
                if k == 1 and d_gpu[q] > least:
                    break
                g = int(idx[q])
                if is_mig:
                    ok, s_new, viol, dI = True, 1.0, None, 0.0
                else:
                    ok, s_new, viol, dI = self._interference(g, profile, share, bound, model)
                if not ok:
                    if worst_seen is None or viol[0] < worst_seen[0]:
                        worst_seen = viol
                    continue
                cost = round(float(d_gpu[q]) + INTERFERENCE_WEIGHT * dI, 9)
                least = min(least, cost)
                cands.append((cost, int(new[q]), int(self._gpu_local[g]), g, dI, s_new, q))
            if len(cands) < k:
                continue
            cands.sort()
            chosen = cands[:k]
            gpus = [c[3] for c in chosen]
            # one GPU: its fragmentation increase is d_gpu, already worked out
            dF = float(d_gpu[chosen[0][6]]) if k == 1 else set_cost(int(rix[u]), gpus)
            # elastico_cost(dF, dI, position) in Python floats: the same IEEE operations
            cost = round(dF + INTERFERENCE_WEIGHT * sum(c[4] for c in chosen)
                         + CONSOLIDATION_GPU * int(uniq[u]), 9)
            key = (cost, int(uniq[u]))
            if best is None or key < best:
                best, best_choice = key, (int(uniq[u]), gpus, max(c[5] for c in chosen))
        if best_choice is None:
            detail = f" ({self._violation(*worst_seen[1:])})" if worst_seen else ""
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
        return False, float(sig[-1]), (float(ratio[w]), self._violation(g, w, float(sig[w]), float(b[w])))

    def _violation(self, g: int, w: int, sig: float, bound: float) -> str:
        """The words for resident ``w`` of GPU ``g`` (``w`` = their number: the new job)
        predicted at slowdown ``sig`` past its ``bound``."""
        res = self._residents(g)
        who = "the new job" if w == self._n_res[g] else f"job {res[w]}"
        beside = f" beside {', '.join(dict.fromkeys(res[:3]))}" if w == self._n_res[g] and res else ""
        n = int(self._gpu_node[g])
        return f"e.g. node {self.nodes[n].name} GPU {int(self._gpu_local[g])}: {who} predicted " \
               f"{sig:.3f} > bound {bound:.3f}{beside}"

    # ----------------------------------------------------------------------- gangs
    def _validate_gang(self, gang: Gang | None, config: Configuration) -> Gang:
        if gang is None:
            return _ONE_POD
        if not isinstance(gang, Gang):
            raise InvalidArgument("gang", type(gang).__name__, "an elastico.placer.placement.Gang or None")
        if not (isinstance(gang.pods, int) and not isinstance(gang.pods, bool) and gang.pods >= 1):
            raise InvalidArgument("gang.pods", gang.pods, "an integer >= 1")
        if config.num_gpus % gang.pods:
            raise InvalidArgument("gang.pods", gang.pods,
                                  f"a divisor of config.num_gpus={config.num_gpus} (pods get equal GPUs)")
        if not isinstance(gang.share_gpus, bool):
            raise InvalidArgument("gang.share_gpus", gang.share_gpus, "True or False")
        if not isinstance(gang.span_nodes, bool):
            raise InvalidArgument("gang.span_nodes", gang.span_nodes, "True or False")
        if gang.span_nodes and gang.pods > 1:
            raise InvalidArgument("gang.span_nodes", True, "False when pods > 1 (each pod is on one node; "
                                                           "the pods may already be on different nodes)")
        return gang

    def _max_node_gpus(self, model: str | None) -> int:
        """GPUs of the largest node of ``model`` (0 if there is none)."""
        return self._model_max_gpus.get(model, 0)

    def _unit_capacity(self, unit: Configuration, share_gpus: bool) -> np.ndarray:
        """[N] how many pods of shape ``unit`` each node could take now, ignoring slowdown
        bounds: exact without ``share_gpus`` (distinct GPUs), an upper bound with it."""
        N = len(self.nodes)
        big = np.iinfo(np.int64).max // 4
        cap = np.full(N, big, dtype=np.int64)
        if unit.cpu > 0:
            free = self._node_cpu - self._node_cpu_used + EPS
            cap = np.minimum(cap, np.floor(free / unit.cpu).astype(np.int64))
        if unit.mem_gib > 0:
            free = self._node_mem - self._node_mem_used + EPS
            cap = np.minimum(cap, np.floor(free / unit.mem_gib).astype(np.int64))
        if unit.num_gpus == 0:
            if unit.gpu_model is not None:
                cap[self._node_model != self._models.get(unit.gpu_model, -1)] = 0
            return np.maximum(cap, 0)
        e = self._eligible(unit)
        if isinstance(e, str):
            return np.zeros(N, dtype=np.int64)
        elig = e[0]
        p = self._mig_profile(unit)
        if not share_gpus or (p is None and unit.gpu_share >= _WHOLE):
            slots = elig.astype(np.int64)
        elif p is not None:
            slots = np.where(elig, (self._mig_cs - self._mig_comp) // p.compute_slices, 0)
        else:
            slots = np.floor((1.0 - self._used_share + EPS) / unit.gpu_share)
            if unit.gpu_mem_gib > 0:
                slots = np.minimum(slots, np.floor((self._gpu_cap_mem - self._used_mem + EPS) / unit.gpu_mem_gib))
            slots = np.where(elig, slots, 0).astype(np.int64)
        per_node = np.bincount(self._gpu_node, weights=slots, minlength=N).astype(np.int64)
        return np.maximum(np.minimum(cap, per_node // unit.num_gpus), 0)

    def _place_gang(self, job_id: str, config: Configuration, profile: JobProfile, bound: float,
                    model: SlowdownModel, scorer: str, gang: Gang) -> PlaceOutcome:
        """All or nothing, several pods (docs/placement.md, "Gangs and topology").

        Pods: ``gang.pods`` equal pods of the configuration, or -- ``span_nodes`` -- one unit
        per GPU (CPU and memory split per GPU), the units on one node merged into one part.
        Tiers, first success wins:

        1. one node: the whole job as one configuration on one node (the scorer chooses it),
           its GPUs then dealt to the pods in order; with ``share_gpus``, if that fails, the
           pods one by one on each node that could hold them all (fewest spare pods first);
        2. one topology domain (node label ``topology_key``), domains by spare capacity
           (least first), then name;
        3. anywhere.

        Within tiers 2 and 3 nodes are filled one at a time -- the smallest that takes all
        remaining pods, else the largest -- so the job lands on few nodes; the scorer picks
        GPUs inside a node and every pod is checked like a one-pod placement (slowdown bounds
        included, earlier pods of the job counting as residents).  A failed tier books
        nothing."""
        k, P = config.num_gpus, gang.pods
        if P > 1:
            n_units, per_node = P, False
            unit = replace(config, num_gpus=k // P, cpu=config.cpu / P, mem_gib=config.mem_gib / P)
        else:
            n_units, per_node = k, True
            unit = replace(config, num_gpus=1, cpu=config.cpu / k, mem_gib=config.mem_gib / k)
        share_gpus = gang.share_gpus and P > 1
        # tier 1: one node
        if config.num_gpus <= self._max_node_gpus(config.gpu_model):
            out = self._place_single(job_id, config, profile, bound, model, scorer)
            if out.placed:
                return out if P == 1 else self._split_pods(job_id, config, profile, bound, model,
                                                           out.assignment, P)
        cap = self._unit_capacity(unit, share_gpus)
        best_seen = 0
        if share_gpus:
            for n in sorted(np.flatnonzero(cap >= n_units).tolist(), key=lambda n: (int(cap[n]), n)):
                res = self._place_units(job_id, unit, n_units, profile, bound, model, scorer,
                                        np.array([n]), cap, share_gpus)
                if isinstance(res, list):
                    return self._merge(job_id, config, profile, bound, model, res, per_node)
                best_seen = max(best_seen, res)
        # tier 2: one topology domain
        dom = self._domain
        if (dom >= 0).any():
            total = np.bincount(dom[dom >= 0], weights=np.minimum(cap[dom >= 0], n_units),
                                minlength=len(self._domain_names))
            doms = [d for d in np.flatnonzero(total >= n_units).tolist()]
            doms.sort(key=lambda d: (total[d], self._domain_names[d]))
            for d in doms:
                res = self._place_units(job_id, unit, n_units, profile, bound, model, scorer,
                                        np.flatnonzero(dom == d), cap, share_gpus)
                if isinstance(res, list):
                    return self._merge(job_id, config, profile, bound, model, res, per_node)
                best_seen = max(best_seen, res)
        # tier 3: anywhere
        if int(np.minimum(cap, n_units).sum()) >= n_units:
            res = self._place_units(job_id, unit, n_units, profile, bound, model, scorer,
                                    np.arange(len(self.nodes)), cap, share_gpus)
            if isinstance(res, list):
                return self._merge(job_id, config, profile, bound, model, res, per_node)
            best_seen = max(best_seen, res)
        what = f"{n_units} pod(s) of {self._gpu_phrase(unit)}" if unit.num_gpus else f"{n_units} pod(s)"
        return PlaceOutcome(None, f"gang: no room for all {what} with cpu {unit.cpu:g} cores and "
                                  f"memory {unit.mem_gib:g} GiB each at once (room for "
                                  f"{int(np.minimum(cap, n_units).sum())} ignoring slowdown bounds, "
                                  f"at most {best_seen} booked in one try; nothing kept)")

    def _place_units(self, job_id, unit, n_units, profile, bound, model, scorer,
                     nodes: np.ndarray, cap: np.ndarray, share_gpus: bool):
        """Book ``n_units`` pods of ``unit`` under temporary ids on ``nodes``, node by node
        (:meth:`_place_gang`).  Returns the temporary assignments, still booked, or -- having
        released them all -- how many had fitted."""
        temps: list[Assignment] = []
        excl = None if share_gpus else np.zeros(self._gpu_node.size, dtype=bool)
        cands = [int(n) for n in nodes.tolist() if cap[n] > 0]
        mask = np.zeros(len(self.nodes), dtype=bool)
        try:
            while len(temps) < n_units and cands:
                r = n_units - len(temps)
                fit = [n for n in cands if cap[n] >= r]
                if fit:  # the smallest node that takes the rest, else the largest
                    n = min(fit, key=lambda n: (int(cap[n]), n))
                else:
                    n = max(cands, key=lambda n: (int(cap[n]), -n))
                cands.remove(n)
                mask[:] = False
                mask[n] = True
                while len(temps) < n_units:
                    out = self._place_single(f"{job_id}\x00pod{len(temps)}", unit, profile, bound,
                                             model, scorer, mask, excl)
                    if not out.placed:
                        break
                    temps.append(out.assignment)
                    if excl is not None:
                        excl[int(self._offset[n]) + np.array(out.assignment.gpu_indices, dtype=np.int64)] = True
        except BaseException:
            for a in temps:
                self.release(a.job_id)
            raise
        if len(temps) < n_units:
            for a in reversed(temps):
                self.release(a.job_id)
            return len(temps)
        return temps

    def _merge(self, job_id, config, profile, bound, model, temps: list[Assignment],
               per_node: bool) -> PlaceOutcome:
        """Replace the temporary pods by one booking of ``job_id`` (the same resources)."""
        parts = [a.parts[0] for a in temps]
        for a in reversed(temps):
            self.release(a.job_id)
        if per_node:
            by: dict[int, list[Part]] = {}
            for pt in parts:
                by.setdefault(pt.node_index, []).append(pt)
            merged = []
            for n, pts in by.items():
                pairs = sorted((g, s) for pt in pts for g, s in
                               zip(pt.gpu_indices, pt.mig_starts or (None,) * len(pt.gpu_indices)))
                merged.append(Part(pts[0].node, n, tuple(g for g, _ in pairs),
                                   math.fsum(pt.cpu for pt in pts), math.fsum(pt.mem_gib for pt in pts),
                                   tuple(s for _, s in pairs) if pts[0].mig_starts else ()))
            parts = merged
        a = self._book(job_id, config, profile, bound, tuple(parts))
        return PlaceOutcome(a, "", self._job_slowdown(job_id, model))

    def _split_pods(self, job_id, config, profile, bound, model, a: Assignment, pods: int) -> PlaceOutcome:
        """Re-book a one-node placement of the whole job as ``pods`` equal pods (GPUs dealt
        in index order)."""
        self.release(job_id)
        pt = a.parts[0]
        g = len(pt.gpu_indices) // pods
        parts = tuple(Part(pt.node, pt.node_index, pt.gpu_indices[i * g:(i + 1) * g],
                           pt.cpu / pods, pt.mem_gib / pods, pt.mig_starts[i * g:(i + 1) * g])
                      for i in range(pods))
        b = self._book(job_id, config, profile, bound, parts)
        return PlaceOutcome(b, "", self._job_slowdown(job_id, model))

    def _job_slowdown(self, job_id: str, model: SlowdownModel) -> float:
        """Predicted slowdown of one placed job (max over its GPUs; 1.0 alone or on MIG)."""
        a = self._jobs[job_id][0]
        out = 1.0
        for n, gi in set(a.gpus):
            f = int(self._offset[n]) + gi
            if self._n_res[f] >= 2 and not self._is_mig[f]:
                profiles, _ = self._gpu_profiles(f)
                sig = np.asarray(model.gpu_slowdowns(profiles), float)
                for j, s in zip(self._residents(f), sig.tolist()):
                    if j == job_id:
                        out = max(out, s)
        return out

    def _place_host_only(self, job_id, config, profile, bound, scorer, node_mask=None) -> PlaceOutcome:
        plan = self._candidates(config)
        if isinstance(plan, str):
            return PlaceOutcome(None, plan)
        nodes, _ = plan
        if node_mask is not None:
            nodes = nodes[node_mask[nodes]]
            if nodes.size == 0:
                return PlaceOutcome(None, "no candidate node")
        if scorer in ("bestfit", "elastico"):
            left = np.round(self._node_cpu[nodes] - self._node_cpu_used[nodes] - config.cpu, 9)
            n = int(nodes[np.lexsort((nodes, left))[0]])
        else:
            n = int(nodes[0])
        return PlaceOutcome(self._commit(job_id, config, profile, bound, n, []), "", 1.0)

    def _commit(self, job_id, config, profile, bound, n: int, chosen: list[int]) -> Assignment:
        """Book a one-node, one-pod placement: ``chosen`` flat GPUs of node ``n`` (MIG start
        slots chosen here, before anything changes)."""
        p = self._mig_profile(config)
        starts: list[int] = []
        if p is not None:  # compute every start before changing anything (all or nothing)
            for g in chosen:
                s = self._mig[g].best_start(p)
                assert s is not None, "eligible MIG GPU without a free start"
                starts.append(s)
        part = Part(self.nodes[n].name, n, tuple(int(self._gpu_local[g]) for g in chosen),
                    float(config.cpu), float(config.mem_gib), tuple(starts))
        return self._book(job_id, config, profile, bound, (part,))

    def _book(self, job_id, config, profile, bound, parts: tuple[Part, ...]) -> Assignment:
        """Book ``parts`` (MIG starts given, already checked free) for ``job_id``."""
        p = self._mig_profile(config)
        has_gpus = any(pt.gpu_indices for pt in parts)
        if p is not None:
            share = p.share
            mem = float(self.nodes[parts[0].node_index].gpu_mem_gib) * p.memory_fraction
        else:
            share, mem = float(config.gpu_share), float(config.gpu_mem_gib)
        a = Assignment(
            job_id=job_id,
            parts=tuple(parts),
            gpu_share=share if has_gpus else 0.0,
            gpu_mem_gib=mem if has_gpus else 0.0,
            mig_profile=config.mig_profile,
            config_name=config.name,
            gpu_model=config.gpu_model if has_gpus else None,
        )
        self._book_assignment(a, p)
        self._jobs[job_id] = (a, profile, bound)
        return a

    def _book_assignment(self, a: Assignment, p: MigProfile | None) -> None:
        job_id = a.job_id
        host: dict[int, tuple[float, float]] = {}
        for pt in a.parts:
            for i, gi in enumerate(pt.gpu_indices):
                g = int(self._offset[pt.node_index]) + gi
                if p is not None:
                    self._mig[g].place(p, pt.mig_starts[i])
                    self._mig_occ[g] = self._mig[g].occupied_mask
                    self._mig_comp[g] = self._mig[g].compute_used
                prev = self._gpu_jobs[g].get(job_id)
                self._gpu_jobs[g][job_id] = (a.gpu_share, a.gpu_mem_gib, 1 if prev is None else prev[2] + 1)
                self._refresh_gpu(g)
            if pt.node_index in host:
                c, m = host[pt.node_index]
                host[pt.node_index] = (c + pt.cpu, m + pt.mem_gib)
            else:
                host[pt.node_index] = (pt.cpu, pt.mem_gib)
        for n, cm in host.items():
            self._node_jobs[n][job_id] = cm
            self._refresh_node(n)

    def _refresh_gpu(self, g: int) -> None:
        vals = self._gpu_jobs[g].values()
        self._used_share[g] = math.fsum(v[0] * v[2] for v in vals)
        self._used_mem[g] = math.fsum(v[1] * v[2] for v in vals)
        self._n_res[g] = sum(v[2] for v in vals)
        if self._mps_user:  # (none in the simulator: every code stays -1)
            self._mps_code[g] = self._user_code(g)

    def _refresh_node(self, n: int) -> None:
        vals = self._node_jobs[n].values()
        self._node_cpu_used[n] = math.fsum(v[0] for v in vals)
        self._node_mem_used[n] = math.fsum(v[1] for v in vals)
        self._frag_touch(n)

    def _frag_summaries(self) -> NodeSummaries:
        """Every node's fragmentation summary for the typical pods (built once, then kept up
        to date by :meth:`_frag_touch` on every booking change of a node)."""
        if self._frag_cache is None:
            nodes = np.arange(len(self.nodes))
            rows, cpu = self._frag_rows(nodes)
            self._frag_cache = NodeSummaries(self._frag_model, rows, cpu, self._node_model,
                                             native=self._frag_native)
        return self._frag_cache

    def _frag_touch(self, n: int) -> None:
        fc = self._frag_cache
        if fc is not None:  # per-shape increases exist only beside the summaries
            self._node_version[n] += 1
            if fc.native:  # the same numbers as below (NodeSummaries.update_from_gpus)
                fc.update_from_gpus(n, self._offset_list[n], self._offset_list[n + 1], self._healthy,
                                    self._is_mig, self._mig_cs, self._mig_comp, self._used_share,
                                    float(self._node_cpu[n] - self._node_cpu_used[n]))
                return
            # the numbers _frag_rows gives, for one node's few GPUs in plain Python (numpy's
            # per-call cost dominates at this size; round() rounds half to even like np.round)
            lo, hi = int(self._offset[n]), int(self._offset[n + 1])
            row = [0] * fc.rows.shape[1]
            if n in self._mig_nodes:
                for j, (ok, mig, cs, comp, used) in enumerate(zip(
                        self._healthy[lo:hi].tolist(), self._is_mig[lo:hi].tolist(), self._mig_cs[lo:hi].tolist(),
                        self._mig_comp[lo:hi].tolist(), self._used_share[lo:hi].tolist())):
                    if ok:
                        row[j] = round(((cs - comp) / cs if mig else 1.0 - used) * MILLI)
            else:
                for j, (ok, used) in enumerate(zip(self._healthy[lo:hi].tolist(),
                                                   self._used_share[lo:hi].tolist())):
                    if ok:
                        row[j] = round((1.0 - used) * MILLI)
            fc.update(n, row, round(float(self._node_cpu[n] - self._node_cpu_used[n]) * 1000))

    def _cached_deltas(self, fc: NodeSummaries, nodes: np.ndarray, m: int, cpu_m: int
                       ) -> tuple[np.ndarray, np.ndarray]:
        """([G] fragmentation increase (GPUs, rounded to 1e-9) of taking ``m`` milli-GPU and
        ``cpu_m`` milli-CPU, by flat GPU; [G] the GPU's free milli-GPU after), valid for the
        GPUs of ``nodes``: kept per shape and recomputed only for nodes booked since
        (``_node_version``), so a round's placement costs O(GPUs of the touched nodes) of
        fragmentation work, not O(cluster).  Up to ``_PYTHON_STALE_NODES`` stale nodes go
        one by one through :meth:`NodeSummaries.node_increase` -- in the native kernel
        (``frag_native``, no per-node Python) or in plain Python with a memo -- more through
        the batched numpy ``gpu_increase``; the native and Python one-node paths give the same
        bits."""
        d_all, new_all, seen = self._delta_entry(m, cpu_m)
        if fc.native and fc.refresh(nodes, seen, self._node_version, self._offset, m, cpu_m, d_all, new_all,
                                    _PYTHON_STALE_NODES) <= _PYTHON_STALE_NODES:
            return d_all, new_all  # the plain-Python branch's numbers, worked out natively
        stale = nodes[seen[nodes] != self._node_version[nodes]]
        if stale.size > _PYTHON_STALE_NODES:
            slots = self._node_slots(fc.rows.shape[1])[stale]
            d_all[slots] = np.round(fc.gpu_increase(stale, m, cpu_m) / MILLI, 9)
            new_all[slots] = np.maximum(fc.rows[stale] - m, 0)
        elif stale.size:
            memo = self._delta_memo
            if len(memo) >= _DELTA_MEMO_SIZE:
                memo.clear()
            off = self._offset_list
            # gathered in lists and written once: per-node numpy slice writes cost more
            slots: list[int] = []
            d_vals: list[float] = []
            new_vals: list[int] = []
            for n in stale.tolist():
                state = fc.key(n)
                key = (state, m, cpu_m)
                hit = memo.get(key)
                if hit is None:  # the same numbers as the batched branch, one node
                    hit = memo[key] = ([_round9(d / MILLI) for d in fc.node_increase(n, m, cpu_m)],
                                       [o - m if o > m else 0 for o in state[0]])
                lo, hi = off[n], off[n + 1]
                slots.extend(range(lo, hi))
                d_vals.extend(hit[0][:hi - lo])
                new_vals.extend(hit[1][:hi - lo])
            d_all[slots] = d_vals
            new_all[slots] = new_vals
        if stale.size:
            seen[stale] = self._node_version[stale]
        return d_all, new_all

    def _delta_entry(self, m: int, cpu_m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-shape arrays of :meth:`_cached_deltas` (increase [G + 1], free milli-GPU
        after [G + 1], node versions seen [N]), made on first use."""
        key = (m, cpu_m)
        entry = self._delta_cache.get(key)
        if entry is None:
            if len(self._delta_cache) >= _DELTA_CACHE_SHAPES:
                self._delta_cache.clear()
            G = self._gpu_node.size
            # one spare slot: the padding GPUs of fc.rows' layout write there (_node_slots)
            entry = (np.zeros(G + 1), np.zeros(G + 1, dtype=np.int64), np.full(len(self.nodes), -1, dtype=np.int64))
            self._delta_cache[key] = entry
        return entry

    def _native_plan(self, idx: np.ndarray, m: int, cpu_m: int):
        """:meth:`_cached_deltas` for the nodes of the eligible GPUs ``idx`` and the candidate
        order over them in one native call (:meth:`NodeSummaries.plan`); when more nodes are
        stale than the one-node path takes, the batched numpy path first."""
        fc = self._frag_summaries()
        d_all, new_all, seen = self._delta_entry(m, cpu_m)
        args = (idx, self._gpu_node, seen, self._node_version, self._offset, m, cpu_m, d_all, new_all)
        plan = fc.plan(*args, _PYTHON_STALE_NODES, CONSOLIDATION_GPU)
        if plan is None:
            self._cached_deltas(fc, np.unique(self._gpu_node[idx]), m, cpu_m)
            plan = fc.plan(*args, _PYTHON_STALE_NODES, CONSOLIDATION_GPU)
        return plan

    def _node_slots(self, width: int) -> np.ndarray:
        """[N, width] flat GPU index of each node's GPU j (the layout of the fragmentation
        rows), G for padding."""
        slots = self._slots
        if slots is None or slots.shape[1] != width:
            j = np.arange(width)[None, :]
            ng = np.diff(self._offset)[:, None]
            slots = self._slots = np.where(j < ng, self._offset[:-1, None] + j, self._gpu_node.size)
        return slots

    def place_unless_dominated(self, job_id: str, config: Configuration, profile: JobProfile,
                               slowdown_bound: float,
                               failed: "FailedShapes",
                               slowdown_model: SlowdownModel | None = None,
                               scorer: str = "bestfit") -> PlaceOutcome:
        """:meth:`place`, except that a shape which :func:`dominates` one in ``failed`` is
        refused without a search, and a shape that finds no room (not a slowdown bound, which
        depends on the job) is appended to ``failed``.  Valid while the cluster only fills up
        -- within one round, before any release -- since a larger shape cannot fit where a
        smaller one did not."""
        f = failed.first_dominated(config)
        if f is not None:
            why = failed.reason(f)
            return PlaceOutcome(None, f"no room: a smaller or equal shape "
                                      f"({f.num_gpus} x {f.gpu_share:g} {f.gpu_model}) "
                                      f"already failed this round" + (f" ({why})" if why else ""))
        res = self.place(job_id, config, profile, slowdown_bound, slowdown_model, scorer=scorer)
        if not res.placed and not res.reason.startswith("slowdown bound") \
                and not self.mps_limited(job_id, config):
            failed.append(config, res.reason)
        return res

    def place_many(self, requests: Sequence[tuple[str, Configuration, JobProfile, float]],
                   scorer: str = "bestfit") -> list[PlaceOutcome]:
        """Place ``(job_id, config, profile, slowdown_bound)`` requests one after the other, as
        a round does, and return one outcome each (:meth:`place_unless_dominated`: a shape
        dominating one that already failed for lack of room is refused without a search).
        Bad input raises InvalidArgument at that request; the requests before it stay
        booked."""
        failed = FailedShapes()
        return [self.place_unless_dominated(job_id, config, profile, bound, failed,
                                            scorer=scorer)
                for job_id, config, profile, bound in requests]

    def release(self, job_id: str) -> Assignment:
        """Free everything ``job_id`` booked; returns its assignment.  NotFound if unknown."""
        a = self.assignment(job_id)
        for pt in a.parts:
            for i, gi in enumerate(pt.gpu_indices):
                g = self._flat(pt.node_index, gi)
                if a.mig_profile is not None:
                    self._mig[g].release(pt.mig_starts[i])
                    self._mig_occ[g] = self._mig[g].occupied_mask
                    self._mig_comp[g] = self._mig[g].compute_used
                v = self._gpu_jobs[g][job_id]
                if v[2] > 1:
                    self._gpu_jobs[g][job_id] = (v[0], v[1], v[2] - 1)
                else:
                    del self._gpu_jobs[g][job_id]
                self._refresh_gpu(g)
        for n in a.node_indices:
            del self._node_jobs[n][job_id]
            self._refresh_node(n)
        del self._jobs[job_id]
        return a

    def rebook(self, a: Assignment, profile: JobProfile, bound: float, *,
               unhealthy_ok: bool = False) -> Assignment:
        """Book ``a`` again exactly as it was (same nodes, GPUs, shares, MIG starts): undoes a
        :meth:`release` when a planned move is abandoned.  All or nothing: raises Infeasible,
        changing nothing, if any of those resources has been taken meanwhile.
        ``unhealthy_ok``: ``a``'s GPUs may be unhealthy -- the booking of a pod that already
        runs there (the Kubernetes loop rebuilds its book from bound pods every round); the
        GPUs stay unhealthy, so nothing new is booked on them."""
        if a.job_id in self._jobs:
            raise Infeasible(f"job {a.job_id!r} is already booked")
        cpu: dict[int, list[float]] = {}
        hmem: dict[int, list[float]] = {}
        per_gpu: dict[int, int] = {}
        for pt in a.parts:
            cpu.setdefault(pt.node_index, []).append(pt.cpu)
            hmem.setdefault(pt.node_index, []).append(pt.mem_gib)
            for gi in pt.gpu_indices:
                g = self._flat(pt.node_index, gi)
                per_gpu[g] = per_gpu.get(g, 0) + 1
        for n in cpu:
            if self._node_cpu_used[n] + math.fsum(cpu[n]) > self._node_cpu[n] + EPS or \
                    self._node_mem_used[n] + math.fsum(hmem[n]) > self._node_mem[n] + EPS:
                raise Infeasible(f"job {a.job_id!r}: node {self.nodes[n].name} no longer has its CPU/memory free")
        where = {}
        for g in per_gpu:
            where[g] = f"GPU {self._gpu_local[g]} of {self.nodes[int(self._gpu_node[g])].name}"
            if not self._healthy[g] and not unhealthy_ok:
                raise Infeasible(f"job {a.job_id!r}: {where[g]} is unhealthy")
        prof = None
        if a.mig_profile is not None:
            prof = mig_profile(self.gpu_model_of(a), a.mig_profile)
            trial = {g: self._mig[g].copy() for g in per_gpu}
            for pt in a.parts:
                for gi, st in zip(pt.gpu_indices, pt.mig_starts):
                    g = int(self._offset[pt.node_index]) + gi
                    if st not in trial[g].free_starts(prof):
                        raise Infeasible(f"job {a.job_id!r}: MIG slot {st} taken on {where[g]}")
                    trial[g].place(prof, st)
        else:
            for g, c in per_gpu.items():
                if self._used_share[g] + c * a.gpu_share > 1.0 + EPS:
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} no longer has its share free")
                if self._used_mem[g] + c * a.gpu_mem_gib > self._gpu_cap_mem[g] + EPS:
                    free = self._gpu_cap_mem[g] - self._used_mem[g]
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} has {free:g} GiB of GPU "
                                     f"memory free, the booking needs {c * a.gpu_mem_gib:g}")
                if a.gpu_share >= _WHOLE and self._n_res[g] > 0:
                    raise Infeasible(f"job {a.job_id!r}: {where[g]} is no longer free for a whole GPU")
        self._book_assignment(a, prof)
        self._jobs[a.job_id] = (a, profile, bound)
        return a

    def gpu_model_of(self, a: Assignment) -> str:
        """The GPU model of ``a``'s nodes."""
        return self.nodes[a.parts[0].node_index].gpu_model

    # ----------------------------------------------------------------------------- checks
    def check_invariants(self, slowdown_model: SlowdownModel | None = None) -> None:
        """Recompute every booking from the assignments; AssertionError on any over-commit,
        invalid MIG geometry, a pod with a repeated GPU, per-GPU copies that do not match the
        parts, mismatch with the cached arrays (fragmentation cache included), or slowdown
        past a bound."""
        G = self._gpu_node.size
        share = [[] for _ in range(G)]
        mem = [[] for _ in range(G)]
        cpu = [[] for _ in self.nodes]
        hmem = [[] for _ in self.nodes]
        mig_occ = [0] * G
        mig_comp = [0] * G
        for j, (a, _, _) in self._jobs.items():
            copies: dict[int, int] = {}
            assert a.parts, f"{j}: no part"
            for pt in a.parts:
                node = self.nodes[pt.node_index]
                assert node.name == pt.node, f"{j}: node name mismatch"
                assert len(set(pt.gpu_indices)) == len(pt.gpu_indices), f"{j}: repeated GPU in one pod"
                if pt.gpu_indices:
                    assert a.gpu_model == node.gpu_model, f"{j}: model {a.gpu_model} on {node.gpu_model}"
                cpu[pt.node_index].append(pt.cpu)
                hmem[pt.node_index].append(pt.mem_gib)
                for i, gi in enumerate(pt.gpu_indices):
                    g = self._flat(pt.node_index, gi)
                    copies[g] = copies.get(g, 0) + 1
                    share[g].append(a.gpu_share)
                    mem[g].append(a.gpu_mem_gib)
                    if a.mig_profile is None:
                        assert not self._is_mig[g], f"{j}: MPS job on MIG GPU {pt.node_index}/{gi}"
                        if a.gpu_share >= _WHOLE:
                            assert self._n_res[g] == 1, f"{j}: whole GPU shared"
                    else:
                        assert self._is_mig[g], f"{j}: MIG job on non-MIG GPU {pt.node_index}/{gi}"
                        p = MIG_PROFILES[node.gpu_model][a.mig_profile]
                        s = pt.mig_starts[i]
                        assert s in p.starts, f"{j}: invalid start {s} for {p.name}"
                        assert not mig_occ[g] & p.mask(s), f"{j}: MIG slices overlap on {pt.node_index}/{gi}"
                        mig_occ[g] |= p.mask(s)
                        mig_comp[g] += p.compute_slices
            for g, c in copies.items():
                assert self._gpu_jobs[g].get(j, (0, 0, 0))[2] == c, f"{j}: copies on GPU {g} differ"
        for g in range(G):
            assert math.fsum(share[g]) <= 1.0 + EPS, f"GPU {g}: compute {math.fsum(share[g])} > 1"
            assert math.fsum(mem[g]) <= self._gpu_cap_mem[g] + EPS, f"GPU {g}: memory over capacity"
            assert mig_comp[g] <= self._mig_cs[g], f"GPU {g}: MIG compute slices {mig_comp[g]} > {self._mig_cs[g]}"
            assert mig_occ[g] == int(self._mig_occ[g]), f"GPU {g}: cached MIG mask differs"
            if g in self._mig:
                assert self._mig[g].occupied_mask == mig_occ[g], f"GPU {g}: MIG state differs"
            assert abs(math.fsum(share[g]) - self._used_share[g]) <= EPS, f"GPU {g}: cached share differs"
            assert len(share[g]) == self._n_res[g] == sum(v[2] for v in self._gpu_jobs[g].values()), \
                f"GPU {g}: resident count differs"
        for n, nd in enumerate(self.nodes):
            assert math.fsum(cpu[n]) <= nd.cpu + EPS, f"node {nd.name}: cpu over-committed"
            assert math.fsum(hmem[n]) <= nd.mem_gib + EPS, f"node {nd.name}: memory over-committed"
            assert abs(math.fsum(cpu[n]) - self._node_cpu_used[n]) <= 1e-6, f"node {nd.name}: cached cpu differs"
        fc = self._frag_cache
        if fc is not None:
            rows, cpu_m = self._frag_rows(np.arange(len(self.nodes)), width=fc.rows.shape[1])
            assert np.array_equal(rows, fc.rows) and np.array_equal(cpu_m, fc.cpu), "fragmentation cache differs"
        for j, s in self.predicted_slowdowns(slowdown_model).items():
            assert s <= self._jobs[j][2] + EPS, f"{j}: slowdown {s} > bound {self._jobs[j][2]}"

def dominates(c: Configuration, f: Configuration) -> bool:
    """``c`` needs at least what ``f`` needs on the same GPU model and MIG profile (GPUs, share,
    GPU memory, CPU, host memory), so if ``f`` did not fit, ``c`` will not either -- up to
    slowdown bounds, which depend on the job's profile."""
    return (c.gpu_model == f.gpu_model and c.mig_profile == f.mig_profile
            and c.num_gpus >= f.num_gpus and c.gpu_share >= f.gpu_share
            and c.gpu_mem_gib >= f.gpu_mem_gib and c.cpu >= f.cpu and c.mem_gib >= f.mem_gib)


class FailedShapes:
    """The shapes that failed for lack of room in one round, in the order they failed (what
    :meth:`ClusterState.place_unless_dominated` and the policies append to and iterate).

    A round's list grows to hundreds of shapes and every candidate is checked against it, so
    besides the list it keeps, per (GPU model, MIG profile), the minimal shapes: ``c``
    dominates some failed shape iff it dominates a minimal one (:func:`dominates` is a
    partial order), so :meth:`dominated` looks at a handful instead of all -- same answers
    as scanning the list."""

    def __init__(self, shapes: Iterable[Configuration] = ()):
        self._all: list[Configuration] = []
        # per (GPU model, MIG profile): every shape, and the minimal ones
        self._by_key: dict[tuple[str | None, str | None], list[Configuration]] = {}
        self._minimal: dict[tuple[str | None, str | None], list[Configuration]] = {}
        self._reasons: dict[Configuration, str] = {}  # why a shape failed, when told
        for c in shapes:
            self.append(c)

    def append(self, c: Configuration, reason: str = "") -> None:
        """Record that ``c`` found no room; ``reason``: the placement's words for why."""
        if reason:
            self._reasons.setdefault(c, reason)
        self._all.append(c)
        key = (c.gpu_model, c.mig_profile)
        self._by_key.setdefault(key, []).append(c)
        mins = self._minimal.setdefault(key, [])
        if any(dominates(c, m) for m in mins):
            return
        mins[:] = [m for m in mins if not dominates(m, c)]
        mins.append(c)

    def dominated(self, c: Configuration) -> bool:
        """``any(dominates(c, f) for f in self)``."""
        mins = self._minimal.get((c.gpu_model, c.mig_profile))
        if mins:
            # dominates(c, m) inlined: GPU model and MIG profile are equal within a key
            n, share, gmem, cpu, mem = c.num_gpus, c.gpu_share, c.gpu_mem_gib, c.cpu, c.mem_gib
            for m in mins:
                if (n >= m.num_gpus and share >= m.gpu_share and gmem >= m.gpu_mem_gib
                        and cpu >= m.cpu and mem >= m.mem_gib):
                    return True
        return False

    def reason(self, c: Configuration) -> str:
        """Why the failed shape ``c`` found no room ("" when not told)."""
        return self._reasons.get(c, "")

    def first_dominated(self, c: Configuration) -> Configuration | None:
        """The first failed shape (in failing order) that ``c`` dominates, or None."""
        if not self.dominated(c):
            return None
        # only shapes of the same GPU model and MIG profile can be dominated
        return next(f for f in self._by_key[(c.gpu_model, c.mig_profile)] if dominates(c, f))

    def __iter__(self) -> Iterator[Configuration]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)
