// Primal heuristics of Elastic Shadow Pricing (docs/pricing.md, section 4): repair of an
// over-capacity choice and greedy fill of a feasible one.
//
// Plain C++ over contiguous float64 arrays, no Python: the binding (bindings.cpp) is the only
// caller from Python, and the C++ tests (tests/test_primal.cpp) call it directly.  Both
// functions reproduce the numpy reference in services/pricing/solver.py (`_fill_numpy`,
// `_repair_numpy`) bit for bit: same candidate order, same tie rules, same float64 operations
// in the same order (sums over resources use numpy's pairwise summation order; demand prefix
// sums are sequential like numpy.cumsum).  Build primal.cpp with -ffp-contract=off so no
// multiply-add is fused.
//
// Instance: job j owns items [offsets[j], offsets[j+1]) (every family non-empty); item c has
// utility[c] and demand[c*R .. c*R+R).  `items[N]` holds one global item index per job
// (items[j] in job j's family).  capacity, tol and scale are [R]; a choice is feasible when
// totals[r] <= capacity[r] + tol[r]; scale[r] > 0 normalises resource r.
#pragma once
#include <cstdint>

namespace elastico {

struct PrimalInstance {
    int64_t n_jobs;
    int64_t n_res;
    const int64_t* offsets;   // [N+1]
    const double* utility;    // [M]
    const double* demand;     // [M*R]
    const double* capacity;   // [R]
    const double* tol;        // [R]
    const double* scale;      // [R]
};

// Greedy upgrades of a feasible choice (items, totals), in place.  Candidates: moves of job j
// to an item c with gain u[c] - u[items[j]] > 0 whose demand change delta fits the slack
// S = capacity + tol - totals.  Score: ratio = gain / sum_r max(delta_r, 0) / scale_r *
// weights_r (inf when that is 0).  Each round takes every job's best-ratio candidate (ties:
// earlier in the pool), sorts them by descending ratio (ties: earlier in the pool), applies the
// largest prefix whose summed delta fits S, drops the pool rows of moved jobs and the rows
// that no longer fit, and appends the moved jobs' fresh candidates (by item index).  Stops
// after `rounds` rounds or when the pool is empty.  Returns the number of rounds that moved.
int64_t greedy_fill(const PrimalInstance& in, const double* weights, int64_t* items,
                    double* totals, int64_t rounds);

// Moves jobs until the choice is feasible (docs/pricing.md, section 4), in place.  Each round
// takes, for every job whose item uses an overused resource, its best move c: among the moves
// that lower the capacity-normalised violation V = sum_r max(T_r - C_r - tol_r, 0) / scale_r
// (by red > 1e-12 max(V, 1)), the lowest key = max(rc, 0) / red, where rc = values[cur] -
// values[c] is the loss in Lagrangian value (values[M] = u - prices . d at the shadow prices,
// computed by the caller; with prices 0 it is the utility loss) -- a move that costs little at
// the shadow prices frees resources the fill can reuse.  The moves are sorted by key (ties: lower item index) and applied in that
// order, each only if it still lowers V, until the choice is feasible.  `items` and `totals`
// (the demand of `items`) are updated in place.  Returns true when the choice became feasible,
// false when a round moved nothing or `max_rounds` ran out (items/totals then hold the last,
// infeasible, state).
bool repair(const PrimalInstance& in, const double* values, int64_t* items, double* totals,
            int64_t max_rounds);

// out[j] = the global index of the lowest key[c] in job j's family (ties: the lowest index).
void argmin_per_job(int64_t n_jobs, const int64_t* offsets, const double* key, int64_t* out);

}  // namespace elastico
