"""The simulator's utilisation as DCGM reports it: SM activity, GPU utilisation and DRAM
activity per GPU and cluster-wide (docs/metrics.md, "SM activity and GPU utilisation as DCGM
defines them").

Who calls it: :func:`elastico.sim.simulator.simulate` (one :class:`UtilisationMeter` per replay:
:meth:`~UtilisationMeter.interval` after every round, :meth:`~UtilisationMeter.metrics` at the
end) and ``bench/activity_model.py`` (``record=True``: the per-GPU readings whose CDF the
``sm_active_ks`` check compares with AcmeTrace's).  Whom it calls: the activity model
:mod:`elastico.perf.activity` (each job's profile, drawn once per job and seed; the combination
rule of co-located jobs) and the placement state's assignments (which GPUs a job holds).

What a placed job contributes on each of its GPUs, as fractions of wall time
(:class:`elastico.perf.activity.Resident`):

* SM level: its profile's ``level`` (:func:`elastico.perf.activity.draw_profile`) capped by its
  compute share -- an MPS active-thread percentage or a MIG instance's compute slices / the
  GPU's -- ``min(level, share)``: its kernels fill at most the SMs it may use.  A time-sliced
  job is not capped (time-slicing enforces no share).  DRAM level: not capped (ASSUMPTION, the
  contention truth's: an MPS share limits SMs, not memory bandwidth -- NVIDIA MPS
  documentation; on a MIG instance it scales with the slice, which owns its memory
  controllers), the job's roofline DRAM activity while computing
  (:func:`elastico.perf.contention.roofline_dram` of
  :func:`elastico.sim.contention_truth.compute_bound_of`: ``(1 - phi) x 0.9``, the number the
  contention truth charges as its DRAM demand).
* time: its compute and kernel fractions, times 1 for a batch job under MPS, MIG or alone
  (interference stretches every phase of its step alike, and its warps stalled by a co-runner
  still count as active: DCGM's definition), ``1 / slowdown`` for a time-sliced batch job (its
  kernels run only in its turns: the same kernel time per unit of work spread over ``slowdown``
  times the wall time), and the service's load fraction (the simulator's ``duty``) for a
  service, which keeps busy only what its requested shape needs.
* nothing while it restarts (checkpoint/restore, weight loading): the GPU reads 0 from it.

An LLM training job (``Job.llm_train``) draws its profile the same way (AcmeTrace, whose
clusters train LLMs, is its own population), except the all-reduce share: that of Sia's
``bert`` (the one attention model Sia measured) on its data-parallel degree ``num_gpus / tp``
of GPUs -- none with a single data-parallel rank (tensor-parallel all-reduces run inside the
step the MFU times).

A GPU's reading combines its residents by :func:`elastico.perf.activity.combine` with the
GPU's mechanism: ``"mig"`` for a GPU in MIG mode, ``"time-slicing"`` under a time-slicing
policy, ``"mps"`` otherwise (one job alone included).  Cluster-wide = the mean over every GPU
of the cluster (an idle GPU reads 0) of its time average over the measurement window.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Mapping, Sequence

import numpy as np

from elastico.model import Configuration, Job, JobKind, Node
from elastico.perf.activity import ActivityProfile, GpuActivity, Resident, combine, draw_profile
from elastico.sim.contention_truth import compute_bound_of

__all__ = ["UtilisationMeter", "METRIC_KEYS"]

#: the keys :meth:`UtilisationMeter.metrics` adds to a replay's metrics (docs/metrics.md)
METRIC_KEYS = ("dcgm_sm_active", "dcgm_gpu_util", "dcgm_dram_active")


class _Entry:
    """What the meter last saw of a placed job (compared with the next round's)."""

    __slots__ = ("config", "assignment", "frac", "start", "resident", "flats", "service",
                 "active")

    def __init__(self, config, assignment, frac, start, resident, flats, service):
        self.config, self.assignment, self.frac, self.start = config, assignment, frac, start
        self.resident, self.flats, self.service = resident, flats, service
        self.active = False


class UtilisationMeter:
    """Time integrals over the measurement window of each GPU's SM activity, GPU utilisation
    and DRAM activity (module docstring).  ``seed``: the activity draws' seed (a job's profile
    depends only on it and the job's id, so every policy of a run sees the same jobs);
    ``time_sliced``: the policy shares GPUs by time-slicing; ``record``: keep every occupied
    GPU's readings (``samples``: ``(sm_active, gpu_util, seconds, service, job ids)`` per
    stretch of time in the window a GPU read the same -- ``service`` when a service is among
    its residents).

    Incremental: a GPU's reading is recomputed only when one of its residents changes
    (placed, released, reconfigured, moved, its slowdown or load fraction changed, a restart
    ended); in between its rates are integrated lazily, and intervals outside the window are
    skipped, so an event costs a look at each placed job and what it changes."""

    def __init__(self, nodes: Sequence[Node], *, seed: int = 0, time_sliced: bool = False,
                 record: bool = False):
        self.nodes = list(nodes)
        self.offsets = np.concatenate([[0], np.cumsum([n.num_gpus for n in self.nodes])])
        self.offsets = self.offsets.astype(int)
        self.gpus = int(self.offsets[-1])
        self.seed = seed
        self.time_sliced = time_sliced
        n = self.gpus
        self._sm, self._util, self._dram = [0.0] * n, [0.0] * n, [0.0] * n      # integrals
        self._r_sm, self._r_util, self._r_dram = [0.0] * n, [0.0] * n, [0.0] * n  # readings
        self._since = [0.0] * n
        self._res: list[dict[str, list[Resident]]] = [{} for _ in range(n)]
        self._svc: list[bool] = [False] * n
        self._jobs: dict[str, _Entry] = {}
        self._pending: list[tuple[float, str]] = []
        self._window = (0.0, math.inf)
        self._last = 0.0
        self._state = None
        self.samples: list[tuple[float, float, float, bool, tuple[str, ...]]] | None = \
            [] if record else None
        self._profiles: dict[tuple, ActivityProfile] = {}
        self._combined: dict[tuple, GpuActivity] = {}

    @property
    def sm(self) -> np.ndarray:
        """Per GPU (flat index) the SM-activity integral over the window so far (GPU-s)."""
        self._flush_all()
        return np.array(self._sm)

    @property
    def util(self) -> np.ndarray:
        self._flush_all()
        return np.array(self._util)

    @property
    def dram(self) -> np.ndarray:
        self._flush_all()
        return np.array(self._dram)

    # -- one job -----------------------------------------------------------------------------
    def profile(self, job: Job, config: Configuration, nodes: int) -> ActivityProfile:
        """The job's activity profile on ``config`` spread over ``nodes`` nodes (cached)."""
        data_parallel = job.kind is JobKind.TRAINING and job.llm is None
        gpus, sia_job = max(1, config.num_gpus), None
        if job.llm_train is not None:
            # LLM training: the gradient all-reduce runs over the data-parallel ranks (the
            # TP groups' own all-reduces are inside the compute the MFU counts), with the
            # all-reduce share Sia measured for bert, its one attention model (module
            # docstring; docs/model.md 10.)
            from elastico.llm_train_job import data_parallel as dp_of

            gpus, sia_job = dp_of(config), "bert"
            data_parallel = gpus > 1
        # an LLM inference job's DRAM level depends on its configuration (its prefill share)
        key = (job.id, config.num_gpus, nodes, config.gpu_model, data_parallel, gpus,
               (config.name, config.gpu_share, config.replicas) if job.llm is not None else None)
        p = self._profiles.get(key)
        if p is None:
            p = self._profiles[key] = draw_profile(
                job.id, seed=self.seed, gpus=gpus, nodes=max(1, min(nodes, gpus)),
                gpu_model=config.gpu_model, data_parallel=data_parallel, sia_job=sia_job,
                compute_bound=compute_bound_of(job, config))
        return p

    def resident(self, job: Job, config: Configuration, nodes: int, fraction: float,
                 mig: bool) -> Resident:
        """The job on one of its GPUs (module docstring): ``fraction`` scales its time."""
        p = self.profile(job, config, nodes)
        capped = mig or not self.time_sliced
        level = min(p.level, config.gpu_share) if capped else p.level
        f = min(1.0, max(0.0, fraction))
        # DRAM not scaled by an MPS share: it caps SMs, not the DRAM a bandwidth-bound phase
        # streams (the contention truth's Demand.dram is uncapped too: one number,
        # elastico.perf.contention.roofline_dram); a MIG instance owns its slice of the
        # memory controllers (NVIDIA MIG user guide), so there it scales with the slice
        dram = p.dram_level * (level / p.level if p.level > 0 else 0.0) if mig else p.dram_level
        return Resident(level, dram, p.compute * f, p.kernel * f)

    # -- one event interval ------------------------------------------------------------------
    def interval(self, t0: float, t1: float, window: tuple[float, float], state,
                 live: Mapping[str, Any], placed: Mapping[str, Any],
                 slow: Mapping[str, float], duty: Mapping[str, float]) -> None:
        """The jobs ``placed`` (their ids; ``live[id]`` has the job's ``job``, ``config`` and
        ``restart_until``) run from ``t0`` to ``t1`` (the next call's ``t0``): ``slow`` their
        slowdowns (the truth they run at), ``duty`` a service's load fraction; ``state`` the
        placement state after the round (its
        :meth:`~elastico.placer.placement.ClusterState.assignment` and ``is_mig``).  Only
        ``window`` (lo, hi) is integrated."""
        lo, hi = self._window = (float(window[0]), float(window[1]))
        if t1 <= lo or t0 >= hi:
            # nothing before or after the window is integrated: the next call that reaches
            # into it brings the residents up to date (everything it releases or attaches
            # before lo integrates nothing)
            return
        self._state = state
        self._activate_until(t0)
        jobs = self._jobs
        for jid in [j for j in jobs if j not in placed]:
            self._remove(jid, t0)
        dirty: set[int] = set()
        for jid in placed:
            rec = live[jid]
            job, config, start = rec.job, rec.config, rec.restart_until
            a = state.assignment(jid)
            service = job.kind is JobKind.SERVICE
            if service:
                frac = duty.get(jid, 1.0)
            elif self.time_sliced and config.mig_profile is None:
                frac = 1.0 / max(1.0, slow.get(jid, 1.0))
            else:
                frac = 1.0
            e = jobs.get(jid)
            if e is not None and e.frac == frac and e.start == start \
                    and (e.config is config or e.config == config) \
                    and (e.assignment is a or e.assignment == a):
                continue  # unchanged (equal, not only the same object: a remote placer's
                # decoded configurations are new objects every round)
            if e is not None:
                dirty.update(self._remove(jid, t0, recompute=False))
            nodes = len(a.node_indices)
            r = self.resident(job, config, nodes, frac, config.mig_profile is not None)
            flats = [int(self.offsets[n]) + g for n, g in a.gpus]
            e = jobs[jid] = _Entry(config, a, frac, start, r, flats, service)
            if start <= t0:
                self._flush(flats, t0)
                self._attach(jid, e)
                dirty.update(flats)
            else:
                heapq.heappush(self._pending, (start, jid))
        for f in dirty:
            self._recompute(f)
        self._last = max(self._last, t1)

    def _activate_until(self, t: float) -> None:
        """Attach the jobs whose restart ended by ``t``, each at its end."""
        while self._pending and self._pending[0][0] <= t:
            start, jid = heapq.heappop(self._pending)
            e = self._jobs.get(jid)
            if e is None or e.active or e.start != start:
                continue  # released or changed since
            self._flush(e.flats, start)
            self._attach(jid, e)
            for f in set(e.flats):
                self._recompute(f)

    def _attach(self, jid: str, e: _Entry) -> None:
        e.active = True
        for f in e.flats:
            self._res[f].setdefault(jid, []).append(e.resident)

    def _remove(self, jid: str, t: float, recompute: bool = True) -> set[int]:
        e = self._jobs.pop(jid)
        if not e.active:
            return set()
        self._flush(e.flats, t)
        for f in set(e.flats):
            self._res[f].pop(jid, None)
        if recompute:
            for f in set(e.flats):
                self._recompute(f)
        return set(e.flats)

    def _recompute(self, f: int) -> None:
        res = self._res[f]
        if not res:
            self._r_sm[f] = self._r_util[f] = self._r_dram[f] = 0.0
            self._svc[f] = False
            return
        self._svc[f] = any(self._jobs[j].service for j in res)
        items = [r for rs in res.values() for r in rs]
        if len(items) == 1:
            r = items[0]
            self._r_sm[f], self._r_util[f], self._r_dram[f] = (r.sm * r.compute, r.kernel,
                                                               r.dram * r.compute)
            return
        mech = self._mechanism(f)
        key = (mech, tuple(sorted(items, key=lambda r: (r.sm, r.compute, r.kernel, r.dram))))
        v = self._combined.get(key)
        if v is None:
            v = self._combined[key] = combine(key[1], mech)
        self._r_sm[f], self._r_util[f], self._r_dram[f] = v.sm_active, v.gpu_util, v.dram_active

    def _flush(self, flats, t: float) -> None:
        """Integrate the GPUs' current readings from their last change to ``t``."""
        lo, hi = self._window
        for f in flats:
            a = max(self._since[f], lo)
            b = min(t, hi)
            self._since[f] = max(self._since[f], t)
            if b <= a or not self._res[f]:
                continue
            dt = b - a
            self._sm[f] += self._r_sm[f] * dt
            self._util[f] += self._r_util[f] * dt
            self._dram[f] += self._r_dram[f] * dt
            if self.samples is not None:
                self.samples.append((self._r_sm[f], self._r_util[f], dt, self._svc[f],
                                     tuple(sorted(self._res[f]))))

    def _flush_all(self) -> None:
        self._activate_until(self._last)
        self._flush(range(self.gpus), self._last)

    def _mechanism(self, flat: int) -> str:
        n = int(np.searchsorted(self.offsets, flat, side="right")) - 1
        if self._state is not None and self._state.is_mig(n, flat - int(self.offsets[n])):
            return "mig"
        return "time-slicing" if self.time_sliced else "mps"

    # -- results -----------------------------------------------------------------------------
    def metrics(self, span: float) -> dict[str, float]:
        """Cluster-wide time averages over a window of ``span`` seconds (:data:`METRIC_KEYS`):
        every GPU of the cluster counts, an idle one as 0."""
        self._flush_all()
        d = self.gpus * span if self.gpus and span > 0 else 0.0
        return {"dcgm_sm_active": math.fsum(self._sm) / d if d else 0.0,
                "dcgm_gpu_util": math.fsum(self._util) / d if d else 0.0,
                "dcgm_dram_active": math.fsum(self._dram) / d if d else 0.0}

    def per_gpu(self, span: float) -> dict[str, dict[str, float]]:
        """Per GPU (``"<node name>/<gpu index>"``) its time averages over the window."""
        self._flush_all()
        out: dict[str, dict[str, float]] = {}
        for n, node in enumerate(self.nodes):
            for g in range(node.num_gpus):
                f = int(self.offsets[n]) + g
                out[f"{node.name}/{g}"] = {
                    "sm_active": self._sm[f] / span if span > 0 else 0.0,
                    "gpu_util": self._util[f] / span if span > 0 else 0.0,
                    "dram_active": self._dram[f] / span if span > 0 else 0.0}
        return out
