"""Co-location bound checks: would one more job on an MPS GPU push anyone past its bound?

No placement may push ANY resident's predicted slowdown (the new job's included) past that
resident's bound.  Slowdowns come from the residents of each MPS GPU
(``SlowdownModel.gpu_slowdowns``); MIG instances are isolated (slowdown 1.0); a job on several
GPUs has the max over its GPUs.

Owns: the bound check of adding a job to a GPU (:func:`check_bounds`, and
:func:`interference`, which also gives the GPU throughput the co-location costs), the words for
a violation, every placed job's predicted slowdown (:func:`predicted_slowdowns`,
:func:`job_slowdown`), and :func:`interference_loss` (the ``elastico`` scorer's dI).
Who calls it: the scorers (:mod:`.scoring`, :mod:`.elastico_scorer`), gang placement
(:mod:`.gangs`) and :class:`~elastico.placer.placement.ClusterState`.
Whom it calls: a :class:`elastico.predictor.SlowdownModel`; it reads a :class:`~.book.Book`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from elastico.predictor import JobProfile, SlowdownModel

from .assignment import EPS

if TYPE_CHECKING:
    from .book import Book

__all__ = ["interference_loss", "check_bounds", "interference", "violation", "predicted_slowdowns",
           "job_slowdown"]


def interference_loss(shares, slowdowns) -> float:
    """GPU throughput lost to co-location on one GPU, in GPUs: ``sum_j s_j (1 - 1/sigma_j)``
    for residents with booked share ``s_j`` (fraction of a GPU) and predicted slowdown
    ``sigma_j >= 1`` (a job slowed by sigma does the work of ``s / sigma`` of a GPU)."""
    s = np.asarray(shares, dtype=float)
    sig = np.asarray(slowdowns, dtype=float)
    return float((s * (1.0 - 1.0 / sig)).sum())


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


def check_bounds(book: "Book", g: int, profile: JobProfile, bound: float, model: SlowdownModel):
    """Would adding ``profile`` to MPS GPU ``g`` keep every resident within its bound?
    Returns (ok, new job's slowdown, (violation ratio, description))."""
    profiles, bounds = book.gpu_profiles(g)
    sig = np.asarray(model.gpu_slowdowns(profiles + [profile]), float)
    b = np.array(bounds + [bound])
    over = sig > b + EPS
    if not over.any():
        return True, float(sig[-1]), (0.0, "")
    ratio = sig / b
    w = int(np.argmax(ratio))
    return False, float(sig[-1]), (float(ratio[w]), violation(book, g, w, float(sig[w]), float(b[w])))


def interference(book: "Book", g: int, profile: JobProfile, share: float, bound: float,
                 model: SlowdownModel):
    """Bound check and interference increase of adding ``profile`` (``share`` of a GPU)
    to MPS GPU ``g``: (ok, new job's slowdown, violation, dI in GPUs).  The violation is
    None when ok, else :func:`check_bounds`' worst resident as ``(slowdown / bound, g,
    its position among the residents, its slowdown, its bound)``, put in words by
    :func:`violation` only if the placement fails."""
    if book.n_res[g] == 0:
        return True, 1.0, None, 0.0
    # check_bounds, sharing its slowdowns with dI; the bound test in plain Python (a GPU has
    # a handful of residents: numpy's per-call cost would dominate)
    profiles, bounds = book.gpu_profiles(g)
    sig = np.asarray(model.gpu_slowdowns(profiles + [profile]), float).tolist()
    bounds.append(bound)
    if any(s > b + EPS for s, b in zip(sig, bounds)):
        # the same float64 ratios and first-largest choice as check_bounds' numpy
        ratio = [s / b for s, b in zip(sig, bounds)]
        w = ratio.index(max(ratio))
        return False, sig[-1], (ratio[w], g, w, sig[w], bounds[w]), math.inf
    shares = [v[0] for v in book.gpu_jobs[g].values() for _ in range(v[2])]
    before = np.asarray(model.gpu_slowdowns(profiles), float).tolist() if len(profiles) >= 2 \
        else [1.0] * len(profiles)
    dI = _loss(shares + [share], sig) - _loss(shares, before)
    return True, sig[-1], None, max(0.0, dI)


def violation(book: "Book", g: int, w: int, sig: float, bound: float) -> str:
    """The words for resident ``w`` of GPU ``g`` (``w`` = their number: the new job)
    predicted at slowdown ``sig`` past its ``bound``."""
    L = book.layout
    res = book.residents(g)
    who = "the new job" if w == book.n_res[g] else f"job {res[w]}"
    beside = f" beside {', '.join(dict.fromkeys(res[:3]))}" if w == book.n_res[g] and res else ""
    n = int(L.gpu_node[g])
    return f"e.g. node {L.nodes[n].name} GPU {int(L.gpu_local[g])}: {who} predicted " \
           f"{sig:.3f} > bound {bound:.3f}{beside}"


def predicted_slowdowns(book: "Book", model: SlowdownModel) -> dict[str, float]:
    """Every placed job's predicted slowdown from its co-residents (1.0 alone or on MIG;
    max over a multi-GPU job's GPUs)."""
    out = {j: 1.0 for j in book.jobs}
    for f in np.flatnonzero((book.n_res >= 2) & ~book.layout.is_mig).tolist():
        profiles, _ = book.gpu_profiles(f)
        sig = model.gpu_slowdowns(profiles)
        for j, s in zip(book.residents(f), np.asarray(sig, float).tolist()):
            if s > out[j]:
                out[j] = s
    return out


def job_slowdown(book: "Book", job_id: str, model: SlowdownModel) -> float:
    """Predicted slowdown of one placed job (max over its GPUs; 1.0 alone or on MIG)."""
    a = book.jobs[job_id][0]
    offset, is_mig = book.layout.offset, book.layout.is_mig
    out = 1.0
    for n, gi in set(a.gpus):
        f = int(offset[n]) + gi
        if book.n_res[f] >= 2 and not is_mig[f]:
            profiles, _ = book.gpu_profiles(f)
            sig = np.asarray(model.gpu_slowdowns(profiles), float)
            for j, s in zip(book.residents(f), sig.tolist()):
                if j == job_id:
                    out = max(out, s)
    return out
