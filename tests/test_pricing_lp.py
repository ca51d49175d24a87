"""elastico.pricing.lp.minimize returns linprog(method="highs")'s x bit for bit (or None where
linprog's status is not 0), on random LPs of the price update's form (BOXSTEP,
elastico.pricing.solver: R box-bounded prices and one free model variable, cutting planes)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import OptimizeWarning, linprog

from elastico.pricing.lp import minimize


def _linprog_x(cost, A, b, lo, hi):
    res = linprog(cost, A_ub=A, b_ub=b, bounds=list(zip(lo, hi)) + [(None, None)],
                  method="highs")
    return res.x if res.status == 0 and res.x is not None else None


@given(st.integers(1, 12), st.integers(1, 30), st.integers(0, 2**32 - 1),
       st.floats(1e-6, 50.0), st.booleans())
@settings(max_examples=150, deadline=None)
def test_minimize_is_linprogs_x_bit_for_bit(R, cuts, seed, width, sparse):
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(cuts, R)) * rng.choice([1e-3, 1.0, 1e3], size=(cuts, 1))
    if sparse:
        G[rng.random(G.shape) < 0.5] = 0.0
    mus = rng.random((cuts, R)) * 3
    Ls = rng.normal(size=cuts) * 10
    A = np.hstack((G, -np.ones((cuts, 1))))
    b = np.array([float(g @ m) - L for g, m, L in zip(G, mus, Ls)])
    centre = rng.random(R) * 3
    lo = np.maximum(centre - width, 0.0)
    hi = np.where(rng.random(R) < 0.2, 0.0, centre + width)
    cost = np.zeros(R + 1)
    cost[R] = 1.0
    want = _linprog_x(cost, A, b, lo, hi)
    got = minimize(cost, A, b, np.column_stack((np.append(lo, -np.inf), np.append(hi, np.inf))))
    if want is None:
        assert got is None
    else:
        assert got is not None and got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()  # the same bits, -0.0 included


def test_an_unbounded_model_is_refused_as_linprog_refuses_it():
    # no cut bounds the model variable from below: unbounded -> None from both
    cost = np.array([0.0, 1.0])
    A = np.array([[1.0, 0.0]])
    b = np.array([1.0])
    assert _linprog_x(cost, A, b, [0.0], [1.0]) is None
    assert minimize(cost, A, b, np.array([[0.0, 1.0], [-np.inf, np.inf]])) is None


def test_linprog_sets_every_option_we_set_without_a_warning():
    # minimize sets the options linprog sets; linprog refusing one (an OptimizeWarning and
    # the option left at its default) would make them differ
    with warnings.catch_warnings():
        warnings.simplefilter("error", OptimizeWarning)
        _linprog_x(np.array([0.0, 1.0]), np.array([[1.0, -1.0]]), np.array([0.0]), [0.0], [1.0])
