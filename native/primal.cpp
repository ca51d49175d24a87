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
    const int64_t R = in.n_res, N = in.n_jobs;
    std::vector<double> E(R), delta(R), scratch(R), inv(R);
    for (int64_t r = 0; r < R; ++r) inv[r] = 1.0 / in.scale[r];
    const auto V_of = [&](const double* dl) {
        return violation(R, inv.data(), E.data(), dl, scratch.data());
    };
    std::vector<int64_t> over_idx;
    over_idx.reserve(static_cast<size_t>(R));
    // Each job's best candidate of one round, in ascending job order; `order` sorts them.
    std::vector<int64_t> best_item, best_job, order;
    std::vector<double> best_key;
    const auto update_excess = [&] {
        over_idx.clear();
        for (int64_t r = 0; r < R; ++r) {
            E[r] = (totals[r] - in.capacity[r]) - in.tol[r];
            if (E[r] > 0) over_idx.push_back(r);
        }
    };
    for (int64_t round = 0; round < max_rounds; ++round) {
        update_excess();
        if (over_idx.empty()) return true;
        const double V = V_of(nullptr);
        const double min_red = 1e-12 * std::max(V, 1.0);
        best_item.clear();
        best_job.clear();
        best_key.clear();
        for (int64_t j = 0; j < N; ++j) {
            const int64_t cur = items[j];
            const double* dc = in.demand + cur * R;
            bool uses = false;
            for (const int64_t r : over_idx)
                if (dc[r] > 0) {
                    uses = true;
                    break;
                }
            if (!uses) continue;
            const double pv_cur = values[cur];
            int64_t bc = -1;
            double bk = 0.0, prune_at = 0.0;
            for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
                if (c == cur) continue;
                double rc = pv_cur - values[c];
                if (!(rc > 0.0)) rc = 0.0;
                // Prune: red <= V (V_new >= 0), so key = rc / red >= rc / V; a key not strictly
                // below the job's best cannot replace it.  rc >= prune_at (= bk * V, rounded up
                // by 4 ulp) implies rc / V >= bk in floating point too, so this only skips
                // candidates the exact test would reject -- and avoids a divide per candidate.
                if (bc >= 0 && rc >= prune_at) continue;
                const double* dn = in.demand + c * R;
                // Exact pre-filter: when delta_r >= 0 on every overused r, every term of the
                // new violation is >= the same term of V (the others are 0 in V), so red <= 0
                // never passes red > min_red.  Skipping such rows changes nothing.
                bool can_reduce = false;
                for (const int64_t r : over_idx)
                    if (!(dn[r] - dc[r] >= 0.0)) {
                        can_reduce = true;
                        break;
                    }
                if (!can_reduce) continue;
                for (int64_t r = 0; r < R; ++r) delta[r] = dn[r] - dc[r];
                const double red = V - V_of(delta.data());
                if (!(red > min_red)) continue;
                // rc > bk * red (rounded up) implies rc / red > bk: clearly worse, no divide
                if (bc >= 0 && rc > bk * red * (1.0 + 8.0 * std::numeric_limits<double>::epsilon()))
                    continue;
                const double key = rc / red;
                if (bc < 0 || key < bk) {  // strictly better wins: ties keep the earlier item
                    bc = c;
                    bk = key;
                    prune_at = bk * V * (1.0 + 8.0 * std::numeric_limits<double>::epsilon());
                }
            }
            if (bc < 0) continue;
            best_item.push_back(bc);
            best_job.push_back(j);
            best_key.push_back(bk);
        }
        if (best_item.empty()) return false;
        order.resize(best_item.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
        // Ascending (key, item); a heap pops in that order without sorting the moves the
        // repair never reaches (it usually stops after a few).
        const auto after = [&](int64_t a, int64_t b) {
            if (best_key[b] < best_key[a]) return true;
            if (best_key[a] < best_key[b]) return false;
            return best_item[b] < best_item[a];
        };
        std::make_heap(order.begin(), order.end(), after);
        // Apply the moves in that order, each only while it still lowers the violation, so a
        // resource fixed by earlier moves does not pull in more.
        double v_cur = V;
        bool moved = false;
        for (auto end = order.end(); end != order.begin(); --end) {
            std::pop_heap(order.begin(), end, after);
            const int64_t p = *(end - 1);
            const int64_t j = best_job[p], c = best_item[p];
            const double* dn = in.demand + c * R;
            const double* dc = in.demand + items[j] * R;
            for (int64_t r = 0; r < R; ++r) delta[r] = dn[r] - dc[r];
            const double v_new = V_of(delta.data());
            if (!(v_cur - v_new > min_red)) continue;
            items[j] = c;
            for (int64_t r = 0; r < R; ++r) totals[r] = totals[r] + delta[r];
            update_excess();
            v_cur = V_of(nullptr);
            moved = true;
            if (over_idx.empty()) return true;
        }
        if (!moved) return false;
    }
    return false;
}

}  // namespace elastico
