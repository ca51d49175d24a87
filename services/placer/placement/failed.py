"""The shapes that found no room in one round, so that larger ones are refused without a search.

Within one round, before any release, the cluster only fills up: a shape that needs at least
what a failed one needs (same GPU model and MIG profile) cannot fit either -- up to slowdown
bounds, which depend on the job, so a failure for a bound is never recorded.

Owns: :func:`dominates` (that partial order) and :class:`FailedShapes` (a round's failures,
with the minimal ones per model and profile kept for quick checks).
Who calls it: :meth:`~elastico.placer.placement.ClusterState.place_unless_dominated` and
``place_many``, and the policies (:mod:`elastico.placer.policies`), which keep one per round.
Whom it calls: nothing (plain :class:`~elastico.model.Configuration` comparisons).
"""

from __future__ import annotations

from typing import Iterable, Iterator

from elastico.model import Configuration

__all__ = ["dominates", "FailedShapes"]


def dominates(c: Configuration, f: Configuration) -> bool:
    """``c`` needs at least what ``f`` needs on the same GPU model and MIG profile (GPUs, share,
    GPU memory, CPU, host memory), so if ``f`` did not fit, ``c`` will not either -- up to
    slowdown bounds, which depend on the job's profile."""
    return (c.gpu_model == f.gpu_model and c.mig_profile == f.mig_profile
            and c.num_gpus >= f.num_gpus and c.gpu_share >= f.gpu_share
            and c.gpu_mem_gib >= f.gpu_mem_gib and c.cpu >= f.cpu and c.mem_gib >= f.mem_gib)


class FailedShapes:
    """The shapes that failed for lack of room in one round, in the order they failed (what
    :meth:`~elastico.placer.placement.ClusterState.place_unless_dominated` and the policies
    append to and iterate).

    A round's list grows to hundreds of shapes and every candidate is checked against it, so
    besides the list it keeps, per (GPU model, MIG profile), the minimal shapes: ``c``
    dominates some failed shape iff it dominates a minimal one (:func:`dominates` is a
    partial order), so :meth:`dominated` looks at a handful instead of all -- same answers
    as scanning the list."""

    def __init__(self, shapes: Iterable[Configuration] = ()):
        self._all: list[Configuration] = []
        # per (GPU model, MIG profile): every shape, and the minimal ones
        self._by_key: dict[tuple[str | None, str | None], list[Configuration]] = {}
        self._minimal: dict[tuple[str | None, str | None], list[Configuration]] = {}
        self._reasons: dict[Configuration, str] = {}  # why a shape failed, when told
        # first_dominated's answers: shape -> (first dominated failed shape or None, length of
        # its key's list when asked).  The lists only grow, so a found shape stays the first,
        # and a None needs only the shapes appended since (a queue of thousands of waiting
        # jobs asks for the same few shapes every round)
        self._first: dict[Configuration, tuple[Configuration | None, int]] = {}
        # refusal()'s message per failed shape with a reason (a reason, once told, never
        # changes: _reasons.setdefault)
        self._refusals: dict[int, tuple[Configuration, str]] = {}
        # refused_all's answers: id of a tuple of shapes -> (the tuple, length of the list
        # then, the joined refusals)
        self._all_refused: dict[int, tuple[tuple, int, str]] = {}
        for c in shapes:
            self.append(c)

    def append(self, c: Configuration, reason: str = "") -> None:
        """Record that ``c`` found no room; ``reason``: the placement's words for why."""
        if reason:
            self._reasons.setdefault(c, reason)
        self._all.append(c)
        key = (c.gpu_model, c.mig_profile)
        self._by_key.setdefault(key, []).append(c)
        mins = self._minimal.setdefault(key, [])
        if any(dominates(c, m) for m in mins):
            return
        mins[:] = [m for m in mins if not dominates(m, c)]
        mins.append(c)

    def dominated(self, c: Configuration) -> bool:
        """``any(dominates(c, f) for f in self)``."""
        mins = self._minimal.get((c.gpu_model, c.mig_profile))
        if mins:
            # dominates(c, m) inlined: GPU model and MIG profile are equal within a key
            n, share, gmem, cpu, mem = c.num_gpus, c.gpu_share, c.gpu_mem_gib, c.cpu, c.mem_gib
            for m in mins:
                if (n >= m.num_gpus and share >= m.gpu_share and gmem >= m.gpu_mem_gib
                        and cpu >= m.cpu and mem >= m.mem_gib):
                    return True
        return False

    def reason(self, c: Configuration) -> str:
        """Why the failed shape ``c`` found no room ("" when not told)."""
        return self._reasons.get(c, "")

    def first_dominated(self, c: Configuration) -> Configuration | None:
        """The first failed shape (in failing order) that ``c`` dominates, or None.
        Memoised per shape (by value) within the list's life: same answers as a fresh scan."""
        # only shapes of the same GPU model and MIG profile can be dominated
        shapes = self._by_key.get((c.gpu_model, c.mig_profile), ())
        hit = self._first.get(c)
        if hit is not None:
            f, n = hit
            if f is not None or n == len(shapes):
                return f
            # not dominated by the first n: the first it dominates is among the newer ones
            f = next((g for g in shapes[n:] if dominates(c, g)), None)
        elif not self.dominated(c):
            f = None
        else:
            f = next(g for g in shapes if dominates(c, g))
        self._first[c] = (f, len(shapes))
        return f

    def refusal(self, c: Configuration) -> str | None:
        """Why :meth:`~elastico.placer.placement.ClusterState.place_unless_dominated` refuses
        ``c`` without a search (it dominates a shape that failed this round), or None when it
        does not -- so a caller can skip building ``c``'s profile."""
        f = self.first_dominated(c)
        if f is None:
            return None
        hit = self._refusals.get(id(f))
        if hit is not None and hit[0] is f:
            return hit[1]
        why = self.reason(f)
        msg = (f"no room: a smaller or equal shape ({f.num_gpus} x {f.gpu_share:g} "
               f"{f.gpu_model}) already failed this round" + (f" ({why})" if why else ""))
        if why:
            self._refusals[id(f)] = (f, msg)
        return msg

    def refused_all(self, shapes: tuple) -> str | None:
        """``"; ".join`` of :meth:`refusal` of every shape of ``shapes`` as
        :meth:`note_refused_all` recorded it for this very tuple, while no shape has failed
        since (the answers are then the same); None otherwise."""
        hit = self._all_refused.get(id(shapes))
        if hit is not None and hit[0] is shapes and hit[1] == len(self._all):
            return hit[2]
        return None

    def note_refused_all(self, shapes: tuple, why: str) -> None:
        """Record that every shape of ``shapes`` was refused (:meth:`refusal`), with ``why``
        their joined refusals (a queue of jobs with one request: the same tuple from
        :meth:`~elastico.placer.policies.common.JobCatalog.requested`)."""
        self._all_refused[id(shapes)] = (shapes, len(self._all), why)

    def __iter__(self) -> Iterator[Configuration]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)
