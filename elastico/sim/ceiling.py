"""The GPU-utilization ceiling of a workload: the most utilization any policy could reach.

Who calls it: :mod:`elastico.sim.evaluate` (one ceiling per cluster and seed, written into
results.json and the report), ``elastico simulate`` (printed under its table) and tests.
Pure: plain data in, a number out.

``gpu_utilization`` (docs/metrics.md) is the time-average, over the arrival window
``[first arrival, last arrival]`` (the simulator runs at least to the last arrival), of busy
GPUs / cluster GPUs, where the simulator
(:mod:`elastico.sim.simulator`) counts a placed job with configuration c as keeping
``n_c x a_c / sigma`` GPUs busy while it progresses at ``x_c / sigma`` (``a_c`` its solo SM
activity, ``x_c`` its normalized throughput, ``sigma >= 1`` its interference slowdown), and a
service (rate 1: it lives until deleted) as keeping ``n_c a_c / sigma x min(1, ref / r)``
busy, ``r = x_c / sigma`` its capacity and ``ref`` its requested shape's throughput on that GPU
model.  Two bounds on one job's busy GPU-seconds inside the window hold for every policy that
chooses among the configurations ``C`` it is given, whatever the co-location, queueing or
restarts:

* *instantaneous*: busy <= ``peak = max_c n_c a_c`` (services: ``max_c n_c a_c min(1,
  ref_c / x_c)``, since ``sigma >= 1``), and the job is in the window at most
  ``window_end - arrival`` seconds;
* *work*: a batch job's busy GPU-seconds over its whole life are
  ``sum over its configuration spells of n_c a_c / x_c x (work done in the spell)``
  (``sigma`` cancels), so at most ``work x max_c n_c a_c / x_c``; a service progresses at
  rate 1, so at most ``work x peak``.

The ceiling is ``min(1, sum_j min(instantaneous_j, work_j) / (gpus x window))``, raised by a
relative 1e-9 to absorb floating-point summation order.  It ignores
GPU capacity, placement and every job's competition for the GPUs, so it is loose: a measured
utilization below it says nothing; a *target* above it cannot be reached by any such policy
on that workload under the simulator's model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Node
from elastico.perf.throughput import ThroughputModel

__all__ = ["JobEnvelope", "job_envelope", "utilization_ceiling", "workload_ceiling"]

_ROUNDING = 1e-9


@dataclass(frozen=True)
class JobEnvelope:
    """What bounds one job's busy GPUs (module docstring).  ``arrival_s`` and ``work``
    (seconds; work in seconds at normalized rate 1), ``peak``: most GPUs it can keep busy at
    once, ``busy_per_work``: most busy GPU-seconds per unit of work (``peak`` for a service,
    which progresses at rate 1)."""

    arrival_s: float
    work: float
    peak: float
    busy_per_work: float


def job_envelope(job: Job, configs: Iterable[Configuration],
                 activity: Callable[[Configuration], float],
                 requested: Callable[[str], float] | None = None) -> JobEnvelope:
    """The :class:`JobEnvelope` of ``job`` over ``configs`` (every configuration a policy may
    give it; the wait configuration and configurations of throughput 0 are skipped).
    ``activity(c)``: the fraction of one GPU's SMs the job keeps busy per GPU alone with c
    (the simulator's ``activity``); ``requested(gpu_model)``: normalized throughput of the
    job's requested shape on that model (services only; None = the configuration's own, i.e.
    no credit for spare capacity).  Raises InvalidArgument when no configuration has a
    positive throughput."""
    peak = per_work = 0.0
    seen = False
    for c in configs:
        if c.is_wait or c.throughput <= 0:
            continue
        seen = True
        busy = c.num_gpus * activity(c)
        if job.kind is JobKind.SERVICE:
            ref = requested(c.gpu_model) if requested is not None else c.throughput
            busy *= min(1.0, ref / c.throughput) if ref > 0 else 1.0
            peak = max(peak, busy)
        else:
            peak = max(peak, busy)
            per_work = max(per_work, busy / c.throughput)
    if not seen:
        raise InvalidArgument(f"job[{job.id}]", "no configuration",
                              "needs at least one configuration with throughput > 0")
    return JobEnvelope(job.arrival_s, job.work, peak,
                       peak if job.kind is JobKind.SERVICE else per_work)


def utilization_ceiling(envelopes: Sequence[JobEnvelope], gpus: int) -> float:
    """The most ``gpu_utilization`` (a fraction in [0, 1]) any policy could reach on these
    jobs with ``gpus`` cluster GPUs over their arrival window (module docstring).  NaN when
    the window is empty (fewer than two distinct arrival times: the simulator then averages
    up to the end of the run, which no bound here knows).  Raises InvalidArgument for
    ``gpus`` < 1 or no jobs."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise InvalidArgument("gpus", gpus, "must be an integer >= 1")
    if not envelopes:
        raise InvalidArgument("envelopes", "[]", "must hold at least one job")
    lo = min(e.arrival_s for e in envelopes)
    hi = max(e.arrival_s for e in envelopes)
    if not hi > lo:
        return math.nan
    total = sum(min(e.peak * (hi - e.arrival_s), e.work * e.busy_per_work) for e in envelopes)
    # raised by a relative 1e-9: the simulator sums the same products in another order, and a
    # utilization that reaches the ceiling exactly must not print one ulp above it
    return min(1.0, total / (gpus * (hi - lo)) * (1.0 + _ROUNDING))


def workload_ceiling(jobs: Sequence[Job], nodes: Sequence[Node],
                     throughput: ThroughputModel) -> float:
    """The ceiling of ``jobs`` on ``nodes`` over every configuration the evaluated policies
    may give a job: RST's candidates before pruning
    (:func:`elastico.shapes.candidate_configurations`, MIG instances on the nodes' MIG-mode
    models included) and the requested shape as a whole GPU (``exclusive``, ``gavel``) and as
    a share (``time-slicing``, ``fgd``, ``elastico-no-rst``).  Activities and requested shapes
    come from a :class:`elastico.placer.policies.common.JobCatalog` on ``nodes`` with
    ``throughput``, as the policies' own (the simulator's ``activity``).  A job whose request
    fits no GPU model of the cluster can never run (the simulator marks it unplaceable): it
    adds nothing and is skipped.  NaN and errors as :func:`utilization_ceiling`."""
    from elastico.model import mig_models_of
    from elastico.placer.policies.common import JobCatalog, PolicyEnv
    from elastico.predictor import NoInterference
    from elastico.shapes import candidate_configurations

    # the slowdown model plays no part in a profile or a requested shape
    catalog = JobCatalog(PolicyEnv(nodes=nodes, throughput=throughput, slowdown=NoInterference()))
    mig_models = tuple(mig_models_of(nodes))
    envs = []
    for j in jobs:
        try:
            configs = candidate_configurations(j, catalog.gpu_models, throughput,
                                               mig_models=mig_models)
        except InvalidArgument:
            continue
        asked = {c.gpu_model: c.throughput for c in catalog.requested(j, False)}
        configs += catalog.requested(j, True)
        envs.append(job_envelope(j, configs, lambda c, _j=j: catalog.profile(_j, c).gpu_activity,
                                 lambda m, _a=asked: _a.get(m, 0.0)))
    if not envs:
        return math.nan
    return utilization_ceiling(envs, sum(n.num_gpus for n in nodes))
