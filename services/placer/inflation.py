"""FGD's workload-inflation benchmark inside ElastiCo (issue 5, item 6; docs/placement.md).

Who calls it: ``elastico simulate --mode inflation`` (:mod:`elastico.cli.simulate`) and
``bench/fgd.py``.  Whom it calls: :mod:`elastico.placer.fragmentation` and numpy.  No clock,
no I/O: pods and nodes come in as plain arrays, randomness from the ``seed`` argument.

The method (FGD simulator, hkust-adsl/kubernetes-scheduler-simulator, read at commit
8f3d641; file names below are in that repository):

1. **Workload** (``pkg/simulator/core.go`` ``Simulate``, ``simulator.go``
   ``SortClusterPods``, ``TunePodsByNodeTotalResource``): the pod list sorted by name,
   shuffled with the seed; then, while the total GPU request is below ``ratio`` (1.3) x the
   cluster's GPUs, a uniformly drawn copy of an original pod is appended (the loop stops at
   the first copy whose *per-GPU* milli would pass the target -- FGD's test, kept); a workload
   already above the target loses uniformly drawn pods until it is not.
2. **Placement**, one pod at a time, none leaves (``SchedulePods``).  Filter (Open-Gpu-Share
   ``open_gpu_share.go`` + kube-scheduler's default ``NodeResourcesFit``): the node has the
   pod's CPU and memory free, a GPU pod's model (``gpu_spec``, any of ``a|b``) matches, and a
   sharing pod (1 GPU, < 1000 milli) finds one GPU with that many milli free, an n-GPU pod n
   fully free GPUs.  Score: the policy's integer node score (kube-scheduler's ``int64``
   truncation kept); the node with the highest score wins.  **Ties** go to the first node in
   a fixed, seeded order of the nodes (FGD renames every node ``%04d-<name>`` with a seeded
   permutation, ``simulator.go`` ``syncClusterResourceList``).  kube-scheduler's
   ``selectHost`` reads as a uniform choice among ties, but that does not reproduce FGD's
   cached results (measured on default, seeds 42-44: uniform ties give Packing 11.4 % and FGD
   9.8 % unallocated at 100 % arrived against the published 8.22 and 4.77; a fixed order gives
   8.5 and 4.8); docs/placement.md has the numbers.  GPU: the policy's ``gpuSelMethod``
   (below); whole GPUs are always the lowest-indexed free ones (``AllocateExclusiveGpuId``).
   A pod that fits nowhere fails and is dropped.
3. **Measure** (``analysis.go`` ``ClusterGpuFragReport``; ``experiments/analysis/
   merge_alloc_discrete_0920.py``): after every pod, arrived GPU milli (every pod's request,
   placed or not) and allocated GPU milli.  Column k of the result is the mean of
   ``round(100 x allocated / capacity, 2)`` over the pods with
   ``round(100 x arrived / capacity) == k`` (if none, those within k +- 1).  Unallocated GPU
   % = 100 - that.

Policies (``POLICIES``):

* ``random`` (``random_score.go``): a uniformly random feasible node; a sharing pod's GPU
  uniformly among those that fit (``gpuSelMethod: random``).
* ``bestfit`` (``best_fit_score.go``): ``int((1 - 0.5 (cpu_free - cpu)/128000 - 0.5
  (gpu_free - gpu)/8000) x 100)``, GPU by best fit (least milli free that fits, lowest index).
* ``packing`` (``gpu_packing_score.go``): sharing a used GPU ``max(100 - (free% of the GPU)/10,
  50)``, else fully free GPUs of a used node ``max(50 - k, 33)``, else an empty node
  ``max(33 - gpus, gpus)``; CPU-only pods score 0 everywhere; GPU by best fit.
* ``fgd`` (``fgd_score.go``): ``int(sigmoid((F_before - F_after) / 1000) x 100)`` with F
  FGD's fragmentation (:mod:`elastico.placer.fragmentation`) for the typical pods of the
  original workload (threshold 0.95); a sharing pod's GPU is the first GPU with the highest
  such integer score.
* ``elastico``: ElastiCo's placer score (:func:`elastico.placer.placement.elastico_cost`):
  the exact increase of the same fragmentation in GPUs, plus :data:`CONSOLIDATION_GPU` per
  position of the node in the cluster's node order (fill nodes in one order, first-fit
  pressure), plus the interference term (zero here: trace pods carry no job type, so this
  mode compares placement alone); the smallest cost wins (no integer truncation; exact ties:
  lowest node index).  GPU: least fragmentation, then best fit, then lowest index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from elastico.errors import InvalidArgument

from .fragmentation import MILLI, FragmentationModel, typical_pods

__all__ = ["POLICIES", "InflationPods", "InflationNodes", "inflate", "run_inflation",
           "allocation_columns", "InflationResult"]

POLICIES = ("random", "bestfit", "packing", "fgd", "elastico")
MAX_SPEC_CPU = 128000  # FGD open-gpu-share/utils/const.go MaxSpecCpu (milli-CPU)
MAX_SPEC_GPU = 8000    # ... MaxSpecGpu (milli-GPU)
#: elastico's consolidation term: GPU-equivalents of cost per position in the node order
#: (:func:`elastico.placer.placement.elastico_cost`)
CONSOLIDATION_GPU = 0.003


@dataclass(frozen=True)
class InflationPods:
    """A workload as arrays of length P (trace order): ``name`` (str), ``cpu_milli``,
    ``mem_mib``, ``num_gpus``, ``gpu_milli`` (per GPU; 0 for CPU-only pods), ``gpu_types``
    (allowed models, empty = any)."""

    name: tuple[str, ...]
    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    num_gpus: np.ndarray
    gpu_milli: np.ndarray
    gpu_types: tuple[frozenset[str], ...]

    @classmethod
    def from_trace(cls, pods) -> "InflationPods":
        """From :class:`elastico.trace.TracePod` objects (cores -> milli, GiB -> MiB)."""
        if not pods:
            raise InvalidArgument("pods", 0, "at least one pod")
        return cls(
            name=tuple(p.name for p in pods),
            cpu_milli=np.array([round(p.cpu * 1000) for p in pods], dtype=np.int64),
            mem_mib=np.array([round(p.mem_gib * 1024) for p in pods], dtype=np.int64),
            num_gpus=np.array([p.num_gpus for p in pods], dtype=np.int64),
            gpu_milli=np.array([0 if p.num_gpus == 0 else round(p.gpu_share * MILLI) for p in pods],
                               dtype=np.int64),
            gpu_types=tuple(frozenset(p.gpu_models) for p in pods),
        )

    @property
    def total_milli(self) -> np.ndarray:
        return self.num_gpus * self.gpu_milli


@dataclass(frozen=True)
class InflationNodes:
    """A cluster as arrays of length N: ``cpu_milli``, ``mem_mib``, ``num_gpus``, ``model``
    (index into ``models``)."""

    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    num_gpus: np.ndarray
    model: np.ndarray
    models: tuple[str, ...]

    @classmethod
    def from_nodes(cls, nodes) -> "InflationNodes":
        """From :class:`elastico.model.Node` objects (GPU nodes only are meaningful here)."""
        models: dict[str, int] = {}
        for n in nodes:
            models.setdefault(n.gpu_model, len(models))
        return cls(
            cpu_milli=np.array([round(n.cpu * 1000) for n in nodes], dtype=np.int64),
            mem_mib=np.array([round(n.mem_gib * 1024) for n in nodes], dtype=np.int64),
            num_gpus=np.array([n.num_gpus for n in nodes], dtype=np.int64),
            model=np.array([models[n.gpu_model] for n in nodes], dtype=np.int64),
            models=tuple(models),
        )

    @property
    def capacity_milli(self) -> int:
        return int(self.num_gpus.sum()) * MILLI


def inflate(pods: InflationPods, capacity_milli: int, seed: int, ratio: float = 1.3) -> np.ndarray:
    """Indices into ``pods`` in arrival order (module docstring, step 1).

    Sort by name, shuffle with ``numpy.random.default_rng(seed)``, then append uniformly drawn
    copies while ``total + gpu_milli(copy) <= ratio x capacity`` (FGD compares the copy's
    per-GPU milli), or drop uniformly drawn pods while the total exceeds the target.
    ``capacity_milli`` > 0, ``ratio`` > 0.
    """
    if capacity_milli <= 0:
        raise InvalidArgument("capacity_milli", capacity_milli, "> 0")
    if not (math.isfinite(ratio) and ratio > 0):
        raise InvalidArgument("ratio", ratio, "a finite number > 0")
    rng = np.random.default_rng(seed)
    by_name = np.array(sorted(range(len(pods.name)), key=pods.name.__getitem__), dtype=np.int64)
    order = list(by_name[rng.permutation(by_name.size)])
    tot_per_pod = pods.total_milli
    total = int(tot_per_pod.sum())
    target = ratio * capacity_milli
    if total > target:
        while total > target:
            i = int(rng.integers(len(order)))
            total -= int(tot_per_pod[order.pop(i)])
    elif total < target:
        while True:
            j = int(by_name[rng.integers(by_name.size)])
            if total + int(pods.gpu_milli[j]) > target:
                break
            total += int(tot_per_pod[j])
            order.append(j)
    return np.array(order, dtype=np.int64)


@dataclass
class InflationResult:
    """Per arriving pod (arrival order): ``arrived_milli`` (cumulative request),
    ``used_milli`` (allocated after it), ``placed`` (bool)."""

    arrived_milli: np.ndarray
    used_milli: np.ndarray
    placed: np.ndarray
    capacity_milli: int

    def columns(self, cols: Sequence[int] = (100, 130)) -> dict[int, float]:
        """Allocation % per arrived-% column (module docstring, step 3)."""
        return allocation_columns(self.arrived_milli, self.used_milli, self.capacity_milli, cols)


def allocation_columns(arrived_milli, used_milli, capacity_milli: int,
                       cols: Sequence[int] = (100, 130)) -> dict[int, float]:
    """FGD's binning (``merge_alloc_discrete_0920.py``): for each column k the mean of
    ``round(alloc %, 2)`` over events whose ``round(arrived %)`` is k, else over k +- 1;
    NaN if still empty.  Python's round (half to even), as pandas' ``apply(round)``."""
    gpus = capacity_milli / MILLI
    arr = np.asarray(arrived_milli, dtype=float) / gpus / 10
    arr = np.round(arr)  # numpy rounds half to even, like Python's round
    alloc = np.round(np.asarray(used_milli, dtype=float) / gpus / 10, 2)
    out: dict[int, float] = {}
    for k in cols:
        sel = arr == k
        if not sel.any():
            sel = (arr >= k - 1) & (arr <= k + 1)
        out[int(k)] = round(float(alloc[sel].mean()), 2) if sel.any() else float("nan")
    return out


class _Cluster:
    """Mutable per-node / per-GPU book of one run (milli units, int64)."""

    def __init__(self, nodes: InflationNodes, frag: FragmentationModel | None):
        N = nodes.num_gpus.size
        G = max(1, int(nodes.num_gpus.max()))
        self.N, self.G = N, G
        self.ngpu = nodes.num_gpus.copy()
        self.model = nodes.model
        self.cpu = nodes.cpu_milli.copy()
        self.mem = nodes.mem_mib.copy()
        exists = np.arange(G)[None, :] < self.ngpu[:, None]
        self.left = np.where(exists, MILLI, 0).astype(np.int64)      # [N, G]
        self.L = self.left.sum(axis=1)
        self.nfree = exists.sum(axis=1).astype(np.int64)
        self.maxleft = self.left.max(axis=1)
        self.frag_model = frag
        if frag is not None:
            self.cnt, self.S = frag.counts(self.left)
            self.F = frag.from_counts(self.cpu, self.L, self.cnt, self.S, self.model)

    def commit(self, n: int, gpus: Sequence[int], milli: int, cpu: int, mem: int) -> None:
        self.cpu[n] -= cpu
        self.mem[n] -= mem
        for g in gpus:
            self.left[n, g] -= milli
        row = self.left[n]
        self.L[n] = row.sum()
        self.nfree[n] = int((row[: self.ngpu[n]] == MILLI).sum())
        self.maxleft[n] = row.max()
        fm = self.frag_model
        if fm is not None:
            c, s = fm.counts(row[None, :])
            self.cnt[n], self.S[n] = c[0], s[0]
            self.F[n] = fm.from_counts(self.cpu[n:n + 1], self.L[n:n + 1], c, s, self.model[n:n + 1])[0]


_LOWER = np.tril(np.ones((64, 64), dtype=bool), k=-1)[:, :]  # [i, j]: j < i


def _best_fit_gpu(row: np.ndarray, milli: int) -> int:
    """Open-Gpu-Share ``allocateGpuIdBasedOnBestFit``: least free milli that fits, first index."""
    fit = np.where(row >= milli, row, np.iinfo(np.int64).max)
    return int(np.argmin(fit))


def _argmax_first(score: np.ndarray, rank: np.ndarray) -> int:
    """Position of the max of ``score``; among ties the one with the smallest ``rank``."""
    best = np.flatnonzero(score == score.max())
    return int(best[0]) if best.size == 1 else int(best[np.argmin(rank[best])])


def run_inflation(nodes: InflationNodes, pods: InflationPods, order: np.ndarray, policy: str,
                  seed: int, typical_threshold: float = 0.95,
                  progress: Callable[[int], None] | None = None) -> InflationResult:
    """Place ``pods`` in ``order`` one at a time with ``policy`` (module docstring).

    ``seed`` drives tie-breaking (and Random's choices); the typical pods for ``fgd`` and
    ``elastico`` come from ALL of ``pods`` (the original workload, FGD ``SetTypicalPods``).
    Returns per-pod arrived/allocated milli-GPU.  Raises InvalidArgument for an unknown policy.
    """
    if policy not in POLICIES:
        raise InvalidArgument("policy", policy, f"one of {list(POLICIES)}")
    rng = np.random.default_rng([seed, POLICIES.index(policy)])
    fm = None
    if policy in ("fgd", "elastico"):
        tp = typical_pods(pods.cpu_milli, pods.gpu_milli, pods.num_gpus, pods.gpu_types,
                          threshold=typical_threshold)
        fm = FragmentationModel(tp, nodes.models)
    cl = _Cluster(nodes, fm)
    # FGD's node order: nodes renamed "%04d-<name>" with a seeded permutation (simulator.go
    # syncClusterResourceList); ties go to the first node in that order (docs/placement.md)
    rank = np.random.default_rng([seed, 7]).permutation(cl.N)
    type_ok: dict[frozenset, np.ndarray] = {frozenset(): np.ones(cl.N, dtype=bool)}
    P = order.size
    arrived = np.zeros(P, dtype=np.int64)
    used = np.zeros(P, dtype=np.int64)
    placed = np.zeros(P, dtype=bool)
    acc_arr = acc_used = 0
    for step, j in enumerate(order.tolist()):
        c, mem = int(pods.cpu_milli[j]), int(pods.mem_mib[j])
        k, m = int(pods.num_gpus[j]), int(pods.gpu_milli[j])
        acc_arr += k * m
        feas = (cl.cpu >= c) & (cl.mem >= mem)
        share = k == 1 and m < MILLI
        if k > 0:
            t = pods.gpu_types[j]
            ok = type_ok.get(t)
            if ok is None:
                ok = np.array([nodes.models[x] in t for x in cl.model], dtype=bool)
                type_ok[t] = ok
            feas &= ok
            feas &= (cl.maxleft >= m) if share else (cl.nfree >= k)
        cand = np.flatnonzero(feas)
        if cand.size:
            n, gpus = _choose(policy, cl, cand, c, k, m, share, rng, rank)
            cl.commit(n, gpus, m, c, mem)
            acc_used += k * m
            placed[step] = True
        arrived[step] = acc_arr
        used[step] = acc_used
        if progress is not None and step % 1000 == 999:
            progress(1000)
    return InflationResult(arrived, used, placed, nodes.capacity_milli)


def _whole_gpus(cl: _Cluster, n: int, k: int) -> list[int]:
    """``AllocateExclusiveGpuId``: the k lowest-indexed fully free GPUs."""
    return np.flatnonzero(cl.left[n, : cl.ngpu[n]] == MILLI)[:k].tolist()


def _choose(policy, cl: _Cluster, cand, c, k, m, share, rng, rank):
    if policy == "random":
        n = int(cand[rng.integers(cand.size)])
        if share:
            fit = np.flatnonzero(cl.left[n] >= m)
            return n, [int(fit[rng.integers(fit.size)])]
        return n, _whole_gpus(cl, n, k)
    if policy == "bestfit":
        s = (cl.cpu[cand] - c) / MAX_SPEC_CPU * 0.5
        s = s + (cl.L[cand] - k * m) / MAX_SPEC_GPU * 0.5
        score = np.trunc((1.0 - s) * 100.0)
        n = int(cand[_argmax_first(score, rank[cand])])
        return n, ([_best_fit_gpu(cl.left[n], m)] if share else _whole_gpus(cl, n, k))
    if policy == "packing":
        if k == 0:
            n = int(cand[_argmax_first(np.zeros(cand.size), rank[cand])])
            return n, []
        nf, ng = cl.nfree[cand], cl.ngpu[cand]
        empty = nf == ng
        case3 = np.maximum(33 - nf, nf)
        if share:
            rows = cl.left[cand]
            tight = np.where(rows >= m, rows, np.iinfo(np.int64).max).min(axis=1)
            case1 = np.maximum(100 - (tight * 100 // MILLI) // 10, 50)
            other = np.where(tight == MILLI, max(50 - 1, 33), case1)
        else:
            other = np.full(cand.size, max(50 - k, 33))
        score = np.where(empty, case3, other)
        n = int(cand[_argmax_first(score, rank[cand])])
        return n, ([_best_fit_gpu(cl.left[n], m)] if share else _whole_gpus(cl, n, k))
    # fgd / elastico: fragmentation after the placement
    fm = cl.frag_model
    if share:
        rows = cl.left[cand]
        # one candidate per distinct free value on a node (equal values give equal states;
        # the first such GPU is the one FGD would pick among equals)
        G = rows.shape[1]
        dup = ((rows[:, :, None] == rows[:, None, :]) & _LOWER[:G, :G]).any(axis=2)
        ii, gg = np.nonzero((rows >= m) & ~dup)  # row-major: node order, then GPU index
        nodes_ = cand[ii]
        old = rows[ii, gg]
        cnt, S = fm.shift(cl.cnt[nodes_], cl.S[nodes_], old, old - m)
        after = fm.from_counts(cl.cpu[nodes_] - c, cl.L[nodes_] - m, cnt, S, cl.model[nodes_])
        delta = cl.F[nodes_] - after             # > 0: fragmentation reduced
        if policy == "fgd":
            gs = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
            # per node: max integer score, first GPU reaching it
            key = gs * 16 - gg                   # larger score first, then lower GPU index
            best = _segment_argmax(ii, key, cand.size)
            score = gs[best]
            pick = _argmax_first(score, rank[cand])
            return int(cand[pick]), [int(gg[best[pick]])]
        # elastico: exact fragmentation increase (GPUs) + consolidation; GPU: least cost,
        # then best fit, then lowest index
        cost = np.round(-delta / 1000.0, 9)
        best = _segment_first(ii, cand.size, gg, old - m, cost)
        pick = int(np.argmin(cost[best] + CONSOLIDATION_GPU * cand))
        return int(cand[pick]), [int(gg[best[pick]])]
    take = k * MILLI if k else 0
    cnt, S = cl.cnt[cand], cl.S[cand]
    if k:
        cnt, S = cnt - k, S - take
    after = fm.from_counts(cl.cpu[cand] - c, cl.L[cand] - take, cnt, S, cl.model[cand])
    delta = cl.F[cand] - after
    if policy == "fgd":
        score = np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))
        n = int(cand[_argmax_first(score, rank[cand])])
        return n, _whole_gpus(cl, n, k)
    pick = int(np.argmin(np.round(-delta / 1000.0, 9) + CONSOLIDATION_GPU * cand))
    n = int(cand[pick])
    return n, _whole_gpus(cl, n, k)


def _segment_first(seg: np.ndarray, nseg: int, *keys: np.ndarray) -> np.ndarray:
    """For sorted segment ids ``seg`` [B] (every id 0..nseg-1 present), the position of the
    smallest entry of each segment by ``keys`` (last key primary, as ``np.lexsort``)."""
    order = np.lexsort(keys + (seg,))
    starts = np.searchsorted(seg[order], np.arange(nseg))
    return order[starts]


def _segment_argmax(seg: np.ndarray, key: np.ndarray, nseg: int) -> np.ndarray:
    """For sorted segment ids ``seg`` [B] (every id 0..nseg-1 present), the position of the
    max ``key`` in each segment (first on ties)."""
    order = np.lexsort((-key, seg))              # per segment: largest key first
    starts = np.searchsorted(seg[order], np.arange(nseg))
    return order[starts]

