"""The bench scripts (bench/esp_vs_greedy.py, mig_pools.py, fgd.py, placement_round.py,
jct_ceiling.py, jct_common_set.py, sustainable_load.py, mig_lending.py) refuse bad input with an argparse error (exit 2, the flag
or field named), not a traceback or an empty run, before any work; esp_vs_greedy's statistics
stay defined when no round is priced; jct_ceiling's capacity-aware bound solves hand-worked
LPs."""

from __future__ import annotations

import pytest
from bench_loader import load_bench


def _bench():
    return load_bench("esp_vs_greedy")


@pytest.mark.parametrize("script, args, needle", [
    ("esp_vs_greedy", ["--batch-only", "-1"], "--batch-only: -1.0 must be a finite number > 0"),
    ("esp_vs_greedy", ["--batch-only", "inf"], "--batch-only: inf must be a finite number > 0"),
    ("esp_vs_greedy", ["--batch-only", "nan"], "--batch-only: nan must be a finite number > 0"),
    ("esp_vs_greedy", ["--cluster", "nosuch"], "--cluster: 'nosuch' is not allowed"),
    ("esp_vs_greedy", ["--gpus", "0"], "--gpus: 0 is not allowed"),
    ("esp_vs_greedy", ["--cluster", "a100-mig", "--gpus", "7"],
     "--gpus: 7 is not allowed (cluster 'a100' (a100-mig.yaml)"),
    ("mig_pools", ["--seeds", "0,x"], "--seeds: '0,x' must be comma-separated integers"),
    ("mig_pools", ["--seeds", "-1"], "--seeds: '-1' must be integers >= 0"),
    ("mig_pools", ["--seeds", "0,0"], "--seeds: '0,0' names a seed twice"),
    ("mig_pools", ["--cluster", "nosuch"], "--cluster: 'nosuch' is not allowed"),
    ("mig_pools", ["--gpus", "7", "--cluster", "a100-mig"], "--gpus: 7 is not allowed"),
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
    ("jct_ceiling", ["--cluster", "nosuch", "--seeds", "0"], "--cluster: 'nosuch' is not allowed"),
    ("jct_ceiling", ["--gpus", "0", "--seeds", "0"], "--gpus: 0 is not allowed"),
    ("jct_common_set", ["--seeds", "x"], "--seeds: 'x': comma-separated integers >= 0"),
    ("jct_common_set", ["--policies", "exclusive"], "--policies: 'exclusive': two different"),
    ("jct_common_set", ["--policies", "exclusive,nope"], "--policies: 'exclusive,nope': two"),
    ("jct_common_set", ["--policies", "elastico,elastico"], "two different policies"),
    ("jct_common_set", ["--json", "/nonexistent/x.json"], "--json /nonexistent/x.json: cannot"),
    ("jct_common_set", ["--seeds", "1,1"], "--seeds: '1,1': each seed once"),
    ("jct_common_set", ["--cluster", "nosuch", "--seeds", "0"], "--cluster: 'nosuch' is not"),
    ("sustainable_load", ["--policy", "nope"], "--policy 'nope': one of elastico,"),
    ("sustainable_load", [], "the following arguments are required: --policy"),
    ("sustainable_load", ["--policy", "exclusive", "--loads", "2,1"],
     "--loads: '2,1': comma-separated numbers > 0, ascending"),
    ("sustainable_load", ["--policy", "exclusive", "--loads", "0,1"],
     "--loads: '0,1': comma-separated numbers > 0"),
    ("sustainable_load", ["--policy", "exclusive", "--loads", "x"],
     "--loads: 'x': comma-separated numbers > 0"),
    ("sustainable_load", ["--policy", "exclusive", "--seed", "-1"], "--seed -1: an integer >= 0"),
    ("sustainable_load", ["--policy", "exclusive", "--json", "/nonexistent/x.jsonl"],
     "--json /nonexistent/x.jsonl: cannot be"),
    ("sustainable_load", ["--policy", "exclusive", "--gpus", "0", "--loads", "1"],
     "--gpus: 0 is not allowed"),
    ("jct_common_set", ["--gpus", "0", "--seeds", "0"], "--gpus: 0 is not allowed"),
    ("sim_cpu", ["--gpus", "0"], "--gpus: 0 is not allowed"),
    ("sim_cpu", ["--cluster", "nosuch"], "--cluster: 'nosuch' is not allowed"),
    ("sim_cpu", ["--cluster", "a100-mig", "--gpus", "12"], "(a multiple of 16: 16, 32, 48"),
    ("sim_cpu", ["--policy", "nosuch"], "argument --policy: invalid choice: 'nosuch'"),
    ("sim_cpu", ["--load", "-1"], "argument --load: '-1': a finite number > 0"),
    ("sim_cpu", ["--profile", "/nonexistent/x.prof"], "--profile /nonexistent/x.prof: cannot be"),
    ("decision_identity", ["check", "/nonexistent.json"],
     "reference /nonexistent.json: cannot be read"),
    ("decision_identity", ["record", "/nonexistent/x.json"],
     "reference /nonexistent/x.json: cannot be written"),
    ("decision_identity", ["check", "x.json", "--only", "nope"], "--only: unknown case 'nope'"),
    ("sustainable_load", ["--policy", "exclusive", "--cluster", "nosuch", "--loads", "1"],
     "--cluster: 'nosuch' is not allowed"),
    ("mig_pools", ["--cluster", "trace", "--gpus", "8", "--seeds", "0"],
     "--cluster trace: has no MIG-mode GPUs"),
    ("mig_lending", ["--cluster", "trace", "--gpus", "8"], "--cluster trace: has no MIG-mode GPUs"),
    ("mig_lending", ["--gpus", "63"], "--gpus: 63 is not allowed"),
    ("mig_lending", ["--seeds", "0,0"], "--seeds: '0,0': comma-separated integers >= 0, each once"),
    ("mig_lending", ["--policy", "nope"], "--policy 'nope': one of elastico,"),
    ("mig_lending", ["--json", "/nonexistent/x.jsonl"], "--json /nonexistent/x.jsonl: cannot be"),
])
def test_bad_input_is_an_argparse_error(script, args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        load_bench(script).main(args)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


def test_the_json_check_leaves_no_empty_file_behind(tmp_path, capsys):
    # a run refused after the --json check (here: --gpus 0) must not leave an empty file
    out = tmp_path / "new.json"
    with pytest.raises(SystemExit):
        load_bench("jct_common_set").main(["--gpus", "0", "--seeds", "0", "--json", str(out)])
    assert not out.exists()
    kept = tmp_path / "old.json"
    kept.write_text("{}")
    with pytest.raises(SystemExit):
        load_bench("jct_ceiling").main(["--gpus", "0", "--seeds", "0", "--json", str(kept)])
    assert kept.read_text() == "{}"


def test_a_workload_with_no_priced_round_reports_zero_counts_and_null_statistics(capsys):
    # one GPU, seed 23: two services and no batch job, so no round is ever priced
    import json

    assert _bench().main(["--gpus", "1", "--seed", "23", "--exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rounds_priced"] == out["exact_replay_rounds"] == 0
    assert out["esp_better_rounds"] == out["greedy_better_rounds"] == 0
    assert out["mean_objective_gain"] is None and out["p95_certified_gap"] is None
    assert out["esp_mean_loss_vs_exact"] is None


def test_fluid_bound_matches_a_hand_solved_lp():
    # one GPU for 100 s.  Job A: 10 s on 1 GPU (10 GPU-s) or 20 s on 0.25 (5 GPU-s); job B:
    # 50 s on 2 GPUs (100 GPU-s) or 100 s on 0.5 (50 GPU-s).  Both fastest ask 110 GPU-s of
    # 100 (load 1.1).  Freeing a GPU-second costs A 2 s of JCT and B 1 s, so A stays fast and
    # B takes x of its fast shape: 10 + 100x + 50(1 - x) <= 100 -> x = 0.8, JCTs
    # 10 + (50 x 0.8 + 100 x 0.2) = 70, average 35, the GPU exactly full.
    fb = load_bench("jct_ceiling").fluid_bound
    out = fb([[(10.0, "G", 1.0), (20.0, "G", 0.25)], [(50.0, "G", 2.0), (100.0, "G", 0.5)]],
             {"G": 1.0}, 100.0)
    assert out["avg_jct_s"] == pytest.approx(35.0)
    assert out["load_by_model"]["G"] == pytest.approx(1.0)
    assert out["ideal_load_by_model"]["G"] == pytest.approx(1.1)


def test_fluid_bound_is_the_ideal_where_capacity_does_not_bind_and_splits_by_model():
    # two models; each job's fastest shape fits its model's capacity: the bound is the
    # capacity-free ideal (10 + 30) / 2 = 20, each model loaded by its own job only
    fb = load_bench("jct_ceiling").fluid_bound
    out = fb([[(10.0, "A", 1.0), (40.0, "B", 1.0)], [(30.0, "B", 2.0), (90.0, "A", 0.5)]],
             {"A": 1.0, "B": 1.0}, 100.0)
    assert out["avg_jct_s"] == pytest.approx(20.0)
    assert out["load_by_model"] == pytest.approx({"A": 0.1, "B": 0.6})
    with pytest.raises(ValueError, match="at least one configuration"):
        fb([[]], {"A": 1.0}, 100.0)
