"""The pure parts of the Kubernetes loop: annotation validation, jobs from pods, decision
annotations, node inventory, and the book rebuilt from pods (no API server needed)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from elastico.errors import InvalidArgument
from elastico.model import JobKind
from elastico.placer.kube import annotations as A
from elastico.placer.kube.bookings import rebuild_book
from elastico.placer.kube.inventory import node_inventory
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.common import JobCatalog
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel

TM = ThroughputModel.bundled()
MODELS, TYPES = TM.gpu_models(), TM.job_types()


def parse(ann):
    return A.parse_pod_annotations(ann, gpu_models=MODELS, job_types=TYPES)


def quantity(s: str) -> Decimal:
    units = {"Gi": 1 << 30, "Mi": 1 << 20, "m": Decimal("0.001"), "": 1}
    for u, f in units.items():
        if u and s.endswith(u):
            return Decimal(s[: -len(u)]) * f
    return Decimal(s)


def test_defaults_are_the_documented_ones():
    s = parse({})
    assert (s.workload, s.gpus, s.gpu_fraction, s.gpu_memory_gib, s.gpu_models, s.shape_family,
            s.priority, s.slowdown_bound, s.work, s.job_type, s.gang_size) == (
        JobKind.TRAINING, 1, 1.0, None, frozenset(), "elastic", 1.0, 1.5, 3600.0,
        "ResNet-50 (batch size 64)", 1)
    assert parse({A.WORKLOAD: "service"}).slowdown_bound == 1.1


def test_valid_values_are_read_exactly():
    s = parse({A.WORKLOAD: "inference", A.GPU_FRACTION: "0.25", A.GPU_MEMORY_GIB: "4",
               A.GPU_MODEL: "A100-40GB, V100M16", A.PRIORITY: "2.5", A.SLOWDOWN_BOUND: "1.2",
               A.WORK: "1e4", A.JOB_TYPE: "LM (batch size 20)", A.GANG_SIZE: "1",
               "other.io/ignored": "x"})
    assert (s.workload, s.gpu_fraction, s.gpu_memory_gib, s.gpu_models, s.priority,
            s.slowdown_bound, s.work) == (JobKind.INFERENCE, 0.25, 4.0,
                                          frozenset({"A100-40GB", "V100M16"}), 2.5, 1.2, 1e4)


@pytest.mark.parametrize("key,value", [
    (A.GPU_FRACTION, "0"), (A.GPU_FRACTION, "-0.5"), (A.GPU_FRACTION, "1.5"),
    (A.GPU_FRACTION, "50m"), (A.GPU_FRACTION, "NaN"), (A.GPU_FRACTION, "inf"),
    (A.GPU_FRACTION, " 0.5"), (A.GPU_FRACTION, ""), (A.GPU_FRACTION, "0.995"),
    (A.GPU_FRACTION, "0.025"), (A.GPU_FRACTION, "0.005"), (A.GPU_MEMORY_GIB, "-1"),
    (A.GPU_MEMORY_GIB, "0"), (A.GPU_MEMORY_GIB, "1000"),
    (A.GPU_MEMORY_GIB, "8Gi"), (A.GPU_MODEL, "A100"), (A.GPU_MODEL, "V100"),
    (A.GPU_MODEL, "a10"), (A.GPU_MODEL, "A10,"), (A.GPUS, "0"), (A.GPUS, "1.5"),
    (A.GPUS, "65"), (A.PRIORITY, "0"), (A.PRIORITY, "1000001"), (A.SLOWDOWN_BOUND, "0.9"),
    (A.WORK, "0"),
    (A.WORK, "1h"), (A.JOB_TYPE, "ResNet"), (A.GANG_SIZE, "0"), (A.WORKLOAD, "Training"),
    (A.SHAPE_FAMILY, "stretchy"), ("elastico.io/gpu-fractoin", "0.5"),
    ("elastico.io/job", "g"),
])
def test_every_bad_value_names_its_field_and_value(key, value):
    with pytest.raises(InvalidArgument) as e:
        parse({key: value})
    assert e.value.field == key and e.value.value == value
    assert key in str(e.value) and repr(value) in str(e.value)


def test_several_gpus_cannot_share_and_memory_is_bounded_by_the_allowed_gpu_models():
    with pytest.raises(InvalidArgument, match="gpu-fraction"):
        parse({A.GPUS: "2", A.GPU_FRACTION: "0.5"})
    # memory is not tied to the share (issue 18 class 5): up to what the allowed models have
    # (elastico.hardware.GPU_MEMORY_GIB: V100M32 32 GiB, A100-80GB 80, the largest of the
    # catalogue the B200's 180)
    assert parse({A.GPU_FRACTION: "0.5", A.GPU_MEMORY_GIB: "10"}).gpu_memory_gib == 10.0
    assert parse({A.GPU_FRACTION: "0.25", A.GPU_MEMORY_GIB: "80"}).gpu_memory_gib == 80.0
    with pytest.raises(InvalidArgument, match=r"at most 32 .*V100M32"):
        parse({A.GPU_MODEL: "V100M16,V100M32", A.GPU_MEMORY_GIB: "33"})
    with pytest.raises(InvalidArgument, match="at most 80 .*A100-80GB"):
        parse({A.GPU_MODEL: "A100-80GB", A.GPU_MEMORY_GIB: "80.5"})
    assert parse({A.GPU_MEMORY_GIB: "120"}).gpu_memory_gib == 120.0   # an H200 or a B200
    with pytest.raises(InvalidArgument, match="at most 180 .*B200"):
        parse({A.GPU_MEMORY_GIB: "180.5"})
    for tiny in ("0", "0.0001"):   # below 1 MiB: the pinned limit would be 0M
        with pytest.raises(InvalidArgument, match="at least 1 MiB"):
            parse({A.GPU_MEMORY_GIB: tiny})
    # booked as enforced: whole MiB, rounded down (the pinned limit is written in MiB)
    assert parse({A.GPU_FRACTION: "0.5", A.GPU_MEMORY_GIB: "0.3"}).gpu_memory_gib == 307 / 1024
    # a share is exactly its whole percent, or refused (float noise of the decimal aside)
    assert parse({A.GPU_FRACTION: "0.29"}).gpu_fraction == 0.29
    with pytest.raises(InvalidArgument, match="gpu-fraction"):
        parse({A.GPU_FRACTION: "0.5000000049"})
    with pytest.raises(InvalidArgument, match="fixed"):
        parse({A.WORKLOAD: "service", A.SHAPE_FAMILY: "elastic"})


def test_job_group_prefers_the_label_then_the_controller_then_the_pod():
    meta = {"namespace": "ns", "name": "p", "labels": {A.JOB_LABEL: "g"},
            "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]}
    assert A.job_group({"metadata": meta}) == "ns/label/g"
    del meta["labels"]
    assert A.job_group({"metadata": meta}) == "ns/Job/j"
    del meta["ownerReferences"]
    assert A.job_group({"metadata": meta}) == "ns/pod/p"


def test_build_job_sums_a_gang_and_keeps_fixed_shapes_out_of_shape_transformation():
    s = parse({A.GPUS: "2", A.GANG_SIZE: "3"})
    j = A.build_job("ns/label/g", s, 3, 4.0, 16.0, 10.0)
    # 3 pods x 2 GPUs, 3 x 4 cores, 3 x 16 GiB; a gang keeps its requested shape
    assert (j.request.num_gpus, j.request.gpu_share, j.request.cpu, j.request.mem_gib,
            j.kind, j.arrival_s) == (6, 1.0, 12.0, 48.0, JobKind.SERVICE, 10.0)
    single = A.build_job("ns/p", parse({A.GPU_FRACTION: "0.5"}), 1, 2.0, 8.0, 0.0)
    assert single.kind is JobKind.TRAINING and single.request.gpu_share == 0.5
    fixed = A.build_job("ns/p", parse({A.SHAPE_FAMILY: "fixed"}), 1, 2.0, 8.0, 0.0)
    assert fixed.kind is JobKind.SERVICE and fixed.fixed_share
    # a live job's GPU memory comes from the GPU (Request.device_memory), or as named
    assert single.request.device_memory and single.request.gpu_mem_gib is None
    named = A.build_job("ns/p", parse({A.GPU_FRACTION: "0.25", A.GPU_MEMORY_GIB: "30"}), 1,
                        2.0, 8.0, 0.0)
    # every live job keeps its requested share (a bound pod cannot give back a whole GPU)
    svc = A.build_job("ns/p", parse({A.WORKLOAD: "service", A.GPU_FRACTION: "0.5"}), 1, 2.0,
                      8.0, 0.0)
    assert (named.request.gpu_mem_gib, named.fixed_share, svc.kind, svc.fixed_share,
            svc.request.gpu_share) == (30.0, True, JobKind.SERVICE, True, 0.5)


def booking(**kw):
    base = dict(job_id="ns/p", node="n1", gpu_indices=(1,), gpu_uuids=("GPU-b",), gpu_share=0.5,
                gpu_mem_gib=8.0, cpu=2.0, mem_gib=8.0, config_name="V100M16 x1 @0.50",
                gpu_model="V100M16", throughput=0.8, slowdown_bound=1.5,
                job_type="ResNet-50 (batch size 64)", kind="training", round_id="r/1/1",
                predicted_slowdown=1.25)
    base.update(kw)
    if "gpu_uuids" not in kw:  # the UUIDs of its GPUs on node() (the inventory's)
        base["gpu_uuids"] = tuple(f"GPU-{base['node']}-{g}" for g in base["gpu_indices"])
    return A.PodBooking(**base)


def test_decision_annotations_for_an_mps_share_and_a_mig_instance():
    ann = A.decision_annotations(booking())
    assert ann[A.MPS_ACTIVE_THREAD_PERCENTAGE] == "50" and ann[A.MPS_PINNED_MEM_LIMIT_GIB] == "8"
    assert ann[A.GPU_UUIDS] == "GPU-n1-1" and ann[A.PREDICTED_SLOWDOWN] == "1.2500"
    assert ann[A.MIG_PROFILE] is None and ann[A.MIG_START_SLOT] is None
    assert A.parse_booking({A.BOOKING: ann[A.BOOKING]}) == booking()
    mig = A.decision_annotations(booking(gpu_model="A100-40GB", mig_profile="3g.20gb",
                                         mig_starts=(4,), gpu_share=3 / 7, gpu_mem_gib=20.0))
    assert (mig[A.MIG_PROFILE], mig[A.MIG_START_SLOT]) == ("3g.20gb", "4")
    assert mig[A.MPS_ACTIVE_THREAD_PERCENTAGE] is None and mig[A.MPS_PINNED_MEM_LIMIT_GIB] is None
    # a share MPS cannot enforce is never rounded into a percentage (issue 18 class 6; it was
    # written as 1 % for a 0.4 % booking)
    with pytest.raises(InvalidArgument, match="booking.gpu_share"):
        A.decision_annotations(booking(gpu_share=0.004))
    assert A.decision_annotations(booking(gpu_share=0.29))[A.MPS_ACTIVE_THREAD_PERCENTAGE] == "29"


@pytest.mark.parametrize("raw", ["{", "[]", '{"node": "n1"}',
                                 json.dumps({**json.loads(A.decision_annotations(booking())[A.BOOKING]),
                                             "cpu": -1})])
def test_a_malformed_booking_is_an_error_naming_the_annotation(raw):
    with pytest.raises(InvalidArgument, match="elastico.io/booking"):
        A.parse_booking({A.BOOKING: raw})


def node(name="n1", *, models=("Tesla V100-SXM2-16GB",) * 4, ready="True", healthy=None,
         mig=None, raw=None, labels=None):
    inv = [{"index": i, "uuid": f"GPU-{name}-{i}", "model": m, "memory_gib": 16.0,
            "healthy": (healthy or {}).get(i, True), "mig_mode": (mig or {}).get(i, False)}
           for i, m in enumerate(models)]
    return {"metadata": {"name": name, "labels": labels or {"topology.kubernetes.io/zone": "z1"},
                         "annotations": {"elastico.io/gpu-inventory": raw if raw is not None
                                         else json.dumps(inv)}},
            "status": {"allocatable": {"cpu": "31500m", "memory": "128Gi"},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_node_inventory_maps_nvml_names_health_labels_and_allocatable():
    inv = node_inventory(node(healthy={2: False}), known_models=MODELS, quantity=quantity)
    n = inv.node
    assert (n.gpu_model, n.num_gpus, n.gpu_mem_gib, n.cpu, n.mem_gib, n.unhealthy_gpus) == (
        "V100M16", 4, 16.0, 31.5, 128.0, frozenset({2}))
    assert n.labels == (("topology.kubernetes.io/zone", "z1"),)
    assert inv.uuids == tuple(f"GPU-n1-{i}" for i in range(4))


def test_mig_mode_gpus_are_named_and_counted_on_the_node_for_the_policy():
    from elastico.model import MIG_GPUS_LABEL
    from elastico.model import capacity_of

    # GPUs 1 and 3 of four in MIG mode (not the first ones); a stale label on the Node object
    # is replaced by the count the node agent reports
    raw = node(models=("NVIDIA A100-SXM4-40GB",) * 4, mig={1: True, 3: True},
               labels={"topology.kubernetes.io/zone": "z1", MIG_GPUS_LABEL: "4"})
    inv = node_inventory(raw, known_models=MODELS, quantity=quantity)
    assert inv.mig_gpus == (1, 3)
    assert dict(inv.node.labels) == {"topology.kubernetes.io/zone": "z1", MIG_GPUS_LABEL: "2"}
    policy = make_policy("elastico", PolicyEnv(nodes=[inv.node], throughput=TM,
                                               slowdown=AnalyticSlowdown(), mig_pools=True))
    # 2 normal-mode GPUs of 16 GiB (this fixture's memory), 2 in MIG mode, priced apart
    assert list(capacity_of([inv.node], policy.space)[:4]) == [2, 32, 2, 32]
    assert policy.catalog.mig_models == frozenset({"A100-40GB"})
    # without MIG GPUs the label goes away
    plain = node_inventory(node(labels={MIG_GPUS_LABEL: "1"}), known_models=MODELS, quantity=quantity)
    assert MIG_GPUS_LABEL not in dict(plain.node.labels) and plain.mig_gpus == ()


@pytest.mark.parametrize("kw,why", [
    (dict(ready="False"), "not Ready"),
    (dict(raw="not json"), "invalid"),
    (dict(raw="[]"), "invalid"),
    (dict(models=("Tesla T4", "Tesla V100-SXM2-16GB")), "mixed"),
    (dict(models=("NVIDIA A100",)), "unknown"),
    (dict(models=("A100",)), "unknown"),
    (dict(mig={0: True}), "V100M16 has no MIG profiles"),
])
def test_a_node_without_a_usable_inventory_hosts_nothing(kw, why):
    out = node_inventory(node(**kw), known_models=MODELS, quantity=quantity)
    assert isinstance(out, str) and why in out


def pod(name, b=None, *, node_name=None, phase="Pending", deleting=False, created="2024-01-01T00:00:00Z"):
    meta = {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": created,
            "annotations": A.decision_annotations(b) if b else {}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    spec = {"schedulerName": "elastico"}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_the_book_holds_bound_reserved_and_terminating_pods_and_charges_conflicts_to_the_later():
    invs = [node_inventory(node(), known_models=MODELS, quantity=quantity)]
    whole = dict(gpu_share=1.0, gpu_mem_gib=16.0, config_name="V100M16 x1 @1.00", kind="service")
    pods = [
        pod("bound", booking(gpu_indices=(0,), gpu_uuids=("GPU-n1-0",), **whole), node_name="n1"),
        pod("terminating", booking(gpu_indices=(1,), **whole), node_name="n1", deleting=True),
        pod("reserved", booking(gpu_indices=(2,), **whole)),
        pod("later", booking(gpu_indices=(0,), **whole), node_name="n1",
            created="2024-01-01T00:00:01Z"),
        pod("done", booking(gpu_indices=(3,), **whole), node_name="n1", phase="Succeeded"),
        pod("elsewhere", booking(gpu_indices=(3,), node="gone", **whole)),
    ]
    catalog = JobCatalog(PolicyEnv(nodes=[invs[0].node], throughput=TM, slowdown=AnalyticSlowdown()))
    book = rebuild_book(invs, pods, slowdown_model=AnalyticSlowdown(), profile=catalog.profile)
    assert sorted(book.bookings) == ["ns/bound", "ns/reserved", "ns/terminating"]
    assert book.bookings["ns/reserved"][1] is False and book.bookings["ns/bound"][1] is True
    assert set(book.conflicts) == {"ns/later", "ns/elsewhere"}
    assert "not usable" in book.conflicts["ns/elsewhere"]
    # GPUs 0..2 are taken whole, GPU 3 (the Succeeded pod's) is free
    assert [book.state.free_share(0, g) for g in range(4)] == [0.0, 0.0, 0.0, 1.0]
    assert sorted(a.job.id for a in book.running) == ["ns/bound", "ns/reserved", "ns/terminating"]


def test_gpu_fraction_is_at_least_one_percent_exponents_allowed():
    # MPS limits active threads in whole percent: 1 % is the finest share (docs/annotations.md)
    assert parse({A.GPU_FRACTION: "0.01"}).gpu_fraction == 0.01
    assert parse({A.GPU_FRACTION: "1e-2"}).gpu_fraction == 0.01    # documented exponents
    assert parse({A.GPU_FRACTION: "25e-2"}).gpu_fraction == 0.25
    for raw in ("1e-9", "0.0099", "0.001"):
        with pytest.raises(InvalidArgument) as e:
            parse({A.GPU_FRACTION: raw})
        assert (e.value.field, e.value.value) == (A.GPU_FRACTION, raw)
        assert "[0.01, 1]" in e.value.allowed
