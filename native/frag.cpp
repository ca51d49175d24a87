// FGD's fragmentation summaries and increases (frag.hpp has the definitions and the source).
#include "frag.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace elastico {

double round9(double x) {
    if (!std::isfinite(x)) return x;
    // nearbyint in the default rounding mode rounds half to even, like Python's round();
    // + 0.0 turns a -0.0 into 0.0 (Python's round returns the int 0)
    return std::nearbyint(x * 1e9) / 1e9 + 0.0;
}

int64_t gpu_free_milli(bool healthy, bool mig, int64_t compute_slices, int64_t compute_used,
                       double used_share) {
    if (!healthy) return 0;
    const double free = mig ? static_cast<double>(compute_slices - compute_used) /
                                  static_cast<double>(compute_slices)
                            : 1.0 - used_share;
    return static_cast<int64_t>(std::nearbyint(free * 1000.0));
}

void frag_update(const FragPods& pods, const FragNodes& nodes, int64_t node, const int64_t* row,
                 int64_t cpu) {
    const int64_t G = nodes.width, K = pods.n_thresholds;
    int64_t* r = nodes.rows + node * G;
    int64_t L = 0;
    for (int64_t j = 0; j < G; ++j) {
        r[j] = row[j];
        L += row[j];
    }
    int64_t* cnt = nodes.cnt + node * K;
    int64_t* S = nodes.sum + node * K;
    for (int64_t k = 0; k < K; ++k) {
        const int64_t t = pods.thresholds[k];
        int64_t c = 0, s = 0;
        for (int64_t j = 0; j < G; ++j)
            if (r[j] >= t) {
                ++c;
                s += r[j];
            }
        cnt[k] = c;
        S[k] = s;
    }
    nodes.cpu[node] = cpu;
    nodes.total[node] = L;
    const uint8_t* acc = pods.access + nodes.model[node] * pods.n_pods;
    // F = L - sum_t p_t [t fits] S_t, summed left to right in typical-pod order
    double fit = 0.0;
    for (int64_t t = 0; t < pods.n_pods; ++t) {
        const int64_t k = pods.pod_k[t];
        if (cpu >= pods.pod_cpu[t] && acc[t] && cnt[k] >= pods.pod_gpus[t])
            fit += pods.pod_freq[t] * static_cast<double>(S[k]);
    }
    nodes.frag[node] = static_cast<double>(L) - fit;
}

void frag_node_increase(const FragPods& pods, const FragNodes& nodes, int64_t node, int64_t m,
                        int64_t cpu_m, double* out) {
    const int64_t G = nodes.width, K = pods.n_thresholds;
    const int64_t* r = nodes.rows + node * G;
    const int64_t* cnt = nodes.cnt + node * K;
    const int64_t* S = nodes.sum + node * K;
    const int64_t* thr_begin = pods.thresholds;
    const int64_t* thr_end = pods.thresholds + K;
    const int64_t L = nodes.total[node];
    const double F = nodes.frag[node];
    const int64_t cpu = nodes.cpu[node] - cpu_m;
    const uint8_t* acc = pods.access + nodes.model[node] * pods.n_pods;
    for (int64_t j = 0; j < G; ++j) {
        const int64_t o = r[j];
        if (o < m - 1) {
            out[j] = std::numeric_limits<double>::infinity();
            continue;
        }
        const int64_t w = o > m ? o - m : 0;
        // the GPU goes from o to w <= o: the thresholds up to w lose o - w of S, those in
        // (w, o] lose the GPU (FragmentationModel.shift)
        const int64_t a = std::upper_bound(thr_begin, thr_end, w) - thr_begin;
        const int64_t b = std::upper_bound(thr_begin, thr_end, o) - thr_begin;
        double fit = 0.0;
        for (int64_t t = 0; t < pods.n_pods; ++t) {
            if (cpu < pods.pod_cpu[t] || !acc[t]) continue;
            const int64_t k = pods.pod_k[t];
            const int64_t c1 = cnt[k] - (k >= a && k < b ? 1 : 0);
            const int64_t s1 = S[k] - (k < a ? o - w : (k < b ? o : 0));
            if (c1 >= pods.pod_gpus[t]) fit += pods.pod_freq[t] * static_cast<double>(s1);
        }
        out[j] = static_cast<double>(L - (o - w)) - fit - F;
    }
}

int64_t frag_refresh(const FragPods& pods, const FragNodes& nodes, const int64_t* cand, int64_t n,
                     int64_t* seen, const int64_t* version, const int64_t* offsets, int64_t m,
                     int64_t cpu_m, double* d_all, int64_t* new_all, int64_t max_stale) {
    int64_t stale = 0;
    for (int64_t i = 0; i < n; ++i) stale += seen[cand[i]] != version[cand[i]];
    if (stale > max_stale || stale == 0) return stale;
    std::vector<double> inc(static_cast<size_t>(nodes.width));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t v = cand[i];
        if (seen[v] == version[v]) continue;
        frag_node_increase(pods, nodes, v, m, cpu_m, inc.data());
        const int64_t lo = offsets[v], hi = offsets[v + 1];
        const int64_t* r = nodes.rows + v * nodes.width;
        for (int64_t f = lo; f < hi; ++f) {
            const int64_t o = r[f - lo];
            d_all[f] = round9(inc[f - lo] / 1000.0);
            new_all[f] = o > m ? o - m : 0;
        }
        seen[v] = version[v];
    }
    return stale;
}

int64_t count_runs(int64_t n, const int64_t* node_of) {
    int64_t runs = 0;
    for (int64_t i = 0; i < n; ++i) runs += i == 0 || node_of[i] != node_of[i - 1];
    return runs;
}

void elastico_candidates(int64_t n, const int64_t* idx, const int64_t* node_of, const double* d_all,
                         const int64_t* new_all, double consolidation, int64_t* uniq,
                         int64_t* first, int64_t* counts, int64_t* order, double* d_gpu,
                         int64_t* new_gpu, double* opt_key, int64_t* visit) {
    int64_t r = -1;
    for (int64_t i = 0; i < n; ++i) {
        d_gpu[i] = d_all[idx[i]];
        new_gpu[i] = new_all[idx[i]];
        order[i] = i;
        if (i == 0 || node_of[i] != node_of[i - 1]) {
            ++r;
            uniq[r] = node_of[i];
            first[r] = i;
            counts[r] = 0;
        }
        ++counts[r];
    }
    const int64_t R = r + 1;
    for (int64_t u = 0; u < R; ++u) {
        int64_t* lo = order + first[u];
        std::stable_sort(lo, lo + counts[u], [&](int64_t a, int64_t b) {
            return d_gpu[a] < d_gpu[b] || (!(d_gpu[b] < d_gpu[a]) && new_gpu[a] < new_gpu[b]);
        });
        // np.minimum.reduceat: the running minimum keeps the earlier of equal values
        double opt = d_gpu[first[u]];
        for (int64_t i = first[u] + 1; i < first[u] + counts[u]; ++i)
            if (!(opt <= d_gpu[i])) opt = d_gpu[i];
        // np.round(x, 9): scale by 1e9, round half to even, scale back
        opt_key[u] = std::nearbyint((opt + consolidation * static_cast<double>(uniq[u])) * 1e9) / 1e9;
        visit[u] = u;
    }
    // runs come in node order, so a stable sort by opt_key breaks ties by node
    std::stable_sort(visit, visit + R, [&](int64_t a, int64_t b) { return opt_key[a] < opt_key[b]; });
}

}  // namespace elastico
