// The one binding file: converts numpy arrays, releases the GIL around the hot loop.
// Input validation lives in Python (elastico/pricing/kernel.py), the only caller.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <vector>
#include <string>

#include "frag.hpp"
#include "primal.hpp"
#include "select.hpp"

namespace py = pybind11;

namespace {

using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

struct CsrShape {
    int64_t n, m, r;
};

// The CSR batch every binding takes: offsets [N+1] from 0 to M with no empty family,
// demand [M, R], utility [M].  Throws std::invalid_argument (ValueError) naming the array.
template <typename U, typename D>
CsrShape check_csr(const I64& offsets, const U& utility, const D& demand) {
    if (offsets.ndim() != 1 || offsets.shape(0) < 1)
        throw std::invalid_argument("offsets: must be 1-D with N+1 >= 1 entries");
    if (demand.ndim() != 2) throw std::invalid_argument("demand: must be 2-D [M, R]");
    const int64_t n = offsets.shape(0) - 1;
    const int64_t m = demand.shape(0), r = demand.shape(1);
    if (utility.ndim() != 1 || utility.shape(0) != m)
        throw std::invalid_argument("utility: must be 1-D of length M=" + std::to_string(m));
    const int64_t* off = offsets.data();
    if (off[0] != 0 || off[n] != m)
        throw std::invalid_argument("offsets: must start at 0 and end at M");
    for (int64_t j = 0; j < n; ++j)
        if (off[j + 1] <= off[j])
            throw std::invalid_argument("offsets: job " + std::to_string(j) + " has an empty family");
    return {n, m, r};
}

template <typename T>
py::tuple select(py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
                 py::array_t<T, py::array::c_style> utility,
                 py::array_t<T, py::array::c_style> demand,
                 py::array_t<T, py::array::c_style> prices,
                 py::array_t<T, py::array::c_style> capacity, int nthreads) {
    const CsrShape shape = check_csr(offsets, utility, demand);
    const int64_t n = shape.n, r = shape.r;
    if (prices.ndim() != 1 || prices.shape(0) != r)
        throw std::invalid_argument("prices: must be 1-D of length R=" + std::to_string(r));
    if (capacity.ndim() != 1 || capacity.shape(0) != r)
        throw std::invalid_argument("capacity: must be 1-D of length R=" + std::to_string(r));
    const int64_t* off = offsets.data();

    py::array_t<int64_t> choice(n);
    py::array_t<T> totals(r);
    elastico::SelectOutput<T> out{choice.mutable_data(), totals.mutable_data(), 0.0};
    const T* u = utility.data();
    const T* d = demand.data();
    const T* p = prices.data();
    {
        py::gil_scoped_release release;
        elastico::select_configs<T>(n, r, off, u, d, p, out, nthreads);
    }
    double dual = out.reduced_sum;
    const T* c = capacity.data();
    for (int64_t k = 0; k < r; ++k) dual += static_cast<double>(p[k]) * static_cast<double>(c[k]);
    return py::make_tuple(choice, totals, dual);
}


using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

// Checks the shapes and the item indices of a primal call (cheap, O(N + R)) and returns the
// instance view.  The arrays must outlive the returned struct.
elastico::PrimalInstance primal_instance(const I64& offsets, const F64& utility, const F64& demand,
                                         const F64& capacity, const F64& tol, const F64& scale,
                                         const I64& items, const F64& totals) {
    const CsrShape shape = check_csr(offsets, utility, demand);
    const int64_t n = shape.n, r = shape.r;
    for (const auto* a : {&capacity, &tol, &scale, &totals})
        if (a->ndim() != 1 || a->shape(0) != r)
            throw std::invalid_argument("capacity, tol, scale, totals: must be 1-D of length R=" +
                                        std::to_string(r));
    if (items.ndim() != 1 || items.shape(0) != n)
        throw std::invalid_argument("items: must be 1-D of length N=" + std::to_string(n));
    const int64_t* off = offsets.data();
    const int64_t* it = items.data();
    for (int64_t j = 0; j < n; ++j) {
        if (it[j] < off[j] || it[j] >= off[j + 1])
            throw std::invalid_argument("items: job " + std::to_string(j) +
                                        " holds an item outside its family");
    }
    const double* sc = scale.data();
    for (int64_t k = 0; k < r; ++k)
        if (!(sc[k] > 0)) throw std::invalid_argument("scale: must be > 0");
    return {n, r, off, utility.data(), demand.data(), capacity.data(), tol.data(), sc};
}

py::tuple greedy_fill(I64 offsets, F64 utility, F64 demand, F64 capacity, F64 tol, F64 scale,
                      F64 weights, I64 items, F64 totals, int64_t rounds) {
    const auto in = primal_instance(offsets, utility, demand, capacity, tol, scale, items, totals);
    if (weights.ndim() != 1 || weights.shape(0) != in.n_res)
        throw std::invalid_argument("weights: must be 1-D of length R=" + std::to_string(in.n_res));
    py::array_t<int64_t> items_out(in.n_jobs);
    py::array_t<double> totals_out(in.n_res);
    int64_t* it = items_out.mutable_data();
    double* t = totals_out.mutable_data();
    std::copy(items.data(), items.data() + in.n_jobs, it);
    std::copy(totals.data(), totals.data() + in.n_res, t);
    const double* w = weights.data();
    int64_t done;
    {
        py::gil_scoped_release release;
        done = elastico::greedy_fill(in, w, it, t, rounds);
    }
    return py::make_tuple(items_out, totals_out, done);
}

py::object repair(I64 offsets, F64 utility, F64 demand, F64 capacity, F64 tol, F64 scale,
                  F64 values, I64 items, F64 totals, int64_t max_rounds) {
    const auto in = primal_instance(offsets, utility, demand, capacity, tol, scale, items, totals);
    if (values.ndim() != 1 || values.shape(0) != utility.shape(0))
        throw std::invalid_argument("values: must be 1-D of length M=" +
                                    std::to_string(utility.shape(0)));
    const double* pr = values.data();
    py::array_t<int64_t> items_out(in.n_jobs);
    int64_t* it = items_out.mutable_data();
    std::copy(items.data(), items.data() + in.n_jobs, it);
    std::vector<double> t(totals.data(), totals.data() + in.n_res);
    bool ok;
    {
        py::gil_scoped_release release;
        ok = elastico::repair(in, pr, it, t.data(), max_rounds);
    }
    if (!ok) return py::none();
    return std::move(items_out);
}

py::array_t<int64_t> argmin_per_job(I64 offsets, F64 key) {
    if (offsets.ndim() != 1 || offsets.shape(0) < 1)
        throw std::invalid_argument("offsets: must be 1-D with N+1 >= 1 entries");
    if (key.ndim() != 1) throw std::invalid_argument("key: must be 1-D [M]");
    const int64_t n = offsets.shape(0) - 1;
    const int64_t* off = offsets.data();
    if (off[0] != 0 || off[n] != key.shape(0))
        throw std::invalid_argument("offsets: must start at 0 and end at M");
    for (int64_t j = 0; j < n; ++j)
        if (off[j + 1] <= off[j])
            throw std::invalid_argument("offsets: job " + std::to_string(j) + " has an empty family");
    py::array_t<int64_t> out(n);
    elastico::argmin_per_job(n, off, key.data(), out.mutable_data());
    return out;
}

py::array_t<double> lagrangian_values(F64 utility, F64 demand, F64 prices) {
    if (demand.ndim() != 2 || utility.ndim() != 1 || utility.shape(0) != demand.shape(0))
        throw std::invalid_argument("demand/utility: must be [M, R] and [M]");
    const int64_t m = demand.shape(0), r = demand.shape(1);
    if (prices.ndim() != 1 || prices.shape(0) != r)
        throw std::invalid_argument("prices: must be 1-D of length R=" + std::to_string(r));
    py::array_t<double> out(m);
    double* o = out.mutable_data();
    const double *u = utility.data(), *d = demand.data(), *p = prices.data();
    {
        py::gil_scoped_release release;
        for (int64_t i = 0; i < m; ++i) {
            double s = 0.0;
            for (int64_t k = 0; k < r; ++k) s += d[i * r + k] * p[k];
            o[i] = u[i] - s;
        }
    }
    return out;
}

py::array_t<double> column_max(F64 demand) {
    if (demand.ndim() != 2) throw std::invalid_argument("demand: must be 2-D [M, R]");
    const int64_t m = demand.shape(0), r = demand.shape(1);
    if (m < 1) throw std::invalid_argument("demand: must have at least one row");
    py::array_t<double> out(r);
    double* o = out.mutable_data();
    const double* d = demand.data();
    {
        py::gil_scoped_release release;
        for (int64_t k = 0; k < r; ++k) o[k] = d[k];
        for (int64_t i = 1; i < m; ++i)
            for (int64_t k = 0; k < r; ++k) o[k] = std::max(o[k], d[i * r + k]);
    }
    return out;
}


// ---- FGD fragmentation summaries (frag.hpp), for services/placer/fragmentation.py ----
// Each call works on one node or a placement's few stale nodes (microseconds), so the GIL is
// kept: releasing it would cost more than the work, and the arrays stay the caller's.

// A writable, C-contiguous array of exactly dtype T and the given shape, never a converted
// copy: the kernel writes into the caller's own numpy arrays.
template <typename T>
T* writable(const py::array& a, const char* name, std::initializer_list<int64_t> shape) {
    if (!py::isinstance<py::array_t<T>>(a))  // equivalent dtype (not the same dtype object)
        throw std::invalid_argument(std::string(name) + ": must have dtype " +
                                    std::string(py::str(py::dtype::of<T>())));
    if (!(a.flags() & py::array::c_style) || !a.writeable())
        throw std::invalid_argument(std::string(name) + ": must be C-contiguous and writeable");
    if (a.ndim() != static_cast<py::ssize_t>(shape.size()))
        throw std::invalid_argument(std::string(name) + ": must be " + std::to_string(shape.size()) + "-D");
    int i = 0;
    for (int64_t s : shape) {
        if (s >= 0 && a.shape(i) != s)
            throw std::invalid_argument(std::string(name) + ": dimension " + std::to_string(i) +
                                        " must be " + std::to_string(s));
        ++i;
    }
    return static_cast<T*>(const_cast<void*>(a.data()));
}

using U8 = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using Bool = py::array_t<bool, py::array::c_style>;

class FragSummaries {
public:
    // Typical GPU pods (tables, copied) and the per-node summary arrays (kept, written in
    // place).  Shapes: thresholds [K] ascending; pod_k, pod_gpus, pod_cpu [T] int64, pod_freq
    // [T] float64, access [models, T]; rows [B, G], cpu [B], model [B], cnt and S [B, K], L [B]
    // int64, F [B] float64.
    FragSummaries(I64 thresholds, I64 pod_k, I64 pod_gpus, I64 pod_cpu, F64 pod_freq, U8 access,
                  py::array rows, py::array cpu, py::array model, py::array cnt, py::array S,
                  py::array L, py::array F)
        : thr_(thresholds), k_(pod_k), n_(pod_gpus), c_(pod_cpu), p_(pod_freq), acc_(access),
          rows_(rows), cpu_(cpu), model_(model), cnt_(cnt), S_(S), L_(L), F_(F) {
        if (thr_.ndim() != 1) throw std::invalid_argument("thresholds: must be 1-D [K]");
        const int64_t K = thr_.shape(0);
        for (int64_t k = 1; k < K; ++k)
            if (thr_.data()[k] <= thr_.data()[k - 1])
                throw std::invalid_argument("thresholds: must be strictly increasing");
        const int64_t T = k_.ndim() == 1 ? k_.shape(0) : -1;
        for (const I64* a : {&k_, &n_, &c_})
            if (a->ndim() != 1 || a->shape(0) != T)
                throw std::invalid_argument("pod_k, pod_gpus, pod_cpu: must be 1-D of one length T");
        if (p_.ndim() != 1 || p_.shape(0) != T)
            throw std::invalid_argument("pod_freq: must be 1-D of length T=" + std::to_string(T));
        if (acc_.ndim() != 2 || acc_.shape(1) != T)
            throw std::invalid_argument("access: must be 2-D [models, T=" + std::to_string(T) + "]");
        for (int64_t t = 0; t < T; ++t)
            if (k_.data()[t] < 0 || k_.data()[t] >= K)
                throw std::invalid_argument("pod_k: entry " + std::to_string(t) + " outside 0.." +
                                            std::to_string(K - 1));
        if (rows.ndim() != 2) throw std::invalid_argument("rows: must be 2-D [B, G]");
        const int64_t B = rows.shape(0), G = rows.shape(1);
        const int64_t M = acc_.shape(0);
        nodes_ = {B, G,
                  writable<int64_t>(rows_, "rows", {B, G}),
                  writable<int64_t>(cpu_, "cpu", {B}),
                  writable<int64_t>(model_, "model", {B}),
                  writable<int64_t>(cnt_, "cnt", {B, K}),
                  writable<int64_t>(S_, "S", {B, K}),
                  writable<int64_t>(L_, "L", {B}),
                  writable<double>(F_, "F", {B})};
        for (int64_t b = 0; b < B; ++b)
            if (nodes_.model[b] < 0 || nodes_.model[b] >= M)
                throw std::invalid_argument("model: node " + std::to_string(b) + " has model " +
                                            std::to_string(nodes_.model[b]) + ", outside 0.." +
                                            std::to_string(M - 1));
        pods_ = {K, thr_.data(), T, k_.data(), n_.data(), c_.data(), p_.data(), M, acc_.data()};
    }

    void update(int64_t node, I64 row, int64_t cpu) {
        check_node(node);
        if (row.ndim() != 1 || row.shape(0) != nodes_.width)
            throw std::invalid_argument("row: must be 1-D of length G=" + std::to_string(nodes_.width));
        elastico::frag_update(pods_, nodes_, node, row.data(), cpu);
    }

    // GPUs [lo, hi) of the placer's flat arrays are node `node`'s GPUs 0..hi-lo-1.
    void update_from_gpus(int64_t node, int64_t lo, int64_t hi, Bool healthy, Bool is_mig,
                          I64 mig_cs, I64 mig_comp, F64 used_share, double cpu_free_cores) {
        check_node(node);
        const int64_t G = nodes_.width;
        if (lo < 0 || hi < lo || hi - lo > G)
            throw std::invalid_argument("lo, hi: need 0 <= lo <= hi <= lo + G=" + std::to_string(G));
        for (const py::array* a : {static_cast<const py::array*>(&healthy), static_cast<const py::array*>(&is_mig),
                                   static_cast<const py::array*>(&mig_cs), static_cast<const py::array*>(&mig_comp),
                                   static_cast<const py::array*>(&used_share)})
            if (a->ndim() != 1 || a->shape(0) < hi)
                throw std::invalid_argument("healthy, is_mig, mig_cs, mig_comp, used_share: must be 1-D "
                                            "with at least hi=" + std::to_string(hi) + " entries");
        std::vector<int64_t> row(static_cast<size_t>(G), 0);
        const bool* ok = healthy.data();
        const bool* mig = is_mig.data();
        const int64_t* cs = mig_cs.data();
        const int64_t* comp = mig_comp.data();
        const double* used = used_share.data();
        for (int64_t f = lo; f < hi; ++f) {
            if (mig[f] && cs[f] <= 0)
                throw std::invalid_argument("mig_cs: GPU " + std::to_string(f) + " has no compute slices");
            row[f - lo] = elastico::gpu_free_milli(ok[f], mig[f], cs[f], comp[f], used[f]);
        }
        // round(free cores * 1000), half to even, as FragIndex.touch
        const int64_t cpu = static_cast<int64_t>(std::nearbyint(cpu_free_cores * 1000.0));
        elastico::frag_update(pods_, nodes_, node, row.data(), cpu);
    }

    py::array_t<double> node_increase(int64_t node, int64_t m, int64_t cpu_m) {
        check_node(node);
        py::array_t<double> out(nodes_.width);
        elastico::frag_node_increase(pods_, nodes_, node, m, cpu_m, out.mutable_data());
        return out;
    }

    int64_t refresh(I64 cand, py::array seen, I64 version, I64 offsets, int64_t m, int64_t cpu_m,
                    py::array d_all, py::array new_all, int64_t max_stale) {
        const int64_t B = nodes_.n_nodes;
        if (cand.ndim() != 1) throw std::invalid_argument("nodes: must be 1-D");
        if (version.ndim() != 1 || version.shape(0) != B)
            throw std::invalid_argument("version: must be 1-D of length B=" + std::to_string(B));
        if (offsets.ndim() != 1 || offsets.shape(0) != B + 1)
            throw std::invalid_argument("offsets: must be 1-D of length B+1=" + std::to_string(B + 1));
        int64_t* sn = writable<int64_t>(seen, "seen", {B});
        const int64_t* off = offsets.data();
        const int64_t nflat = off[B];
        double* d = writable<double>(d_all, "d_all", {-1});
        int64_t* nw = writable<int64_t>(new_all, "new_all", {-1});
        if (d_all.shape(0) < nflat || new_all.shape(0) < nflat)
            throw std::invalid_argument("d_all, new_all: need at least offsets[B]=" + std::to_string(nflat) +
                                        " entries");
        const int64_t n = cand.shape(0);
        const int64_t* c = cand.data();
        for (int64_t i = 0; i < n; ++i) {
            if (c[i] < 0 || c[i] >= B)
                throw std::invalid_argument("nodes: entry " + std::to_string(i) + " = " +
                                            std::to_string(c[i]) + " outside 0.." + std::to_string(B - 1));
            if (off[c[i] + 1] < off[c[i]] || off[c[i] + 1] - off[c[i]] > nodes_.width || off[c[i]] < 0)
                throw std::invalid_argument("offsets: node " + std::to_string(c[i]) +
                                            " must have 0..G GPUs within the flat arrays");
        }
        return elastico::frag_refresh(pods_, nodes_, c, n, sn, version.data(), off, m, cpu_m, d, nw,
                                      max_stale);
    }

    // refresh() for the nodes of the eligible GPUs idx, then their candidate order
    // (frag.hpp elastico_candidates); None if more than max_stale of those nodes are stale.
    py::object plan(I64 idx, I64 gpu_node, py::array seen, I64 version, I64 offsets, int64_t m,
                    int64_t cpu_m, py::array d_all, py::array new_all, int64_t max_stale,
                    double consolidation) {
        const int64_t B = nodes_.n_nodes;
        if (idx.ndim() != 1 || gpu_node.ndim() != 1)
            throw std::invalid_argument("idx, gpu_node: must be 1-D");
        if (offsets.ndim() != 1 || offsets.shape(0) != B + 1)
            throw std::invalid_argument("offsets: must be 1-D of length B+1=" + std::to_string(B + 1));
        const int64_t n = idx.shape(0), nflat = offsets.data()[B];
        if (gpu_node.shape(0) != nflat)
            throw std::invalid_argument("gpu_node: must have offsets[B]=" + std::to_string(nflat) + " entries");
        const int64_t* ix = idx.data();
        const int64_t* gn = gpu_node.data();
        std::vector<int64_t> node_of(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            if (ix[i] < 0 || ix[i] >= nflat || (i > 0 && ix[i] <= ix[i - 1]))
                throw std::invalid_argument("idx: must be increasing flat GPU indices in 0.." +
                                            std::to_string(nflat - 1) + " (entry " + std::to_string(i) + ")");
            node_of[i] = gn[ix[i]];
        }
        const int64_t R = elastico::count_runs(n, node_of.data());
        I64 uniq(R), first(R), counts(R), order(n), new_gpu(n), visit(R);
        F64 d_gpu(n), opt_key(R);
        // uniq first: refresh needs the candidate nodes
        {
            int64_t* u = uniq.mutable_data();
            int64_t r = 0;
            for (int64_t i = 0; i < n; ++i)
                if (i == 0 || node_of[i] != node_of[i - 1]) u[r++] = node_of[i];
        }
        if (refresh(uniq, seen, version, offsets, m, cpu_m, d_all, new_all, max_stale) > max_stale)
            return py::none();
        elastico::elastico_candidates(n, ix, node_of.data(), static_cast<const double*>(d_all.data()),
                                      static_cast<const int64_t*>(new_all.data()), consolidation,
                                      uniq.mutable_data(), first.mutable_data(), counts.mutable_data(),
                                      order.mutable_data(), d_gpu.mutable_data(), new_gpu.mutable_data(),
                                      opt_key.mutable_data(), visit.mutable_data());
        return py::make_tuple(uniq, counts, first, order, d_gpu, new_gpu, opt_key, visit);
    }

private:
    void check_node(int64_t node) const {
        if (node < 0 || node >= nodes_.n_nodes)
            throw std::invalid_argument("node: " + std::to_string(node) + " outside 0.." +
                                        std::to_string(nodes_.n_nodes - 1));
    }

    I64 thr_, k_, n_, c_;
    F64 p_;
    U8 acc_;
    py::array rows_, cpu_, model_, cnt_, S_, L_, F_;
    elastico::FragPods pods_{};
    elastico::FragNodes nodes_{};
};

}  // namespace

PYBIND11_MODULE(_native, mod) {
    mod.doc() = "ElastiCo native core: per-job configuration selection under shadow prices and "
                "the primal repair/fill heuristics.";
    const char* doc =
        "select(offsets[N+1] int64, utility[M], demand[M,R], prices[R], capacity[R], nthreads=1)"
        " -> (choice[N] int64, totals[R], lagrangian float).\n"
        "choice[j] = argmax over job j's family of utility - prices.demand (lowest index on "
        "ties); totals = sum of chosen demand; lagrangian = sum_j max + prices.capacity (the "
        "dual value, an upper bound on the MMKP optimum).  Releases the GIL.";
    mod.def("select_f64", &select<double>, py::arg("offsets"), py::arg("utility"),
            py::arg("demand"), py::arg("prices"), py::arg("capacity"), py::arg("nthreads") = 1,
            doc);
    mod.def("select_f32", &select<float>, py::arg("offsets"), py::arg("utility"),
            py::arg("demand"), py::arg("prices"), py::arg("capacity"), py::arg("nthreads") = 1,
            doc);
    mod.def("greedy_fill", &greedy_fill, py::arg("offsets"), py::arg("utility"),
            py::arg("demand"), py::arg("capacity"), py::arg("tol"), py::arg("scale"),
            py::arg("weights"), py::arg("items"), py::arg("totals"), py::arg("rounds"),
            "greedy_fill(offsets[N+1], utility[M], demand[M,R], capacity[R], tol[R], scale[R], "
            "weights[R], items[N] (global item indices), totals[R], rounds) -> (items[N], "
            "totals[R], rounds_moved): greedy upgrades of a feasible choice (native/primal.hpp).  float64; "
            "releases the GIL.");
    mod.def("lagrangian_values", &lagrangian_values, py::arg("utility"), py::arg("demand"),
            py::arg("prices"),
            "lagrangian_values(utility[M], demand[M,R], prices[R]) -> float64[M]: u - d . prices "
            "(numpy's d @ prices on a tall [M, R] array is several times slower).  Releases "
            "the GIL.");
    mod.def("column_max", &column_max, py::arg("demand"),
            "column_max(demand[M,R] float64, M >= 1) -> float64[R]: the largest demand of each "
            "resource (numpy's d.max(axis=0) walks a C-contiguous [M, R] array column by column "
            "and is ~10x slower).  Releases the GIL.");
    mod.def("argmin_per_job", &argmin_per_job, py::arg("offsets"), py::arg("key"),
            "argmin_per_job(offsets[N+1], key[M]) -> int64[N]: global index of each job's lowest "
            "key (ties: lowest index).");
    mod.def("repair", &repair, py::arg("offsets"), py::arg("utility"), py::arg("demand"),
            py::arg("capacity"), py::arg("tol"), py::arg("scale"), py::arg("values"),
            py::arg("items"), py::arg("totals"), py::arg("max_rounds"),
            "repair(offsets[N+1], utility[M], demand[M,R], capacity[R], tol[R], scale[R], "
            "values[M], items[N], totals[R], max_rounds) -> items[N] or None: moves jobs until the choice "
            "is feasible (native/primal.hpp).  float64; releases the GIL.");
    py::class_<FragSummaries>(mod, "FragSummaries",
        "FGD fragmentation summaries of B nodes (native/frag.hpp; Weng et al., ATC'23, "
        "pkg/utils/frag.go), kept in the caller's numpy arrays (written in place).  Units: "
        "milli-GPU, milli-CPU.  Called only by elastico.placer.fragmentation.NodeSummaries.")
        .def(py::init<I64, I64, I64, I64, F64, U8, py::array, py::array, py::array, py::array,
                      py::array, py::array, py::array>(),
             py::arg("thresholds"), py::arg("pod_k"), py::arg("pod_gpus"), py::arg("pod_cpu"),
             py::arg("pod_freq"), py::arg("access"), py::arg("rows"), py::arg("cpu"),
             py::arg("model"), py::arg("cnt"), py::arg("S"), py::arg("L"), py::arg("F"))
        .def("update", &FragSummaries::update, py::arg("node"), py::arg("row"), py::arg("cpu"),
             "update(node, row[G] milli-GPU, cpu milli-CPU): the node's new free resources.")
        .def("update_from_gpus", &FragSummaries::update_from_gpus, py::arg("node"), py::arg("lo"),
             py::arg("hi"), py::arg("healthy"), py::arg("is_mig"), py::arg("mig_cs"),
             py::arg("mig_comp"), py::arg("used_share"), py::arg("cpu_free_cores"),
             "update_from_gpus(node, lo, hi, healthy[], is_mig[], mig_cs[], mig_comp[], "
             "used_share[], cpu_free_cores): update() with the row worked out from the flat GPUs "
             "[lo, hi) (frag.hpp gpu_free_milli) and cpu = round(cpu_free_cores * 1000).")
        .def("node_increase", &FragSummaries::node_increase, py::arg("node"), py::arg("m"),
             py::arg("cpu_m"),
             "node_increase(node, m milli-GPU, cpu_m milli-CPU) -> float64[G]: fragmentation "
             "increase (milli-GPU) of the pod taking each GPU; inf where left < m - 1.")
        .def("refresh", &FragSummaries::refresh, py::arg("nodes"), py::arg("seen"),
             py::arg("version"), py::arg("offsets"), py::arg("m"), py::arg("cpu_m"),
             py::arg("d_all"), py::arg("new_all"), py::arg("max_stale"),
             "refresh(nodes[n], seen[B], version[B], offsets[B+1], m, cpu_m, d_all[>=G], "
             "new_all[>=G], max_stale) -> stale count: rewrites the per-GPU increases (GPUs, "
             "rounded to 1e-9) and free milli-GPU after of the stale nodes, unless more than "
             "max_stale are stale (then changes nothing).  frag.hpp frag_refresh.")
        .def("plan", &FragSummaries::plan, py::arg("idx"), py::arg("gpu_node"), py::arg("seen"),
             py::arg("version"), py::arg("offsets"), py::arg("m"), py::arg("cpu_m"),
             py::arg("d_all"), py::arg("new_all"), py::arg("max_stale"), py::arg("consolidation"),
             "plan(idx[n] increasing flat GPUs, gpu_node[G], seen, version, offsets, m, cpu_m, "
             "d_all, new_all, max_stale, consolidation) -> None if refresh() of the GPUs' nodes "
             "finds more than max_stale stale, else (uniq, counts, first, order, d_gpu, new_gpu, "
             "opt_key, visit): the elastico scorer's candidate order (frag.hpp "
             "elastico_candidates).");
}
