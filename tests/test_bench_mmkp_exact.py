"""bench/mmkp_exact.py, the exact reference the ESP benchmarks compare against: its optimum and
its "optimal" flag agree with brute-force enumeration, also at the tiny utility scale of the
``jct`` utility (round objectives ~1e-2..1e-6), where HiGHS's absolute gap alone would stop
short of the optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from bench_loader import load_bench


def _exact():
    return load_bench("mmkp_exact")


def _brute(u, d, off, cap):
    k = off[1] - off[0]
    n = len(off) - 1
    best = -np.inf
    for ch in itertools.product(range(k), repeat=n):
        items = off[:-1] + np.array(ch)
        if (d[items].sum(0) <= cap + 1e-12).all():
            best = max(best, float(u[items].sum()))
    return best


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_the_exact_optimum_matches_brute_force_at_every_utility_scale(scale):
    solve_exact = _exact().solve_exact
    rng = np.random.default_rng(1)
    n, k = 6, 4
    off = np.arange(0, n * k + 1, k)
    for _ in range(25):
        u = rng.uniform(0.1, 1, n * k)
        u[off[:-1]] = 0.0  # wait: nothing, uses nothing
        d = rng.uniform(0, 1, (n * k, 2))
        d[off[:-1]] = 0.0
        cap = np.full(2, 1.6)
        best = _brute(u, d, off, cap) * scale
        r = solve_exact(u * scale, d, off, cap)
        assert r.optimal
        assert r.value == pytest.approx(best, rel=1e-9)
        assert r.bound == pytest.approx(best, rel=1e-9)
        items = off[:-1] + r.choice
        assert (d[items].sum(0) <= cap + 1e-9).all()


def test_a_result_short_of_its_bound_is_not_called_optimal():
    mod = _exact()
    r = mod.ExactResult(np.zeros(1, dtype=np.int64), 1.0, 1.0001, 0, 1.0)
    assert not r.optimal  # status 0, but the bound is 1e-4 above the value
    assert mod.ExactResult(np.zeros(1, dtype=np.int64), 1.0, 1.0, 0, 1.0).optimal
    assert not mod.ExactResult(None, None, 2.0, 1, 1.0).optimal
