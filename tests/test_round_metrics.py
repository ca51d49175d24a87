"""Round metrics (issue 6, item 6): ``run_round(metrics=...)`` records the round's duration,
jobs by status, GPU allocation and utilization and the round's prices, each checked against a
value worked out here from the round's result; a served placer counts degraded rounds and
predictor fallbacks; and the Prometheus text a served placer exposes on ``--metrics-port``
has every metric docs/api.md documents, with its type and labels."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from elastico.runtime.metrics import ROUND_BUCKETS_S, ServiceMetrics
from elastico.model import Configuration, resource_space_for
from elastico.placer.placement import Assignment, ClusterState, Part
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.rpc.remote import RemoteSlowdownModel, open_channel
from elastico.placer.round import ActiveJob, RoundInput, RoundResult, run_round
from elastico.placer.server import build_server
from elastico.predictor import AnalyticSlowdown
from elastico.cli.up import free_ports
from elastico.v1 import placer_pb2_grpc
from test_placer_grpc import NODES, TM, _job, _request

STATUSES = ("placed", "waiting", "unplaceable", "degraded", "error")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"


class Clock:
    """A timer that advances by the given steps, one per call (seconds)."""

    def __init__(self, *steps: float):
        self.t, self.steps = 0.0, list(steps)

    def __call__(self) -> float:
        self.t += self.steps.pop(0) if self.steps else 0.0
        return self.t


def _allocation(state: ClusterState, gpus: int) -> float:
    """Booked GPU compute / cluster GPUs, from the assignments (every part's GPUs)."""
    return sum(len(a.gpus) * a.gpu_share for a in state.assignments()) / gpus


def test_run_round_records_duration_jobs_allocation_and_prices():
    m = ServiceMetrics("placer")
    get = m.registry.get_sample_value
    slow = AnalyticSlowdown()
    policy = make_policy("elastico", PolicyEnv(NODES, TM, slow))
    # 10 jobs of a quarter GPU and 2 of a whole one, on 4 GPUs: some share GPUs
    jobs = [ActiveJob(_job(i, share=0.25)) for i in range(10)] + [
        ActiveJob(_job(i, share=1.0)) for i in (10, 11)]
    state = ClusterState(NODES)
    durations = (0.3, 0.02)
    for k, seconds in enumerate(durations):
        res = run_round(policy, RoundInput(100.0 * (k + 1), NODES, state, jobs),
                        timer=Clock(0.0, seconds), metrics=m)
        counts = {s: sum(d.status.value == s for d in res.decisions.values()) for s in STATUSES}
        assert sum(counts.values()) == len(jobs) and counts["placed"] >= 1
        for s in STATUSES:
            assert get("elastico_round_jobs", {"status": s}) == counts[s], s
        alloc = _allocation(res.state, 4)
        assert 0.0 < alloc <= 1.0
        assert get("elastico_gpu_allocation") == pytest.approx(alloc, abs=1e-12)
        # utilization: each job's GPUs x its SM activity / its predicted slowdown
        sd = res.state.predicted_slowdowns(slow)
        busy = sum(len(a.gpus) * res.state.profile(a.job_id).gpu_activity / sd[a.job_id]
                   for a in res.state.assignments())
        assert get("elastico_gpu_utilization") == pytest.approx(busy / 4, rel=1e-12)
        assert 0.0 < get("elastico_gpu_utilization") <= alloc
        names = resource_space_for(NODES).names
        assert len(names) == len(res.pricing.prices) == 4
        for name, p in zip(names, res.pricing.prices):
            assert get("elastico_pricing_price", {"resource": name}) == float(p), name
        state = res.state
        jobs = [ActiveJob(a.job, res.decisions[a.job.id].config) for a in jobs]
    assert get("elastico_round_duration_seconds_count") == len(durations)
    assert get("elastico_round_duration_seconds_sum") == pytest.approx(sum(durations))
    assert get("elastico_round_duration_seconds_bucket", {"le": "0.025"}) == 1  # the 0.02 s one
    assert get("elastico_round_duration_seconds_bucket", {"le": "0.25"}) == 1
    assert get("elastico_round_duration_seconds_bucket", {"le": "0.5"}) == 2
    assert get("elastico_rounds_degraded_total") == 0


def test_allocation_counts_every_gpu_of_a_job_that_spans_nodes():
    m = ServiceMetrics("placer")
    state = ClusterState(NODES)
    big = _job(0, share=1.0)
    cfg = Configuration("g4", "V100M16", 4, 1.0, 16.0, 4.0, 16.0, 1.0)
    env = PolicyEnv(NODES, TM, AnalyticSlowdown())
    from elastico.placer.policies.common import JobCatalog

    # 2 GPUs on each node, booked as given (whichever way placement would split it)
    asg = Assignment(big.id, (Part("n0", 0, (0, 1), 2.0, 8.0), Part("n1", 1, (0, 1), 2.0, 8.0)),
                     gpu_share=1.0, gpu_mem_gib=16.0, config_name=cfg.name, gpu_model="V100M16")
    state.rebook(asg, JobCatalog(env).profile(big, cfg), big.slowdown_bound)
    half = _job(1, share=0.5)
    inp = RoundInput(0.0, NODES, ClusterState(NODES), [ActiveJob(big, cfg), ActiveJob(half)])
    from elastico.placer.round import Decision, Status

    res = RoundResult({big.id: Decision(big.id, Status.PLACED, cfg, asg),
                       half.id: Decision(half.id, Status.WAITING, None, reason="full")}, state)
    m.observe_round(inp, res)
    get = m.registry.get_sample_value
    assert get("elastico_gpu_allocation") == 1.0
    # alone on its 4 GPUs (slowdown 1): busy compute = 4 x its SM activity
    assert get("elastico_gpu_utilization") == pytest.approx(state.profile(big.id).gpu_activity)
    assert get("elastico_round_jobs", {"status": "placed"}) == 1
    assert get("elastico_round_jobs", {"status": "waiting"}) == 1
    assert get("elastico_round_duration_seconds_count") == 1


def test_a_round_that_raises_is_not_recorded():
    m = ServiceMetrics("placer")

    class Broken:
        name = "broken"

        def __call__(self, inp, state):
            return RoundResult({}, state)  # decides for none of the jobs: a bug

    with pytest.raises(RuntimeError, match="wrong jobs"):
        run_round(Broken(), RoundInput(0.0, NODES, ClusterState(NODES), [ActiveJob(_job(0))]),
                  metrics=m)
    assert m.registry.get_sample_value("elastico_round_duration_seconds_count") == 0


def test_a_served_placer_counts_each_degraded_round_once_and_every_fallback_call():
    # a predictor address where nothing listens: every round that asks it runs degraded
    dead = free_ports(1)[0]
    remote = RemoteSlowdownModel(open_channel(f"127.0.0.1:{dead}"), timeout_s=5)
    m = ServiceMetrics("placer")
    server, port = build_server(slowdown=remote, metrics=m)
    server.start()
    get = m.registry.get_sample_value
    fallbacks = 0
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = placer_pb2_grpc.PlacerServiceStub(ch)
            for k in range(3):
                shared = [ActiveJob(_job(i, share=0.25)) for i in range(8)]  # share GPUs
                resp = stub.RunRound(_request(shared, now=100.0 + k), timeout=60)
                assert resp.degraded.startswith("predictor UNAVAILABLE")
                assert remote.fallback_calls >= 1
                fallbacks += remote.fallback_calls
                assert get("elastico_rounds_degraded_total") == k + 1
                assert get("elastico_placer_predictor_fallbacks_total") == fallbacks
            # one job alone: no pair to predict, so the predictor is not asked, not degraded
            resp = stub.RunRound(_request([ActiveJob(_job(0, share=0.25))], now=200.0),
                                 timeout=60)
            assert resp.degraded == ""
    finally:
        server.stop(0)
    assert get("elastico_rounds_degraded_total") == 3
    assert get("elastico_placer_predictor_fallbacks_total") == fallbacks
    assert get("elastico_round_duration_seconds_count") == 4


LOOP_HEADING = "\n### Scheduler loop"


def _documented_metrics(loop: bool = False) -> dict[str, tuple[str, ...]]:
    """docs/api.md's "Metrics" section: metric name -> its documented labels; the services'
    part, or (``loop``) the scheduler loop's subsection."""
    text = DOCS.read_text()
    section = text[text.index("## Metrics"):]
    section = section[:section.index("\n## ", 1)]
    head, _, tail = section.partition(LOOP_HEADING)
    out = {}
    for name, labels in re.findall(r"`(elastico_[a-z_]+)(?:\{([a-z_,\s]+)\})?`",
                                   tail if loop else head):
        out[name] = tuple(x.strip() for x in labels.split(",")) if labels else ()
    return out


def _check_exposed(documented: dict[str, tuple[str, ...]], families: dict) -> dict:
    """Every documented metric is exposed with the type its name promises and (on every
    sample) its documented labels.  Returns the samples by name."""
    samples = {}
    for f in families.values():
        for s in f.samples:
            samples.setdefault(s.name, []).append(s)
    for name, labels in documented.items():
        family = name[:-len("_total")] if name.endswith("_total") else name
        assert family in families, f"{name} documented in docs/api.md but not exposed"
        kind = families[family].type
        if name.endswith("_total"):
            assert kind == "counter", name
        elif name.endswith("_seconds"):  # durations are histograms in seconds
            assert kind == "histogram", name
            assert {b.labels["le"] for b in samples[name + "_bucket"]} >= {"0.01", "+Inf"}
        else:
            assert kind == "gauge", name
        for s in families[family].samples:
            assert set(labels) <= set(s.labels) - {"le"}, (name, s.labels)
    return samples


def test_the_scheduler_loops_registry_exposes_every_documented_loop_metric():
    from prometheus_client import generate_latest

    from elastico.runtime.metrics import (JOB_ERROR_STAGES, LOOP_POD_OUTCOMES, LOOP_ROUND_OUTCOMES,
                                  LoopMetrics)

    documented = _documented_metrics(loop=True)
    assert set(documented) == {
        "elastico_loop_round_duration_seconds", "elastico_loop_rounds_total", "elastico_loop_pods",
        "elastico_binds_total", "elastico_bind_conflicts_total", "elastico_events_total",
        "elastico_leader", "elastico_job_errors_total", "elastico_mig_mode_switches_total"}
    assert not set(documented) & set(_documented_metrics())   # each metric documented once
    m = LoopMetrics()   # what elastico schedule serves (schedule_cli: registry=metrics.registry)
    m.leader.set(1)
    m.observe_loop_round("completed", 0.25, {"bound": 2, "waiting": 1})
    m.observe_loop_round("standby")
    m.binds.inc(2)
    m.bind_conflicts.inc()
    m.events.labels("Scheduled").inc(2)
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(m.registry).decode())}
    samples = _check_exposed(documented, families)
    # the placer's documented metrics are there too (the loop's rounds record them)
    assert {n[:-len("_total")] if n.endswith("_total") else n
            for n in _documented_metrics()} <= set(families)
    # the documented label values are the ones recorded, and the values are the ones observed
    rounds = {s.labels["outcome"]: s.value for s in samples["elastico_loop_rounds_total"]}
    assert rounds == {o: float(o in ("completed", "standby")) for o in LOOP_ROUND_OUTCOMES}
    pods = {s.labels["outcome"]: s.value for s in samples["elastico_loop_pods"]}
    assert pods == {o: {"bound": 2.0, "waiting": 1.0}.get(o, 0.0) for o in LOOP_POD_OUTCOMES}
    assert [s.value for s in samples["elastico_loop_round_duration_seconds_count"]] == [1]
    assert [s.value for s in samples["elastico_loop_round_duration_seconds_sum"]] == [0.25]
    assert [(s.labels, s.value) for s in samples["elastico_events_total"]] == [
        ({"reason": "Scheduled"}, 2.0)]
    assert samples["elastico_binds_total"][0].value == 2
    assert samples["elastico_bind_conflicts_total"][0].value == 1
    assert samples["elastico_leader"][0].value == 1
    for outcome in (*LOOP_ROUND_OUTCOMES, *LOOP_POD_OUTCOMES, *JOB_ERROR_STAGES):
        assert f"`{outcome}`" in DOCS.read_text(), f"outcome {outcome} not documented"
    # every stage's series exists from the start (rate() needs it)
    assert {s.labels["stage"]: s.value for s in samples["elastico_job_errors_total"]} == {
        st: 0.0 for st in JOB_ERROR_STAGES}


def test_the_served_placer_exposes_every_documented_metric_with_its_type_and_labels():
    documented = _documented_metrics()
    assert {"elastico_round_duration_seconds", "elastico_round_jobs", "elastico_gpu_allocation",
            "elastico_placer_predictor_fallbacks_total", "elastico_rpc_total"} <= set(documented)
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "serve", "placer", "--port", "0",
                             "--plaintext", "--metrics-port", "0", "--grace-s", "5"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", OTEL_SDK_DISABLED="true"))
    try:
        port = url = None
        for line in proc.stderr:
            m = re.search(r"listening on .*:(\d+) ", line)
            port = int(m.group(1)) if m else port
            m = re.search(r"metrics on (http://\S+/metrics)", line)
            if m:
                url = m.group(1)
                break
        assert port and url, "the placer did not start"
        jobs = [ActiveJob(_job(i, share=0.25)) for i in range(8)]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            resp = placer_pb2_grpc.PlacerServiceStub(ch).RunRound(_request(jobs), timeout=120)
        with urllib.request.urlopen(url, timeout=30) as r:
            families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    samples = _check_exposed(documented, families)
    # the exposed values are this round's
    placed = sum(d.status == "placed" for d in resp.decisions)
    (jobs_placed,) = [s.value for s in samples["elastico_round_jobs"]
                      if s.labels["status"] == "placed"]
    assert jobs_placed == placed
    booked = sum(len(d.placement.gpu_indices) * d.placement.gpu_share for d in resp.decisions
                 if d.HasField("placement"))
    assert samples["elastico_gpu_allocation"][0].value == pytest.approx(booked / 4)
    prices = {s.labels["resource"]: s.value for s in samples["elastico_pricing_price"]}
    assert prices == dict(zip(resp.resource_names, resp.prices))
    (ok,) = [s.value for s in samples["elastico_rpc_total"]
             if s.labels["method"] == "/elastico.v1.PlacerService/RunRound"
             and s.labels["code"] == "OK"]
    assert ok == 1
    assert [s.value for s in samples["elastico_round_duration_seconds_count"]] == [1]
    assert len(ROUND_BUCKETS_S) + 1 == len(samples["elastico_round_duration_seconds_bucket"])


def test_utilization_leaves_out_unknown_jobs_and_reports_their_allocation_apart():
    # two jobs on their own GPUs: one profiled (SM activity a), one with no solo profile yet
    # (booked at the worst case, gpu_activity 1).  Utilization counts only what is known:
    # 1 GPU x a / 4 GPUs; the unknown job's booked 0.5 GPU is reported apart (0.5 / 4)
    # instead of as a GPU busy all the time
    from elastico.placer.policies.common import JobCatalog
    from elastico.placer.round import Decision, Status, unknown_job_ids
    from elastico.predictor.prior import worst_case_profile

    m = ServiceMetrics("placer")
    state = ClusterState(NODES)
    env = PolicyEnv(NODES, TM, AnalyticSlowdown())
    known, new = _job(0, share=1.0), _job(1, share=0.5)
    c1 = Configuration("g1", "V100M16", 1, 1.0, 16.0, 4.0, 16.0, 1.0)
    c2 = Configuration("h1", "V100M16", 1, 0.5, 8.0, 4.0, 16.0, 1.0)
    a1 = Assignment(known.id, (Part("n0", 0, (0,), 2.0, 8.0),), gpu_share=1.0,
                    gpu_mem_gib=16.0, config_name=c1.name, gpu_model="V100M16")
    a2 = Assignment(new.id, (Part("n0", 0, (1,), 2.0, 8.0),), gpu_share=0.5,
                    gpu_mem_gib=8.0, config_name=c2.name, gpu_model="V100M16")
    cat = JobCatalog(env)
    state.rebook(a1, cat.profile(known, c1), known.slowdown_bound)
    state.rebook(a2, worst_case_profile(cat.profile(new, c2)), new.slowdown_bound)
    assert unknown_job_ids(state) == {new.id}
    inp = RoundInput(0.0, NODES, ClusterState(NODES), [ActiveJob(known, c1), ActiveJob(new, c2)])
    res = RoundResult({known.id: Decision(known.id, Status.PLACED, c1, a1),
                       new.id: Decision(new.id, Status.PLACED, c2, a2)}, state)
    gpus = sum(n.num_gpus for n in NODES)
    m.observe_round(inp, res, unknown=unknown_job_ids(state))
    get = m.registry.get_sample_value
    a = state.profile(known.id).gpu_activity
    assert 0.0 < a < 1.0
    assert get("elastico_gpu_utilization") == pytest.approx(a / gpus)
    assert get("elastico_gpu_unknown_allocation") == pytest.approx(0.5 / gpus)
    # without the unknown ids (what it reported before): the worst case counted busy 100 %
    m2 = ServiceMetrics("placer")
    m2.observe_round(inp, res)
    assert m2.registry.get_sample_value("elastico_gpu_utilization") \
        == pytest.approx((a + 1.0) / gpus)
