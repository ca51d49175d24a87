"""The native core: its own C++ tests (built with CMake, run by ctest) and the Python binding
against an independent numpy reference (float64, float32, threads)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from elastico.pricing import kernel

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH: cannot build the C++ tests")
def test_cpp_unit_tests_build_and_pass(tmp_path):
    cmakedir = subprocess.run([sys.executable, "-m", "pybind11", "--cmakedir"], check=True,
                              capture_output=True, text=True).stdout.strip()
    build = tmp_path / "build"

    def sh(*cmd):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    sh("cmake", "-S", str(ROOT), "-B", str(build), "-DELASTICO_BUILD_CPP_TESTS=ON",
       "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={cmakedir}")
    sh("cmake", "--build", str(build), "--target", "native_tests", "-j", "2")
    out = sh("ctest", "--test-dir", str(build), "--output-on-failure")
    assert "100% tests passed" in out


numpy_select = kernel.reference_select


def instance(rng, n, k_max, r):
    off = np.concatenate(([0], np.cumsum(rng.integers(1, k_max + 1, size=n)))).astype(np.int64)
    m = off[-1]
    return off, rng.uniform(0, 10, m), rng.uniform(0, 5, (m, r)), rng.uniform(0, 3, r), rng.uniform(0, 1000, r)


def test_float64_matches_numpy_reference():
    rng = np.random.default_rng(0)
    for n, k, r in [(1, 1, 1), (7, 3, 2), (500, 16, 10), (10_000, 5, 4)]:
        off, u, d, p, cap = instance(rng, n, k, r)
        c, t, lag = kernel.select(off, u, d, p, cap)
        c0, t0, lag0 = numpy_select(off, u, d, p, cap)
        np.testing.assert_array_equal(c, c0)
        np.testing.assert_allclose(t, t0, rtol=1e-12)
        assert lag == pytest.approx(lag0, rel=1e-12)


def test_ties_take_the_lowest_index():
    off = np.array([0, 3])
    u = np.array([1.0, 2.0, 2.0])
    d = np.array([[0.0], [1.0], [1.0]])
    for dtype in ("float64", "float32"):
        c, t, lag = kernel.select(off, u, d, np.array([1.0]), np.array([0.0]), dtype=dtype)
        assert c.tolist() == [0] and lag == 1.0  # values 1, 1, 1 -> index 0


def test_float32_agrees_with_float64_reference_up_to_rounding():
    rng = np.random.default_rng(1)
    off, u, d, p, cap = instance(rng, 5000, 16, 10)
    c32, t32, lag32 = kernel.select(off, u, d, p, cap, dtype="float32")
    c0, _, lag0 = numpy_select(off, u, d, p, cap)
    # Choices may differ only where the two best values are within float32 rounding.
    val = u - d @ p
    diff = np.flatnonzero(c32 != c0)
    assert diff.size <= 5
    for j in diff:
        assert abs(val[off[j] + c32[j]] - val[off[j] + c0[j]]) < 1e-4
    assert lag32 == pytest.approx(lag0, rel=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_threads_equal_one(dtype):
    rng = np.random.default_rng(2)
    off, u, d, p, cap = instance(rng, 70_000, 8, 6)  # above the 32768-jobs-per-thread threshold
    c1, t1, l1 = kernel.select(off, u, d, p, cap, dtype=dtype, nthreads=1)
    c2, t2, l2 = kernel.select(off, u, d, p, cap, dtype=dtype, nthreads=2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(t1, t2, rtol=1e-6 if dtype == "float32" else 1e-12)
    assert l1 == pytest.approx(l2, rel=1e-12)
