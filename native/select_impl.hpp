// The per-block selection kernels, compiled twice: once for the baseline ISA (select.cpp) and
// once with AVX2/FMA (select_avx2.cpp, x86-64 only); select.cpp picks one at run time.
// Included with ELASTICO_ISA_NS defined to the namespace the copy lives in.
#include <cstdint>

namespace elastico {
namespace ELASTICO_ISA_NS {

// lambda . d for one configuration.  NR > 0: the resource count is a compile-time constant, so
// the products are one SIMD multiply and the sum a fixed tree the compiler can keep in
// registers (the common R of 4, 8 and 16 all hit this path); NR == 0: any R, a plain loop.
template <typename T, int NR>
inline T price_of(const T* p, const T* d, int64_t n_res) {
    if constexpr (NR == 0) {
        T s = 0;
        for (int64_t r = 0; r < n_res; ++r) s += p[r] * d[r];
        return s;
    } else if constexpr (NR == 1) {
        return p[0] * d[0];
    } else {
        T x[NR];
        for (int r = 0; r < NR; ++r) x[r] = p[r] * d[r];
        // pairwise tree: (x0+x1)+(x2+x3) ...
        for (int w = NR / 2; w >= 1; w /= 2)
            for (int r = 0; r < w; ++r) x[r] = x[r] + x[r + w];
        return x[0];
    }
}

template <typename T, int NR>
double select_block_r(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                      const T* utility, const T* demand, const T* prices, int64_t* choice,
                      double* totals /* [n_res], accumulated */) {
    const int64_t R = NR > 0 ? NR : n_res;
    T p[NR > 0 ? NR : 1];
    if constexpr (NR > 0)
        for (int r = 0; r < NR; ++r) p[r] = prices[r];
    const T* pp = NR > 0 ? p : prices;
    double reduced = 0.0;
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t b = offsets[j], e = offsets[j + 1];
        int64_t best = b;
        T best_val = utility[b] - price_of<T, NR>(pp, demand + b * R, R);
        for (int64_t c = b + 1; c < e; ++c) {
            const T v = utility[c] - price_of<T, NR>(pp, demand + c * R, R);
            if (v > best_val) {  // strict: ties keep the lowest index
                best_val = v;
                best = c;
            }
        }
        choice[j] = best - b;
        reduced += static_cast<double>(best_val);
        const T* d = demand + best * R;
        for (int64_t r = 0; r < R; ++r) totals[r] += static_cast<double>(d[r]);
    }
    return reduced;
}

template <typename T>
inline double select_block(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                    const T* utility, const T* demand, const T* prices, int64_t* choice,
                    double* totals) {
    switch (n_res) {
#define ELASTICO_R(NR) \
        case NR: return select_block_r<T, NR>(j0, j1, n_res, offsets, utility, demand, prices, choice, totals);
        ELASTICO_R(1) ELASTICO_R(2) ELASTICO_R(4) ELASTICO_R(8) ELASTICO_R(16)
#undef ELASTICO_R
        default:
            return select_block_r<T, 0>(j0, j1, n_res, offsets, utility, demand, prices, choice,
                                        totals);
    }
}


}  // namespace ELASTICO_ISA_NS
}  // namespace elastico
