"""``mps-static``: the NVIDIA device plugin's MPS sharing (issue 24, deliverable 3).

Hand-worked placement: one node of two A100-40GB GPUs, N = 2 replicas per GPU, so four
replicas of 50 % threads and 20 GiB each.  Pods in arrival order: a (0.3 of a GPU), b (one
whole GPU), c (0.5), d (one whole GPU), e (two GPUs).  Each single-GPU pod takes one replica,
whatever it asked for -- a and b fill GPU 0 (best fit: the GPU already in use), c and d GPU 1
-- and e, which the plugin cannot give replicas (requests > 1 fail under MPS), needs two GPUs
with no replica in use: it waits.
"""

from __future__ import annotations

import math

import pytest

from elastico import llm_job as LJ
from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request, mps_percentage
from elastico.perf import llm as P
from elastico.perf.throughput import REFERENCE_GPU, ThroughputModel
from elastico.placer.placement import ClusterState
from elastico.placer.policies import POLICIES, PolicyEnv, make_policy
from elastico.placer.policies.mpsstatic import (MpsStaticPolicy, replica_memory_gib,
                                                replica_share)
from elastico.placer.round import ActiveJob, RoundInput, run_round
from elastico.predictor import AnalyticSlowdown, DEFAULT_KAPPA
from elastico.sim.simulator import simulate

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"


def a100_40(gpus=2):
    return [Node("n0", "A100-40GB", gpus, 40.0, 64.0, 512.0)]


def job(jid, share=1.0, gpus=1, arrival=0.0, work=1000.0, kind=JobKind.TRAINING):
    return Job(jid, kind, arrival, work, Request(gpus, share, 1.0, 2.0), job_type=JT)


def env(nodes, **kw):
    return PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), **kw)


def one_round(nodes, jobs, **kw):
    pol = make_policy("mps-static", env(nodes, **kw))
    return run_round(pol, RoundInput(0.0, nodes, ClusterState(nodes),
                                     [ActiveJob(j) for j in jobs])).decisions


def test_registered_without_mig_and_with_mps_sharing():
    assert POLICIES["mps-static"] is MpsStaticPolicy
    pol = make_policy("mps-static", env(a100_40()))
    assert pol.name == "mps-static" and pol.sharing == "mps" and pol.uses_mig is False


def test_hand_worked_placement_one_replica_per_single_gpu_pod():
    jobs = [job("a", 0.3, arrival=0), job("b", 1.0, arrival=1), job("c", 0.5, arrival=2),
            job("d", 1.0, arrival=3), job("e", 1.0, gpus=2, arrival=4)]
    d = one_round(a100_40(), jobs)
    where = {j: d[j].assignment.gpu_indices for j in "abcd"}
    assert where == {"a": (0,), "b": (0,), "c": (1,), "d": (1,)}
    for j in "abcd":
        c = d[j].config
        assert (c.num_gpus, c.gpu_share, c.gpu_mem_gib) == (1, 0.5, 20.0)
    assert d["e"].status.value == "waiting"
    # its speed is the throughput model's at 50 % of an A100-40GB, over its request's on the
    # reference GPU: a asked 0.3, so its replica is faster than its request; b asked 1.0
    for j, asked in (("a", 0.3), ("b", 1.0)):
        want = MODEL.solo(JT, "A100-40GB", 1, 0.5) / MODEL.solo(JT, REFERENCE_GPU, 1, asked)
        assert d[j].config.throughput == pytest.approx(want)


def test_memory_limit_is_memory_over_n_and_threads_100_over_n():
    assert replica_share(2) == 0.5 and replica_share(4) == 0.25 and replica_share(3) == 0.33
    assert replica_memory_gib(40.0, 2) == 20.0 and replica_memory_gib(80.0, 4) == 20.0
    # 80 / 3 = 26.666.. GiB = 27306.67 MiB -> 27306 MiB
    assert replica_memory_gib(80.0, 3) == 27306 / 1024
    d = one_round(a100_40(1), [job("a", 0.5)], mps_replicas=4)
    c = d["a"].config
    assert (c.gpu_share, c.gpu_mem_gib) == (0.25, 10.0) and mps_percentage(c.gpu_share) == 25


def test_a_pod_that_needs_more_than_a_replica_s_memory_is_refused_as_oom():
    # a whole-GPU trace pod needs the trace footprint, 16 GiB (elastico.shapes.FOOTPRINT_GIB);
    # four replicas of a 40 GiB A100 hold 10 GiB each: it would die of out-of-memory
    d = one_round(a100_40(1), [job("big", 1.0), job("small", 0.5)], mps_replicas=4)
    assert d["big"].status.value == "unplaceable"
    assert "out of memory" in d["big"].reason and "10 GiB" in d["big"].reason
    assert d["small"].status.value == "placed"  # 8 GiB fits a 10 GiB replica


def test_an_llm_that_does_not_fit_a_replica_is_refused_and_one_that_does_runs():
    nodes = [Node("n0", "A100-80GB", 1, 80.0, 64.0, 512.0)]
    w = LJ.requests_work([(512, 128, 100)])
    l8 = LJ.llm_job("l8", P.llm_model("Llama-3-8B"), w, reference_gpu="A100-80GB")
    big = LJ.llm_job("l70", P.llm_model("Llama-2-70B"), w, reference_gpu="A100-80GB", tp=2)
    # Llama-2-70B at TP 2 is a 2-GPU pod: whole GPUs; on a 1-GPU node it can never run
    d = one_round(nodes, [l8, big], mps_replicas=2)
    assert d["l8"].status.value == "placed"
    assert (d["l8"].config.gpu_share, d["l8"].config.gpu_mem_gib) == (0.5, 40.0)
    assert d["l70"].status.value != "placed"
    # 8B in fp16 is 16 GB of weights: no room in a 10 GiB replica (8 per GPU)
    d = one_round(nodes, [l8], mps_replicas=8)
    assert d["l8"].status.value == "unplaceable" and "out of memory" in d["l8"].reason


def test_bad_replicas_are_refused_naming_the_field():
    for bad in (0, 49, 2.0, True, "2"):
        with pytest.raises(InvalidArgument, match="mps_replicas"):
            env(a100_40(), mps_replicas=bad)


def test_two_pods_in_a_2_replica_gpu_run_at_50_percent_threads_under_mps_truth():
    # Two whole-GPU training pods, one GPU, N = 2: both in one GPU at 50 % threads, 20 GiB.
    # They run as MPS runs them (not time-sliced): the configuration's throughput at 0.5 over
    # the pair slowdown, here the analytic model as the truth: 1 + kappa x the partner's SM
    # activity p x speed(0.5) = p / (p / 0.5 + 1 - p) (docs/predictor.md).
    nodes = a100_40(1)
    pol = make_policy("mps-static", env(nodes))
    jobs = [job("a", 1.0, work=1000.0), job("b", 1.0, work=1000.0)]
    res = simulate(nodes, jobs, pol, truth=AnalyticSlowdown(), validate=True,
                   activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity)
    p = MODEL.parallel_fraction(JT)
    sigma = 1.0 + DEFAULT_KAPPA * p / (p / 0.5 + 1 - p)
    x = MODEL.solo(JT, "A100-40GB", 1, 0.5) / MODEL.solo(JT, REFERENCE_GPU, 1, 1.0)
    for r in res.records:
        assert r.status == "finished"
        assert r.finish_s == pytest.approx(1000.0 * sigma / x, rel=1e-9)
        assert r.max_slowdown == pytest.approx(sigma)
    assert math.isclose(res.metrics["gpu_allocation"], 1.0)
