"""The ``elastico`` round is a pipeline of named stages (policies/pipeline.py): composed by
hand they give the policy's own round, and each stage's output is plain data one can read."""

from __future__ import annotations

import numpy as np

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.pipeline import (hold, place, price, record_changes, shape,
                                               value)
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.perf.throughput import ThroughputModel
from elastico.predictor import AnalyticSlowdown

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def v100(gpus=2):
    return [Node("n0", "V100M16", gpus, 16.0, 32.0, 128.0)]


def job(jid, kind=JobKind.TRAINING, arrival=0.0):
    return Job(jid, kind, arrival, 1000.0, Request(1, 1.0, 1.0, 2.0), job_type=JT,
               slowdown_bound=1.5)


def policy(nodes, **kw):
    return make_policy("elastico", PolicyEnv(nodes=nodes, throughput=MODEL,
                                             slowdown=AnalyticSlowdown(), **kw))


def test_stages_composed_by_hand_give_the_policys_round():
    # 2 V100s; a pending service (1 whole GPU) and two pending training jobs
    nodes = v100()
    jobs = [ActiveJob(job("svc", JobKind.SERVICE)), ActiveJob(job("a", arrival=1.0)),
            ActiveJob(job("b", arrival=2.0))]
    want = run_round(policy(nodes), RoundInput(0.0, nodes, ClusterState(nodes), jobs))

    pol = policy(nodes)
    state, mem = ClusterState(nodes), pol.memory
    held = hold(jobs, state, pol.capacity, pol.placing, mem.running, now=0.0,
                changed_at=mem.changed_at, dwell_s=300.0)
    # the service took one whole GPU off the capacity: [gpu, gpumem, cpu, mem] of 2 V100s
    assert list(held.decisions) == ["svc"] and held.decisions["svc"].status is Status.PLACED
    assert [a.job.id for a in held.jobs] == ["a", "b"]
    assert held.capacity[:2].tolist() == [1.0, 16.0]
    shapes, held = shape(held, state, pol.catalog, pol.space, mem.running)
    # CSR: job i owns rows offsets[i]:offsets[i+1], the first its wait; nobody runs yet
    assert shapes.offsets[0] == 0 and shapes.offsets[-1] == len(shapes.throughput)
    assert shapes.throughput[shapes.offsets[:-1]].tolist() == [0.0, 0.0]
    assert shapes.demand.shape == (len(shapes.throughput), pol.space.size)
    assert shapes.current.tolist() == [-1, -1]
    values = value(shapes, estimate=pol.remaining, utility=pol.utility_fn, restart_s=30.0)
    assert np.array_equal(values.charged, values.utility)  # nothing runs: nothing charged
    priced = price(shapes, values, held.capacity, mem.prices, pol.pricing)
    decisions = {**held.decisions, **place(shapes, values, priced, state, pol.placing)}
    record_changes(decisions, 0.0, mem.changed_at)

    assert decisions == want.decisions and list(decisions) == list(want.decisions)
    assert sorted(mem.changed_at) == sorted(j for j, d in decisions.items() if d.changed)


def test_hold_keeps_a_running_job_for_its_dwell_time():
    # restart 30 s x dwell factor 10 = 300 s: a job started at t=0 is not re-priced at
    # t=299 (it keeps its GPUs, its demand off the capacity) and is again at t=300
    nodes = v100()
    pol = policy(nodes)
    first = run_round(pol, RoundInput(0.0, nodes, ClusterState(nodes), [ActiveJob(job("a"))]))
    d = first.decisions["a"]
    assert d.status is Status.PLACED and pol.memory.changed_at == {"a": 0.0}
    running = [ActiveJob(job("a"), d.config)]
    mem = pol.memory
    for now, held_back in ((299.0, True), (300.0, False)):
        held = hold(running, first.state.copy(), pol.capacity, pol.placing, mem.running,
                    now=now, changed_at=mem.changed_at, dwell_s=300.0)
        assert ("a" in held.decisions) is held_back
        assert (not held.jobs) is held_back
        left = pol.capacity[0] - (d.config.num_gpus * d.config.gpu_share if held_back else 0.0)
        assert held.capacity[0] == left
