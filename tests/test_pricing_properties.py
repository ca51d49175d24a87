"""Hypothesis properties of the ESP solver on small random MMKP instances, checked against
brute-force enumeration: feasibility and a valid dual bound, monotonicity in capacity,
fixed-shape (single-configuration) jobs, and invariance of the certificates under a
permutation of the jobs.

The builders ``random_instance`` / ``brute_force_optimum`` come from tests/mmkp_builders.py."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico.errors import Infeasible
from elastico.pricing import PricingResult, solve
from mmkp_builders import brute_force_optimum, random_instance

EPS = 1e-9
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- helpers ---------------------------------------------------------------------------

def families(u, d, off):
    return [(u[off[j]:off[j + 1]], d[off[j]:off[j + 1]]) for j in range(len(off) - 1)]


def assemble(fams):
    """(u, d, off) from a list of (u_j, d_j) families, in that order."""
    sizes = [len(fu) for fu, _ in fams]
    off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return (np.concatenate([fu for fu, _ in fams]), np.concatenate([fd for _, fd in fams]), off)


def tol(x: float) -> float:
    return EPS * max(1.0, abs(x))


def assert_feasible(res: PricingResult, u, d, off, cap) -> np.ndarray:
    """The choice is one valid index per job, fits the capacity, and the reported totals and
    primal value are those of the choice.  Returns the chosen item indices."""
    n = len(off) - 1
    assert res.choice.shape == (n,)
    assert np.all((res.choice >= 0) & (res.choice < np.diff(off)))
    items = off[:-1] + res.choice
    tot = d[items].sum(0)
    assert np.all(tot <= cap + EPS * np.maximum(cap, 1.0)), (tot, cap)
    np.testing.assert_allclose(res.totals, tot, rtol=1e-12, atol=1e-12)
    assert res.primal_value == pytest.approx(float(u[items].sum()), rel=1e-12, abs=1e-12)
    return items


instances = dict(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), r=st.integers(1, 3),
                 k=st.integers(2, 4), tight=st.floats(0.0, 1.5), integer=st.booleans())


# ---- (a) feasible choice, dual bound >= OPT ---------------------------------------------------

@SETTINGS
@given(wait=st.booleans(), **instances)
def test_choice_feasible_and_dual_bound_at_least_optimum(seed, n, r, k, tight, integer, wait):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, r, wait=wait, integer=integer, tight=tight)
    opt = brute_force_optimum(u, d, off, cap)
    if opt == -np.inf:  # only possible without a wait configuration
        assert not wait
        with pytest.raises(Infeasible):
            solve(u, d, off, cap, max_iterations=50)
        return
    try:
        res = solve(u, d, off, cap, max_iterations=50)
    except Infeasible:
        # A heuristic may miss a feasible choice, but only when some family has no
        # zero-demand configuration.
        assert not wait
        return
    assert_feasible(res, u, d, off, cap)
    assert res.primal_value <= opt + tol(opt)
    assert res.dual_bound >= opt - tol(opt)
    assert res.gap >= -1e-12


# ---- (b) raising one resource's capacity -----------------------------------------------------

@SETTINGS
@given(which=st.integers(0, 2), extra=st.floats(0.0, 2.0), **instances)
def test_raising_capacity_never_lowers_the_bounds_below_the_old_optimum(
        seed, n, r, k, tight, integer, which, extra):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, r, integer=integer, tight=tight)
    res_r = which % r
    cap2 = cap.copy()
    # extra x the largest demand of that resource (at least 1 unit so the raise is real)
    cap2[res_r] += extra * max(float(d[:, res_r].max()), 1.0)
    if integer:
        cap2 = np.floor(cap2)
    assert np.all(cap2 >= cap)
    opt = brute_force_optimum(u, d, off, cap)        # wait configurations: always finite
    res2 = solve(u, d, off, cap2, max_iterations=50)
    assert_feasible(res2, u, d, off, cap2)
    # OPT(cap') >= OPT(cap), and the dual bound at cap' is >= OPT(cap').
    assert res2.dual_bound >= opt - tol(opt)
    # The certificate at cap' bounds its primal's distance from OPT(cap') >= OPT(cap).
    assert res2.primal_value >= opt * (1.0 - res2.gap) - tol(opt)


# ---- (c) fixed-shape jobs --------------------------------------------------------------------

@SETTINGS
@given(services=st.integers(1, 3), where=st.randoms(use_true_random=False), **instances)
def test_single_configuration_jobs_get_index_0_and_count_in_totals(
        seed, n, r, k, tight, integer, services, where):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, r, integer=integer, tight=tight)
    fams = families(u, d, off)
    svc_demand = np.zeros(r)
    for _ in range(services):
        sd = (rng.integers(0, 10, (1, r)).astype(float) if integer
              else rng.uniform(0, 5, (1, r)))
        su = np.array([float(rng.uniform(0, 10))])
        pos = where.randint(0, len(fams))
        fams.insert(pos, (su, sd))
        svc_demand += sd[0]
    # Capacity covers the services on top of the original instance: always feasible (waits).
    cap = cap + svc_demand
    u, d, off = assemble(fams)
    svc_jobs = [j for j in range(len(off) - 1) if off[j + 1] - off[j] == 1]
    assert len(svc_jobs) == services
    res = solve(u, d, off, cap, max_iterations=50)
    items = assert_feasible(res, u, d, off, cap)
    assert np.all(res.choice[svc_jobs] == 0)
    # Every service's demand is counted: totals minus the services' = the elastic jobs'.
    elastic = np.setdiff1d(np.arange(len(off) - 1), svc_jobs)
    np.testing.assert_allclose(res.totals, d[items[elastic]].sum(0) + svc_demand, atol=1e-9)
    assert np.all(res.totals >= svc_demand - 1e-9)
    opt = brute_force_optimum(u, d, off, cap)
    assert res.primal_value <= opt + tol(opt) and res.dual_bound >= opt - tol(opt)


# ---- (d) permuting jobs ----------------------------------------------------------------------

@SETTINGS
@given(perm_seed=st.integers(0, 2**32 - 1), **instances)
def test_permuted_jobs_stay_within_both_certificates(seed, n, r, k, tight, integer, perm_seed):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, r, integer=integer, tight=tight)
    perm = np.random.default_rng(perm_seed).permutation(n)
    fams = families(u, d, off)
    up, dp, offp = assemble([fams[j] for j in perm])
    res = solve(u, d, off, cap, max_iterations=50)
    resp = solve(up, dp, offp, cap, max_iterations=50)
    assert_feasible(res, u, d, off, cap)
    assert_feasible(resp, up, dp, offp, cap)
    # The permuted choice, mapped back to the original job order, is a feasible choice of the
    # original instance with the same value (no assertion that it equals res.choice).
    back = np.empty(n, dtype=np.int64)
    back[perm] = resp.choice
    items_back = off[:-1] + back
    assert np.all(d[items_back].sum(0) <= cap + EPS * np.maximum(cap, 1.0))
    assert float(u[items_back].sum()) == pytest.approx(resp.primal_value, rel=1e-12, abs=1e-12)
    # Each primal value lies under both dual bounds (both certify the same OPT) ...
    opt = brute_force_optimum(u, d, off, cap)
    for p in (res.primal_value, resp.primal_value):
        assert p <= opt + tol(opt)
        assert p <= min(res.dual_bound, resp.dual_bound) + tol(opt)
    for b in (res.dual_bound, resp.dual_bound):
        assert b >= opt - tol(opt)
    # ... and each is within its own certified gap of OPT.
    for x in (res, resp):
        assert x.primal_value >= opt * (1.0 - x.gap) - tol(opt)
