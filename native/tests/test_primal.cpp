// C++ tests of the primal heuristics (native/primal.hpp), hand-worked numbers.  Called from
// main() in test_select.cpp (one native_tests executable).
#include <cmath>
#include <cstdio>
#include <vector>

#include "check.hpp"
#include "primal.hpp"

namespace {


void fill_two_jobs() {
    // R = 1, capacity 3, tol 0, scale 1, weights 1.
    // Job 0: items 0 (u=0, d=0), 1 (u=2, d=1), 2 (u=3, d=3).  Job 1: items 3 (u=0, d=0), 4 (u=5, d=2).
    // Start at [0, 3], T = 0, S = 3.  Pool (item order): 1 (gain 2, delta 1, ratio 2),
    // 2 (gain 3, delta 3, ratio 1), 4 (gain 5, delta 2, ratio 2.5).  Per-job best: job 0 -> 1,
    // job 1 -> 4; descending: 4, 1; prefix sums 2, 3 both fit -> both move, T = 3, S = 0.
    // Round 2: job 0's upgrade 1 -> 2 (delta 2) no longer fits; pool empty -> stop.
    std::vector<int64_t> off{0, 3, 5};
    std::vector<double> u{0, 2, 3, 0, 5}, d{0, 1, 3, 0, 2};
    std::vector<double> cap{3}, tol{0}, scale{1}, w{1};
    elastico::PrimalInstance in{2, 1, off.data(), u.data(), d.data(), cap.data(), tol.data(), scale.data()};
    std::vector<int64_t> items{0, 3};
    std::vector<double> T{0};
    const int64_t moved_rounds = elastico::greedy_fill(in, w.data(), items.data(), T.data(), 30);
    CHECK(items[0] == 1 && items[1] == 4);
    CHECK(T[0] == 3.0);
    CHECK(moved_rounds == 1);
    // Zero rounds: nothing changes.
    std::vector<int64_t> items0{0, 3};
    std::vector<double> T0{0};
    CHECK(elastico::greedy_fill(in, w.data(), items0.data(), T0.data(), 0) == 0);
    CHECK(items0[0] == 0 && items0[1] == 3 && T0[0] == 0.0);
}

void fill_pool_is_not_refreshed_for_unmoved_jobs() {
    // R = 2, capacity [2, 2].  Job 0: items 0 (u=0, d=[0,0]), 1 (u=1, d=[2,0]).
    // Job 1: items 2 (u=0, d=[1,0]), 3 (u=1, d=[0,1]).  Start [0, 2], T = [1, 0], S = [1, 2].
    // Item 1 (delta [2,0]) does not fit S alone: pool = {3: delta [-1, 1], ratio 1/(0+1) = 1}.
    // Round 1 moves job 1 to 3: T = [0, 1], S = [2, 1]; fresh rows for job 1: none.  Item 1
    // was dropped from the pool in round 0 and is not re-added (its job did not move): the
    // pool is empty, stop.  Result [0, 3] -- exactly what the numpy reference does.
    std::vector<int64_t> off{0, 2, 4};
    std::vector<double> u{0, 1, 0, 1}, d{0, 0, 2, 0, 1, 0, 0, 1};
    std::vector<double> cap{2, 2}, tol{0, 0}, scale{2, 2}, w{1, 1};
    elastico::PrimalInstance in{2, 2, off.data(), u.data(), d.data(), cap.data(), tol.data(), scale.data()};
    std::vector<int64_t> items{0, 2};
    std::vector<double> T{1, 0};
    elastico::greedy_fill(in, w.data(), items.data(), T.data(), 30);
    CHECK(items[0] == 0 && items[1] == 3);
    CHECK(T[0] == 0.0 && T[1] == 1.0);
}

void repair_two_jobs() {
    // R = 1, capacity 2, tol 0, scale 1.  Job 0: items 0 (u=0, d=0), 1 (u=3, d=2).
    // Job 1: items 2 (u=0, d=0), 3 (u=2, d=2).  Start [1, 3], T = 4: E = 2, V = 2.
    // Prices 0, so the key is utility loss / violation removed.  Moves: 1 -> 0 (delta -2,
    // red 2, key 3/2), 3 -> 2 (delta -2, red 2, key 1).  Job 1 first; it alone makes the choice
    // feasible, so job 0 keeps its item.
    std::vector<int64_t> off{0, 2, 4};
    std::vector<double> u{0, 3, 0, 2}, d{0, 2, 0, 2};
    std::vector<double> cap{2}, tol{0}, scale{1};
    elastico::PrimalInstance in{2, 1, off.data(), u.data(), d.data(), cap.data(), tol.data(), scale.data()};
    std::vector<int64_t> items{1, 3};
    std::vector<double> T{4};
    // values = u - prices . d at prices 0: the utilities
    CHECK(elastico::repair(in, u.data(), items.data(), T.data(), 1000));
    CHECK(items[0] == 1 && items[1] == 2);
    CHECK(T[0] == 2.0);
    // A single-configuration family that alone overuses capacity: no move helps.
    std::vector<int64_t> off1{0, 1};
    std::vector<double> u1{1}, d1{5};
    elastico::PrimalInstance in1{1, 1, off1.data(), u1.data(), d1.data(), cap.data(), tol.data(), scale.data()};
    std::vector<int64_t> items1{0};
    std::vector<double> T1{5};
    CHECK(!elastico::repair(in1, u1.data(), items1.data(), T1.data(), 1000));
}

void repair_skips_moves_that_no_longer_help() {
    // R = 2, capacity [2, 2], prices 0.  Job 3 has one item (u 1, d [2, 1]).  Start: the last
    // item of every job, T = [3, 4], E = [1, 2], V = 3.  Keys (utility loss / red):
    //   job 0: d [0,2] -> [0,0]: E + delta = [1, 0], V 1, red 2, loss 0.2 -> 0.1
    //   job 1: d [0,1] -> [0,0]: [1, 1], V 2, red 1, loss 0.2 -> 0.2
    //   job 2: d [1,0] -> [0,0]: [0, 2], V 2, red 1, loss 0.5 -> 0.5
    // Job 0 moves (E = [1, 0]); job 1's move would now only lower a resource that is no longer
    // over (V stays 1), so it is skipped; job 2 moves and T = [2, 2] is feasible.
    std::vector<int64_t> off{0, 2, 4, 6, 7};
    std::vector<double> u{0, 0.2, 0, 0.2, 0, 0.5, 1};
    std::vector<double> d{0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 1, 0, 2, 1};
    std::vector<double> cap{2, 2}, tol{0, 0}, scale{1, 1};
    elastico::PrimalInstance in{4, 2, off.data(), u.data(), d.data(), cap.data(), tol.data(), scale.data()};
    std::vector<int64_t> items{1, 3, 5, 6};
    std::vector<double> T{3, 4};
    CHECK(elastico::repair(in, u.data(), items.data(), T.data(), 1000));  // prices 0: values = u
    CHECK(items[0] == 0 && items[1] == 3 && items[2] == 4 && items[3] == 6);
    CHECK(T[0] == 2.0 && T[1] == 2.0);
    // With a price on resource 0, job 2's move loses only 0.5 - 0.5 * 1 = 0 at the prices: key 0,
    // first; it removes E_0, then job 0 (key 0.1) removes E_1.
    std::vector<double> values(u.size());  // u - 0.5 * d[., 0]
    for (size_t c = 0; c < u.size(); ++c) values[c] = u[c] - 0.5 * d[2 * c];
    std::vector<int64_t> items2{1, 3, 5, 6};
    std::vector<double> T2{3, 4};
    CHECK(elastico::repair(in, values.data(), items2.data(), T2.data(), 1000));
    CHECK(items2[0] == 0 && items2[1] == 3 && items2[2] == 4);
}

}  // namespace

void primal_tests() {
    fill_two_jobs();
    fill_pool_is_not_refreshed_for_unmoved_jobs();
    repair_two_jobs();
    repair_skips_moves_that_no_longer_help();
}
