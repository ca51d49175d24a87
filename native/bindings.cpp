// The one binding file: converts numpy arrays, releases the GIL around the hot loop.
// Input validation lives in Python (elastico/pricing/kernel.py), the only caller.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "select.hpp"

namespace py = pybind11;

namespace {

template <typename T>
py::tuple select(py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
                 py::array_t<T, py::array::c_style> utility,
                 py::array_t<T, py::array::c_style> demand,
                 py::array_t<T, py::array::c_style> prices,
                 py::array_t<T, py::array::c_style> capacity, int nthreads) {
    if (offsets.ndim() != 1 || offsets.shape(0) < 1)
        throw std::invalid_argument("offsets: must be 1-D with N+1 >= 1 entries");
    if (demand.ndim() != 2) throw std::invalid_argument("demand: must be 2-D [M, R]");
    const int64_t n = offsets.shape(0) - 1;
    const int64_t m = demand.shape(0), r = demand.shape(1);
    if (utility.ndim() != 1 || utility.shape(0) != m)
        throw std::invalid_argument("utility: must be 1-D of length M=" + std::to_string(m));
    if (prices.ndim() != 1 || prices.shape(0) != r)
        throw std::invalid_argument("prices: must be 1-D of length R=" + std::to_string(r));
    if (capacity.ndim() != 1 || capacity.shape(0) != r)
        throw std::invalid_argument("capacity: must be 1-D of length R=" + std::to_string(r));
    const int64_t* off = offsets.data();
    if (off[0] != 0 || off[n] != m)
        throw std::invalid_argument("offsets: must start at 0 and end at M");
    for (int64_t j = 0; j < n; ++j)
        if (off[j + 1] <= off[j])
            throw std::invalid_argument("offsets: job " + std::to_string(j) + " has an empty family");

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

}  // namespace

PYBIND11_MODULE(_native, mod) {
    mod.doc() = "ElastiCo native core: per-job configuration selection under shadow prices.";
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
}
