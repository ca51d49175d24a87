"""Property test: random place/release sequences on every GPU model never produce an invalid MIG
geometry, checked by the independent reference checker of tests/test_mig_tables.py (written from
the guide's table, not from elastico.mig)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_mig_tables import GUIDE, reference_problems

from elastico.errors import Infeasible, NotFound
from elastico.mig import MigGpu

MODELS = sorted(GUIDE)


@st.composite
def sequences(draw):
    model = draw(st.sampled_from(MODELS))
    names = [r[0] for r in GUIDE[model][2]]
    M = GUIDE[model][1]
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("place"), st.sampled_from(names), st.none() | st.integers(0, M - 1)),
        st.tuples(st.just("release"), st.integers(0, M - 1)),
    ), min_size=1, max_size=30))
    return model, ops


@settings(max_examples=300, deadline=None)
@given(sequences())
def test_place_release_never_invalid(case):
    model, ops = case
    M = GUIDE[model][1]
    g = MigGpu(model)
    for op in ops:
        before = g.geometry
        if op[0] == "place":
            _, name, start = op
            fits = [s for s in range(M) if not reference_problems(model, before + [(name, s)])]
            assert g.can_place(name) == bool(fits)
            assert sorted(g.free_starts(name)) == fits
            try:
                s = g.place(name, start)
            except Infeasible:
                assert (start is None and not fits) or (start is not None and start not in fits)
                assert g.geometry == before  # nothing changed
            else:
                assert s in fits and (start is None or s == start)
                assert sorted(g.geometry) == sorted(before + [(name, s)])
        else:
            _, start = op
            try:
                name = g.release(start)
            except NotFound:
                assert start not in dict((s, n) for n, s in before)
            else:
                assert (name, start) in before
        geo = g.geometry
        assert reference_problems(model, geo) == [], (model, geo)
        C, M_, _ = GUIDE[model]
        rows = {r[0]: r for r in GUIDE[model][2]}
        assert g.compute_used == sum(int(rows[n][2] * C) for n, _ in geo)
        mask = 0
        for n, s in geo:
            mask |= ((1 << int(rows[n][1] * M_)) - 1) << s
        assert g.occupied_mask == mask
        assert g.copy().geometry == geo
