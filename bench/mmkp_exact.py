"""The exact MMKP optimum of one pricing instance, by HiGHS (``scipy.optimize.milp``): the
reference the benchmarks compare Elastic Shadow Pricing and the greedy choice against.

Formulation (docs/pricing.md, section 1): a binary ``x_c`` per configuration, one equality
``sum_{c in job j} x_c = 1`` per job, one row ``sum_c d_{c,r} x_c <= capacity_r`` per resource,
maximise ``sum_c u_c x_c``.  Bench-only: the product never solves rounds exactly (that is what
the shadow prices are for); scipy is already a dependency of the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class ExactResult:
    """``choice`` [N]: index within each job's family (None when HiGHS found no solution);
    ``value``: utility of the choice; ``bound``: HiGHS's proven upper bound on the optimum
    (== value when ``optimal``); ``status``: scipy's milp status (0 optimal, 1 time or
    iteration limit); ``ms``: wall-clock milliseconds of the solve."""

    choice: np.ndarray | None
    value: float | None
    bound: float | None
    status: int
    ms: float

    @property
    def optimal(self) -> bool:
        """HiGHS finished (status 0) *and* its bound meets the value to 1e-9 relative: status 0
        alone only means HiGHS's gaps were met, and its absolute one (1e-6) is not settable
        through scipy (ERGO-Code/HiGHS ``mip_abs_gap``)."""
        return (self.status == 0 and self.value is not None and self.bound is not None
                and self.bound - self.value <= 1e-9 * max(abs(self.bound), 1e-300))


@contextlib.contextmanager
def _stdout_to_stderr():
    """HiGHS's C++ writes a stray ``HighsMipSolverData::transformNewIntegerFeasibleSolution
    tmpSolver.run();`` to file descriptor 1 even when silent (ERGO-Code/HiGHS#2783): send fd 1
    to stderr meanwhile, so a bench's ``--json`` stdout stays parseable."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve_exact(u: np.ndarray, d: np.ndarray, off: np.ndarray, cap: np.ndarray,
                time_limit_s: float = 60.0, rel_gap: float = 0.0) -> ExactResult:
    """Solves the MMKP ``u`` [M], ``d`` [M, R], ``off`` [N+1], ``cap`` [R] with HiGHS.

    ``time_limit_s``: HiGHS's wall-clock limit (seconds); ``rel_gap``: its ``mip_rel_gap``
    (0 = prove optimality).  The objective is scaled so that the largest any choice can reach,
    ``sum_j max_c |u_c|``, is 1e6: HiGHS also stops at an *absolute* gap of 1e-6, which at the
    scale of the ``jct`` utility (round objectives ~1e-2) would be a 1e-4 relative gap.
    ``value`` and ``bound`` are in ``u``'s units.  Raises nothing for a hard instance: the
    result then carries status 1 and HiGHS's incumbent, if any."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    m = u.shape[0]
    n = off.shape[0] - 1
    job = np.repeat(np.arange(n), np.diff(off))
    one_per_job = csr_matrix((np.ones(m), (job, np.arange(m))), shape=(n, m))
    cons = [LinearConstraint(one_per_job, 1, 1), LinearConstraint(csr_matrix(d.T), -np.inf, cap)]
    top = float(np.maximum.reduceat(np.abs(u), off[:-1]).sum()) if n else 0.0
    scale = 1e6 / top if top > 0 else 1.0
    t0 = time.perf_counter()
    with _stdout_to_stderr():
        res = milp(-u * scale, constraints=cons, integrality=np.ones(m), bounds=Bounds(0, 1),
                   options={"time_limit": time_limit_s, "mip_rel_gap": rel_gap, "disp": False})
    ms = 1e3 * (time.perf_counter() - t0)
    bound = getattr(res, "mip_dual_bound", None)
    bound = None if bound is None else -float(bound) / scale
    if res.x is None:
        return ExactResult(None, None, bound, int(res.status), ms)
    x = np.round(res.x)
    choice = np.array([int(np.argmax(x[off[j]:off[j + 1]])) for j in range(n)], dtype=np.int64)
    return ExactResult(choice, float(u[off[:-1] + choice].sum()), bound, int(res.status), ms)


if __name__ == "__main__":
    import sys

    print("mmkp_exact.py is a module, not a script: bench/pricing.py and "
          "bench/esp_vs_greedy.py --exact use its solve_exact()", file=sys.stderr)
    sys.exit(2)
