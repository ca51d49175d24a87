// FGD's GPU fragmentation measure, the inner loop of the placer's `elastico` scorer.
//
// Source: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
// Fragmentation Gradient Descent", USENIX ATC 2023; simulator hkust-adsl/
// kubernetes-scheduler-simulator, pkg/utils/frag.go (GetNodePodFrag, NodeGpuShareFragAmount).
// The reference is the plain-Python path of services/placer/fragmentation.py (NodeSummaries:
// update, node_increase) and services/placer/placement/frag_cache.py (touch, cached_deltas); this
// file reproduces it bit for bit: the same integer summaries, the same float64 operations in
// the same order (sequential sums in typical-pod order), the same rounding to 1e-9.  Build
// with -ffp-contract=off so no multiply-add is fused.
//
// Units: GPU capacity in milli-GPU (1000 = one whole GPU), CPU in milli-cores; integers.
// Fragmentation in milli-GPU (float64).  Plain C++ over contiguous arrays, no Python, no
// global state: the binding (bindings.cpp) owns the arrays, the C++ tests
// (tests/test_frag.cpp) call these functions directly.
//
// Node summary (module docstring of fragmentation.py): with left_i the free milli-GPU of GPU
// i, for each distinct per-GPU need thr[k] of the typical GPU pods cnt[k] = #{i: left_i >=
// thr[k]} and S[k] = sum of those left_i; L = sum_i left_i; the fragmentation
// F = L - sum_t p_t [pod t fits] S[k_t], where pod t fits when cnt[k_t] >= n_t, the node's
// free milli-CPU >= c_t and t may run on the node's GPU model.
#pragma once
#include <cstdint>

namespace elastico {

// The typical GPU pods of a workload (CPU-only typical pods never fit a GPU, so they add
// nothing to the sum and are left out), in typical-pod order.
struct FragPods {
    int64_t n_thresholds;        // K
    const int64_t* thresholds;   // [K] distinct per-GPU needs, ascending, milli-GPU
    int64_t n_pods;              // T
    const int64_t* pod_k;        // [T] index into thresholds of pod t's per-GPU need
    const int64_t* pod_gpus;     // [T] GPUs pod t needs (n_t)
    const int64_t* pod_cpu;      // [T] milli-CPU pod t needs (c_t)
    const double* pod_freq;      // [T] popularity p_t
    int64_t n_models;
    const uint8_t* access;       // [n_models * T]: 1 if pod t may run on that GPU model
};

// Per-node summaries of B nodes (row-major, width G GPUs per node, 0-padded).
struct FragNodes {
    int64_t n_nodes;             // B
    int64_t width;               // G
    int64_t* rows;               // [B*G] free milli-GPU per GPU (padding and unhealthy: 0)
    int64_t* cpu;                // [B] free milli-CPU
    const int64_t* model;        // [B] GPU model index, 0 <= model < n_models
    int64_t* cnt;                // [B*K]
    int64_t* sum;                // [B*K] S
    int64_t* total;              // [B] L, milli-GPU
    double* frag;                // [B] F, milli-GPU
};

// np.round(x, 9) for one float64 (scale by 1e9, round half to even, scale back), which is
// what Python's round(x * 1e9) / 1e9 computes; infinities pass through; -0.0 becomes 0.0.
double round9(double x);

// Free milli-GPU of one GPU as the placer books it: 0 if unhealthy; a MIG-mode GPU by its free
// SM slices, round((cs - comp) / cs * 1000); an MPS GPU round((1 - used_share) * 1000).
// Rounding half to even.
int64_t gpu_free_milli(bool healthy, bool mig, int64_t compute_slices, int64_t compute_used,
                       double used_share);

// Node `node` now has free milli-GPU row[0..G) and `cpu` free milli-CPU: rewrites its row,
// cpu, cnt, S, L and F.
void frag_update(const FragPods& pods, const FragNodes& nodes, int64_t node, const int64_t* row,
                 int64_t cpu);

// out[j] (j < G) = F(after) - F(before), milli-GPU, of a pod taking m milli-GPU of GPU j and
// cpu_m milli-CPU of node `node` (the GPU keeps max(left_j - m, 0)); +inf for a GPU with
// left_j < m - 1 (it cannot take the pod even up to the rounding of shares to milli-GPU;
// padding GPUs too).  NodeSummaries.node_increase.
void frag_node_increase(const FragPods& pods, const FragNodes& nodes, int64_t node, int64_t m,
                        int64_t cpu_m, double* out);

// The per-shape increase cache of FragIndex.cached_deltas for `n` candidate nodes.  A node
// is stale when seen[node] != version[node].  If more than max_stale nodes are stale, changes
// nothing and returns their number (the caller takes its batched path).  Otherwise, for every
// stale node and each of its GPUs f in [offsets[node], offsets[node+1]) (GPU j = f -
// offsets[node]): d_all[f] = round9(increase_j / 1000) (GPUs), new_all[f] = max(left_j - m, 0);
// then seen[node] = version[node]; returns the number of stale nodes.
int64_t frag_refresh(const FragPods& pods, const FragNodes& nodes, const int64_t* cand, int64_t n,
                     int64_t* seen, const int64_t* version, const int64_t* offsets, int64_t m,
                     int64_t cpu_m, double* d_all, int64_t* new_all, int64_t max_stale);

// The elastico scorer's candidate order (services/placer/placement/elastico_scorer.py,
// _rank) over n eligible GPUs idx[0..n) (flat indices, ascending: each node's GPUs form one
// run, in node order), node_of[i] = node of GPU idx[i]; d_all / new_all as frag_refresh
// writes them.
// Outputs, R = number of runs: uniq[R] (the runs' nodes), first[R], counts[R] (where each run
// starts in idx, how many GPUs it has); d_gpu[n] = d_all[idx[i]], new_gpu[n] = new_all[idx[i]];
// order[n]: positions into idx by (node, d, new, position), as np.lexsort((new, d, node));
// opt_key[R] = np.round(min d over the run + consolidation * node, 9) (GPUs); visit[R]: runs
// by (opt_key, node), as np.lexsort((uniq, opt_key)).  count_runs gives R.
int64_t count_runs(int64_t n, const int64_t* node_of);
void elastico_candidates(int64_t n, const int64_t* idx, const int64_t* node_of, const double* d_all,
                         const int64_t* new_all, double consolidation, int64_t* uniq,
                         int64_t* first, int64_t* counts, int64_t* order, double* d_gpu,
                         int64_t* new_gpu, double* opt_key, int64_t* visit);

}  // namespace elastico
