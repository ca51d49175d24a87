"""Gangs: a job split into pods, or one pod's GPUs spread over nodes, placed all or nothing.

A plain job's ``num_gpus`` GPUs are distinct GPUs of ONE node.  A :class:`Gang` splits a job
into pods (each on one node) or lets one pod span nodes, preferring one node, then one topology
domain (node label ``topology_key``), then anywhere, and never puts two pods of a job on one
GPU unless ``share_gpus`` (docs/placement.md, "Gangs and topology").

Owns: :class:`Gang`, its checks (:func:`validate_gang`) and :func:`place_gang` (the tiers, the
node-by-node filling, and the merge of the pods into one booking).
Who calls it: :class:`~elastico.placer.placement.ClusterState` (``place`` with a gang); the
live loop builds the :class:`Gang` of a multi-pod job.
Whom it calls: :func:`.scoring.place_pod` (each pod, under a temporary id),
:func:`.fit.unit_capacity`, the book (:meth:`~.book.Book.release`,
:meth:`~.book.Book.add`) and :func:`.interference.job_slowdown`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from elastico.errors import InvalidArgument
from elastico.model import Configuration
from elastico.predictor import JobProfile, SlowdownModel

from .assignment import Assignment, Part, PlaceOutcome
from .fit import gpu_phrase, unit_capacity
from .interference import job_slowdown
from .scoring import place_pod

if TYPE_CHECKING:
    from .book import Book
    from .frag_cache import FragIndex

__all__ = ["Gang", "ONE_POD", "validate_gang", "place_gang"]


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


ONE_POD = Gang()


def validate_gang(gang: Gang | None, config: Configuration) -> Gang:
    """``gang`` (None: :data:`ONE_POD`), or InvalidArgument."""
    if gang is None:
        return ONE_POD
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


def place_gang(book: "Book", frag: "FragIndex", job_id: str, config: Configuration, profile: JobProfile,
               bound: float, model: SlowdownModel, scorer: str, gang: Gang,
               node_mask: np.ndarray | None = None) -> PlaceOutcome:
    """All or nothing, several pods; ``node_mask`` [N]: only these nodes (None: any).

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
    L = book.layout
    k, P = config.num_gpus, gang.pods
    if P > 1:
        n_units, per_node = P, False
        unit = replace(config, num_gpus=k // P, cpu=config.cpu / P, mem_gib=config.mem_gib / P)
    else:
        n_units, per_node = k, True
        unit = replace(config, num_gpus=1, cpu=config.cpu / k, mem_gib=config.mem_gib / k)
    share_gpus = gang.share_gpus and P > 1
    # tier 1: one node
    if config.num_gpus <= L.model_max_gpus.get(config.gpu_model, 0):
        out = place_pod(book, frag, job_id, config, profile, bound, model, scorer, node_mask)
        if out.placed:
            return out if P == 1 else _split_pods(book, job_id, config, profile, bound, model,
                                                  out.assignment, P)
    cap = unit_capacity(book, unit, share_gpus)
    if node_mask is not None:
        cap = np.where(node_mask, cap, 0)
    best_seen = 0

    def attempt(nodes: np.ndarray):
        return _place_units(book, frag, job_id, unit, n_units, profile, bound, model, scorer,
                            nodes, cap, share_gpus)

    if share_gpus:
        for n in sorted(np.flatnonzero(cap >= n_units).tolist(), key=lambda n: (int(cap[n]), n)):
            res = attempt(np.array([n]))
            if isinstance(res, list):
                return _merge(book, job_id, config, profile, bound, model, res, per_node)
            best_seen = max(best_seen, res)
    # tier 2: one topology domain
    dom = L.domain
    if (dom >= 0).any():
        total = np.bincount(dom[dom >= 0], weights=np.minimum(cap[dom >= 0], n_units),
                            minlength=len(L.domain_names))
        doms = [d for d in np.flatnonzero(total >= n_units).tolist()]
        doms.sort(key=lambda d: (total[d], L.domain_names[d]))
        for d in doms:
            res = attempt(np.flatnonzero(dom == d))
            if isinstance(res, list):
                return _merge(book, job_id, config, profile, bound, model, res, per_node)
            best_seen = max(best_seen, res)
    # tier 3: anywhere
    if int(np.minimum(cap, n_units).sum()) >= n_units:
        res = attempt(np.arange(len(L.nodes)))
        if isinstance(res, list):
            return _merge(book, job_id, config, profile, bound, model, res, per_node)
        best_seen = max(best_seen, res)
    what = f"{n_units} pod(s) of {gpu_phrase(unit)}" if unit.num_gpus else f"{n_units} pod(s)"
    return PlaceOutcome(None, f"gang: no room for all {what} with cpu {unit.cpu:g} cores and "
                              f"memory {unit.mem_gib:g} GiB each at once (room for "
                              f"{int(np.minimum(cap, n_units).sum())} ignoring slowdown bounds, "
                              f"at most {best_seen} booked in one try; nothing kept)")


def _place_units(book: "Book", frag: "FragIndex", job_id, unit, n_units, profile, bound, model, scorer,
                 nodes: np.ndarray, cap: np.ndarray, share_gpus: bool):
    """Book ``n_units`` pods of ``unit`` under temporary ids on ``nodes``, node by node
    (:func:`place_gang`).  Returns the temporary assignments, still booked, or -- having
    released them all -- how many had fitted."""
    L = book.layout
    temps: list[Assignment] = []
    excl = None if share_gpus else np.zeros(L.num_gpus, dtype=bool)
    cands = [int(n) for n in nodes.tolist() if cap[n] > 0]
    mask = np.zeros(len(L.nodes), dtype=bool)
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
                out = place_pod(book, frag, f"{job_id}\x00pod{len(temps)}", unit, profile, bound,
                                model, scorer, mask, excl)
                if not out.placed:
                    break
                temps.append(out.assignment)
                if excl is not None:
                    excl[int(L.offset[n]) + np.array(out.assignment.gpu_indices, dtype=np.int64)] = True
    except BaseException:
        for a in temps:
            book.release(a.job_id)
        raise
    if len(temps) < n_units:
        for a in reversed(temps):
            book.release(a.job_id)
        return len(temps)
    return temps


def _merge(book: "Book", job_id, config, profile, bound, model, temps: list[Assignment],
           per_node: bool) -> PlaceOutcome:
    """Replace the temporary pods by one booking of ``job_id`` (the same resources)."""
    parts = [a.parts[0] for a in temps]
    for a in reversed(temps):
        book.release(a.job_id)
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
    a = book.add(job_id, config, profile, bound, tuple(parts))
    return PlaceOutcome(a, "", job_slowdown(book, job_id, model))


def _split_pods(book: "Book", job_id, config, profile, bound, model, a: Assignment, pods: int) -> PlaceOutcome:
    """Re-book a one-node placement of the whole job as ``pods`` equal pods (GPUs dealt
    in index order)."""
    book.release(job_id)
    pt = a.parts[0]
    g = len(pt.gpu_indices) // pods
    parts = tuple(Part(pt.node, pt.node_index, pt.gpu_indices[i * g:(i + 1) * g],
                       pt.cpu / pods, pt.mem_gib / pods, pt.mig_starts[i * g:(i + 1) * g])
                  for i in range(pods))
    b = book.add(job_id, config, profile, bound, parts)
    return PlaceOutcome(b, "", job_slowdown(book, job_id, model))
