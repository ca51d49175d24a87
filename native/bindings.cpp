// The one binding file: converts numpy arrays, releases the GIL around the hot loop.
// Input validation lives in Python (elastico/pricing/kernel.py), the only caller.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <vector>
#include <string>

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
}
