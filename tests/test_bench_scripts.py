"""The bench scripts (bench/esp_vs_greedy.py, mig_pools.py, fgd.py, placement_round.py,
jct_ceiling.py) refuse bad input with an argparse error (exit 2, the flag or field named), not
a traceback or an empty run, before any work; esp_vs_greedy's statistics stay defined when no round is priced."""

from __future__ import annotations

import pytest
from bench_loader import load_bench


def _bench():
    return load_bench("esp_vs_greedy")


@pytest.mark.parametrize("script, args, needle", [
    ("esp_vs_greedy", ["--batch-only", "-1"], "--batch-only: -1.0 must be a finite number > 0"),
    ("esp_vs_greedy", ["--batch-only", "inf"], "--batch-only: inf must be a finite number > 0"),
    ("esp_vs_greedy", ["--batch-only", "nan"], "--batch-only: nan must be a finite number > 0"),
    ("esp_vs_greedy", ["--cluster", "nosuch"], "cluster: 'nosuch' is not allowed"),
    ("esp_vs_greedy", ["--gpus", "0"], "gpus: 0 is not allowed"),
    ("esp_vs_greedy", ["--cluster", "a100-mig", "--gpus", "7"],
     "gpus: 7 is not allowed (cluster 'a100' (a100-mig.yaml)"),
    ("mig_pools", ["--seeds", "0,x"], "--seeds: '0,x' must be comma-separated integers"),
    ("mig_pools", ["--seeds", "-1"], "--seeds: '-1' must be integers >= 0"),
    ("mig_pools", ["--cluster", "nosuch"], "cluster: 'nosuch' is not allowed"),
    ("mig_pools", ["--gpus", "7", "--cluster", "a100-mig"], "gpus: 7 is not allowed"),
    # an empty list ran nothing and reported "elastico beats fgd at 0/17"
    ("fgd", ["--seeds", ""], "--seeds: at least one value"),
    ("fgd", ["--seeds", "-1"], "--seeds: '-1': every value >= 0"),
    ("fgd", ["--seeds", "42,42"], "--seeds: '42,42': a value given twice"),
    ("fgd", ["--workloads", ","], "--workloads: at least one value"),
    # these ended in tracebacks (KeyError: 'bestfit' for --repeat 0)
    ("placement_round", ["--jobs", "0"], "--jobs: '0': an integer >= 1"),
    ("placement_round", ["--repeat", "0"], "--repeat: '0': an integer >= 1"),
    ("placement_round", ["--gpus", "7000"], "--gpus: 7000 is more than the trace's 6212 GPUs"),
    ("llm_model", ["--jobs", "0"], "--jobs: 0: an integer >= 1"),
    # these ended in tracebacks, --workload foo ran openb, --json failed after the replays
    ("jct_ceiling", ["--seeds", "x"], "--seeds: 'x': comma-separated integers >= 0"),
    ("jct_ceiling", ["--seeds", "-1"], "--seeds: '-1': comma-separated integers >= 0"),
    ("jct_ceiling", ["--workload", "foo"], "--workload: invalid choice: 'foo'"),
    ("jct_ceiling", ["--json", "/nonexistent/x.json"], "--json /nonexistent/x.json: cannot be"),
    ("jct_ceiling", ["--cluster", "nosuch", "--seeds", "0"], "cluster: 'nosuch' is not allowed"),
    ("jct_ceiling", ["--gpus", "0", "--seeds", "0"], "gpus: 0 is not allowed"),
])
def test_bad_input_is_an_argparse_error(script, args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        load_bench(script).main(args)
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
