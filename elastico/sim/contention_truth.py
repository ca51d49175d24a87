"""The simulator's ground truth: Gavel's measured pairs where they apply, the contention model
(:mod:`elastico.perf.contention`) everywhere else (docs/model.md, "Interference on other GPU
models" and "Sharing mechanisms").

Who calls it: :func:`elastico.sim.simulator.simulate` (``truth=``; :meth:`GroundTruth.slowdowns_of`
after every round) through :func:`elastico.sim.simulator.slowdown_models` and the evaluation.
Whom it calls: the measured truth (:class:`elastico.predictor.learned.MeasuredSlowdown` and
:class:`~elastico.predictor.learned.TimeSlicedTruth`, unchanged), the contention model, the
activity model's per-job profile (the same draw the utilisation meter uses), the training
roofline (:class:`elastico.perf.training.TrainingSpeedModel`) and the LLM model.

**How they compose, per GPU** (its residents, not in MIG mode; a MIG instance is never slowed):

1. The GPU model has Gavel measurements (K80, P100, V100M16/32: ``measured.measured_on``), no
   resident is an LLM job, and every ordered pair of active residents was measured: the measured
   truth exactly as before (additive composition; under time-slicing the round-robin bound).
2. The GPU model has measurements, no LLM job, but some pair was not measured: per victim, the
   measured pair slowdown where Gavel measured it, the contention model's pair slowdown
   where not, composed additively (``1 + sum (pair - 1)``, at most ``k`` under time-slicing)
   -- the measured truth's own composition, with the contention model in the place of the
   analytic fallback it had (the predictor's model: the truth no longer borrows it).
3. Anything else -- a GPU model nobody measured pairs on (A100, H100, T4, G2, ...), or any LLM
   inference job among the residents: the contention model over all ``k`` residents at once.

**Each job's demand** (:class:`elastico.perf.contention.Demand`):

* a trace (training / inference / service) job: ``busy`` its activity profile's GPU utilisation
  alone (``kernel``) and ``sm`` its SM level while computing (``level``), capped by its MPS
  share under MPS (:func:`elastico.perf.activity.draw_profile`, the utilisation meter's draw);
  ``compute_bound`` its job type's roofline compute share at the reference V100
  (:meth:`elastico.perf.training.TrainingSpeedModel.compute_share`; another type: the median
  over Gavel's types) moved to the GPU it runs on (:func:`~elastico.perf.contention.compute_bound_on`);
  ``dram`` from that share (:func:`~elastico.perf.contention.roofline_dram`): the same rule
  and share (:func:`compute_bound_of`) the utilisation meter's profile takes its
  ``dram_level`` from, so the simulated node's solo measurement, the meter and this truth
  read one number for a job alone.  A resident
  whose placement profile has no GPU activity (``gpu_activity == 0``) neither slows nor is
  slowed.  A service's ``busy`` is its profile's, not lowered to the part of its capacity its
  load uses (the simulator derives that load fraction from the slowdowns): ASSUMPTION, errs
  towards more contention beside a service given more GPU than its load needs.
* an offline LLM inference job: ``busy`` 1 (continuous batching runs kernels back to back:
  :func:`elastico.llm_shapes.activity`'s assumption), ``sm`` its compute share (1 time-sliced),
  ``compute_bound`` the prefill share of its batch time on its configuration (prefill is
  compute-bound, decode bandwidth-bound: :func:`elastico.perf.llm.prefill_s` over
  :func:`~elastico.perf.llm.batch_latency_s` of its length classes, each at its largest batch).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Mapping

import numpy as np

from elastico.model import Configuration, Job
from elastico.perf import contention as cm

__all__ = ["GroundTruth", "compute_bound_of"]

_CACHE_LIMIT = 100_000


def _llm_prefill_share(job: Job, config: Configuration) -> float:
    """Prefill's share of one replica's batch time over the job's length classes."""
    from elastico.errors import InvalidArgument
    from elastico.llm_shapes import llm_config_of
    from elastico.perf import llm as perf_llm

    spec = job.llm
    cfg = replace(llm_config_of(job, config), replicas=1)
    pre = tot = 0.0
    try:
        for c in spec.work.split(config.replicas).classes:
            b = max(1, min(c.requests, perf_llm.max_batch(spec.model, cfg, c.input_tokens,
                                                          c.output_tokens)))
            waves = c.requests / b
            t = perf_llm.batch_latency_s(spec.model, cfg, b, c.input_tokens, c.output_tokens)
            if not math.isfinite(t) or t <= 0:
                continue
            pre += waves * perf_llm.prefill_s(spec.model, cfg, b, c.input_tokens)
            tot += waves * t
    except InvalidArgument:
        return 0.0  # a configuration the model refuses is never placed; decode-bound if so
    return min(1.0, pre / tot) if tot > 0 else 0.0


_LLM_PHI: dict[tuple, float] = {}


def compute_bound_of(job: Job, config: Configuration) -> float:
    """The job's roofline compute-bound share on ``config``'s GPU (module docstring): an LLM
    inference job's prefill share of its batch time, a training / trace job's type's share
    (:func:`elastico.perf.contention.job_compute_bound`).  What sets its DRAM activity in
    both the utilisation meter and this truth (:func:`elastico.perf.contention.roofline_dram`)."""
    if job.llm is not None:
        key = (job.id, job.llm, config.name, config.gpu_model, config.gpu_share,
               config.replicas)
        phi = _LLM_PHI.get(key)
        if phi is None:
            if len(_LLM_PHI) >= _CACHE_LIMIT:
                _LLM_PHI.clear()
            phi = _LLM_PHI[key] = _llm_prefill_share(job, config)
        return phi
    return cm.job_compute_bound(job.job_type, config.gpu_model)


class GroundTruth:
    """What co-residents run at in the simulator (module docstring).  ``measured``: Gavel's
    measured truth (a :class:`~elastico.predictor.learned.MeasuredSlowdown`, or None: the
    contention model everywhere); ``params``: the contention model's
    (:class:`~elastico.perf.contention.ContentionParams`).  Counts, for the evaluation:
    ``gpu_evaluations`` (GPUs with >= 2 residents evaluated), ``by_measured``,
    ``by_mixed``, ``by_model`` (which rule of the module docstring answered)."""

    def __init__(self, measured: Any = None, params: cm.ContentionParams | None = None):
        self.measured = measured
        self.params = params if params is not None else cm.ContentionParams()
        self._cache: dict[tuple, tuple[tuple[float, ...], str]] = {}
        self.gpu_evaluations = self.by_measured = self.by_mixed = self.by_model = 0

    # the measured truth's counters, for the evaluation's truth_pairs_* fields
    @property
    def lookups(self) -> int:
        return getattr(self.measured, "lookups", 0)

    @property
    def misses(self) -> int:
        return getattr(self.measured, "misses", 0)

    @property
    def unmeasured_gpu(self) -> int:
        return getattr(self.measured, "unmeasured_gpu", 0)

    def demand(self, job: Job, config: Configuration, nodes: int, time_sliced: bool,
               profile: Callable[[Job, Configuration, int], Any]) -> cm.Demand:
        """The job's :class:`~elastico.perf.contention.Demand` on one of its GPUs."""
        share = 1.0 if time_sliced else min(1.0, max(config.gpu_share, 1e-6))
        phi = compute_bound_of(job, config)
        if job.llm is not None:
            return cm.roofline_demand(1.0, 1.0, phi, share)
        p = profile(job, config, nodes)
        # dram = cm.roofline_dram(phi): the utilisation meter's profile has the same dram_level
        # (UtilisationMeter.profile passes this phi), so what the simulated node measures alone
        # and what the truth charges are one number
        return cm.roofline_demand(p.kernel, p.level, phi, share)

    def slowdowns_of(self, state, live: Mapping[str, Any], time_sliced: bool,
                     profile: Callable[[Job, Configuration, int], Any]) -> dict[str, float]:
        """Every placed job's true slowdown (max over its GPUs; 1.0 alone or on MIG): relative
        to its configuration's speed under MPS, to its whole-GPU speed under time-slicing (as
        :class:`~elastico.predictor.learned.TimeSlicedTruth`).  ``state``: the placement
        state after the round; ``live[id]``: the job's ``job`` and ``config``; ``profile``:
        ``(job, config, nodes) -> ActivityProfile`` (the utilisation meter's)."""
        book = state.book
        out = {j: 1.0 for j in book.jobs}
        mech = "time-slicing" if time_sliced else "mps"
        for f in np.flatnonzero((book.n_res >= 2) & ~book.layout.is_mig).tolist():
            ids = book.residents(f)
            profiles, _ = book.gpu_profiles(f)
            nodes = {j: max(1, len(state.assignment(j).node_indices)) for j in ids}
            key = (mech, tuple((j, live[j].config.name, live[j].config.gpu_model,
                                live[j].config.gpu_share, nodes[j]) for j in ids))
            hit = self._cache.get(key)
            if hit is None:
                sig, rule = self._gpu(ids, profiles, live, nodes, time_sliced, mech, profile)
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                hit = self._cache[key] = (tuple(sig), rule)
            sig, rule = hit
            # every evaluation counts under the rule that answered it, a cached one too (the
            # counters once moved only on a cache miss, so they depended on the order in
            # which a GPU's residents were listed, not on what answered)
            self.gpu_evaluations += 1
            if rule == "measured":
                self.by_measured += 1
            elif rule == "mixed":
                self.by_mixed += 1
            else:
                self.by_model += 1
            for j, s in zip(ids, sig):
                if s > out[j]:
                    out[j] = s
        return out

    def _gpu(self, ids, profiles, live, nodes, time_sliced, mech, profile
             ) -> tuple[list[float], str]:
        """The residents' true slowdowns and the rule that gave them (``"measured"``,
        ``"mixed"``, ``"model"``: module docstring)."""
        k = len(ids)
        gpu = profiles[0].gpu_model
        m = self.measured
        llm = any(live[j].job.llm is not None for j in ids)
        active = [p.gpu_activity > 0 for p in profiles]

        def dem(i: int) -> cm.Demand:
            l = live[ids[i]]
            d = self.demand(l.job, l.config, nodes[ids[i]], time_sliced, profile)
            return d if active[i] else replace(d, busy=0.0)

        if m is not None and not llm and m.measured_on(gpu):
            g = m.gpu_of(gpu)
            have = [[i == o or not (active[i] and active[o])
                     or (g, profiles[i].job_type, profiles[o].job_type) in m.table
                     for o in range(k)] for i in range(k)]
            if all(all(r) for r in have):
                if time_sliced:
                    from elastico.predictor.learned import TimeSlicedTruth

                    return [float(x) for x in TimeSlicedTruth(m).gpu_slowdowns(profiles)], "measured"
                return [float(x) for x in m.gpu_slowdowns(profiles)], "measured"
            ds = [dem(i) for i in range(k)]
            out = []
            for i in range(k):
                s = 1.0
                for o in range(k):
                    if o == i or not (active[i] and active[o]):
                        continue
                    if have[i][o]:
                        s += self._measured_pair(profiles[i], profiles[o], time_sliced) - 1.0
                    else:
                        s += cm.pair_slowdown(ds[i], ds[o], mech, self.params) - 1.0
                out.append(min(float(k), s) if time_sliced else s)
            return out, "mixed"
        return [float(x) for x in cm.slowdowns([dem(i) for i in range(k)], mech, self.params)], "model"

    def _measured_pair(self, a, b, time_sliced: bool) -> float:
        if time_sliced:
            from elastico.predictor.learned import TimeSlicedTruth

            return float(TimeSlicedTruth(self.measured).gpu_slowdowns([a, b])[0])
        return float(self.measured.pair_slowdown(a, b))
