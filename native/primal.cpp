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
    std::vector<char> over(R);
    // Candidates of one round, in numpy's order (ascending item index).
    std::vector<int64_t> cand, cand_cur, cand_job, picks;
    std::vector<double> delta, ratio;
    std::vector<int64_t> best_pos(static_cast<size_t>(N), -1);
    for (int64_t round = 0; round < max_rounds; ++round) {
        bool any_over = false;
        for (int64_t r = 0; r < R; ++r) {
            E[r] = (totals[r] - in.capacity[r]) - in.tol[r];
            over[r] = E[r] > 0;
            any_over = any_over || over[r];
        }
        if (!any_over) return true;
        for (int64_t r = 0; r < R; ++r) scratch[r] = (E[r] > 0.0 ? E[r] : 0.0) / in.scale[r];
        const double V = pairwise_sum(scratch.data(), R);
        const double min_red = 1e-12 * std::max(V, 1.0);
        cand.clear();
        cand_cur.clear();
        cand_job.clear();
        delta.clear();
        ratio.clear();
        for (int64_t j = 0; j < N; ++j) {
            const int64_t cur = items[j];
            const double* dc = in.demand + cur * R;
            bool uses = false;
            for (int64_t r = 0; r < R; ++r)
                if (over[r] && dc[r] > 0) uses = true;
            if (!uses) continue;
            for (int64_t c = in.offsets[j]; c < in.offsets[j + 1]; ++c) {
                if (c == cur) continue;
                const double* dn = in.demand + c * R;
                const size_t base = delta.size();
                for (int64_t r = 0; r < R; ++r) delta.push_back(dn[r] - dc[r]);
                for (int64_t r = 0; r < R; ++r) {
                    const double x = E[r] + delta[base + r];
                    scratch[r] = (x > 0.0 ? x : 0.0) / in.scale[r];
                }
                const double red = V - pairwise_sum(scratch.data(), R);
                if (!(red > min_red)) {
                    delta.resize(base);
                    continue;
                }
                cand.push_back(c);
                cand_cur.push_back(cur);
                cand_job.push_back(j);
                ratio.push_back((in.utility[cur] - in.utility[c]) / red);
            }
        }
        if (cand.empty()) return false;
        best_per_job(cand_job, ratio, best_pos, picks,
                     [](double a, double b) { return a < b; });  // ascending ratio
        // The first prefix with the lowest violation.
        int64_t k = -1;
        double best_v = 0.0;
        for (size_t i = 0; i < picks.size(); ++i) {
            const double* dl = delta.data() + picks[i] * R;
            for (int64_t r = 0; r < R; ++r) {
                cum[r] = i == 0 ? dl[r] : cum[r] + dl[r];
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
        for (int64_t i = 0; i <= k; ++i) items[cand_job[picks[i]]] = cand[picks[i]];
        for (int64_t r = 0; r < R; ++r) totals[r] = totals[r] + cum_k[r];
    }
    return false;
}

}  // namespace elastico
