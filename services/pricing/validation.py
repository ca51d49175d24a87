"""Input checks for MMKP instances in CSR form, shared by the kernel, the solver, the
utilities and the CLI.

Each check runs before any work and raises :class:`elastico.errors.InvalidArgument` naming
the field (with the index of the first bad element), the bad value (a plain Python number or
shape tuple) and what is allowed, e.g. ``capacity[2]: -1.0 is not allowed (must be finite
and >= 0)``.  On success the checks return contiguous arrays of the canonical dtype
(``int64`` offsets, ``float64`` values) without copying when the input already is one.

Layout (docs/pricing.md, protos/elastico/v1/pricing.proto): N jobs, M configurations in all,
R resources; job ``j`` owns configurations ``[offsets[j], offsets[j+1])``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from elastico.errors import InvalidArgument

__all__ = [
    "check_offsets",
    "check_vector",
    "check_demand",
    "check_instance",
    "check_prices",
    "check_dtype",
    "check_nthreads",
    "DTYPES",
]

DTYPES = ("float64", "float32")


def _plain(x: Any) -> Any:
    """A numpy scalar as a plain Python number, so messages read ``nan``, not ``np.float64(nan)``."""
    return x.item() if isinstance(x, np.generic) else x


def _as_array(field: str, value: Any) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:  # ragged lists and the like
        raise InvalidArgument(field, type(value).__name__, f"must be an array ({exc})") from None


def _all_ok(a: np.ndarray, nonneg: bool) -> bool:
    """Fast path of the element checks: two reductions, no temporary arrays (NaN makes min and
    max NaN, which fails both comparisons).  False sends the caller to the slow path that finds
    the first bad element."""
    if a.size == 0:
        return True
    lo, hi = a.min(), a.max()
    return bool((lo >= 0 if nonneg else lo > -np.inf) and hi < np.inf)


def check_offsets(offsets: Any, m: int | None = None) -> np.ndarray:
    """``offsets[N+1]``: 1-D integers, ``offsets[0] == 0``, strictly increasing (no empty
    family), ending at ``m`` when given.  Returns a contiguous int64 array."""
    a = _as_array("offsets", offsets)
    if a.ndim != 1 or a.shape[0] < 1:
        raise InvalidArgument("offsets.shape", a.shape, "must be 1-D with N+1 >= 1 entries")
    if a.dtype.kind == "f":  # integral floats come from JSON: accepted, others named
        with np.errstate(invalid="ignore"):
            off_grid = ~np.isfinite(a) | (a != np.round(a))
        if off_grid.any():
            i = int(np.argmax(off_grid))
            raise InvalidArgument(f"offsets[{i}]", _plain(a[i]),
                                  "integers (floats only when whole numbers)")
        integral_floats = True
    elif a.dtype.kind not in "iu":
        raise InvalidArgument("offsets.dtype", str(a.dtype), "must be integers")
    else:
        integral_floats = False
    if integral_floats and a.size and float(np.max(np.abs(a))) >= 2.0**62:
        # beyond int64: the cast would wrap to garbage and blame the wrong entry
        i = int(np.argmax(np.abs(a)))
        raise InvalidArgument(f"offsets[{i}]", _plain(a[i]), "integers below 2**62")
    off = np.ascontiguousarray(a, dtype=np.int64)
    if off[0] != 0:
        raise InvalidArgument("offsets[0]", _plain(off[0]), "must be 0")
    steps = np.diff(off)
    bad = np.flatnonzero(steps <= 0)
    if bad.size:
        j = int(bad[0])
        raise InvalidArgument(
            f"offsets[{j + 1}]", _plain(off[j + 1]),
            f"must be > offsets[{j}]={_plain(off[j])}: job {j} would have an empty family",
        )
    if m is not None and off[-1] != m:
        n = off.shape[0] - 1
        raise InvalidArgument(f"offsets[{n}]", _plain(off[-1]), f"must equal M={m}, the number of configurations")
    return off


def check_vector(field: str, value: Any, length: int | None, *, nonneg: bool,
                 length_name: str = "M") -> np.ndarray:
    """A 1-D finite float64 vector of ``length`` (when given), ``>= 0`` when ``nonneg``."""
    a = _as_array(field, value)
    if a.ndim != 1 or (length is not None and a.shape[0] != length):
        want = f"must be 1-D of length {length_name}={length}" if length is not None else "must be 1-D"
        raise InvalidArgument(f"{field}.shape", a.shape, want)
    if a.dtype.kind not in "iuf":
        raise InvalidArgument(f"{field}.dtype", str(a.dtype), "must be numbers")
    v = np.ascontiguousarray(a, dtype=np.float64)
    if _all_ok(v, nonneg):
        return v
    ok = np.isfinite(v) & (v >= 0) if nonneg else np.isfinite(v)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise InvalidArgument(f"{field}[{i}]", _plain(v[i]), "must be finite and >= 0" if nonneg else "must be finite")
    return v


def check_demand(demand: Any, m: int | None, r: int | None = None) -> np.ndarray:
    """``demand[M, R]``: 2-D, finite, ``>= 0``.  Returns a contiguous float64 array."""
    a = _as_array("demand", demand)
    if a.ndim != 2 or (m is not None and a.shape[0] != m) or (r is not None and a.shape[1] != r):
        want = (f"must be 2-D [M, R] with M={m}" + (f", R={r}" if r is not None else "")
                + (" (M = len(utility): one utility per configuration row)" if m is not None
                   else ""))
        raise InvalidArgument("demand.shape", a.shape, want)
    if a.dtype.kind not in "iuf":
        raise InvalidArgument("demand.dtype", str(a.dtype), "must be numbers")
    d = np.ascontiguousarray(a, dtype=np.float64)
    if _all_ok(d, True):
        return d
    ok = np.isfinite(d) & (d >= 0)
    if not ok.all():
        i, k = (int(x) for x in np.argwhere(~ok)[0])
        raise InvalidArgument(f"demand[{i}, {k}]", _plain(d[i, k]), "must be finite and >= 0")
    return d


def check_instance(utility: Any, demand: Any, offsets: Any, capacity: Any
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checks a whole instance; returns ``(utility[M], demand[M,R], offsets[N+1], capacity[R])``
    as contiguous float64 / int64 arrays.  M is taken from ``utility``."""
    u = check_vector("utility", utility, None, nonneg=False)
    m = u.shape[0]
    d = check_demand(demand, m)
    off = check_offsets(offsets, m)
    cap = check_vector("capacity", capacity, d.shape[1], nonneg=True, length_name="R")
    # Each value finite is not enough: the objective of a choice (and the Lagrangian bound)
    # sums one utility per job, which must stay below the float64 maximum too.
    with np.errstate(over="ignore"):
        total = np.cumsum(np.maximum.reduceat(np.abs(u), off[:-1]))
    if total.size and not np.isfinite(total[-1]):
        j = int(np.argmin(np.isfinite(total)))
        raise InvalidArgument(
            "utility", f"largest |utility| of jobs 0..{j} summing to inf",
            "per-job largest |utility| must sum to a finite float64 (< 1.8e308)")
    return u, d, off, cap


def check_prices(prices: Any, r: int, field: str = "prices") -> np.ndarray:
    """Shadow prices ``[R]``: finite and ``>= 0``."""
    return check_vector(field, prices, r, nonneg=True, length_name="R")


def check_price_costs(prices: np.ndarray, demand: np.ndarray, capacity: np.ndarray,
                      dtype: np.dtype, field: str = "initial_prices") -> None:
    """Warm-start ``prices`` [R] (already checked finite and >= 0) whose cost of the capacity,
    ``prices . capacity``, or of some configuration, ``demand [M, R] . prices``, is beyond
    ``dtype``'s range would make the dual bound inf and the gap NaN (prices of 1e308 did);
    raises InvalidArgument on ``field``."""
    top = float(np.finfo(dtype).max)
    with np.errstate(over="ignore", invalid="ignore"):
        costs = np.append(demand @ prices, prices @ capacity)
    if not np.all(np.abs(costs) <= top):
        shown = prices.tolist() if prices.size <= 8 else f"{prices.size} prices, max {prices.max():g}"
        raise InvalidArgument(field, shown,
                              f"prices whose cost of the capacity (prices . capacity) and of "
                              f"every configuration (demand . prices) stay within {dtype.name}'s "
                              f"range ({top:.3g})")


def check_dtype(dtype: Any) -> np.dtype:
    """``"float64"`` or ``"float32"`` (or the numpy dtypes)."""
    name = np.dtype(dtype).name if isinstance(dtype, (type, np.dtype)) else dtype
    if name not in DTYPES:
        raise InvalidArgument("dtype", _plain(name) if not isinstance(name, str) else name,
                              f"must be one of {', '.join(DTYPES)}")
    return np.dtype(name)


def check_fits_dtype(dtype: np.dtype, **arrays: np.ndarray) -> None:
    """With ``dtype`` float32 every value of each named array must be representable: at most
    ``np.finfo(np.float32).max`` (3.4e38) in absolute value, or the cast to float32 makes it inf
    and the selection meaningless.  Raises InvalidArgument naming the first such element
    (``demand[3, 1]``); float64 accepts anything already checked finite."""
    if dtype != np.float32:
        return
    top = float(np.finfo(np.float32).max)
    for name, a in arrays.items():
        bad = np.argwhere(np.abs(a) > top)
        if bad.size:
            idx = tuple(int(i) for i in bad[0])
            where = ", ".join(str(i) for i in idx)
            raise InvalidArgument(f"{name}[{where}]", float(a[idx]),
                                  f"must be at most {top:.4g} in absolute value with dtype "
                                  "float32; use float64")


def check_nthreads(nthreads: Any) -> int:
    """Worker threads of the native kernel: an integer ``>= 1``."""
    if isinstance(nthreads, bool) or not isinstance(nthreads, (int, np.integer)) or nthreads < 1:
        raise InvalidArgument("nthreads", _plain(nthreads), "must be an integer >= 1")
    return int(nthreads)
