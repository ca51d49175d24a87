"""Trace -> jobs: determinism per seed, capped offered load achieved (and its maximum),
``jobs=`` sampling, the t_head arrival rule, exclusions and kinds on the real trace (counts
from data/alibaba-gpu-v2023-openb/PROVENANCE.md and the pod list).  Expected values are
recomputed here with plain Python from the pods and the returned jobs."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from elastico.errors import InvalidArgument
from elastico.model import JobKind, Node
from elastico.perf.throughput import ThroughputModel
from elastico.trace import TracePod, read_nodes, read_pods, sub_cluster
from elastico.sim.workload import build_workload


@pytest.fixture(scope="module")
def model():
    return ThroughputModel.bundled()


@pytest.fixture(scope="module")
def pods():
    return read_pods()


@pytest.fixture(scope="module")
def nodes():
    return read_nodes()


@pytest.fixture(scope="module")
def sub512(nodes):
    return sub_cluster(nodes, 512)


@pytest.fixture(scope="module")
def by_name(pods):
    return {p.name: p for p in pods}


@pytest.fixture(scope="module")
def eligible(pods):
    """Names of the GPU pods that ran (every one fits some node of the full cluster)."""
    return [p.name for p in pods if p.num_gpus > 0 and p.scheduled_s is not None]


def _gpus(job):
    return job.request.num_gpus * job.request.gpu_share


def _capped_load(jobs, gpus):
    """sum_j g_j x min(work_j, S) / (gpus x S), S = arrival span, with plain loops."""
    lo = hi = jobs[0].arrival_s
    for j in jobs:
        lo, hi = min(lo, j.arrival_s), max(hi, j.arrival_s)
    span = hi - lo
    total = 0.0
    for j in jobs:
        total += _gpus(j) * min(j.work, span)
    return total / (gpus * span)


def _max_load(jobs, gpus):
    total = 0.0
    for j in jobs:
        total += _gpus(j)
    return total / gpus


def _percentile_1(values):
    """1st percentile, linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = 0.01 * (len(s) - 1)
    i = int(math.floor(pos))
    if i + 1 >= len(s):
        return s[-1]
    return s[i] + (s[i + 1] - s[i]) * (pos - i)


def test_full_trace_kinds_and_exclusions(pods, nodes, model):
    w = build_workload(pods, nodes, seed=0, load=0.5, model=model)
    # 8152 pods: 1088 CPU-only; Pending pods that ask for GPUs: 897 Pending - CPU-only Pending
    gpu_pending = sum(p.phase == "Pending" and p.num_gpus > 0 for p in pods)
    assert w.excluded == {"cpu_only": 1088, "no_times": 0, "never_scheduled": gpu_pending,
                          "no_fit": 0, "not_sampled": 0}
    assert len(w) == 8152 - 1088 - gpu_pending
    assert w.sample_probability == 1.0
    ran = [p for p in pods if p.num_gpus > 0 and p.scheduled_s is not None]
    expect = Counter()
    for p in ran:
        if p.qos in ("LS", "Guaranteed", "Burstable"):
            expect["service"] += 1
        else:  # BE: a batch job of unknown kind, simulated as training (issue 19)
            expect["training"] += 1
    expect["inference"] = 0
    assert w.kinds == dict(expect)
    assert Counter(j.kind.value for j in w) == expect
    assert sum(p.phase == "Failed" for p in ran) > 0
    assert {j.id for j in w} == {p.name for p in ran}  # Failed included as run
    for j in w:
        assert j.slowdown_bound == (1.1 if j.kind is JobKind.SERVICE else 1.5)
        assert j.priority == 1.0 and j.work >= 1.0 and j.job_type in model.job_types()
        if j.request.num_gpus > 1:
            assert j.job_type in model.multi_gpu_job_types()
    assert _capped_load(w.jobs, 6212) == pytest.approx(0.5, rel=1e-9)


def test_work_is_deletion_minus_scheduled(by_name, pods, nodes, model):
    w = build_workload(pods, nodes, seed=3, load=0.5, model=model)
    for j in w.jobs:
        p = by_name[j.id]
        assert j.work == max(1.0, p.deletion_s - p.scheduled_s)


@pytest.mark.parametrize("load", [0.1, 0.5, 0.8])
def test_capped_load_achieved(pods, sub512, model, load):
    w = build_workload(pods, sub512, seed=0, load=load, model=model)
    assert _capped_load(w.jobs, 512) == pytest.approx(load, rel=1e-9)
    assert w.offered_load == pytest.approx(load, rel=1e-9)
    assert w.jobs[0].arrival_s == 0.0
    arr = [j.arrival_s for j in w]
    assert arr == sorted(arr)
    # the cap matters: some jobs outlast the arrival window (long-running services)
    span = arr[-1] - arr[0]
    assert any(j.work > span for j in w)


def test_higher_load_compresses_more(pods, sub512, model):
    scales = [build_workload(pods, sub512, seed=0, load=x, model=model).scale
              for x in (0.2, 0.4, 0.8)]
    assert scales[0] > scales[1] > scales[2] > 0


def test_load_above_maximum_rejected(pods, sub512, model):
    w = build_workload(pods, sub512, seed=0, load=0.5, model=model)
    top = _max_load(w.jobs, 512)  # every sampled job at once; the sample does not depend on load
    assert 0.5 < top < 1.0
    near = build_workload(pods, sub512, seed=0, load=0.99 * top, model=model)
    assert [j.id for j in near] == [j.id for j in w]
    assert _capped_load(near.jobs, 512) == pytest.approx(0.99 * top, rel=1e-9)
    for load in (top, 1.01 * top, 1.0, 2.0):
        with pytest.raises(InvalidArgument) as e:
            build_workload(pods, sub512, seed=0, load=load, model=model)
        assert e.value.field == "load"
        # truncated to 4 decimals, so that every value below the one shown is allowed
        assert f"< {math.floor(top * 1e4) / 1e4:.4f}..." in str(e.value)


def test_load_below_the_longest_span_rejected_not_changed(pods, sub512, model):
    # the span search stops at 1e12 s: the least load it reaches is the capped load at that
    # span, sum_j g_j min(work_j, 1e12) / (512 x 1e12) -- every work is far shorter, so
    # sum_j g_j work_j / (512 x 1e12); a lower load is refused, never quietly replaced
    w = build_workload(pods, sub512, seed=0, load=0.5, model=model)
    least = sum(_gpus(j) * min(j.work, 1e12) for j in w.jobs) / (512 * 1e12)
    ok = build_workload(pods, sub512, seed=0, load=1.01 * least, model=model)
    assert _capped_load(ok.jobs, 512) == pytest.approx(1.01 * least, rel=1e-6)
    for load in (0.99 * least, 1e-300):
        with pytest.raises(InvalidArgument) as e:
            build_workload(pods, sub512, seed=0, load=load, model=model)
        assert e.value.field == "load" and f">= {least:.3g}" in str(e.value)


def test_arrivals_t_head_rule(by_name, pods, sub512, model):
    w = build_workload(pods, sub512, seed=0, load=0.5, model=model)
    sched = [by_name[j.id].scheduled_s for j in w]
    t_head = _percentile_1(sched)
    for j, s in zip(w.jobs, sched):
        assert j.arrival_s == pytest.approx(max(0.0, s - t_head) * w.scale, rel=1e-12, abs=1e-9)
    # the earliest ~1% (scheduled at or before t_head) arrive at exactly 0, no one else does
    at_zero = [s for j, s in zip(w.jobs, sched) if j.arrival_s == 0.0]
    assert len(at_zero) == sum(s <= t_head for s in sched)
    assert 1 <= len(at_zero) <= math.ceil(0.01 * len(sched)) + 1
    assert max(at_zero) <= t_head < min(s for s in sched if s > t_head)
    # order of scheduled times is preserved (ties, and the head, only may share an arrival)
    for (a, sa), (b, sb) in zip(zip(w.jobs, sched), zip(w.jobs[1:], sched[1:])):
        assert sa <= sb or sb <= t_head
        if sa < sb and sa > t_head:
            assert a.arrival_s < b.arrival_s


def test_deterministic_per_seed(pods, sub512, model):
    a = build_workload(pods, sub512, seed=7, load=0.5, model=model)
    b = build_workload(pods, sub512, seed=7, load=0.5, model=model)
    c = build_workload(pods, sub512, seed=8, load=0.5, model=model)
    key = lambda w: [(j.id, j.arrival_s, j.work, j.kind, j.job_type) for j in w]  # noqa: E731
    assert key(a) == key(b)
    assert key(a) != key(c)


def test_sub_cluster_gets_proportional_sample(pods, sub512, model, eligible):
    w = build_workload(pods, sub512, seed=0, load=0.5, model=model)
    assert w.sample_probability == pytest.approx(512 / 6212)
    mean = len(eligible) * 512 / 6212
    assert abs(len(w) - mean) < 4 * math.sqrt(mean)  # binomial, 4 sigma
    assert len(w) + w.excluded["not_sampled"] == len(eligible)


@pytest.mark.parametrize("n", [1, 300, 2000])
def test_jobs_draws_exactly_n(pods, sub512, model, eligible, by_name, n):
    w = build_workload(pods, sub512, seed=0, load=0.5, model=model, jobs=n)
    assert len(w) == n and len({j.id for j in w}) == n
    assert w.sample_probability == 1.0
    assert w.excluded["not_sampled"] == len(eligible) - n
    assert w.excluded["no_fit"] == 0
    assert {j.id for j in w} <= set(eligible)
    # jobs sorted by arrival (scheduled time, the head clamped to t_head), ties in trace order
    index = {p.name: i for i, p in enumerate(pods)}
    t_head = _percentile_1([by_name[j.id].scheduled_s for j in w])
    assert [j.id for j in w] == sorted(
        (j.id for j in w), key=lambda x: (max(by_name[x].scheduled_s, t_head), index[x]))
    if n > 1:
        assert _capped_load(w.jobs, 512) == pytest.approx(0.5, rel=1e-9)
    else:
        assert w.scale == 1.0 and w.jobs[0].arrival_s == 0.0 and w.offered_load == math.inf


def test_jobs_deterministic_and_seeded(pods, sub512, model):
    key = lambda w: [(j.id, j.arrival_s, j.work, j.job_type) for j in w]  # noqa: E731
    a = build_workload(pods, sub512, seed=5, load=0.5, model=model, jobs=500)
    b = build_workload(pods, sub512, seed=5, load=0.5, model=model, jobs=500)
    c = build_workload(pods, sub512, seed=6, load=0.5, model=model, jobs=500)
    assert key(a) == key(b)
    assert {j.id for j in a} != {j.id for j in c}


def test_jobs_at_least_eligible_keeps_all(pods, nodes, sub512, model, eligible):
    everyone = build_workload(pods, nodes, seed=0, load=0.5, model=model)  # probability 1
    assert {j.id for j in everyone} == set(eligible)
    for n in (len(eligible), len(eligible) + 1000):
        w = build_workload(pods, sub512, seed=0, load=0.5, model=model, jobs=n)
        assert {j.id for j in w} == set(eligible)
        assert w.excluded["not_sampled"] == 0 and w.sample_probability == 1.0


@pytest.mark.parametrize("n", [0, -1, True, 2.5])
def test_bad_jobs(pods, sub512, model, n):
    with pytest.raises(InvalidArgument) as e:
        build_workload(pods[:10], sub512, seed=0, load=0.5, model=model, jobs=n)
    assert e.value.field == "jobs"


def test_unfit_pods_excluded(model):
    # n1 brings the cluster to 6212 GPUs (sampling probability 1) but has too little CPU.
    nodes = [Node("n0", "T4", 2, 16.0, 32.0, 128.0), Node("n1", "G2", 6210, 16.0, 1.0, 1.0)]
    mk = lambda name, n, models=frozenset(): TracePod(  # noqa: E731
        name, 2.0, 4.0, n, 1.0, models, "BE", "Succeeded", 0.0, 10.0, 110.0)
    pods = [mk("a", 1), mk("b", 4), mk("c", 1, frozenset({"V100M16"})), mk("d", 2),
            TracePod("e", 1.0, 1.0, 1, 0.5, frozenset(), "BE", "Pending", 5.0, None, 6.0)]
    w = build_workload(pods, nodes, seed=0, load=1.0, model=model)
    assert [j.id for j in w] == ["a", "d"]
    assert w.excluded["no_fit"] == 2 and w.excluded["never_scheduled"] == 1
    assert [j.kind for j in w] == [JobKind.TRAINING, JobKind.TRAINING]
    # two jobs at the same trace time: span 0 -> k = 1, all arrive at 0 (no load check)
    assert w.scale == 1.0 and all(j.arrival_s == 0.0 for j in w) and w.offered_load == math.inf


@pytest.mark.parametrize("load", [0, -1.0, float("nan"), float("inf")])
def test_bad_load(pods, sub512, model, load):
    with pytest.raises(InvalidArgument) as e:
        build_workload(pods[:10], sub512, seed=0, load=load, model=model)
    assert e.value.field == "load"


def test_auto_load_is_one_or_nine_tenths_of_the_maximum(pods, sub512, model):
    # few jobs: 1.0 is out of reach, so load=None asks for 0.9 x sum(g) / G
    few = build_workload(pods, sub512, seed=0, load=None, model=model, jobs=100)
    want = 0.9 * _max_load(few.jobs, 512)
    assert want < 1.0
    assert _capped_load(few.jobs, 512) == pytest.approx(want, rel=1e-9)
    # many jobs: 1.0 is reachable and is what load=None asks for
    many = build_workload(pods, sub512, seed=0, load=None, model=model, jobs=2000)
    assert _max_load(many.jobs, 512) > 1.0 / 0.9
    assert _capped_load(many.jobs, 512) == pytest.approx(1.0, rel=1e-9)
