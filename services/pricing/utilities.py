"""Per-configuration utilities for Elastic Shadow Pricing: pure policies with one signature,
registered by name in :data:`UTILITIES` (STYLE.md 6).

Signature::

    fn(throughput[M], offsets[N+1], remaining_s[N], priority[N]) -> utility[M]

* ``throughput[c]``: configuration c's normalized throughput (1.0 = the job's trace speed,
  0.0 = wait), finite and >= 0.  Effective throughput (solo / predicted slowdown) when the
  placer feeds slowdowns back.
* ``offsets``: CSR families, job j owns configurations ``[offsets[j], offsets[j+1])``.
* ``remaining_s[j]``: job j's remaining work as the policy estimates it, seconds at
  throughput 1.0 (``PolicyEnv.remaining_estimate``; the true ``Job.remaining`` only in an
  ``oracle`` sensitivity run: docs/model.md 6.).
* ``priority[j]``: the job's priority weight, finite and > 0.

Callers: the scheduling round (to build the pricing instance) and tests.  Calls nothing but
numpy.  Every utility is 0 for the wait configuration (x = 0), so waiting is neutral.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from elastico.errors import InvalidArgument
from elastico.pricing import validation as v

__all__ = ["jct", "throughput", "fair", "UTILITIES", "FAIR_DELTA", "Utility", "switch_cost",
           "charge_switch"]

Utility = Callable[[Any, Any, Any, Any], np.ndarray]

#: The offset delta of :func:`fair`, in normalized throughput units.
FAIR_DELTA = 0.01


def _prepare(x: Any, offsets: Any, remaining_s: Any, priority: Any
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checks the common arguments; returns (throughput[M], remaining per configuration [M],
    priority per configuration [M])."""
    x = v.check_vector("throughput", x, None, nonneg=True)
    off = v.check_offsets(offsets, x.shape[0])
    n = off.shape[0] - 1
    rem = v.check_vector("remaining_s", remaining_s, n, nonneg=True, length_name="N")
    pri = v.check_vector("priority", priority, n, nonneg=True, length_name="N")
    bad = np.flatnonzero(pri <= 0)
    if bad.size:
        i = int(bad[0])
        raise InvalidArgument(f"priority[{i}]", float(pri[i]), "must be finite and > 0")
    counts = np.diff(off)
    return x, np.repeat(rem, counts), np.repeat(pri, counts)


def jct(throughput: Any, offsets: Any, remaining_s: Any, priority: Any) -> np.ndarray:
    """Default: ``U_c = priority_j * x_c / max(remaining_j, 1.0)`` (units: 1/s).

    Shortest-remaining-first pressure: the rate at which configuration c drains job j's
    remaining time, ``x_c / remaining_j``, is the fraction of the job finished per second;
    maximising its weighted sum favours short jobs, the rule that minimises average JCT on
    one machine (SRPT, Schrage 1968).  ``max(., 1.0)`` caps the weight of jobs about to end.
    """
    x, rem, pri = _prepare(throughput, offsets, remaining_s, priority)
    return pri * x / np.maximum(rem, 1.0)


def throughput(throughput: Any, offsets: Any, remaining_s: Any, priority: Any) -> np.ndarray:
    """``U_c = priority_j * x_c`` (normalized throughput, dimensionless): cluster throughput."""
    x, _, pri = _prepare(throughput, offsets, remaining_s, priority)
    return pri * x


def fair(throughput: Any, offsets: Any, remaining_s: Any, priority: Any) -> np.ndarray:
    """``U_c = priority_j * (log(x_c + delta) - log(delta))``, ``delta = 0.01``
    (dimensionless).  Proportional fairness (Kelly 1997: maximise sum of weighted log
    throughput); the shift by delta makes wait (x = 0) worth exactly 0 instead of -inf.
    """
    x, _, pri = _prepare(throughput, offsets, remaining_s, priority)
    return pri * (np.log(x + FAIR_DELTA) - np.log(FAIR_DELTA))


#: Utilities by name; ``jct`` is the default.
UTILITIES: Mapping[str, Utility] = {"jct": jct, "throughput": throughput, "fair": fair}


def switch_cost(current_utility: Any, remaining_time_s: Any, restart_s: float) -> np.ndarray:
    """The utility a running job loses by changing configuration: the work it does not do
    while it restarts, ``u_cur * restart_s / max(remaining_time_s, restart_s)`` (a job that
    would finish within one restart loses all of it).  Shapes [N]; ``current_utility`` is the
    utility of each job's current configuration, ``remaining_time_s`` its remaining wall time
    at that configuration (seconds), ``restart_s`` >= 0 seconds.  Pass the result with the
    running configurations to :func:`elastico.pricing.solve` (``switch_cost``, ``current``)."""
    uc = v.check_vector("current_utility", current_utility, None, nonneg=True)
    rt = v.check_vector("remaining_time_s", remaining_time_s, uc.shape[0], nonneg=True,
                        length_name="N")
    try:
        rs = float(restart_s)
    except (TypeError, ValueError):
        raise InvalidArgument("restart_s", restart_s, "must be a finite number >= 0 (seconds)") from None
    if not (np.isfinite(rs) and rs >= 0):
        raise InvalidArgument("restart_s", rs, "must be a finite number >= 0 (seconds)")
    if rs == 0:
        return np.zeros_like(uc)
    return uc * rs / np.maximum(rt, rs)


def charge_switch(utility: np.ndarray, offsets: np.ndarray, current: np.ndarray,
                  cost: np.ndarray) -> np.ndarray:
    """Utilities with ``cost[j]`` subtracted from every configuration of each running job j
    (``current[j] >= 0``) except its current one, which keeps its utility exactly
    (docs/pricing.md, hysteresis).  Shapes: utility [M], offsets [N+1], current int [N] (-1 =
    not running), cost [N] >= 0.  Checked arrays are the caller's job; returns a new [M]."""
    charge = np.where(current >= 0, cost, 0.0)
    out = utility - np.repeat(charge, np.diff(offsets))
    run = np.flatnonzero(current >= 0)
    keep = offsets[run] + current[run]
    out[keep] = utility[keep]
    return out
