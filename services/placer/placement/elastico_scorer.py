"""The ``elastico`` scorer: capacity lost to fragmentation, interference and spread, in GPUs.

Per candidate GPU the fragmentation increase of taking it (FGD's measure, the typical pods of
:meth:`~elastico.placer.placement.ClusterState.set_typical_pods`); per node the k GPUs of least
cost; nodes visited by their cost without interference (a lower bound for single-GPU jobs,
since dI >= 0), then the real cost with the predicted interference; the search stops when the
best real cost is no worse than the next node's lower bound (docs/placement.md, "Scorers").

Owns: :func:`elastico_cost` and its weights (``CONSOLIDATION_GPU``, ``INTERFERENCE_WEIGHT``),
and :func:`place_elastico`, the scorer itself.
Who calls it: :func:`.scoring.place_pod` (scorer ``elastico``); :mod:`elastico.placer.inflation`
and the ``fgd`` policy read its weights.
Whom it calls: :class:`.frag_cache.FragIndex` (cached increases, with ``native`` the candidate
order in one native call), :mod:`elastico.placer.fragmentation` (uncached: from every
candidate node's GPUs), :func:`.interference.interference` (bounds and dI per GPU) and
:meth:`.book.Book.commit` (books the choice).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from elastico.model import Configuration
from elastico.placer.fragmentation import MILLI, FragmentationModel, NodeSummaries, typical_pods
from elastico.predictor import JobProfile, SlowdownModel

from .assignment import PlaceOutcome
from .interference import interference, violation
from .layout import config_mig_profile

if TYPE_CHECKING:
    from .book import Book
    from .frag_cache import FragIndex

__all__ = ["CONSOLIDATION_GPU", "INTERFERENCE_WEIGHT", "elastico_cost", "place_elastico"]

#: elastico scorer: GPU-equivalents of cost per position in the cluster's node order
#: (consolidation; measured on FGD's benchmark, docs/placement.md)
CONSOLIDATION_GPU = 0.003
#: elastico scorer: weight of the interference term (GPU-equivalents per GPU of throughput lost)
INTERFERENCE_WEIGHT = 1.0


def elastico_cost(frag_increase_gpus, interference_gpus, node_position,
                  weight: float = INTERFERENCE_WEIGHT, consolidation: float = CONSOLIDATION_GPU):
    """ElastiCo's one placement score (lower is better), in GPU-equivalents of capacity lost:

    ``cost = dF + weight x dI + consolidation x position``

    * ``dF`` (``frag_increase_gpus``): increase of FGD's expected fragmentation of the node
      for the workload's typical pods, in GPUs (:mod:`elastico.placer.fragmentation`; Weng et
      al., ATC'23, ``pkg/utils/frag.go``) -- capacity future pods are expected not to use;
    * ``dI`` (``interference_gpus``): increase of the GPU throughput lost to co-location on
      the chosen GPUs, :func:`~.interference.interference_loss` before and after, from the
      slowdown model -- capacity the co-located jobs lose (hard limit: every slowdown within
      its bound);
    * ``position``: the node's index in the cluster's node order; ``consolidation`` GPUs per
      position fill nodes in one order (first-fit pressure), which leaves whole nodes free.

    Scalars or numpy arrays (broadcast)."""
    return np.asarray(frag_increase_gpus) + weight * np.asarray(interference_gpus) \
        + consolidation * np.asarray(node_position)


class _Ranked(NamedTuple):
    """The candidate GPUs of one placement, ranked within their nodes.  ``idx``' nodes with
    an eligible GPU: ``uniq`` [R], each with ``counts`` [R] GPUs from ``first`` [R] on in
    ``order`` [n] (positions into ``idx``, per node by (cost, least free after, index));
    ``d_gpu`` / ``new`` [n]: each GPU's fragmentation increase (GPUs) and free milli-GPU
    after; ``src``: the summaries the node's row ``rix`` [R] is read from; ``opt_key`` and
    ``visit``: the nodes' lower bounds and visiting order when the native plan gave them."""

    src: NodeSummaries
    rix: np.ndarray
    uniq: np.ndarray
    counts: np.ndarray
    first: np.ndarray
    order: np.ndarray
    d_gpu: np.ndarray
    new: np.ndarray
    opt_key: np.ndarray | None
    visit: np.ndarray | None


def place_elastico(book: "Book", frag: "FragIndex", job_id: str, config: Configuration,
                   profile: JobProfile, bound: float, model: SlowdownModel, idx: np.ndarray,
                   per_node: np.ndarray) -> PlaceOutcome:
    """The ``elastico`` scorer (:func:`elastico_cost`; module docstring).

    ``idx``: eligible flat GPUs on nodes with the host resources, in flat order;
    ``per_node``: ``np.bincount(gpu_node[idx])``, how many of them each node has.  With
    typical pods set (and the cache on), node summaries and per-GPU increases come from
    ``frag`` (with ``native`` together with the candidate order in one native call: the same
    numbers as the numpy code here); otherwise they are worked out from every candidate
    node's GPUs."""
    k = config.num_gpus
    mp = config_mig_profile(config)
    share = mp.share if mp is not None else float(config.gpu_share)
    m = int(round(share * MILLI))
    cpu_m = int(round(config.cpu * 1000))
    fm = frag.model
    cached = fm is not None and frag.cache_on
    if fm is None:
        fm = FragmentationModel(typical_pods([cpu_m], [max(1, min(m, MILLI))], [k]), tuple(book.layout.models))
    rk = _rank(book, frag, fm, cached, idx, per_node, m, cpu_m, k)
    ok_runs, opt_key, visit = _node_bounds(book, fm, rk, idx, k, m, cpu_m)
    best_choice, worst_seen = _visit(book, fm, rk, idx, k, m, cpu_m, ok_runs, opt_key, visit,
                                     profile, share, bound, model, mp is not None)
    if best_choice is None:
        detail = f" ({violation(book, *worst_seen[1:])})" if worst_seen else ""
        return PlaceOutcome(None, f"slowdown bound: every candidate GPU would push a resident past its bound{detail}")
    n, chosen, sig_new = best_choice
    a = book.commit(job_id, config, profile, bound, n, sorted(chosen))
    return PlaceOutcome(a, "", float(sig_new))


def _rank(book: "Book", frag: "FragIndex", fm: FragmentationModel, cached: bool, idx: np.ndarray,
          per_node: np.ndarray, m: int, cpu_m: int, k: int) -> _Ranked:
    """Each candidate GPU's fragmentation increase and their order within each node: from
    the native plan, the cached increases, or worked out from the nodes' GPUs."""
    plan = frag.native_plan(book, idx, m, cpu_m, CONSOLIDATION_GPU) if cached and frag.native else None
    if plan is not None:  # what the numpy code below works out, from the native kernel
        uniq, counts, first, order, d_gpu, new, opt_key, visit = plan
        return _Ranked(frag.summary, uniq, uniq, counts, first, order, d_gpu, new, opt_key, visit)
    L = book.layout
    node_of = L.gpu_node[idx]
    # idx is in flat (node-major) order, so node_of is sorted: one run per node, of
    # per_node[n] GPUs, the runs in node order
    uniq = per_node.nonzero()[0]
    counts = per_node[uniq]
    first = counts.cumsum() - counts
    if cached:
        src = frag.summaries(book)    # rows indexed by node
        rix = uniq
        d_all, new_all = frag.cached_deltas(src, uniq, m, cpu_m)
        d_gpu, new = d_all[idx], new_all[idx]
        # per node, GPUs by (cost, least free after, index): lexsort is stable and idx
        # is in flat order, so ties keep the GPU index order
        order = np.lexsort((new, d_gpu, node_of))
    else:
        local = L.gpu_local[idx]
        rows, cpu = frag.rows(book, uniq)
        src = NodeSummaries(fm, rows, cpu, L.node_model[uniq])   # rows indexed by run
        rix = np.arange(uniq.size)
        inv = np.repeat(rix, counts)
        old = src.rows[inv, local]
        new = np.maximum(old - m, 0)
        c1, s1 = fm.shift(src.cnt[inv], src.S[inv], old, new)
        after = fm.from_counts(src.cpu[inv] - cpu_m, src.L[inv] - (old - new), c1, s1, src.model[inv])
        d_gpu = np.round((after - src.F[inv]) / MILLI, 9)
        # per node, GPUs by (cost, least free after, index)
        order = np.lexsort((local, new, d_gpu, node_of))
    return _Ranked(src, rix, uniq, counts, first, order, d_gpu, new, None, None)


def _set_cost(book: "Book", fm: FragmentationModel, src: NodeSummaries, r: int, gpus: list[int],
              m: int, cpu_m: int) -> float:
    """Exact fragmentation increase (GPUs) of the node in row ``r`` of ``src`` taking
    ``gpus`` (flat)."""
    row = src.rows[r:r + 1].copy()
    j = book.layout.gpu_local[gpus]
    row[0, j] = np.maximum(row[0, j] - m, 0)
    # the integer summaries of the row after: what FragmentationModel.shift gives GPU by GPU
    # from src's (which are counts(src.rows)), so the same from_counts
    c, sm = fm.counts(row)
    after = fm.from_counts(np.array([src.cpu[r] - cpu_m]), row.sum(axis=1), c, sm, src.model[r:r + 1])[0]
    return round(float(after - src.F[r]) / MILLI, 9)


def _node_bounds(book: "Book", fm: FragmentationModel, rk: _Ranked, idx: np.ndarray, k: int,
                 m: int, cpu_m: int):
    """(the runs of ``rk`` whose node can take k GPUs -- None: every run --, each one's
    lower bound on the cost, the order to visit them in): the cost without interference of
    the node's least-increase GPU (one GPU) or of its k best GPUs together, plus its
    position term."""
    if k == 1 and rk.visit is not None:  # opt_key and visit come with the plan
        return None, rk.opt_key, rk.visit
    if k == 1:  # every run qualifies: ok_runs would be arange(uniq.size)
        ok_runs, runs = None, rk.uniq
        opt = np.minimum.reduceat(rk.d_gpu, rk.first)  # each run's least increase
    else:
        ok_runs = np.flatnonzero(rk.counts >= k)
        runs = rk.uniq[ok_runs]
        first, order = rk.first, rk.order
        opt = np.array([_set_cost(book, fm, rk.src, int(rk.rix[u]), idx[order[first[u]:first[u] + k]].tolist(),
                                  m, cpu_m)
                        for u in ok_runs.tolist()])
    # elastico_cost(opt, 0.0, position) rounded to 1e-9, inlined: this runs once per
    # placement; np.round(x, 9) is these three operations, without its per-call cost
    opt_key = opt + CONSOLIDATION_GPU * runs
    opt_key *= 1e9
    np.rint(opt_key, out=opt_key)
    opt_key /= 1e9
    visit = np.lexsort((runs, opt_key))
    return ok_runs, opt_key, visit


def _visit(book: "Book", fm: FragmentationModel, rk: _Ranked, idx: np.ndarray, k: int, m: int,
           cpu_m: int, ok_runs, opt_key, visit, profile: JobProfile, share: float,
           bound: float, model: SlowdownModel, is_mig: bool):
    """Visit the nodes by lower bound, each one's k cheapest GPUs within every bound, until
    the best real cost beats the next bound.  Returns ((node, flat GPUs, new job's
    slowdown) or None, the smallest bound violation seen or None)."""
    gpu_local = book.layout.gpu_local
    uniq, counts, first, order, d_gpu, new = rk.uniq, rk.counts, rk.first, rk.order, rk.d_gpu, rk.new
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
                ok, s_new, viol, dI = interference(book, g, profile, share, bound, model)
            if not ok:
                if worst_seen is None or viol[0] < worst_seen[0]:
                    worst_seen = viol
                continue
            cost = round(float(d_gpu[q]) + INTERFERENCE_WEIGHT * dI, 9)
            least = min(least, cost)
            cands.append((cost, int(new[q]), int(gpu_local[g]), g, dI, s_new, q))
        if len(cands) < k:
            continue
        cands.sort()
        chosen = cands[:k]
        gpus = [c[3] for c in chosen]
        # one GPU: its fragmentation increase is d_gpu, already worked out
        dF = float(d_gpu[chosen[0][6]]) if k == 1 else _set_cost(book, fm, rk.src, int(rk.rix[u]), gpus, m, cpu_m)
        # elastico_cost(dF, dI, position) in Python floats: the same IEEE operations
        cost = round(dF + INTERFERENCE_WEIGHT * sum(c[4] for c in chosen)
                     + CONSOLIDATION_GPU * int(uniq[u]), 9)
        key = (cost, int(uniq[u]))
        if best is None or key < best:
            best, best_choice = key, (int(uniq[u]), gpus, max(c[5] for c in chosen))
    return best_choice, worst_seen
