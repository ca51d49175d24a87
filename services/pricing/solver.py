"""Elastic Shadow Pricing: Lagrangian relaxation of the multiple-choice multidimensional
knapsack (MMKP) with per-resource shadow prices, a primal repair/fill heuristic and a
certified optimality gap.  The algorithm and every formula are in docs/pricing.md.

Problem (N jobs, job ``j`` owns configurations ``F_j = [offsets[j], offsets[j+1])``, R
resources)::

    OPT = max  sum_j u[c_j]   s.t.  sum_j d[c_j] <= C,   c_j in F_j  (one per job)

Lagrangian dual, for prices ``lam >= 0`` (weak duality: ``L(lam) >= OPT`` for every such
``lam``, because any feasible choice has ``lam . (C - sum_j d[c_j]) >= 0``)::

    L(lam) = sum_j max_{c in F_j} (u[c] - lam . d[c]) + lam . C

The solver minimises L with BOXSTEP, a cutting-plane method in a trust region (every
evaluation of L is a cutting plane; the next prices minimise their maximum in a box around the
best prices, a small LP), in capacity-normalised price space, warm-started from
``initial_prices`` (cold: a bisection along a uniform price ray, or the duals of a sampled LP
relaxation where that ray finds nothing), and keeps the lowest value seen as the
``dual_bound``; once the box has converged with the gap still open, Polyak subgradient steps
around the best prices feed the primal new starting points.  Every iteration (every few on
large instances) the Lagrangian choice is repaired to feasibility and greedily filled; the
best feasible choice is ``choice`` and its utility ``primal_value``.
``primal_value <= OPT <= dual_bound``, so ``gap`` certifies how far ``choice`` can be from
optimal.

Callers: the scheduling round, the CLI (:mod:`elastico.cli.pricing`), later the gRPC
PricingService.  Calls: :mod:`elastico.pricing.kernel` (the native selection and the native
repair / greedy fill).  The algorithm
reads no clock; :func:`time.perf_counter` only fills ``PricingResult.seconds``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from elastico.errors import Infeasible, InvalidArgument
from elastico.pricing import kernel
from elastico.pricing import validation as v
from elastico.pricing.utilities import charge_switch

__all__ = ["PricingResult", "solve", "FEASIBILITY_RTOL", "DEFAULT_GAP_TOLERANCE"]

#: Default stopping tolerance on the certified relative gap: 0.1 %, an order of magnitude closer
#: than the published anchors (POP 1.5 % from optimal, CvxCluster 3 %).  Tighter tolerances
#: work but can run to the iteration limit where the LP relaxation's integrality gap is larger.
DEFAULT_GAP_TOLERANCE = 1e-3

#: A choice is feasible when ``totals[r] <= capacity[r] + FEASIBILITY_RTOL * max(capacity[r], 1)``.
FEASIBILITY_RTOL = 1e-9

# Price-update constants (docs/pricing.md, section 3: BOXSTEP, a trust-region cutting-plane method).
_THETA0 = 2.0          # first box half-width: this many Polyak steps (Polyak 1969), in (0, 2]
_PATIENCE = 8          # Polyak tail: halve theta after this many iterations without a better dual
_THETA_MIN = 1e-7      # ... and stop below this factor
_SERIOUS = 0.1         # a trial point becomes the centre when it achieves this share of the
                       # model's predicted decrease (Marsten, Hogan & Blankenship 1975)
_GROW = 0.5            # ... and the box doubles when it achieves this share at the box edge
_SAMPLE_BOX = 0.25     # first box half-width after the sampled-LP start, share of the largest price
_MAX_CUTS = 64         # cutting planes kept (the newest; each is one Lagrangian evaluation)
_BOX_MIN = 1e-9        # box half-width (normalised prices) below which prices no longer move
_FILL_ROUNDS = 30      # greedy-fill rounds per primal pass
_REPAIR_ROUNDS = 1000  # guard; every repair round strictly lowers the violation
_LARGE = 200_000       # M*R above which primal passes are at least _EVERY_LARGE iterations apart
_EVERY_LARGE = 3
_NEAR = 0.02           # a Lagrangian choice within 2 % of capacity (mean over resources) gets a primal
_FIRST_PRIMAL = 4      # ... and any new best from this iteration on while there is no primal yet
_MAX_PRIMAL_GAP = 10   # ... and any new best this many iterations after the last primal
_STALL = 30            # stop when the gap has not shrunk for this many iterations


@dataclass(frozen=True)
class PricingResult:
    """Outcome of :func:`solve`.

    Attributes:
        choice: int64[N], index within each job's family (``offsets[j] + choice[j]`` is the
            global configuration index).  Always feasible: ``totals <= capacity`` (up to
            :data:`FEASIBILITY_RTOL`).
        prices: float64[R] >= 0, the shadow prices at ``dual_bound`` (utility per unit of each
            resource); pass them as ``initial_prices`` to warm-start the next round.
        primal_value: ``sum_j utility[offsets[j] + choice[j]]`` (utility units).
        dual_bound: lowest Lagrangian value found (float64 arithmetic), ``>= OPT``; when
            ``choice`` uses the feasibility tolerance (:data:`FEASIBILITY_RTOL`; totals above
            C), of the instance with capacities ``max(C, totals)``, for which it is feasible.
        gap: ``(dual_bound - primal_value) / max(|dual_bound|, 1e-12)``, >= the true relative
            gap to the optimum.
        iterations: number of Lagrangian evaluations (price updates) performed.
        seconds: wall time of the solve (``time.perf_counter``), seconds.
        totals: float64[R], total demand of ``choice``.
        changed: bool[N], True for the running jobs (``current[j] >= 0``) whose choice differs
            from their current configuration (they restart); all False without ``current``.
    """

    choice: np.ndarray
    prices: np.ndarray
    primal_value: float
    dual_bound: float
    gap: float
    iterations: int
    seconds: float
    totals: np.ndarray
    changed: np.ndarray | None = None


def _gap(dual: float, primal: float) -> float:
    return (dual - primal) / max(abs(dual), 1e-12)


class _Instance:
    """The instance after dropping configurations that alone exceed capacity (they are in no
    feasible choice, so dropping them keeps every dual value an upper bound and tightens it).

    Items are indexed globally in the reduced instance; ``item_map`` maps them back.
    """

    def __init__(self, u: np.ndarray, d: np.ndarray, off: np.ndarray, cap: np.ndarray):
        self.cap = cap
        self.tol = FEASIBILITY_RTOL * np.maximum(cap, 1.0)
        # Capacity normalisation: resource r is measured in fractions of its capacity.  A
        # resource with zero capacity keeps scale 1; after the drop below no item uses it.  So
        # does a subnormal one (< 2.2e-308, whose reciprocal overflows): it lies far inside the
        # feasibility tolerance (>= 1e-9 absolute), which alone decides what fits it.
        self.scale = np.where(cap >= np.finfo(np.float64).tiny, cap, 1.0)
        self.inv_scale = 1.0 / self.scale
        if np.all(kernel.column_max(d) <= cap + self.tol):
            keep = None  # the common case, found without an [M, R] temporary
            counts = np.diff(off)
        else:
            keep = np.all(d <= cap + self.tol, axis=1)
            counts = np.add.reduceat(keep.astype(np.int64), off[:-1]) if d.shape[0] else np.diff(off)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            j = int(empty[0])
            raise Infeasible(
                f"job {j}: every configuration alone needs more than the capacity of some "
                f"resource (configurations {int(off[j])}..{int(off[j + 1]) - 1}); no feasible "
                f"choice exists ({empty.size} such job(s))")
        self.orig_off = off
        if keep is None or keep.all():
            self.item_map = None
            self.u, self.d, self.off = u, d, off
        else:
            self.item_map = np.flatnonzero(keep)
            self.u, self.d = u[keep], np.ascontiguousarray(d[keep])
            self.off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.n = self.off.shape[0] - 1
        self.starts = self.off[:-1]

    @cached_property
    def job_of(self) -> np.ndarray:
        """int64[M]: the job of each (reduced) item; only the numpy references need it."""
        return np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.off))

    def original_choice(self, items: np.ndarray) -> np.ndarray:
        """Global reduced item indices [N] -> index within each job's original family."""
        g = items if self.item_map is None else self.item_map[items]
        return (g - self.orig_off[:-1]).astype(np.int64)

    def totals(self, items: np.ndarray) -> np.ndarray:
        return self.d[items].sum(axis=0)

    def feasible(self, totals: np.ndarray) -> bool:
        return bool(np.all(totals <= self.cap + self.tol))

    # -- primal heuristics (docs/pricing.md, section 4) ---------------------------------------

    def _violation(self, excess: np.ndarray) -> np.ndarray:
        """V = sum_r max(0, excess_r) * (1 / scale_r) over the last axis (excess = T - C - tol)."""
        return (np.maximum(excess, 0.0) * self.inv_scale).sum(axis=-1)

    def lagrangian_values(self, prices: np.ndarray) -> np.ndarray:
        """float64[M]: ``u - d @ prices``, each configuration's value at the shadow prices
        (the repair's key).  Computed once per primal pass and handed to both the native repair
        and its numpy reference, so the two see the same numbers."""
        return kernel.lagrangian_values(self.u, self.d, prices)

    def repair(self, items: np.ndarray, totals: np.ndarray,
               prices: np.ndarray) -> np.ndarray | None:
        """Moves jobs to other configurations of their family until the choice is feasible:
        the moves that lose least Lagrangian value at ``prices`` (float64[R], original units)
        per unit of removed capacity-normalised violation first, each applied only while it
        still lowers the violation.  Returns the feasible items, or None when no move lowers the
        violation any more.  Runs natively (:func:`elastico.pricing.kernel.repair`),
        bit-identical to :meth:`_repair_numpy`."""
        return kernel.repair(self.off, self.u, self.d, self.cap, self.tol, self.scale,
                             self.lagrangian_values(prices), items, totals, _REPAIR_ROUNDS)

    def _repair_numpy(self, items: np.ndarray, totals: np.ndarray,
                      prices: np.ndarray) -> np.ndarray | None:
        """The numpy reference of :meth:`repair` (tests compare the two; the sequential
        application of the sorted moves is a Python loop)."""
        items = items.copy()
        T = totals.copy()
        pv = self.lagrangian_values(prices)
        for _ in range(_REPAIR_ROUNDS):
            E = T - self.cap - self.tol
            if not (E > 0).any():
                return items
            over = E > 0
            V = float(self._violation(E))
            min_red = 1e-12 * max(V, 1.0)
            # Only jobs whose configuration uses an overused resource can lower V.
            jobs = np.flatnonzero((self.d[items][:, over] > 0).any(axis=1))
            mask = np.zeros(self.n, dtype=bool)
            mask[jobs] = True
            cand = np.flatnonzero(mask[self.job_of])
            cur = items[self.job_of[cand]]
            cand_ok = cand != cur
            cand, cur = cand[cand_ok], cur[cand_ok]
            red = V - self._violation(E + (self.d[cand] - self.d[cur]))
            good = red > min_red
            if not good.any():
                return None
            cand, cur, red = cand[good], cur[good], red[good]
            key = np.maximum(pv[cur] - pv[cand], 0.0) / red
            pick = _best_per_job(self.job_of[cand], key)  # ascending key
            v_cur, moved = V, False
            for c in cand[pick]:
                j = self.job_of[c]
                delta = self.d[c] - self.d[items[j]]
                if not v_cur - float(self._violation(E + delta)) > min_red:
                    continue
                items[j] = c
                T = T + delta
                E = T - self.cap - self.tol
                v_cur, moved = float(self._violation(E)), True
                if not (E > 0).any():
                    return items
            if not moved:
                return None
        return None

    def _upgrade_rows(self, items_mask_jobs: np.ndarray | None, items: np.ndarray,
                      S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Candidate upgrades (item, demand change [.,R], utility gain) that fit the slack S,
        over all jobs (``items_mask_jobs`` None) or over the jobs in that boolean mask."""
        cand = (np.arange(self.u.shape[0]) if items_mask_jobs is None
                else np.flatnonzero(items_mask_jobs[self.job_of]))
        cur = items[self.job_of[cand]]
        gain = self.u[cand] - self.u[cur]
        up = gain > 0
        cand, cur, gain = cand[up], cur[up], gain[up]
        delta = self.d[cand] - self.d[cur]
        fits = np.all(delta <= S, axis=1)
        return cand[fits], delta[fits], gain[fits]

    def fill(self, items: np.ndarray, totals: np.ndarray, weights: np.ndarray,
             rounds: int = _FILL_ROUNDS) -> tuple[np.ndarray, np.ndarray, bool]:
        """Greedy upgrades of a feasible choice: best utility gain per unit of added,
        capacity-normalised, price-weighted demand first; each round applies the largest
        prefix of the per-job best upgrades that fits the slack together.  The candidate pool
        is built once and then only shrinks (rows that no longer fit) or is refreshed for the
        jobs that moved.  Returns (items, totals, exhausted): still feasible; ``exhausted`` when
        the pool ran empty before ``rounds`` (no upgrade fits any more).  Runs natively
        (:func:`elastico.pricing.kernel.greedy_fill`), bit-identical to :meth:`_fill_numpy`."""
        items, T, done = kernel.greedy_fill(self.off, self.u, self.d, self.cap, self.tol,
                                            self.scale, weights, items, totals, rounds)
        return items, T, done < rounds

    def _fill_numpy(self, items: np.ndarray, totals: np.ndarray, weights: np.ndarray,
                    rounds: int = _FILL_ROUNDS) -> tuple[np.ndarray, np.ndarray, bool]:
        """The numpy reference of :meth:`fill` (tests compare the two)."""
        items = items.copy()
        T = totals.copy()
        S = self.cap + self.tol - T
        cand, delta, gain = self._upgrade_rows(None, items, S)
        done = 0
        for _ in range(rounds):
            if cand.size == 0:
                break
            done += 1
            # Elementwise product + pairwise sum, not ``@``: BLAS's dot order (and FMA use)
            # varies by kernel and machine; this order is reproducible and the native
            # greedy_fill reproduces it bit for bit.
            cost = (np.maximum(delta, 0.0) * (weights / self.scale)).sum(axis=1)
            ratio = np.where(cost > 0, gain / np.where(cost > 0, cost, 1.0), np.inf)
            pick = _best_per_job(self.job_of[cand], -ratio)  # descending ratio
            cum = np.cumsum(delta[pick], axis=0)
            ok = np.flatnonzero(np.all(cum <= S, axis=1))
            k = int(ok[-1])  # the largest set of moves that fits together (row 0 fits alone)
            moved = cand[pick[: k + 1]]
            moved_jobs = self.job_of[moved]
            items[moved_jobs] = moved
            T = T + cum[k]
            S = S - cum[k]
            mask = np.zeros(self.n, dtype=bool)
            mask[moved_jobs] = True
            live = ~mask[self.job_of[cand]] & np.all(delta <= S, axis=1)
            c2, d2, g2 = self._upgrade_rows(mask, items, S)
            cand = np.concatenate((cand[live], c2))
            delta = np.concatenate((delta[live], d2))
            gain = np.concatenate((gain[live], g2))
        return items, T, done < rounds

    def smallest(self) -> np.ndarray:
        """Per job, the configuration with the least capacity-normalised total demand (the
        wait configuration when the family has one)."""
        return kernel.argmin_per_job(self.off, (self.d / self.scale).sum(axis=1))


def _best_per_job(jobs: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Positions (into ``jobs``/``key``) of the lowest ``key`` per job, ordered by that key
    (ties: the earlier position)."""
    order = np.argsort(key, kind="stable")
    _, first = np.unique(jobs[order], return_index=True)
    return order[np.sort(first)]


#: Upper bound of ``max_iterations``.  The default is 200 and the placer uses 20; a million
#: evaluations already take minutes on a large instance, and an unbounded value (e.g.
#: 99999999999999) would let an infeasible instance run for hours before it is reported.
MAX_ITERATIONS = 1_000_000


def _check_options(max_iterations: Any, gap_tolerance: Any) -> tuple[int, float]:
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) \
            or not 1 <= max_iterations <= MAX_ITERATIONS:
        raise InvalidArgument("max_iterations",
                              max_iterations.item() if isinstance(max_iterations, np.generic)
                              else max_iterations,
                              f"must be an integer in 1..{MAX_ITERATIONS}")
    try:
        tol = float(gap_tolerance)
    except (TypeError, ValueError):
        raise InvalidArgument("gap_tolerance", gap_tolerance, "must be a finite number >= 0") from None
    if not (math.isfinite(tol) and tol >= 0):
        raise InvalidArgument("gap_tolerance", tol, "must be a finite number >= 0")
    return int(max_iterations), tol


def solve(utility: Any, demand: Any, offsets: Any, capacity: Any, *,
          initial_prices: Any = None, max_iterations: int = 200,
          gap_tolerance: float = DEFAULT_GAP_TOLERANCE, dtype: str = "float64", nthreads: int = 1,
          primal_every: int | None = None, current: Any = None,
          switch_cost: Any = None) -> PricingResult:
    """Chooses one configuration per job (Elastic Shadow Pricing; docs/pricing.md).

    Args:
        utility: [M] finite, utility of each configuration (e.g. from
            :data:`elastico.pricing.UTILITIES`).
        demand: [M, R] finite, >= 0, resource vector of each configuration (model units:
            GPUs, GiB, cores).
        offsets: [N+1] integers, 0 = offsets[0] < offsets[1] < ... < offsets[N] = M; job j owns
            configurations [offsets[j], offsets[j+1]).
        capacity: [R] finite, >= 0, total capacity of each resource.
        initial_prices: [R] finite, >= 0, warm-start shadow prices (e.g. the previous round's
            ``PricingResult.prices``); None = cold start at 0.
        max_iterations: 1..:data:`MAX_ITERATIONS` (1_000_000), limit on Lagrangian
            evaluations.
        gap_tolerance: >= 0, stop once the certified relative gap is at most this.
        dtype: "float64" or "float32", arithmetic of the native selection.  The reported
            ``dual_bound`` is always evaluated in float64, so it stays a valid bound.
        nthreads: >= 1, threads of the native selection.
        current: [N] integers, the configuration each running job runs now (index within its
            family), -1 for a job that is not running; None = no job is running.
        switch_cost: [N] finite, >= 0, utility a running job loses if it changes configuration
            (e.g. ``u_cur * restart_s / max(remaining_s, restart_s)``: the work lost while it
            restarts; ``elastico.pricing.utilities.switch_cost``).  It is subtracted from
            every configuration except ``current`` (hysteresis inside the optimisation: a job
            moves only when the gain beats the restart).  Requires ``current``; reported
            ``primal_value`` and ``dual_bound`` are of the charged utilities.
        primal_every: build a primal (repair + fill) from the Lagrangian choice every this many
            iterations (and always at the end), with no cold-start bisection; None = the
            adaptive schedule of docs/pricing.md section 4 (every iteration on small instances;
            on large ones at new best duals near the capacity).  A round that warm-starts from
            good prices needs few.

    Returns:
        :class:`PricingResult` with a feasible ``choice``.

    Raises:
        InvalidArgument: bad input (field, value and what is allowed in the message).
        Infeasible: no feasible choice was found (only possible when some family lacks a
            zero-demand configuration).
    """
    t0 = time.perf_counter()
    u, d, off, cap = v.check_instance(utility, demand, offsets, capacity)
    cur = _check_current(current, switch_cost, off)
    if cur is not None and switch_cost is not None:
        u = charge_switch(u, off, cur, v.check_vector("switch_cost", switch_cost, off.shape[0] - 1,
                                                       nonneg=True, length_name="N"))
    R = cap.shape[0]
    lam = (np.zeros(R) if initial_prices is None
           else v.check_prices(initial_prices, R, "initial_prices").copy())
    dt = v.check_dtype(dtype)
    v.check_fits_dtype(dt, utility=u, demand=d, capacity=cap, initial_prices=lam)
    if initial_prices is not None:
        v.check_price_costs(lam, d, cap, dt)
    nt = v.check_nthreads(nthreads)
    max_it, gap_tol = _check_options(max_iterations, gap_tolerance)
    if primal_every is not None and (isinstance(primal_every, bool)
                                     or not isinstance(primal_every, (int, np.integer))
                                     or primal_every < 1):
        raise InvalidArgument("primal_every", primal_every, "must be an integer >= 1 or None")

    n = off.shape[0] - 1
    if n == 0:  # nothing to choose: OPT = 0 = L(0)
        z = np.zeros(R)
        return PricingResult(np.zeros(0, np.int64), z, 0.0, 0.0, 0.0, 0,
                             time.perf_counter() - t0, z.copy(), np.zeros(0, bool))

    inst = _Instance(u, d, off, cap)
    lam[cap <= 0] = 0.0  # no remaining configuration uses a zero-capacity resource
    kern = kernel.prepare_checked(inst.off, inst.u, inst.d, cap, dt, nt)
    kern64 = kern if dt == np.float64 else kernel.prepare_checked(inst.off, inst.u, inst.d, cap,
                                                                   np.dtype(np.float64), nt)
    small = inst.u.shape[0] * R <= _LARGE  # small: a primal pass at every iteration
    spacing = 1 if small else _EVERY_LARGE

    best_items: np.ndarray | None = None
    best_T = np.zeros(R)
    best_primal = -math.inf

    def fill_weights(mu: np.ndarray) -> np.ndarray:
        top = float(mu.max()) if mu.size else 0.0
        return mu + 0.01 * top if top > 0 else np.ones_like(mu)

    zero = np.zeros(R)
    best_fill: tuple[np.ndarray, bool] = (zero, False)  # prices of the best choice's fill, exhausted

    def primal_from(items: np.ndarray, T: np.ndarray, prices: np.ndarray) -> None:
        """Repair (when over capacity) and fill one Lagrangian choice; keep the best.  Small
        instances also try the repair keyed on plain utility loss (prices 0): the two keys find
        different choices and a pass costs little there."""
        nonlocal best_items, best_T, best_primal, best_fill
        feasible = inst.feasible(T)
        for key_prices in ((prices, zero) if small and not feasible else (prices,)):
            it2, T2 = items, T
            if not feasible:
                fixed = inst.repair(items, T, key_prices)
                if fixed is None:
                    continue
                it2, T2 = fixed, inst.totals(fixed)
            it2, T2, exhausted = inst.fill(it2, T2, fill_weights(prices * inst.scale))
            val = float(inst.u[it2].sum())
            if val > best_primal:
                best_items, best_T, best_primal = it2, T2, val
                best_fill = (prices, exhausted)

    scale = inst.scale
    start_evals, cached = 0, None
    start_cuts: list = []  # (prices, totals, L) of the cold start's selections
    sampled = None
    if initial_prices is None and primal_every is None and max_it >= 8:
        lam, start_evals, cached = _uniform_price_start(kern, cap, inst.inv_scale,
                                                        max_it // 2, record=start_cuts)
        if not np.any(lam > 0) and not inst.feasible(start_cuts[0][1]):
            # (first the primal of the zero-price choice: where capacity suffices for every
            # job's best configuration up to ties, L(0) = OPT and it closes the gap at once)
            primal_from(inst.starts + start_cuts[0][3], start_cuts[0][1], lam)
        if not np.any(lam > 0) and not inst.feasible(start_cuts[0][1]) \
                and _gap(start_cuts[0][2], best_primal) > gap_tol:
            # The ray found no price that lowers L although the zero-price choice overuses
            # capacity: the overused resources have free substitutes (jobs tied between GPU
            # models move there at no cost and overuse them in turn).  Start from the prices
            # of a sampled LP relaxation instead (docs/pricing.md, section 3).
            sampled = _sampled_lp_start(inst)
            if sampled is not None:
                sampled[cap <= 0] = 0.0
                lam, cached = sampled, None
    best_dual = math.inf
    best_lam = lam.copy()
    best_sel: tuple[np.ndarray, np.ndarray] | None = None  # Lagrangian choice at best_lam
    box = _Boxstep(cap, scale)
    theta: float | None = None  # Polyak step factor once the box has converged
    stale = 0
    if sampled is not None and np.any(sampled > 0):
        # the sample's prices are near the minimum: a box of a quarter of the largest price
        box.width = _SAMPLE_BOX * float(np.max(sampled * scale))
    for lam_i, T_i, L_i, _ in start_cuts:
        box.add(lam_i, T_i, L_i)
    last_primal = -spacing    # iteration of the last primal pass
    primal_lam: np.ndarray | None = None  # prices of the last primal pass
    gap_at_check, stall = math.inf, 0
    it = 0
    certified = dt == np.float64  # is best_dual a float64 evaluation?
    first = start_evals if cached is not None else start_evals + 1
    for it in range(max(1, first), max_it + 1):
        # the start's last selection is at its best prices: the first iteration reuses it
        from_start = cached is not None
        choice, T, L = cached if from_start else kern.select(lam)
        cached = None
        items = inst.starts + choice
        if dt != np.float64:
            T = inst.totals(items)
        improved = L < best_dual
        if improved:
            best_dual, best_lam = L, lam.copy()
            best_sel = (items, T)
            certified = dt == np.float64
        if not from_start:  # the start's selections are in the model already
            box.add(lam, T, L)
        # Primal passes (docs/pricing.md, section 4) cost a full repair + fill, tens of
        # selections: run them at prices that set a new best dual value and whose Lagrangian
        # choice is already close to the capacity (mean |T - C| / C <= _NEAR), at most every
        # `spacing` iterations; far from the capacity the repair or fill would rebuild most of
        # the choice.  Without a primal yet, any new best after iteration _FIRST_PRIMAL will do.
        if primal_every is not None:
            due = it % primal_every == 0
        else:
            # distance to the capacity: over-use of every resource, slack only of priced ones
            # (an unpriced resource may stay idle at the optimum)
            with np.errstate(over="ignore", invalid="ignore"):  # totals near the float max
                dev = np.where(lam > 0, np.abs(T - cap), np.maximum(T - cap, 0.0))
                near = float(dev.dot(inst.inv_scale)) <= _NEAR * R
            due = small or (improved and it - last_primal >= spacing and (
                near or it - last_primal >= _MAX_PRIMAL_GAP))
            if not due and best_items is None and it >= _FIRST_PRIMAL:
                # no primal yet (so no target for the step): use the best prices so far
                primal_from(*best_sel, best_lam)
                last_primal, primal_lam = it, best_lam
        if due:
            primal_from(items, T, lam)
            last_primal, primal_lam = it, lam
        if best_items is not None and _gap(best_dual, best_primal) <= gap_tol:
            if not certified:
                best_dual, certified = kern64.select(best_lam)[2], True
            if _gap(best_dual, best_primal) <= gap_tol:
                break
        # Stall: the gap has not shrunk by a tenth of the tolerance for _STALL iterations
        # (the dual has converged and what is left is the integrality gap).
        g_now = _gap(best_dual, best_primal) if best_items is not None else math.inf
        if best_items is None or g_now < gap_at_check - 0.1 * gap_tol:
            gap_at_check, stall = g_now, 0
        else:
            stall += 1
            if stall >= _STALL:
                break
        # Projected subgradient at lam, in normalised prices mu_r = lam_r * scale_r.
        mu = lam * scale
        g = (cap - T) / scale                      # dL/dmu
        g = np.where((mu <= 0) & (g > 0), 0.0, g)  # these prices are pinned at 0
        if float(g @ g) <= 0.0:  # lambda-choice feasible with complementary slackness: L(lam) = OPT
            if not due:
                primal_from(items, T, lam)
            break
        target = best_primal if best_items is not None else best_dual - 0.1 * max(abs(best_dual), 1.0)
        nxt = box.next_prices(target) if theta is None else None
        if nxt is not None:
            lam = nxt
            continue
        # The dual has converged (the box found no decrease) and the gap is still open: what is
        # left is the LP relaxation's integrality gap, which only another primal closes.  Polyak
        # subgradient steps around the best prices (theta halved after _PATIENCE iterations
        # without a better dual value) give the primal passes new Lagrangian choices to start
        # from, until the gap stalls (_STALL) or the steps vanish.
        if theta is None:
            theta, stale, lam, L = _THETA0, 0, best_lam, best_dual
            with np.errstate(over="ignore", invalid="ignore"):
                g = (cap - best_sel[1]) / scale   # the subgradient at the best prices
            g = np.where((best_lam <= 0) & (g > 0), 0.0, g)
        elif not improved:
            stale += 1
            if stale >= _PATIENCE:
                theta, stale = theta / 2, 0
        g2 = float(g @ g)
        if theta < _THETA_MIN or g2 <= 0.0:
            break
        step = theta * max(L - target, 1e-9 * max(abs(L), 1.0)) / g2
        lam = np.maximum(lam * scale - step * g, 0.0) / scale

    if not certified:
        best_dual = kern64.select(best_lam)[2]
    if primal_lam is None or not np.array_equal(primal_lam, best_lam):
        # the primal from the best prices, which the schedule may have skipped
        choice, T, _ = kern64.select(best_lam)
        primal_from(inst.starts + choice, T, best_lam)
    if best_items is None:
        # Last resort: the smallest configurations (all wait, when families have one), repaired.
        start = inst.smallest()
        T0 = inst.totals(start)
        primal_from(start, T0, best_lam)
        if best_items is None:
            raise Infeasible(_infeasible_message(inst, T0, it))
    # A final, longer greedy fill of the best choice (skipped when that choice's own fill, at
    # the same weights, already ran out of upgrades: it would change nothing).
    if not (best_fill[1] and np.array_equal(best_fill[0], best_lam)):
        items, T, _ = inst.fill(best_items, best_T, fill_weights(best_lam * scale),
                                rounds=10 * _FILL_ROUNDS)
        val = float(inst.u[items].sum())
        if val > best_primal:
            best_items, best_T, best_primal = items, T, val

    choice = inst.original_choice(best_items)
    totals = d[off[:-1] + choice].sum(axis=0)
    primal = float(u[off[:-1] + choice].sum())
    changed = (cur >= 0) & (choice != cur) if cur is not None else np.zeros(n, dtype=bool)
    # a choice may use up to the feasibility tolerance beyond C; against C alone its value
    # could exceed the bound (gap -7.9e-10 before).  The bound of the instance with capacities
    # max(C, totals), for which the choice is feasible: L + lam . max(0, totals - C) (weak
    # duality there); the same as L whenever the choice stays within C
    with np.errstate(over="ignore", invalid="ignore"):
        over = np.maximum(totals - cap, 0.0)
    dual = float(best_dual + best_lam @ over) if over.any() else float(best_dual)
    return PricingResult(
        choice=choice, prices=best_lam, primal_value=primal, dual_bound=dual,
        gap=_gap(dual, primal), iterations=it, seconds=time.perf_counter() - t0,
        totals=totals, changed=changed)


def _check_current(current: Any, switch_cost: Any, off: np.ndarray) -> np.ndarray | None:
    """``current[N]``: integers in -1 .. family size - 1; returns int64[N] or None."""
    if current is None:
        if switch_cost is not None:
            raise InvalidArgument("switch_cost", "given", "requires current (the running "
                                  "configurations) to know which configuration is free")
        return None
    n = off.shape[0] - 1
    a = np.asarray(current)
    if a.ndim != 1 or a.shape[0] != n:
        raise InvalidArgument("current.shape", a.shape, f"must be 1-D of length N={n}")
    if a.size and a.dtype.kind not in "iu":
        raise InvalidArgument("current.dtype", str(a.dtype), "must be integers")
    cur = a.astype(np.int64)
    size = np.diff(off)
    bad = np.flatnonzero((cur < -1) | (cur >= size))
    if bad.size:
        j = int(bad[0])
        raise InvalidArgument(f"current[{j}]", int(cur[j]),
                              f"must be -1 (not running) or a configuration index in 0..{int(size[j]) - 1}")
    return cur


def _uniform_price_start(kern: kernel.PreparedInstance, cap: np.ndarray,
                         inv_scale: np.ndarray, max_evals: int, bisections: int = 6,
                         record: list | None = None) -> tuple[np.ndarray, int, tuple | None]:
    """Cold-start prices: one capacity-normalised price ``a`` on every resource the zero-price
    choice overuses (``lam_r = a / cap_r`` there, 0 elsewhere), ``a`` found by bisection on the
    slope of the dual along that ray, ``dL/da = sum_{r on the ray} (1 - T_r(a) / cap_r)``,
    which is nondecreasing in ``a`` (L is convex).  Returns (prices float64[R] at the lowest
    dual value seen, selections used, the selection ``(choice, totals, L)`` at those prices or
    None when it was not the last one).  A handful of selections put the Lagrangian choice near
    the capacity, where the first primal pass is cheap and sizes BOXSTEP's first box.
    ``record``, when given, receives ``(prices, totals, L, choice)`` of every selection (the
    cutting planes of :class:`_Boxstep`)."""
    evals = 0
    best: tuple = (math.inf, np.zeros_like(cap), None)
    last: tuple | None = None
    ray = np.zeros_like(cap)

    def slope(a: float) -> tuple[float, np.ndarray]:
        nonlocal evals, best, last
        lam = a * ray
        last = kern.select(lam)
        evals += 1
        if record is not None:
            record.append((lam, last[1], last[2], last[0]))
        if last[2] < best[0]:
            best = (last[2], lam, last)
        with np.errstate(over="ignore", invalid="ignore"):  # totals near the float max
            return float(np.sum((1.0 - last[1] * inv_scale)[ray > 0])), last[1]

    _, T0 = slope(0.0)
    over = (T0 > cap) & (cap > 0)
    if not over.any():
        return best[1], evals, last  # zero prices: the Lagrangian choice is feasible
    ray = np.where(over, inv_scale, 0.0)
    lo, hi = 0.0, max(best[0], 1e-12) / int(over.sum())
    # Grow hi until the slope turns >= 0 -- or L itself rises, which on a convex L means hi is
    # past the minimum even when rounding keeps the slope a hair below 0 (a resource whose
    # fixed demand equals its capacity); prices never run off to huge values, where L's
    # float64 cancellation would make the bound unreliable.
    while evals < max_evals - bisections:
        l_lo = best[0]
        sl, _ = slope(hi)
        # "does not fall": within rounding of L's magnitude (a flat L along the ray, e.g. a
        # resource whose fixed demand equals its capacity, only moves by rounding)
        if sl >= 0 or last[2] >= l_lo - 1e-9 * max(abs(l_lo), 1.0):
            break
        lo, hi = hi, 4 * hi
    for _ in range(min(bisections, max_evals - evals)):
        mid = 0.5 * (lo + hi)
        if slope(mid)[0] < 0:
            lo = mid
        else:
            hi = mid
    return best[1], evals, best[2] if best[2] is last else None


def dominance_prune(utility: np.ndarray, demand: np.ndarray, offsets: np.ndarray
                    ) -> np.ndarray:
    """bool[M]: which configurations to keep after removing, within each job's family, every
    configuration that another one of the same family dominates: no more demand on any
    resource and at least the utility (ties between identical configurations keep the lowest
    index).  Exact: for any prices ``lam >= 0`` a dominated configuration's value
    ``u - lam . d`` is at most its dominator's, so L(lam) is unchanged, and in any feasible
    choice swapping it for its dominator stays feasible and loses nothing, so OPT is unchanged.

    Shapes: ``utility`` [M], ``demand`` [M, R], ``offsets`` int64[N+1] (validated CSR).  Costs
    O(sum_j K_j^2 R) time, vectorised over blocks of same-size families of at most
    :data:`_PRUNE_CELLS` pairwise cells (memory O(_PRUNE_CELLS) beyond the inputs)."""
    m = utility.shape[0]
    keep = np.ones(m, dtype=bool)
    sizes = np.diff(offsets)
    for k in np.unique(sizes):
        k = int(k)
        if k < 2:
            continue
        same_size = np.flatnonzero(sizes == k)
        step = max(1, _PRUNE_CELLS // (k * k * max(demand.shape[1], 1)))
        for lo in range(0, same_size.size, step):
            _prune_block(utility, demand, offsets[same_size[lo:lo + step]], k, keep)
    return keep


def _prune_block(utility: np.ndarray, demand: np.ndarray, starts: np.ndarray, k: int,
                 keep: np.ndarray) -> None:
    """:func:`dominance_prune` for the families of size ``k`` starting at ``starts``."""
    idx = starts[:, None] + np.arange(k)                     # [J, K]
    uu, dd = utility[idx], demand[idx]                       # [J, K], [J, K, R]
    # a dominates b: d_a <= d_b everywhere and u_a >= u_b, and (strictly better somewhere
    # or, when identical, a has the lower index)
    le = np.all(dd[:, :, None, :] <= dd[:, None, :, :], axis=3)   # [J, a, b]
    ge = uu[:, :, None] >= uu[:, None, :]
    same = (np.all(dd[:, :, None, :] == dd[:, None, :, :], axis=3)
            & (uu[:, :, None] == uu[:, None, :]))
    lower = np.arange(k)[:, None] < np.arange(k)[None, :]
    dom = le & ge & (~same | lower[None])
    dom[:, np.arange(k), np.arange(k)] = False
    keep[idx[dom.any(axis=1)]] = False


#: pairwise comparison cells (families x K x K x R) per vectorised block of dominance_prune
_PRUNE_CELLS = 1 << 22

#: jobs in the cold start's sampled linear program (:func:`_sampled_lp_start`)
_SAMPLE_JOBS = 128


def _sampled_lp_start(inst: "_Instance", sample: int = _SAMPLE_JOBS) -> np.ndarray | None:
    """Cold-start prices float64[R]: the capacity duals of the LP relaxation of the MMKP on
    ``sample`` jobs drawn without replacement (a fixed-seed generator: solves are
    deterministic), with capacity ``C * sample / N``.  The LP relaxation's optimal duals are
    the minimisers of the Lagrangian dual (for the MMKP the two are the same bound; Geoffrion
    1974, "Lagrangean relaxation for integer programming"), and prices are intensive
    quantities, so a sample's prices land close to the full instance's: on the trace-built
    instances at N = 10 000 a 128-job sample gives L within 4e-4 of the dual optimum
    (bench/pricing.py).  Dominated configurations are pruned first (:func:`dominance_prune`,
    exact).  Returns None when the LP fails (the caller falls back to the uniform start)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    n = inst.n
    if n <= sample:
        jobs = np.arange(n)
    else:
        jobs = np.sort(np.random.default_rng(0).choice(n, size=sample, replace=False))
    starts, sizes = inst.off[jobs], np.diff(inst.off)[jobs]
    sub_off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    idx = np.repeat(starts - sub_off[:-1], sizes) + np.arange(int(sub_off[-1]))
    u, d = inst.u[idx], inst.d[idx]
    keep = dominance_prune(u, d, sub_off)
    job = np.repeat(np.arange(jobs.size), sizes)[keep]
    u, d = u[keep], d[keep]
    frac = jobs.size / n
    cols = np.arange(u.shape[0])
    a_eq = sp.csr_matrix((np.ones(u.shape[0]), (job, cols)), shape=(jobs.size, u.shape[0]))
    a_ub = sp.csr_matrix(d.T * inst.inv_scale[:, None])  # capacity-normalised rows
    try:
        res = linprog(-u, A_ub=a_ub, b_ub=np.where(inst.cap > 0, frac, 0.0), A_eq=a_eq,
                      b_eq=np.ones(jobs.size), bounds=(0, None), method="highs")
    except (ValueError, RuntimeError):
        return None
    if res.status != 0 or res.ineqlin is None:
        return None
    mu = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
    if not np.all(np.isfinite(mu)):
        return None
    return mu * inst.inv_scale


class _Boxstep:
    """The price update: BOXSTEP (Marsten, Hogan & Blankenship 1975, "The BOXSTEP method for
    large-scale optimization", Operations Research 23(3)), a cutting-plane method kept in a
    box (trust region) around a stability centre, in capacity-normalised prices
    ``mu_r = lam_r * scale_r``.

    Every Lagrangian evaluation ``(lam_i, T_i, L_i)`` is a cutting plane
    ``L(mu) >= L_i + g_i . (mu - mu_i)``, ``g_i = (C - T_i) / scale`` (a subgradient; weak
    duality and convexity of L).  The next prices minimise the piecewise-linear model
    ``max_i`` of those planes over ``mu >= 0`` within ``|mu - centre|_inf <= width``: a linear
    program of R + 1 variables and at most :data:`_MAX_CUTS` rows (scipy's HiGHS).  A trial
    point becomes the centre when it achieves :data:`_SERIOUS` of the predicted decrease; the
    box doubles when such a step reached its edge with :data:`_GROW` of the predicted decrease
    achieved, and halves (to no less than half the step taken) when the trial point is worse
    than the centre.  Unlike a subgradient step, the model remembers every kink seen, so the
    method does not oscillate where thousands of jobs are tied between configurations (families
    with equal throughput on two GPU models make the dual's minimum such a kink).

    It only steers the prices: the dual bound is always an evaluated L, never the model's value.
    """

    def __init__(self, cap: np.ndarray, scale: np.ndarray):
        self.cap, self.scale = cap, scale
        self.fixed = cap <= 0  # no remaining configuration uses it: price 0
        self.cuts: list[tuple[np.ndarray, np.ndarray, float]] = []  # (mu, g, L)
        self.centre: tuple[np.ndarray, np.ndarray, float] | None = None  # (mu, g, L)
        self.width: float | None = None
        self.trial: tuple[np.ndarray, float] | None = None  # (mu, model value) of the last LP

    def add(self, lam: np.ndarray, T: np.ndarray, L: float) -> None:
        """Records the evaluation at ``lam`` (float64[R], original units; ``T`` its Lagrangian
        choice's totals, ``L`` its value) and updates the centre and the box width."""
        if not math.isfinite(L):
            return
        mu = lam * self.scale
        with np.errstate(over="ignore", invalid="ignore"):
            g = (self.cap - T) / self.scale
        if not np.all(np.isfinite(g)):
            return
        L = float(L)
        self.cuts.append((mu, g, L))
        if len(self.cuts) > _MAX_CUTS:
            del self.cuts[0]
        c = self.centre
        trial, self.trial = self.trial, None
        if c is None or trial is None:  # first, or an evaluation the box did not propose
            if c is None or L < c[2]:
                self.centre = (mu, g, L)
            return
        predicted = c[2] - trial[1]
        achieved = c[2] - L
        step = float(np.max(np.abs(mu - c[0]))) if mu.size else 0.0
        if achieved > 0 and achieved >= _SERIOUS * predicted:
            self.centre = (mu, g, L)
            if achieved >= _GROW * predicted and step >= 0.99 * self.width:
                self.width *= 2.0
        elif achieved < 0:
            self.width = max(0.5 * self.width, 0.5 * step)

    def next_prices(self, target: float) -> np.ndarray | None:
        """The model's minimiser in the box (float64[R], original units), or None when the
        box has shrunk below :data:`_BOX_MIN` or the model predicts no decrease (the centre
        is a minimum of L up to rounding).  ``target`` (<= OPT, e.g. the best primal value)
        sizes the first box."""
        from elastico.pricing.lp import minimize

        mu_c, g_c, L_c = self.centre
        if self.width is None:
            # first box: _THETA0 Polyak steps t = (L - target) / |g|^2 along the centre's
            # projected subgradient, measured in the infinity norm
            g = np.where((mu_c <= 0) & (g_c > 0), 0.0, g_c)
            g2 = float(g @ g)
            gap = max(L_c - target, 1e-9 * max(abs(L_c), 1.0))
            self.width = _THETA0 * gap / g2 * float(np.max(np.abs(g))) if g2 > 0 else 1.0
        if not self.width > _BOX_MIN:
            return None
        R = mu_c.shape[0]
        G = np.array([c[1] for c in self.cuts])
        A = np.hstack((G, -np.ones((G.shape[0], 1))))
        b = np.array([float(c[1] @ c[0]) - c[2] for c in self.cuts])
        lo = np.maximum(mu_c - self.width, 0.0)
        hi = np.where(self.fixed, 0.0, mu_c + self.width)
        cost = np.zeros(R + 1)
        cost[R] = 1.0
        # linprog(cost, A_ub=A, b_ub=b, bounds=list(zip(lo, hi)) + [(None, None)],
        # method="highs")'s x bit for bit, without its per-call overhead (elastico.pricing.lp)
        bounds = np.column_stack((np.append(lo, -np.inf), np.append(hi, np.inf)))
        x = minimize(cost, A, b, bounds)
        if x is None:
            return None
        mu = np.clip(x[:R], lo, hi)
        model = float(x[R])
        if not L_c - model > 1e-12 * max(abs(L_c), 1.0):
            return None
        self.trial = (mu, model)
        return mu / self.scale


def _infeasible_message(inst: _Instance, smallest_totals: np.ndarray, iterations: int) -> str:
    over = smallest_totals - inst.cap - inst.tol
    if np.any(over > 0):
        r = int(np.argmax(over / inst.scale))
        lower = np.minimum.reduceat(inst.d, inst.starts, axis=0).sum(axis=0)
        if np.any(lower > inst.cap + inst.tol):
            r = int(np.argmax((lower - inst.cap) / inst.scale))
            return (f"capacity[{r}]: {float(inst.cap[r])} is less than {float(lower[r])}, the "
                    f"demand of every job's smallest configuration on resource {r}; no feasible "
                    f"choice exists")
        return (f"no feasible choice found after {iterations} iterations (the smallest "
                f"configurations overuse resource {r}: {float(smallest_totals[r])} > capacity "
                f"{float(inst.cap[r])}; add a zero-demand wait configuration to every family)")
    return f"no feasible choice found after {iterations} iterations"
