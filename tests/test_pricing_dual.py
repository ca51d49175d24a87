"""The dual side of Elastic Shadow Pricing after issue 24: exact dominance pruning
(solver.dominance_prune), the BOXSTEP price update and the sampled-LP cold start keep the
certified bounds valid -- checked against brute-force optima, never against iteration counts
(those are bench/pricing.py's)."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.pricing import kernel, solve
from elastico.pricing.solver import dominance_prune
from mmkp_builders import brute_force_optimum, random_instance


def test_dominance_prune_hand_worked():
    # one job, R = 2: c0 wait (0; 0,0), c1 (5; 1,1), c2 (4; 1,2) dominated by c1 (more demand,
    # less utility), c3 (5; 1,1) identical to c1 (the later copy goes), c4 (6; 0,3) not dominated
    u = np.array([0.0, 5.0, 4.0, 5.0, 6.0])
    d = np.array([[0, 0], [1, 1], [1, 2], [1, 1], [0, 3]], dtype=float)
    off = np.array([0, 5])
    assert dominance_prune(u, d, off).tolist() == [True, True, False, False, True]


def test_dominance_prune_in_small_blocks_equals_one_block(monkeypatch):
    from elastico.pricing import solver

    rng = np.random.default_rng(3)
    u0, d0, off0, _ = random_instance(rng, n=40, k_max=6, r=3, integer=True)
    u, d, off = _with_dominated(rng, u0, d0, off0)
    whole = dominance_prune(u, d, off)
    monkeypatch.setattr(solver, "_PRUNE_CELLS", 1)  # one family per block
    assert np.array_equal(dominance_prune(u, d, off), whole)
    assert not whole.all()


def _with_dominated(rng, u, d, off):
    """Adds to every family a copy of a random member with more demand and no more utility,
    and an exact duplicate: both dominated."""
    us, ds, offs = [], [], [0]
    for j in range(off.shape[0] - 1):
        fu, fd = u[off[j]:off[j + 1]], d[off[j]:off[j + 1]]
        a, b = rng.integers(0, fu.shape[0], 2)
        us.append(np.concatenate((fu, [fu[a] - rng.uniform(0, 1), fu[b]])))
        ds.append(np.vstack((fd, fd[a] + rng.uniform(0, 1, fd.shape[1]), fd[b])))
        offs.append(offs[-1] + fu.shape[0] + 2)
    return np.concatenate(us), np.vstack(ds), np.array(offs, dtype=np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_dominance_pruning_keeps_the_optimum_and_the_dual(seed):
    rng = np.random.default_rng(seed)
    u0, d0, off0, cap = random_instance(rng, n=4, k_max=3, r=2, integer=bool(seed % 2))
    u, d, off = _with_dominated(rng, u0, d0, off0)
    keep = dominance_prune(u, d, off)
    assert not keep.all()  # the added duplicates at least go
    counts = np.add.reduceat(keep.astype(np.int64), off[:-1])
    assert np.all(counts >= 1)
    off_p = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    opt = brute_force_optimum(u, d, off, cap)
    assert brute_force_optimum(u[keep], d[keep], off_p, cap) == pytest.approx(opt, abs=1e-9)
    for _ in range(5):  # L(lam) is the same function: a dominated configuration never wins
        lam = rng.uniform(0, 3, cap.shape[0])
        full = kernel.reference_select(off, u, d, lam, cap)[2]
        pruned = kernel.reference_select(off_p, u[keep], d[keep], lam, cap)[2]
        assert pruned == pytest.approx(full, rel=1e-12, abs=1e-12)


def _tied_instance(rng, n):
    """Jobs tied between two 'GPU models': every non-wait configuration exists on model A
    (resources 0, 1) and on model B (resources 2, 3) with the same utility -- the family
    structure whose degenerate dual stalled the subgradient (issue 24).  Capacity: half of
    what every job's best configuration needs, so it binds."""
    us, ds, offs = [], [], [0]
    for _ in range(n):
        g = rng.integers(1, 3, 2)                # GPUs of two shapes
        mem = rng.uniform(1, 4, 2) * g
        x = rng.uniform(0.5, 1.0, 2) * g ** 0.8  # throughput
        fu = [0.0, x[0], x[1], x[0], x[1]]
        fd = [[0, 0, 0, 0], [g[0], mem[0], 0, 0], [g[1], mem[1], 0, 0],
              [0, 0, g[0], mem[0]], [0, 0, g[1], mem[1]]]
        us.extend(fu)
        ds.extend(fd)
        offs.append(offs[-1] + 5)
    u, d, off = np.array(us), np.array(ds, dtype=float), np.array(offs, dtype=np.int64)
    best = d[off[:-1] + np.array([1 + int(np.argmax(u[o + 1:o + 3])) for o in off[:-1]])]
    cap = np.array([best[:, 0].sum(), best[:, 1].sum()] * 2) * 0.25
    return u, d, off, cap


@pytest.mark.parametrize("seed", range(8))
def test_tied_families_keep_the_certified_gap_valid(seed):
    rng = np.random.default_rng(100 + seed)
    u, d, off, cap = _tied_instance(rng, 7)
    opt = brute_force_optimum(u, d, off, cap)
    res = solve(u, d, off, cap)
    assert np.all(res.totals <= cap + 1e-9 * np.maximum(cap, 1.0))
    assert res.primal_value <= opt + 1e-9
    assert res.dual_bound >= opt - 1e-9
    assert res.gap >= (res.dual_bound - opt) / max(abs(res.dual_bound), 1e-12) - 1e-12
    # the dual bound is L at the returned prices (an evaluated bound, not the cut model's)
    L = kernel.reference_select(off, u, d, res.prices, cap)[2]
    assert res.dual_bound == pytest.approx(L, rel=1e-9)


def test_tied_families_at_scale_bracket_the_lp_optimum():
    """200 tied jobs: the LP relaxation's optimum (HiGHS) lies between the primal and the
    dual bound, and the dual gets within 1 % of it (the LP value is the best any Lagrangian
    bound can give)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    rng = np.random.default_rng(7)
    u, d, off, cap = _tied_instance(rng, 200)
    m, n = u.shape[0], off.shape[0] - 1
    job = np.repeat(np.arange(n), np.diff(off))
    lp = linprog(-u, A_ub=sp.csr_matrix(d.T), b_ub=cap,
                 A_eq=sp.csr_matrix((np.ones(m), (job, np.arange(m))), shape=(n, m)),
                 b_eq=np.ones(n), bounds=(0, None), method="highs")
    assert lp.status == 0
    res = solve(u, d, off, cap)
    assert res.dual_bound >= -lp.fun - 1e-7 * abs(lp.fun)
    assert res.primal_value <= -lp.fun + 1e-9
    assert res.dual_bound <= -lp.fun * 1.01
