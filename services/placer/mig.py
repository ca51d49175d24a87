"""MIG (Multi-Instance GPU) geometry: which GPU-instance profiles exist on a GPU model and
where on the GPU each may start, and a small state object that never produces an invalid
geometry.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles" -> "A100 MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html), and the
placements that ``nvidia-smi mig -lgipp`` prints for an A100 (the same data NVML returns from
``nvmlDeviceGetGpuInstancePossiblePlacements``: ``{start slots}:size`` in memory slices)::

    1g.5gb   {0,1,2,3,4,5,6}:1      1/7 SMs, 1/8 memory
    1g.10gb  {0,2,4,6}:2            1/7 SMs, 2/8 memory   (R470+ drivers)
    2g.10gb  {0,2,4}:2              2/7 SMs, 2/8 memory
    3g.20gb  {0,4}:4                3/7 SMs, 4/8 memory
    4g.20gb  {0}:4                  4/7 SMs, 4/8 memory
    7g.40gb  {0}:8                  7/7 SMs, 8/8 memory

An A100 has 8 memory slices and 7 compute (SM) slices.  A GPU instance occupies ``size``
consecutive memory slices from its start slot; instances may not overlap and their compute
slices may not exceed 7.  The A100-80GB has the same geometry with doubled memory per profile
(guide: "for A100-SXM4-80GB, the profile names will change according to the memory
proportion").  ``+me`` (media extension) variants are not modelled.

Memory GiB here is the profile's nominal size (from its name); the usable memory of an
instance is slightly less (e.g. ~4.75 GiB for 1g.5gb).  Who calls this module: the placer
(:mod:`elastico.placer.placement`) and, later, the node agent; whom it calls: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from elastico.errors import Infeasible, InvalidArgument, NotFound

__all__ = [
    "MigProfile",
    "MIG_PROFILES",
    "MEMORY_SLICES",
    "COMPUTE_SLICES",
    "mig_profiles",
    "mig_profile",
    "MigGpu",
]

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile: ``compute_slices`` of 7 SM slices, ``memory_slices`` of 8
    memory slices (``memory_gib`` nominal GiB), valid ``starts`` (first memory slice)."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_gib: float
    starts: tuple[int, ...]

    @property
    def share(self) -> float:
        """Fraction of the GPU's compute the instance gets (compute_slices / 7)."""
        return self.compute_slices / COMPUTE_SLICES

    def mask(self, start: int) -> int:
        """Bit mask of the memory slices occupied when placed at ``start``."""
        return ((1 << self.memory_slices) - 1) << start


def _table(gib_per_slice: float, names: tuple[str, ...]) -> Mapping[str, MigProfile]:
    geometry = (  # (compute slices, memory slices, valid starts) — see module docstring
        (1, 1, (0, 1, 2, 3, 4, 5, 6)),
        (1, 2, (0, 2, 4, 6)),
        (2, 2, (0, 2, 4)),
        (3, 4, (0, 4)),
        (4, 4, (0,)),
        (7, 8, (0,)),
    )
    return MappingProxyType(
        {n: MigProfile(n, c, m, m * gib_per_slice, s) for n, (c, m, s) in zip(names, geometry)}
    )


MIG_PROFILES: Mapping[str, Mapping[str, MigProfile]] = MappingProxyType(
    {
        "A100-40GB": _table(5.0, ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
        "A100-80GB": _table(10.0, ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    }
)


def mig_profiles(gpu_model: str) -> Mapping[str, MigProfile]:
    """The profile table of ``gpu_model``; InvalidArgument if there is none."""
    try:
        return MIG_PROFILES[gpu_model]
    except KeyError:
        raise InvalidArgument(
            "gpu_model", gpu_model, f"a model with a MIG profile table: {sorted(MIG_PROFILES)}"
        ) from None


def mig_profile(gpu_model: str, name: str) -> MigProfile:
    """Profile ``name`` of ``gpu_model``; InvalidArgument naming the valid profiles if unknown."""
    table = mig_profiles(gpu_model)
    try:
        return table[name]
    except KeyError:
        raise InvalidArgument("mig_profile", name, f"one of {list(table)} on {gpu_model}") from None


class MigGpu:
    """The GPU instances on one MIG-mode GPU (mutable state).

    ``instances`` maps start slot -> profile name.  Every operation keeps the geometry valid:
    each instance at one of its profile's valid starts, no two instances sharing a memory
    slice, compute slices <= 7.  ``place`` picks, among the valid free starts, the one that
    leaves the most room: (1) the largest profile (compute slices) still placeable afterwards,
    (2) then the most valid (profile, start) placements left, (3) then the longest run of free
    memory slices, (4) then the lowest start.  E.g. a 1g.5gb on an empty A100 goes to slot 6,
    which keeps 4g.20gb (start 0 only) available.
    """

    __slots__ = ("gpu_model", "_table", "_occupied", "_compute", "_instances")

    def __init__(self, gpu_model: str = "A100-40GB"):
        self.gpu_model = gpu_model
        self._table = mig_profiles(gpu_model)
        self._occupied = 0  # bit i set = memory slice i used
        self._compute = 0
        self._instances: dict[int, MigProfile] = {}

    # --- queries -------------------------------------------------------------------------
    def profile(self, profile: str | MigProfile) -> MigProfile:
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
    def occupied_mask(self) -> int:
        return self._occupied

    @property
    def compute_used(self) -> int:
        """Compute slices in use (0..7)."""
        return self._compute

    @property
    def free_memory_slices(self) -> int:
        return MEMORY_SLICES - bin(self._occupied).count("1")

    @property
    def empty(self) -> bool:
        return not self._instances

    def free_starts(self, profile: str | MigProfile) -> list[int]:
        """Valid starts of ``profile`` that are free now (empty if compute is short)."""
        p = self.profile(profile)
        return self._free_starts(p, self._occupied, self._compute)

    def can_place(self, profile: str | MigProfile) -> bool:
        return bool(self.free_starts(profile))

    def best_start(self, profile: str | MigProfile) -> int | None:
        """The start ``place`` would choose, or None if the profile does not fit."""
        p = self.profile(profile)
        starts = self._free_starts(p, self._occupied, self._compute)
        if not starts:
            return None
        return max(starts, key=lambda s: self._room_key(p, s))

    # --- changes -------------------------------------------------------------------------
    def place(self, profile: str | MigProfile, start: int | None = None) -> int:
        """Create an instance of ``profile`` (at ``start`` if given, else the best start) and
        return its start slot.  Raises Infeasible (nothing changes) if it does not fit."""
        p = self.profile(profile)
        free = self._free_starts(p, self._occupied, self._compute)
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
        return s

    def release(self, start: int) -> str:
        """Destroy the instance at ``start``; returns its profile name.  NotFound if none."""
        p = self._instances.pop(start, None)
        if p is None:
            raise NotFound(f"mig instance: no instance starts at slot {start} ({self.instances})")
        self._occupied &= ~p.mask(start)
        self._compute -= p.compute_slices
        return p.name

    def copy(self) -> "MigGpu":
        other = MigGpu(self.gpu_model)
        other._occupied, other._compute = self._occupied, self._compute
        other._instances = dict(self._instances)
        return other

    def __repr__(self) -> str:
        return f"MigGpu({self.gpu_model!r}, instances={self.instances})"

    # --- internals -----------------------------------------------------------------------
    @staticmethod
    def _free_starts(p: MigProfile, occupied: int, compute: int) -> list[int]:
        if compute + p.compute_slices > COMPUTE_SLICES:
            return []
        return [s for s in p.starts if not occupied & p.mask(s)]

    def _room_key(self, p: MigProfile, start: int) -> tuple[int, int, int, int]:
        occ = self._occupied | p.mask(start)
        comp = self._compute + p.compute_slices
        largest, count = 0, 0
        for q in self._table.values():
            n = len(self._free_starts(q, occ, comp))
            if n:
                count += n
                largest = max(largest, q.compute_slices)
        run = best = 0
        for i in range(MEMORY_SLICES):
            run = 0 if occ >> i & 1 else run + 1
            best = max(best, run)
        return (largest, count, best, -start)
