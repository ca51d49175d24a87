"""What a long-running placer does around every round of a policy it keeps between rounds:
the steps ``PlacerService.RunRound`` (:mod:`elastico.placer.server`) and the Kubernetes
scheduler loop (:mod:`elastico.placer.kube.loop`) share, in one place.

:func:`start_round` before the round's first prediction: a slowdown model that fell back in
an earlier round (a remote predictor was unreachable) asks the predictor again.
:func:`finish_round` after a round that applied: the predictor calls the analytic fallback
answered count on ``elastico_placer_predictor_fallbacks_total``, and the policy forgets the
jobs that left (their warm caches: shape families, warm-start prices, dwell times).  A round
abandoned with nothing applied calls neither finish step.

Pure: no gRPC, no Kubernetes, no clock.  The trace spans are the round's own
(:func:`elastico.placer.round.run_round`); nothing here opens one.
"""

from __future__ import annotations

from typing import Iterable, Protocol

__all__ = ["FallbackObserver", "start_round", "finish_round"]


class FallbackObserver(Protocol):
    """Counts predictor calls answered by the fallback model (e.g.
    :class:`elastico.runtime.metrics.ServiceMetrics`)."""

    def observe_predictor_fallback(self, calls: int = 1) -> None: ...


def start_round(slowdown: object) -> None:
    """A new round for ``slowdown`` (the placer's slowdown model): its ``reset`` clears the
    previous round's fallback (reason and call count); a model without ``reset`` keeps no
    per-round state."""
    reset = getattr(slowdown, "reset", None)
    if reset is not None:
        reset()


def finish_round(policy: object, slowdown: object, seen: Iterable[str], ids: Iterable[str],
                 metrics: FallbackObserver | None = None) -> frozenset[str]:
    """After a round that applied: counts ``slowdown.fallback_calls`` (the round's predictor
    calls answered by the analytic fallback; a model without it never falls back) on
    ``metrics``, and calls ``policy.forget(job_id)`` (where the policy has it) for every job
    of ``seen`` (the ids of the previous round's jobs) not in ``ids`` (this round's).
    Returns ``ids`` as a frozenset: the next round's ``seen``."""
    fallbacks = getattr(slowdown, "fallback_calls", 0)
    if metrics is not None and fallbacks:
        metrics.observe_predictor_fallback(fallbacks)
    ids = frozenset(ids)
    forget = getattr(policy, "forget", None)
    if forget is not None:
        for gone in sorted(set(seen) - ids):
            forget(gone)
    return ids
