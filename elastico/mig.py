"""MIG (Multi-Instance GPU) geometry: which GPU-instance profiles exist on each GPU model, where
on the GPU each may start, a check of a whole geometry, and a small state object
(:class:`MigGpu`) that never produces an invalid geometry.

Who calls this module: the placer (:mod:`elastico.placer.placement` books MIG instances through
:class:`MigGpu`), the repartition planner (:mod:`elastico.mig_plan`) and, later, the node
agent.  Whom it calls: nothing (pure; no clock, no I/O).

Sources (NVIDIA Multi-Instance GPU User Guide, r580, docs.nvidia.com/datacenter/tesla/mig-user-guide):

* "Supported MIG Profiles" (supported-mig-profiles.html), tables "GPU Instance Profiles on
  A100 / H100 / H200" and "A30 MIG Profiles": per profile its fraction of memory (memory
  slices), fraction of SMs (compute slices), hardware units and "Number of Instances Available"
  (``max_count`` here).  The A100 table is for A100-SXM4-40GB; the guide: "For A100-SXM4-80GB,
  the profile names will change according to the memory proportion".  The H100 tables are for
  "H100 80GB (PCIe and SXM5)", "H100 94GB (PCIe and SXM5)" and "H100 96GB (H100 on GH200)";
  the H200 table for "H200 141GB".
* "Getting Started with MIG" -> "List GPU Instance Profiles": ``nvidia-smi mig -lgipp`` lists,
  per profile, its possible placements as ``{<start indices>}:<size>`` -- the memory-slice
  indices an instance may start at and the number of memory slices it then occupies (the same
  data NVML returns from ``nvmlDeviceGetGpuInstancePossiblePlacements``: ``start`` = index of
  the first occupied memory slice, ``size`` = number of memory slices).  The guide prints it for
  an A100-40GB::

      Profile ID 19 (1g.5gb)     Placements: {0,1,2,3,4,5,6}:1
      Profile ID 20 (1g.5gb+me)  Placements: {0,1,2,3,4,5,6}:1
      Profile ID 15 (1g.10gb)    Placements: {0,2,4,6}:2
      Profile ID 14 (2g.10gb)    Placements: {0,2,4}:2
      Profile ID  9 (3g.20gb)    Placements: {0,4}:4
      Profile ID  5 (4g.20gb)    Placement : {0}:4
      Profile ID  0 (7g.40gb)    Placement : {0}:8

* "Concepts" -> "Terminology": a GPU memory slice is ~1/8 of the memory, a GPU SM slice ~1/7 of
  the SMs, and a *GPU slice* is one memory slice plus one SM slice; "Partitioning": instances
  may not overlap; "prior to R510, the combination of a (4 memory, 4 compute) and a (4 memory,
  3 compute) profile was not supported.  This restriction no longer applies" (so 4g + 3g is
  valid here).

The guide gives placements as text only in that A100 example; for the other models it draws
them (figures "Profiles on A30", "Profiles on H100", ...).  Where it gives no text we DERIVE the
starts from the rule that reproduces every ``-lgipp`` line above: with ``C`` compute slices and
``M`` memory slices on the GPU (A100/H100/H200: C=7, M=8; A30: C=4, M=4), a profile of ``c``
compute and ``m`` memory slices may start at ``s`` iff ``s % m == 0`` (aligned to its size) and
``s + c <= C`` (its SM slices ``s .. s+c-1`` exist: GPU slice ``i`` pairs memory slice ``i``
with SM slice ``i``; memory slice 7 of an 8-slice GPU has no SM slice of its own).  H100, H200
and the H100 94/96GB tables have the A100's fractions, so they get the A100's starts; published
``-lgipp`` output of H100 80GB/NVL systems (same seven lines) and of A30 systems
(``{0,1,2,3}:1`` for 1g.6gb and 1g.6gb+me, ``{0,2}:2`` for 2g.12gb and 2g.12gb+me, ``{0}:4``
for 4g.24gb) agrees.

Media extensions (``+me``): listed by the guide for every model with "Number of Instances
Available: 1 (A single 1g profile can include media extensions)", and placed in the A100
``-lgipp`` example exactly like the base profile.  They are kept apart
(:data:`MIG_MEDIA_PROFILES`, not in :data:`MIG_PROFILES`): an ``+me`` instance takes the GPU's
one OFA / media extension (the tables' "Hardware Units" column: the full profile has 1 OFA, every
``+me`` profile 1), so besides its geometry at most ONE ``+me`` instance of any size may exist
on a GPU -- a rule the placer's numpy eligibility does not know, and ElastiCo's training and
inference jobs do not ask for media engines.  :class:`MigGpu`, :func:`check_geometry` and the
planner handle them; the placer books only :data:`MIG_PROFILES`.

The GPUs themselves -- total memory, SMs, whether they support MIG -- are the GPU catalogue's
(:mod:`elastico.hardware`; every table key is a catalogue name or alias, and each table's
whole-GPU profile has the catalogue's memory, tested); this module holds only the per-profile
geometry.  Memory GiB is the profile's nominal size (from its name); the usable memory of an instance is
slightly less (e.g. ~4.75 GiB for 1g.5gb).  The guide's A100 table prints "1/8" as the memory
fraction of 1g.10gb, but its ``-lgipp`` line (``{0,2,4,6}:2``), the name and the 80GB table
(1g.20gb: 1/4) say 2 of 8 slices; we use 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

from elastico.errors import Infeasible, InvalidArgument, NotFound

__all__ = [
    "MigProfile",
    "MIG_PROFILES",
    "MIG_MEDIA_PROFILES",
    "MIG_GEOMETRY",
    "MEMORY_SLICES",
    "COMPUTE_SLICES",
    "mig_profiles",
    "mig_profile",
    "check_geometry",
    "geometry_problems",
    "MigGpu",
]

#: Memory and compute slices of the A100 / H100 / H200 (8 and 7).  The A30 has 4 and 4: use a
#: profile's ``gpu_memory_slices`` / ``gpu_compute_slices`` (or :data:`MIG_GEOMETRY`) for
#: model-independent code.
MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile of one GPU model.

    ``compute_slices`` of the GPU's ``gpu_compute_slices`` SM slices and ``memory_slices`` of its
    ``gpu_memory_slices`` memory slices (``memory_gib`` nominal GiB); ``starts``: the memory-slice
    indices an instance may start at (``nvidia-smi mig -lgipp``); ``max_count``: the guide's
    "Number of Instances Available"; ``media``: a ``+me`` profile (holds the GPU's one media
    extension, so at most one ``+me`` instance per GPU).  An instance at ``s`` occupies memory
    slices ``s .. s+memory_slices-1`` and SM slices ``s .. s+compute_slices-1``.
    """

    name: str
    compute_slices: int
    memory_slices: int
    memory_gib: float
    starts: tuple[int, ...]
    max_count: int = 1
    gpu_compute_slices: int = COMPUTE_SLICES
    gpu_memory_slices: int = MEMORY_SLICES
    media: bool = False

    @property
    def share(self) -> float:
        """Fraction of the GPU's compute the instance gets (compute_slices / gpu_compute_slices)."""
        return self.compute_slices / self.gpu_compute_slices

    @property
    def memory_fraction(self) -> float:
        """Fraction of the GPU's memory the instance gets (memory_slices / gpu_memory_slices)."""
        return self.memory_slices / self.gpu_memory_slices

    def mask(self, start: int) -> int:
        """Bit mask of the memory slices occupied when placed at ``start`` (bit i = slice i)."""
        return ((1 << self.memory_slices) - 1) << start

    def compute_mask(self, start: int) -> int:
        """Bit mask of the SM slices occupied when placed at ``start`` (bit i = SM slice i)."""
        return ((1 << self.compute_slices) - 1) << start


# (compute slices, memory slices, valid starts, max count) of each profile size, in the order of
# the guide's tables.  See the module docstring for where each number comes from.
_A100_LIKE = (  # C = 7 SM slices, M = 8 memory slices
    (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    (1, 2, (0, 2, 4, 6), 4),
    (2, 2, (0, 2, 4), 3),
    (3, 4, (0, 4), 2),
    (4, 4, (0,), 1),
    (7, 8, (0,), 1),
)
_A100_LIKE_ME = ((1, 1, (0, 1, 2, 3, 4, 5, 6), 1),)  # the 1g +me profile
_A30 = (  # C = 4, M = 4
    (1, 1, (0, 1, 2, 3), 4),
    (2, 2, (0, 2), 2),
    (4, 4, (0,), 1),
)
_A30_ME = ((1, 1, (0, 1, 2, 3), 1), (2, 2, (0, 2), 1))

#: GPU model -> (profile names, +me profile names, compute slices C, memory slices M, geometry,
#: +me geometry).  Nominal GiB come from the names.
_MODELS = {
    "A100-40GB": (("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"), ("1g.5gb+me",),
                  7, 8, _A100_LIKE, _A100_LIKE_ME),
    "A100-80GB": (("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), ("1g.10gb+me",),
                  7, 8, _A100_LIKE, _A100_LIKE_ME),
    "H100-80GB": (("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), ("1g.10gb+me",),
                  7, 8, _A100_LIKE, _A100_LIKE_ME),
    "H100-94GB": (("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"), ("1g.12gb+me",),
                  7, 8, _A100_LIKE, _A100_LIKE_ME),
    "H100-96GB": (("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"), ("1g.12gb+me",),
                  7, 8, _A100_LIKE, _A100_LIKE_ME),
    "H200": (("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"), ("1g.18gb+me",),
             7, 8, _A100_LIKE, _A100_LIKE_ME),
    "A30": (("1g.6gb", "2g.12gb", "4g.24gb"), ("1g.6gb+me", "2g.12gb+me"), 4, 4, _A30, _A30_ME),
}


def _gib(name: str) -> float:
    return float(name.split(".")[1].split("gb")[0])


def _build(names, geometry, C: int, M: int, media: bool) -> Mapping[str, MigProfile]:
    return MappingProxyType({
        n: MigProfile(n, c, m, _gib(n), s, k, C, M, media) for n, (c, m, s, k) in zip(names, geometry, strict=True)
    })


#: GPU model -> profile name -> :class:`MigProfile`: the compute profiles the placer books.
MIG_PROFILES: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType(
    {model: _build(n, g, C, M, False) for model, (n, _, C, M, g, _) in _MODELS.items()}
)
#: GPU model -> ``+me`` (media extension) profile name -> :class:`MigProfile`.
MIG_MEDIA_PROFILES: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType(
    {model: _build(n, g, C, M, True) for model, (_, n, C, M, _, g) in _MODELS.items()}
)
#: GPU model -> (compute slices, memory slices) of the whole GPU.
MIG_GEOMETRY: Mapping[str, tuple[int, int]] = MappingProxyType(
    {model: (C, M) for model, (_, _, C, M, _, _) in _MODELS.items()}
)
_ALL: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType(
    {m: MappingProxyType({**MIG_PROFILES[m], **MIG_MEDIA_PROFILES[m]}) for m in _MODELS}
)


def mig_profiles(gpu_model: str, include_media: bool = False) -> Mapping[str, MigProfile]:
    """The profile table of ``gpu_model`` (with the ``+me`` profiles if ``include_media``).

    Raises InvalidArgument(``gpu_model``) if the model has no MIG table."""
    try:
        return (_ALL if include_media else MIG_PROFILES)[gpu_model]
    except (KeyError, TypeError):
        raise InvalidArgument(
            "gpu_model", gpu_model, f"a model with a MIG profile table: {sorted(MIG_PROFILES)}"
        ) from None


def mig_profile(gpu_model: str, name: str) -> MigProfile:
    """Profile ``name`` (``+me`` profiles included) of ``gpu_model``; InvalidArgument naming the
    valid profiles if unknown."""
    table = mig_profiles(gpu_model, include_media=True)
    try:
        return table[name]
    except (KeyError, TypeError):
        raise InvalidArgument("mig_profile", name, f"one of {list(table)} on {gpu_model}") from None


def _slices(mask: int) -> str:
    idx = [i for i in range(mask.bit_length()) if mask >> i & 1]
    return f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else str(idx[0])


def geometry_problems(gpu_model: str, geometry: Iterable[tuple[str, int]]) -> list[str]:
    """Every rule a geometry breaks, as sentences (empty list: valid).

    ``geometry``: the GPU instances as ``(profile name, start slot)`` pairs, any order.  Rules:
    each profile exists on ``gpu_model`` (``+me`` included) and starts at one of its valid
    starts; no two instances share a memory slice or an SM slice; the SM slices used sum to at
    most the GPU's; no profile has more instances than its ``max_count``; at most one ``+me``
    instance.  Raises InvalidArgument for an unknown model or an item that is not a
    ``(str, int)`` pair; an unknown profile name is reported as a problem.
    """
    table = mig_profiles(gpu_model, include_media=True)
    C, _ = MIG_GEOMETRY[gpu_model]
    problems: list[str] = []
    mem = comp = compute = media = 0
    counts: dict[str, int] = {}
    for i, item in enumerate(geometry):
        try:
            name, start = item
        except (TypeError, ValueError):
            raise InvalidArgument(f"geometry[{i}]", item, "a (profile name, start slot) pair") from None
        if not isinstance(name, str) or isinstance(start, bool) or not isinstance(start, int):
            raise InvalidArgument(f"geometry[{i}]", item, "a (profile name, start slot) pair")
        p = table.get(name)
        if p is None:
            problems.append(f"{name} at {start}: not a profile of {gpu_model} ({list(table)})")
            continue
        if start not in p.starts:
            problems.append(f"{name} at {start}: not a valid start (valid starts {list(p.starts)})")
            continue
        if mem & p.mask(start):
            problems.append(f"{name} at {start}: memory slices {_slices(mem & p.mask(start))} already used")
        if comp & p.compute_mask(start):
            problems.append(f"{name} at {start}: SM slices {_slices(comp & p.compute_mask(start))} already used")
        mem |= p.mask(start)
        comp |= p.compute_mask(start)
        compute += p.compute_slices
        media += p.media
        counts[name] = counts.get(name, 0) + 1
    if compute > C:
        problems.append(f"{compute} SM slices used, the GPU has {C}")
    for name, k in counts.items():
        if k > table[name].max_count:
            problems.append(f"{k} instances of {name}, at most {table[name].max_count}")
    if media > 1:
        problems.append(f"{media} media-extension (+me) instances, at most 1 per GPU")
    return problems


def check_geometry(gpu_model: str, geometry: Iterable[tuple[str, int]], field: str = "geometry") -> None:
    """Raise InvalidArgument(``field``, geometry, the broken rules) unless ``geometry`` (``(profile
    name, start slot)`` pairs) is a valid MIG geometry of ``gpu_model`` (see
    :func:`geometry_problems`)."""
    geometry = list(geometry)
    problems = geometry_problems(gpu_model, geometry)
    if problems:
        raise InvalidArgument(field, geometry, "a valid MIG geometry: " + "; ".join(problems))


class MigGpu:
    """The GPU instances on one MIG-mode GPU (mutable state).

    ``instances`` maps start slot -> profile name.  Every operation keeps the geometry valid
    (:func:`geometry_problems` is always empty): each instance at one of its profile's valid
    starts, no two instances sharing a memory or SM slice, SM slices within the GPU's, at most
    ``max_count`` instances of a profile and one ``+me`` instance.  ``place`` picks, among the
    valid free starts, the one that leaves the most room (compute profiles only): (1) the
    largest profile (compute slices) still placeable afterwards, (2) then the most valid
    (profile, start) placements left, (3) then the longest run of free memory slices, (4) then
    the lowest start.  E.g. a 1g.5gb on an empty A100 goes to slot 6, which keeps 4g.20gb
    (start 0 only) available.
    """

    __slots__ = ("gpu_model", "_table", "_base", "_C", "_M", "_occupied", "_compute", "_instances",
                 "_counts", "_media")

    def __init__(self, gpu_model: str = "A100-40GB"):
        self._table = mig_profiles(gpu_model, include_media=True)
        self._base = mig_profiles(gpu_model)
        self.gpu_model = gpu_model
        self._C, self._M = MIG_GEOMETRY[gpu_model]
        self._occupied = 0  # bit i set = memory slice i used
        self._compute = 0
        self._instances: dict[int, MigProfile] = {}
        self._counts: dict[str, int] = {}
        self._media = 0

    @classmethod
    def from_geometry(cls, gpu_model: str, geometry: Iterable[tuple[str, int]]) -> "MigGpu":
        """A GPU holding ``geometry`` (``(profile, start)`` pairs); InvalidArgument if invalid."""
        geometry = list(geometry)
        check_geometry(gpu_model, geometry)
        g = cls(gpu_model)
        for name, start in geometry:
            g.place(name, start)
        return g

    # --- queries -------------------------------------------------------------------------
    def profile(self, profile: str | MigProfile) -> MigProfile:
        """The table's profile for a name or a :class:`MigProfile`; InvalidArgument if it is not
        a profile of this GPU's model."""
        if isinstance(profile, MigProfile):
            if self._table.get(profile.name) != profile:
                raise InvalidArgument("mig_profile", profile.name, f"a profile of {self.gpu_model}")
            return profile
        return mig_profile(self.gpu_model, profile)

    @property
    def instances(self) -> dict[int, str]:
        """start slot -> profile name (a copy)."""
        return {s: p.name for s, p in sorted(self._instances.items())}

    @property
    def geometry(self) -> list[tuple[str, int]]:
        """``(profile name, start)`` pairs in start order (the input of :func:`check_geometry`)."""
        return [(p.name, s) for s, p in sorted(self._instances.items())]

    @property
    def occupied_mask(self) -> int:
        """Bit mask of the used memory slices (bit i = slice i)."""
        return self._occupied

    @property
    def compute_used(self) -> int:
        """SM slices in use (0..compute_slices_total)."""
        return self._compute

    @property
    def compute_slices_total(self) -> int:
        """SM slices of the whole GPU (7; 4 on an A30)."""
        return self._C

    @property
    def memory_slices_total(self) -> int:
        """Memory slices of the whole GPU (8; 4 on an A30)."""
        return self._M

    @property
    def free_memory_slices(self) -> int:
        return self._M - bin(self._occupied).count("1")

    @property
    def empty(self) -> bool:
        return not self._instances

    def free_starts(self, profile: str | MigProfile) -> list[int]:
        """Valid starts of ``profile`` that are free now (empty if compute, its max count or the
        one media extension is used up)."""
        p = self.profile(profile)
        return self._free_starts(p, self._occupied, self._compute, self._counts.get(p.name, 0), self._media)

    def can_place(self, profile: str | MigProfile) -> bool:
        return bool(self.free_starts(profile))

    def best_start(self, profile: str | MigProfile) -> int | None:
        """The start ``place`` would choose, or None if the profile does not fit."""
        p = self.profile(profile)
        starts = self.free_starts(p)
        if not starts:
            return None
        return max(starts, key=lambda s: self._room_key(p, s))

    # --- changes -------------------------------------------------------------------------
    def place(self, profile: str | MigProfile, start: int | None = None) -> int:
        """Create an instance of ``profile`` (at ``start`` if given, else the best start) and
        return its start slot.  Raises Infeasible (nothing changes) if it does not fit there."""
        p = self.profile(profile)
        free = self.free_starts(p)
        if start is None:
            s = self.best_start(p)
            if s is None:
                raise Infeasible(
                    f"mig_profile {p.name}: no free valid start on this {self.gpu_model} "
                    f"(instances {self.instances}, valid starts {list(p.starts)})"
                )
        else:
            if start not in free:
                raise Infeasible(
                    f"mig_profile {p.name}: start {start} is not free and valid "
                    f"(free valid starts {free}, instances {self.instances})"
                )
            s = start
        self._occupied |= p.mask(s)
        self._compute += p.compute_slices
        self._instances[s] = p
        self._counts[p.name] = self._counts.get(p.name, 0) + 1
        self._media += p.media
        return s

    def release(self, start: int) -> str:
        """Destroy the instance at ``start``; returns its profile name.  NotFound if none."""
        p = self._instances.pop(start, None)
        if p is None:
            raise NotFound(f"mig instance: no instance starts at slot {start} ({self.instances})")
        self._occupied &= ~p.mask(start)
        self._compute -= p.compute_slices
        self._counts[p.name] -= 1
        self._media -= p.media
        return p.name

    def copy(self) -> "MigGpu":
        other = MigGpu.__new__(MigGpu)
        other.gpu_model, other._table, other._base = self.gpu_model, self._table, self._base
        other._C, other._M = self._C, self._M
        other._occupied, other._compute, other._media = self._occupied, self._compute, self._media
        other._instances = dict(self._instances)
        other._counts = dict(self._counts)
        return other

    def __repr__(self) -> str:
        return f"MigGpu({self.gpu_model!r}, instances={self.instances})"

    # --- internals -----------------------------------------------------------------------
    def _free_starts(self, p: MigProfile, occupied: int, compute: int, count: int, media: int) -> list[int]:
        if compute + p.compute_slices > self._C or count >= p.max_count or (p.media and media):
            return []
        return [s for s in p.starts if not occupied & p.mask(s)]

    def _room_key(self, p: MigProfile, start: int) -> tuple[int, int, int, int]:
        occ = self._occupied | p.mask(start)
        comp = self._compute + p.compute_slices
        largest, count = 0, 0
        for q in self._base.values():
            k = self._counts.get(q.name, 0) + (q.name == p.name)
            n = len(self._free_starts(q, occ, comp, k, 0))
            if n:
                count += n
                largest = max(largest, q.compute_slices)
        run = best = 0
        for i in range(self._M):
            run = 0 if occ >> i & 1 else run + 1
            best = max(best, run)
        return (largest, count, best, -start)
