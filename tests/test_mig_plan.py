"""MIG repartition planning: hand-worked plans and choices, then hypothesis: every plan replayed
on an independent simulator of the GPU's slices is valid after every step, never destroys a busy
instance and ends at the target; every refusal is justified; the chooser keeps every busy
instance and serves as many wanted profiles as an independent brute force can."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mig_tables import GUIDE, reference_all_geometries, reference_problems, reference_rows

from elastico.errors import InvalidArgument
from elastico.mig_plan import (MigInstance, StepOp, _all_geometries, choose_geometry, plan_for_profiles,
                                      plan_repartition)

MODELS = sorted(GUIDE)


# ------------------------------------------------------------------------ independent simulator
class SimulatedGpu:
    """Slices of one GPU and what sits on them; each step is checked against the driver's rules
    as the guide states them (no GI where slices are taken, no GI destroyed while it has a CI,
    no destroy of an instance with running work) and the reference geometry checker."""

    def __init__(self, model, current):
        self.model = model
        self.gis = {x.start: [x.profile, x.has_ci, x.busy] for x in current}

    def geometry(self):
        return [(p, s) for s, (p, _, _) in sorted(self.gis.items())]

    def apply(self, step):
        s, p = step.start, step.profile
        gi = self.gis.get(s)
        if step.op is StepOp.DESTROY_CI:
            assert gi and gi[0] == p and gi[1] and not gi[2], f"{step}: {self.gis}"
            gi[1] = False
        elif step.op is StepOp.DESTROY_GI:
            assert gi and gi[0] == p and not gi[1] and not gi[2], f"{step}: {self.gis}"
            del self.gis[s]
        elif step.op is StepOp.CREATE_GI:
            assert gi is None, f"{step}: {self.gis}"
            assert not reference_problems(self.model, self.geometry() + [(p, s)]), f"{step}: {self.gis}"
            self.gis[s] = [p, False, False]
        else:
            assert gi and gi[0] == p and not gi[1], f"{step}: {self.gis}"
            gi[1] = True
        assert reference_problems(self.model, self.geometry()) == []


def replay(model, current, plan):
    sim = SimulatedGpu(model, current)
    busy = {(x.profile, x.start) for x in current if x.busy}
    for step in plan.steps:
        sim.apply(step)
    assert sorted(sim.geometry()) == sorted(plan.target)
    assert all(ci for _, ci, _ in sim.gis.values())
    assert busy <= set(sim.geometry())
    return sim


# ------------------------------------------------------------------------ hand-worked cases
def test_plan_order_destroys_before_creates():
    cur = [MigInstance("3g.20gb", 0, busy=True), MigInstance("1g.5gb", 4), MigInstance("1g.5gb", 5)]
    plan = plan_repartition("A100-40GB", cur, [("3g.20gb", 0), ("3g.20gb", 4)])
    assert plan.ok and [str(s) for s in plan.steps] == [
        "destroy_ci 1g.5gb@4", "destroy_gi 1g.5gb@4", "destroy_ci 1g.5gb@5", "destroy_gi 1g.5gb@5",
        "create_gi 3g.20gb@4", "create_ci 3g.20gb@4"]
    replay("A100-40GB", cur, plan)


def test_plan_keeps_what_stays_and_adds_missing_ci():
    cur = [MigInstance("4g.20gb", 0, busy=True), MigInstance("2g.10gb", 4, has_ci=False)]
    plan = plan_repartition("A100-40GB", cur, [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)])
    assert [str(s) for s in plan.steps] == ["create_ci 2g.10gb@4", "create_gi 1g.5gb@6", "create_ci 1g.5gb@6"]
    assert plan_repartition("A100-40GB", cur[:1], [("4g.20gb", 0)]).steps == ()
    replay("A100-40GB", cur, plan)


def test_refusal_names_the_busy_instance_and_slot():
    cur = [MigInstance("3g.20gb", 4, busy=True), MigInstance("1g.5gb", 0)]
    plan = plan_repartition("A100-40GB", cur, [("7g.40gb", 0)])
    assert not plan.ok and plan.steps == ()
    assert plan.refused == "busy 3g.20gb at 4 blocks 7g.40gb at 0 (both need memory slices 4-7)"
    assert plan.blockers[0].busy == ("3g.20gb", 4) and plan.blockers[0].needed_by == ("7g.40gb", 0)
    plan = plan_repartition("A100-40GB", cur, [("1g.5gb", 4), ("2g.10gb", 0)])
    assert plan.refused == "busy 3g.20gb at 4 blocks 1g.5gb at 4 (both need memory slices 4)"
    plan = plan_repartition("A100-40GB", cur, [])
    assert plan.refused == "busy 3g.20gb at 4 (memory slices 4-7) is not kept by the target"
    # same slot, other profile: still the busy instance destroyed -> refused
    assert not plan_repartition("A100-40GB", cur, [("4g.20gb", 0)]).ok
    assert not plan_repartition("A30", [("2g.12gb", 2, True)], [("1g.6gb", 2), ("1g.6gb", 3)]).ok


def test_bad_input():
    with pytest.raises(InvalidArgument, match="current"):
        plan_repartition("A100-40GB", [("4g.20gb", 0), ("3g.20gb", 0)], [])
    with pytest.raises(InvalidArgument, match="target"):
        plan_repartition("A100-40GB", [], [("4g.20gb", 0), ("4g.20gb", 0)])
    with pytest.raises(InvalidArgument, match="target"):
        plan_repartition("A100-40GB", [], [("2g.10gb", 6)])
    with pytest.raises(InvalidArgument, match="gpu_model"):
        plan_repartition("V100", [], [])
    with pytest.raises(InvalidArgument, match=r"current\[0\]"):
        plan_repartition("A100-40GB", ["x"], [])
    with pytest.raises(InvalidArgument, match=r"wanted\[1\]"):
        choose_geometry("A100-40GB", [], ["1g.5gb", "9g.99gb"])


def test_choose_serves_the_most_then_the_biggest():
    # busy 3g at 4; idle 1g at 0 and 1.  4g.20gb needs slots 0-3: serving it means destroying
    # both idle 1g; serving the 1g.5gb keeps one of them.  One of the two fits either way, so
    # rule 2 (more SM slices served) picks 4g.20gb.
    cur = [MigInstance("3g.20gb", 4, True), MigInstance("1g.5gb", 0), MigInstance("1g.5gb", 1)]
    c = choose_geometry("A100-40GB", cur, ["4g.20gb", "1g.5gb"])
    assert c.geometry == (("4g.20gb", 0), ("3g.20gb", 4)) and c.starts == (0, None)
    assert c.unserved == ("1g.5gb",) and c.served == 1
    assert [str(s) for s in c.plan.steps] == [
        "destroy_ci 1g.5gb@0", "destroy_gi 1g.5gb@0", "destroy_ci 1g.5gb@1", "destroy_gi 1g.5gb@1",
        "create_gi 4g.20gb@0", "create_ci 4g.20gb@0"]


def test_choose_reuses_idle_instances_with_no_steps():
    cur = [MigInstance("3g.20gb", 4, True), MigInstance("1g.5gb", 1), MigInstance("2g.10gb", 2)]
    c = choose_geometry("A100-40GB", cur, ["1g.5gb"])
    assert c.starts == (1,) and c.plan.steps == ()  # rule 3: fewest steps, idle 2g kept too
    c = choose_geometry("A100-40GB", cur, ["2g.10gb", "1g.5gb", "1g.5gb"])
    # 2g at 2 and 1g at 1 are there; the second 1g fits at 0: 2 steps
    assert c.starts == (2, 1, 0) and [str(s) for s in c.plan.steps] == ["create_gi 1g.5gb@0", "create_ci 1g.5gb@0"]


def test_choose_room_then_lowest_geometry():
    # empty A100, one 1g.5gb: every start serves it with 2 steps; rule 4 (room) picks slot 6,
    # like MigGpu.place, which keeps 4g.20gb (start 0) and 3g.20gb (start 0) placeable.
    assert choose_geometry("A100-40GB", [], ["1g.5gb"]).geometry == (("1g.5gb", 6),)
    # A30, one 2g.12gb: 0 and 2 leave the same room; rule 5 picks the lower start.
    assert choose_geometry("A30", [], ["2g.12gb"]).geometry == (("2g.12gb", 0),)
    assert plan_for_profiles("A30", [], ["4g.24gb"]).target == (("4g.24gb", 0),)


def test_choose_when_nothing_fits():
    cur = [MigInstance("7g.40gb", 0, True)]
    c = choose_geometry("A100-40GB", cur, ["1g.5gb"])
    assert c.served == 0 and c.geometry == (("7g.40gb", 0),) and c.plan.ok and c.plan.steps == ()


@pytest.mark.parametrize("model", MODELS)
def test_enumeration_matches_the_reference(model):
    names = frozenset(reference_rows(model))
    assert set(_all_geometries(model, names)) == {tuple(sorted(g, key=lambda x: (x[1], x[0])))
                                                  for g in reference_geometries(model)}


# ------------------------------------------------------------------------ properties
@functools.cache
def reference_geometries(model):
    return frozenset(reference_all_geometries(model))


@st.composite
def geometries(draw, model):
    """A random valid geometry, grown by the reference checker."""
    rows = reference_rows(model)
    cands = [(n, s) for n in sorted(rows) for s in rows[n][2]]
    geo = []
    for c in draw(st.lists(st.sampled_from(cands), max_size=10)):
        if not reference_problems(model, geo + [c]):
            geo.append(c)
    return geo


@st.composite
def current_states(draw, model):
    geo = draw(geometries(model))
    out = []
    for n, s in geo:
        busy = draw(st.booleans())
        has_ci = True if busy else draw(st.booleans())
        out.append(MigInstance(n, s, busy, has_ci))
    return out


@st.composite
def plan_cases(draw):
    model = draw(st.sampled_from(MODELS))
    cur = draw(current_states(model))
    if draw(st.booleans()):  # a target that keeps every busy instance, grown around them
        base = [(x.profile, x.start) for x in cur if x.busy]
        rows = reference_rows(model)
        for c in draw(st.lists(st.sampled_from([(n, s) for n in sorted(rows) for s in rows[n][2]]), max_size=10)):
            if not reference_problems(model, base + [c]):
                base.append(c)
        target = base
    else:
        target = draw(geometries(model))
    return model, cur, target


@settings(max_examples=300, deadline=None)
@given(plan_cases())
def test_plans_are_valid_at_every_step(case):
    model, cur, target = case
    plan = plan_repartition(model, cur, target)
    busy_dropped = {(x.profile, x.start) for x in cur if x.busy} - set(target)
    if busy_dropped:
        assert not plan.ok and plan.steps == ()
        assert {b.busy for b in plan.blockers} == busy_dropped
        for b in plan.blockers:
            assert b.needed_by is None or b.needed_by in target
    else:
        assert plan.ok
        replay(model, cur, plan)
        ops = [s.op for s in plan.steps]
        creates = [i for i, o in enumerate(ops) if o in (StepOp.CREATE_GI,)]
        destroys = [i for i, o in enumerate(ops) if o in (StepOp.DESTROY_CI, StepOp.DESTROY_GI)]
        assert not creates or not destroys or max(destroys) < min(creates)


@st.composite
def choose_cases(draw):
    model = draw(st.sampled_from(MODELS))
    cur = draw(current_states(model))
    names = [r[0] for r in GUIDE[model][2]]
    wanted = draw(st.lists(st.sampled_from(names), max_size=5))
    return model, cur, wanted


@settings(max_examples=150, deadline=None)
@given(choose_cases())
def test_chooser_keeps_busy_and_serves_the_most(case):
    model, cur, wanted = case
    c = choose_geometry(model, cur, wanted)
    busy = {(x.profile, x.start) for x in cur if x.busy}
    geo = set(c.geometry)
    assert busy <= geo and reference_problems(model, list(c.geometry)) == []
    assert c.plan.ok
    replay(model, cur, c.plan)
    used = [(w, s) for w, s in zip(wanted, c.starts) if s is not None]
    assert len(set(used)) == len(used) and all(u in geo and u not in busy for u in used)

    def served(g):
        free = {}
        for n, s in g:
            if (n, s) not in busy:
                free[n] = free.get(n, 0) + 1
        need = {}
        for w in wanted:
            need[w] = need.get(w, 0) + 1
        return sum(min(k, free.get(n, 0)) for n, k in need.items())

    best = max(served(g) for g in reference_geometries(model) if busy <= set(g))
    assert c.served == best == served(c.geometry)
