"""The ``elastico`` scorer's fragmentation index, kept up to date booking by booking.

FGD's fragmentation of a node (:mod:`elastico.placer.fragmentation`) depends only on that
node's free GPU and CPU, so after a booking only the touched node is re-summarised
(:meth:`FragIndex.touch`), and the increase a job shape would cause on each GPU is kept per
shape and recomputed only for nodes booked since (:meth:`FragIndex.cached_deltas`): a
placement costs O(GPUs of the touched nodes) of fragmentation work, not O(cluster).

Owns: :class:`FragIndex` -- the workload's typical pods and their fragmentation model, the
node summaries, node versions, the per-shape increase cache and its memo.
Who calls it: the book (its ``node_changed`` hook is :meth:`FragIndex.touch`), the ``elastico``
scorer (:mod:`.elastico_scorer`) and :class:`~elastico.placer.placement.ClusterState`
(``set_typical_pods``, ``copy``, ``check_invariants``).
Whom it calls: :mod:`elastico.placer.fragmentation` (:class:`NodeSummaries`, in the native
kernel with ``native``); it reads the :class:`~.book.Book` it is given.  It keeps no reference
to the book (the book's hook refers to it): a copy of a round dropped is freed at once, with
no reference cycle left for the garbage collector.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from elastico.placer.fragmentation import MILLI, FragmentationModel, NodeSummaries, TypicalPods

from .layout import Layout

if TYPE_CHECKING:
    from .book import Book

__all__ = ["FragIndex"]

_DELTA_CACHE_SHAPES = 256  # job shapes whose per-GPU fragmentation increase is kept
#: up to this many stale nodes, their increases are worked out one node at a time (native
#: kernel or plain Python: one booking leaves one node stale, and numpy's per-call cost
#: dominates at that size); more go to the batched numpy path, whose float sums run in another
#: order -- the limit stays where it was so that placements stay bit for bit the same
PYTHON_STALE_NODES = 64
_DELTA_MEMO_SIZE = 1 << 14  # (node state, shape) pairs kept by FragIndex.cached_deltas


def _round9(x: float) -> float:
    """``np.round(x, 9)`` for one Python float, the same IEEE operations (numpy scales by
    1e9, rounds half to even, scales back; ``round`` of a float rounds half to even too),
    without numpy's per-call cost; infinities pass through.  Only the sign of a zero result
    may differ, which no comparison sees."""
    return round(x * 1e9) / 1e9 if math.isfinite(x) else x


class FragIndex:
    """Fragmentation summaries of a book's nodes for the typical pods (the book is passed to
    each method that reads it).

    ``typical`` / ``model``: the typical pods (:meth:`set_typical`) and their
    :class:`FragmentationModel` (None: each placement uses the job's own shape).
    ``summary``: every node's :class:`NodeSummaries`, built on first use (:meth:`summaries`),
    None until then and after the typical pods change.  ``cache_on`` (False: the scorer
    recomputes every candidate node at each placement -- the reference the cache is tested
    and benchmarked against); ``native``: summaries and per-shape increases in the native
    kernel (the same numbers; False: plain Python, the reference).  ``node_version`` [N]:
    bumped on every change of a node while summaries exist; ``delta_cache``: per job shape
    (increase [G + 1], free milli-GPU after [G + 1], node versions seen [N]).
    ``delta_memo``: (node state, shape) -> that node's rows of a ``delta_cache`` entry, a
    pure function of the key for one set of typical pods, so copies share it."""

    def __init__(self, layout: Layout, cache: bool = True, native: bool = True):
        self.layout = layout
        self.typical: TypicalPods | None = None
        self.model: FragmentationModel | None = None
        self.summary: NodeSummaries | None = None
        self.cache_on = bool(cache)
        self.native = bool(native)
        self.node_version = np.zeros(len(layout.nodes), dtype=np.int64)
        self.delta_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.slots: np.ndarray | None = None  # see node_slots
        self.delta_memo: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def copy(self) -> "FragIndex":
        """An independent copy, for a copy of the book."""
        new = object.__new__(FragIndex)
        new.__dict__.update(self.__dict__)
        if self.summary is not None:
            new.summary = self.summary.copy()
        new.node_version = self.node_version.copy()
        new.delta_cache = {k: tuple(a.copy() for a in e) for k, e in self.delta_cache.items()}
        return new

    def set_typical(self, typical: TypicalPods | None) -> None:
        self.typical = typical
        self.model = None if typical is None else FragmentationModel(typical, tuple(self.layout.models))
        self.summary = None
        self.delta_cache = {}
        self.delta_memo = {}

    def rows(self, b: "Book", nodes: np.ndarray, width: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """([U, Gmax] free milli-GPU of each GPU of ``nodes`` (0-padded to at least ``width``;
        unhealthy GPUs 0; MIG-mode GPUs by free compute slices / 7), [U] free milli-CPU)."""
        L = self.layout
        ng = np.diff(L.offset)[nodes]
        gmax = max(1, int(ng.max()), width)
        flat = L.offset[nodes][:, None] + np.arange(gmax)[None, :]
        valid = np.arange(gmax)[None, :] < ng[:, None]
        flat = np.where(valid, flat, 0)
        free = np.where(L.is_mig, (L.mig_cs - b.mig_comp) / L.mig_cs, 1.0 - b.used_share)
        free = np.where(b.healthy, free, 0.0)
        rows = np.where(valid, np.round(free[flat] * MILLI), 0).astype(np.int64)
        cpu = np.round((L.node_cpu[nodes] - b.node_cpu_used[nodes]) * 1000).astype(np.int64)
        return rows, cpu

    def summaries(self, b: "Book") -> NodeSummaries:
        """Every node's fragmentation summary for the typical pods (built once, then kept up
        to date by :meth:`touch` on every booking change of a node)."""
        if self.summary is None:
            L = self.layout
            rows, cpu = self.rows(b, np.arange(len(L.nodes)))
            self.summary = NodeSummaries(self.model, rows, cpu, L.node_model, native=self.native)
        return self.summary

    def touch(self, b: "Book", n: int) -> None:
        """Node ``n``'s bookings or health changed in ``b``: re-summarise it (if summaries
        exist)."""
        fc = self.summary
        if fc is None:  # per-shape increases exist only beside the summaries
            return
        self.node_version[n] += 1
        L = self.layout
        if fc.native:  # the same numbers as below (NodeSummaries.update_from_gpus)
            fc.update_from_gpus(n, L.offset_list[n], L.offset_list[n + 1], b.healthy,
                                L.is_mig, L.mig_cs, b.mig_comp, b.used_share,
                                float(L.node_cpu[n] - b.node_cpu_used[n]))
            return
        # the numbers rows() gives, for one node's few GPUs in plain Python (numpy's
        # per-call cost dominates at this size; round() rounds half to even like np.round)
        lo, hi = int(L.offset[n]), int(L.offset[n + 1])
        row = [0] * fc.rows.shape[1]
        if n in L.mig_nodes:
            for j, (ok, mig, cs, comp, used) in enumerate(zip(
                    b.healthy[lo:hi].tolist(), L.is_mig[lo:hi].tolist(), L.mig_cs[lo:hi].tolist(),
                    b.mig_comp[lo:hi].tolist(), b.used_share[lo:hi].tolist())):
                if ok:
                    row[j] = round(((cs - comp) / cs if mig else 1.0 - used) * MILLI)
        else:
            for j, (ok, used) in enumerate(zip(b.healthy[lo:hi].tolist(),
                                               b.used_share[lo:hi].tolist())):
                if ok:
                    row[j] = round((1.0 - used) * MILLI)
        fc.update(n, row, round(float(L.node_cpu[n] - b.node_cpu_used[n]) * 1000))

    def cached_deltas(self, fc: NodeSummaries, nodes: np.ndarray, m: int, cpu_m: int
                      ) -> tuple[np.ndarray, np.ndarray]:
        """([G] fragmentation increase (GPUs, rounded to 1e-9) of taking ``m`` milli-GPU and
        ``cpu_m`` milli-CPU, by flat GPU; [G] the GPU's free milli-GPU after), valid for the
        GPUs of ``nodes``: kept per shape and recomputed only for nodes booked since
        (``node_version``).  Up to ``PYTHON_STALE_NODES`` stale nodes go one by one through
        :meth:`NodeSummaries.node_increase` -- in the native kernel (``native``, no per-node
        Python) or in plain Python with a memo -- more through the batched numpy
        ``gpu_increase``; the native and Python one-node paths give the same bits."""
        L = self.layout
        d_all, new_all, seen = self.delta_entry(m, cpu_m)
        if fc.native and fc.refresh(nodes, seen, self.node_version, L.offset, m, cpu_m, d_all, new_all,
                                    PYTHON_STALE_NODES) <= PYTHON_STALE_NODES:
            return d_all, new_all  # the plain-Python branch's numbers, worked out natively
        stale = nodes[seen[nodes] != self.node_version[nodes]]
        if stale.size > PYTHON_STALE_NODES:
            slots = self.node_slots(fc.rows.shape[1])[stale]
            d_all[slots] = np.round(fc.gpu_increase(stale, m, cpu_m) / MILLI, 9)
            new_all[slots] = np.maximum(fc.rows[stale] - m, 0)
        elif stale.size:
            memo = self.delta_memo
            if len(memo) >= _DELTA_MEMO_SIZE:
                memo.clear()
            off = L.offset_list
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
            seen[stale] = self.node_version[stale]
        return d_all, new_all

    def delta_entry(self, m: int, cpu_m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-shape arrays of :meth:`cached_deltas` (increase [G + 1], free milli-GPU
        after [G + 1], node versions seen [N]), made on first use."""
        key = (m, cpu_m)
        entry = self.delta_cache.get(key)
        if entry is None:
            if len(self.delta_cache) >= _DELTA_CACHE_SHAPES:
                self.delta_cache.clear()
            L = self.layout
            G = L.num_gpus
            # one spare slot: the padding GPUs of fc.rows' layout write there (node_slots)
            entry = (np.zeros(G + 1), np.zeros(G + 1, dtype=np.int64), np.full(len(L.nodes), -1, dtype=np.int64))
            self.delta_cache[key] = entry
        return entry

    def native_plan(self, b: "Book", idx: np.ndarray, m: int, cpu_m: int, consolidation: float):
        """:meth:`cached_deltas` for the nodes of the eligible GPUs ``idx`` and the candidate
        order over them in one native call (:meth:`NodeSummaries.plan`); when more nodes are
        stale than the one-node path takes, the batched numpy path first."""
        L = self.layout
        fc = self.summaries(b)
        d_all, new_all, seen = self.delta_entry(m, cpu_m)
        args = (idx, L.gpu_node, seen, self.node_version, L.offset, m, cpu_m, d_all, new_all)
        plan = fc.plan(*args, PYTHON_STALE_NODES, consolidation)
        if plan is None:
            self.cached_deltas(fc, np.unique(L.gpu_node[idx]), m, cpu_m)
            plan = fc.plan(*args, PYTHON_STALE_NODES, consolidation)
        return plan

    def node_slots(self, width: int) -> np.ndarray:
        """[N, width] flat GPU index of each node's GPU j (the layout of the fragmentation
        rows), G for padding."""
        slots = self.slots
        if slots is None or slots.shape[1] != width:
            L = self.layout
            j = np.arange(width)[None, :]
            ng = np.diff(L.offset)[:, None]
            slots = self.slots = np.where(j < ng, L.offset[:-1, None] + j, L.num_gpus)
        return slots

    def check(self, b: "Book") -> None:
        """AssertionError unless the kept summaries equal those recomputed from ``b``."""
        fc = self.summary
        if fc is not None:
            rows, cpu_m = self.rows(b, np.arange(len(self.layout.nodes)), width=fc.rows.shape[1])
            assert np.array_equal(rows, fc.rows) and np.array_equal(cpu_m, fc.cpu), "fragmentation cache differs"
