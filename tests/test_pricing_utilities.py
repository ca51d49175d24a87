"""Utilities: hand-worked values of jct, throughput and fair; registry; input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.pricing import UTILITIES
from elastico.pricing.utilities import FAIR_DELTA, fair, jct, throughput

# Two jobs.  Job 0 (priority 2, 100 s remaining): wait, x = 0.5, x = 1.0.
# Job 1 (priority 1, 0.5 s remaining -> clamped to 1 s): wait, x = 2.0.
X = np.array([0.0, 0.5, 1.0, 0.0, 2.0])
OFF = np.array([0, 3, 5])
REM = np.array([100.0, 0.5])
PRI = np.array([2.0, 1.0])


def test_jct_by_hand():
    # 2 * 0.5 / 100 = 0.01; 2 * 1 / 100 = 0.02; 1 * 2 / max(0.5, 1) = 2.
    np.testing.assert_allclose(jct(X, OFF, REM, PRI), [0.0, 0.01, 0.02, 0.0, 2.0], rtol=1e-15)


def test_throughput_by_hand():
    np.testing.assert_allclose(throughput(X, OFF, REM, PRI), [0.0, 1.0, 2.0, 0.0, 2.0], rtol=1e-15)


def test_fair_by_hand():
    # 2 * (ln 0.51 - ln 0.01) = 2 ln 51 = 7.86365...; 2 ln 101 = 9.23024...; ln 201 = 5.30330...
    want = [0.0, 2 * math.log(51), 2 * math.log(101), 0.0, math.log(201)]
    assert FAIR_DELTA == 0.01
    np.testing.assert_allclose(fair(X, OFF, REM, PRI), want, rtol=1e-12, atol=1e-15)
    assert fair(X, OFF, REM, PRI)[1] == pytest.approx(7.86365, abs=1e-5)


def test_registry_has_the_three_utilities_with_one_signature():
    assert set(UTILITIES) == {"jct", "throughput", "fair"}
    for fn in UTILITIES.values():
        out = fn(X, OFF, REM, PRI)
        assert out.shape == X.shape and out[0] == 0.0 and out[3] == 0.0  # wait is worth 0


@pytest.mark.parametrize("args,message", [
    ((np.array([0.0, -0.5, 1.0, 0.0, 2.0]), OFF, REM, PRI), r"^throughput\[1\]: -0.5 "),
    ((X, OFF, np.array([100.0, np.nan]), PRI), r"^remaining_s\[1\]: nan "),
    ((X, OFF, REM, np.array([2.0, 0.0])), r"^priority\[1\]: 0.0 is not allowed \(must be finite and > 0\)"),
    ((X, np.array([0, 3, 4]), REM, PRI), r"^offsets\[2\]: 4 "),
    ((X, OFF, REM[:1], PRI), r"^remaining_s.shape: \(1,\) "),
])
def test_bad_input(args, message):
    for fn in UTILITIES.values():
        with pytest.raises(InvalidArgument, match=message):
            fn(*args)
