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
double pairwise_sum(const double* a, int64_t n) {
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
    size_t size() const { return item.size(); }
};

// Appends the upgrades of job j that fit the slack S (numpy `_upgrade_rows`).
void add_upgrades(const PrimalInstance& in, int64_t j, const int64_t* items, const double* S,
                  Pool& pool, std::vector<double>& scratch) {
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
    for (int64_t j = 0; j < N; ++j) add_upgrades(in, j, items, S.data(), pool, scratch);

    std::vector<int64_t> best_pos(static_cast<size_t>(N), -1), picks, jobs_p;
    std::vector<double> ratio;
    std::vector<char> moved(static_cast<size_t>(N), 0);
    std::vector<int64_t> moved_jobs;
    int64_t done = 0;
    for (int64_t round = 0; round < rounds; ++round) {
        const size_t P = pool.size();
        if (P == 0) break;
        ratio.resize(P);
        jobs_p.resize(P);
        for (size_t p = 0; p < P; ++p) {
            const double* dl = pool.delta.data() + p * R;
            for (int64_t r = 0; r < R; ++r)
                scratch[r] = ((dl[r] > 0.0 ? dl[r] : 0.0) / in.scale[r]) * weights[r];
            const double cost = pairwise_sum(scratch.data(), R);
            ratio[p] = cost > 0 ? pool.gain[p] / cost : std::numeric_limits<double>::infinity();
            jobs_p[p] = job_of[pool.item[p]];
        }
        best_per_job(jobs_p, ratio, best_pos, picks,
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
        }
        std::sort(moved_jobs.begin(), moved_jobs.end());
        for (const int64_t j : moved_jobs) {
            add_upgrades(in, j, items, S.data(), next, scratch);
            moved[j] = 0;
        }
        std::swap(pool, next);
    }
    return done;
}

bool repair(const PrimalInstance& in, int64_t* items, double* totals, int64_t max_rounds) {
    const int64_t R = in.n_res, N = in.n_jobs;
    std::vector<double> E(R), scratch(R), cum(R), cum_k(R);
    std::vector<int64_t> over_idx;
    over_idx.reserve(static_cast<size_t>(R));
    // Each job's best candidate of one round (numpy `_best_per_job` over the candidates that
    // pass the red filter), in ascending job order; `order` sorts them.
    std::vector<int64_t> best_item, best_job, order;
    std::vector<double> best_ratio;
    best_item.reserve(static_cast<size_t>(N));
    best_job.reserve(static_cast<size_t>(N));
    best_ratio.reserve(static_cast<size_t>(N));
    order.reserve(static_cast<size_t>(N));
    const auto less = [](double a, double b) { return a < b; };  // ascending ratio
    for (int64_t round = 0; round < max_rounds; ++round) {
        over_idx.clear();
        for (int64_t r = 0; r < R; ++r) {
            E[r] = (totals[r] - in.capacity[r]) - in.tol[r];
            if (E[r] > 0) over_idx.push_back(r);
        }
        if (over_idx.empty()) return true;
        for (int64_t r = 0; r < R; ++r) scratch[r] = (E[r] > 0.0 ? E[r] : 0.0) / in.scale[r];
        const double V = pairwise_sum(scratch.data(), R);
        const double min_red = 1e-12 * std::max(V, 1.0);
        best_item.clear();
        best_job.clear();
        best_ratio.clear();
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
            int64_t bc = -1;
            double br = 0.0;
            for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
                if (c == cur) continue;
                const double* dn = in.demand + c * R;
                // Exact pre-filter: when delta_r >= 0 on every overused r (E_r > 0), each
                // term max(E_r + delta_r, 0) / scale_r is >= the term of V (rounding is
                // monotone, scale_r > 0; the terms of resources with E_r <= 0 are 0 in V), so
                // the same pairwise sum of the new terms is >= V and red = V - it is <= 0,
                // which never passes red > min_red (> 0).  Skipping such rows changes nothing.
                bool can_reduce = false;
                for (const int64_t r : over_idx)
                    if (!(dn[r] - dc[r] >= 0.0)) {
                        can_reduce = true;
                        break;
                    }
                if (!can_reduce) continue;
                for (int64_t r = 0; r < R; ++r) {
                    const double x = E[r] + (dn[r] - dc[r]);
                    scratch[r] = (x > 0.0 ? x : 0.0) / in.scale[r];
                }
                const double red = V - pairwise_sum(scratch.data(), R);
                if (!(red > min_red)) continue;
                const double ratio = (in.utility[cur] - in.utility[c]) / red;
                // Strictly better wins, so ties keep the earlier candidate (best_per_job).
                if (bc < 0 || less(ratio, br)) {
                    bc = c;
                    br = ratio;
                }
            }
            if (bc < 0) continue;
            best_item.push_back(bc);
            best_job.push_back(j);
            best_ratio.push_back(br);
        }
        if (best_item.empty()) return false;
        // Sort by ratio, ties by candidate position; positions ascend with the item index, so
        // the item index breaks ties the same way.
        order.resize(best_item.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            if (less(best_ratio[a], best_ratio[b])) return true;
            if (less(best_ratio[b], best_ratio[a])) return false;
            return best_item[a] < best_item[b];
        });
        // The first prefix with the lowest violation (delta recomputed: same float64 result).
        int64_t k = -1;
        double best_v = 0.0;
        for (size_t i = 0; i < order.size(); ++i) {
            const int64_t p = order[i];
            const double* dn = in.demand + best_item[p] * R;
            const double* dc = in.demand + items[best_job[p]] * R;
            for (int64_t r = 0; r < R; ++r) {
                const double dl = dn[r] - dc[r];
                cum[r] = i == 0 ? dl : cum[r] + dl;
                const double x = E[r] + cum[r];
                scratch[r] = (x > 0.0 ? x : 0.0) / in.scale[r];
            }
            const double v = pairwise_sum(scratch.data(), R);
            if (k < 0 || v < best_v) {
                k = static_cast<int64_t>(i);
                best_v = v;
                cum_k = cum;
            }
        }
        for (int64_t i = 0; i <= k; ++i) items[best_job[order[i]]] = best_item[order[i]];
        for (int64_t r = 0; r < R; ++r) totals[r] = totals[r] + cum_k[r];
    }
    return false;
}

}  // namespace elastico
