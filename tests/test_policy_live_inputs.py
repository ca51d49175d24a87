"""What a live placer (one policy object serving many rounds, services/placer/server.py) must
survive that a trace replay never produces: a job id that comes back with another request or
job type, and one job in a round that fits no node."""

from __future__ import annotations

import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import POLICIES, PolicyEnv, make_policy
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
RESNET = "ResNet-50 (batch size 64)"
NODES = [Node("v0", "V100M16", 4, 16.0, 32.0, 256.0), Node("p0", "P100", 4, 16.0, 32.0, 256.0)]


def job(jid, models=(), kind=JobKind.TRAINING, job_type=RESNET, gpus=1):
    return Job(jid, kind, 0.0, 3600.0, Request(gpus, 1.0, 4.0, 16.0, frozenset(models)),
               job_type=job_type, slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


def round_of(policy, jobs, now=0.0):
    return run_round(policy, RoundInput(now, NODES, ClusterState(NODES),
                                        [ActiveJob(j) for j in jobs]))


def env(nodes, name):
    # mps-static with one replica per GPU (a replica is the whole GPU): these tests are about
    # live inputs, and a whole-GPU pod of 16 GiB never fits half a 16 GiB GPU
    # (tests/test_mps_static.py tests the replicas)
    return PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(),
                     mps_replicas=1 if name == "mps-static" else 2)


def policy(name):
    return make_policy(name, env(NODES, name))


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("kind", [JobKind.TRAINING, JobKind.SERVICE])
def test_a_job_id_back_with_other_gpu_models_gets_them(name, kind):
    # the same id restricted first to V100M16, then to P100 (a pod recreated under its name):
    # the second round must place it on the P100 node, not reuse the first request's shapes
    pol = policy(name)
    first = round_of(pol, [job("same", ["V100M16"], kind)])
    assert first.decisions["same"].status is Status.PLACED
    assert first.decisions["same"].config.gpu_model == "V100M16"
    second = round_of(pol, [job("same", ["P100"], kind)])
    assert second.decisions["same"].status is Status.PLACED
    assert second.decisions["same"].config.gpu_model == "P100"


def test_a_job_id_back_with_another_job_type_gets_its_throughputs():
    # after a ResNet-50 family was cached under the id, an A3C job with that id gets exactly
    # the family a fresh catalog builds for it (A3C scales worse: its 2-GPU configuration is
    # slower relative to 1 GPU, so the two families differ)
    pol = policy("elastico")
    resnet = pol.catalog.family(job("same", ["V100M16"]))
    a3c = pol.catalog.family(job("same", ["V100M16"], job_type="A3C"))
    fresh = policy("elastico").catalog.family(job("same", ["V100M16"], job_type="A3C"))
    as_list = lambda f: [(c.name, c.throughput) for c in f.configs]  # noqa: E731
    assert as_list(a3c) == as_list(fresh)
    assert as_list(a3c) != as_list(resnet)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_share_whose_memory_fits_one_model_only_is_placed_there(name):
    # a 0.9 share needs 0.9 x 16 = 14.4 GiB: more than a 12 GiB P100, less than a V100M16 --
    # the requested-shape policies raised for the whole round on the P100 instead of
    # skipping it
    nodes = [Node("p0", "P100", 4, 12.0, 32.0, 256.0), Node("v0", "V100M16", 4, 16.0, 32.0, 256.0)]
    pol = make_policy(name, env(nodes, name))
    j = Job("big", JobKind.INFERENCE, 0.0, 3600.0, Request(1, 0.9, 4.0, 16.0), job_type=RESNET)
    res = run_round(pol, RoundInput(0.0, nodes, ClusterState(nodes), [ActiveJob(j)]))
    d = res.decisions["big"]
    assert d.status is Status.PLACED, d
    # a shared P100 would need 14.4 GiB of its 12; a whole one (exclusive's shape) is fine
    assert d.config.gpu_model == "V100M16" or d.config.gpu_share == 1.0, d


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_one_job_that_fits_no_node_is_unplaceable_alone(name):
    # 'bad' may only use T4 (none here), 'wide' wants 8 GPUs on 4-GPU nodes: each gets its own
    # unplaceable decision, and the good job is placed in the same round
    res = round_of(policy(name), [job("good"), job("bad", ["T4"]), job("wide", gpus=8)])
    assert res.decisions["good"].status is Status.PLACED
    for jid in ("bad", "wide"):
        d = res.decisions[jid]
        assert d.status is Status.UNPLACEABLE, (jid, d)
        assert d.reason


@pytest.mark.parametrize("name", ["time-slicing", "fgd"])
def test_a_share_no_model_has_the_memory_for_says_so(name):
    # 0.9 x 16 = 14.4 GiB on 12 GiB P100s only: unplaceable, and the reason names the memory
    # (it said only "has 1 GPUs", which every node has)
    nodes = [Node("p0", "P100", 4, 12.0, 32.0, 256.0)]
    pol = make_policy(name, PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown()))
    j = Job("big", JobKind.INFERENCE, 0.0, 3600.0, Request(1, 0.9, 4.0, 16.0), job_type=RESNET)
    d = run_round(pol, RoundInput(0.0, nodes, ClusterState(nodes), [ActiveJob(j)])).decisions["big"]
    assert d.status is Status.UNPLACEABLE and "with 14.4 GiB of GPU memory each" in d.reason, d
