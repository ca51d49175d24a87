"""Properties of the live loop under random sequences of what happens to a cluster (issue 18).

Events: pods created (a whole GPU; a quarter or half share, with and without
``gpu-memory-gib``; a 0.995 share; an elastic half-share training pod; 2 and 4 GPUs; a gang of
two 1-GPU pods and one of two 8-GPU pods), deleted or finished; a GPU turning unhealthy or
healthy again; a node NotReady or Ready; the placer restarted; every watch dropped, with or
without a compaction (410 Gone); an MPS control daemon dying (its restart failing) or coming
back; and ``tick``: a placer round, then kubelet starting the pods bound (Allocate through the
device plugin's socket, then Running).  After every event the safety invariants of
tests/live_cluster.py hold (a round never raises; no GPU share or memory over-committed; every
bound pod keeps its booking; the device plugin hands out what the placer booked; no MPS share
where the MPS daemon is down; fixed shapes booked as asked), and once the faults are cleared
and the cluster has settled, nothing waits silently and no whole-GPU pod waits beside a free GPU.

The cluster is real in process (tests/live_cluster.py: the kmock API server, the SchedulerLoop,
per node the inventory publisher, health watcher, MPS manager and the device plugin on its unix
socket over the simulated GPU backend).  Two nodes: ``node-a`` with 8 A100-40GB and ``node-b``
with 4 V100M16, each GPU with the memory NVML reports for it (39.39 and 15.78 GiB).

CI size: 40 examples of 8 to 24 events, derandomized (the same sequences every run) with no
example database, so a run is reproducible and independent of earlier runs.  The replays below
are the minimal failing sequences this search found on the code before issue 18's fixes
(commit d637338), one per failure class, run every time whatever the search draws.
"""

from __future__ import annotations

import pytest

pytest.importorskip("kmock")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from elastico.placer.kube import annotations as A  # noqa: E402
from live_cluster import LiveCluster, NodeSpec  # noqa: E402

NODES = [NodeSpec("node-a", "A100-40GB", 8, 39.39), NodeSpec("node-b", "V100M16", 4, 15.78)]
NODE_NAMES = [n.name for n in NODES]

LLM = {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-3-8B", A.LLM_REQUESTS: "512:128x1000",
       A.GPU_MODEL: "A100-40GB"}
#: the finalizer of an "llm-slow" pod (what kubelet's graceful termination stands for here)
DRAIN = "example.com/drain"

#: What a user asks (pod annotations); the "gang" kinds make two pods of one job.
KINDS = {
    "whole": {A.WORKLOAD: "service"},
    "quarter": {A.WORKLOAD: "service", A.GPU_FRACTION: "0.25"},
    "half": {A.WORKLOAD: "service", A.GPU_FRACTION: "0.5"},
    "half-mem": {A.WORKLOAD: "service", A.GPU_FRACTION: "0.5", A.GPU_MEMORY_GIB: "6"},
    "odd-share": {A.WORKLOAD: "service", A.GPU_FRACTION: "0.995"},
    "half-train": {A.WORKLOAD: "training", A.GPU_FRACTION: "0.5", A.WORK: "7200"},
    "two": {A.WORKLOAD: "training", A.GPUS: "2", A.WORK: "7200"},
    "four": {A.WORKLOAD: "service", A.GPUS: "4"},
    "gang": {A.WORKLOAD: "training", A.GANG_SIZE: "2", A.WORK: "7200"},
    "gang-2x8": {A.WORKLOAD: "training", A.GANG_SIZE: "2", A.GPUS: "8", A.WORK: "7200"},
    # offline LLM inference (low priority; Llama-3-8B fits the A100-40GB only); "-slow":
    # created with a finalizer, so an eviction leaves it terminating until "drain"
    "whole-a100": {A.WORKLOAD: "service", A.GPU_MODEL: "A100-40GB"},
    "llm": LLM,
    "llm-half": {**LLM, A.GPU_FRACTION: "0.5"},
    "llm-slow": LLM,
}

#: One event (module docstring); ticks and creations weigh more, as they make things happen.
EVENTS = st.one_of(
    st.tuples(st.just("tick")), st.tuples(st.just("tick")), st.tuples(st.just("tick")),
    st.tuples(st.just("create"), st.sampled_from(sorted(KINDS)), st.sampled_from([1000, 2000])),
    st.tuples(st.just("create"), st.sampled_from(sorted(KINDS)), st.sampled_from([1000, 2000])),
    st.tuples(st.just("delete"), st.integers(0, 63)),
    st.tuples(st.just("finish"), st.integers(0, 63)),
    st.tuples(st.just("gpu_health"), st.integers(0, 63), st.booleans()),
    st.tuples(st.just("gpu_health"), st.integers(0, 63), st.booleans()),
    st.tuples(st.just("node_ready"), st.sampled_from(NODE_NAMES), st.booleans()),
    st.tuples(st.just("restart_placer")),
    st.tuples(st.just("drop_watches"), st.booleans()),
    st.tuples(st.just("mps_daemon"), st.sampled_from(NODE_NAMES), st.booleans()),
)


def _pods(c: LiveCluster, running: bool = False) -> list[str]:
    """Names of the pods not finished (``running``: only those Running), sorted."""
    out = []
    for p in c.pods():
        phase = (p.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or running and phase != "Running":
            continue
        out.append(p["metadata"]["name"])
    return sorted(out)


def _gpu(c: LiveCluster, pick: int) -> tuple[str, int]:
    """The (node, GPU index) ``pick`` names: for an even ``pick``, one of the GPUs booked by
    a pod when there are any (where a health change matters most), else any GPU."""
    every = [(n, i) for n, a in sorted(c.agents.items()) for i in range(a.spec.gpus)]
    booked = set()
    for p in c.pods():
        b = c.booking(p)
        if b is not None:
            booked.update((b.node, i) for i in b.gpu_indices)
    pool = sorted(booked) if booked and pick % 2 == 0 else every
    return pool[(pick // 2) % len(pool)]


def apply(c: LiveCluster, event: tuple, gangs: list[int]) -> None:
    """Make ``event`` happen on ``c``; ``gangs[0]`` counts the gangs created (their label)."""
    what, *args = event
    if what == "tick":
        c.round()
        c.kubelet_step()
    elif what == "create":
        kind, user = args
        if kind.startswith("gang"):
            gangs[0] += 1
            for _ in range(2):
                c.create_pod(KINDS[kind], labels={A.JOB_LABEL: f"g{gangs[0]}"}, user=user)
        else:
            c.create_pod(KINDS[kind], user=user,
                         finalizers=[DRAIN] if kind.endswith("-slow") else None)
    elif what in ("delete", "finish"):
        names = _pods(c, running=what == "finish")
        if names:
            name = names[args[0] % len(names)]
            c.delete_pod(name) if what == "delete" else c.finish_pod(name)
    elif what == "gpu_health":
        pick, healthy = args
        node, gpu = _gpu(c, pick)
        c.agents[node].set_health(gpu, healthy)
    elif what == "node_ready":
        c.set_ready(*args)
    elif what == "restart_placer":
        c.restart_placer()
    elif what == "drop_watches":
        c.drop_watches(compact=args[0])
    elif what == "mps_daemon":
        node, alive = args
        c.agents[node].set_mps(alive)
    elif what == "advance":
        c.advance(args[0])
    elif what == "drain":
        c.drain()
    else:
        raise ValueError(f"unknown event {event!r}")


def run_events(events: list[tuple], unknown: bool = False, min_run_s: float = 300.0,
               nodes: list[NodeSpec] = NODES, apply_event=None) -> None:
    """A fresh cluster, then ``events`` one by one with the invariants checked after each,
    then :meth:`LiveCluster.settle`.  A failure names the step and the event.  ``unknown``:
    every job without a solo profile (issue 23's unknown-job rule on); ``min_run_s``: the
    placer's minimum guaranteed run of an offline LLM inference pod; ``nodes``: the cluster;
    ``apply_event(c, event, gangs)``: what makes an event happen (default :func:`apply`)."""
    c = LiveCluster(nodes, unknown=unknown, min_run_s=min_run_s)
    gangs = [0]
    where = "at the start"
    try:
        c.check()
        for i, ev in enumerate(events):
            where = f"after event {i} {ev}"
            (apply_event or apply)(c, ev, gangs)
            c.check()
        where = f"settling after the {len(events)} events"
        c.settle()
    except AssertionError as e:
        raise type(e)(f"{where}: {e}") from None
    finally:
        c.close()


@settings(max_examples=40, deadline=None, derandomize=True, database=None, print_blob=False,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(st.lists(EVENTS, min_size=8, max_size=24))
def test_live_cluster_invariants_hold_under_random_events(events):
    run_events(events)


#: Minimal failing sequences the search found on the code before issue 18's fixes (commit
#: d637338), by the class of issue 18 they show, with what they showed there.
REPLAYS = {
    # class 1 -- Violation2 at event 2: "the rebuilt book drops it: job 'default/p01': GPU 0 of
    # node-a is unhealthy"; then Violation1 at event 4: GPU-node-a-1 "over-committed: shares
    # sum to 2 (['default/p01@1', 'default/p02@1'])"
    "1-unhealthy-gpu-keeps-its-booking": [
        ("create", "four", 1000), ("tick",), ("gpu_health", 0, False),
        ("create", "whole", 1000), ("tick",)],
    # class 2 -- the round raises InvalidArgument "num_gpus: 16 is not allowed (must be an
    # integer in 1..8 ...)" from _place_gangs, and the 1-GPU bystander is never scheduled
    "2-a-gang-error-stops-no-round": [
        ("create", "gang-2x8", 1000), ("create", "whole", 2000), ("tick",)],
    # class 3 -- Violation4: "booked a 0.75 MPS share on node-b while its MPS control daemon
    # is down", and the device plugin handed it out (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75)
    "3-no-mps-share-while-the-daemon-is-down": [
        ("create", "two", 1000), ("create", "two", 1000), ("create", "two", 1000),
        ("create", "two", 1000), ("tick",), ("tick",), ("tick",), ("tick",),
        ("mps_daemon", "node-b", False), ("create", "half-train", 1000),
        ("create", "half-train", 1000), ("create", "half-train", 1000), ("tick",), ("tick",)],
    # classes 4 and 6 -- Violation5: "default/p01: asked 1 GPU(s) at 0.5 (a fixed shape),
    # booked 1 at 1 (A100-40GB x1 @1.00)"
    "6-a-service-keeps-its-share": [("create", "half", 1000), ("tick",)],
}


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_live_cluster_replay(name):
    run_events(REPLAYS[name])


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_live_cluster_replay_with_every_job_unknown(name):
    run_events(REPLAYS[name], unknown=True)


@settings(max_examples=10, deadline=None, derandomize=True, database=None, print_blob=False,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(st.lists(EVENTS, min_size=8, max_size=24))
def test_live_cluster_invariants_hold_with_every_job_unknown(events):
    run_events(events, unknown=True)


def test_the_invariants_see_a_double_booked_gpu_and_an_allocation_that_differs():
    """The checker itself, on a healthy cluster: one whole-GPU pod bound and started, then a
    second pod given a copy of its booking (a reservation on the same GPU) and the device
    plugin's answer recorded with another GPU and an MPS limit -- invariants 1 and 3 must
    name both, with the values worked out here."""
    c = LiveCluster(NODES)
    try:
        first = c.create_pod(KINDS["whole"], user=1000)
        c.round()
        assert c.kubelet_step() == 1
        c.check()
        ann = next(p for p in c.pods() if p["metadata"]["name"] == first)["metadata"]["annotations"]
        gpu = ann[A.GPU_UUIDS]
        assert "," not in gpu and gpu.startswith("GPU-node-")
        second = c.create_pod(KINDS["whole"], user=1000)
        c.core.patch_namespaced_pod(second, "default", {"metadata": {"annotations": {
            k: ann[k] for k in A.DECISION_KEYS if k in ann}}})
        al = c.rec.allocations[f"default/{first}"]
        other = "GPU-node-b-3" if gpu != "GPU-node-b-3" else "GPU-node-b-2"
        al.envs = {**al.envs, "NVIDIA_VISIBLE_DEVICES": other,
                   "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
        bad = c.violations()
        assert (1, f"GPU {gpu} over-committed: shares sum to 2 "
                   f"(['default/{first}@1', 'default/{second}@1'])") in bad
        assert (3, f"default/{first}: device plugin gave GPUs ['{other}'], booking ['{gpu}'], "
                   f"annotation {gpu}") in bad
        assert (3, f"default/{first}: a whole-GPU booking given MPS limits 50, None") in bad
        assert {n for n, _ in bad} == {1, 3}
    finally:
        c.close()


#: Events of the priority search (issue 24): the cluster fills with offline LLM inference
#: pods (low priority; some terminate slowly), pods of normal priority arrive, time passes
#: (past and short of the minimum guaranteed run), terminating pods drain, the placer
#: restarts (it must rebuild who is low priority from the pods), GPUs fail and recover.
#: A small cluster (2 A100-40GB, 2 V100M16), so that a few pods fill it and preemption happens.
PRIORITY_NODES = [NodeSpec("node-a", "A100-40GB", 2, 39.39), NodeSpec("node-b", "V100M16", 2, 15.78)]
PRIORITY_EVENTS = st.one_of(
    st.tuples(st.just("tick")), st.tuples(st.just("tick")), st.tuples(st.just("tick")),
    st.tuples(st.just("tick")),
    st.tuples(st.just("create"), st.sampled_from(["llm", "llm", "llm-half", "llm-slow"]),
              st.sampled_from([1000, 2000])),
    st.tuples(st.just("create"), st.sampled_from(["llm", "llm", "llm-half", "llm-slow"]),
              st.sampled_from([1000, 2000])),
    st.tuples(st.just("create"), st.sampled_from(["whole", "whole-a100", "whole-a100", "two",
                                                  "half-train", "gang"]), st.just(1000)),
    st.tuples(st.just("advance"), st.sampled_from([100.0, 200.0, 300.0])),
    st.tuples(st.just("advance"), st.sampled_from([300.0, 600.0])),
    st.tuples(st.just("drain")),
    st.tuples(st.just("delete"), st.integers(0, 63)),
    st.tuples(st.just("finish"), st.integers(0, 63)),
    st.tuples(st.just("gpu_health"), st.integers(0, 63), st.booleans()),
    st.tuples(st.just("restart_placer")),
    st.tuples(st.just("drop_watches"), st.booleans()),
)


@st.composite
def priority_runs(draw):
    """A random run around the scenario preemption needs (the A100s filled with LLM pods that
    start, time past their guarantee, then a pod of normal priority), with random events
    (faults, restarts, deletions, drains, more pods and time) before, between and after."""
    some = lambda lo, hi: draw(st.lists(PRIORITY_EVENTS, min_size=lo, max_size=hi))  # noqa: E731
    fill = [("create", draw(st.sampled_from(["llm", "llm-slow", "llm-half"])),
             draw(st.sampled_from([1000, 2000]))) for _ in range(draw(st.integers(2, 4)))]
    late = ("create", draw(st.sampled_from(["whole-a100", "two", "whole", "gang"])), 1000)
    return (some(0, 6) + fill + [("tick",)] * 3 + some(0, 8)
            + [("advance", draw(st.sampled_from([300.0, 600.0]))), late] + some(2, 10)
            + [("tick",)] * 2)


@settings(max_examples=20, deadline=None, derandomize=True, database=None, print_blob=False,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(priority_runs())
def test_live_priority_invariants_hold_under_random_events(events):
    run_events(events, min_run_s=300.0, nodes=PRIORITY_NODES)


#: The A100 node full of LLM pods; a whole-A100 service arrives: it waits until the LLM
#: pods' guarantee ends, then one LLM pod is evicted (once; "llm-slow": it terminates over
#: rounds, the service waits meanwhile), the placer restarts in between, and the service is
#: bound once the pod is gone.
PRIORITY_REPLAYS = {
    "fill-then-preempt": [("create", "llm", 1000)] * 8 + [("tick",)] * 9
    + [("advance", 200.0), ("create", "whole-a100", 1000), ("tick",), ("tick",),
       ("restart_placer",), ("advance", 100.0), ("tick",), ("tick",), ("tick",)],
    # found by the priority search: a victim whose GPU turned unhealthy could not be booked
    # back when its eviction did not make room (Infeasible "GPU 0 of node-a is unhealthy"
    # from the priority rule's undo: the round raised, invariant 0)
    "unhealthy-victim-booked-back": [
        ("create", "llm", 1000), ("tick",), ("finish", 0), ("tick",), ("tick",), ("tick",),
        ("create", "llm", 1000), ("create", "llm", 1000), ("create", "llm", 1000), ("tick",),
        ("tick",), ("tick",), ("create", "llm", 1000), ("tick",), ("finish", 29), ("tick",),
        ("gpu_health", 48, False), ("tick",), ("drain",), ("tick",), ("advance", 300.0),
        ("create", "whole-a100", 1000), ("tick",), ("restart_placer",),
        ("create", "whole-a100", 1000), ("restart_placer",), ("tick",), ("tick",), ("tick",)],
    "slow-termination": [("create", "llm-slow", 1000)] * 8 + [("tick",)] * 9
    + [("advance", 300.0), ("create", "whole-a100", 1000), ("tick",), ("tick",), ("tick",),
       ("drain",), ("tick",), ("tick",)],
}


@pytest.mark.parametrize("name", sorted(PRIORITY_REPLAYS))
def test_live_priority_replay(name):
    run_events(PRIORITY_REPLAYS[name],
               nodes=PRIORITY_NODES if name == "unhealthy-victim-booked-back" else NODES)


def test_the_fill_then_preempt_replay_evicts_exactly_one_llm_pod():
    """The replay's outcome, worked by hand: 8 LLM pods on the 8 A100s; the 9th pod (a
    whole-A100 service) arrives at +200 s: no eviction until the LLM pods have run 300 s,
    then exactly one, and the service is bound on an A100."""
    c = LiveCluster(NODES)
    try:
        gangs = [0]
        events = PRIORITY_REPLAYS["fill-then-preempt"]
        cut = events.index(("restart_placer",))
        for ev in events[:cut]:
            apply(c, ev, gangs)
            c.check()
        assert c.emu.server.evictions == []  # +200 s: within the guarantee
        for ev in events[cut:]:
            apply(c, ev, gangs)
            c.check()
        (victim,) = c.emu.server.evictions
        assert victim[1] in {f"p{i:02d}" for i in range(1, 9)}  # one of the LLM pods
        svc = next(p for p in c.pods() if p["metadata"]["name"] == "p09")
        b = c.booking(svc)
        assert svc["spec"].get("nodeName") == "node-a" and b.gpu_share == 1.0
        assert sum(1 for p in c.pods() if (p["metadata"].get("annotations") or {}).get(
            A.LLM_MODEL)) == 7
    finally:
        c.close()
