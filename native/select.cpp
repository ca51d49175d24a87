#include "select.hpp"
#include "select_isa.hpp"

#include <algorithm>
#include <thread>
#include <type_traits>
#include <vector>

#define ELASTICO_ISA_NS base
#include "select_impl.hpp"
#undef ELASTICO_ISA_NS

namespace elastico {


namespace {

bool use_avx2() {
#ifdef ELASTICO_HAVE_AVX2
    static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return ok;
#else
    return false;
#endif
}

template <typename T>
double select_block(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                    const T* utility, const T* demand, const T* prices, int64_t* choice,
                    double* totals) {
#ifdef ELASTICO_HAVE_AVX2
    if (use_avx2()) {
        if constexpr (std::is_same_v<T, double>)
            return avx2::select_block_f64(j0, j1, n_res, offsets, utility, demand, prices, choice,
                                          totals);
        else
            return avx2::select_block_f32(j0, j1, n_res, offsets, utility, demand, prices, choice,
                                          totals);
    }
#endif
    return base::select_block<T>(j0, j1, n_res, offsets, utility, demand, prices, choice, totals);
}

}  // namespace

template <typename T>
void select_configs(int64_t n_jobs, int64_t n_res, const int64_t* offsets, const T* utility,
                    const T* demand, const T* prices, SelectOutput<T>& out, int nthreads) {
    // Totals accumulate in double even on the float32 path: the sum over many jobs is where
    // float32 would lose the feasibility check's precision.
    // below this a thread costs more than it saves: bench/bench_pricing.py measured 2 threads
    // 0.79x (slower) at 10,000 jobs and 1.26x at 100,000 on this 2-core machine; the loop is
    // memory-bound, so one thread already reads at close to full speed
    const int64_t min_block = 32768;
    int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(nthreads, n_jobs / min_block));
    std::vector<double> totals(static_cast<size_t>(blocks * n_res), 0.0);
    std::vector<double> reduced(static_cast<size_t>(blocks), 0.0);
    if (blocks == 1) {
        reduced[0] = select_block(0, n_jobs, n_res, offsets, utility, demand, prices, out.choice,
                                  totals.data());
    } else {
        std::vector<std::thread> pool;
        pool.reserve(static_cast<size_t>(blocks));
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t j0 = n_jobs * b / blocks, j1 = n_jobs * (b + 1) / blocks;
            pool.emplace_back([=, &totals, &reduced, &out] {
                reduced[b] = select_block(j0, j1, n_res, offsets, utility, demand, prices,
                                          out.choice, totals.data() + b * n_res);
            });
        }
        for (auto& t : pool) t.join();
    }
    out.reduced_sum = 0.0;
    for (int64_t b = 0; b < blocks; ++b) out.reduced_sum += reduced[b];
    for (int64_t b = 1; b < blocks; ++b)
        for (int64_t r = 0; r < n_res; ++r) totals[r] += totals[b * n_res + r];
    for (int64_t r = 0; r < n_res; ++r) out.totals[r] = static_cast<T>(totals[r]);
}

template void select_configs<double>(int64_t, int64_t, const int64_t*, const double*,
                                     const double*, const double*, SelectOutput<double>&, int);
template void select_configs<float>(int64_t, int64_t, const int64_t*, const float*,
                                    const float*, const float*, SelectOutput<float>&, int);

}  // namespace elastico
