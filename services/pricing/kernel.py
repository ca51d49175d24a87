"""The only Python caller of the native core :mod:`elastico._native` (STYLE.md 7, 10).

Per-job configuration selection under shadow prices, the hot inner loop of Elastic Shadow
Pricing (docs/pricing.md, section 2).  For a CSR batch of shape families (job ``j`` owns
configurations ``[offsets[j], offsets[j+1])``), utilities ``u[M]``, demands ``d[M, R]`` and
prices ``lam[R] >= 0`` it returns

* ``choice[j] = argmax_{c in family j} u[c] - lam . d[c]`` (index within the family; lowest
  index on ties),
* ``totals[r] = sum_j d[choice_j, r]`` (the Lagrangian choice's total demand),
* ``lagrangian = sum_j max_c (u[c] - lam . d[c]) + lam . capacity``, the Lagrangian dual value
  L(lam), an upper bound on the MMKP optimum for every ``lam >= 0`` (weak duality).

:func:`select` validates everything on every call.  The solver validates an instance once and
then calls :meth:`PreparedInstance.select` every iteration, which only converts the prices.
Callers: :mod:`elastico.pricing.solver`, tests and ``bench/bench_pricing.py``.

It also exposes the solver's primal heuristics (docs/pricing.md, section 4) in C++:
:func:`greedy_fill` and :func:`repair` (native/primal.hpp), float64 only, bit-identical to the
numpy references ``_fill_numpy`` / ``_repair_numpy`` in :mod:`elastico.pricing.solver`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from elastico import _native
from elastico.pricing import validation as v

__all__ = ["select", "prepare", "prepare_checked", "PreparedInstance", "reference_select", "greedy_fill", "repair",
           "argmin_per_job", "column_max", "lagrangian_values"]

_FUNCS = {"float64": _native.select_f64, "float32": _native.select_f32}


@dataclass(frozen=True)
class PreparedInstance:
    """A validated instance converted once to the kernel's dtype (contiguous arrays).

    ``offsets`` int64[N+1]; ``utility`` [M], ``demand`` [M, R], ``capacity`` [R] in ``dtype``
    (float64 or float32); ``nthreads`` worker threads of the native loop.
    """

    offsets: np.ndarray
    utility: np.ndarray
    demand: np.ndarray
    capacity: np.ndarray
    dtype: np.dtype
    nthreads: int

    @property
    def n_jobs(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def n_resources(self) -> int:
        return self.demand.shape[1]

    def select(self, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Selection at ``prices`` (float64[R], finite, >= 0: the caller's guarantee; not
        re-checked).  Returns ``(choice int64[N], totals float64[R], lagrangian float)``;
        ``lagrangian`` is accumulated in double but, on the float32 path, from float32
        per-job values (see :mod:`elastico.pricing.solver` for how the bound stays sound)."""
        p = np.ascontiguousarray(prices, dtype=self.dtype)
        choice, totals, lagr = _FUNCS[self.dtype.name](
            self.offsets, self.utility, self.demand, p, self.capacity, self.nthreads)
        return choice, np.asarray(totals, dtype=np.float64), float(lagr)


def prepare(offsets: Any, utility: Any, demand: Any, capacity: Any, *,
            dtype: Any = "float64", nthreads: int = 1) -> PreparedInstance:
    """Validates an instance (raises :class:`elastico.errors.InvalidArgument`) and converts it
    for repeated :meth:`PreparedInstance.select` calls."""
    u, d, off, cap = v.check_instance(utility, demand, offsets, capacity)
    dt = v.check_dtype(dtype)
    v.check_fits_dtype(dt, utility=u, demand=d, capacity=cap)
    return prepare_checked(off, u, d, cap, dt, v.check_nthreads(nthreads))


def prepare_checked(offsets: np.ndarray, utility: np.ndarray, demand: np.ndarray,
                    capacity: np.ndarray, dtype: np.dtype, nthreads: int) -> PreparedInstance:
    """:func:`prepare` for arrays the caller has already checked
    (:func:`elastico.pricing.validation.check_instance`, ``check_dtype``, ``check_nthreads``):
    the solver validates once and must not pay for it twice."""
    return PreparedInstance(offsets, utility.astype(dtype, copy=False),
                            demand.astype(dtype, copy=False), capacity.astype(dtype, copy=False),
                            dtype, nthreads)


def select(offsets: Any, utility: Any, demand: Any, prices: Any, capacity: Any, *,
           dtype: Any = "float64", nthreads: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """Validated per-job selection (module docstring).  Shapes: ``offsets`` [N+1] integers,
    ``utility`` [M], ``demand`` [M, R], ``prices`` [R], ``capacity`` [R]; all finite, demand,
    prices and capacity ``>= 0``.  ``dtype`` is ``"float64"`` or ``"float32"`` (the kernel's
    arithmetic); ``nthreads >= 1``.  Returns ``(choice int64[N], totals float64[R],
    lagrangian float)``."""
    inst = prepare(offsets, utility, demand, capacity, dtype=dtype, nthreads=nthreads)
    p = v.check_prices(prices, inst.n_resources)
    return inst.select(p)


def reference_select(offsets: np.ndarray, utility: np.ndarray, demand: np.ndarray,
                     prices: np.ndarray, capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The same selection in vectorised numpy, independent of the native code: the reference
    the C++ core is tested against (tests/test_native_cpp.py) and timed against
    (bench/bench_pricing.py).  Same shapes, units and tie rule as :func:`select`; no input
    checks."""
    val = utility - demand @ prices
    best = np.maximum.reduceat(val, offsets[:-1])
    n = len(offsets) - 1
    job = np.repeat(np.arange(n), np.diff(offsets))
    is_best = val == best[job]
    first = np.full(n, len(utility))
    np.minimum.at(first, job[is_best], np.flatnonzero(is_best))  # lowest index on ties
    return first - offsets[:-1], demand[first].sum(0), float(best.sum() + prices @ capacity)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def greedy_fill(offsets: np.ndarray, utility: np.ndarray, demand: np.ndarray,
                capacity: np.ndarray, tol: np.ndarray, scale: np.ndarray, weights: np.ndarray,
                items: np.ndarray, totals: np.ndarray, rounds: int
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Native greedy fill of a feasible choice (docs/pricing.md, section 4; the solver's
    ``_Instance.fill``).  ``offsets`` int64[N+1], ``utility`` [M], ``demand`` [M, R]; ``capacity``,
    ``tol``, ``scale`` (> 0), ``weights``, ``totals`` float64[R]; ``items`` int64[N], global item
    indices (each in its job's family: checked).  The caller guarantees the instance was validated
    (:func:`elastico.pricing.validation.check_instance`).  Returns new ``(items int64[N], totals
    float64[R], rounds_moved)``; ``rounds_moved < rounds`` means the candidate pool ran empty
    (another fill at the same weights changes nothing).  The inputs are not modified."""
    return _native.greedy_fill(offsets, _f64(utility), _f64(demand), _f64(capacity), _f64(tol),
                               _f64(scale), _f64(weights), np.ascontiguousarray(items, np.int64),
                               _f64(totals), int(rounds))


def repair(offsets: np.ndarray, utility: np.ndarray, demand: np.ndarray, capacity: np.ndarray,
           tol: np.ndarray, scale: np.ndarray, values: np.ndarray, items: np.ndarray,
           totals: np.ndarray, max_rounds: int) -> np.ndarray | None:
    """Native repair of an over-capacity choice (docs/pricing.md, section 4; the solver's
    ``_Instance.repair``).  Same arguments as :func:`greedy_fill`, with ``values`` float64[M],
    each configuration's Lagrangian value ``u - prices . d`` at the shadow prices, instead of
    weights; ``totals`` is the demand of ``items``.
    Returns the feasible items (a new int64[N]) or None when no move lowers the violation any
    more (or ``max_rounds`` ran out)."""
    return _native.repair(offsets, _f64(utility), _f64(demand), _f64(capacity), _f64(tol),
                          _f64(scale), _f64(values), np.ascontiguousarray(items, np.int64),
                          _f64(totals), int(max_rounds))


def argmin_per_job(offsets: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Global index of the lowest ``key`` in each job's family (ties: the lowest index).
    ``offsets`` int64[N+1] (validated CSR), ``key`` float64[M].  Returns int64[N]."""
    return _native.argmin_per_job(offsets, _f64(key))


def column_max(demand: np.ndarray) -> np.ndarray:
    """``demand.max(axis=0)`` for a float64 [M, R] array with M >= 1, in one native pass
    (numpy's column-wise reduction of a C-contiguous array is an order of magnitude slower).
    Returns float64[R]."""
    return _native.column_max(_f64(demand))


def lagrangian_values(utility: np.ndarray, demand: np.ndarray, prices: np.ndarray) -> np.ndarray:
    """``utility - demand @ prices`` (float64 [M]) in one native pass: each configuration's
    value at the shadow prices.  Shapes [M], [M, R], [R]."""
    return _native.lagrangian_values(_f64(utility), _f64(demand), _f64(prices))
