"""MIG-mode GPUs as a pricing pool of their own (elastico/model.py, docs/pricing.md): a node's
labelled MIG-mode GPUs count in ``gpu:<model>:mig``, a MIG instance draws on that pool, and
with ``PolicyEnv(mig_pools=True)`` the ``elastico`` policy's priced totals fit each pool -- with
one pool per model (the default) the prices may sell MIG instances on GPUs that cannot host
one.  Expected values are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.model import MIG_GPUS_LABEL, mig_gpus_of
from elastico.model import Job, JobKind, Node, Request, ResourceSpace, capacity_of, resource_space_for
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.round import ActiveJob, RoundInput, Status, run_round
from elastico.predictor import AnalyticSlowdown
from elastico.shapes import mig_configurations
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
R50 = "ResNet-50 (batch size 64)"


def a100(name: str, gpus: int, mig: int = 0) -> Node:
    labels = ((MIG_GPUS_LABEL, str(mig)),) if mig else ()
    return Node(name, "A100-40GB", gpus, 40.0, 64.0, 512.0, labels)


def v100(name: str) -> Node:
    return Node(name, "V100", 4, 16.0, 32.0, 256.0)


def test_layout_puts_mig_pools_after_the_models_and_before_cpu():
    s = ResourceSpace(("V100", "A100-40GB"), ("A100-40GB",))
    assert s.names == ("gpu:V100", "gpumem:V100", "gpu:A100-40GB", "gpumem:A100-40GB",
                       "gpu:A100-40GB:mig", "gpumem:A100-40GB:mig", "cpu", "mem")
    assert s.size == 8
    assert (s.gpu_index("A100-40GB"), s.gpu_index("A100-40GB", mig=True)) == (2, 4)
    assert (s.gpumem_index("A100-40GB", mig=True), s.cpu_index, s.mem_index) == (5, 6, 7)
    with pytest.raises(KeyError, match="MIG-mode GPU pools"):
        s.gpu_index("V100", mig=True)
    with pytest.raises(ValueError, match="not in gpu_models"):
        ResourceSpace(("V100",), ("A100-40GB",))
    with pytest.raises(ValueError, match="duplicated"):
        ResourceSpace(("A100-40GB",), ("A100-40GB", "A100-40GB"))


def test_capacity_counts_labelled_mig_gpus_in_their_own_pool():
    nodes = [a100("a0", 8, mig=3), a100("a1", 8), v100("v0")]
    plain = resource_space_for(nodes)
    assert plain.mig_models == ()
    # 16 A100s in one pool, as before
    np.testing.assert_array_equal(capacity_of(nodes, plain),
                                  [16, 640, 4, 64, 160, 1280])
    space = resource_space_for(nodes, mig=True)
    assert space.names[4:6] == ("gpu:A100-40GB:mig", "gpumem:A100-40GB:mig")
    # 13 normal-mode A100s (5 + 8), 3 in MIG mode; CPU and memory unchanged
    np.testing.assert_array_equal(capacity_of(nodes, space),
                                  [13, 520, 4, 64, 3, 120, 160, 1280])
    # a cluster without MIG labels gets no MIG pool even when asked for one
    assert resource_space_for([a100("a1", 8)], mig=True).mig_models == ()


def test_a_mig_instance_draws_on_the_mig_pool_and_an_mps_share_on_the_other():
    job = Job("i", JobKind.INFERENCE, 0.0, 100.0, Request(1, 0.5, 1.0, 2.0), job_type=R50)
    mig = mig_configurations(job, "A100-40GB", 40.0, MODEL)[0]
    space = ResourceSpace(("A100-40GB",), ("A100-40GB",))
    d = mig.demand(space)
    assert d[0] == d[1] == 0.0
    assert d[2] == pytest.approx(mig.num_gpus * mig.gpu_share) and d[2] > 0
    assert d[3] == pytest.approx(mig.num_gpus * mig.gpu_mem_gib) and d[3] > 0
    # without a MIG pool (a MIG-unaware space) the instance draws on its model's pool
    old = mig.demand(ResourceSpace(("A100-40GB",)))
    np.testing.assert_array_equal(old, [d[2], d[3], d[4], d[5]])


def test_elastico_prices_each_pool_within_its_own_capacity():
    # one node: GPU 0 in MIG mode, GPU 1 not.  Six small inference jobs whose families hold
    # both MIG instances and MPS shares of an A100; with one pool per model the prices could
    # sell MIG instances worth more than the one MIG-mode GPU
    nodes = [a100("a0", 2, mig=1)]
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown(), mig_pools=True)
    policy = make_policy("elastico", env)
    jobs = [ActiveJob(Job(f"j{i}", JobKind.INFERENCE, 0.0, 500.0 + 100 * i,
                          Request(1, 0.25, 1.0, 2.0), job_type=R50)) for i in range(6)]
    state = ClusterState(nodes, mig_gpus=mig_gpus_of(nodes), slowdown_model=AnalyticSlowdown())
    res = run_round(policy, RoundInput(0.0, nodes, state, jobs))
    names = res.resource_names
    assert names == ("gpu:A100-40GB", "gpumem:A100-40GB", "gpu:A100-40GB:mig",
                     "gpumem:A100-40GB:mig", "cpu", "mem")
    totals = dict(zip(names, res.pricing.totals))
    assert totals["gpu:A100-40GB"] <= 1.0 + 1e-9
    assert totals["gpu:A100-40GB:mig"] <= 1.0 + 1e-9
    # the pools are used: some job runs on a MIG instance, some on the normal-mode GPU
    placed = [d for d in res.decisions.values() if d.status is Status.PLACED]
    assert any(d.config.mig_profile for d in placed)
    assert any(d.config.mig_profile is None for d in placed)
    # a MIG-unaware ablation keeps one pool per model, and so does the default
    assert make_policy("elastico-no-rst", env).space.mig_models == ()
    default = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    assert make_policy("elastico", default).space.names == (
        "gpu:A100-40GB", "gpumem:A100-40GB", "cpu", "mem")
