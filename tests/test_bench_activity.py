"""bench/activity_model.py keeps bench/training_model.py's result shape (check, dataset, points,
ks: the contract its registry folds in), reproduces the KS of the model population with a fixed
seed, and refuses bad flags with an argparse error before any work."""

from __future__ import annotations

import json

import pytest
from bench_loader import load_bench


def test_the_rows_have_the_registry_shape_and_are_reproducible(capsys):
    bench = load_bench("activity_model")
    rows = bench.sm_active_ks(jobs=2000, seed=0, simulate=False)
    assert [r["dataset"] for r in rows] == ["acmetrace-seren", "acmetrace-kalos-held-out",
                                           "acmetrace-seren-vs-kalos"]
    for r in rows:
        assert set(r) == {"check", "dataset", "points", "ks"} and r["check"] == "sm_active_ks"
        assert 0 <= r["ks"] <= 1 and r["points"] > 0
    assert rows == bench.sm_active_ks(jobs=2000, seed=0, simulate=False)
    assert bench.main(["--json", "--no-simulate", "--jobs", "2000"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out == rows


@pytest.mark.parametrize("args, needle", [
    (["--sim-seeds", "0,x"], "--sim-seeds: '0,x' must be comma-separated integers"),
    (["--sim-seeds", ","], "--sim-seeds not empty"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--seed", "-1"], "--seed and every --sim-seeds value >= 0"),
])
def test_bad_flags_are_argparse_errors(args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        load_bench("activity_model").main(args)
    assert e.value.code == 2 and needle in capsys.readouterr().err
