"""MIG geometry on an A100-40GB: hand-enumerated valid and invalid geometries from the
NVIDIA MIG user guide's A100 placement table (starts: 1g.5gb 0-6, 2g.10gb 0/2/4,
3g.20gb 0/4, 4g.20gb 0, 7g.40gb 0)."""

import itertools

import pytest

from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.mig import MIG_PROFILES, MigGpu, mig_profile


def fill(*names):
    g = MigGpu("A100-40GB")
    return g, [g.place(n) for n in names]


def test_profile_table():
    t = MIG_PROFILES["A100-40GB"]
    assert [(p.compute_slices, p.memory_slices, p.memory_gib) for p in t.values()] == [
        (1, 1, 5), (1, 2, 10), (2, 2, 10), (3, 4, 20), (4, 4, 20), (7, 8, 40)]
    assert t["3g.20gb"].starts == (0, 4)
    assert t["4g.20gb"].starts == (0,)
    assert mig_profile("A100-80GB", "3g.40gb").memory_gib == 40
    with pytest.raises(InvalidArgument, match="1g.5gb"):
        mig_profile("A100-40GB", "5g.30gb")
    with pytest.raises(InvalidArgument):
        MigGpu("V100")


def test_valid_geometries():
    g, s = fill("3g.20gb", "3g.20gb")
    assert sorted(s) == [0, 4]
    g, s = fill("4g.20gb", "3g.20gb")
    assert s == [0, 4] and g.compute_used == 7
    g, s = fill(*["1g.5gb"] * 7)
    assert sorted(s) == [0, 1, 2, 3, 4, 5, 6] and not g.can_place("1g.5gb")
    g, s = fill("2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb")
    assert sorted(s) == [0, 2, 4, 6]
    g, s = fill("7g.40gb")
    assert s == [0] and not any(g.can_place(p) for p in MIG_PROFILES["A100-40GB"])


def test_invalid_geometries_refused():
    g, _ = fill("4g.20gb")
    assert not g.can_place("4g.20gb") and g.best_start("4g.20gb") is None
    with pytest.raises(Infeasible):
        g.place("4g.20gb")
    assert g.instances == {0: "4g.20gb"}  # unchanged
    g, _ = fill("3g.20gb", "3g.20gb")
    assert not g.can_place("1g.5gb")  # 6 compute slices used but every memory slice taken
    g = MigGpu()
    g.place("1g.5gb", start=3)
    assert g.free_starts("3g.20gb") == [4] and not g.can_place("4g.20gb")
    with pytest.raises(Infeasible):
        g.place("2g.10gb", start=2)  # slices 2-3 overlap the 1g at 3
    with pytest.raises(Infeasible):
        g.place("2g.10gb", start=1)  # not a valid start


def test_place_keeps_room():
    g = MigGpu()
    assert g.place("1g.5gb") == 6  # keeps 4g.20gb (start 0) placeable
    assert g.can_place("4g.20gb")
    g = MigGpu()
    assert g.place("3g.20gb") == 4  # keeps 4g.20gb placeable
    assert g.place("4g.20gb") == 0


def test_release():
    g, s = fill("4g.20gb", "3g.20gb")
    assert g.release(0) == "4g.20gb"
    assert g.can_place("4g.20gb") and g.compute_used == 3
    with pytest.raises(NotFound):
        g.release(0)


def test_every_reachable_state_is_valid():
    """Exhaustive: every sequence of up to 4 placements yields a valid geometry."""
    names = list(MIG_PROFILES["A100-40GB"])
    for seq in itertools.product(names, repeat=3):
        g = MigGpu()
        for n in seq:
            if g.can_place(n):
                g.place(n)
        occ, comp = 0, 0
        for start, name in g.instances.items():
            p = MIG_PROFILES["A100-40GB"][name]
            assert start in p.starts and not occ & p.mask(start)
            occ |= p.mask(start)
            comp += p.compute_slices
        assert comp <= 7 and occ == g.occupied_mask and comp == g.compute_used
