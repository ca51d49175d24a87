"""MIG lending in the Kubernetes loop (elastico.placer.kube.lending; docs/mig.md "Lending").

First the pure view, by hand: the lent state on the Node (``elastico.io/mig-lending``), the
home MIG GPUs, and the round's MIG GPUs.  Then the loop against the API emulator
(tests/kube_emulator.py), the node agent stood for by hand-written inventories: an 8-GPU
MIG-mode A100 node is lent to a waiting 8-GPU job, a restarted placer reads the lent state
back and places the job there whole, the node drains and comes home when a job that a MIG
instance serves arrives, and the policy is never rebuilt on the way.
"""

from __future__ import annotations

import json

import pytest

from elastico.contract import MIG_FOLLOW, MIG_LENDING
from elastico.model import MIG_GPUS_LABEL, Node
from elastico.placer.kube.annotations import PodBooking
from elastico.placer.kube.inventory import NodeInventory
from elastico.placer.kube.lending import (Lent, after_switches, follows_mig_mode, lending_view,
                                          parse_lent)
from elastico.placer.policies.mig_lending import MigSwitch

A100 = "A100-40GB"


def inv(name: str, mig: tuple[int, ...], gpus: int = 8) -> NodeInventory:
    node = Node(name=name, gpu_model=A100, num_gpus=gpus, gpu_mem_gib=39.39, cpu=64.0,
                mem_gib=512.0, labels=((MIG_GPUS_LABEL, str(len(mig))),) if mig else ())
    return NodeInventory(node, tuple(f"GPU-{name}-{i}" for i in range(gpus)), mig)


def booking(node: str, gpus: tuple[int, ...], mig: str | None = None) -> PodBooking:
    return PodBooking(job_id="j", node=node, gpu_indices=gpus,
                      gpu_uuids=tuple(f"GPU-{node}-{g}" for g in gpus), gpu_share=1.0,
                      gpu_mem_gib=39.39, cpu=1.0, mem_gib=1.0, config_name="c", gpu_model=A100,
                      throughput=1.0, slowdown_bound=1.1, job_type="t", kind="training",
                      round_id="r", mig_profile=mig,
                      mig_starts=(0,) * len(gpus) if mig else ())


FOLLOWS = {MIG_FOLLOW: "true"}
ALL = tuple(range(8))


def lent_ann(lent=(), returning=()) -> dict:
    return {**FOLLOWS, MIG_LENDING: json.dumps({"lent": list(lent), "returning": list(returning)})}


# ---- the annotation

def test_parse_lent_reads_what_lent_annotation_writes_and_refuses_the_rest():
    assert parse_lent(None, 8) == Lent()
    value = Lent((0, 1), (5,)).annotation()
    assert value == '{"lent":[0,1],"returning":[5]}'
    assert parse_lent(value, 8) == Lent((0, 1), (5,))
    assert parse_lent('{"lent": [3, 1]}', 8) == Lent((1, 3), ())  # sorted; a list may be absent
    assert Lent().annotation() is None  # nothing lent: the annotation is removed
    for raw, said in (("nope", "not JSON"), ("[1]", "expected {"),
                      ('{"lent": [], "x": []}', "unknown key 'x' (the keys are 'lent' and 'returning')"),
                      ('{"lent": [8]}', "lent: 8 is not a GPU index in 0..7"),
                      ('{"lent": [true]}', "lent: True is not a GPU index"),
                      ('{"lent": [1.0]}', "lent: 1.0 is not a GPU index"),
                      ('{"returning": "0"}', "returning: 0 is not a list of GPU indices in 0..7"),
                      ('{"lent": [1, 1]}', "GPU 1 listed twice"),
                      ('{"lent": [1], "returning": [1]}', "GPU 1 listed twice")):
        with pytest.raises(ValueError) as e:
            parse_lent(raw, 8)
        assert said in str(e.value), (raw, str(e.value))


def test_only_true_means_the_agent_follows():
    assert follows_mig_mode({MIG_FOLLOW: "true"})
    for ann in ({MIG_FOLLOW: "false"}, {MIG_FOLLOW: "True"}, {}, None):
        assert not follows_mig_mode(ann)


# ---- the round's view

def test_an_unlent_mig_node_whose_agent_follows_may_be_lent():
    view = lending_view([inv("m", ALL), inv("n", ())], {"m": FOLLOWS, "n": FOLLOWS}, [])
    assert view.home == {0: ALL}  # n has no MIG GPU: nothing to lend
    assert [i.mig_gpus for i in view.invs] == [ALL, ()]
    assert dict(view.invs[0].node.labels)[MIG_GPUS_LABEL] == "8"
    assert view.lent == {"m": Lent()} and view.notes == {}


def test_lent_gpus_are_normal_in_the_round_while_the_home_stays():
    # lent, agent not switched yet (reports MIG), or switched (reports normal): the same view
    for reported in (ALL, ()):
        view = lending_view([inv("m", reported)], {"m": lent_ann(lent=ALL)}, [])
        assert view.home == {0: ALL} and view.invs[0].mig_gpus == ()
        # the policy offers and prices MIG by the home setting, as the simulator does
        assert dict(view.invs[0].node.labels)[MIG_GPUS_LABEL] == "8"
    # half lent: the other half MIG
    view = lending_view([inv("m", (4, 5, 6, 7))], {"m": lent_ann(lent=(0, 1, 2, 3))}, [])
    assert view.home == {0: ALL} and view.invs[0].mig_gpus == (4, 5, 6, 7)


def test_returning_gpus_are_mig_in_the_round_before_the_agent_switches_them_back():
    view = lending_view([inv("m", ())], {"m": lent_ann(returning=ALL)}, [])
    assert view.home == {0: ALL} and view.invs[0].mig_gpus == ALL
    assert view.lent == {"m": Lent((), ALL)}


def test_home_gpus_keep_their_real_indices():
    view = lending_view([inv("m", (6, 7))], {"m": lent_ann(lent=(5,))}, [])
    assert view.home == {0: (5, 6, 7)} and view.invs[0].mig_gpus == (6, 7)
    assert dict(view.invs[0].node.labels)[MIG_GPUS_LABEL] == "3"


def test_an_agent_that_does_not_follow_gets_the_reported_modes_and_a_note():
    ann = {**lent_ann(lent=ALL), MIG_FOLLOW: "false"}
    view = lending_view([inv("m", ALL)], {"m": ann}, [])
    assert view.home == {} and view.invs[0].mig_gpus == ALL and view.lent == {}
    assert "does not follow" in view.notes["m"]
    # no annotation, no note: an ordinary node whose MIG mode stays
    view = lending_view([inv("m", ALL)], {"m": {}}, [])
    assert view.home == {} and view.notes == {}


def test_a_booking_that_contradicts_the_lent_state_wins_and_the_node_is_left_alone():
    # a MIG instance booked on a GPU the annotation says is lent
    view = lending_view([inv("m", ALL)], {"m": lent_ann(lent=(0, 1))}, [booking("m", (1,), "1g.5gb")])
    assert view.home == {} and view.invs[0].mig_gpus == ALL
    assert "holds a MIG instance on lent GPU 1" in view.notes["m"]
    # a whole GPU booked on a home GPU the annotation does not lend (it says returning)
    view = lending_view([inv("m", ())], {"m": lent_ann(returning=ALL)}, [booking("m", (3,))])
    assert view.home == {} and view.invs[0].mig_gpus == ()
    assert "holds GPU 3 in normal mode, which is not lent" in view.notes["m"]
    # bookings that agree: a whole GPU on a lent one, a MIG instance on a home one
    view = lending_view([inv("m", (4, 5, 6, 7))], {"m": lent_ann(lent=(0, 1, 2, 3))},
                        [booking("m", (0, 1)), booking("m", (5,), "3g.20gb")])
    assert view.home == {0: ALL} and view.notes == {}


def test_an_invalid_annotation_is_noted_and_the_agents_report_used():
    view = lending_view([inv("m", ALL)], {"m": {**FOLLOWS, MIG_LENDING: "{"}}, [])
    assert view.home == {} and view.invs[0].mig_gpus == ALL
    assert f"invalid {MIG_LENDING} annotation (not JSON" in view.notes["m"]


def test_lending_off_leaves_every_inventory_as_reported():
    invs = [inv("m", ())]
    view = lending_view(invs, {"m": lent_ann(lent=ALL)}, [], enabled=False)
    assert view.invs == invs and view.home == {} and view.notes == {}


# ---- what the round writes

def sw(node: str, on: bool, gpus=ALL) -> MigSwitch:
    return MigSwitch(0, node, tuple(gpus), on, "why")


def test_after_switches_lends_returns_and_forgets_what_the_agent_switched_back():
    view = lending_view([inv("m", ALL), inv("k", ()), inv("r", (0, 1))],
                        {"m": FOLLOWS, "k": lent_ann(lent=ALL),
                         "r": lent_ann(returning=(2, 3), lent=(4,))}, [])
    out = after_switches(view, [sw("m", False), sw("k", True)],
                         {"m": ALL, "k": (), "r": (0, 1, 2)})
    assert out == {"m": Lent(ALL, ()),          # lent
                   "k": Lent((), ALL),          # returned; the agent still reports normal mode
                   "r": Lent((4,), (3,))}       # GPU 2 is MIG again: no longer returning
    assert out["m"].annotation() == '{"lent":[0,1,2,3,4,5,6,7],"returning":[]}'
    # a returned node the agent never switched (lent, no booking came): nothing to remember
    view = lending_view([inv("k", ALL)], {"k": lent_ann(lent=ALL)}, [])
    out = after_switches(view, [sw("k", True)], {"k": ALL})
    assert out == {"k": Lent()} and out["k"].annotation() is None
    # nothing changed: nothing to write
    assert after_switches(view, [], {"k": ALL}) == {}


# ---- the loop, against the API emulator

pytest.importorskip("kmock")
from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.loop import LoopConfig, SchedulerLoop  # noqa: E402
from elastico.runtime.metrics import LoopMetrics  # noqa: E402
from test_kube_loop import core, emu, make_pod, pod, step  # noqa: E402,F401 (fixtures)

NS = "default"
BIG = {A.WORKLOAD: "service", A.GPUS: "8", A.GPU_MODEL: A100}
SMALL = {A.WORKLOAD: "training", A.GPU_FRACTION: "0.25", A.WORK: "7200"}


def inventory(name: str, mig: bool) -> str:
    return json.dumps([{"index": i, "uuid": f"GPU-{name}-{i}", "model": A100, "memory_gib": 39.39,
                        "healthy": True, "mig_mode": mig} for i in range(8)])


def mig_node(core, name: str, *, follow: bool = True) -> None:
    core.create_node({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {},
                     "annotations": {"elastico.io/gpu-inventory": inventory(name, True),
                                     MIG_FOLLOW: "true" if follow else "false"}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})


def agent_reports(core, name: str, mig: bool) -> None:
    """The node agent republishing its inventory after switching every GPU's MIG mode."""
    core.patch_node(name, {"metadata": {"annotations": {"elastico.io/gpu-inventory":
                                                        inventory(name, mig)}}},
                    _content_type="application/merge-patch+json")


def lending_of(core, name: str) -> str | None:
    node = json.loads(core.read_node(name, _preload_content=False).data)
    return (node["metadata"].get("annotations") or {}).get(MIG_LENDING)


@pytest.fixture()
def loops(core):
    made = []

    def build(identity="placer-a", metrics=None, **cfg):
        loop = SchedulerLoop(core, config=LoopConfig(identity=identity, watch_timeout_s=5, **cfg),
                             metrics=metrics)
        loop.start()
        assert loop.wait_synced(10)
        made.append(loop)
        return loop
    yield build
    for lp in made:
        lp.stop()


def test_a_mig_node_is_lent_kept_across_a_restart_and_returned_for_mig_demand(core, loops):
    mig_node(core, "m")
    make_pod(core, "big", BIG)
    loop = loops()
    # round 1: the 8-GPU job waits (no normal-mode A100); the empty MIG node is lent to it
    rep = step(loop, core)
    assert rep.decisions["default/big"].status.value == "waiting"
    assert rep.mig_lending == {"m": '{"lent":[0,1,2,3,4,5,6,7],"returning":[]}'}
    assert "MIG node(s) m lent whole to the jobs waiting" in rep.waiting["default/big"]
    assert lending_of(core, "m") == rep.mig_lending["m"]
    # the placer restarts (or another replica leads): the Node says what is lent
    loop.stop()
    metrics = LoopMetrics()
    loop = loops("placer-b", metrics=metrics)
    rep = step(loop, core)
    b = A.parse_booking(pod(core, "big")["metadata"]["annotations"])
    assert (b.node, b.gpu_indices, b.mig_profile) == ("m", ALL, None)  # whole GPUs, normal mode
    assert rep.mig_lending == {}
    policy = loop._policy
    # the agent switched the GPUs at Allocate and says so; the job ends
    agent_reports(core, "m", False)
    core.delete_namespaced_pod("big", NS)
    # a job a MIG instance serves arrives: the lent node is kept for no one (it drains), and
    # comes home empty; the agent still reports normal mode, so the GPUs are "returning"
    make_pod(core, "small", SMALL)
    rep = step(loop, core)
    d = rep.decisions["default/small"]
    assert d.status.value == "waiting" and "kept for other jobs (a lent MIG node)" in d.reason
    assert rep.mig_lending == {"m": '{"lent":[],"returning":[0,1,2,3,4,5,6,7]}'}
    switched = {s.labels["to"]: s.value for s in metrics.mig_switches.collect()[0].samples
                if s.name.endswith("_total")}
    assert switched == {"normal": 0.0, "mig": 1.0}  # this replica returned it, lent nothing
    # next round: MIG mode in the round's state, the job gets a MIG instance
    rep = step(loop, core)
    b = A.parse_booking(pod(core, "small")["metadata"]["annotations"])
    assert b.node == "m" and b.mig_profile is not None
    # the agent switches the GPU to MIG mode at Allocate: nothing is returning any more
    agent_reports(core, "m", True)
    rep = step(loop, core)
    assert rep.mig_lending == {"m": None} and lending_of(core, "m") is None
    assert loop._policy is policy  # never rebuilt: the home MIG GPUs did not change


def test_a_returned_node_the_agent_never_switched_leaves_no_annotation(core, loops):
    mig_node(core, "m")
    make_pod(core, "big", BIG)
    loop = loops()
    assert step(loop, core).mig_lending  # lent
    core.delete_namespaced_pod("big", NS)  # gone before it was placed
    make_pod(core, "small", SMALL)
    rep = step(loop, core)
    assert rep.mig_lending == {"m": None} and lending_of(core, "m") is None


@pytest.mark.parametrize("follow, lending", [(False, True), (True, False)])
def test_no_lending_without_an_agent_that_follows_or_with_lending_off(core, loops, follow,
                                                                      lending):
    mig_node(core, "m", follow=follow)
    make_pod(core, "big", BIG)
    loop = loops(mig_lending=lending)
    for _ in range(2):
        rep = step(loop, core)
        assert rep.decisions["default/big"].status.value == "waiting" and rep.mig_lending == {}
    assert lending_of(core, "m") is None


def test_no_annotation_text_stops_the_view():
    # a Node annotation is anyone's to write: whatever it holds, the view notes it and goes
    # on with the agent's report (a RecursionError from deep nesting included)
    deep = '{"lent":' + "[" * 5000 + "]" * 5000 + "}"
    for raw, said in ((deep, "nested too deep"), ('{"lent":[0],"lent":[1]}', "key 'lent' given twice"),
                      ('{"lent":[0],"Lent":[1]}', "unknown key 'Lent'"),
                      ('{"lent":[1],"returning":[1]}', "GPU 1 listed twice"),
                      ('{"lent":[' + ",".join(["9"] * 100000) + "]}", "lent: 9 is not a GPU index in 0..7")):
        view = lending_view([inv("m", ALL)], {"m": {**FOLLOWS, MIG_LENDING: raw}}, [])
        assert view.home == {} and view.invs[0].mig_gpus == ALL
        assert said in view.notes["m"] and len(view.notes["m"]) < 300, view.notes["m"][:300]
    with pytest.raises(ValueError, match=r"not a GPU index \(the node has no GPU\)"):
        parse_lent('{"lent": [0]}', 0)


def test_lent_gpus_on_a_model_without_mig_are_not_used():
    node = Node(name="v", gpu_model="V100M16", num_gpus=4, gpu_mem_gib=16.0, cpu=32.0,
                mem_gib=128.0)
    v = NodeInventory(node, tuple(f"GPU-v-{i}" for i in range(4)), ())
    view = lending_view([v], {"v": lent_ann(returning=(0, 1))}, [])
    assert view.home == {} and view.invs == [v] and "V100M16 has no MIG profiles" in view.notes["v"]


def test_deeply_nested_node_and_pod_annotations_are_refused_not_raised():
    # the round reads every Node's inventory and MPS state and every pod's booking: JSON
    # nested too deep for the parser is an invalid value like any other, never a crash
    from decimal import Decimal

    from elastico.contract import INVENTORY, MPS_STATUS
    from elastico.errors import InvalidArgument
    from elastico.placer.kube.annotations import BOOKING, parse_booking
    from elastico.placer.kube.inventory import mps_down, node_inventory

    deep = "[" * 100000 + "]" * 100000
    with pytest.raises(InvalidArgument, match="nested too deep"):
        parse_booking({BOOKING: deep})
    assert mps_down({MPS_STATUS: deep}) == f"invalid {MPS_STATUS} annotation (JSON nested too deep)"
    node = {"metadata": {"name": "n", "annotations": {INVENTORY: deep}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_inventory(node, known_models=["A100-40GB"], quantity=Decimal) == \
        f"invalid {INVENTORY}: JSON nested too deep"
