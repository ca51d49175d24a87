// C++ tests of the native core, hand-worked numbers (run by ctest; see tests/test_native_cpp.py).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.hpp"
#include "select.hpp"

void primal_tests();  // test_primal.cpp


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

int main() {
    two_jobs_hand_worked<double>();
    two_jobs_hand_worked<float>();
    threads_agree();
    primal_tests();
    if (elastico_test::failures) {
        std::fprintf(stderr, "%d failed\n", elastico_test::failures);
        return 1;
    }
    std::printf("native tests: all passed\n");
    return 0;
}
