"""FGD's GPU fragmentation measure (Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023), as pure numpy.

Who calls it: :class:`elastico.placer.placement.ClusterState` (scorer ``elastico``) and the
inflation benchmark (:mod:`elastico.placer.inflation`, policies ``fgd`` and ``elastico``).  It
calls nothing but numpy: no clock, no I/O, no global state.

Units: GPU capacity in milli-GPU (1000 = one whole GPU), CPU in milli-cores; integers.

Definitions (FGD simulator, hkust-adsl/kubernetes-scheduler-simulator,
``pkg/utils/frag.go``: ``GetTypicalPods``, ``GetNodePodFrag``, ``NodeGpuShareFragAmount``):

* **Typical pods** (:func:`typical_pods`): the workload's pod shapes
  ``(cpu_milli, gpu_milli per GPU, GPU count, allowed GPU models)`` (memory is not part of the
  shape), counted, sorted by decreasing count, and kept from the most popular down until they
  cover ``threshold`` (0.95 in FGD's experiments, ``podPopularityThreshold: 95``) of all pods;
  their counts renormalised to frequencies ``p_t`` summing to 1.  CPU-only pods are included
  (``isInvolvedCpuPods: true``).
* **Fragmentation of a node for one typical pod t** (milli-GPU), with ``left_i`` the free
  milli-GPU of GPU i, ``L = sum_i left_i`` and ``cpu`` the free milli-CPU:

  - t is CPU-only, or t may not run on the node's GPU model, or the node cannot host t
    (fewer than ``n_t`` GPUs with ``left_i >= m_t``, or ``cpu < c_t``): ``F_t = L`` (all of
    its free GPU is useless to t);
  - otherwise ``F_t = sum_{i: left_i < m_t} left_i`` (the GPUs too full for t).

* **Fragmentation of a node**: ``F = sum_t p_t F_t = L - sum_t p_t [t fits] S_t`` with
  ``S_t = sum_{i: left_i >= m_t} left_i``.  The second form is what is computed here: it needs
  only, per distinct GPU threshold ``m``, the count and the sum of the GPUs with
  ``left_i >= m``, which change in O(1) when one GPU changes (the benchmark's hot path).

FGD schedules a pod on the node (and, for a sharing pod, the GPU) whose fragmentation grows
least: ``Delta = F(before) - F(after)`` (``pkg/simulator/plugin/fgd_score.go``).

:class:`NodeSummaries` has two implementations of its one-node paths (:meth:`~NodeSummaries.update`,
:meth:`~NodeSummaries.node_increase`, the placer's per-shape refresh and candidate order):
plain Python / numpy, the reference, and the native kernel ``elastico._native.FragSummaries``
(native/frag.hpp; this module is its only Python caller), which gives bit-identical numbers
(the same integer summaries, the same float64 operations in the same order) without Python's
per-node and numpy's per-call cost.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from elastico import _native
from elastico.errors import InvalidArgument

__all__ = ["MILLI", "TypicalPods", "typical_pods", "FragmentationModel", "NodeSummaries"]

MILLI = 1000  # milli-GPU per GPU


@dataclass(frozen=True)
class TypicalPods:
    """The popularity-weighted pod shapes of a workload (module docstring).

    Arrays of length T: ``cpu_milli`` (milli-CPU), ``gpu_milli`` (per GPU, 0 for CPU-only
    pods), ``num_gpus`` (0 for CPU-only pods), ``freq`` (sums to 1); ``gpu_types[t]`` the GPU
    models the pod may run on (empty = any).
    """

    cpu_milli: np.ndarray
    gpu_milli: np.ndarray
    num_gpus: np.ndarray
    gpu_types: tuple[frozenset[str], ...]
    freq: np.ndarray

    def __len__(self) -> int:
        return int(self.freq.size)


def typical_pods(cpu_milli: Sequence[int], gpu_milli: Sequence[int], num_gpus: Sequence[int],
                 gpu_types: Sequence[frozenset[str]] | None = None,
                 threshold: float = 0.95) -> TypicalPods:
    """Typical pods of a workload of P pods (FGD ``GetTypicalPods``, step 1, weight 0).

    ``cpu_milli``, ``gpu_milli`` (per GPU; 0 for CPU-only), ``num_gpus``: length-P integer
    sequences; ``gpu_types``: P sets of allowed models (None = all empty).  Shapes are counted,
    sorted by decreasing count (ties: the larger shape by (cpu, gpu_milli, num_gpus, types)
    first, as FGD's ``sort.Reverse``), and taken one by one until their cumulative count is
    >= ``threshold`` x P; frequencies are the counts over the kept total.

    Raises InvalidArgument for an empty workload, mismatched lengths, negative values, a GPU
    pod with ``gpu_milli`` outside 1..1000, or ``threshold`` outside (0, 1].
    """
    c = np.asarray(cpu_milli, dtype=np.int64).ravel()
    g = np.asarray(gpu_milli, dtype=np.int64).ravel()
    n = np.asarray(num_gpus, dtype=np.int64).ravel()
    P = c.size
    if P == 0:
        raise InvalidArgument("pods", 0, "at least one pod")
    if g.size != P or n.size != P:
        raise InvalidArgument("gpu_milli/num_gpus", (g.size, n.size), f"length {P} like cpu_milli")
    types = [frozenset()] * P if gpu_types is None else [frozenset(t) for t in gpu_types]
    if len(types) != P:
        raise InvalidArgument("gpu_types", len(types), f"length {P} like cpu_milli")
    if (c < 0).any() or (n < 0).any():
        raise InvalidArgument("cpu_milli/num_gpus", "negative", "values >= 0")
    bad = ((n > 0) & ((g < 1) | (g > MILLI))) | ((n == 0) & (g != 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgument(f"gpu_milli[{i}]", int(g[i]), "1..1000 for a GPU pod, 0 for a CPU-only pod")
    if not (0.0 < threshold <= 1.0):
        raise InvalidArgument("threshold", threshold, "a fraction in (0, 1]")
    counts: dict[tuple, int] = {}
    for key in zip(c.tolist(), g.tolist(), n.tolist(), ("|".join(sorted(t)) for t in types)):
        counts[key] = counts.get(key, 0) + 1
    # FGD: sort.Reverse on (count, then PodResource.Less) = decreasing count, larger shape first
    order = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    need = threshold * P
    kept, cum = [], 0
    for key, cnt in order:
        if cum >= need:
            break
        kept.append((key, cnt))
        cum += cnt
    total = float(sum(cnt for _, cnt in kept))
    return TypicalPods(
        cpu_milli=np.array([k[0] for k, _ in kept], dtype=np.int64),
        gpu_milli=np.array([k[1] for k, _ in kept], dtype=np.int64),
        num_gpus=np.array([k[2] for k, _ in kept], dtype=np.int64),
        gpu_types=tuple(frozenset(k[3].split("|")) if k[3] else frozenset() for k, _ in kept),
        freq=np.array([cnt / total for _, cnt in kept], dtype=float),
    )


class FragmentationModel:
    """FGD's node fragmentation for one set of typical pods and one list of GPU models.

    ``models``: the GPU model names the node arrays refer to by index.  The per-node state is
    summarised by :meth:`counts`: for each distinct GPU threshold ``m_k`` of the typical pods
    (``thresholds``, K of them), ``cnt[:, k]`` = number of GPUs with ``left >= m_k`` and
    ``S[:, k]`` = their free milli-GPU.  :meth:`from_counts` turns such a summary (current or
    after a hypothetical placement) into the fragmentation (milli-GPU).
    """

    def __init__(self, typical: TypicalPods, models: Sequence[str]):
        self.typical = typical
        self.models = tuple(models)
        gpu = typical.num_gpus > 0
        self.thresholds = np.unique(typical.gpu_milli[gpu]) if gpu.any() else np.zeros(0, np.int64)
        self._gpu_t = np.flatnonzero(gpu)                       # typical GPU pods
        self._k = np.searchsorted(self.thresholds, typical.gpu_milli[self._gpu_t])  # [Tg]
        self._n = typical.num_gpus[self._gpu_t]
        self._c = typical.cpu_milli[self._gpu_t]
        self._p = typical.freq[self._gpu_t]
        # access[model, t]: typical GPU pod t may run on that model (FGD IsNodeAccessibleToPod)
        acc = np.ones((len(self.models), self._gpu_t.size), dtype=bool)
        for j, t in enumerate(self._gpu_t.tolist()):
            allowed = typical.gpu_types[t]
            if allowed:
                acc[:, j] = [m in allowed for m in self.models]
        self._access = acc
        self._any_access = bool(acc.all())  # no typical pod restricts the GPU model

    @property
    def num_thresholds(self) -> int:
        return int(self.thresholds.size)

    def counts(self, gpu_left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``gpu_left``: [B, G] free milli-GPU (pad missing GPUs with 0).  Returns
        ``(cnt [B, K] int64, S [B, K] int64)`` (class docstring)."""
        left = np.asarray(gpu_left, dtype=np.int64)
        ge = left[:, :, None] >= self.thresholds[None, None, :]
        return ge.sum(axis=1), (ge * left[:, :, None]).sum(axis=1)

    def from_counts(self, cpu_left: np.ndarray, total_left: np.ndarray, cnt: np.ndarray,
                    S: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Fragmentation [B] (milli-GPU, float) of B node states: ``cpu_left`` [B] milli-CPU,
        ``total_left`` [B] = L, ``cnt``/``S`` [B, K] from :meth:`counts`, ``model`` [B] index
        into ``models``.  ``F = L - sum_t p_t [t fits] S_t`` (module docstring)."""
        L = np.asarray(total_left, dtype=float)
        if self._gpu_t.size == 0:
            return L.copy()
        fits = cnt[:, self._k] >= self._n
        fits &= np.asarray(cpu_left)[:, None] >= self._c
        if not self._any_access:
            fits &= self._access[np.asarray(model)]
        return L - np.where(fits, S[:, self._k], 0) @ self._p

    def fragmentation(self, cpu_left: np.ndarray, gpu_left: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Fragmentation [B] (milli-GPU) of B nodes: ``cpu_left`` [B] milli-CPU free,
        ``gpu_left`` [B, G] milli-GPU free per GPU (0-padded), ``model`` [B] model index."""
        left = np.asarray(gpu_left, dtype=np.int64)
        cnt, S = self.counts(left)
        return self.from_counts(cpu_left, left.sum(axis=1), cnt, S, model)

    def shift(self, cnt: np.ndarray, S: np.ndarray, old: np.ndarray, new: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """Summaries after ONE GPU per row goes from ``old`` [B] to ``new`` [B] milli-GPU free:
        ``cnt' = cnt - [old >= m] + [new >= m]``, ``S' = S - old [old >= m] + new [new >= m]``."""
        o = np.asarray(old, dtype=np.int64)[:, None]
        w = np.asarray(new, dtype=np.int64)[:, None]
        m = self.thresholds[None, :]
        go, gn = o >= m, w >= m
        return cnt - go + gn, S - go * o + gn * w


class NodeSummaries:
    """Per-node fragmentation summaries kept up to date incrementally (the ``elastico``
    scorer's cache in :class:`elastico.placer.placement.ClusterState`).

    For B nodes: ``rows`` [B, G] free milli-GPU per GPU (0-padded), ``cpu`` [B] free milli-CPU,
    ``model`` [B] model index, and from them ``cnt``/``S`` [B, K] (:meth:`FragmentationModel.counts`),
    ``L`` [B] total free milli-GPU and ``F`` [B] fragmentation (milli-GPU).  :meth:`update`
    recomputes one node after a booking touched it, O(G log K + K + T) instead of
    O(B x G x K), in plain Python: for one node of a few GPUs numpy's per-call cost is most of
    the work.  :meth:`gpu_increase` gives, for some nodes, the fragmentation increase of a pod
    taking each of their GPUs; :meth:`node_increase` the same for one node in plain Python,
    and :meth:`key` the node state it depends on.

    ``native``: :meth:`update`, :meth:`node_increase` and the placer's per-shape refresh
    (:meth:`refresh`, :meth:`plan`, :meth:`update_from_gpus`) run in the native kernel
    (``elastico._native.FragSummaries``, native/frag.hpp), which reads and writes these same
    arrays and gives bit-identical numbers; False: plain Python (the reference).  The starting
    ``F`` comes from :meth:`FragmentationModel.from_counts` either way.
    """

    def __init__(self, fm: FragmentationModel, rows: np.ndarray, cpu: np.ndarray, model: np.ndarray,
                 native: bool = False):
        self.fm = fm
        self.rows = np.array(rows, dtype=np.int64)
        self.cpu = np.array(cpu, dtype=np.int64)
        self.model = np.asarray(model)
        if native:  # the kernel reads the model codes in place: int64, contiguous
            self.model = np.ascontiguousarray(self.model, dtype=np.int64)
        self.cnt, self.S = fm.counts(self.rows)
        self.cnt = np.ascontiguousarray(self.cnt, dtype=np.int64)
        self.S = np.ascontiguousarray(self.S, dtype=np.int64)
        self.L = self.rows.sum(axis=1)
        self.F = np.ascontiguousarray(fm.from_counts(self.cpu, self.L, self.cnt, self.S, self.model), dtype=float)
        self._native = self._bind() if native else None
        self._pods: list | None = None  # built by the first update()
        self._keys: list[tuple] | None = None  # see key(); built on first use
        # the typical GPU pods a node's free CPU and model admit, by (how many of the pods'
        # distinct milli-CPU needs the free CPU meets, model): depends on nothing else, so
        # copies share it; at most (T + 1) x models entries
        self._live: dict[tuple[int, int], list] = {}

    @property
    def native(self) -> bool:
        """Whether the one-node paths run in the native kernel."""
        return self._native is not None

    def _bind(self):
        """The native kernel over this object's arrays (it keeps references to them)."""
        fm = self.fm
        return _native.FragSummaries(fm.thresholds, fm._k, fm._n, fm._c, fm._p, fm._access,
                                     self.rows, self.cpu, self.model, self.cnt, self.S, self.L, self.F)

    def update(self, n: int, row, cpu: int) -> None:
        """Node ``n`` now has free milli-GPU ``row`` [G] and ``cpu`` free milli-CPU.  Same
        counts as :meth:`FragmentationModel.counts`; ``F`` as ``from_counts`` up to the order
        of the floating-point sum (a few ulps)."""
        if self._native is not None:
            self._native.update(n, row, cpu)
            self._keys = None
            return
        if self._pods is None:
            self._python_tables()
        vals = [int(v) for v in row]
        self.rows[n] = vals
        self.cpu[n] = cpu
        # cnt[i] / S[i]: GPUs with v >= thr[i], counted and summed -- each v lands once at
        # bisect_right(thr, v) (the first threshold above it), then suffix sums
        thr = self._thr
        K = len(thr)
        at_c = [0] * (K + 1)
        at_s = [0] * (K + 1)
        for v in vals:
            i = bisect_right(thr, v)
            at_c[i] += 1
            at_s[i] += v
        cnt = [0] * K
        S = [0] * K
        c_run = s_run = 0
        for i in range(K - 1, -1, -1):
            c_run += at_c[i + 1]
            s_run += at_s[i + 1]
            cnt[i] = c_run
            S[i] = s_run
        L = sum(vals)
        self.cnt[n], self.S[n], self.L[n] = cnt, S, L
        model = int(self.model[n])
        live = self._live_pods(cpu, model)
        # the same terms in the same order as filtering every pod here, summed left to right
        # (not sum(): from Python 3.12 on it compensates, and the native kernel does not)
        fit = 0.0
        for k, g, p in live:
            if cnt[k] >= g:
                fit += p * S[k]
        self.F[n] = F = L - fit
        if self._keys is not None:
            self._keys[n] = (tuple(vals), cpu, model, F)

    def _live_pods(self, cpu: int, model: int) -> list[tuple[int, int, float]]:
        """(threshold index, GPUs, frequency) of the typical GPU pods that ``cpu`` free
        milli-CPU and the model admit, in typical-pod order.  Free CPU matters only through
        which of the pods' CPU needs it meets, so the lists are kept per (that level, model):
        free CPU takes a new value at nearly every booking, the level seldom."""
        level = bisect_right(self._cpu_cuts, cpu)
        live = self._live.get((level, model))
        if live is None:
            live = self._live[(level, model)] = [(k, g, p) for k, g, c, p, acc in self._pods
                                                 if cpu >= c and acc[model]]
        return live

    def _python_tables(self) -> None:
        """The typical GPU pods as Python tuples (threshold index, GPUs, milli-CPU, frequency,
        access by model) and the thresholds as a list, for the one-node paths."""
        fm = self.fm
        self._thr = fm.thresholds.tolist()
        self._cpu_cuts = sorted(set(fm._c.tolist()))  # the pods' distinct milli-CPU needs
        self._pods = list(zip(fm._k.tolist(), fm._n.tolist(), fm._c.tolist(), fm._p.tolist(),
                              fm._access.T.tolist()))

    def node_increase(self, n: int, m: int, cpu_m: int) -> list[float]:
        """:meth:`gpu_increase` for the one node ``n``, [G] as a list, in plain Python: for
        one node of a few GPUs (what a booking leaves stale) numpy's per-call cost is most of
        the work.  The increase depends on a GPU only through its free milli-GPU, so it is
        worked out once per distinct value; the same numbers as :meth:`gpu_increase` up to
        the order of the floating-point sum (a few ulps), except that a GPU with less than
        ``m - 1`` free (it cannot take the pod even up to the rounding of shares to
        milli-GPU; padding GPUs too) gets ``inf`` without any work."""
        if self._native is not None:
            return self._native.node_increase(n, m, cpu_m).tolist()
        if self._pods is None:
            self._python_tables()
        vals, cpu, model, F = self.key(n)
        out: dict[int, float] = {o: math.inf for o in vals if o < m - 1}
        todo = [o for o in dict.fromkeys(vals) if o not in out]
        if todo:
            cpu -= cpu_m
            # the pods the node's CPU and model admit whatever the GPUs hold, in order
            live = self._live_pods(cpu, model)
            thr = self._thr
            cnt, S, L = self.cnt[n].tolist(), self.S[n].tolist(), int(self.L[n])
            for o in todo:
                w = o - m if o > m else 0
                # FragmentationModel.shift for one GPU going from o to w (w <= o): the
                # thresholds (sorted) up to w lose o - w of S, those in (w, o] lose the GPU
                a, b = bisect_right(thr, w), bisect_right(thr, o)
                c1 = cnt[:a] + [c - 1 for c in cnt[a:b]] + cnt[b:]
                s1 = [s - o + w for s in S[:a]] + [s - o for s in S[a:b]] + S[b:]
                # FragmentationModel.from_counts: F = L - sum_t p_t [t fits] S_t
                fit = 0.0
                for k, g, p in live:
                    if c1[k] >= g:
                        fit += p * s1[k]
                out[o] = float(L - (o - w)) - fit - F
        return [out[o] for o in vals]

    def key(self, n: int) -> tuple:
        """Node ``n``'s state: (free milli-GPU per GPU, free milli-CPU, model index, F).
        :meth:`node_increase` is a function of it and the shape (cnt, S and L follow from the
        GPUs), so nodes in one state -- empty ones, above all -- may share its answers."""
        if self._keys is None:
            self._keys = [(tuple(r), c, mo, f) for r, c, mo, f in
                          zip(self.rows.tolist(), self.cpu.tolist(), self.model.tolist(), self.F.tolist())]
        return self._keys[n]

    def gpu_increase(self, nodes: np.ndarray, m: int, cpu_m: int) -> np.ndarray:
        """[B, G] fragmentation increase (milli-GPU) of a pod taking ``m`` milli-GPU of GPU g
        and ``cpu_m`` milli-CPU of node ``nodes[b]`` (meaningless for padding GPUs)."""
        fm = self.fm
        old = self.rows[nodes]                                   # [B, G]
        new = np.maximum(old - m, 0)
        B, G = old.shape
        thr = fm.thresholds
        go, gn = old[:, :, None] >= thr, new[:, :, None] >= thr  # [B, G, K]
        c1 = self.cnt[nodes][:, None, :] - go + gn
        s1 = self.S[nodes][:, None, :] - go * old[:, :, None] + gn * new[:, :, None]
        K = thr.size
        after = fm.from_counts(np.repeat(self.cpu[nodes] - cpu_m, G),
                               (self.L[nodes][:, None] - (old - new)).ravel(),
                               c1.reshape(B * G, K), s1.reshape(B * G, K), np.repeat(self.model[nodes], G))
        return after.reshape(B, G) - self.F[nodes][:, None]

    def update_from_gpus(self, n: int, lo: int, hi: int, healthy: np.ndarray, is_mig: np.ndarray,
                         mig_cs: np.ndarray, mig_comp: np.ndarray, used_share: np.ndarray,
                         cpu_free_cores: float) -> None:
        """Native only: :meth:`update` of node ``n`` whose GPUs are the placer's flat GPUs
        ``[lo, hi)`` (``healthy``/``is_mig`` bool, ``mig_cs``/``mig_comp`` int64 SM slices,
        ``used_share`` float64, all [flat GPUs]): free milli-GPU 0 if unhealthy, else
        ``round((mig_cs - mig_comp) / mig_cs * 1000)`` on a MIG-mode GPU and
        ``round((1 - used_share) * 1000)`` otherwise (half to even, padding 0), and
        ``round(cpu_free_cores * 1000)`` milli-CPU -- the numbers of ``FragIndex.touch``
        (:mod:`elastico.placer.placement.frag_cache`)."""
        if self._native is None:
            raise InvalidArgument("native", False, "NodeSummaries(..., native=True) for update_from_gpus")
        self._native.update_from_gpus(n, lo, hi, healthy, is_mig, mig_cs, mig_comp, used_share, cpu_free_cores)
        self._keys = None

    def refresh(self, nodes: np.ndarray, seen: np.ndarray, version: np.ndarray, offsets: np.ndarray,
                m: int, cpu_m: int, d_all: np.ndarray, new_all: np.ndarray, max_stale: int) -> int:
        """Native only: the placer's per-shape increase cache (``FragIndex.cached_deltas``)
        for candidate ``nodes`` [n] int64.  A node is stale when ``seen[node] !=
        version[node]`` (both [B] int64).  If more than ``max_stale`` are stale, changes nothing
        and returns their number; otherwise, for each stale node and each of its flat GPUs f in
        ``[offsets[node], offsets[node + 1])`` (its GPU ``f - offsets[node]``), writes
        ``d_all[f] = round(node_increase / 1000, 9)`` (GPUs; float64) and ``new_all[f] =
        max(left - m, 0)`` (milli-GPU; int64), sets ``seen[node] = version[node]`` and returns
        the number of stale nodes.  ``m`` milli-GPU, ``cpu_m`` milli-CPU."""
        if self._native is None:
            raise InvalidArgument("native", False, "NodeSummaries(..., native=True) for refresh")
        return self._native.refresh(nodes, seen, version, offsets, m, cpu_m, d_all, new_all, max_stale)

    def plan(self, idx: np.ndarray, gpu_node: np.ndarray, seen: np.ndarray, version: np.ndarray,
             offsets: np.ndarray, m: int, cpu_m: int, d_all: np.ndarray, new_all: np.ndarray,
             max_stale: int, consolidation: float):
        """Native only: :meth:`refresh` for the nodes of the eligible flat GPUs ``idx`` [n]
        (int64, increasing; ``gpu_node`` [flat GPUs] their nodes), then the ``elastico``
        scorer's candidate order over them.  None if more than ``max_stale`` of those nodes
        are stale (nothing changed); else ``(uniq [R] nodes with eligible GPUs, counts [R]
        their GPUs, first [R] where each node's run starts in idx, order [n] positions into
        idx by (node, d, new, position), d_gpu [n] = d_all[idx], new_gpu [n] =
        new_all[idx], opt_key [R] = round(least d of the node + consolidation x node, 9)
        (GPUs), visit [R] nodes' runs by (opt_key, node))`` -- what the ``elastico`` scorer
        (:mod:`elastico.placer.placement.elastico_scorer`) works out with numpy
        (``np.lexsort``, ``np.minimum.reduceat``, ``np.round``) on the Python path."""
        if self._native is None:
            raise InvalidArgument("native", False, "NodeSummaries(..., native=True) for plan")
        return self._native.plan(idx, gpu_node, seen, version, offsets, m, cpu_m, d_all, new_all,
                                 max_stale, consolidation)

    def __getstate__(self) -> dict:
        # the kernel object cannot be pickled: rebuilt over the unpickled arrays (deepcopy too)
        state = self.__dict__.copy()
        state["_native"] = self._native is not None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._native = self._bind() if state["_native"] else None

    def copy(self) -> "NodeSummaries":
        new = object.__new__(NodeSummaries)
        new.__dict__.update(self.__dict__)
        for name in ("rows", "cpu", "cnt", "S", "L", "F"):
            setattr(new, name, getattr(self, name).copy())
        if self._keys is not None:
            new._keys = list(self._keys)
        if self._native is not None:  # the kernel works on the copy's own arrays
            new._native = new._bind()
        return new
