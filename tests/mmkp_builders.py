"""Builders and the brute-force reference shared by the pricing tests (imported by
test_pricing_solver.py and test_pricing_properties.py; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import itertools

import numpy as np

EPS = 1e-9


def random_instance(rng: np.random.Generator, n: int, k_max: int, r: int, *, wait: bool = True,
                    integer: bool = False, tight: float | None = None):
    """N jobs with 2..k_max configurations (configuration 0 = wait when ``wait``), R resources.
    Capacity = ``tight`` x the total of every job's per-resource largest demand.
    Returns ``(utility[M], demand[M, R], offsets[N+1], capacity[R])``."""
    sizes = rng.integers(2, k_max + 1, size=n)
    off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    m = int(off[-1])
    if integer:
        d = rng.integers(0, 10, (m, r)).astype(float)
        u = np.round(d.sum(1) * rng.uniform(0.5, 1.5, m))
    else:
        d = rng.uniform(0, 5, (m, r))
        u = rng.uniform(0, 10, m)
    if wait:
        u[off[:-1]] = 0.0
        d[off[:-1]] = 0.0
    frac = tight if tight is not None else rng.uniform(0.2, 0.8)
    cap = np.maximum.reduceat(d, off[:-1], axis=0).sum(0) * frac
    if integer:
        cap = np.floor(cap)
    return u, d, off, cap


def brute_force_optimum(u, d, off, cap, tol=EPS) -> float:
    """Exact optimum by enumerating every choice (-inf when none is feasible)."""
    best = -np.inf
    fams = [range(off[j], off[j + 1]) for j in range(len(off) - 1)]
    for combo in itertools.product(*fams):
        c = list(combo)
        if np.all(d[c].sum(0) <= cap + tol):
            best = max(best, float(u[c].sum()))
    return best
