"""MIG repartition planning: from a GPU's current geometry (which instances have running work)
to a target geometry, as an ordered list of create/destroy steps that is valid after every step
-- or a refusal that names the busy instance in the way.  And a chooser of the target geometry
for a list of wanted profiles.

Who calls it: the placer, when a MIG job needs an instance the current geometry lacks (and
later the node agent, which executes the steps with NVML / ``nvidia-smi mig``).  Whom it calls:
:mod:`elastico.mig` (profile tables, :func:`~elastico.mig.check_geometry`).
Pure: plain data in, a plan out; no clock, no gRPC, no Kubernetes.

Model of a GPU (the MIG user guide's terms): a *GPU instance* (GI) of a profile sits at a start
slot (:mod:`elastico.mig` has the tables and rules); ElastiCo gives each GI one *compute
instance* (CI) spanning all its SM slices (what ``nvidia-smi mig -cgi <profile> -C`` creates).
Work runs in a CI, so an instance with running work ("busy") must never be destroyed, and the
driver refuses to destroy a GI that still has a CI ("Reconfigure: When Idle" in the guide's
table of CUDA concurrency mechanisms).

Steps, in this order (:func:`plan_repartition`):

1. for each current instance the target does not keep (same profile at the same start), by
   start: ``destroy_ci`` (if it has a CI), then ``destroy_gi``;
2. for each target instance that is not there yet, by start: ``create_gi``, then ``create_ci``;
   a kept instance without a CI gets ``create_ci`` in the same pass.

Every destroy comes before every create, so each create finds the slices it needs already free.
Every intermediate geometry is a subset of the current one (during 1) or of the target (during
2), and a subset of a valid geometry is valid, so the GPU never holds an invalid geometry.  A
busy instance that the target does not keep makes the whole plan refused (no step is emitted):
the reason names it, the memory slices it holds and the target instances that need them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

from elastico.errors import InvalidArgument
from elastico.mig import MIG_GEOMETRY, MigGpu, check_geometry, mig_profile, mig_profiles

__all__ = [
    "MigInstance",
    "StepOp",
    "MigStep",
    "Blocker",
    "MigPlan",
    "MigChoice",
    "plan_repartition",
    "choose_geometry",
    "plan_for_profiles",
]


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance on the GPU now: ``profile`` at ``start`` (memory-slice index); ``busy``:
    it has running work (a bound pod or a CUDA process), so it must not be destroyed;
    ``has_ci``: its compute instance exists."""

    profile: str
    start: int
    busy: bool = False
    has_ci: bool = True


class StepOp(str, enum.Enum):
    """One driver operation (``nvidia-smi mig`` option in brackets)."""

    DESTROY_CI = "destroy_ci"  # -dci -gi <GI>
    DESTROY_GI = "destroy_gi"  # -dgi -gi <GI>
    CREATE_GI = "create_gi"  # -cgi <profile> (at the given placement: NVML CreateGpuInstanceWithPlacement)
    CREATE_CI = "create_ci"  # -cci -gi <GI> (the GI's full-size compute instance)


@dataclass(frozen=True)
class MigStep:
    """``op`` on the instance of ``profile`` at ``start``."""

    op: StepOp
    profile: str
    start: int

    def __str__(self) -> str:
        return f"{self.op.value} {self.profile}@{self.start}"


@dataclass(frozen=True)
class Blocker:
    """Why a plan is refused: the ``busy`` instance ``(profile, start)`` holds memory slices
    ``slices`` (e.g. ``"4-7"``) that the target instance ``needed_by`` (``(profile, start)``)
    needs too, or, with ``needed_by`` None, the target does not keep it (``slices``: all of
    its memory slices)."""

    busy: tuple[str, int]
    needed_by: tuple[str, int] | None
    slices: str

    def __str__(self) -> str:
        b = f"busy {self.busy[0]} at {self.busy[1]}"
        if self.needed_by is None:
            return f"{b} (memory slices {self.slices}) is not kept by the target"
        return f"{b} blocks {self.needed_by[0]} at {self.needed_by[1]} (both need memory slices {self.slices})"


@dataclass(frozen=True)
class MigPlan:
    """The steps from ``current`` to ``target`` (``(profile, start)`` pairs, start order), or,
    when ``refused`` is not empty, no steps and the ``blockers`` that explain it."""

    gpu_model: str
    current: tuple[tuple[str, int], ...]
    target: tuple[tuple[str, int], ...]
    steps: tuple[MigStep, ...] = ()
    refused: str = ""
    blockers: tuple[Blocker, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refused


@dataclass(frozen=True)
class MigChoice:
    """What :func:`choose_geometry` picked: the target ``geometry``; ``starts[i]``: the start of
    the instance that serves ``wanted[i]`` (None: not served); the ``plan`` to get there."""

    wanted: tuple[str, ...]
    geometry: tuple[tuple[str, int], ...]
    starts: tuple[int | None, ...]
    plan: MigPlan = field(repr=False)

    @property
    def served(self) -> int:
        return sum(s is not None for s in self.starts)

    @property
    def unserved(self) -> tuple[str, ...]:
        return tuple(w for w, s in zip(self.wanted, self.starts) if s is None)


# --------------------------------------------------------------------------------- helpers
def _instances(gpu_model: str, current: Iterable, field_name: str = "current") -> list[MigInstance]:
    out: list[MigInstance] = []
    for i, item in enumerate(current):
        if isinstance(item, MigInstance):
            inst = item
        else:
            try:
                inst = MigInstance(*item)
            except TypeError:
                raise InvalidArgument(f"{field_name}[{i}]", item,
                                      "a MigInstance or (profile, start[, busy[, has_ci]])") from None
        if not isinstance(inst.busy, bool) or not isinstance(inst.has_ci, bool):
            raise InvalidArgument(f"{field_name}[{i}]", item, "busy and has_ci are bools")
        out.append(inst)
    check_geometry(gpu_model, [(x.profile, x.start) for x in out], field_name)
    return out


def _geometry(gpu_model: str, target: Iterable, field_name: str = "target") -> list[tuple[str, int]]:
    geo = [tuple(x) for x in target]
    check_geometry(gpu_model, geo, field_name)
    return sorted(geo, key=lambda x: (x[1], x[0]))


def _slices(mask: int) -> str:
    idx = [i for i in range(mask.bit_length()) if mask >> i & 1]
    return f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else str(idx[0])


# --------------------------------------------------------------------------------- planner
def plan_repartition(gpu_model: str, current: Iterable, target: Iterable) -> MigPlan:
    """Plan the steps that turn ``current`` into ``target`` on one GPU of ``gpu_model``.

    ``current``: :class:`MigInstance` items (or ``(profile, start[, busy[, has_ci]])`` tuples);
    ``target``: ``(profile, start)`` pairs.  An instance is kept iff the target has the same
    profile at the same start.  Returns a :class:`MigPlan`: its ``steps`` (module docstring has
    the order) or, if a busy instance is not kept, ``refused`` with the ``blockers``.
    Raises InvalidArgument for an unknown model or profile, or an invalid current or target
    geometry (:func:`elastico.mig.check_geometry`).
    """
    cur = _instances(gpu_model, current)
    tgt = _geometry(gpu_model, target)
    cur_sorted = sorted(cur, key=lambda x: x.start)
    cur_geo = tuple((x.profile, x.start) for x in cur_sorted)
    keep = set(tgt)
    blockers: list[Blocker] = []
    for x in cur_sorted:
        if not x.busy or (x.profile, x.start) in keep:
            continue
        m = mig_profile(gpu_model, x.profile).mask(x.start)
        hits = [(n, s) for n, s in tgt if mig_profile(gpu_model, n).mask(s) & m]
        if not hits:
            blockers.append(Blocker((x.profile, x.start), None, _slices(m)))
        for n, s in hits:
            blockers.append(Blocker((x.profile, x.start), (n, s), _slices(mig_profile(gpu_model, n).mask(s) & m)))
    if blockers:
        return MigPlan(gpu_model, cur_geo, tuple(tgt), (), "; ".join(map(str, blockers)), tuple(blockers))
    steps: list[MigStep] = []
    for x in cur_sorted:
        if (x.profile, x.start) not in keep:
            if x.has_ci:
                steps.append(MigStep(StepOp.DESTROY_CI, x.profile, x.start))
            steps.append(MigStep(StepOp.DESTROY_GI, x.profile, x.start))
    have = {(x.profile, x.start): x for x in cur}
    for n, s in tgt:
        x = have.get((n, s))
        if x is None:
            steps.append(MigStep(StepOp.CREATE_GI, n, s))
            steps.append(MigStep(StepOp.CREATE_CI, n, s))
        elif not x.has_ci:
            steps.append(MigStep(StepOp.CREATE_CI, n, s))
    return MigPlan(gpu_model, cur_geo, tuple(tgt), tuple(steps))


# --------------------------------------------------------------------------------- chooser
@lru_cache(maxsize=64)
def _all_geometries(gpu_model: str, names: frozenset[str]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Every valid geometry of ``gpu_model`` that uses only profiles ``names`` (brute force:
    a GPU has at most 8 memory slices, so there are at most a few thousand)."""
    C, _ = MIG_GEOMETRY[gpu_model]
    profs = sorted((mig_profile(gpu_model, n) for n in names), key=lambda p: p.name)
    cands = sorted(((p, s) for p in profs for s in p.starts), key=lambda c: (c[1], c[0].name))
    out: list[tuple[tuple[str, int], ...]] = []

    def walk(i: int, mem: int, comp: int, counts: dict[str, int], media: int, chosen: list) -> None:
        if i == len(cands):
            out.append(tuple(chosen))
            return
        walk(i + 1, mem, comp, counts, media, chosen)
        p, s = cands[i]
        k = counts.get(p.name, 0)
        if (mem & p.mask(s) or comp + p.compute_slices > C or k >= p.max_count or (p.media and media)):
            return
        counts[p.name] = k + 1
        chosen.append((p.name, s))
        walk(i + 1, mem | p.mask(s), comp + p.compute_slices, counts, media + p.media, chosen)
        chosen.pop()
        counts[p.name] = k

    walk(0, 0, 0, {}, 0, [])
    return tuple(out)


def _room(gpu_model: str, geometry: Sequence[tuple[str, int]]) -> tuple[int, int]:
    g = MigGpu(gpu_model)
    for n, s in geometry:
        g.place(n, s)
    largest = count = 0
    for p in mig_profiles(gpu_model).values():
        k = len(g.free_starts(p))
        if k:
            count += k
            largest = max(largest, p.compute_slices)
    return largest, count


def choose_geometry(gpu_model: str, current: Iterable, wanted: Sequence[str]) -> MigChoice:
    """The target geometry that keeps every busy instance where it is and serves as many of the
    ``wanted`` profiles as possible, with the plan to reach it.

    ``current``: as for :func:`plan_repartition`; ``wanted``: profile names (repeats ask for
    several instances).  An idle (not busy) current instance of a wanted profile may serve it
    as it is; idle instances may also be destroyed to make room.  Brute force over every valid
    geometry made of the wanted and current profiles.  Tie rule, in order:

    1. the most wanted profiles served;
    2. then the most SM slices among the served (bigger requests first);
    3. then the fewest steps (keeps idle instances, creates nothing unwanted);
    4. then the most room left for later requests: the largest compute profile still placeable,
       then the most free valid (profile, start) placements (the rule of
       :meth:`elastico.mig.MigGpu.place`);
    5. then the smallest geometry as a sorted list of ``(start, profile)`` (determinism).

    Within a geometry, ``wanted[i]`` is served, in the order given, by an idle current instance
    of its profile (lowest start first) before a new one.  Raises InvalidArgument for unknown
    profiles or an invalid current geometry.  Always returns a choice (it may serve nothing).
    """
    cur = _instances(gpu_model, current)
    wanted = tuple(wanted)
    table = mig_profiles(gpu_model, include_media=True)
    for i, w in enumerate(wanted):
        if w not in table:
            raise InvalidArgument(f"wanted[{i}]", w, f"one of {list(table)} on {gpu_model}")
    busy = {(x.profile, x.start) for x in cur if x.busy}
    idle = {(x.profile, x.start): x for x in cur if not x.busy}
    names = frozenset(wanted) | {x.profile for x in cur}
    want_count: dict[str, int] = {}
    for w in wanted:
        want_count[w] = want_count.get(w, 0) + 1

    scored = []
    for geo in _all_geometries(gpu_model, names):
        gs = set(geo)
        if not busy <= gs:
            continue
        free_of: dict[str, int] = {}
        for n, s in geo:
            if (n, s) not in busy:
                free_of[n] = free_of.get(n, 0) + 1
        served = {n: min(k, free_of.get(n, 0)) for n, k in want_count.items()}
        n_served = sum(served.values())
        slices = sum(table[n].compute_slices * k for n, k in served.items())
        steps = sum(1 + x.has_ci for key, x in idle.items() if key not in gs)
        steps += sum(2 if key not in idle else (not idle[key].has_ci) for key in geo if key not in busy)
        scored.append(((-n_served, -slices, steps), geo))
    best_key = min(k for k, _ in scored)
    tied = [g for k, g in scored if k == best_key]
    if len(tied) > 1:
        top = max(_room(gpu_model, g) for g in tied)
        tied = [g for g in tied if _room(gpu_model, g) == top]
    geo = min(tied, key=lambda g: sorted((s, n) for n, s in g))
    geo = tuple(sorted(geo, key=lambda x: (x[1], x[0])))

    pool: dict[str, list[int]] = {}
    for n, s in sorted(geo, key=lambda x: ((x not in idle), x[1])):  # idle kept ones first
        if (n, s) not in busy:
            pool.setdefault(n, []).append(s)
    starts = tuple(pool[w].pop(0) if pool.get(w) else None for w in wanted)
    return MigChoice(wanted, geo, starts, plan_repartition(gpu_model, cur, geo))


def plan_for_profiles(gpu_model: str, current: Iterable, wanted: Sequence[str]) -> MigPlan:
    """The plan of :func:`choose_geometry` (a convenience for callers that need only steps)."""
    return choose_geometry(gpu_model, current, wanted).plan
