"""``elastico evaluate``: bad input exits 2 with a message naming the flag and the value,
before any run starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from elastico.cli import main


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "64,abc"], ["--gpus", "64,abc"]),
    (["--gpus", "0"], ["--gpus", "0"]),
    (["--gpus", "64,64"], ["--gpus", "twice"]),
    (["--gpus", "99999"], ["--gpus", "99999"]),
    (["--gpus", "20", "--clusters", "a100-mig"], ["--gpus", "20", "whole nodes"]),
    (["--seeds", "-1"], ["--seeds", "-1"]),
    (["--policies", "exclusive,kube"], ["--policies", "kube", "elastico-no-rst"]),
    (["--policies", "exclusive,,fgd"], ["--policies"]),
    (["--clusters", "trace,nowhere"], ["--clusters", "nowhere", "a100-mig"]),
    (["--clusters", "trace,trace"], ["--clusters", "twice"]),
    (["--jobs", "0"], ["--jobs", "0"]),
    (["--jobs-per-gpu", "nan"], ["--jobs-per-gpu", "nan"]),
    (["--load", "-1"], ["--load", "-1"]),
    # above the largest load a continuous workload takes (once a MemoryError traceback)
    (["--load", "1e9"], ["--load: 1000000000.0", "(0, 10]"]),
    # below what the longest arrival span gives: refused with the least load and "raise"
    (["--gpus", "64", "--clusters", "trace", "--seeds", "0", "--load", "1e-300",
      "--arrivals", "trace"],
     ["--load: 1e-300", "must be >=", "raise --load"]),
    (["--restart-s", "inf"], ["--restart-s", "inf"]),
    (["--window-quantile", "1"], ["--window-quantile", "1", "(0, 1)"]),
    (["--window-quantile", "nan"], ["--window-quantile", "nan", "(0, 1)"]),
    (["--sweep-loads", "0.5,abc"], ["--sweep-loads", "abc"]),
])
def test_bad_flags_exit_2_naming_them(argv, words, capsys, tmp_path):
    assert main(["evaluate", "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_load_no_workload_can_offer_fails_before_any_run(capsys, tmp_path):
    code = main(["evaluate", "--out", str(tmp_path / "out"), "--gpus", "8", "--clusters",
                 "trace", "--policies", "exclusive", "--seeds", "0", "--load", "5",
                 "--arrivals", "trace"])
    err = capsys.readouterr().err
    assert code == 2 and "--load: 5.0" in err and "must be <" in err and "trace-8" in err
    assert "evaluate:" not in err  # nothing announced, nothing run
    assert not (tmp_path / "out").exists()


def test_unknown_cluster_names_the_flag_once(capsys, tmp_path):
    assert main(["evaluate", "--out", str(tmp_path / "o"), "--clusters", "trace,nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--clusters: 'nosuch' is not allowed" in err and ": cluster:" not in err


def test_jobs_help_says_parallel_processes(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--jobs PROCESSES number of parallel worker processes" in out
    assert "not a pod count" in out


def test_out_is_a_file(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["evaluate", "--out", str(f)]) == 2
    assert "--out" in capsys.readouterr().err


def test_bad_cluster_yaml_names_file_field(capsys, tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("name: c\npools:\n  - gpu_model: Z80\n    gpus_per_node: 8\n    cpu_cores: 8\n"
                 "    mem_gib: 8\n    fraction: 1\n")
    assert main(["evaluate", "--clusters", str(y), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "pools[0].gpu_model" in err and "Z80" in err


def test_tiny_run_writes_the_report(capsys, tmp_path):
    out = tmp_path / "ev"
    assert main(["evaluate", "--workload", "openb", "--gpus", "8", "--clusters", "trace",
                 "--policies", "exclusive,time-slicing", "--seeds", "0", "--jobs-per-gpu", "2",
                 "--jobs", "1",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "[2/2" in err and "report.md" in err
    assert (out / "results.json").is_file() and (out / "jct_cdf.png").is_file()
    # the settings line names clusters as --clusters takes them
    assert "clusters trace," in (out / "report.md").read_text()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_an_empty_out_is_refused_not_the_current_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--out", "", "--gpus", "8", "--seeds", "0"])
    assert e.value.code == 2
    assert "--out" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_stops_the_run_and_its_worker_processes(tmp_path):
    # before: the parent died at once (no handler) and its two workers ran on, re-parented
    # to init, then hung on their result pipe
    out = tmp_path / "ev"
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "evaluate", "--workload",
                             "openb", "--gpus", "64",
                             "--clusters", "trace", "--policies", "exclusive,elastico",
                             "--seeds", "0,1", "--jobs", "2", "--out", str(out)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().startswith("evaluate: 4 runs")
        workers: set[int] = set()
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            workers |= _children(proc.pid)
            time.sleep(0.1)
        assert len(workers) >= 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    end = time.monotonic() + 10
    while time.monotonic() < end and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)
    assert not (out / "report.md").exists()


def _children(pid: int) -> set[int]:
    kids = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.add(int(d))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_simulate_cluster_flag(capsys, tmp_path):
    assert main(["simulate", "--cluster", "nope", "--gpus", "16", "--no-progress"]) == 2
    assert "--cluster: 'nope' is not allowed" in capsys.readouterr().err
    assert main(["simulate", "--cluster", "a100-mig", "--gpus", "20", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--gpus" in err and "whole nodes" in err
    out = tmp_path / "r.json"
    assert main(["simulate", "--cluster", "a100-mig", "--gpus", "16", "--jobs", "24",
                 "--policy", "fgd", "--no-progress", "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "16 GPUs on 2 nodes (A100-80GB 8, A100-40GB 8)" in err
    assert out.is_file()


@pytest.mark.parametrize("out", ["/proc/nope", "/proc/self/nope/deeper"])
def test_an_out_folder_that_cannot_be_created_exits_2_before_any_run(capsys, out):
    # os.access says yes to root there; only trying tells (and before the hour of runs)
    assert main(["evaluate", "--out", out, "--gpus", "16", "--seeds", "0", "--clusters",
                 "trace", "--policies", "exclusive", "--jobs-per-gpu", "0.1"]) == 2
    err = capsys.readouterr().err
    assert f"--out: '{out}' is not allowed (must be a folder that can be created" in err
    assert "evaluate:" not in err   # no run started



def test_a_run_that_fails_in_a_worker_fails_the_evaluation_not_hangs(tmp_path):
    # a worker's InvalidArgument must reach the parent (it could not be unpickled: its
    # constructor takes three arguments, and multiprocessing's Pool then waited for ever)
    code = (
        "from elastico.sim.clusters import load_cluster\n"
        "from elastico.sim.evaluate import Settings, run_all, tasks_for\n"
        "from elastico.errors import InvalidArgument\n"
        "tasks = tasks_for([load_cluster('trace')], [8], ['exclusive', 'elastico'], [0],\n"
        "                  Settings(jobs_per_gpu=2, load=50.0))\n"
        "try:\n"
        "    run_all(tasks, workers=2)\n"
        "except InvalidArgument as e:\n"
        "    print('raised', e.field)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("raised load"), (r.stdout, r.stderr)


def test_invalid_argument_survives_pickling_with_its_fields():
    import pickle

    from elastico.errors import InvalidArgument
    from elastico.model import Job, JobKind, Request
    from elastico.shapes import FitsNoModel

    e = pickle.loads(pickle.dumps(InvalidArgument("jobs[0].work", -1.0, "finite and >= 0")))
    assert (type(e), e.field, e.value, e.allowed) == (InvalidArgument, "jobs[0].work", -1.0,
                                                      "finite and >= 0")
    job = Job("j", JobKind.TRAINING, 0.0, 1.0, Request(9, 1.0, 1.0, 1.0))
    f = pickle.loads(pickle.dumps(FitsNoModel(job, "fits no GPU model of the cluster")))
    assert type(f) is FitsNoModel and str(f) == str(FitsNoModel(job, "fits no GPU model of the cluster"))
