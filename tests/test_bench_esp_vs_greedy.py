"""bench/esp_vs_greedy.py refuses bad input with an argparse error (exit 2, the flag or field
named), not a traceback, before any replay."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_esp_vs_greedy", Path(__file__).resolve().parents[1] / "bench" / "esp_vs_greedy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args, needle", [
    (["--batch-only", "-1"], "--batch-only: -1.0 must be a finite number > 0"),
    (["--batch-only", "inf"], "--batch-only: inf must be a finite number > 0"),
    (["--batch-only", "nan"], "--batch-only: nan must be a finite number > 0"),
    (["--cluster", "nosuch"], "cluster: 'nosuch' is not allowed"),
    (["--gpus", "0"], "gpus: 0 is not allowed"),
    (["--cluster", "a100-mig", "--gpus", "7"], "gpus: 7 is not allowed (cluster 'a100' (a100-mig.yaml)"),
])
def test_bad_input_is_an_argparse_error(args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        _bench().main(args)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


def test_a_workload_with_no_priced_round_reports_zero_counts_and_null_statistics(capsys):
    # one GPU, seed 23: two services and no batch job, so no round is ever priced
    import json

    assert _bench().main(["--gpus", "1", "--seed", "23", "--exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rounds_priced"] == out["exact_replay_rounds"] == 0
    assert out["esp_better_rounds"] == out["greedy_better_rounds"] == 0
    assert out["mean_objective_gain"] is None and out["p95_certified_gap"] is None
    assert out["esp_mean_loss_vs_exact"] is None
