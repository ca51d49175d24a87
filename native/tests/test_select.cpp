// C++ tests of the native core, hand-worked numbers (run by ctest; see tests/test_native_cpp.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "check.hpp"
#include "select.hpp"
#include "select_isa.hpp"

// The baseline kernel, compiled here exactly as select.cpp compiles it (no ISA flags): the
// reference the AVX2 kernels must reproduce.
#define ELASTICO_ISA_NS ref
#include "select_impl.hpp"
#undef ELASTICO_ISA_NS

void primal_tests();  // test_primal.cpp
void frag_tests();    // test_frag.cpp


template <typename T>
void two_jobs_hand_worked() {
    // Job 0: wait (u=0, d=0), small (u=3, d=[1,0]), big (u=5, d=[2,1]).
    // Job 1: wait, only (u=2, d=[0,1]).
    // prices [1, 1]: job0 values 0, 2, 2 -> tie, lowest index = small (1); job1 values 0, 1 -> 1.
    std::vector<int64_t> off{0, 3, 5};
    std::vector<T> u{0, 3, 5, 0, 2};
    std::vector<T> d{0, 0, 1, 0, 2, 1, 0, 0, 0, 1};
    std::vector<T> p{1, 1};
    std::vector<int64_t> choice(2);
    std::vector<T> totals(2);
    elastico::SelectOutput<T> out{choice.data(), totals.data(), 0.0};
    elastico::select_configs<T>(2, 2, off.data(), u.data(), d.data(), p.data(), out, 1);
    CHECK(choice[0] == 1);
    CHECK(choice[1] == 1);
    CHECK(totals[0] == T(1) && totals[1] == T(1));
    CHECK(std::fabs(out.reduced_sum - 3.0) < 1e-12);
    // prices [0, 0]: big wins for job 0 (u=5).
    std::vector<T> p0{0, 0};
    elastico::select_configs<T>(2, 2, off.data(), u.data(), d.data(), p0.data(), out, 1);
    CHECK(choice[0] == 2);
    CHECK(std::fabs(out.reduced_sum - 7.0) < 1e-12);
}

void threads_agree() {
    // 20000 jobs of 4 configs: the threaded run must equal the serial run.
    const int64_t n = 20000, k = 4, r = 3;
    std::vector<int64_t> off(n + 1);
    std::vector<double> u(n * k), d(n * k * r);
    unsigned s = 12345;
    auto rnd = [&] { s = s * 1103515245u + 12345u; return (s >> 8) / double(1 << 24); };
    for (int64_t j = 0; j <= n; ++j) off[j] = j * k;
    for (auto& x : u) x = rnd();
    for (auto& x : d) x = rnd();
    std::vector<double> p{0.3, 0.2, 0.1};
    std::vector<int64_t> c1(n), c2(n);
    std::vector<double> t1(r), t2(r);
    elastico::SelectOutput<double> o1{c1.data(), t1.data(), 0.0}, o2{c2.data(), t2.data(), 0.0};
    elastico::select_configs<double>(n, r, off.data(), u.data(), d.data(), p.data(), o1, 1);
    elastico::select_configs<double>(n, r, off.data(), u.data(), d.data(), p.data(), o2, 4);
    CHECK(c1 == c2);
    for (int64_t i = 0; i < r; ++i) CHECK(std::fabs(t1[i] - t2[i]) < 1e-6);
    CHECK(std::fabs(o1.reduced_sum - o2.reduced_sum) < 1e-6);
}


#ifdef ELASTICO_HAVE_AVX2
namespace {

// One CSR instance of R resources: sizes[j] configurations for job j.
template <typename T>
struct Instance {
    int64_t r = 0;
    std::vector<int64_t> off{0};
    std::vector<T> u, d, p;
    int64_t n() const { return static_cast<int64_t>(off.size()) - 1; }
};

// Random instance; `levels` > 0 draws utilities, demands and prices from small integers
// 0..levels-1 (sums exact, so ties between different configurations are frequent), else
// uniform reals.
template <typename T>
Instance<T> random_instance(const std::vector<int64_t>& sizes, int64_t r, int levels,
                            unsigned seed) {
    std::mt19937 g(seed);
    auto draw = [&]() -> T {
        if (levels > 0) return T(static_cast<int>(g() % static_cast<unsigned>(levels)));
        return T(std::uniform_real_distribution<double>(0.0, 1.0)(g));
    };
    Instance<T> in;
    in.r = r;
    for (int64_t k : sizes) in.off.push_back(in.off.back() + k);
    const int64_t m = in.off.back();
    in.u.resize(m);
    in.d.resize(m * r);
    in.p.resize(r);
    for (auto& x : in.u) x = levels > 0 ? draw() : T(4) * draw();
    for (auto& x : in.d) x = draw();
    for (auto& x : in.p) x = draw();
    return in;
}

double avx2_block(int64_t j0, int64_t j1, int64_t r, const int64_t* off, const float* u,
                  const float* d, const float* p, int64_t* c, double* t) {
    return elastico::avx2::select_block_f32(j0, j1, r, off, u, d, p, c, t);
}
double avx2_block(int64_t j0, int64_t j1, int64_t r, const int64_t* off, const double* u,
                  const double* d, const double* p, int64_t* c, double* t) {
    return elastico::avx2::select_block_f64(j0, j1, r, off, u, d, p, c, t);
}

bool same_bits(double a, double b) {
    return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

// The AVX2 path against the baseline kernel on jobs [j0, j1) of `in`: choices, totals and the
// reduced sum must match bit for bit.  The hand-written shapes (float32 R = 4, 8; float64
// R = 4) sum the same products in the same order as the base kernel, so they match on any
// data; the other shapes run the template, which the compiler may contract to FMA, so callers
// give those only data whose sums are exact (small integers).  Returns the AVX2 choices.
template <typename T>
std::vector<int64_t> compare_with_base(const Instance<T>& in, int64_t j0, int64_t j1) {
    std::vector<int64_t> c_ref(in.n(), -1), c_isa(in.n(), -1);
    std::vector<double> t_ref(in.r, 0.5), t_isa(in.r, 0.5);  // totals accumulate into these
    const double s_ref = elastico::ref::select_block<T>(j0, j1, in.r, in.off.data(), in.u.data(),
                                                       in.d.data(), in.p.data(), c_ref.data(),
                                                       t_ref.data());
    const double s_isa = avx2_block(j0, j1, in.r, in.off.data(), in.u.data(), in.d.data(),
                                    in.p.data(), c_isa.data(), t_isa.data());
    int bad_choice = 0, bad_total = 0;
    for (int64_t j = 0; j < in.n(); ++j) bad_choice += c_ref[j] != c_isa[j];
    for (int64_t k = 0; k < in.r; ++k) bad_total += !same_bits(t_ref[k], t_isa[k]);
    CHECK(bad_choice == 0);
    CHECK(bad_total == 0);
    CHECK(same_bits(s_ref, s_isa));
    if (bad_choice || bad_total)
        std::fprintf(stderr, "  (R=%lld, %s, jobs %lld..%lld: %d choices, %d totals differ)\n",
                     static_cast<long long>(in.r), sizeof(T) == 4 ? "float32" : "float64",
                     static_cast<long long>(j0), static_cast<long long>(j1), bad_choice,
                     bad_total);
    return c_isa;
}

// Family sizes that reach every path of the AVX2 loop for block widths 4 and 8: the first
// families end before configuration 8 (one configuration at a time), then sizes below, at and
// just above a block, multiples and an overlapping last block, then random 1..37.
std::vector<int64_t> ragged_sizes(int64_t n_random, unsigned seed) {
    std::vector<int64_t> s{1, 2, 1, 7, 8, 9, 17, 1, 3, 4, 5, 16, 15, 24, 25, 31, 32, 33, 1, 64, 2};
    std::mt19937 g(seed);
    for (int64_t i = 0; i < n_random; ++i) s.push_back(1 + static_cast<int64_t>(g() % 37));
    return s;
}

// `reals`: also uniform real data (only for the hand-written shapes, see compare_with_base).
template <typename T>
void avx2_matches_base_random(int64_t r, bool reals) {
    if (reals) {
        // Every family 32 configurations, and ragged families.
        const Instance<T> flat = random_instance<T>(std::vector<int64_t>(300, 32), r, 0, 11);
        compare_with_base(flat, 0, flat.n());
        const Instance<T> ragged = random_instance<T>(ragged_sizes(600, 12), r, 0, 13);
        compare_with_base(ragged, 0, ragged.n());
        // Sub-ranges, as the threaded driver calls it (a small family at the start of a range
        // reads configurations of the range before it).
        compare_with_base(ragged, 7, 300);
        compare_with_base(ragged, 300, ragged.n());
        compare_with_base(ragged, 1, 2);
    }
    // Small integers: exact sums, many ties between configurations in different lanes, blocks
    // and the overlapping last block; the lowest index must win as in the base kernel.
    const Instance<T> ties = random_instance<T>(ragged_sizes(600, 14), r, 3, 15);
    compare_with_base(ties, 0, ties.n());
    compare_with_base(ties, 5, 400);
}

// Hand-built ties: copies of one configuration within a family must give the lowest index.
template <typename T>
void avx2_lowest_index_on_ties(int64_t r) {
    // Job sizes: 1, 7, 8, 9, 17, 17, 9, 16, 1.  Every configuration gets u = 0, d = 1 (value
    // -sum(p) < 0) except the planted maxima (u = 5, same d: value 5 - sum(p)).
    const std::vector<int64_t> sizes{1, 7, 8, 9, 17, 17, 9, 16, 1};
    Instance<T> in = random_instance<T>(sizes, r, 1, 0);  // all zeros
    for (auto& x : in.d) x = T(1);
    for (auto& x : in.p) x = T(0.25);
    // (job, configurations holding the max): expected choice = the first listed.
    const std::vector<std::pair<int64_t, std::vector<int64_t>>> planted{
        {1, {2, 6}},         // size 7 (< one float32 block): two lanes of one block
        {2, {3, 7}},         // size 8: one block
        {3, {1, 8}},         // size 9: 8 only in the overlapping last block
        {4, {5, 13, 16}},    // size 17: 5 and 13 in the same lane, 16 in the overlap
        {6, {4, 5, 6, 7, 8}},  // size 9: a run ending in the overlap
        {7, {15, 9, 2}},     // size 16: listed out of order, lowest is 2
    };
    std::vector<int64_t> expected(sizes.size(), 0);
    for (const auto& [job, cs] : planted) {
        int64_t lowest = cs.front();
        for (int64_t c : cs) {
            in.u[in.off[job] + c] = T(5);
            lowest = std::min(lowest, c);
        }
        expected[job] = lowest;
    }
    // Job 5 (size 17): every configuration identical -> 0.
    const std::vector<int64_t> c = compare_with_base(in, 0, in.n());
    for (size_t j = 0; j < sizes.size(); ++j) CHECK(c[j] == expected[j]);
}

// Non-finite values the float32 cast of a finite float64 instance can produce: a family of -inf
// values picks 0, a NaN at configuration 0 is kept (the base kernel's rule), a NaN elsewhere
// never wins.
template <typename T>
void avx2_non_finite(int64_t r) {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    const std::vector<int64_t> sizes{3, 9, 9, 9, 17, 2, 12};
    Instance<T> in = random_instance<T>(sizes, r, 0, 21);
    auto u = [&](int64_t job, int64_t c) -> T& { return in.u[in.off[job] + c]; };
    for (int64_t c = 0; c < 9; ++c) u(1, c) = -inf;  // all -inf -> 0
    u(2, 0) = nan;                                   // NaN first -> 0, reduced sum NaN
    u(3, 4) = nan;                                   // NaN inside -> ignored
    u(3, 8) = nan;
    u(4, 0) = -inf;
    u(4, 16) = inf;                                  // +inf wins
    u(5, 1) = nan;                                   // tiny family, NaN not first
    u(6, 0) = -inf;
    u(6, 11) = -inf;
    const std::vector<int64_t> c = compare_with_base(in, 0, in.n());
    CHECK(c[1] == 0 && c[2] == 0 && c[4] == 16 && c[5] == 0);
    CHECK(c[3] != 4 && c[3] != 8);
    // Without the NaN job the sum is +inf (job 4), still bit-equal (checked inside).
    compare_with_base(in, 3, in.n());
}

}  // namespace

void avx2_tests() {
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        std::printf("avx2 tests skipped: CPU lacks AVX2/FMA\n");
        return;
    }
    // The hand-written shapes, then two that fall back to the template.
    avx2_matches_base_random<float>(8, true);
    avx2_matches_base_random<float>(4, true);
    avx2_matches_base_random<double>(4, true);
    avx2_matches_base_random<float>(3, false);
    avx2_matches_base_random<double>(8, false);
    avx2_lowest_index_on_ties<float>(8);
    avx2_lowest_index_on_ties<float>(4);
    avx2_lowest_index_on_ties<double>(4);
    avx2_non_finite<float>(8);
    avx2_non_finite<float>(4);
    avx2_non_finite<double>(4);
}
#else
void avx2_tests() {}
#endif

int main() {
    two_jobs_hand_worked<double>();
    two_jobs_hand_worked<float>();
    threads_agree();
    avx2_tests();
    primal_tests();
    frag_tests();
    if (elastico_test::failures) {
        std::fprintf(stderr, "%d failed\n", elastico_test::failures);
        return 1;
    }
    std::printf("native tests: all passed\n");
    return 0;
}
