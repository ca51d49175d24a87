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
        """The first failed shape (in failing order) that ``c`` dominates, or None."""
        if not self.dominated(c):
            return None
        # only shapes of the same GPU model and MIG profile can be dominated
        return next(f for f in self._by_key[(c.gpu_model, c.mig_profile)] if dominates(c, f))

    def __iter__(self) -> Iterator[Configuration]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)
