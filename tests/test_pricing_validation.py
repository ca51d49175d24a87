"""Bad input to the solver and the kernel raises InvalidArgument naming field and value,
before any work."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.pricing import kernel, solve
from elastico.pricing.validation import check_offsets

U = np.array([0.0, 3.0, 5.0, 0.0, 4.0])
D = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
OFF = np.array([0, 3, 5])
CAP = np.array([2.0, 1.0])


def call(**kw):
    args = dict(utility=U, demand=D, offsets=OFF, capacity=CAP)
    args.update(kw)
    return solve(args.pop("utility"), args.pop("demand"), args.pop("offsets"), args.pop("capacity"), **args)


@pytest.mark.parametrize("kw,message", [
    (dict(utility=np.array([0.0, np.nan, 5.0, 0.0, 4.0])), r"^utility\[1\]: nan is not allowed \(must be finite\)"),
    (dict(utility=np.array([0.0, 1.0, np.inf, 0.0, 4.0])), r"^utility\[2\]: inf "),
    (dict(utility=U[:4]), r"^demand.shape: \(5, 2\) is not allowed \(must be 2-D \[M, R\] with M=4 "
                          r"\(M = len\(utility\): one utility per configuration row\)\)"),
    (dict(demand=D[:, 0]), r"^demand.shape: \(5,\) "),
    (dict(demand=np.where(D == 2.0, -1.0, D)), r"^demand\[2, 0\]: -1.0 is not allowed \(must be finite and >= 0\)"),
    (dict(capacity=np.array([2.0, -1.0])), r"^capacity\[1\]: -1.0 is not allowed \(must be finite and >= 0\)"),
    (dict(capacity=np.array([2.0])), r"^capacity.shape: \(1,\) is not allowed \(must be 1-D of length R=2\)"),
    (dict(offsets=np.array([0, 3, 4])), r"^offsets\[2\]: 4 is not allowed \(must equal M=5"),
    (dict(offsets=np.array([1, 3, 5])), r"^offsets\[0\]: 1 is not allowed \(must be 0\)"),
    (dict(offsets=np.array([0, 3, 3, 5])), r"^offsets\[2\]: 3 is not allowed \(.*job 1 would have an empty family\)"),
    # the value that is not whole is named (whole floats, from JSON, are accepted)
    (dict(offsets=np.array([0.0, 2.5, 5.0])), r"^offsets\[1\]: 2.5 is not allowed \(integers"),
    (dict(offsets=np.array([0.0, np.nan, 5.0])), r"^offsets\[1\]: nan "),
    (dict(offsets=np.array(["0", "3", "5"])), r"^offsets.dtype: '<U1' "),
    (dict(offsets=np.array([[0, 3, 5]])), r"^offsets.shape: \(1, 3\) "),
    (dict(initial_prices=np.array([1.0, -0.5])), r"^initial_prices\[1\]: -0.5 "),
    (dict(initial_prices=np.array([1.0])), r"^initial_prices.shape: \(1,\) "),
    (dict(max_iterations=0), r"^max_iterations: 0 "),
    (dict(max_iterations=1_000_001), r"^max_iterations: 1000001 is not allowed \(must be an integer in 1\.\.1000000\)"),
    (dict(max_iterations=np.int64(99999999999999)), r"^max_iterations: 99999999999999 "),
    (dict(gap_tolerance=-1.0), r"^gap_tolerance: -1.0 "),
    (dict(dtype="float16"), r"^dtype: 'float16' is not allowed \(must be one of float64, float32\)"),
    (dict(nthreads=0), r"^nthreads: 0 "),
])
def test_solver_rejects_bad_input(kw, message):
    with pytest.raises(InvalidArgument, match=message):
        call(**kw)


def test_integral_float_offsets_are_accepted():
    # (a1, b1) uses [2, 1] = capacity: OPT = 3 + 4 = 7.
    assert call(offsets=np.array([0.0, 3.0, 5.0])).primal_value == 7.0


def test_kernel_select_validates_and_matches_hand_numbers():
    # prices [1, 1]: job 0 values 0, 2, 2 -> tie -> lowest index 1; job 1 values 0, 2 -> 1.
    # Lagrangian = 2 + 2 + prices . capacity (3) = 7; totals = d[1] + d[4] = [2, 1].
    choice, totals, lagr = kernel.select(OFF, U, D, np.array([1.0, 1.0]), CAP)
    assert choice.tolist() == [1, 1] and totals.tolist() == [2.0, 1.0] and lagr == 7.0
    with pytest.raises(InvalidArgument, match=r"^prices\[0\]: -1.0 "):
        kernel.select(OFF, U, D, np.array([-1.0, 1.0]), CAP)
    with pytest.raises(InvalidArgument, match=r"^dtype: 'int8' "):
        kernel.select(OFF, U, D, np.array([1.0, 1.0]), CAP, dtype="int8")


def test_integral_float_offsets_beyond_int64_are_refused_by_value():
    # 1e300 is integral as a float; casting it to int64 would wrap and blame another entry
    with pytest.raises(InvalidArgument) as e:
        check_offsets(np.array([0.0, 1e300]))
    assert e.value.field == "offsets[1]" and "1e+300" in str(e.value)
