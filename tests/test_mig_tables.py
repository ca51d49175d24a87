"""MIG profile tables against NVIDIA's MIG user guide, row by row, with the numbers typed in
here by hand, and the independent reference checker the other MIG tests use.

Where the numbers come from (NVIDIA Multi-Instance GPU User Guide, r580):
* "Supported MIG Profiles": the tables of A100 (A100-SXM4-40GB; 80GB: "names change according
  to the memory proportion"), H100 80GB / 94GB / 96GB, H200 141GB and A30-24GB: fraction of
  memory, fraction of SMs, "Number of Instances Available";
* "Getting Started" -> "List GPU Instance Profiles": ``nvidia-smi mig -lgipp`` on an A100-40GB,
  ``{starts}:size`` per profile (the only placements the guide prints as text);
* for the other models the starts are worked out below by hand from the rule that reproduces
  every one of those lines: start ``s`` is valid for a profile of ``c`` SM slices and ``m``
  memory slices on a GPU of ``C`` SM slices iff ``s % m == 0`` and ``s + c <= C``.

The reference checker (:func:`reference_problems`) is written from these definitions with
lists of slice indices -- it calls nothing in ``elastico.placer``.
"""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import pytest

from elastico.errors import Infeasible, InvalidArgument
from elastico.model import MIG_CAPABLE_MODELS
from elastico.mig import (MIG_GEOMETRY, MIG_MEDIA_PROFILES, MIG_PROFILES, MigGpu, check_geometry,
                                 geometry_problems, mig_profile, mig_profiles)

ALL7 = (0, 1, 2, 3, 4, 5, 6)

#: model -> (SM slices C, memory slices M, rows).  A row: (profile, fraction of memory,
#: fraction of SMs, number of instances available, starts, media extension).  Fractions and
#: counts are copied from the guide's tables; memory "Full" = 1.
_A100_STARTS = (ALL7, ALL7, (0, 2, 4, 6), (0, 2, 4), (0, 4), (0,), (0,))  # guide's -lgipp example


def _hopper(names):
    """H100 80/94/96GB and H200 tables: same fractions and counts, names differ."""
    me, g1, g1b, g2, g3, g4, g7 = names
    return (7, 8, [
        (g1, F(1, 8), F(1, 7), 7, _A100_STARTS[0], False),
        (me, F(1, 8), F(1, 7), 1, _A100_STARTS[1], True),
        (g1b, F(1, 4), F(1, 7), 4, _A100_STARTS[2], False),
        (g2, F(2, 8), F(2, 7), 3, _A100_STARTS[3], False),
        (g3, F(4, 8), F(3, 7), 2, _A100_STARTS[4], False),
        (g4, F(4, 8), F(4, 7), 1, _A100_STARTS[5], False),
        (g7, F(1), F(7, 7), 1, _A100_STARTS[6], False),
    ])


GUIDE = {
    "A100-40GB": (7, 8, [
        ("1g.5gb", F(1, 8), F(1, 7), 7, ALL7, False),
        ("1g.5gb+me", F(1, 8), F(1, 7), 1, ALL7, True),
        # the guide's table prints 1/8 here; its -lgipp line {0,2,4,6}:2 says 2 slices
        ("1g.10gb", F(2, 8), F(1, 7), 4, (0, 2, 4, 6), False),
        ("2g.10gb", F(2, 8), F(2, 7), 3, (0, 2, 4), False),
        ("3g.20gb", F(4, 8), F(3, 7), 2, (0, 4), False),
        ("4g.20gb", F(4, 8), F(4, 7), 1, (0,), False),
        ("7g.40gb", F(1), F(7, 7), 1, (0,), False),
    ]),
    "A100-80GB": _hopper(("1g.10gb+me", "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H100-80GB": _hopper(("1g.10gb+me", "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    "H100-94GB": _hopper(("1g.12gb+me", "1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")),
    "H100-96GB": _hopper(("1g.12gb+me", "1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")),
    "H200": _hopper(("1g.18gb+me", "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    "A30": (4, 4, [
        ("1g.6gb", F(1, 4), F(1, 4), 4, (0, 1, 2, 3), False),
        ("1g.6gb+me", F(1, 4), F(1, 4), 1, (0, 1, 2, 3), True),
        ("2g.12gb", F(2, 4), F(2, 4), 2, (0, 2), False),
        ("2g.12gb+me", F(2, 4), F(2, 4), 1, (0, 2), True),
        ("4g.24gb", F(1), F(4, 4), 1, (0,), False),
    ]),
}
#: Nominal GiB from the names, by hand.
GIB = {"1g.5gb": 5, "1g.10gb": 10, "1g.20gb": 20, "2g.10gb": 10, "2g.20gb": 20, "3g.20gb": 20, "3g.40gb": 40,
       "4g.20gb": 20, "4g.40gb": 40, "7g.40gb": 40, "7g.80gb": 80, "1g.12gb": 12, "1g.24gb": 24, "2g.24gb": 24,
       "3g.47gb": 47, "4g.47gb": 47, "7g.94gb": 94, "3g.48gb": 48, "4g.48gb": 48, "7g.96gb": 96, "1g.18gb": 18,
       "1g.35gb": 35, "2g.35gb": 35, "3g.71gb": 71, "4g.71gb": 71, "7g.141gb": 141, "1g.6gb": 6, "2g.12gb": 12,
       "4g.24gb": 24}


def reference_rows(model):
    """{profile: (sm slices, memory slices, starts, max count, media)} from :data:`GUIDE`."""
    C, M, rows = GUIDE[model]
    return {n: (int(sm * C), int(mem * M), starts, k, me) for n, mem, sm, k, starts, me in rows}


def reference_problems(model, geometry):
    """Independent check of a geometry (``(profile, start)`` pairs): a list of broken rules.
    Each instance marks the memory slices start..start+m-1 and the SM slices start..start+c-1;
    no slice may be marked twice; starts from the guide; counts <= the guide's instances
    available; SM slices <= C; at most one +me instance."""
    C, M, _ = GUIDE[model]
    rows = reference_rows(model)
    mem_used = [0] * M
    sm_used = [0] * C
    out = []
    count = {}
    media = 0
    for name, start in geometry:
        if name not in rows:
            out.append(f"unknown {name}")
            continue
        c, m, starts, k, me = rows[name]
        if start not in starts:
            out.append(f"bad start {name}@{start}")
            continue
        for i in range(start, start + m):
            mem_used[i] += 1
        for i in range(start, start + c):
            sm_used[i] += 1
        count[name] = count.get(name, 0) + 1
        media += me
    if any(u > 1 for u in mem_used):
        out.append("memory slice used twice")
    if any(u > 1 for u in sm_used):
        out.append("SM slice used twice")
    if sum(rows[n][0] for n, _ in geometry if n in rows) > C:
        out.append("too many SM slices")
    out += [f"too many {n}" for n, k in count.items() if k > rows[n][3]]
    if media > 1:
        out.append("two +me")
    return out


def reference_all_geometries(model, names=None):
    """Every valid geometry, by brute force over all subsets of candidate placements of size
    <= 8 that :func:`reference_problems` accepts (grown one placement at a time)."""
    rows = reference_rows(model)
    cands = [(n, s) for n in (names or rows) for s in rows[n][2]]
    found = {()}
    frontier = [()]
    while frontier:
        nxt = []
        for geo in frontier:
            last = cands.index(geo[-1]) if geo else -1
            for c in cands[last + 1:]:
                g = geo + (c,)
                if not reference_problems(model, g):
                    found.add(g)
                    nxt.append(g)
        frontier = nxt
    return found


# ------------------------------------------------------------------------------------------ tests
def test_every_mig_capable_model_has_a_table():
    assert MIG_CAPABLE_MODELS <= set(MIG_PROFILES)
    assert set(GUIDE) == set(MIG_PROFILES) == set(MIG_MEDIA_PROFILES) == set(MIG_GEOMETRY)


@pytest.mark.parametrize("model", sorted(GUIDE))
def test_table_rows_match_the_guide(model):
    C, M, rows = GUIDE[model]
    assert MIG_GEOMETRY[model] == (C, M)
    table = mig_profiles(model, include_media=True)
    assert list(table) == [r[0] for r in rows if not r[5]] + [r[0] for r in rows if r[5]]
    for name, mem, sm, k, starts, me in rows:
        p = table[name]
        assert (F(p.memory_slices, M), F(p.compute_slices, C)) == (mem, sm), name
        assert p.starts == starts and p.max_count == k and p.media == me, name
        assert p.memory_gib == GIB[name.removesuffix("+me")], name
        assert p.share == float(sm) and p.memory_fraction == float(mem)
        assert (p.gpu_compute_slices, p.gpu_memory_slices) == (C, M)
        assert (name in MIG_MEDIA_PROFILES[model]) == me and (name in MIG_PROFILES[model]) == (not me)


@pytest.mark.parametrize("model", sorted(GUIDE))
def test_starts_follow_the_alignment_rule(model):
    """s % m == 0 and s + c <= C reproduces the guide's -lgipp starts (worked by hand below)."""
    C, M, _ = GUIDE[model]
    for name, (c, m, starts, _, _) in reference_rows(model).items():
        assert starts == tuple(s for s in range(M) if s % m == 0 and s + c <= C), name


def test_hand_worked_starts():
    t = MIG_PROFILES["A100-40GB"]
    assert t["3g.20gb"].starts == (0, 4)  # 4 memory slices: aligned to 0, 4; 4 + 3 <= 7
    assert t["4g.20gb"].starts == (0,)  # 4 + 4 > 7
    assert t["2g.10gb"].starts == (0, 2, 4)  # 6 + 2 > 7
    assert t["1g.10gb"].starts == (0, 2, 4, 6)  # 6 + 1 <= 7
    assert t["1g.5gb"].starts == (0, 1, 2, 3, 4, 5, 6)  # 7 + 1 > 7: slice 7 has no SM slice
    assert MIG_PROFILES["H200"]["3g.71gb"].starts == (0, 4)
    assert MIG_PROFILES["A30"]["2g.12gb"].starts == (0, 2)  # 2 + 2 <= 4
    assert MIG_PROFILES["A30"]["1g.6gb"].starts == (0, 1, 2, 3)


@pytest.mark.parametrize("model", sorted(GUIDE))
def test_max_count_of_compute_profiles_is_what_their_placements_allow(model):
    """For the compute profiles the guide's "instances available" equals the largest set of
    pairwise disjoint valid starts, so the placer's slice masks alone enforce it."""
    for name, (c, m, starts, k, me) in reference_rows(model).items():
        if me:
            continue
        best = max(r for r in range(len(starts) + 1) for combo in itertools.combinations(starts, r)
                   if all(abs(a - b) >= m for a, b in itertools.combinations(combo, 2))
                   and r * c <= GUIDE[model][0])
        assert best == k, name


def test_check_geometry_hand_worked():
    ok = [("4g.20gb", 0), ("3g.20gb", 4)]  # valid since R510 (the guide's Partitioning note)
    assert geometry_problems("A100-40GB", ok) == []
    check_geometry("A100-40GB", ok)
    check_geometry("A100-40GB", [("1g.5gb", s) for s in range(7)])
    check_geometry("A100-40GB", [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.5gb", 6)])
    check_geometry("A100-40GB", [("1g.10gb", 6), ("1g.5gb+me", 5), ("3g.20gb", 0)])
    check_geometry("A30", [("2g.12gb+me", 0), ("1g.6gb", 2), ("1g.6gb", 3)])
    bad = {
        (("4g.20gb", 0), ("4g.20gb", 0)): "memory slices 0-3 already used",
        (("3g.20gb", 2),): "not a valid start",
        (("2g.10gb", 6),): "not a valid start",
        (("1g.5gb", 7),): "not a valid start",
        (("1g.5gb+me", 0), ("1g.5gb+me", 1)): "at most 1",
        (("7g.40gb", 0), ("1g.5gb", 0)): "already used",
        (("5g.30gb", 0),): "not a profile",
    }
    for geo, why in bad.items():
        problems = geometry_problems("A100-40GB", geo)
        assert any(why in p for p in problems), (geo, problems)
        assert reference_problems("A100-40GB", geo)
        with pytest.raises(InvalidArgument, match="geometry"):
            check_geometry("A100-40GB", geo)
    assert "media" in " ".join(geometry_problems("A30", [("1g.6gb+me", 0), ("2g.12gb+me", 2)]))
    with pytest.raises(InvalidArgument, match="gpu_model"):
        check_geometry("V100", [])
    with pytest.raises(InvalidArgument, match=r"geometry\[0\]"):
        check_geometry("A100-40GB", ["3g.20gb"])


@pytest.mark.parametrize("model", ["A100-40GB", "A30"])
def test_checker_agrees_with_the_reference_on_every_small_geometry(model):
    """Every multiset of up to 3 placements (valid or not): same verdict both ways."""
    rows = reference_rows(model)
    cands = [(n, s) for n in rows for s in range(GUIDE[model][1])]
    for r in range(4):
        for geo in itertools.combinations_with_replacement(cands, r):
            assert (geometry_problems(model, geo) == []) == (reference_problems(model, geo) == []), geo


def test_lookups_and_errors():
    assert mig_profile("A100-80GB", "3g.40gb").memory_gib == 40
    assert mig_profile("A100-40GB", "1g.5gb+me").media
    assert "1g.5gb+me" not in mig_profiles("A100-40GB")
    with pytest.raises(InvalidArgument, match="1g.5gb"):
        mig_profile("A100-40GB", "5g.30gb")
    with pytest.raises(InvalidArgument, match="gpu_model"):
        mig_profiles("V100")
    with pytest.raises(InvalidArgument):
        MigGpu("V100")


def test_media_extension_one_per_gpu():
    g = MigGpu("A30")
    assert g.place("2g.12gb+me", 0) == 0
    assert not g.can_place("1g.6gb+me") and g.free_starts("1g.6gb") == [2, 3]
    with pytest.raises(Infeasible):
        g.place("1g.6gb+me", 2)
    g.release(0)
    assert g.can_place("1g.6gb+me")
    h = MigGpu("H100-80GB")
    h.place("1g.10gb+me", 3)
    assert not h.can_place("1g.10gb+me") and h.can_place("1g.10gb")


def test_a30_geometry():
    g = MigGpu("A30")
    assert (g.compute_slices_total, g.memory_slices_total) == (4, 4)
    assert g.place("2g.12gb") == 0  # 0 and 2 leave the same room: the lower start
    assert g.place("1g.6gb") == 2 and g.place("1g.6gb") == 3
    assert not g.can_place("1g.6gb") and g.compute_used == 4 and g.free_memory_slices == 0
    assert MigGpu.from_geometry("A30", g.geometry).instances == g.instances
    with pytest.raises(InvalidArgument):
        MigGpu.from_geometry("A30", [("4g.24gb", 0), ("1g.6gb", 3)])
