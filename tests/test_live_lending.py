"""MIG lending in the live loop under random sequences of events (tests/live_cluster.py).

The cluster: ``node-a`` with 2 A100-40GB in normal mode, ``node-m`` with 4 A100-40GB whose
home mode is MIG and whose agent follows the bookings' MIG mode (``--follow-mig-mode``), so
the placer lends it whole while A100 jobs wait that only whole GPUs serve, and takes it back
when it is empty and not needed or when MIG demand waits (elastico.placer.kube.lending).
Events: pods that want whole A100s (1, 2 and 4 GPUs: the 4-GPU one fits only a lent
``node-m``), pods a MIG instance serves (a quarter-share training pod, offline LLM
inference), deletions and completions, a GPU's health, ``node-m`` NotReady/Ready, the placer
restarted, the node agent of ``node-m`` restarted -- with or without ``--follow-mig-mode`` --,
the placer's ``elastico.io/mig-lending`` on ``node-m`` overwritten by hand to "every GPU lent"
(whatever runs there), dropped watches, and ``tick`` (a round, then kubelet's Allocate and start).

After every event the safety invariants of tests/live_cluster.py hold -- 1 (no GPU
over-committed), 2 (bound pods keep their bookings), 3 (the device plugin hands out what was
booked) and 8 (no GPU booked in both modes, and every allocated pod finds its GPUs in its
booking's mode: the device plugin's view, the mode included, equals the placer's) among them
--; once the faults are cleared and the cluster has settled, nothing waits silently.  Every
random sequence starts by lending ``node-m`` (checked, so the property is not vacuous), and
the hand-written sequences below also return it.

CI size: 20 examples of 8 to 20 random events after a start that lends ``node-m``, derandomized, no example database.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kmock")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from elastico.contract import MIG_LENDING  # noqa: E402
from elastico.placer.kube import annotations as A  # noqa: E402
from live_cluster import LiveCluster, NodeSpec  # noqa: E402
from test_live_properties import apply as apply_common  # noqa: E402
from test_live_properties import run_events as run_common  # noqa: E402

A100 = "A100-40GB"
NODES = [NodeSpec("node-a", A100, 2, 39.39), NodeSpec("node-m", A100, 4, 39.39, mig=True,
                                                      follow=True)]
KINDS = {
    "whole-a100": {A.WORKLOAD: "service", A.GPU_MODEL: A100},
    "two-a100": {A.WORKLOAD: "service", A.GPUS: "2", A.GPU_MODEL: A100},
    "four-a100": {A.WORKLOAD: "service", A.GPUS: "4", A.GPU_MODEL: A100},
    "small": {A.WORKLOAD: "training", A.GPU_FRACTION: "0.25", A.WORK: "7200"},
    "llm": {A.WORKLOAD: "inference", A.LLM_MODEL: "Llama-3-8B", A.LLM_REQUESTS: "512:128x1000",
            A.GPU_MODEL: A100},
}

EVENTS = st.one_of(
    st.tuples(st.just("tick")), st.tuples(st.just("tick")), st.tuples(st.just("tick")),
    st.tuples(st.just("make"), st.sampled_from(sorted(KINDS))),
    st.tuples(st.just("make"), st.sampled_from(sorted(KINDS))),
    st.tuples(st.just("delete"), st.integers(0, 63)),
    st.tuples(st.just("finish"), st.integers(0, 63)),
    st.tuples(st.just("gpu_health"), st.integers(0, 63), st.booleans()),
    st.tuples(st.just("node_ready"), st.just("node-m"), st.booleans()),
    st.tuples(st.just("restart_placer")),
    st.tuples(st.just("restart_agent"), st.booleans()),
    st.tuples(st.just("drop_watches"), st.booleans()),
    st.tuples(st.just("hand_lend")),
)


def apply(c: LiveCluster, event: tuple, gangs: list[int], seen: dict) -> None:
    what, *args = event
    if what == "make":
        c.create_pod(KINDS[args[0]])
    elif what == "restart_agent":
        c.restart_agent("node-m", follow=args[0])
    elif what == "hand_lend":  # someone writes the placer's annotation: every GPU lent
        c.core.patch_node("node-m", {"metadata": {"annotations": {
            MIG_LENDING: '{"lent":[0,1,2,3],"returning":[]}'}}},
            _content_type="application/merge-patch+json")
    else:
        apply_common(c, event, gangs)
    for n in c.nodes():  # what the placer has written on node-m over the run
        if n["metadata"]["name"] == "node-m":
            v = (n["metadata"].get("annotations") or {}).get(MIG_LENDING)
            seen["lent"] |= v is not None and '"lent":[]' not in v
            seen["returned"] |= seen["lent"] and (v is None or '"lent":[]' in v)


def run_events(events: list[tuple]) -> dict:
    """tests/test_live_properties.py's run (invariants after each event, then settle) with
    this module's events; returns whether ``node-m`` was seen lent and returned."""
    seen = {"lent": False, "returned": False}
    run_common(events, nodes=NODES, apply_event=lambda c, ev, gangs: apply(c, ev, gangs, seen))
    return seen


@settings(max_examples=20, deadline=None, derandomize=True, database=None, print_blob=False,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(st.lists(EVENTS, min_size=8, max_size=20))
def test_live_lending_invariants_hold_under_random_events(events):
    # every sequence starts where lending matters: node-a full, a 4-GPU job waiting (node-m
    # is lent at the second tick), then the random events
    seen = run_events(LENT + events)
    assert seen["lent"]


TICK = ("tick",)
LENT = [("make", "two-a100"), TICK, ("make", "four-a100"), TICK]


def test_a_lent_node_serves_whole_gpus_comes_home_and_serves_mig_again():
    # node-a's two GPUs are taken; a 4-GPU job waits -> node-m is lent, the job runs there on
    # whole GPUs (the agent switched them at Allocate); it finishes, a MIG job comes -> node-m
    # drains and comes home; the MIG job gets an instance (the agent switches back)
    seen = run_events([("make", "two-a100"), TICK, TICK, ("make", "four-a100"), TICK, TICK, TICK,
                       ("finish", 1), ("make", "small"), TICK, TICK, TICK])
    assert seen == {"lent": True, "returned": True}


def test_a_hand_written_lent_state_under_mig_pods_is_not_believed():
    # MIG pods run on node-m; the annotation is overwritten to "all lent": the placer keeps
    # the modes the agent reports there and says why (its log), books no whole GPU over an
    # instance (invariant 8), and the invariants hold throughout
    c = LiveCluster(NODES)
    seen = {"lent": False, "returned": False}
    try:
        for ev in [("make", "small"), ("make", "small"), TICK, TICK, ("hand_lend",),
                   ("make", "four-a100"), ("make", "two-a100"), TICK, TICK, TICK]:
            apply(c, ev, [0], seen)
            c.check()
        mig = {b.gpu_indices[0] for p in c.pods() if (b := c.booking(p)) and b.mig_profile}
        assert mig and all(b.node != "node-m" or not set(b.gpu_indices) & mig
                           for p in c.pods() if (b := c.booking(p)) and not b.mig_profile)
        assert "holds a MIG instance on lent GPU" in c.loop._lending_notes["node-m"]
    finally:
        c.close()


def test_an_agent_restarted_without_following_is_not_lent_and_nothing_breaks():
    seen = run_events([("make", "two-a100"), TICK, ("restart_agent", False), ("make", "four-a100"),
                       TICK, TICK, TICK, ("restart_agent", True), TICK, TICK, TICK])
    assert seen["lent"]  # lent once the agent follows again


def test_invariant_8_sees_a_gpu_in_the_wrong_mode_and_one_booked_in_both_modes():
    # the check itself must be able to fail: a running whole-GPU pod whose GPU is put in MIG
    # mode under it, and a MIG booking copied onto that GPU
    c = LiveCluster(NODES)
    try:
        name = c.create_pod(KINDS["whole-a100"])
        c.round()
        c.kubelet_step()
        c.check()
        p = next(p for p in c.pods() if p["metadata"]["name"] == name)
        b = c.booking(p)
        assert b.node == "node-a" and b.mig_profile is None
        c.agents["node-a"].backend.set_mig_mode(b.gpu_indices[0], True)
        bad = c.violations()
        assert (8, f"default/{name}: booked GPU {b.gpu_indices[0]} of node-a whole (or an MPS "
                   "share), but the GPU is in MIG mode") in bad
        other = c.create_pod(KINDS["small"])
        mig = json.loads(p["metadata"]["annotations"][A.BOOKING])
        mig.update(job_id=f"default/{other}", mig_profile="1g.5gb", mig_starts=[0])
        c.core.patch_namespaced_pod(other, "default", {"metadata": {"annotations": {
            A.BOOKING: json.dumps(mig)}}}, _content_type="application/merge-patch+json")
        bad = c.violations()
        assert (8, f"GPU {b.gpu_uuids[0]} booked in both modes: MIG ['default/{other}'], normal "
                   f"['default/{name}']") in bad
    finally:
        c.close()
