"""``elastico evaluate --llm-jobs`` (issue 21, gap 2): with continuous arrivals the LLM jobs
arrive over the measurement window (a Poisson process given its count: i.i.d. uniform times,
elastico.sim.llm_workload.arrivals_in_window), so the window's JCT metrics count them, and each
run reports them apart (``llm_window``); without ``--llm-jobs`` the workload is untouched."""

from __future__ import annotations

import pytest
from scipy import stats

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Request
from elastico.sim.clusters import load_cluster
from elastico.sim.evaluate import Settings, Task, _with_llm, _workload, llm_window_metrics, run_one
from elastico.sim.llm_workload import arrivals_in_window, load_llm_jobs


def _jobs(n):
    # plain jobs (the function only moves arrivals); arrival order 0, 1, ... reversed below
    return [Job(f"j{i}", JobKind.INFERENCE, float(n - i), 10.0, Request(1, 1.0, 1.0, 1.0))
            for i in range(n)]


def test_arrivals_fall_in_the_window_in_the_files_order_and_are_uniform():
    jobs = _jobs(4000)
    out = arrivals_in_window(jobs, 100.0, 700.0, seed=3)
    t = [j.arrival_s for j in out]
    assert all(100.0 <= x < 700.0 for x in t)
    # the latest in the file (j0 at 4000 s) stays the latest, j3999 (at 1 s) the first
    by_file = sorted(range(4000), key=lambda i: jobs[i].arrival_s)
    assert [t[i] for i in by_file] == sorted(t)
    # uniform on the window (Kolmogorov-Smirnov, a fixed seed: deterministic)
    assert stats.kstest([(x - 100.0) / 600.0 for x in t], "uniform").pvalue > 0.01
    # the inputs are untouched, the draw reproducible and the seed matters
    assert [j.arrival_s for j in jobs] == [float(4000 - i) for i in range(4000)]
    assert [j.arrival_s for j in arrivals_in_window(jobs, 100.0, 700.0, seed=3)] == t
    assert [j.arrival_s for j in arrivals_in_window(jobs, 100.0, 700.0, seed=4)] != t
    assert [j.id for j in out] == [j.id for j in jobs] and out[0].work == 10.0


@pytest.mark.parametrize("lo, hi", [(5.0, 5.0), (0.0, float("inf")), (3.0, 1.0)])
def test_a_bad_window_is_refused(lo, hi):
    with pytest.raises(InvalidArgument) as e:
        arrivals_in_window(_jobs(2), lo, hi, 0)
    assert e.value.field == "window"


def test_without_llm_jobs_the_workload_is_the_same_object():
    spec = load_cluster("a100h100-mig")
    nodes, wl = _workload(spec, 64, 0, Settings(arrivals="continuous", load=0.2))
    assert _with_llm(wl, Settings(arrivals="continuous", load=0.2), 0) is wl


def test_continuous_runs_count_the_llm_jobs_in_the_window_and_report_them_apart():
    spec = load_cluster("a100h100-mig")
    s = Settings(arrivals="continuous", load=0.2, llm_jobs="demo")
    nodes, wl = _workload(spec, 64, 1, s)
    win = wl.window
    llm = [j for j in wl.jobs if j.llm is not None]
    assert len(llm) == 5 and all(win.lo <= j.arrival_s < win.hi for j in llm)
    # the demo file's order (by arrival_s) is kept
    demo = [j.id for j in sorted(load_llm_jobs("demo"), key=lambda j: j.arrival_s)]
    assert [j.id for j in sorted(llm, key=lambda j: j.arrival_s)] == demo
    out = run_one(Task(spec, 64, "exclusive", 1, s))
    lw = out.run["llm_window"]
    assert lw["jobs"] == 5 and lw["in_window"] == 5
    finished = [x for x in out.run["llm_jobs"] if x["status"] == "finished"]
    assert lw["finished"] == len(finished) > 0
    # each finished LLM job's JCT is among the JCTs the window's metrics are over
    jcts = sorted(out.jct)
    for x in finished:
        assert any(abs(x["jct_s"] - v) <= 1e-6 * v for v in jcts), x
    assert lw["avg_jct_s"] == pytest.approx(sum(x["jct_s"] for x in finished) / len(finished))
    assert lw["tokens"] == pytest.approx(sum(x["tokens"] for x in out.run["llm_jobs"]))


def test_llm_window_metrics_by_hand():
    class R:
        def __init__(self, arrival, finish, tokens, status="finished", alone=100.0):
            self.arrival_s, self.finish_s, self.tokens, self.status = arrival, finish, tokens, status
            self.tokens_done = tokens if status == "finished" else tokens / 2
            self.alone_s = alone

    recs = [R(10, 210, 1e6), R(20, 420, 2e6), R(5, 50, 1e6),          # the last: warm-up
            R(30, None, 4e6, status="unfinished"), R(40, 90, 0.0)]    # the last: not an LLM
    m = llm_window_metrics(recs, 10.0, 100.0)
    assert m == {"jobs": 4, "in_window": 3, "finished": 2, "avg_jct_s": 300.0,
                 "p50_jct_s": 300.0, "avg_slowdown": 3.0, "tokens": 7e6, "tokens_done": 5e6}
