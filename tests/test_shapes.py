"""Shape families: Pareto pruning on hand-made sets, the requested shape at throughput 1.0 on
the reference GPU, GPU-model constraints, family sizes."""

from __future__ import annotations

import pytest

from elastico.errors import InvalidArgument
from elastico.model import WAIT, Configuration, Job, JobKind, Request
from elastico.shapes import (build_family, gpu_models_of, pareto_prune,
                             requested_configuration)
from elastico.perf.throughput import REFERENCE_GPU, ThroughputModel
from elastico.trace import read_nodes, sub_cluster

CLUSTER = {"V100M16": (8, 16.0), "T4": (4, 16.0), "P100": (2, 16.0), "V100M32": (8, 32.0)}


@pytest.fixture(scope="module")
def model():
    return ThroughputModel.bundled()


def cfg(name, gpus, x, model="V100M16", cpu=4.0, mem=8.0, gmem=16.0):
    return Configuration(name, model, 1 if gpus else 0, gpus, gmem, cpu, mem, x)


def job(kind=JobKind.TRAINING, n=1, share=1.0, models=frozenset(), jt="ResNet-50 (batch size 64)",
        cpu=8.0, mem=32.0):
    return Job(f"j-{kind.value}-{n}-{share}", kind, 0.0, 100.0,
               Request(n, share, cpu, mem, frozenset(models)), job_type=jt)


# --------------------------------------------------------------------------- pareto_prune

def test_prune_drops_dominated_keeps_wait_first():
    a = cfg("a", 0.5, 0.6)
    b = cfg("b", 1.0, 0.6)          # more GPU, same throughput: dominated by a
    c = cfg("c", 1.0, 1.0)          # more GPU, more throughput: kept
    d = cfg("d", 0.5, 0.5, cpu=8)   # more CPU, less throughput than a: dominated
    assert [x.name for x in pareto_prune([WAIT, a, b, c, d])] == ["wait", "a", "c"]


def test_prune_keeps_incomparable_and_other_models():
    a = cfg("a", 0.5, 0.6, cpu=8)
    b = cfg("b", 1.0, 0.6, cpu=2)            # more GPU but less CPU: incomparable
    t = cfg("t", 1.0, 0.1, model="T4")       # a T4 is a different resource
    assert [x.name for x in pareto_prune([WAIT, a, b, t])] == ["wait", "a", "b", "t"]


def test_prune_duplicates_keep_first_and_single_wait():
    a1, a2 = cfg("a1", 0.5, 0.6), cfg("a2", 0.5, 0.6)
    assert [x.name for x in pareto_prune([a1, WAIT, a2, WAIT])] == ["a1", "wait"]


def test_prune_gpu_memory_counts():
    small = cfg("small", 1.0, 1.0, gmem=8.0)
    big = cfg("big", 1.0, 1.0, gmem=16.0)
    assert [x.name for x in pareto_prune([big, small])] == ["small"]


# --------------------------------------------------------------------------- requested shape

def test_requested_shape_is_one_on_reference(model):
    for j in (job(), job(n=4), job(JobKind.INFERENCE, share=0.3), job(JobKind.SERVICE, share=0.47)):
        c = requested_configuration(j, REFERENCE_GPU, 16.0, whole_gpus=False, model=model)
        assert c.throughput == pytest.approx(1.0)
        assert (c.num_gpus, c.gpu_share) == (j.request.num_gpus, j.request.gpu_share)
        assert c.gpu_mem_gib == pytest.approx(16.0 * j.request.gpu_share)
        assert c.name == f"V100M16 x{j.request.num_gpus} @{j.request.gpu_share:.2f}"


def test_whole_gpus_rounds_sharing_pod_up(model):
    j = job(JobKind.INFERENCE, share=0.25)
    c = requested_configuration(j, "V100M32", 32.0, whole_gpus=True, model=model)
    assert (c.gpu_share, c.gpu_mem_gib, c.name) == (1.0, 32.0, "V100M32 x1 @1.00")
    p = model.parallel_fraction(j.job_type)
    assert c.throughput == pytest.approx(p / 0.25 + 1 - p)  # 1 / share_speed(0.25)


def test_requested_shape_on_t4_is_the_training_models_speed(model):
    # ResNet-50 batch size 64 on a T4: the per-job roofline (phi = 0, bandwidth-bound; worked
    # by hand in tests/test_training_speed.py): 1.1388 steps/s over its measured V100 4.39477 =
    # 0.2591; the configuration says where each factor comes from
    c = requested_configuration(job(), "T4", 16.0, whole_gpus=False, model=model)
    assert c.throughput == pytest.approx(1.13879 / 4.394774823323071, rel=1e-4)
    assert [(p.factor, p.kind, p.source) for p in c.provenance] == [
        ("speed", "model", "roofline-per-job")]
    c = requested_configuration(job(), "V100M32", 32.0, whole_gpus=False, model=model)
    assert c.throughput == 1.0
    assert [(p.factor, p.kind, p.source) for p in c.provenance] == [("speed", "measured", "gavel")]


# --------------------------------------------------------------------------- build_family

@pytest.mark.parametrize("kind,n,share", [
    (JobKind.TRAINING, 1, 1.0), (JobKind.TRAINING, 2, 1.0), (JobKind.TRAINING, 8, 1.0),
    (JobKind.INFERENCE, 1, 0.3), (JobKind.SERVICE, 1, 0.47), (JobKind.SERVICE, 4, 1.0)])
def test_family_invariants(model, kind, n, share):
    j = job(kind, n, share)
    fam = build_family(j, CLUSTER, model, max_configs=12)
    assert fam.configs[0] is WAIT
    assert 2 <= len(fam) <= 12
    names = [c.name for c in fam.configs]
    assert len(set(names)) == len(names)
    ref = [c for c in fam.configs if c.name == f"V100M16 x{n} @{share:.2f}"]
    assert len(ref) == 1 and ref[0].throughput == pytest.approx(1.0)
    # pruned: nothing in the family dominates anything else
    assert pareto_prune(fam.configs) == list(fam.configs)
    for c in fam.configs[1:]:
        size = CLUSTER[c.gpu_model][0]
        # inference replicas need not share a node: only gangs are bounded by the node size
        assert c.num_gpus <= size or kind is JobKind.INFERENCE
        assert c.gpu_mem_gib == pytest.approx(16.0 * share)
        if kind is JobKind.TRAINING:
            assert c.num_gpus in (1, 2, 4, 8) and c.num_gpus <= 2 * n
        if kind is JobKind.INFERENCE:
            assert c.num_gpus <= n  # MAX_REPLICAS_UP = 1: never more replicas than asked
    if kind is JobKind.INFERENCE:
        assert max(c.num_gpus for c in fam.configs[1:]) == n
    if kind is JobKind.SERVICE:
        assert {(c.num_gpus, c.gpu_share) for c in fam.configs[1:]} == {(n, share)}
    elif kind is JobKind.TRAINING:
        assert len(fam) == 12  # training families have more than 12 Pareto configs here


def test_family_respects_gpu_model_constraint(model):
    j = job(models={"T4", "P100"})
    fam = build_family(j, CLUSTER, model)
    assert {c.gpu_model for c in fam.configs[1:]} == {"T4", "P100"}
    # requested shape is on every allowed model
    assert {c.name for c in fam.configs} >= {"T4 x1 @1.00", "P100 x1 @1.00"}


def test_family_skips_models_too_small(model):
    fam = build_family(job(n=4), CLUSTER, model)
    assert {c.gpu_model for c in fam.configs[1:]} == {"V100M16", "T4", "V100M32"}
    with pytest.raises(InvalidArgument, match="fits no GPU model"):
        build_family(job(n=8, models={"T4"}), CLUSTER, model)


def test_training_family_scales_cpu_with_compute(model):
    j = job(cpu=8.0, mem=32.0)
    fam = build_family(j, {"V100M16": (8, 16.0)}, model, max_configs=32)
    by = {c.name: c for c in fam.configs}
    assert (by["V100M16 x1 @0.50"].cpu, by["V100M16 x1 @0.50"].mem_gib) == (4.0, 16.0)
    assert (by["V100M16 x2 @1.00"].cpu, by["V100M16 x2 @1.00"].mem_gib) == (16.0, 64.0)
    keys = [(c.gpus_total, c.throughput) for c in fam.configs[1:]]
    assert keys == sorted(keys)  # one model: ordered by GPUs, then throughput


def test_bad_family_arguments(model):
    with pytest.raises(InvalidArgument, match="max_configs"):
        build_family(job(), CLUSTER, model, max_configs=1)
    with pytest.raises(InvalidArgument, match="job_type"):
        build_family(job(jt="nope"), CLUSTER, model)
    with pytest.raises(InvalidArgument, match="num_gpus"):
        build_family(Job("cpu", JobKind.SERVICE, 0, 1, Request(0, 0.0, 1, 1), job_type="A3C"),
                     CLUSTER, model)


def test_gpu_models_of_trace_sub_cluster():
    gm = gpu_models_of(sub_cluster(read_nodes(), 512))
    assert gm["G2"] == (8, 16.0) and gm["V100M32"] == (8, 32.0) and gm["P100"] == (2, 16.0)
