#include "primal.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace elastico {
namespace {

// numpy's pairwise summation of a contiguous float64 run (numpy/_core/src/umath/
// loops_utils.h.src, pairwise_sum): plain loop below 8 elements, 8 interleaved accumulators
// up to 128, recursive halving (at a multiple of 8) above.  Used wherever the numpy reference
// calls .sum(axis=-1) over resources, so the two agree bit for bit.
double pairwise_sum_large(const double* a, int64_t n);

inline double pairwise_sum(const double* a, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; ++k) r[k] = a[k];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; ++k) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    return pairwise_sum_large(a, n);
}

// n > 128: recursive halving at a multiple of 8 (kept out of line; resource counts this large
// are rare).
double pairwise_sum_large(const double* a, int64_t n) {
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

std::vector<int64_t> job_index(const PrimalInstance& in) {
    std::vector<int64_t> job_of(static_cast<size_t>(in.offsets[in.n_jobs]));
    for (int64_t j = 0; j < in.n_jobs; ++j)
        for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) job_of[c] = j;
    return job_of;
}

// The candidate pool of greedy_fill: parallel arrays in pool order.
struct Pool {
    std::vector<int64_t> item;
    std::vector<double> delta;  // [size * R]
    std::vector<double> gain;
    std::vector<double> ratio;  // gain per weighted cost; the weights are fixed for one fill
    size_t size() const { return item.size(); }
};

// Appends the upgrades of job j that fit the slack S (numpy `_upgrade_rows`).
void add_upgrades(const PrimalInstance& in, int64_t j, const int64_t* items, const double* S,
                  const double* ws, Pool& pool, std::vector<double>& scratch) {
    const int64_t R = in.n_res;
    const int64_t cur = items[j];
    const double* dc = in.demand + cur * R;
    for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
        const double gain = in.utility[c] - in.utility[cur];
        if (!(gain > 0)) continue;
        const double* dn = in.demand + c * R;
        bool fits = true;
        for (int64_t r = 0; r < R; ++r) {
            scratch[r] = dn[r] - dc[r];
            if (!(scratch[r] <= S[r])) fits = false;
        }
        if (!fits) continue;
        pool.item.push_back(c);
        pool.delta.insert(pool.delta.end(), scratch.begin(), scratch.begin() + R);
        pool.gain.push_back(gain);
        // score: gain / sum_r max(delta_r, 0) * ws_r (inf when that is 0); the same float64
        // operations as the numpy reference's per-round recomputation
        for (int64_t r = 0; r < R; ++r) scratch[r] = (scratch[r] > 0.0 ? scratch[r] : 0.0) * ws[r];
        const double cost = pairwise_sum(scratch.data(), R);
        pool.ratio.push_back(cost > 0 ? gain / cost : std::numeric_limits<double>::infinity());
    }
}

// Positions of each job's best key (strictly better wins, so ties keep the earlier position),
// sorted by that key, ties by position: numpy `_best_per_job` on a stable argsort.
template <typename Better>
void best_per_job(const std::vector<int64_t>& job_of_pos, const std::vector<double>& key,
                  std::vector<int64_t>& best_pos, std::vector<int64_t>& picks, Better better) {
    picks.clear();
    const size_t n = job_of_pos.size();
    for (size_t p = 0; p < n; ++p) {
        const int64_t j = job_of_pos[p];
        int64_t& b = best_pos[j];
        if (b < 0) {
            b = static_cast<int64_t>(p);
            picks.push_back(j);
        } else if (better(key[p], key[b])) {
            b = static_cast<int64_t>(p);
        }
    }
    for (auto& x : picks) {
        const int64_t j = x;
        x = best_pos[j];
        best_pos[j] = -1;
    }
    std::sort(picks.begin(), picks.end(), [&](int64_t a, int64_t b) {
        if (better(key[a], key[b])) return true;
        if (better(key[b], key[a])) return false;
        return a < b;
    });
}

}  // namespace

int64_t greedy_fill(const PrimalInstance& in, const double* weights, int64_t* items,
                    double* totals, int64_t rounds) {
    const int64_t R = in.n_res, N = in.n_jobs;
    const std::vector<int64_t> job_of = job_index(in);
    std::vector<double> S(R), scratch(R), cum(R), cum_k(R);
    for (int64_t r = 0; r < R; ++r) S[r] = (in.capacity[r] + in.tol[r]) - totals[r];

    Pool pool, next;

    std::vector<int64_t> best_pos(static_cast<size_t>(N), -1), picks, jobs_p;
    // cost weight per unit of resource r: weights_r / scale_r, computed once (the numpy
    // reference computes the same quotient, so the products agree bit for bit)
    std::vector<double> ws(R);
    for (int64_t r = 0; r < R; ++r) ws[r] = weights[r] / in.scale[r];
    for (int64_t j = 0; j < N; ++j) add_upgrades(in, j, items, S.data(), ws.data(), pool, scratch);
    std::vector<char> moved(static_cast<size_t>(N), 0);
    std::vector<int64_t> moved_jobs;
    int64_t done = 0;
    for (int64_t round = 0; round < rounds; ++round) {
        const size_t P = pool.size();
        if (P == 0) break;
        jobs_p.resize(P);
        for (size_t p = 0; p < P; ++p) jobs_p[p] = job_of[pool.item[p]];
        best_per_job(jobs_p, pool.ratio, best_pos, picks,
                     [](double a, double b) { return a > b; });  // descending ratio

        // The largest prefix that fits together (row 0 always fits: the pool only holds
        // rows with delta <= S).
        std::fill(cum.begin(), cum.end(), 0.0);
        int64_t k = -1;
        for (size_t i = 0; i < picks.size(); ++i) {
            const double* dl = pool.delta.data() + picks[i] * R;
            bool fits = true;
            for (int64_t r = 0; r < R; ++r) {
                cum[r] = i == 0 ? dl[r] : cum[r] + dl[r];
                if (!(cum[r] <= S[r])) fits = false;
            }
            if (fits) {
                k = static_cast<int64_t>(i);
                cum_k = cum;
            }
        }
        if (k < 0) break;  // unreachable (row 0 fits); numpy would raise here
        moved_jobs.clear();
        for (int64_t i = 0; i <= k; ++i) {
            const int64_t c = pool.item[picks[i]];
            const int64_t j = job_of[c];
            items[j] = c;
            moved[j] = 1;
            moved_jobs.push_back(j);
        }
        for (int64_t r = 0; r < R; ++r) {
            totals[r] = totals[r] + cum_k[r];
            S[r] = S[r] - cum_k[r];
        }
        ++done;
        // Keep the rows of unmoved jobs that still fit, then the moved jobs' fresh rows.
        next.item.clear();
        next.delta.clear();
        next.gain.clear();
        next.ratio.clear();
        for (size_t p = 0; p < P; ++p) {
            if (moved[jobs_p[p]]) continue;
            const double* dl = pool.delta.data() + p * R;
            bool fits = true;
            for (int64_t r = 0; r < R; ++r)
                if (!(dl[r] <= S[r])) fits = false;
            if (!fits) continue;
            next.item.push_back(pool.item[p]);
            next.delta.insert(next.delta.end(), dl, dl + R);
            next.gain.push_back(pool.gain[p]);
            next.ratio.push_back(pool.ratio[p]);
        }
        std::sort(moved_jobs.begin(), moved_jobs.end());
        for (const int64_t j : moved_jobs) {
            add_upgrades(in, j, items, S.data(), ws.data(), next, scratch);
            moved[j] = 0;
        }
        std::swap(pool, next);
    }
    return done;
}

namespace {

// V = sum_r max(E_r + delta_r, 0) * inv_scale_r (delta may be null: 0).  inv_scale = 1 / scale,
// computed once per call: a multiply instead of a divide per term (and the numpy reference
// multiplies by the same reciprocal).
double violation(int64_t R, const double* inv_scale, const double* E, const double* delta,
                 double* scratch) {
    if (R < 8) {  // numpy's pairwise sum is a plain left-to-right loop below 8 terms
        double res = 0.0;
        for (int64_t r = 0; r < R; ++r) {
            const double x = delta ? E[r] + delta[r] : E[r];
            res += (x > 0.0 ? x : 0.0) * inv_scale[r];
        }
        return res;
    }
    if (R == 8) {  // exactly one 8-wide block: pairwise_sum's fixed tree, kept in registers
        double t[8];
        for (int r = 0; r < 8; ++r) {
            const double x = delta ? E[r] + delta[r] : E[r];
            t[r] = (x > 0.0 ? x : 0.0) * inv_scale[r];
        }
        return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    }
    for (int64_t r = 0; r < R; ++r) {
        const double x = delta ? E[r] + delta[r] : E[r];
        scratch[r] = (x > 0.0 ? x : 0.0) * inv_scale[r];
    }
    return pairwise_sum(scratch, R);
}

}  // namespace

void argmin_per_job(int64_t n_jobs, const int64_t* offsets, const double* key, int64_t* out) {
    for (int64_t j = 0; j < n_jobs; ++j) {
        int64_t best = offsets[j];
        for (int64_t c = best + 1; c < offsets[j + 1]; ++c)
            if (key[c] < key[best]) best = c;
        out[j] = best;
    }
}

bool repair(const PrimalInstance& in, const double* values, int64_t* items, double* totals,
            int64_t max_rounds) {
    constexpr double kEps = std::numeric_limits<double>::epsilon();
    const int64_t R = in.n_res, N = in.n_jobs;
    std::vector<double> E(R), E0(R), delta(R), scratch(R), inv(R);
    for (int64_t r = 0; r < R; ++r) inv[r] = 1.0 / in.scale[r];
    std::vector<int64_t> over_idx, over0;
    over_idx.reserve(static_cast<size_t>(R));
    const auto update_excess = [&] {
        over_idx.clear();
        for (int64_t r = 0; r < R; ++r) {
            E[r] = (totals[r] - in.capacity[r]) - in.tol[r];
            if (E[r] > 0) over_idx.push_back(r);
        }
    };
    // A heap entry: a job's lower bound on its best key (exact == false; item unused), or its
    // best move with its exact key (exact == true).
    struct Entry {
        double key;
        int64_t job, item;
        bool exact;
    };
    // Pop order: ascending key; at equal keys bounds before exact moves (so a job whose bound
    // equals a move's key is evaluated before that move is applied), exact moves by item.
    const auto after = [](const Entry& a, const Entry& b) {
        if (a.key != b.key) return a.key > b.key;
        if (a.exact != b.exact) return a.exact;
        return a.exact ? a.item > b.item : a.job > b.job;
    };
    std::vector<Entry> heap;
    for (int64_t round = 0; round < max_rounds; ++round) {
        update_excess();
        if (over_idx.empty()) return true;
        E0 = E;  // keys are of the round's starting point, like the numpy reference
        over0 = over_idx;
        const double V = violation(R, inv.data(), E0.data(), nullptr, scratch.data());
        const double min_red = 1e-12 * std::max(V, 1.0);

        // Job j's best move, exactly as the numpy reference scores it: among moves with
        // red > min_red the lowest key = max(rc, 0) / red (ties: the earlier item).
        const auto best_move = [&](int64_t j, int64_t& bc, double& bk) {
            const int64_t cur = items[j];
            const double* dc = in.demand + cur * R;
            const double pv_cur = values[cur];
            bc = -1;
            bk = 0.0;
            double prune_at = 0.0;
            for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
                if (c == cur) continue;
                double rc = pv_cur - values[c];
                if (!(rc > 0.0)) rc = 0.0;
                // red <= V, so key >= rc / V; rc >= prune_at (bk * V rounded up) implies it
                // in floating point too: only moves the exact test would reject are skipped.
                if (bc >= 0 && rc >= prune_at) continue;
                const double* dn = in.demand + c * R;
                // Exact pre-filter: delta_r >= 0 on every overused r gives red <= 0.
                bool can_reduce = false;
                for (const int64_t r : over0)
                    if (!(dn[r] - dc[r] >= 0.0)) {
                        can_reduce = true;
                        break;
                    }
                if (!can_reduce) continue;
                for (int64_t r = 0; r < R; ++r) delta[r] = dn[r] - dc[r];
                const double red = V - violation(R, inv.data(), E0.data(), delta.data(),
                                                 scratch.data());
                if (!(red > min_red)) continue;
                // rc > bk * red (rounded up) implies rc / red > bk: worse, no divide
                if (bc >= 0 && rc > bk * red * (1.0 + 8.0 * kEps)) continue;
                const double key = rc / red;
                if (bc < 0 || key < bk) {
                    bc = c;
                    bk = key;
                    prune_at = bk * V * (1.0 + 8.0 * kEps);
                }
            }
        };

        // Lazy evaluation: every job that uses an overused resource enters with a cheap lower
        // bound on its best key, min_c max(rc, 0) / min(V, F_j), where F_j = sum over the
        // overused r of d[cur]_r / scale_r bounds what any of its moves can remove (red <= V
        // and red <= F_j; both bounds are padded for rounding).  Only jobs whose bound comes up
        // before the repair is done are scored exactly -- at good prices, a few near-ties out
        // of thousands -- and the moves come out in the same (key, item) order as sorting all
        // of them, which is what the numpy reference does.
        heap.clear();
        for (int64_t j = 0; j < N; ++j) {
            if (in.offsets[j + 1] - in.offsets[j] < 2) continue;  // nothing to move to
            const int64_t cur = items[j];
            const double* dc = in.demand + cur * R;
            double F = 0.0;
            for (const int64_t r : over0) F += dc[r] * inv[r];
            if (!(F > 0.0)) continue;  // uses no overused resource: cannot lower V
            double rc_min = std::numeric_limits<double>::infinity();
            for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
                if (c == cur) continue;
                const double rc = values[cur] - values[c];
                rc_min = std::min(rc_min, rc > 0.0 ? rc : 0.0);
            }
            const double cap = std::min(V, F) * (1.0 + 64.0 * kEps);
            heap.push_back({(rc_min / cap) * (1.0 - 8.0 * kEps), j, -1, false});
        }
        std::make_heap(heap.begin(), heap.end(), after);

        // Apply the moves in key order, each only while it still lowers the violation (so a
        // resource fixed by earlier moves does not pull in more), until the choice is feasible.
        double v_cur = V;
        bool moved = false;
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), after);
            const Entry e = heap.back();
            heap.pop_back();
            if (!e.exact) {
                int64_t bc;
                double bk;
                best_move(e.job, bc, bk);
                if (bc >= 0) {
                    heap.push_back({bk, e.job, bc, true});
                    std::push_heap(heap.begin(), heap.end(), after);
                }
                continue;
            }
            const int64_t j = e.job, c = e.item;
            const double* dn = in.demand + c * R;
            const double* dc = in.demand + items[j] * R;
            for (int64_t r = 0; r < R; ++r) delta[r] = dn[r] - dc[r];
            const double v_new = violation(R, inv.data(), E.data(), delta.data(), scratch.data());
            if (!(v_cur - v_new > min_red)) continue;
            items[j] = c;
            for (int64_t r = 0; r < R; ++r) totals[r] = totals[r] + delta[r];
            update_excess();
            v_cur = violation(R, inv.data(), E.data(), nullptr, scratch.data());
            moved = true;
            if (over_idx.empty()) return true;
        }
        if (!moved) return false;
    }
    return false;
}

}  // namespace elastico
