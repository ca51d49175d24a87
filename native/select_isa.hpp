// The ISA-specific selection entry points (select.cpp dispatches to them at run time; the C++
// tests call them directly to compare them with the baseline kernel of select_impl.hpp).
// Same contract as one block of select_configs: jobs [j0, j1), totals[n_res] accumulated in
// place, returns the sum of the jobs' best values.
#pragma once
#include <cstdint>

namespace elastico {

#ifdef ELASTICO_HAVE_AVX2
// select_avx2.cpp (-mavx2 -mfma): call only when __builtin_cpu_supports("avx2") and ("fma").
namespace avx2 {
double select_block_f64(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                        const double* utility, const double* demand, const double* prices,
                        int64_t* choice, double* totals);
double select_block_f32(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                        const float* utility, const float* demand, const float* prices,
                        int64_t* choice, double* totals);
}  // namespace avx2
#endif

}  // namespace elastico
