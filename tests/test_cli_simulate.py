"""``elastico simulate`` as a user runs it: the table, the JSON keys, and every bad input
exiting with status 2 and a message naming the flag and the value."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from elastico.cli import main
from elastico.sim.simulator import METRIC_KEYS

SMALL = ["simulate", "--gpus", "64", "--jobs", "60", "--load", "0.5", "--no-progress"]


def test_help_states_each_default_once(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out
    assert out.count("default: 512") == 1


def test_help_says_continuous_arrivals_size_the_workload_without_jobs_or_its_cap(capsys):
    # a fresh user got 704 jobs at --load 5 on 8 GPUs with --arrivals continuous, past the
    # 32 x --gpus = 256 cap that --help gave for --jobs
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse's line wrapping undone
    jobs = out.split("--jobs JOBS ", 1)[1].split("--mode {", 1)[0]
    assert "Trace arrivals only: --arrivals continuous and --workload llm-mix size the " \
           "workload from --load and the measurement window, so neither --jobs nor its cap " \
           "applies there" in jobs, jobs
    arrivals = out.split("--arrivals {trace,continuous} ", 1)[1].split("--utility {", 1)[0]
    assert "the number of jobs follows from --load and the window, --jobs and its 32 x --gpus " \
           "cap do not apply" in arrivals, arrivals


@pytest.mark.parametrize("sized", [["--arrivals", "continuous"], ["--workload", "llm-mix"]])
def test_jobs_with_a_load_sized_workload_is_refused_before_any_work(capsys, sized):
    # refused (not silently ignored), and not with the cap's message, which does not apply
    for jobs in ("10", "1000"):
        code = main(["simulate", "--gpus", "8", *sized, "--jobs", jobs, "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and f"--jobs: {jobs} is not allowed (not with {' '.join(sized)}: the " \
            "workload is sized from --load and the measurement window, so --jobs and its " \
            "32 x --gpus cap do not apply; leave --jobs out)" in err, err
        assert "cluster:" not in err


def test_console_script_is_installed_and_explains_itself():
    exe = Path(sys.executable).with_name("elastico")
    out = subprocess.run([str(exe), "simulate", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--gpus", "--policy", "--seed", "--load", "--jobs", "--json"):
        assert flag in out


def test_single_policy_json_is_flat(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(SMALL + ["--policy", "elastico", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(METRIC_KEYS) <= set(doc)
    assert doc["policy"] == "elastico" and doc["gpus"] == 64
    table = capsys.readouterr().out
    assert "avg JCT (s)" in table and "elastico" in table


def test_both_policies_json_has_runs_and_table_has_ratio(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(SMALL + ["--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["runs"]] == ["exclusive", "elastico"]
    for r in doc["runs"]:
        assert set(METRIC_KEYS) <= set(r)
        assert 0 <= r["gpu_allocation"] <= 1 and 0 <= r["gpu_utilization"] <= 1
        # one ceiling for the workload, above what either policy reached
        assert r["gpu_utilization"] <= r["gpu_utilization_ceiling"] == doc["runs"][0][
            "gpu_utilization_ceiling"] <= 1
    table = capsys.readouterr().out
    assert "ratio" in table
    assert f"ceiling of this workload: {doc['runs'][0]['gpu_utilization_ceiling']:.1%}" in table


def test_no_batch_job_finished_in_the_window_prints_no_value_not_zero(tmp_path, capsys):
    # a fresh user's run (seed 0): load 5 on 8 GPUs with continuous arrivals, stopped at the
    # horizon (--overrun-windows 0); exclusive finishes 45 batch jobs, none of them one that
    # arrived in the measurement window, so the JCT rows are over no job: "-" (and null in
    # --json), not an average JCT of 0 s
    out = tmp_path / "m.json"
    assert main(["simulate", "--arrivals", "continuous", "--load", "5", "--gpus", "8",
                 "--overrun-windows", "0",
                 "--policy", "exclusive", "--no-progress", "--json", str(out)]) == 0
    cells = [re.split(r"\s{2,}", line.strip()) for line in capsys.readouterr().out.splitlines()]
    rows = {c[0]: c[1:] for c in cells}
    for label in ("avg JCT (s)", "p50 JCT (s)", "p99 JCT (s)", "avg queueing (s)",
                  "avg slowdown", "p50 slowdown", "avg JCT short (s)", "avg JCT long (s)"):
        assert rows[label] == ["-"], (label, rows[label])
    assert rows["batch jobs completed"] == ["45"] and rows["makespan (s)"] != ["-"]
    doc = json.loads(out.read_text())
    assert doc["jobs_in_jct"] == 0 and doc["jobs_completed"] == 45
    for k in ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown",
              "p50_slowdown", "avg_jct_short_s", "avg_jct_long_s"):
        assert doc[k] is None, k
    assert doc["makespan_s"] > 0


def test_service_queueing_over_no_service_is_no_value():
    # llm-mix has no services: the simulator's service_avg_queue_s is 0 over none of them
    from elastico.cli.simulate import without_empty_statistics

    base = {"jobs_in_jct": 3, "jobs_in_jct_short": 1, "jobs_completed": 3, "avg_jct_s": 10.0,
            "service_avg_queue_s": 0.0}
    none = without_empty_statistics({**base, "services_placed": 0})
    assert math.isnan(none["service_avg_queue_s"]) and none["avg_jct_s"] == 10.0
    some = without_empty_statistics({**base, "services_placed": 2})
    assert some["service_avg_queue_s"] == 0.0  # two services placed at once: a real 0

def test_llm_mix_without_a_cluster_runs_on_the_evaluations_a100_h100_cluster(capsys):
    # the trace's own nodes have no GPU the LLM training jobs are defined on (a fresh user's
    # run: "reference GPUs ... training None", no training-llm jobs); now a100h100-mig, said
    assert main(["simulate", "--workload", "llm-mix", "--gpus", "64", "--load", "0.25",
                 "--policy", "exclusive", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "without --cluster runs on a100h100-mig" in err
    assert "H100-80GB 16" in err and "training A100-80GB" in err

def _bad(tmp_path, capsys, args, *needles):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    for n in needles:
        assert n in err, err


def test_bad_gpus(tmp_path, capsys):
    _bad(tmp_path, capsys, ["simulate", "--gpus", "0", "--no-progress"], "--gpus", "0")
    _bad(tmp_path, capsys, ["simulate", "--gpus", "100000", "--no-progress"], "100000")
    # the sub-cluster's own bound names the flag too, not an internal "gpus"
    _bad(tmp_path, capsys, ["simulate", "--gpus", "99999999", "--no-progress"], "--gpus: 99999999")


def test_bad_load(tmp_path, capsys):
    _bad(tmp_path, capsys, SMALL + ["--load", "nan"], "--load", "nan")
    _bad(tmp_path, capsys, SMALL + ["--load", "-1"], "--load", "-1")
    # above what the sampled jobs can offer: names the maximum
    _bad(tmp_path, capsys, SMALL + ["--load", "50"], "load", "50", "must be <",
         "lower --load")
    # below what the longest arrival span (1e12 s) gives: refused, with the least load, not
    # replaced by it
    _bad(tmp_path, capsys, SMALL + ["--load", "1e-300"], "--load: 1e-300", "must be >=",
         "raise --load")


def test_a_continuous_load_above_ten_is_refused_before_drawing_arrivals(tmp_path, capsys):
    # 1e9 once drew 4.6e11 arrival gaps (3.3 TiB) and died with a MemoryError traceback
    for load in ("11", "1e9"):
        _bad(tmp_path, capsys, ["simulate", "--gpus", "8", "--arrivals", "continuous", "--load",
                                load, "--no-progress"],
             f"--load: {float(load)}", "a number in (0, 10]", "lower --load")


def test_bad_overrun_windows(tmp_path, capsys):
    cont = ["simulate", "--gpus", "8", "--arrivals", "continuous", "--no-progress"]
    # 1e308 passed the finiteness test and overflowed to inf seconds (a traceback)
    for bad in ("-1", "nan", "inf", "1e308", "2e9"):
        _bad(tmp_path, capsys, cont + ["--overrun-windows", bad],
             f"--overrun-windows: {float(bad)}", "a finite number of measurement windows in 0..1e9")
    # the trace's own arrivals have no horizon to run past: refused, not ignored
    _bad(tmp_path, capsys, SMALL + ["--overrun-windows", "2"], "--overrun-windows: 2.0",
         "only with --arrivals continuous")


def test_the_load_bound_shown_is_one_the_user_can_give(tmp_path, capsys):
    # the bound is truncated, not rounded up: the value printed (below the maximum) runs
    code = main(SMALL + ["--load", "50", "--policy", "exclusive"])
    err = capsys.readouterr().err
    assert code == 2
    shown = err.split("must be < ")[1].split("...")[0]
    assert main(SMALL + ["--load", shown, "--policy", "exclusive"]) == 0, capsys.readouterr().err


def test_bad_files(tmp_path, capsys):
    _bad(tmp_path, capsys, SMALL + ["--trace", str(tmp_path / "missing.csv")], "--trace",
         "missing.csv")
    trunc = tmp_path / "trunc.csv"
    trunc.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                     "creation_time,deletion_time,scheduled_time\nopenb-pod-0000,12000,16384,1\n")
    _bad(tmp_path, capsys, SMALL + ["--trace", str(trunc)], "trunc.csv")
    nan = tmp_path / "nan.csv"
    nan.write_text("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,nan,262144,2,P100\n")
    _bad(tmp_path, capsys, SMALL + ["--nodes", str(nan)], "nan.csv", "cpu_milli")
    _bad(tmp_path, capsys, SMALL + ["--json", str(tmp_path / "no" / "dir" / "x.json")], "--json")
    # a folder, or an unwritable place, is refused before any simulation runs
    _bad(tmp_path, capsys, SMALL + ["--json", str(tmp_path)], "--json", "folder")


def test_a_trace_without_the_required_columns_names_the_flag_and_the_columns(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    for mode in ("replay", "inflation"):
        args = SMALL if mode == "replay" else ["simulate", "--mode", "inflation", "--no-progress"]
        _bad(tmp_path, capsys, args + ["--trace", str(bad)],
             "--trace bad.csv:1: 'a,b' is not allowed (missing required column(s) 'name', "
             "'cpu_milli', 'memory_mib', 'num_gpu', 'gpu_milli'; the header has 'a', 'b')")


def test_json_write_failure_exits_2(tmp_path, capsys):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    # refused before the run (no "cluster: ..." line), not after it
    code = main(SMALL + ["--policy", "exclusive", "--json", "/dev/full"])
    err = capsys.readouterr().err
    assert code == 2 and "--json: '/dev/full'" in err and "could not be written" in err
    assert "cluster:" not in err


def test_bad_counts(tmp_path, capsys):
    _bad(tmp_path, capsys, SMALL + ["--jobs", "-3"], "--jobs", "-3")
    _bad(tmp_path, capsys, SMALL + ["--seed", "-1"], "--seed", "-1")
    _bad(tmp_path, capsys, SMALL + ["--restart-s", "inf"], "--restart-s")
    _bad(tmp_path, capsys, SMALL + ["--restart-s", "1e9"], "--restart-s", "1000000000")
    _bad(tmp_path, capsys, SMALL + ["--mps-replicas", "0"], "--mps-replicas", "1..48")
    _bad(tmp_path, capsys, SMALL + ["--min-run-s", "-5"], "--min-run-s", "-5")


def test_default_load_adapts_to_a_small_sample(capsys):
    # 50 pods on 64 GPUs cannot offer load 1.0; without --load the run picks 0.9 of the most
    # they can offer and says which load it used
    assert main(["simulate", "--gpus", "64", "--jobs", "50", "--no-progress",
                 "--policy", "exclusive"]) == 0
    err = capsys.readouterr().err
    assert "workload: 50 jobs" in err and "load 0." in err
    # asked explicitly, the same load is refused, and the message says what to change
    code = main(["simulate", "--gpus", "64", "--jobs", "50", "--no-progress", "--load", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "--load" in err and "--jobs" in err


def test_repeated_policy_is_refused_like_evaluate(tmp_path, capsys):
    _bad(tmp_path, capsys, SMALL + ["--policy", "exclusive", "--policy", "exclusive"],
         "--policy: 'exclusive'", "twice")
    _bad(tmp_path, capsys, ["simulate", "--mode", "inflation", "--policy", "fgd", "--policy",
                            "fgd"], "--policy: 'fgd'", "twice")


TINY = ["simulate", "--gpus", "8", "--jobs", "1", "--no-progress"]


def test_more_than_32_pods_per_gpu_is_refused_with_the_largest_allowed(tmp_path, capsys):
    # 8 GPUs x 32 = 256; the user's case (--jobs 100000000) replayed all 6198 pods for > 15 min
    _bad(tmp_path, capsys, ["simulate", "--gpus", "8", "--jobs", "257", "--no-progress"],
         "--jobs: 257", "at most 32 x --gpus = 256")
    _bad(tmp_path, capsys, ["simulate", "--gpus", "8", "--jobs", "100000000"], "--jobs", "256")
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "at most 32 x --gpus" in " ".join(capsys.readouterr().out.split())


def _no_nan(token):
    raise AssertionError(f"{token} in strict JSON")


def test_a_one_pod_workload_has_no_load_and_writes_strict_json(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(TINY + ["--policy", "exclusive", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert "load n/a" in cap.err and "1 node (" in cap.err and "1 job (1 service)" in cap.err
    # its one pod is a service: the JCT rows are over services, and the table says so
    assert "no batch job, so the JCT" in cap.out
    doc = json.loads(out.read_text(), parse_constant=_no_nan)
    assert doc["load"] is None and doc["jobs"] == 1
    assert doc["gpu_utilization_ceiling"] is None  # no arrival window to average over
    # a --load it cannot meet is refused, not ignored, and the probe left no empty file
    out.unlink()
    _bad(tmp_path, capsys, TINY + ["--load", "0.5", "--json", str(out)], "--load: 0.5",
         "fewer than two distinct arrival times")
    assert not out.exists()


@pytest.mark.parametrize("flag", [["--gpus", "8"], ["--load", "0.5"], ["--jobs", "10"],
                                  ["--utility", "jct"], ["--restart-s", "30"],
                                  ["--cluster", "a100-mig"], ["--slowdown-model", "analytic"]])
def test_replay_flags_are_refused_in_inflation_mode(tmp_path, capsys, flag):
    _bad(tmp_path, capsys, ["simulate", "--mode", "inflation", *flag],
         f"{flag[0]}: ", flag[1], "only in --mode replay")


def test_workload_is_refused_in_replay_mode(tmp_path, capsys):
    _bad(tmp_path, capsys, SMALL + ["--workload", "cpu050"], "--workload: 'cpu050'",
         "only in --mode inflation")


def test_nodes_with_a_cluster_definition_is_refused(tmp_path, capsys):
    nodes = tmp_path / "n.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,8,V100M16\n")
    _bad(tmp_path, capsys, SMALL + ["--cluster", "a100-mig", "--nodes", str(nodes)],
         "--nodes", "n.csv", "not with --cluster a100-mig")


def test_unknown_cluster_names_the_flag_once(tmp_path, capsys):
    code = main(SMALL + ["--cluster", "nosuch"])
    err = capsys.readouterr().err
    assert code == 2 and "--cluster: 'nosuch' is not allowed" in err and "cluster: 'nosuch'" \
        not in err.replace("--cluster: 'nosuch'", "")


def test_long_policy_names_keep_the_table_columns_apart(capsys):
    names = ["gavel", "elastico-no-rst", "elastico-no-esp"]
    assert main(TINY + [a for n in names for a in ("--policy", n)]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.split() == ["metric", *names]


def test_jobs_0_on_a_tiny_cluster_blames_jobs_not_the_trace(tmp_path, capsys):
    # 1/6212 of the trace's pods is no pod at all
    code = main(["simulate", "--gpus", "1", "--jobs", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--jobs: 0" in err and "--gpus" in err and "--trace" not in err


def test_argparse_rejects_non_numbers_with_status_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--gpus", "many"])
    assert e.value.code == 2
    assert "--gpus" in capsys.readouterr().err


def _small_inflation_trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     "n0,32000,131072,2,T4\nn1,32000,131072,4,V100M16\n")
    pods = tmp_path / "openb_pod_list_tiny.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    for i, (g, m) in enumerate([(1, 100), (1, 200), (0, 0), (1, 100)]):
        rows.append(f"p{i:02d},2000,4096,{g},{m}")
    pods.write_text("\n".join(rows) + "\n")
    return nodes, pods


def test_inflation_mode_prints_both_columns_and_writes_json(tmp_path, capsys):
    nodes, pods = _small_inflation_trace(tmp_path)
    out = tmp_path / "inf.json"
    assert main(["simulate", "--mode", "inflation", "--trace", str(pods), "--nodes", str(nodes),
                 "--policy", "bestfit", "--policy", "elastico", "--seed", "7",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["runs"]] == ["bestfit", "elastico"]
    for r in doc["runs"]:
        assert r["workload"] == "tiny" and r["seed"] == 7
        assert 0 <= r["unallocated_pct_100"] <= 100 and 0 <= r["unallocated_pct_130"] <= 100
    table = capsys.readouterr().out
    assert "unalloc@100%" in table and "elastico" in table


def test_inflation_mode_bad_input(tmp_path, capsys):
    _bad(tmp_path, capsys, ["simulate", "--mode", "inflation", "--policy", "exclusive"],
         "--policy", "exclusive")
    _bad(tmp_path, capsys, ["simulate", "--mode", "inflation", "--workload", "nope"],
         "--workload", "nope", "default")
    _bad(tmp_path, capsys, ["simulate", "--policy", "packing", "--no-progress"], "--policy", "packing")


@pytest.mark.parametrize("address, allowed", [
    ("127.0.0.1:99999", "port in 1..65535"), ("127.0.0.1:0", "port in 1..65535"),
    ("garbage", "host:port"), (":50053", "host:port")])
def test_a_bad_via_grpc_address_exits_2_before_simulating(tmp_path, capsys, address, allowed):
    _bad(tmp_path, capsys, SMALL + ["--via-grpc", address], f"--via-grpc: {address!r}", allowed)


def test_a_cluster_whose_nodes_fit_no_pod_is_blamed_not_the_trace(tmp_path, capsys):
    # 1 core and 1 GiB per 8-GPU node: every trace pod asks more, so nothing is replayed
    f = tmp_path / "tiny.yaml"
    f.write_text("name: tiny\npools:\n  - {gpu_model: A100-80GB, gpus_per_node: 8, "
                 "cpu_cores: 1, mem_gib: 1, fraction: 1.0}\n")
    _bad(tmp_path, capsys, ["simulate", "--cluster", str(f), "--gpus", "8", "--no-progress"],
         f"--cluster: '{f}'", "fits this cluster's nodes", "no_fit")


def test_a_metric_a_policy_has_no_value_for_prints_a_dash_and_no_ratio(capsys):
    # exclusive has no unknown-profile metrics: once printed as "nan" with a "nanx" ratio
    from elastico.cli.simulate import _ROWS, _UNKNOWN_ROWS, _print_table

    ex = {"policy": "exclusive", **{k: 1.0 for k, _, _ in _ROWS}}
    el = {"policy": "elastico", **{k: 2.0 for k, _, _ in _ROWS + _UNKNOWN_ROWS},
          "unknown_run_s": 3.0}
    _print_table([ex, el])
    out = capsys.readouterr().out
    assert "nan" not in out
    label = _UNKNOWN_ROWS[0][1]
    line = next(ln for ln in out.splitlines() if ln.startswith(label))
    assert line.split()[-2:] == ["-", _UNKNOWN_ROWS[0][2].format(2.0)]
    # every column lines up: the header and each row are the same width (no ratio on a dash)
    widths = {len(ln.rstrip()) for ln in out.splitlines()[2:] if ln.startswith(label)}
    assert widths and max(widths) < len(out.splitlines()[0]) + 1


def test_mig_lending_is_on_by_default_and_no_mig_lending_fixes_the_mode(tmp_path, capsys):
    # llm-mix on the A100/H100 cluster (3/8 of the GPUs in MIG mode by the definition): by
    # default elastico lends empty MIG nodes to waiting whole-GPU jobs (docs/model.md 5.) and
    # counts the mode changes; --no-mig-lending keeps every node's MIG mode, and the header
    # says so
    runs, errs = {}, {}
    for extra in ([], ["--no-mig-lending"]):
        out = tmp_path / f"m{len(extra)}.json"
        assert main(["simulate", "--workload", "llm-mix", "--gpus", "64", "--load", "0.5",
                     "--policy", "elastico", "--no-progress", "--json", str(out), *extra]) == 0
        runs[not extra] = json.loads(out.read_text())
        captured = capsys.readouterr()
        errs[not extra] = captured.err
        if not extra:
            assert "MIG mode changes" in captured.out
    assert runs[False]["mig_mode_switches"] == 0 and runs[False]["mig_lending"] is False
    assert runs[True]["mig_mode_switches"] > 0 and runs[True]["mig_lending"] is True
    assert runs[True]["avg_jct_s"] != runs[False]["avg_jct_s"]
    assert "MIG mode fixed (--no-mig-lending)" in errs[False]
    assert "MIG mode fixed" not in errs[True]


def test_via_grpc_says_it_runs_as_assume_profiled_and_records_it(tmp_path, capsys):
    # the placer service has no unknown-job rule: --via-grpc runs as --assume-profiled, says
    # so on stderr and in the JSON; the in-process run records that it did not
    small = ["simulate", "--gpus", "8", "--jobs", "6", "--policy", "elastico", "--no-progress"]
    flags = {}
    for via in (True, False):
        out = tmp_path / f"via{via}.json"
        code = main(small + ["--json", str(out)] + (["--via-grpc"] if via else []))
        err = capsys.readouterr().err
        assert code == 0, err
        assert ("running as --assume-profiled" in err) is via
        flags[via] = json.loads(out.read_text())["assume_profiled"]
    assert flags == {True: True, False: False}


def test_replay_only_flags_are_refused_in_inflation_mode(capsys):
    for flag in (["--mig-lending"], ["--no-mig-lending"], ["--no-preemption"], ["--assume-profiled"],
                 ["--min-run-s", "60"], ["--mps-replicas", "4"]):
        code = main(["simulate", "--mode", "inflation", *flag])
        err = capsys.readouterr().err
        said = f"{flag[0]} is not allowed" if len(flag) == 1 else f"{flag[0]}: "
        assert code == 2 and said in err and "only in --mode replay" in err, err


def test_mig_lending_says_when_it_can_change_nothing(capsys):
    assert main(["simulate", "--workload", "llm-mix", "--gpus", "64", "--load", "0.25",
                 "--policy", "exclusive", "--mig-lending", "--no-progress"]) == 0
    assert "--mig-lending: no effect here: no policy of exclusive uses MIG" in \
        capsys.readouterr().err
