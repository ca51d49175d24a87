"""Offline LLM inference is low priority in the live loop too (issue 24): the Kubernetes loop
runs the simulator's priority rule (elastico.placer.policies.priority, through make_policy)
and carries its evictions out the Kubernetes way -- a ``policy/v1`` Eviction of the bound
pod, a ``Preempted`` Event, the waiting job placed once the pod is gone -- after the pod's
minimum guaranteed run counted from its ``status.startTime``; and a restarted placer rebuilds
a booked pod as what its annotations declare (an LLM inference pod stays low priority).

Hand-worked timeline (one A100-80GB GPU, ``min_run_s`` 300): an LLM pod (Llama-3-8B, whole
GPU) starts at t0; a training pod asks the GPU.  At t0 + 100 it waits (200 s of the
guarantee left), nothing is evicted; at t0 + 300 the LLM pod is evicted once, the training
pod is not reserved yet (the GPU is the LLM pod's until it is gone), and in the next round it
is bound to GPU 0."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

pytest.importorskip("kmock")

from elastico.model import JobKind  # noqa: E402
from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.bookings import rebuild_book  # noqa: E402
from elastico.placer.kube.loop import LoopConfig  # noqa: E402
from elastico.placer.policies.priority import low_priority  # noqa: E402
from test_kube_loop import NS, core, emu, events, make_loop, make_node, make_pod, pod, step  # noqa: E402,F401

LLM = {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-3-8B", A.LLM_REQUESTS: "512:128x1000"}
TRAIN = {A.WORKLOAD: "training", A.WORK: "7200"}
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def start(core, name: str, t: float) -> None:
    """kubelet starts the pod at ``t``: Running, with its ``status.startTime``."""
    core.patch_namespaced_pod_status(name, NS, {"status": {"phase": "Running",
                                                           "startTime": rfc3339(t)}})


def reasons(core, name: str) -> list[str]:
    return [e["reason"] for e in events(core, name)]


def _loop(make_loop, clock, min_run_s=300.0, identity="placer-a"):
    return make_loop(config=LoopConfig(identity=identity, watch_timeout_s=5, min_run_s=min_run_s),
                     clock=clock)


def _llm_running(core, make_loop, clock):
    make_node(core, "a80", model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "infer", LLM)
    loop = _loop(make_loop, clock)
    assert step(loop, core).bound == [f"{NS}/infer"]
    start(core, "infer", T0)
    make_pod(core, "train", TRAIN)
    return loop


def test_a_training_pod_evicts_an_llm_pod_once_its_guaranteed_run_is_over(core, make_loop, emu):
    clock = Clock(T0)
    loop = _llm_running(core, make_loop, clock)
    clock.t = T0 + 100
    rep = step(loop, core)
    assert emu.server.evictions == [] and f"{NS}/train" in rep.waiting and not rep.reserved
    clock.t = T0 + 300
    rep = step(loop, core)
    assert emu.server.evictions == [(NS, "infer")]
    assert rep.reserved == [] and "preempting default/infer" in rep.waiting[f"{NS}/train"]
    assert rep.decisions[f"{NS}/train"].status.value == "waiting"
    (ev,) = [e for e in events(core, "infer") if e["reason"] == "Preempted"]
    assert "preempted by default/train" in ev["message"] and "300 s" in ev["message"]
    # the pod is gone (no finalizers): the next round binds the training pod on GPU 0
    clock.t = T0 + 302
    rep = step(loop, core)
    assert rep.bound == [f"{NS}/train"], rep.waiting
    b = A.parse_booking(pod(core, "train")["metadata"]["annotations"])
    assert b.gpu_indices == (0,) and b.gpu_share == 1.0
    assert emu.server.evictions == [(NS, "infer")]  # asked once


def test_a_restarted_placer_keeps_the_llm_pod_low_priority_and_its_start_time(core, make_loop,
                                                                              emu):
    clock = Clock(T0)
    first = _llm_running(core, make_loop, clock)
    clock.t = T0 + 10
    step(first, core)
    first.stop()
    # a fresh placer at t0 + 299: the guarantee counts from the pod's startTime, not from
    # the restart (else it would wait until t0 + 609)
    clock.t = T0 + 299
    loop = _loop(make_loop, clock, identity="placer-b")
    step(loop, core)
    assert emu.server.evictions == []
    clock.t = T0 + 300
    step(loop, core)
    assert emu.server.evictions == [(NS, "infer")]


def test_a_training_pod_does_not_evict_another_training_pod_and_an_llm_pod_that_has_not_started(
        core, make_loop, emu):
    clock = Clock(T0)
    for n in ("a", "b"):  # one bind per node per round: two nodes of one GPU
        make_node(core, n, model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "t1", TRAIN)
    make_pod(core, "infer", LLM)
    loop = _loop(make_loop, clock)
    assert sorted(step(loop, core).bound) == [f"{NS}/infer", f"{NS}/t1"]
    start(core, "t1", T0)  # the LLM pod is bound but kubelet has not started it
    make_pod(core, "t2", TRAIN)
    clock.t = T0 + 10_000
    rep = step(loop, core)
    assert emu.server.evictions == [] and f"{NS}/t2" in rep.waiting
    start(core, "infer", T0 + 10_000)
    clock.t = T0 + 10_299
    step(loop, core)
    assert emu.server.evictions == []
    clock.t = T0 + 10_300
    step(loop, core)
    assert emu.server.evictions == [(NS, "infer")]


def test_the_rebuilt_book_keeps_what_a_booked_pod_declares(core, make_loop):
    clock = Clock(T0)
    for n in ("a", "b"):
        make_node(core, n, model="A100-80GB", gpus=1, mem=80.0)
    make_pod(core, "infer", LLM)
    make_pod(core, "t1", TRAIN)
    loop = _loop(make_loop, clock)
    assert len(step(loop, core).bound) == 2
    pods = loop.pods.snapshot()
    invs = loop._inventory()
    book = rebuild_book(invs, pods.values(), slowdown_model=loop.slowdown,
                        profile=loop._catalog.profile, job_of=loop._pod_spec)
    jobs = {a.job.id: a.job for a in book.running}
    infer, t1 = jobs[f"{NS}/infer"], jobs[f"{NS}/t1"]
    assert infer.llm is not None and infer.llm.model.name == "Llama-3-8B"
    assert low_priority(infer) and not low_priority(t1)
    assert infer.job_type == "LLM Llama-3-8B" and t1.job_type == "ResNet-50 (batch size 64)"
    # both keep their place in every policy: a bound pod enters the round as a service
    assert infer.kind is JobKind.SERVICE and t1.kind is JobKind.SERVICE
    assert (infer.request.num_gpus, infer.request.gpu_share) == (1, 1.0)
    # without the pods' annotations (the old rebuild): a normal-priority service
    old = rebuild_book(invs, pods.values(), slowdown_model=loop.slowdown,
                       profile=loop._catalog.profile)
    assert not any(low_priority(a.job) for a in old.running)
