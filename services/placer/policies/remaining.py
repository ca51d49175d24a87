"""What a policy may believe about a job's remaining work (docs/model.md, "Remaining work").

A live scheduler does not know how long a job will run.  The ``jct`` utility's remaining work
(:mod:`elastico.pricing.utilities`) comes from one of these estimates,
``PolicyEnv.remaining_estimate``:

* ``elapsed`` (default): from what the job has attained only -- its progress so far ``a``
  (``Job.done``, normalized seconds, what a live system counts as attained service) and a
  prior distribution of job durations ``W`` (the trace's: every batch pod's
  ``deletion - scheduled``, :func:`trace_work_prior`).  Estimate = ``E[W | W > a] - a``, the
  mean residual life of a job that has already run ``a`` (Tiresias, NSDI'19, schedules by
  attained service and the duration distribution for the same reason); past the longest
  duration in the prior, ``a`` itself (a job that outlived everything is expected to live
  about as long again).
* ``user``: the user's declared work minus progress, ``max(est - a, 0)``
  (``PolicyEnv.user_estimates[job id]``, else ``Job.work``: in the Kubernetes loop
  ``Job.work`` *is* the pod's ``elastico.io/work`` annotation, the user's estimate); a job
  that has outrun its estimate falls back to ``elapsed``.  ``elastico simulate
  --remaining-estimate user`` draws estimates with the error users make (docs/model.md).
* ``oracle``: the true remaining work ``Job.remaining`` -- only where the simulator's
  ``Job.work`` is the truth, and only as a sensitivity run: no live system has it.

An offline LLM inference job (``Job.llm``) names its work -- its requests' tokens -- so every
estimate takes its declared work minus progress (:mod:`elastico.llm_job`): what the job told
the scheduler, not an oracle.  So does an LLM training job (``Job.llm_train``: the tokens it
trains on, :mod:`elastico.llm_train_job`).

Who calls it: :class:`~elastico.placer.policies.elastico.ElasticoPolicy` builds one; stage 3
of its round (:func:`elastico.placer.policies.pipeline.value`) calls it.  Pure (the prior is
read once from the bundled trace and cached).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.model import Job

__all__ = ["REMAINING_ESTIMATES", "RemainingEstimator", "trace_work_prior",
           "check_remaining_estimate"]

#: The estimates a policy may plan with (module docstring); the first is the default.
REMAINING_ESTIMATES = ("elapsed", "user", "oracle")


def check_remaining_estimate(value: object, field: str = "remaining_estimate") -> str:
    """``value`` if it is one of :data:`REMAINING_ESTIMATES`, else InvalidArgument naming
    ``field``, the value and the allowed ones."""
    if value not in REMAINING_ESTIMATES:
        raise InvalidArgument(field, value, "one of " + ", ".join(REMAINING_ESTIMATES))
    return str(value)


@lru_cache(maxsize=1)
def trace_work_prior() -> tuple[float, ...]:
    """Durations (seconds, sorted) of every batch pod of the bundled trace that ran:
    ``max(1, deletion_s - scheduled_s)`` of the GPU pods with both times whose kind is not
    ``service`` -- the same rule as :func:`elastico.sim.workload.build_workload`'s ``work``."""
    from elastico.model import JobKind
    from elastico.trace import job_kind, read_pods

    out = []
    for p in read_pods():
        if not p.num_gpus or p.scheduled_s is None or p.deletion_s is None:
            continue
        if job_kind(p) is JobKind.SERVICE:
            continue
        out.append(max(1.0, p.deletion_s - p.scheduled_s))
    return tuple(sorted(out))


class RemainingEstimator:
    """``estimate(job) -> seconds`` of remaining work at normalized throughput 1.0 (module
    docstring).  ``mode``: one of :data:`REMAINING_ESTIMATES`; ``prior``: durations for
    ``elapsed`` (seconds, any order; default :func:`trace_work_prior`); ``user_estimates``:
    job id -> declared work (seconds) for ``user``.  InvalidArgument for an unknown mode or a
    prior that is empty or holds a value that is not finite and > 0."""

    def __init__(self, mode: str = "elapsed", prior: Sequence[float] | None = None,
                 user_estimates: Mapping[str, float] | None = None):
        self.mode = check_remaining_estimate(mode)
        self.user_estimates = dict(user_estimates or {})
        self._prior = None if prior is None else self._check(prior)
        self._suffix: np.ndarray | None = None

    @staticmethod
    def _check(prior: Sequence[float]) -> np.ndarray:
        w = np.sort(np.asarray(list(prior), dtype=float))
        if w.size == 0 or not np.all(np.isfinite(w)) or w[0] <= 0:
            raise InvalidArgument("work_prior", f"{w.size} values",
                                  "a non-empty list of finite durations > 0 (seconds)")
        return w

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if self._prior is None:
            self._prior = self._check(trace_work_prior())
        if self._suffix is None:
            # suffix[i] = sum of prior[i:]
            self._suffix = np.concatenate([np.cumsum(self._prior[::-1])[::-1], [0.0]])
        return self._prior, self._suffix

    def elapsed(self, attained: float) -> float:
        """Mean residual life ``E[W | W > a] - a`` of the prior at attained work ``a``
        (seconds); ``a`` past the prior's longest duration."""
        w, suf = self._tables()
        i = int(np.searchsorted(w, attained, side="right"))
        if i >= w.size:
            return max(attained, 1.0)
        return float(suf[i] / (w.size - i) - attained)

    def __call__(self, job: Job) -> float:
        if self.mode == "oracle" or job.llm is not None or job.llm_train is not None:
            # an LLM job (inference or training) declares its tokens
            return job.remaining
        if self.mode == "user":
            est = self.user_estimates.get(job.id, job.work)
            if est > job.done:
                return est - job.done
        return self.elapsed(job.done)
