// The selection kernels compiled with AVX2 + FMA (CMake adds -mavx2 -mfma to this file only, on
// x86-64); select.cpp calls them when the CPU has both.
//
// Three common shapes have hand-written intrinsics kernels (float32 with R = 8 and R = 4,
// float64 with R = 4); every other (dtype, R) runs the select_impl.hpp template compiled for
// AVX2, where the compiler may fuse p[r] * d[r] + s into an FMA (a different rounding, which
// only matters for exact ties).  The hand-written kernels evaluate several configurations per
// register and are bit for bit equal to the base kernel: the same products p[r] * d[r], summed
// in the same pairwise tree (select_impl.hpp, price_of), so the choices, totals and reduced sum
// do not depend on the ISA, exact ties included.  No product there feeds an add directly
// (every product is first blended, permuted, shuffled or split into halves), so GCC's default
// -ffp-contract=fast has no multiply-add to fuse; the C++ tests check the bit equality.
#include "select_isa.hpp"

#include <immintrin.h>

#include <cstdint>
#include <limits>

#define ELASTICO_ISA_NS avx2_impl
#include "select_impl.hpp"
#undef ELASTICO_ISA_NS

namespace elastico::avx2 {
namespace {

// ---- the per-shape part: W configurations' prices lambda . d in one register ----------------
//
// Every shape reproduces price_of's tree for its R: with x[r] = p[r] * d[r],
//   R = 8: ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))
//   R = 4: (x0 + x2) + (x1 + x3)
// so the sums are the same roundings in the same order (IEEE addition and multiplication are
// commutative, so operand order within one add does not matter).  The later levels are in-lane
// shuffles and one hadd, so at most one cross-lane shuffle (vperm2f128/vpermps, port 5 only on
// Intel) per two configurations is left.
//
// The kernels are bound by reading demand (R * sizeof(T) bytes per configuration) once per
// call, from L3 or memory for real instances.  The hardware prefetchers alone leave the loop
// about 15-25% slower than a plain read of the same bytes: the loop's many uops per byte fill
// the reorder buffer before enough misses are in flight.  So each block also prefetches the
// demand kPrefetchBytes ahead, one prefetch per cache line it consumes.  A prefetch never
// faults, so running past the end of the array is harmless; the address is computed as an
// integer to keep the pointer arithmetic defined.
constexpr uintptr_t kPrefetchBytes = 4096;  // ~ bandwidth x latency; 2-6 KiB measured alike

template <int Lines>
inline void prefetch_ahead(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
    for (int i = 0; i < Lines; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(a + 64 * uintptr_t(i)), _MM_HINT_T0);
}

struct F32R8 {
    using T = float;
    static constexpr int NR = 8, W = 8;  // a block is 8 configurations, 256 bytes of demand
    __m256 p;                            // [p0 .. p7]
    explicit F32R8(const float* pr) : p(_mm256_loadu_ps(pr)) {}

    // Level w = 4 for rows a and b: [y(a) | y(b)] with y[r] = x[r] + x[r + 4], r < 4.
    // _mm256_blend_ps(xa, xb, 0xF0) = [xa.lo | xb.hi] (imm bit i set: lane i from the second
    // operand); _mm256_permute2f128_ps(xa, xb, 0x21) = [xa.hi | xb.lo] (each imm nibble picks
    // a 128-bit half: 0 a.lo, 1 a.hi, 2 b.lo, 3 b.hi).  Their sum is [xa.lo + xa.hi | ..].
    __m256 level1(const float* a, const float* b) const {
        const __m256 xa = _mm256_mul_ps(_mm256_loadu_ps(a), p);
        const __m256 xb = _mm256_mul_ps(_mm256_loadu_ps(b), p);
        return _mm256_add_ps(_mm256_blend_ps(xa, xb, 0xF0), _mm256_permute2f128_ps(xa, xb, 0x21));
    }
    // Prices of the 8 configurations whose rows start at d (row-major, 8 floats each).
    __m256 dots(const float* d) const {
        prefetch_ahead<4>(d);
        const __m256 y04 = level1(d + 0, d + 32), y15 = level1(d + 8, d + 40);
        const __m256 y26 = level1(d + 16, d + 48), y37 = level1(d + 24, d + 56);
        // Level w = 2: z0 = y0 + y2, z1 = y1 + y3.  _mm256_shuffle_ps(a, b, imm) takes, in
        // each 128-bit lane, a[imm 1:0], a[imm 3:2], b[imm 5:4], b[imm 7:6]: (1,0,1,0) gives
        // [a.y0, a.y1, b.y0, b.y1], (3,2,3,2) the y2, y3 to add to them.
        const __m256 z0145 = _mm256_add_ps(_mm256_shuffle_ps(y04, y15, _MM_SHUFFLE(1, 0, 1, 0)),
                                           _mm256_shuffle_ps(y04, y15, _MM_SHUFFLE(3, 2, 3, 2)));
        const __m256 z2367 = _mm256_add_ps(_mm256_shuffle_ps(y26, y37, _MM_SHUFFLE(1, 0, 1, 0)),
                                           _mm256_shuffle_ps(y26, y37, _MM_SHUFFLE(3, 2, 3, 2)));
        // Level w = 1: z0 + z1.  _mm256_hadd_ps(a, b) is, per 128-bit lane,
        // [a0+a1, a2+a3, b0+b1, b2+b3]: here [c0, c1, c2, c3 | c4, c5, c6, c7].
        return _mm256_hadd_ps(z0145, z2367);
    }
    // The price of one configuration, the same tree (the one-at-a-time path).
    float dot1(const float* d) const {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(d), p);
        const __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
        const __m128 z = _mm_add_ps(y, _mm_movehl_ps(y, y));  // [y0+y2, y1+y3, ..]
        return _mm_cvtss_f32(_mm_add_ss(z, _mm_movehdup_ps(z)));  // z0 + z1
    }
    // totals[r] += d[r] in double, r < 8, kept in two registers across jobs.
    struct Acc {
        __m256d a0, a1;
        explicit Acc(const double* t) : a0(_mm256_loadu_pd(t)), a1(_mm256_loadu_pd(t + 4)) {}
        void add(const float* d) {
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(d)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(d + 4)));
        }
        void store(double* t) const {
            _mm256_storeu_pd(t, a0);
            _mm256_storeu_pd(t + 4, a1);
        }
    };
};

struct F32R4 {
    using T = float;
    static constexpr int NR = 4, W = 8;  // 8 configurations, 128 bytes of demand
    __m256 pp;                           // [p0..p3 | p0..p3]
    explicit F32R4(const float* p) : pp(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(p))) {}

    // The products of two adjacent configurations: [row c | row c+1] * [p | p].
    __m256 prod2(const float* d) const { return _mm256_mul_ps(_mm256_loadu_ps(d), pp); }
    // Level w = 2 (y0 = x0 + x2, y1 = x1 + x3) of [a | b] and [c | e] -> [a.y, c.y | b.y, e.y]
    // (the shuffles of F32R8::dots).
    static __m256 level2(__m256 ab, __m256 ce) {
        return _mm256_add_ps(_mm256_shuffle_ps(ab, ce, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(ab, ce, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    __m256 dots(const float* d) const {
        prefetch_ahead<2>(d);
        // Level w = 1 by hadd: [c0, c2, c4, c6 | c1, c3, c5, c7]; _mm256_permutevar8x32_ps
        // (out[i] = in[idx[i]], across the halves) puts them in configuration order.
        const __m256 h = _mm256_hadd_ps(level2(prod2(d + 0), prod2(d + 8)),
                                        level2(prod2(d + 16), prod2(d + 24)));
        return _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    float dot1(const float* d) const {
        const __m128 x = _mm_mul_ps(_mm_loadu_ps(d), _mm256_castps256_ps128(pp));
        const __m128 y = _mm_add_ps(x, _mm_movehl_ps(x, x));  // [x0+x2, x1+x3, ..]
        return _mm_cvtss_f32(_mm_add_ss(y, _mm_movehdup_ps(y)));
    }
    struct Acc {
        __m256d a;
        explicit Acc(const double* t) : a(_mm256_loadu_pd(t)) {}
        void add(const float* d) { a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(d))); }
        void store(double* t) const { _mm256_storeu_pd(t, a); }
    };
};

struct F64R4 {
    using T = double;
    static constexpr int NR = 4, W = 4;  // 4 configurations, 128 bytes of demand
    __m256d p;                           // [p0 .. p3]
    explicit F64R4(const double* pr) : p(_mm256_loadu_pd(pr)) {}

    // Level w = 2 for rows a and b: [a.y0, a.y1, b.y0, b.y1], y[r] = x[r] + x[r + 2]; the
    // blend/permute pair of F32R8::level1 (blend imm 0xC: lanes 2, 3 from xb).
    __m256d level1(const double* a, const double* b) const {
        const __m256d xa = _mm256_mul_pd(_mm256_loadu_pd(a), p);
        const __m256d xb = _mm256_mul_pd(_mm256_loadu_pd(b), p);
        return _mm256_add_pd(_mm256_blend_pd(xa, xb, 0xC), _mm256_permute2f128_pd(xa, xb, 0x21));
    }
    __m256d dots(const double* d) const {
        prefetch_ahead<2>(d);
        // _mm256_hadd_pd(a, b) = [a0+a1, b0+b1, a2+a3, b2+b3]; with a = [c0 | c2] and
        // b = [c1 | c3] that is [c0, c1, c2, c3].
        return _mm256_hadd_pd(level1(d + 0, d + 8), level1(d + 4, d + 12));
    }
    double dot1(const double* d) const {
        const __m256d x = _mm256_mul_pd(_mm256_loadu_pd(d), p);
        const __m128d y = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
        return _mm_cvtsd_f64(_mm_add_sd(y, _mm_unpackhi_pd(y, y)));        // y0 + y1
    }
    struct Acc {
        __m256d a;
        explicit Acc(const double* t) : a(_mm256_loadu_pd(t)) {}
        void add(const double* d) { a = _mm256_add_pd(a, _mm256_loadu_pd(d)); }
        void store(double* t) const { _mm256_storeu_pd(t, a); }
    };
};

// ---- register-type helpers, overloaded on __m256 (8 x float) and __m256d (4 x double) --------

template <typename T> struct Vec;
template <> struct Vec<float> {
    using V = __m256;
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V iota() { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    // _mm256_max_ps(a, b) is (a > b ? a : b) per lane: b when equal or either is NaN.
    static V max(V a, V b) { return _mm256_max_ps(a, b); }
    static V min(V a, V b) { return _mm256_min_ps(a, b); }
    static V gt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }  // false on NaN
    static V ge(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
    static V eq(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
    static V unord(V a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }  // lanes that are NaN
    static V blend(V a, V b, V m) { return _mm256_blendv_ps(a, b, m); }  // m ? b : a
    static int bits(V m) { return _mm256_movemask_ps(m); }
    static float first(V a) { return _mm256_cvtss_f32(a); }
    // Every lane set to the max (min) of a's lanes: swap the 128-bit halves, then pairs, then
    // neighbours, combining each time.
    static V hmax(V a) {
        a = _mm256_max_ps(a, _mm256_permute2f128_ps(a, a, 0x01));
        a = _mm256_max_ps(a, _mm256_shuffle_ps(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
        return _mm256_max_ps(a, _mm256_shuffle_ps(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    static V hmin(V a) {
        a = _mm256_min_ps(a, _mm256_permute2f128_ps(a, a, 0x01));
        a = _mm256_min_ps(a, _mm256_shuffle_ps(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
        return _mm256_min_ps(a, _mm256_shuffle_ps(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    // Family sizes whose relative indices float holds exactly (2^24); larger ones take the
    // one-configuration-at-a-time path.
    static constexpr int64_t kMaxFamily = int64_t(1) << 24;
};
template <> struct Vec<double> {
    using V = __m256d;
    static V set1(double x) { return _mm256_set1_pd(x); }
    static V iota() { return _mm256_setr_pd(0, 1, 2, 3); }
    static V load(const double* p) { return _mm256_loadu_pd(p); }
    static V add(V a, V b) { return _mm256_add_pd(a, b); }
    static V sub(V a, V b) { return _mm256_sub_pd(a, b); }
    static V max(V a, V b) { return _mm256_max_pd(a, b); }
    static V min(V a, V b) { return _mm256_min_pd(a, b); }
    static V gt(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
    static V ge(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_GE_OQ); }
    static V eq(V a, V b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
    static V unord(V a) { return _mm256_cmp_pd(a, a, _CMP_UNORD_Q); }
    static V blend(V a, V b, V m) { return _mm256_blendv_pd(a, b, m); }
    static int bits(V m) { return _mm256_movemask_pd(m); }
    static double first(V a) { return _mm256_cvtsd_f64(a); }
    static V hmax(V a) {
        a = _mm256_max_pd(a, _mm256_permute2f128_pd(a, a, 0x01));
        return _mm256_max_pd(a, _mm256_permute_pd(a, 0x5));  // swap neighbours in each half
    }
    static V hmin(V a) {
        a = _mm256_min_pd(a, _mm256_permute2f128_pd(a, a, 0x01));
        return _mm256_min_pd(a, _mm256_permute_pd(a, 0x5));
    }
    static constexpr int64_t kMaxFamily = int64_t(1) << 52;
};

// ---- the per-job loop, shared by the three shapes --------------------------------------------
//
// Lane l of a register holds configurations l, l + W, l + 2W, ... of the family: a running best
// value (updated on strict >, so each lane keeps its lowest index on ties) and that best's
// index within the family, kept as T (exact below Vec::kMaxFamily).  At the end of the job the
// lanes reduce to the max value and the smallest index among the lanes holding it, which is
// the family's lowest-index argmax.  The lanes start from the first block with NaN turned to
// -inf, so a NaN never enters a lane (NaN > x is false) and a family of -inf values picks
// index 0; the base kernel's one NaN rule, that a NaN at configuration 0 is kept (it starts
// there and nothing compares greater), is checked apart.
//
// A family of n >= W configurations is covered by blocks at 0, W, 2W, ... and, when W does not
// divide n, a last block at n - W that overlaps the one before: a configuration seen twice
// carries the same value and index both times, so the max and its lowest index are unchanged,
// and no load leaves the family.  A family of n < W configurations is one block ending at its
// end (it reads the tail of the families before it, whose lanes are masked to -inf with an
// index above any real one), or, for the first few configurations of the batch where no such
// block fits, the one-configuration-at-a-time path.
template <class K>
double select_shape(int64_t j0, int64_t j1, const int64_t* offsets, const typename K::T* utility,
                    const typename K::T* demand, const typename K::T* prices, int64_t* choice,
                    double* totals) {
    using T = typename K::T;
    using X = Vec<T>;
    using V = typename X::V;
    constexpr int W = K::W, NR = K::NR;
    const K k(prices);
    typename K::Acc acc(totals);
    const V iota = X::iota(), neg_inf = X::set1(-std::numeric_limits<T>::infinity());
    const V big = X::set1(T(X::kMaxFamily));  // index of a masked lane: above any real one
    const V step = X::set1(T(W));
    // Lanes -> the family's best: the max value, the smallest index among the lanes holding it.
    auto reduce = [&](V lane_val, V lane_idx, bool nan0, int64_t& best, T& best_val) {
        const V m = X::hmax(lane_val);
        best_val = X::first(m);
        best = static_cast<int64_t>(X::first(X::hmin(X::blend(big, lane_idx, X::eq(lane_val, m)))));
        if (nan0) {  // the base kernel keeps a NaN at configuration 0
            best = 0;
            best_val = std::numeric_limits<T>::quiet_NaN();
        }
    };
    double reduced = 0.0;
    for (int64_t j = j0; j < j1; ++j) {
        const int64_t b = offsets[j], e = offsets[j + 1], n = e - b;
        int64_t best;
        T best_val;
        if (n >= W && n < X::kMaxFamily) {
            const T* u = utility + b;
            const T* d = demand + b * NR;
            const V v = X::sub(X::load(u), k.dots(d));
            const bool nan0 = X::bits(X::unord(v)) & 1;
            V lane_val = X::max(v, neg_inf);  // -inf where v is NaN or -inf
            V lane_idx = iota;
            // v > lane_val: take v and its index cur; max(v, lane_val) is exactly that blend
            // (it keeps lane_val on equality or NaN).
            auto update = [&](int64_t c, V cur) {
                const V v = X::sub(X::load(u + c), k.dots(d + c * NR));
                lane_idx = X::blend(lane_idx, cur, X::gt(v, lane_val));
                lane_val = X::max(v, lane_val);
            };
            V cur = iota;
            int64_t c = W;
            for (; c <= n - W; c += W) update(c, cur = X::add(cur, step));
            if (c < n) update(n - W, X::add(iota, X::set1(T(n - W))));  // the overlapping block
            reduce(lane_val, lane_idx, nan0, best, best_val);
        } else if (n < W && e >= W) {
            // One block [e - W, e): lanes l < W - n belong to earlier families.
            const int64_t s = e - W, skip = W - n;
            const V v = X::sub(X::load(utility + s), k.dots(demand + s * NR));
            const bool nan0 = (X::bits(X::unord(v)) >> skip) & 1;
            const V own = X::ge(iota, X::set1(T(skip)));
            reduce(X::blend(neg_inf, X::max(v, neg_inf), own),
                   X::blend(big, X::sub(iota, X::set1(T(skip))), own), nan0, best, best_val);
        } else {
            // One configuration at a time, exactly the base kernel's loop.
            best = 0;
            best_val = utility[b] - k.dot1(demand + b * NR);
            for (int64_t c = 1; c < n; ++c) {
                const T v = utility[b + c] - k.dot1(demand + (b + c) * NR);
                if (v > best_val) {
                    best_val = v;
                    best = c;
                }
            }
        }
        choice[j] = best;
        reduced += static_cast<double>(best_val);
        acc.add(demand + (b + best) * NR);
    }
    acc.store(totals);
    return reduced;
}

}  // namespace

double select_block_f64(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                        const double* utility, const double* demand, const double* prices,
                        int64_t* choice, double* totals) {
    if (n_res == 4)
        return select_shape<F64R4>(j0, j1, offsets, utility, demand, prices, choice, totals);
    return avx2_impl::select_block<double>(j0, j1, n_res, offsets, utility, demand, prices,
                                           choice, totals);
}

double select_block_f32(int64_t j0, int64_t j1, int64_t n_res, const int64_t* offsets,
                        const float* utility, const float* demand, const float* prices,
                        int64_t* choice, double* totals) {
    if (n_res == 8)
        return select_shape<F32R8>(j0, j1, offsets, utility, demand, prices, choice, totals);
    if (n_res == 4)
        return select_shape<F32R4>(j0, j1, offsets, utility, demand, prices, choice, totals);
    return avx2_impl::select_block<float>(j0, j1, n_res, offsets, utility, demand, prices,
                                          choice, totals);
}

}  // namespace elastico::avx2
