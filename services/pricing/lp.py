"""A small linear program solved by scipy's HiGHS without :func:`scipy.optimize.linprog`'s
per-call overhead, with linprog's answer to the last bit.

Who calls it: :meth:`elastico.pricing.solver._Boxstep.next_prices` (the price update's LP of
R + 1 variables and at most ``_MAX_CUTS`` rows, solved several times per round).  Why:
``linprog(method="highs")`` spends most of such a call outside the solver -- input cleaning,
a sparse matrix, and scipy's option validation, which builds HiGHS's whole option table
(``HighsOptionsManager``) once per option per call (measured, issue 19: ~80 % of the time of
``linprog`` on these LPs).  :func:`minimize` passes HiGHS the same model (the same CSC matrix,
bounds, row bounds with infinities as ``kHighsInf``) with the same options that
``linprog(method="highs")`` sets (scipy 1.17's ``_linprog_highs``: presolve on, dual simplex
strategy, no output) and applies linprog's own result check (``_check_result``), so its
``x`` is linprog's ``x`` bit for bit (``tests/test_pricing_lp.py`` checks it on random LPs).
When scipy's private HiGHS interface is not there (another scipy), it calls ``linprog``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["minimize"]


def _fast():
    """scipy's HiGHS bindings and linprog's helpers, or None when this scipy lacks them."""
    try:
        import scipy.optimize._highspy._core as h
        from scipy.optimize._linprog_util import _check_result
        from scipy.optimize._linprog_highs import _highs_to_scipy_status_message
    except ImportError:  # another scipy: linprog itself
        return None
    try:
        s_c = h.simplex_constants
        opts = (("presolve", "on"),
                ("highs_debug_level", h.HighsDebugLevel.kHighsDebugLevelNone),
                ("log_to_console", False), ("output_flag", False),
                ("simplex_strategy", s_c.SimplexStrategy.kSimplexStrategyDual))
    except AttributeError:
        return None
    return h, _check_result, _highs_to_scipy_status_message, opts


_FAST = _fast()


def minimize(cost: np.ndarray, a_ub: np.ndarray, b_ub: np.ndarray,
             bounds: np.ndarray) -> np.ndarray | None:
    """``argmin cost . x`` s.t. ``a_ub @ x <= b_ub``, ``bounds[:, 0] <= x <= bounds[:, 1]``
    (float64 arrays: ``cost`` [n], ``a_ub`` [m, n] dense, ``b_ub`` [m], ``bounds`` [n, 2] with
    ``-inf`` / ``inf`` for no bound), or None when ``linprog(cost, A_ub=a_ub, b_ub=b_ub,
    bounds=bounds, method="highs")`` would return a status other than 0 or no ``x``: its
    ``x`` otherwise, bit for bit (module docstring)."""
    cost = np.asarray(cost, dtype=float)
    a_ub = np.asarray(a_ub, dtype=float)
    b_ub = np.asarray(b_ub, dtype=float)
    bounds = np.asarray(bounds, dtype=float)
    if _FAST is None:
        from scipy.optimize import linprog

        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        return res.x if res.status == 0 and res.x is not None else None
    h, check_result, to_status, opts = _FAST
    n, m = cost.size, b_ub.size
    inf = h.kHighsInf
    lb, ub = bounds.T.copy()
    # as _linprog_highs' _replace_inf: +-inf -> +-kHighsInf
    lb[np.isinf(lb)] = np.sign(lb[np.isinf(lb)]) * inf
    ub[np.isinf(ub)] = np.sign(ub[np.isinf(ub)]) * inf
    rhs = b_ub.copy()
    rhs[np.isinf(rhs)] = np.sign(rhs[np.isinf(rhs)]) * inf
    lhs = np.full(m, -inf)
    # the CSC matrix scipy.sparse.csc_array(a_ub) holds: nonzeros column by column, rows
    # ascending
    nz = a_ub.T != 0
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(nz.sum(axis=1), out=indptr[1:])
    indices = np.nonzero(nz)[1].astype(np.int32)
    data = a_ub.T[nz]

    lp = h.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = m
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = m
    lp.a_matrix_.format_ = h.MatrixFormat.kColwise
    lp.col_cost_ = cost
    lp.col_lower_ = lb
    lp.col_upper_ = ub
    lp.row_lower_ = lhs
    lp.row_upper_ = rhs
    lp.a_matrix_.start_ = indptr
    lp.a_matrix_.index_ = indices
    lp.a_matrix_.value_ = data
    highs = h._Highs()
    options = h.HighsOptions()
    for key, val in opts:
        setattr(options, key, val)
    if highs.passOptions(options) == h.HighsStatus.kError:
        return None
    if highs.passModel(lp) == h.HighsStatus.kError:
        return None
    if highs.run() == h.HighsStatus.kError:
        return None
    model_status = highs.getModelStatus()
    if model_status != h.HighsModelStatus.kOptimal:
        return None
    info = highs.getInfo()
    solution = highs.getSolution()
    x = np.array(solution.col_value)
    status, _ = to_status(model_status, highs.modelStatusToString(model_status))
    slack = np.array((rhs - solution.row_value)[:m])
    status, _ = check_result(x, info.objective_function_value, status, slack, np.array([]),
                             bounds, 1e-9, "", None)
    return x if status == 0 else None
