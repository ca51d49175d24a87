// C++ tests of FGD's fragmentation summaries (native/frag.hpp), hand-worked numbers.  Called
// from main() in test_select.cpp (one native_tests executable).
//
// Workload of every test: thresholds {250, 500, 1000} milli-GPU and three typical GPU pods
//   t0: 1 GPU x 500,  1000 milli-CPU, p = 0.5,  any model
//   t1: 2 GPUs x 1000, 4000 milli-CPU, p = 0.25, any model
//   t2: 1 GPU x 250,     0 milli-CPU, p = 0.25, model 1 only
// (dyadic frequencies, so every product and sum below is exact in float64).
#include <cmath>
#include <limits>
#include <vector>

#include "check.hpp"
#include "frag.hpp"

namespace {

struct Workload {
    std::vector<int64_t> thr{250, 500, 1000}, k{1, 2, 0}, n{1, 2, 1}, c{1000, 4000, 0};
    std::vector<double> p{0.5, 0.25, 0.25};
    std::vector<uint8_t> access{1, 1, 0,   // model 0
                                1, 1, 1};  // model 1
    elastico::FragPods pods() const {
        return {3, thr.data(), 3, k.data(), n.data(), c.data(), p.data(), 2, access.data()};
    }
};

// Two nodes of width G = 4: node 0 (model 0) has 4 GPUs, node 1 (model 1) 3 GPUs + padding.
struct Cluster {
    std::vector<int64_t> rows = std::vector<int64_t>(8, 0), cpu = std::vector<int64_t>(2, 0),
                         model{0, 1}, cnt = std::vector<int64_t>(6, -1),
                         S = std::vector<int64_t>(6, -1), L = std::vector<int64_t>(2, -1);
    std::vector<double> F = std::vector<double>(2, -1.0);
    elastico::FragNodes nodes() {
        return {2, 4, rows.data(), cpu.data(), model.data(), cnt.data(), S.data(), L.data(), F.data()};
    }
};

void update_summarises_a_node() {
    // node 0: free {1000, 1000, 600, 200}, 8000 milli-CPU: L = 2800; GPUs >= 250: 3 (S 2600),
    // >= 500: 3 (S 2600), >= 1000: 2 (S 2000).  t0 fits (F_t0 = GPUs under 500 = 200), t1 fits
    // (F_t1 = under 1000 = 800), t2 may not run on model 0 (F_t2 = L = 2800):
    // F = 0.5 * 200 + 0.25 * 800 + 0.25 * 2800 = 1000 = L - 0.5 * 2600 - 0.25 * 2000.
    Workload w;
    Cluster cl;
    auto pods = w.pods();
    auto nodes = cl.nodes();
    const std::vector<int64_t> row{1000, 1000, 600, 200};
    elastico::frag_update(pods, nodes, 0, row.data(), 8000);
    CHECK(cl.rows[0] == 1000 && cl.rows[3] == 200 && cl.cpu[0] == 8000);
    CHECK(cl.cnt[0] == 3 && cl.cnt[1] == 3 && cl.cnt[2] == 2);
    CHECK(cl.S[0] == 2600 && cl.S[1] == 2600 && cl.S[2] == 2000);
    CHECK(cl.L[0] == 2800);
    CHECK(cl.F[0] == 1000.0);
    CHECK(cl.L[1] == -1);  // other nodes untouched
    // The same GPUs on model 1: t2 fits too, F_t2 = GPUs under 250 = 200:
    // F = 100 + 200 + 0.25 * 200 = 350.
    elastico::frag_update(pods, nodes, 1, row.data(), 8000);
    CHECK(cl.F[1] == 350.0);
    // 3000 milli-CPU free: t1 (4000) no longer fits: F = 100 + 0.25 * 2800 + 0.25 * 2800 = 1500.
    elastico::frag_update(pods, nodes, 0, row.data(), 3000);
    CHECK(cl.F[0] == 1500.0);
    // An empty node (all GPUs 0, e.g. unhealthy): nothing fits anywhere, F = L = 0.
    const std::vector<int64_t> zero(4, 0);
    elastico::frag_update(pods, nodes, 0, zero.data(), 8000);
    CHECK(cl.F[0] == 0.0 && cl.L[0] == 0 && cl.cnt[0] == 0 && cl.S[2] == 0);
}

void increase_per_gpu() {
    Workload w;
    Cluster cl;
    auto pods = w.pods();
    auto nodes = cl.nodes();
    const std::vector<int64_t> row{1000, 1000, 600, 200};
    elastico::frag_update(pods, nodes, 0, row.data(), 8000);  // F = 1000 (above)
    std::vector<double> out(4);
    // m = 500, cpu_m = 2000 (6000 left: every pod's CPU fits).
    // GPU 0 (1000 -> 500): {500, 1000, 600, 200}, L = 2300; t0 fits, F_t0 = 200; t1 needs two
    // full GPUs, F_t1 = 2300; F_t2 = 2300: F = 100 + 575 + 575 = 1250, increase 250.
    // GPU 2 (600 -> 100): {1000, 1000, 100, 200}: F_t0 = 300, F_t1 = 300, F_t2 = 2300:
    // F = 150 + 75 + 575 = 800, increase -200.  GPU 3 (200 < m - 1): inf.
    elastico::frag_node_increase(pods, nodes, 0, 500, 2000, out.data());
    CHECK(out[0] == 250.0 && out[1] == 250.0);
    CHECK(out[2] == -200.0);
    CHECK(std::isinf(out[3]) && out[3] > 0);
    // cpu_m = 5000 (3000 left): t1 never fits: GPU 2: F = 150 + 575 + 575 = 1300, +300.
    elastico::frag_node_increase(pods, nodes, 0, 500, 5000, out.data());
    CHECK(out[2] == 300.0);
    // m = 201: GPU 3 (200 = m - 1: may take it up to rounding) goes to 0:
    // {1000, 1000, 600, 0}: F_t0 = 0, F_t1 = 600, F_t2 = 2600: F = 0 + 150 + 650 = 800, -200.
    elastico::frag_node_increase(pods, nodes, 0, 201, 0, out.data());
    CHECK(out[3] == -200.0);
    // the summaries are only read
    CHECK(cl.F[0] == 1000.0 && cl.rows[0] == 1000);
}

void refresh_writes_stale_nodes_only() {
    Workload w;
    Cluster cl;
    auto pods = w.pods();
    auto nodes = cl.nodes();
    const std::vector<int64_t> row0{1000, 1000, 600, 200}, row1{1000, 400, 0, 0};
    elastico::frag_update(pods, nodes, 0, row0.data(), 8000);
    elastico::frag_update(pods, nodes, 1, row1.data(), 8000);
    // flat GPUs: node 0 -> 0..3, node 1 -> 4..6 (its 4th slot is padding); one spare entry
    const std::vector<int64_t> offsets{0, 4, 7}, version{3, 5}, cand{0, 1};
    std::vector<int64_t> seen{-1, 5};  // node 1 is up to date
    std::vector<double> d(8, 7.0);
    std::vector<int64_t> nw(8, 7);
    // more stale nodes than allowed: nothing is written
    CHECK(elastico::frag_refresh(pods, nodes, cand.data(), 2, seen.data(), version.data(),
                                 offsets.data(), 500, 2000, d.data(), nw.data(), 0) == 1);
    CHECK(d[0] == 7.0 && seen[0] == -1);
    CHECK(elastico::frag_refresh(pods, nodes, cand.data(), 2, seen.data(), version.data(),
                                 offsets.data(), 500, 2000, d.data(), nw.data(), 64) == 1);
    // increases / 1000, in GPUs (increase_per_gpu): 0.25, 0.25, -0.2, inf
    CHECK(d[0] == 0.25 && d[1] == 0.25 && d[2] == -0.2 && std::isinf(d[3]));
    CHECK(nw[0] == 500 && nw[1] == 500 && nw[2] == 100 && nw[3] == 0);
    CHECK(d[4] == 7.0 && nw[4] == 7 && d[7] == 7.0);  // node 1 was not stale
    CHECK(seen[0] == 3 && seen[1] == 5);
    // now nothing is stale
    CHECK(elastico::frag_refresh(pods, nodes, cand.data(), 2, seen.data(), version.data(),
                                 offsets.data(), 500, 2000, d.data(), nw.data(), 64) == 0);
}

void rounding() {
    CHECK(elastico::round9(1.0000000004) == 1.0);
    CHECK(elastico::round9(1.0000000006) == 1.000000001);
    CHECK(elastico::round9(-0.25) == -0.25);
    const double z = elastico::round9(-1e-12);  // Python's round gives the int 0: +0.0
    CHECK(z == 0.0 && !std::signbit(z));
    CHECK(std::isinf(elastico::round9(std::numeric_limits<double>::infinity())));
    // free milli-GPU: 1/4 of an MPS GPU used -> 750; unhealthy -> 0; MIG by free slices,
    // half to even: 1/16 * 1000 = 62.5 -> 62, 3/16 * 1000 = 187.5 -> 188, 4/7 -> 571
    CHECK(elastico::gpu_free_milli(true, false, 7, 0, 0.25) == 750);
    CHECK(elastico::gpu_free_milli(false, false, 7, 0, 0.25) == 0);
    CHECK(elastico::gpu_free_milli(true, true, 16, 15, 0.0) == 62);
    CHECK(elastico::gpu_free_milli(true, true, 16, 13, 0.0) == 188);
    CHECK(elastico::gpu_free_milli(true, true, 7, 3, 0.9) == 571);
}

void candidate_order() {
    // eligible flat GPUs {0, 1, 2, 5, 6}: node 0 has GPUs 0-2, node 2 has GPUs 5-6
    const std::vector<int64_t> idx{0, 1, 2, 5, 6}, node_of{0, 0, 0, 2, 2};
    std::vector<double> d_all{0.3, 0.1, 0.1, 9.0, 9.0, 0.2, -0.05, 9.0};
    const std::vector<int64_t> new_all{500, 700, 200, 0, 0, 100, 300, 0};
    CHECK(elastico::count_runs(5, node_of.data()) == 2);
    std::vector<int64_t> uniq(2), first(2), counts(2), order(5), new_gpu(5), visit(2);
    std::vector<double> d_gpu(5), opt_key(2);
    auto run = [&] {
        elastico::elastico_candidates(5, idx.data(), node_of.data(), d_all.data(), new_all.data(), 0.003,
                                      uniq.data(), first.data(), counts.data(), order.data(),
                                      d_gpu.data(), new_gpu.data(), opt_key.data(), visit.data());
    };
    run();
    CHECK(uniq[0] == 0 && uniq[1] == 2 && first[0] == 0 && first[1] == 3);
    CHECK(counts[0] == 3 && counts[1] == 2);
    CHECK(d_gpu[3] == 0.2 && new_gpu[4] == 300);
    // node 0 by (d, new, position): GPU 2 (0.1, 200), GPU 1 (0.1, 700), GPU 0 (0.3);
    // node 2: GPU 6 (-0.05), GPU 5 (0.2)
    CHECK(order[0] == 2 && order[1] == 1 && order[2] == 0 && order[3] == 4 && order[4] == 3);
    // least d + 0.003 x node, to 1e-9: node 0 0.1, node 2 -0.05 + 0.006 = -0.044: node 2 first
    CHECK(opt_key[0] == 0.1 && opt_key[1] == -0.044);
    CHECK(visit[0] == 1 && visit[1] == 0);
    // equal keys go by node: node 0 at 0.006, node 2 at 0 + 0.006
    d_all = {0.006, 0.5, 0.5, 9.0, 9.0, 0.0, 0.0, 9.0};
    run();
    CHECK(opt_key[0] == 0.006 && opt_key[1] == 0.006);
    CHECK(visit[0] == 0 && visit[1] == 1);
    CHECK(order[3] == 3 && order[4] == 4);  // equal d: less free after (100 < 300) first
}

}  // namespace

void frag_tests() {
    update_summarises_a_node();
    increase_per_gpu();
    refresh_writes_stale_nodes_only();
    rounding();
    candidate_order();
}
