"""Placing one pod on one node: the scorers that choose among the nodes and GPUs that fit.

Scorers (``SCORERS``): ``bestfit`` chooses the candidate with the least free share left on the
chosen GPUs, then the least free share left on the node, then the lowest node index, then the
lowest GPU indices; ``firstfit`` the lowest node index, then the lowest GPU indices;
``elastico`` the least capacity lost (:mod:`.elastico_scorer`).  Within a node, GPUs are taken
in score order, skipping any whose residents' bounds would break.  Nodes are visited in order
of an optimistic key (their best GPUs ignoring slowdown), and the search stops as soon as the
best real candidate beats the next node's optimistic key (branch and bound), so one placement
costs O(GPUs) numpy work plus slowdown checks on few nodes.  A pod without GPUs goes to the
node with the least CPU left after it (``bestfit``, ``elastico``) or the first that fits.

Owns: ``SCORERS`` and :func:`place_pod` (one pod on one node, any scorer; ``bestfit`` and
``firstfit`` here).
Who calls it: :class:`~elastico.placer.placement.ClusterState` (a one-pod job) and
:mod:`.gangs` (each pod of a gang, restricted to some nodes and GPUs).
Whom it calls: :mod:`.fit` (eligible GPUs, reasons), :func:`.interference.check_bounds`,
:func:`.elastico_scorer.place_elastico` and :meth:`.book.Book.commit` (books the choice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from elastico.model import Configuration
from elastico.predictor import JobProfile, SlowdownModel

from .assignment import PlaceOutcome
from .elastico_scorer import place_elastico
from .fit import candidates, eligible, host_ok
from .interference import check_bounds

if TYPE_CHECKING:
    from .book import Book
    from .frag_cache import FragIndex

__all__ = ["SCORERS", "place_pod"]

SCORERS = ("bestfit", "firstfit", "elastico")


def place_pod(book: "Book", frag: "FragIndex", job_id: str, config: Configuration, profile: JobProfile,
              bound: float, model: SlowdownModel, scorer: str, node_mask: np.ndarray | None = None,
              gpu_excl: np.ndarray | None = None) -> PlaceOutcome:
    """One pod on one node, chosen by ``scorer``, booked.  ``node_mask`` [N]: only these
    nodes; ``gpu_excl`` [G]: not these GPUs (a gang's other pods, the MPS rules).  Input
    already validated.  A failed placement books nothing."""
    if config.num_gpus == 0:
        return _place_host_only(book, job_id, config, profile, float(bound), scorer, node_mask)
    gpu_node = book.layout.gpu_node
    host = host_ok(book, config)
    if node_mask is not None:
        host = host & node_mask
    e = eligible(book, config, leftover=scorer != "elastico")
    if isinstance(e, str):
        return PlaceOutcome(None, e)
    elig, leftover = e
    if gpu_excl is not None:
        elig = elig & ~gpu_excl
    k = config.num_gpus
    idx = np.flatnonzero(elig & host[gpu_node])
    per_node = np.bincount(gpu_node[idx]) if idx.size else None
    if per_node is None or per_node.max() < k:
        reason = candidates(book, config) if node_mask is None and gpu_excl is None else ""
        return PlaceOutcome(None, reason if isinstance(reason, str) and reason else "no candidate node")
    if scorer == "elastico":
        return place_elastico(book, frag, job_id, config, profile, float(bound), model, idx, per_node)
    runs = _node_runs(book, config, scorer, idx, leftover)
    best_choice, worst_seen = _visit(book, profile, float(bound), model, scorer, k,
                                     config.mig_profile is not None, *runs)
    if best_choice is None:
        detail = f" ({worst_seen[1]})" if worst_seen else ""
        return PlaceOutcome(None, f"slowdown bound: every candidate GPU would push a resident past its bound{detail}")
    n, chosen, sig_new = best_choice
    a = book.commit(job_id, config, profile, float(bound), n, sorted(chosen))
    return PlaceOutcome(a, "", float(sig_new))


def _node_runs(book: "Book", config: Configuration, scorer: str, idx: np.ndarray, leftover: np.ndarray):
    """The eligible GPUs ``idx`` in score order, grouped by node, and the nodes' visiting
    order: (idx, left [free share after, per GPU], uniq [nodes with k GPUs], first, counts
    [their runs in idx], node_order, key_cols [the optimistic key's columns, in visiting
    order])."""
    L = book.layout
    k = config.num_gpus
    node_of = L.gpu_node[idx]
    local = L.gpu_local[idx]
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
        node_free = np.bincount(L.gpu_node, weights=1.0 - book.used_share, minlength=len(L.nodes))
        node_after = np.round(node_free[uniq] - k * config.gpu_share, 9)
        node_order = np.lexsort((uniq, node_after, opt_left))
        # the search stops after a node or two: keys are built as it reaches them
        key_cols = (opt_left[node_order].tolist(), node_after[node_order].tolist(),
                    uniq[node_order].tolist())
    else:
        node_order = np.arange(uniq.size)
        key_cols = (uniq.tolist(),)
    return idx, left, uniq, first, counts, node_order, key_cols


def _visit(book: "Book", profile: JobProfile, bound: float, model: SlowdownModel, scorer: str,
           k: int, is_mig: bool, idx, left, uniq, first, counts, node_order, key_cols):
    """Branch and bound over the nodes (module docstring).  Returns ((node, flat GPUs, new
    job's slowdown) or None, the smallest bound violation seen as (ratio, words) or None)."""
    n_res, gpu_local = book.n_res, book.layout.gpu_local

    def opt_key(pos: int) -> tuple:
        return tuple(col[pos] for col in key_cols)

    best: tuple | None = None
    best_choice: tuple[int, list[int], float] | None = None
    worst_seen: tuple[float, str] | None = None  # smallest bound violation, for the reason
    for pos, i in enumerate(node_order.tolist()):
        if best is not None and best[: len(key_cols)] <= opt_key(pos):
            break
        chosen: list[int] = []
        left_sum = 0.0  # what sum(leftover of chosen) was, added in the same order
        sig_new = 1.0
        for q in range(int(first[i]), int(first[i] + counts[i])):
            g = int(idx[q])
            if not is_mig and n_res[g] > 0:
                ok, s_new, viol = check_bounds(book, g, profile, bound, model)
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
        locs = tuple(sorted(int(gpu_local[g]) for g in chosen))
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
    return best_choice, worst_seen


def _place_host_only(book: "Book", job_id, config, profile, bound, scorer, node_mask=None) -> PlaceOutcome:
    L = book.layout
    plan = candidates(book, config)
    if isinstance(plan, str):
        return PlaceOutcome(None, plan)
    nodes, _ = plan
    if node_mask is not None:
        nodes = nodes[node_mask[nodes]]
        if nodes.size == 0:
            return PlaceOutcome(None, "no candidate node")
    if scorer in ("bestfit", "elastico"):
        left = np.round(L.node_cpu[nodes] - book.node_cpu_used[nodes] - config.cpu, 9)
        n = int(nodes[np.lexsort((nodes, left))[0]])
    else:
        n = int(nodes[0])
    return PlaceOutcome(book.commit(job_id, config, profile, bound, n, []), "", 1.0)
