"""The llm-mix workload (elastico.sim.llm_mix; docs/model.md, "The llm-mix workload"): its
distributions against their sources, computed here independently from the bundled CSVs; the
inference share; seeds; bad input; the openb default untouched."""

from __future__ import annotations

import csv
import math
from datetime import datetime
from functools import lru_cache

import numpy as np
import pytest

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.paths import data_file
from elastico.sim import llm_mix as M


# ---- independent readings of the sources ---------------------------------------------------

def _csv_lengths(source: str) -> tuple[list[int], list[int]]:
    if source == "mooncake-conv":
        path, cols = data_file("mooncake-llm-traces", "conversation_lengths.csv"), \
            ("input_length", "output_length")
    else:
        path = data_file("azure-llm-inference-2023",
                         f"AzureLLMInferenceTrace_{source[len('azure-'):]}.csv")
        cols = ("ContextTokens", "GeneratedTokens")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [int(r[cols[0]]) for r in rows], [int(r[cols[1]]) for r in rows]


@lru_cache(maxsize=2)
def _csv_gaps(service: str) -> tuple[float, ...]:
    """The Azure trace's inter-arrival gaps in seconds, parsed with datetime (7 fractional
    digits cut to the 6 datetime takes: 0.1 us, far below any gap that matters here)."""
    path = data_file("azure-llm-inference-2023", f"AzureLLMInferenceTrace_{service}.csv")
    with open(path, newline="") as f:
        ts = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
              for r in csv.DictReader(f)]
    return tuple((b - a).total_seconds() for a, b in zip(ts, ts[1:]))


def _cv(x) -> float:
    x = np.asarray(x, float)
    return float(x.std() / x.mean())


def _window(q: float = 0.9):
    from elastico import trace
    from elastico.sim.workload import default_window

    return default_window(trace.read_pods(), q)


@lru_cache(maxsize=8)
def _build(cluster: str = "a100h100-mig", gpus: int = 64, seed: int = 0, share: float = 0.4,
           load: float = 0.5):
    from elastico import trace
    from elastico.perf.throughput import ThroughputModel
    from elastico.sim.clusters import load_cluster

    nodes = load_cluster(cluster).nodes(gpus, trace.read_nodes())
    return M.build_llm_mix_workload(trace.read_pods(), nodes, seed=seed, load=load,
                                    inference_share=share, model=ThroughputModel.bundled(),
                                    window=_window()), nodes


# ---- request lengths -----------------------------------------------------------------------

@pytest.mark.parametrize("source", M.LENGTH_SOURCES)
def test_sampled_request_lengths_have_the_trace_quantiles(source):
    """Prompt and output lengths drawn for inference jobs follow the trace's distribution: at
    each decile of the trace (computed here from the CSV), the sample's empirical CDF is
    within the Dvoretzky-Kiefer-Wolfowitz band (alpha = 1e-6) of the decile's level."""
    n = 20_000
    inp, out = M.sample_request_lengths(source, n, np.random.default_rng(7))
    eps = math.sqrt(math.log(2 / 1e-6) / (2 * n))  # 0.019
    for sample, trace in zip((inp, out), _csv_lengths(source)):
        trace = sorted(trace)
        for p in (0.1, 0.25, 0.5, 0.75, 0.9):
            q = trace[min(len(trace) - 1, int(p * len(trace)))]
            # ties: P(X <= q) >= p - eps and P(X < q) <= p + eps
            assert np.mean(sample <= q) >= p - eps, (source, p, q)
            assert np.mean(sample < q) <= p + eps, (source, p, q)


def test_the_mooncake_lengths_are_the_published_trace():
    inp, out = _csv_lengths("mooncake-conv")
    # the FAST'25 README's table: 12,031 requests, average input 12,035 and output 343
    assert len(inp) == 12_031
    assert round(sum(inp) / len(inp)) == 12_035 and round(sum(out) / len(out)) == 343


def test_length_classes_keep_each_jobs_mean_lengths():
    rng = np.random.default_rng(3)
    inp, out = M.sample_request_lengths("azure-code", 2048, rng)
    cls = M.length_classes(inp, out)
    assert len(cls) == 8 and math.isclose(sum(s for _, _, s in cls), 1.0)
    assert all(math.isclose(s, 1 / 8) for _, _, s in cls)  # equal-count classes
    # class means are rounded to whole tokens: the mixture mean is within half a token
    assert abs(sum(i * s for i, _, s in cls) - inp.mean()) <= 0.5
    assert abs(sum(o * s for _, o, s in cls) - out.mean()) <= 0.5
    # prompt quartiles: the first two classes hold the shortest quarter of the prompts
    assert max(cls[0][0], cls[1][0]) <= np.quantile(inp, 0.25) + 1


# ---- arrivals ------------------------------------------------------------------------------

def _block_cv_range(gaps, n: int) -> tuple[float, float]:
    """The least and largest gap CV over every circular block of ``n`` consecutive gaps (brute
    force with cumulative sums)."""
    g = np.asarray(gaps, float)
    g2 = np.concatenate([g, g[:n]])
    s1 = np.concatenate([[0.0], np.cumsum(g2)])
    s2 = np.concatenate([[0.0], np.cumsum(g2 * g2)])
    k = np.arange(len(g))
    m = (s1[k + n] - s1[k]) / n
    v = (s2[k + n] - s2[k]) / n - m * m
    cv = np.sqrt(np.maximum(v, 0)) / m
    return float(cv.min()), float(cv.max())


@pytest.mark.parametrize("service", ["conv", "code"])
def test_burst_epochs_have_the_traces_gap_burstiness(service):
    gaps = _csv_gaps(service)
    rng = np.random.default_rng(11)
    e = M.burst_epochs(rng, len(gaps), f"azure-{service}")
    d = np.diff(np.concatenate([[0.0], e]))
    # one whole wrap: the trace's gaps in another order of start, same CV (unit mean)
    assert math.isclose(d.mean(), 1.0, rel_tol=1e-9)
    assert math.isclose(_cv(d), _cv(gaps), rel_tol=1e-6)
    # a shorter stretch: its CV is one of the trace's own blocks of that length
    for n in (200, 2000):
        d = np.diff(np.concatenate([[0.0], M.burst_epochs(np.random.default_rng(n), n,
                                                          f"azure-{service}")]))
        lo, hi = _block_cv_range(np.asarray(gaps) / np.mean(gaps), n)
        assert lo - 1e-9 <= _cv(d) <= hi + 1e-9


def test_the_bundled_arrival_stats_match_the_trace():
    with open(data_file("azure-llm-inference-2023", "derived", "arrival_stats.csv")) as f:
        rows = {r["service"]: r for r in csv.DictReader(f)}
    for service in ("conv", "code"):
        gaps = _csv_gaps(service)
        assert int(rows[f"azure-{service}"]["requests"]) == len(gaps) + 1
        assert math.isclose(float(rows[f"azure-{service}"]["gap_cv"]), _cv(gaps), abs_tol=1e-3)
    # the conversation trace is near Poisson at the gap scale but bursty over a minute
    assert 1.0 < float(rows["azure-conv"]["gap_cv"]) < 1.2
    assert float(rows["azure-conv"]["dispersion_60s"]) > 10


def test_inference_arrivals_of_a_workload_are_rescaled_trace_gaps():
    wl, _ = _build()
    inf = sorted(j.arrival_s for j in wl.jobs if j.llm is not None)
    d = np.diff(inf)
    gaps = np.asarray(_csv_gaps("conv"))
    lo, hi = _block_cv_range(gaps / gaps.mean(), len(d))
    # a draft that fits no TP degree is dropped (its gap merges with the next): none here
    assert lo - 1e-9 <= _cv(d) <= hi + 1e-9
    assert wl.scale > 0 and math.isclose(1.0 / wl.scale, float(np.mean(
        np.diff(np.concatenate([[0.0], inf])))), rel_tol=0.5)


# ---- composition ---------------------------------------------------------------------------

def _demand(jobs, gpus: int, lo: float, hi: float) -> float:
    tot = 0.0
    for j in jobs:
        a, b = j.arrival_s, j.arrival_s + j.work
        tot += j.request.gpus_total * max(0.0, min(b, hi) - max(a, lo))
    return tot / (gpus * (hi - lo))


@pytest.mark.parametrize("share", M.SHARE_SWEEP)
def test_the_inference_share_of_the_demand_is_the_setting(share):
    wl, nodes = _build(share=share)
    win = wl.window
    gpus = sum(n.num_gpus for n in nodes)
    inf = _demand([j for j in wl.jobs if j.llm is not None], gpus, win.lo, win.hi)
    tot = _demand(wl.jobs, gpus, win.lo, win.hi)
    assert math.isclose(tot, 0.5, rel_tol=1e-6)
    assert math.isclose(inf / tot, share, rel_tol=1e-6)
    llm_train = _demand([j for j in wl.jobs if j.llm_train is not None], gpus, win.lo, win.hi)
    assert math.isclose(llm_train / tot, (1 - share) * M.LLM_TRAIN_SHARE, rel_tol=1e-6)
    assert sum(wl.mix.values()) == len(wl.jobs)
    assert wl.kinds["service"] == 0  # no latency-sensitive service in this workload


def test_the_jobs_are_what_the_sources_allow():
    from elastico import trace
    from elastico.sim.workload import batch_durations

    wl, _ = _build()
    be = {p.name for p in trace.read_pods() if p.qos == "BE"}
    measured = [j for j in wl.jobs if j.llm is None and j.llm_train is None]
    assert measured and all(j.id.split("#")[0] in be for j in measured)
    durations = set(batch_durations(trace.read_pods()).tolist())
    assert all(j.work in durations for j in measured)  # the trace's batch durations
    for j in wl.jobs:
        if j.llm_train is not None:
            t = j.llm_train.job
            assert (t.seq_len, t.global_batch, t.mode) == (4096, 64, "finetune")
            assert j.request.num_gpus in (1, 2, 4, 8)
        if j.llm is not None:
            assert j.llm.replicas == 1 and j.request.num_gpus == j.llm.tp
            assert j.llm.model.name in M.inference_models("A100-80GB")
            assert len(j.llm.work.classes) <= 8


def test_the_trace_mix_has_no_llm_training_and_moves_that_demand():
    wl, nodes = _build(cluster="trace")
    assert wl.reference_gpus["training"] is None and wl.mix["training-llm"] == 0
    assert math.isclose(wl.mix_demand["training-measured"], 0.5 * 0.6, rel_tol=1e-6)
    assert wl.reference_gpus["inference"] in {n.gpu_model for n in nodes}


def test_a_cluster_no_llm_fits_is_refused_naming_its_gpus():
    from elastico import trace
    from elastico.perf.throughput import ThroughputModel
    from elastico.sim.clusters import load_cluster

    nodes = load_cluster("trace").nodes(8, trace.read_nodes())  # one G2 node
    with pytest.raises(InvalidArgument) as e:
        M.build_llm_mix_workload(trace.read_pods(), nodes, seed=0, load=0.5,
                                 model=ThroughputModel.bundled(), window=_window())
    assert e.value.field == "nodes" and e.value.value == "G2"
    wl = M.build_llm_mix_workload(trace.read_pods(), nodes, seed=0, load=0.5,
                                  inference_share=0.0, model=ThroughputModel.bundled(),
                                  window=_window())
    assert wl.mix["inference-llm"] == 0 and wl.mix["training-measured"] > 0


def test_seeds_are_reproducible():
    a, _ = _build(seed=5)
    from elastico import trace
    from elastico.perf.throughput import ThroughputModel
    from elastico.sim.clusters import load_cluster

    nodes = load_cluster("a100h100-mig").nodes(64)
    b = M.build_llm_mix_workload(trace.read_pods(), nodes, seed=5, load=0.5, inference_share=0.4,
                                 model=ThroughputModel.bundled(), window=_window())
    key = lambda wl: [(j.id, j.arrival_s, j.work, j.job_type) for j in wl.jobs]  # noqa: E731
    assert key(a) == key(b)
    c, _ = _build(seed=6)
    assert key(c) != key(a)


# ---- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.4"])
def test_bad_shares_are_refused(bad):
    with pytest.raises(InvalidArgument) as e:
        M.check_inference_share(bad)
    assert e.value.field == "inference_share" and "[0, 1]" in e.value.allowed


@pytest.mark.parametrize("argv, words", [
    (["evaluate", "--workload", "llm"], ["--workload", "'llm'", "openb, llm-mix"]),
    (["evaluate", "--workload", "llm-mix", "--inference-share", "1.5"],
     ["--inference-share", "1.5", "[0, 1]"]),
    (["evaluate", "--workload", "openb", "--inference-share", "0.2"],
     ["--inference-share", "only with --workload llm-mix"]),
    (["evaluate", "--workload", "llm-mix", "--arrivals", "trace"], ["--arrivals", "continuous"]),
    (["evaluate", "--workload", "llm-mix", "--clusters", "trace", "--gpus", "8"],
     ["--clusters", "trace-8 (G2)", "--inference-share 0"]),
    (["simulate", "--workload", "llm", "--no-progress"],
     ["--workload", "'llm'", "openb, llm-mix", "only in --mode inflation"]),
    (["simulate", "--workload", "llm-mix", "--inference-share", "-1", "--no-progress"],
     ["--inference-share", "-1", "[0, 1]"]),
    (["simulate", "--workload", "llm-mix", "--arrivals", "trace", "--no-progress"],
     ["--arrivals", "continuous"]),
    (["simulate", "--workload", "llm-mix", "--jobs", "10", "--no-progress"], ["--jobs", "10"]),
    (["simulate", "--workload", "llm-mix", "--load", "500", "--no-progress"],
     ["--load", "500", "(0, 10]"]),
    (["simulate", "--workload", "llm-mix", "--cluster", "trace", "--gpus", "8",
      "--no-progress"],
     ["--gpus 8", "G2", "--inference-share 0"]),
])
def test_bad_workload_flags_exit_2_naming_them(argv, words, capsys, tmp_path):
    if argv[0] == "evaluate":
        argv = [*argv, "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err
    assert not (tmp_path / "out").exists()


# ---- the openb default ---------------------------------------------------------------------

def test_openb_and_llm_mix_are_the_defaults_and_openb_builds_the_same_jobs():
    import argparse

    from elastico import trace
    from elastico.cli import evaluate as cli
    from elastico.perf.throughput import ThroughputModel
    from elastico.sim import evaluate as E
    from elastico.sim.clusters import load_cluster
    from elastico.sim.workload import build_workload

    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers())
    args = p.parse_args(["evaluate", "--out", "/nonexistent-dir/x"])
    # issue 24: one default evaluation covers both workloads, openb first
    assert args.workload == "openb,llm-mix" and args.inference_share is None
    assert cli.workloads(args) == ["openb", "llm-mix"]
    settings = E.Settings(arrivals="trace", jobs_per_gpu=1.0)
    assert settings.workload == "openb"
    spec = load_cluster("trace")
    nodes, wl = E._workload(spec, 8, 0, settings)
    direct = build_workload(trace.read_pods(), spec.nodes(8, trace.read_nodes()), seed=0,
                            load=None, model=ThroughputModel.bundled(), jobs=8)
    assert [(j.id, j.arrival_s, j.work) for j in wl.jobs] == \
        [(j.id, j.arrival_s, j.work) for j in direct.jobs]


def test_runs_carry_their_workload():
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    spec = load_cluster("a100-mig")
    mix = run_one(Task(spec, 16, "exclusive", 0, Settings(workload="llm-mix",
                                                         arrivals="continuous", load=0.3,
                                                         inference_share=0.6))).run
    assert mix["workload"] == "llm-mix" and mix["inference_share"] == 0.6
    assert sum(mix["mix"].values()) == mix["jobs"]
    assert math.isclose(sum(mix["mix_demand"].values()), mix["load"], rel_tol=1e-9)
    assert math.isclose(mix["mix_demand"]["inference-llm"] / mix["load"], 0.6, rel_tol=1e-6)
    assert "llm_jobs" not in mix  # hundreds of jobs: counted under mix, not listed
    parts = mix["mix_window"]
    assert set(parts) == set(M.PARTS)
    done = sum(p["finished"] for p in parts.values())
    assert done > 0 and math.isclose(
        sum(p["avg_jct_s"] * p["finished"] for p in parts.values()) / done, mix["avg_jct_s"],
        rel_tol=1e-6)
    openb = run_one(Task(load_cluster("trace"), 8, "exclusive", 0, Settings(arrivals="trace",
                                                           jobs_per_gpu=1.0))).run
    assert openb["workload"] == "openb" and "mix" not in openb
