"""The ESP solver against independently computed optima: hand-worked numbers, brute-force
enumeration (small), an exact MILP (scipy/HiGHS, medium), the Khan MMKP benchmark (proven
optima), hypothesis properties, warm start and the float32 path."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from elastico.errors import Infeasible, InvalidArgument
from elastico.pricing import PricingResult, solve
from mmkp_builders import brute_force_optimum, random_instance

DATA = Path(__file__).parent / "data" / "mmkp"
EPS = 1e-9


# ---- builders and references ---------------------------------------------------------------


def milp_bounds(u, d, off, cap, time_limit=20.0) -> tuple[float, float]:
    """(incumbent value, proven upper bound) from HiGHS; equal when solved to optimality."""
    m, n = len(u), len(off) - 1
    rows = np.repeat(np.arange(n), np.diff(off))
    one = csr_matrix((np.ones(m), (rows, np.arange(m))), shape=(n, m))
    res = milp(-u, constraints=[LinearConstraint(one, 1, 1), LinearConstraint(d.T, -np.inf, cap)],
               integrality=np.ones(m), bounds=Bounds(0, 1),
               options={"time_limit": time_limit, "mip_rel_gap": 0.0})
    assert res.x is not None, res.message
    return -res.fun, -res.mip_dual_bound


def assert_sound(res: PricingResult, u, d, off, cap, opt_low: float, opt_high: float) -> None:
    """Feasible choice, primal = its utility, primal <= OPT <= dual, reported gap >= true gap.
    ``opt_low <= OPT <= opt_high`` come from the reference."""
    n = len(off) - 1
    assert res.choice.shape == (n,) and res.choice.dtype == np.int64
    sizes = np.diff(off)
    assert np.all((res.choice >= 0) & (res.choice < sizes))
    items = off[:-1] + res.choice
    tot = d[items].sum(0)
    assert np.all(tot <= cap + 1e-9 * np.maximum(cap, 1)), (tot, cap)
    np.testing.assert_allclose(res.totals, tot, rtol=1e-12, atol=1e-12)
    assert res.primal_value == pytest.approx(float(u[items].sum()), rel=1e-12, abs=1e-12)
    assert np.all(res.prices >= 0) and res.prices.shape == cap.shape
    assert res.primal_value <= opt_high + EPS * max(1.0, abs(opt_high))
    assert opt_low <= res.dual_bound + EPS * max(1.0, abs(opt_low))
    true_gap = (opt_low - res.primal_value) / max(abs(res.dual_bound), 1e-12)
    assert res.gap >= true_gap - 1e-12
    assert res.gap == pytest.approx((res.dual_bound - res.primal_value) / max(abs(res.dual_bound), 1e-12))


# ---- hand-worked ---------------------------------------------------------------------------

def test_hand_worked_two_jobs_one_resource():
    # capacity 2 of one resource.  Job A: wait (u 0, d 0), a1 (u 3, d 1), a2 (u 5, d 2).
    # Job B: wait, b1 (u 4, d 1).  Feasible choices: (a1, b1) = 7 uses 2; (a2, wait) = 5;
    # (a2, b1) uses 3 > 2.  OPT = 7 at (a1, b1).
    # Dual: L(lam) = max(0, 3 - lam, 5 - 2 lam) + max(0, 4 - lam) + 2 lam.
    #   L(0) = 5 + 4 = 9;  L(1) = 3 + 3 + 2 = 8;  for 2 <= lam <= 3: (3 - lam) + (4 - lam) + 2 lam = 7;
    #   L(4) = 0 + 0 + 8 = 8.  So min L = 7 = OPT on [2, 3]: zero duality gap.
    u = np.array([0.0, 3.0, 5.0, 0.0, 4.0])
    d = np.array([[0.0], [1.0], [2.0], [0.0], [1.0]])
    off = np.array([0, 3, 5])
    cap = np.array([2.0])
    res = solve(u, d, off, cap)
    assert res.choice.tolist() == [1, 1]
    assert res.primal_value == 7.0
    assert res.dual_bound == pytest.approx(7.0, abs=1e-12)
    assert res.gap == pytest.approx(0.0, abs=1e-12)
    assert 2.0 - 1e-12 <= res.prices[0] <= 3.0 + 1e-12


def test_unconstrained_instance_takes_every_best_configuration_at_zero_prices():
    # Capacity 100 exceeds everything: OPT = 5 + 4 = 9 = L(0), prices stay 0.
    u = np.array([0.0, 3.0, 5.0, 0.0, 4.0])
    d = np.array([[0.0], [1.0], [2.0], [0.0], [1.0]])
    res = solve(u, d, np.array([0, 3, 5]), np.array([100.0]))
    assert res.choice.tolist() == [2, 1] and res.primal_value == 9.0 and res.dual_bound == 9.0
    assert res.prices.tolist() == [0.0] and res.iterations == 1


def test_zero_jobs():
    res = solve(np.zeros(0), np.zeros((0, 2)), np.array([0]), np.array([1.0, 1.0]))
    assert res.choice.shape == (0,) and res.primal_value == 0.0 and res.dual_bound == 0.0


# ---- brute force -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_small_instances_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n, r = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        u, d, off, cap = random_instance(rng, n, 4, r, integer=bool(rng.integers(2)))
        opt = brute_force_optimum(u, d, off, cap)
        assert_sound(solve(u, d, off, cap), u, d, off, cap, opt, opt)


def test_small_instances_without_wait_against_brute_force():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(80):
        n, r = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        u, d, off, cap = random_instance(rng, n, 4, r, wait=False, tight=rng.uniform(0.5, 1.0))
        opt = brute_force_optimum(u, d, off, cap)
        if opt == -np.inf:
            with pytest.raises(Infeasible):
                solve(u, d, off, cap)
            continue
        try:
            res = solve(u, d, off, cap)
        except Infeasible:  # a heuristic may miss a feasible choice; must be rare
            continue
        assert_sound(res, u, d, off, cap, opt, opt)
        checked += 1
    assert checked >= 50


def test_proven_infeasible_instance_names_the_resource():
    # Both jobs need >= 2 units of resource 0 whatever they pick; capacity 3.
    u = np.array([1.0, 2.0, 1.0])
    d = np.array([[2.0, 0.0], [3.0, 0.0], [2.0, 0.0]])
    with pytest.raises(Infeasible, match=r"capacity\[0\]: 3.0 is less than 4.0"):
        solve(u, d, np.array([0, 2, 3]), np.array([3.0, 1.0]))


def test_configuration_larger_than_capacity_is_never_chosen():
    # Job 0's only non-wait configuration needs 5 > capacity 4: it is dropped up front.
    u = np.array([0.0, 100.0, 0.0, 1.0])
    d = np.array([[0.0], [5.0], [0.0], [1.0]])
    res = solve(u, d, np.array([0, 2, 4]), np.array([4.0]))
    assert res.choice.tolist() == [0, 1] and res.primal_value == 1.0 and res.dual_bound == pytest.approx(1.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), r=st.integers(1, 3),
       k=st.integers(2, 4), tight=st.floats(0.0, 1.5), integer=st.booleans())
def test_property_feasible_and_bounds_valid(seed, n, r, k, tight, integer):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, r, integer=integer, tight=tight)
    opt = brute_force_optimum(u, d, off, cap)
    res = solve(u, d, off, cap, max_iterations=50)
    assert_sound(res, u, d, off, cap, opt, opt)


# ---- exact MILP on medium instances ----------------------------------------------------------

@pytest.mark.parametrize("seed,n,k", [(11, 40, 6), (12, 60, 8), (13, 80, 10)])
def test_medium_instances_against_milp(seed, n, k):
    rng = np.random.default_rng(seed)
    u, d, off, cap = random_instance(rng, n, k, 4, integer=True, tight=0.4)
    lo, hi = milp_bounds(u, d, off, cap)
    res = solve(u, d, off, cap)
    assert_sound(res, u, d, off, cap, lo, hi)
    assert (hi - res.primal_value) / hi < 0.02   # measured: 0.0-0.7 %
    assert res.gap < 0.05                           # measured: 0.1-1.2 %


# ---- Khan MMKP benchmark (no zero-demand item; proven optima) ---------------------------------

def read_khan(path: Path):
    """Parses a Khan MMKP file (format in tests/data/mmkp/PROVENANCE.md)."""
    tok = path.read_text().split()
    n, l, m = (int(t) for t in tok[:3])
    pos = 3
    cap = np.array(tok[pos:pos + m], float)
    pos += m
    u, d = [], []
    for g in range(n):
        assert int(tok[pos]) == g + 1
        pos += 1
        for _ in range(l):
            u.append(float(tok[pos]))
            d.append([float(t) for t in tok[pos + 1:pos + 1 + m]])
            pos += 1 + m
    return np.array(u), np.array(d), np.arange(n + 1, dtype=np.int64) * l, cap


KHAN_OPT = {line.split()[0]: -float(line.split()[1]) for line in (DATA / "mmkp.opt").read_text().splitlines()}


LP_BOUND = {"I01": 182.7145, "I02": 365.5769, "I03": 1626.5914, "I04": 3631.3607, "I05": 3905.9,
            "I06": 4812.8167}  # LP relaxation optima, scipy.optimize.linprog (HiGHS)


@pytest.mark.parametrize("name", ["I01", "I02", "I03", "I04", "I05", "I06"])
def test_khan_mmkp_bounds_bracket_the_proven_optimum(name):
    u, d, off, cap = read_khan(DATA / name)
    opt = KHAN_OPT[name]
    res = solve(u, d, off, cap, max_iterations=300)
    assert_sound(res, u, d, off, cap, opt, opt)
    # The LP bound itself (linprog) is 182.71 / 365.58 / 1626.59 / 3631.36 / 3905.90 / 4812.82:
    # on I01 (5 groups) it is 5.6 % above OPT, so no dual method certifies better there.
    assert res.gap < 0.06
    assert (res.dual_bound - LP_BOUND[name]) / LP_BOUND[name] < 1e-3


# ---- warm start, float32, threads --------------------------------------------------------------

def test_warm_start_reaches_the_same_dual_bound_sooner():
    rng = np.random.default_rng(21)
    u, d, off, cap = random_instance(rng, 300, 8, 4, tight=0.4)
    cold = solve(u, d, off, cap, max_iterations=200, gap_tolerance=1e-3)
    warm = solve(u, d, off, cap, initial_prices=cold.prices, max_iterations=200, gap_tolerance=1e-3)
    assert warm.iterations <= cold.iterations
    assert warm.dual_bound <= cold.dual_bound + 1e-9 * abs(cold.dual_bound)
    # One evaluation at the warm prices already gives the cold run's best bound; a cold single
    # evaluation (at prices 0) is far worse.
    one_warm = solve(u, d, off, cap, initial_prices=cold.prices, max_iterations=1)
    one_cold = solve(u, d, off, cap, max_iterations=1)
    assert one_warm.dual_bound == pytest.approx(cold.dual_bound, rel=1e-12)
    assert one_cold.dual_bound > cold.dual_bound * 1.01
    assert cold.iterations > 1


def test_float32_and_threads_keep_the_bound_sound():
    rng = np.random.default_rng(5)
    u, d, off, cap = random_instance(rng, 60, 8, 4, integer=True, tight=0.4)
    lo, hi = milp_bounds(u, d, off, cap)
    for dtype, nthreads in [("float32", 1), ("float64", 2), ("float32", 2)]:
        res = solve(u, d, off, cap, dtype=dtype, nthreads=nthreads)
        assert_sound(res, u, d, off, cap, lo, hi)
        assert res.gap < 0.05


# ---- the thinned primal schedule the scheduling round uses -------------------------------

@pytest.mark.parametrize("every", [1, 5, 20])
def test_thinned_primal_schedule_stays_sound(every):
    rng = np.random.default_rng(100 + every)
    for _ in range(25):
        n, r = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        u, d, off, cap = random_instance(rng, n, 4, r)
        opt = brute_force_optimum(u, d, off, cap)
        res = solve(u, d, off, cap, max_iterations=20, primal_every=every)
        assert_sound(res, u, d, off, cap, opt, opt)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_primal_every_must_be_a_positive_integer(bad):
    from elastico.errors import InvalidArgument

    u, d, off, cap = random_instance(np.random.default_rng(0), 3, 3, 2)
    with pytest.raises(InvalidArgument, match="primal_every"):
        solve(u, d, off, cap, primal_every=bad)


def test_utilities_whose_per_job_sum_overflows_are_refused():
    # each utility is finite, but one per job sums past the float64 maximum (1.8e308): the
    # objective of choosing both would be inf, so the instance is refused up front
    with pytest.raises(InvalidArgument, match=r"utility: 'largest \|utility\| of jobs 0\.\.1"):
        solve([0.0, 1.7e308, 0.0, -1.7e308], [[0.0], [1.0], [0.0], [1.0]], [0, 2, 4], [2.0])
    # just below the limit is solved: both fit
    res = solve([0.0, 8e307, 0.0, 8e307], [[0.0], [1.0], [0.0], [1.0]], [0, 2, 4], [2.0])
    assert list(res.choice) == [1, 1] and math.isfinite(res.primal_value)


@pytest.mark.parametrize("field, u, d, cap", [
    ("demand[1, 0]", [0.0, 1.0], [[0.0], [1e39]], [2e39]),
    ("utility[1]", [0.0, -1e39], [[0.0], [1.0]], [2.0]),
    ("capacity[0]", [0.0, 1.0], [[0.0], [1.0]], [1e39]),
])
def test_float32_refuses_values_beyond_its_range(field, u, d, cap):
    # cast to float32 these would be inf (max 3.4e38): refused, where float64 solves them
    with pytest.raises(InvalidArgument, match=rf"{re.escape(field)}: .* with dtype float32"):
        solve(u, d, [0, 2], cap, dtype="float32")
    assert solve(u, d, [0, 2], cap).choice.shape == (1,)


@pytest.mark.parametrize("dtype, price, ok", [
    ("float64", 5e307, True),    # prices . capacity = 1.5e308: still finite
    ("float64", 1e308, False),   # 3e308: the dual bound was inf and the gap NaN
    ("float32", 1e38, True),     # 3e38 < 3.4e38
    ("float32", 1e39, False),    # not a float32 at all
])
def test_warm_start_prices_whose_costs_overflow_are_refused(dtype, price, ok):
    # two jobs, capacity [1, 2]; job 1's [1, 2] item (utility 2) is the optimum, value 2
    u, d, off, cap = [0, 1, 0, 2], [[0, 0], [1, 1], [0, 0], [1, 2]], [0, 2, 4], [1, 2]
    if ok:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            r = solve(u, d, off, cap, initial_prices=[price, price], max_iterations=30,
                      dtype=dtype)
        assert r.primal_value == 2.0 and math.isfinite(r.gap) and r.gap <= 1e-9
    else:
        with pytest.raises(InvalidArgument, match=r"^initial_prices"):
            solve(u, d, off, cap, initial_prices=[price, price], dtype=dtype)


def test_a_choice_inside_the_feasibility_tolerance_stays_under_the_bound():
    # two items of 500000.0004 on a capacity of 1e6: 8e-4 over, inside 1e-9 x 1e6 = 1e-3, so
    # both count as fitting (value 2); the bound is of that relaxed instance, so >= 2
    r = solve([0, 1, 0, 1], [[0], [500000.0004], [0], [500000.0004]], [0, 2, 4], [1e6])
    assert list(r.choice) == [1, 1] and r.primal_value == 2.0
    assert r.dual_bound >= r.primal_value and 0.0 <= r.gap <= 1e-9


# ---- native primal heuristics against their numpy references --------------------------------


def _primal_cases():
    from elastico.pricing.solver import _Instance

    rng = np.random.default_rng(2024)
    for case in range(240):
        r = [1, 2, 3, 4, 7, 8, 9, 12, 20][case % 9]
        n = int(rng.integers(1, 60))
        integer = case % 2 == 0  # integer data: many exact ratio ties
        u, d, off, cap = random_instance(rng, n, int(rng.integers(2, 12)), r, integer=integer,
                                         wait=case % 5 != 0, tight=float(rng.uniform(0.1, 0.9)))
        if case % 7 == 0:
            cap[int(rng.integers(r))] = 0.0  # a zero-capacity resource (scale 1)
        try:
            inst = _Instance(u, d, off, cap)
        except Infeasible:
            continue
        # starts: random choices (mostly infeasible), the smallest configurations
        starts = [inst.starts + np.array([rng.integers(0, k) for k in np.diff(inst.off)],
                                         dtype=np.int64) for _ in range(3)]
        starts.append(inst.smallest())
        weights = [np.ones(r), rng.uniform(0, 2, r), rng.integers(0, 3, r).astype(float),
                   np.zeros(r)]
        yield inst, starts, weights, rng


def test_native_fill_and_repair_equal_the_numpy_references():
    n_fill = n_repair = n_repaired = 0
    for inst, starts, weights, rng in _primal_cases():
        for items in starts:
            T = inst.totals(items)
            fixed = items
            if not inst.feasible(T):
                # the repair's key at prices 0 (utility loss), integer prices (many ties) and
                # random prices
                nr = inst.cap.shape[0]
                for prices in (np.zeros(nr), rng.integers(0, 3, nr).astype(float),
                               rng.uniform(0, 2, nr)):
                    a = inst.repair(items, T, prices)
                    b = inst._repair_numpy(items, T, prices)
                    n_repair += 1
                    assert (a is None) == (b is None)
                    if a is None:
                        continue
                    n_repaired += 1
                    assert a.dtype == np.int64
                    np.testing.assert_array_equal(a, b)
                    assert inst.feasible(inst.totals(a))
                    fixed = a
                if fixed is items:
                    continue
            Tf = inst.totals(fixed)
            for w in weights:
                for rounds in (1, 3, 30, 300):
                    i1, t1, x1 = inst.fill(fixed, Tf, w, rounds=rounds)
                    i2, t2, x2 = inst._fill_numpy(fixed, Tf, w, rounds=rounds)
                    assert x1 == x2
                    n_fill += 1
                    np.testing.assert_array_equal(i1, i2)
                    np.testing.assert_array_equal(t1, t2)  # bit-identical totals
                    assert inst.feasible(t1)
    assert n_fill > 1000 and n_repair > 600 and n_repaired > 300, (n_fill, n_repair, n_repaired)


def test_native_primal_does_not_modify_its_inputs():
    from elastico.pricing.solver import _Instance

    u, d, off, cap = random_instance(np.random.default_rng(5), 30, 6, 3, tight=0.3)
    inst = _Instance(u, d, off, cap)
    items = inst.starts + np.array([k - 1 for k in np.diff(inst.off)], dtype=np.int64)
    T = inst.totals(items)
    i0, T0 = items.copy(), T.copy()
    fixed = inst.repair(items, T, np.ones(3))
    assert fixed is not None and inst.feasible(inst.totals(fixed))
    np.testing.assert_array_equal(items, i0)
    np.testing.assert_array_equal(T, T0)
    inst.fill(fixed, inst.totals(fixed), np.ones(3))
    assert inst.feasible(inst.totals(fixed))


def test_native_primal_rejects_items_outside_their_family():
    from elastico.pricing import kernel

    off = np.array([0, 2, 4], dtype=np.int64)
    u = np.array([0.0, 1.0, 0.0, 1.0])
    d = np.zeros((4, 1))
    one = np.ones(1)
    with pytest.raises(ValueError, match="items"):
        kernel.greedy_fill(off, u, d, one, one * 0, one, one, np.array([0, 1]), np.zeros(1), 3)
    with pytest.raises(ValueError, match="items"):
        kernel.repair(off, u, d, one, one * 0, one, u, np.array([2, 3]), np.zeros(1), 3)
    with pytest.raises(ValueError, match="values"):
        kernel.repair(off, u, d, one, one * 0, one, one, np.array([1, 3]), np.zeros(1), 3)


# ---- reconfiguration cost (hysteresis) ---------------------------------------------------------

def test_switch_cost_moves_a_running_job_only_when_the_gain_beats_it():
    # One job, family [wait (0), 1 GPU (u 1.0), 2 GPUs (u 1.6)], 2 GPUs free, running at 1 GPU.
    # Moving to 2 GPUs gains 0.6: it moves when the switch cost is 0.5, stays at 0.7.
    u = np.array([0.0, 1.0, 1.6])
    d = np.array([[0.0], [1.0], [2.0]])
    off = np.array([0, 3])
    cap = np.array([2.0])
    moved = solve(u, d, off, cap, current=np.array([1]), switch_cost=np.array([0.5]))
    assert moved.choice.tolist() == [2] and moved.changed.tolist() == [True]
    assert moved.primal_value == pytest.approx(1.6 - 0.5)  # charged utilities
    stays = solve(u, d, off, cap, current=np.array([1]), switch_cost=np.array([0.7]))
    assert stays.choice.tolist() == [1] and stays.changed.tolist() == [False]
    assert stays.primal_value == 1.0
    fresh = solve(u, d, off, cap, current=np.array([-1]), switch_cost=np.array([0.7]))
    assert fresh.choice.tolist() == [2] and fresh.changed.tolist() == [False]  # not running


def test_switch_cost_result_is_the_brute_force_optimum_of_the_charged_problem():
    from elastico.pricing.utilities import charge_switch

    rng = np.random.default_rng(11)
    for _ in range(25):
        u, d, off, cap = random_instance(rng, 5, 4, 2, tight=0.5)
        n = off.shape[0] - 1
        sizes = np.diff(off)
        cur = np.where(rng.uniform(size=n) < 0.6, rng.integers(0, sizes), -1)
        cost = rng.uniform(0, 1.0, n)
        res = solve(u, d, off, cap, current=cur, switch_cost=cost, gap_tolerance=0.0,
                    max_iterations=400)
        charged = charge_switch(u, off, cur, cost)
        opt = brute_force_optimum(charged, d, off, cap)
        assert res.dual_bound >= opt - 1e-9 and res.primal_value <= opt + 1e-9
        assert res.changed.tolist() == [bool(c >= 0 and k != c) for k, c in zip(res.choice, cur)]


def test_switch_cost_from_restart_time():
    from elastico.pricing import switch_cost

    # u_cur * restart / max(remaining, restart): 2 * 30/300, 1 * 30/30 (finishes within a restart)
    got = switch_cost([2.0, 1.0, 0.5], [300.0, 10.0, 60.0], 30.0)
    assert got.tolist() == pytest.approx([0.2, 1.0, 0.25])
    assert switch_cost([2.0], [300.0], 0.0).tolist() == [0.0]
    with pytest.raises(InvalidArgument, match="restart_s"):
        switch_cost([1.0], [1.0], -1.0)
