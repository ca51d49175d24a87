// Per-job configuration selection for Elastic Shadow Pricing (the hot inner loop).
//
// Plain C++ over contiguous arrays, no Python: the binding (bindings.cpp) is the only caller
// from Python, and the C++ tests (tests/test_select.cpp) call it directly.
//
// Input is a CSR batch of shape families: job j owns configurations
// [offsets[j], offsets[j+1]); configuration c has utility[c] and a resource vector
// demand[c*R .. c*R+R).  Given shadow prices lambda[R] >= 0, each job picks
//     c_j = argmax_c  utility[c] - lambda . demand[c]        (ties: lowest index)
// which is the Lagrangian relaxation's per-job subproblem (DESIGN.md, ESP).  The sum of the
// per-job maxima plus lambda . capacity is the Lagrangian dual value L(lambda), an upper
// bound on the MMKP optimum for every lambda >= 0 (weak duality).
#pragma once
#include <cstdint>

namespace elastico {

template <typename T>
struct SelectOutput {
    int64_t* choice;   // [N] chosen index within each job's family (c_j - offsets[j])
    T* totals;         // [R] sum over jobs of demand[c_j]
    double reduced_sum;  // sum_j max_c (utility - lambda . demand), accumulated in double
};

// Runs the selection over all N jobs.  `nthreads` <= 1 runs on the calling thread; larger
// values split the jobs into contiguous blocks, one std::thread each, and reduce the totals
// in block order so the result does not depend on the thread count beyond float rounding of
// the totals.  Preconditions (checked by the caller): offsets non-decreasing, offsets[0]==0,
// every family non-empty.
template <typename T>
void select_configs(int64_t n_jobs, int64_t n_res, const int64_t* offsets, const T* utility,
                    const T* demand, const T* prices, SelectOutput<T>& out, int nthreads);

}  // namespace elastico
