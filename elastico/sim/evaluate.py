"""The evaluation runner behind ``elastico evaluate``: every (cluster, policy, seed) replay.

Who calls it: :mod:`elastico.cli.evaluate` (and tests).  Whom it calls: the cluster
definitions (:mod:`elastico.sim.clusters`), the workload builder, the policies and the simulator
-- the same code ``elastico simulate`` runs -- and, for parallel runs, a process pool.  It
writes nothing: :mod:`elastico.sim.report` turns its :class:`RunOutput` list into the report.

One run (:func:`run_one`) is one :class:`Task`: the cluster ``spec`` at ``gpus`` GPUs, the
workload of ``seed`` (``jobs_per_gpu x gpus`` trace pods drawn by the seed, arrivals scaled
to ``load``; docs/model.md, "Workload"), one policy, the ground-truth slowdowns from Gavel's
measured pairs and the placer's predictor k-fold by job type (docs/predictor.md,
"Simulator"), restarts charged ``restart_s`` seconds.  Every policy of one (cluster, gpus,
seed) sees the identical workload.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from elastico.sim.clusters import ClusterSpec
from elastico.sim.utilisation import UtilisationMeter
from elastico.runtime.lifeline import arm

__all__ = ["Settings", "Task", "RunOutput", "tasks_for", "run_one", "run_all", "run_tasks",
           "SERIES_BINS", "SERIES_SPANS", "sweep_tasks", "sustainable_loads",
           "sustainable_loads_by_seed", "SWEEP_LOADS", "SweepLadder", "AFTER_WINDOW_KEYS",
           "RoundRecorder", "SeriesMeter", "pool_of"]

#: time bins of the utilization and queue-length series kept per run (for the plots)
SERIES_BINS = 200


@dataclass(frozen=True)
class Settings:
    """What every run of one evaluation shares.  ``jobs_per_gpu``: trace pods replayed per
    GPU of the cluster (the trace window); ``load``: offered load (None = the workload
    builder's default, 1.0 or 0.9 of the most the pods can offer); ``restart_s``: seconds of
    progress lost per reconfiguration; ``utility``: elastico's objective; ``gpu_speed``: the
    speed of unmeasured GPU models (:data:`elastico.perf.throughput.GPU_SPEED_SENSITIVITIES`);
    ``remaining_estimate``: what elastico believes a job's remaining work is
    (``PolicyEnv.remaining_estimate``; docs/model.md 6.).  ``contention``: the ground truth's
    contention model where no measured pair applies (a preset ``low`` / ``default`` / ``high``
    or ``name=value`` pairs, :func:`elastico.perf.contention.contention_params`; docs/model.md,
    "Interference on other GPU models").
    ``arrivals``:
    ``"trace"`` (the trace's own arrivals, compressed to the load; ``jobs_per_gpu`` pods) or
    ``"continuous"`` (a Poisson process over a warm-up, a measurement window and a drain
    sized from the trace's batch durations at ``window_quantile``; docs/model.md,
    "Continuous arrivals"; ``jobs_per_gpu`` is then unused).  ``llm_jobs``: a jobs file of
    LLM jobs (or ``demo``, ``train-demo``; :mod:`elastico.sim.llm_workload`) replayed
    beside the trace's, arriving from the workload's first arrival -- with continuous arrivals
    over the measurement window instead (:func:`_with_llm`) -- (None: none).
    ``undisclosed_speed``: the trace's undisclosed G2/G3 one-GPU speed over the reference
    V100's (:meth:`elastico.perf.throughput.ThroughputModel.with_undisclosed_speed`: a
    sensitivity parameter; 1.0 = they run as the reference).  ``assume_profiled``: every job
    has its solo profile from the start (``elastico simulate --assume-profiled``); default
    False, as ``elastico simulate``: jobs arrive unknown and are profiled after the window
    (:func:`elastico.sim.simulator.simulate`'s ``unknown_profiles``; docs/predictor.md 6b).
    ``overrun_windows`` (continuous arrivals, not with ``stop_at_window_end``): after the drain,
    the replay goes on with no further arrival until every batch job that arrived in the
    measurement window has finished, for at most this many measurement windows
    (:func:`elastico.sim.simulator.simulate`'s ``overrun_s``; docs/metrics.md, "Which jobs
    count"); 0: stop at the horizon."""

    jobs_per_gpu: float = 4.0
    load: float | None = None
    restart_s: float = 30.0
    utility: str = "jct"
    gpu_speed: str = "datasheet"
    remaining_estimate: str = "elapsed"
    arrivals: str = "trace"
    window_quantile: float = 0.9
    llm_jobs: str | None = None
    undisclosed_speed: float = 1.0
    contention: str = "default"
    assume_profiled: bool = False
    #: stop the replay at the end of the measurement window instead of after the drain
    #: (continuous arrivals; the load sweep's runs: docs/metrics.md, "Sustainable load")
    stop_at_window_end: bool = False
    #: run the window's batch jobs to completion past the horizon (at most this many windows)
    overrun_windows: float = 100.0
    #: ``openb`` (the trace's pods, as above) or ``llm-mix`` (training and bursty offline LLM
    #: inference, :mod:`elastico.sim.llm_mix`; continuous arrivals only, ``inference_share``
    #: of the offered demand is inference; docs/model.md, "The llm-mix workload")
    workload: str = "openb"
    inference_share: float = 0.4  # elastico.sim.llm_mix.DEFAULT_INFERENCE_SHARE
    #: ``elastico``'s MIG lending (``PolicyEnv.mig_lending``, on by default: docs/model.md
    #: 5.); bench/mig_lending.py compares it with MIG mode fixed
    mig_lending: bool = True

    def overrun_s(self, window) -> float:
        """:func:`elastico.sim.simulator.simulate`'s ``overrun_s`` for a replay over ``window``
        (:class:`elastico.sim.workload.Window`, None with the trace's own arrivals):
        ``overrun_windows`` measurement windows, 0 without a window or with
        ``stop_at_window_end``."""
        if window is None or self.stop_at_window_end:
            return 0.0
        return self.overrun_windows * window.measure_s


@dataclass(frozen=True)
class Task:
    spec: ClusterSpec
    gpus: int
    policy: str
    seed: int
    settings: Settings = field(default_factory=Settings)

    @property
    def cluster(self) -> str:
        return self.spec.label(self.gpus)

    def cost(self) -> float:
        """A rough relative run time, to start the longest runs first (a run's queue, and
        with it each round's work, grows with the load: the square of the load)."""
        load = 1.0 if self.settings.load is None else self.settings.load
        # an llm-mix run costs ~4x an openb run of the same size and policy (a100h100-512,
        # load 0.5, seed 0: elastico > 220 s of CPU against openb's ~60 s; docs/metrics.md)
        return (self.gpus * self.settings.jobs_per_gpu * load * load
                * (4.0 if "elastico" in self.policy else 1.0)
                * (4.0 if self.settings.workload == "llm-mix" else 1.0))


@dataclass
class RunOutput:
    """One run: ``run`` is its results.json object (cluster, gpus, policy, seed, load, jobs,
    the simulate metric keys, wall_s); ``jct`` the finished batch jobs' JCTs (s);
    ``series`` the binned time series (``t`` bin starts in s from the first arrival,
    ``utilization`` busy GPUs / cluster GPUs, ``allocation``, ``queue`` jobs waiting);
    ``slowdown`` the same jobs' slowdowns (JCT / run time alone at the requested shape).
    ``jct`` and ``slowdown`` hold the batch jobs the JCT metrics count: arrived in the
    measurement window, finished, not censored (docs/metrics.md)."""

    run: dict
    jct: list[float]
    series: dict[str, list[float]]
    slowdown: list[float] = field(default_factory=list)


def tasks_for(specs: Sequence[ClusterSpec], gpus: Sequence[int], policies: Sequence[str],
              seeds: Sequence[int], settings: Settings = Settings()) -> list[Task]:
    """Every (cluster, gpus, policy, seed), in report order."""
    return [Task(s, g, p, seed, settings) for s in specs for g in gpus for p in policies
            for seed in seeds]


@lru_cache(maxsize=1)
def _inputs():
    """Trace nodes and pods, the throughput model and the slowdown models (once per process)."""
    from elastico import trace
    from elastico.predictor.learned import kfold_by_job_type
    from elastico.predictor.observations import bundled_observations
    from elastico.perf.throughput import ThroughputModel

    obs = bundled_observations()
    return (trace.read_nodes(), trace.read_pods(), ThroughputModel.bundled(),
            kfold_by_job_type(obs, k=5, seed=0), obs)


def _model(settings: Settings):
    """The throughput model at the settings' ``gpu_speed`` sensitivity and undisclosed-GPU
    speed (cached per setting)."""
    return _model_at(settings.gpu_speed, settings.undisclosed_speed)


@lru_cache(maxsize=8)
def _model_at(gpu_speed: str, undisclosed_speed: float):
    from elastico.perf.throughput import ThroughputModel

    model = ThroughputModel.bundled(gpu_speed)
    return model if undisclosed_speed == 1.0 else model.with_undisclosed_speed(undisclosed_speed)


def _truth(settings: Settings = Settings()):
    """A fresh ground-truth model per run (it counts its own lookups and misses): Gavel's
    measured pairs where they apply, the contention model at ``settings.contention``
    elsewhere (:class:`elastico.sim.contention_truth.GroundTruth`)."""
    from elastico.perf.contention import contention_params
    from elastico.predictor.learned import MeasuredSlowdown
    from elastico.sim.contention_truth import GroundTruth

    return GroundTruth(MeasuredSlowdown.from_observations(_inputs()[4]),
                       contention_params(settings.contention))


@lru_cache(maxsize=8)
def _workload(spec: ClusterSpec, gpus: int, seed: int, settings: Settings):
    from elastico.sim import workload

    nodes_all, pods, model, _, _ = _inputs()
    nodes = spec.nodes(gpus, nodes_all)
    if settings.workload == "llm-mix":
        from elastico.sim.llm_mix import build_llm_mix_workload

        window = workload.default_window(pods, settings.window_quantile)
        wl = build_llm_mix_workload(
            pods, nodes, seed=seed, load=1.0 if settings.load is None else settings.load,
            inference_share=settings.inference_share, model=model, window=window)
        return nodes, _with_llm(wl, settings)
    if settings.arrivals == "continuous":
        window = workload.default_window(pods, settings.window_quantile)
        wl = workload.build_continuous_workload(
            pods, nodes, seed=seed, load=1.0 if settings.load is None else settings.load,
            model=model, window=window)
        return nodes, _with_llm(wl, settings, seed)
    n_jobs = max(1, int(round(settings.jobs_per_gpu * gpus)))
    wl = workload.build_workload(pods, nodes, seed=seed, load=settings.load, model=model,
                                 jobs=n_jobs)
    return nodes, _with_llm(wl, settings, seed)


def _with_llm(wl, settings: Settings, seed: int = 0):
    """``wl`` with the settings' LLM jobs added (:mod:`elastico.sim.llm_workload`); itself
    without any.  Continuous arrivals: they arrive over the measurement window
    (:func:`~elastico.sim.llm_workload.arrivals_in_window`, seeded by the run's ``seed``), so
    the window's metrics count them; trace arrivals (no warm-up: the window is the arrivals')
    keep the file's ``arrival_s`` after the workload's first arrival."""
    if settings.llm_jobs is None:
        return wl
    from dataclasses import replace

    from elastico.sim.llm_workload import arrivals_in_window, load_llm_jobs

    llm = load_llm_jobs(settings.llm_jobs, offset_s=min((j.arrival_s for j in wl.jobs), default=0.0))
    if wl.window is not None:
        llm = arrivals_in_window(llm, wl.window.lo, wl.window.hi, seed)
    kinds = dict(wl.kinds)
    for j in llm:
        kinds[j.kind.value] = kinds.get(j.kind.value, 0) + 1
    return replace(wl, jobs=sorted([*wl.jobs, *llm], key=lambda j: j.arrival_s), kinds=kinds)


@lru_cache(maxsize=8)
def _ceiling(spec: ClusterSpec, gpus: int, seed: int, settings: Settings) -> float:
    """The GPU-utilization ceiling of the task's workload (:mod:`elastico.sim.ceiling`): over every
    configuration any evaluated policy may give a job -- RST's candidates before pruning, MIG
    instances included, and the requested shape as a whole GPU (``exclusive``, ``gavel``) and
    as a share (``time-slicing``, ``fgd``, ``elastico-no-rst``)."""
    from elastico.sim.ceiling import workload_ceiling

    nodes, wl = _workload(spec, gpus, seed, settings)
    return workload_ceiling(wl.jobs, nodes, _model(settings))


def run_one(task: Task) -> RunOutput:
    """Replay one task (module docstring) and summarise it."""
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.sim.simulator import simulate

    t0 = time.perf_counter()
    nodes, wl = _workload(task.spec, task.gpus, task.seed, task.settings)
    _, _, _, predictor, _ = _inputs()
    model = _model(task.settings)
    truth = _truth(task.settings)
    estimates = None
    if task.settings.remaining_estimate == "user":
        from elastico.sim.workload import user_estimates

        estimates = user_estimates(wl.jobs, 3.0, task.seed)
    env = PolicyEnv(nodes=nodes, throughput=model, slowdown=predictor,
                    utility=task.settings.utility, restart_s=task.settings.restart_s,
                    remaining_estimate=task.settings.remaining_estimate,
                    user_estimates=estimates, mig_lending=task.settings.mig_lending)
    policy = make_policy(task.policy, env)
    win = wl.window
    # the measurement window's time bins of the SM-activity and price series (continuous
    # arrivals; none with the trace's own arrivals, whose window is known only at the end)
    edges = (None if win is None else
             np.linspace(win.lo, win.hi, SERIES_BINS + 1))
    from elastico.sim.llm_mix import part_of

    recorder = RoundRecorder(policy, ((lambda jid, kind: part_of(jid))
                                      if task.settings.workload == "llm-mix"
                                      else (lambda jid, kind: kind)), edges)
    meter = None
    if edges is not None:
        meter = SeriesMeter(nodes, edges,
                            time_sliced=getattr(policy, "sharing", "mps") == "time-slicing")
    res = simulate(nodes, wl.jobs, recorder, restart_s=task.settings.restart_s,
                   activity=lambda j, c, _cat=policy.catalog: getattr(_cat, "base_profile", _cat.profile)(j, c).gpu_activity,
                   truth=truth, window=None if win is None else (win.lo, win.hi),
                   horizon_s=None if win is None else (
                       win.hi if task.settings.stop_at_window_end else win.horizon),
                   overrun_s=task.settings.overrun_s(win),
                   unknown_profiles=not task.settings.assume_profiled, meter=meter)
    from elastico.sim.simulator import backlog_bounded

    run = {"workload": task.settings.workload, "cluster": task.cluster, "gpus": task.gpus,
           "policy": task.policy, "seed": task.seed,
           "load": wl.offered_load, "load_target": task.settings.load,
           "arrivals": task.settings.arrivals, "jobs": len(wl.jobs), "kinds": dict(wl.kinds),
           "window": None if win is None else {"warmup_s": win.warmup_s,
                                               "measure_s": win.measure_s,
                                               "drain_s": win.drain_s},
           **res.metrics, "backlog_bounded": backlog_bounded(res.metrics),
           "truth_pairs_unmeasured": (truth.misses / truth.lookups) if truth.lookups else 0.0,
           # pair lookups on a GPU model with no measured pairs (none applied; docs/model.md 6.)
           "truth_pairs_unmeasured_gpu": (truth.unmeasured_gpu / truth.lookups)
           if truth.lookups else 0.0,
           # GPUs with >= 2 residents whose truth was the contention model, entirely or for
           # some pairs (docs/model.md, "Interference on other GPU models")
           "truth_gpus_contention_model": ((truth.by_model + truth.by_mixed)
                                           / truth.gpu_evaluations)
           if truth.gpu_evaluations else 0.0,
           "contention": truth.params.describe(),
           "remaining_estimate": task.settings.remaining_estimate,
           "assume_profiled": task.settings.assume_profiled,
           # only where the openb goal check reads it (elastico's runs; the llm-mix report
           # has no ceiling row): it costs 68 s of CPU per 512-GPU llm-mix workload, paid
           # once per worker process (docs/metrics.md)
           "gpu_utilization_ceiling": _ceiling(task.spec, task.gpus, task.seed, task.settings)
           if task.policy == "elastico" and task.settings.workload != "llm-mix" else None,
           # issue 24's name of DCGM's SM activity (docs/metrics.md): dcgm_sm_active
           "sm_activity": res.metrics.get("dcgm_sm_active"),
           **recorder.summary(),
           "wall_s": round(time.perf_counter() - t0, 2)}
    if task.settings.workload == "llm-mix":  # its composition (docs/model.md 11.)
        run["inference_share"] = task.settings.inference_share
        run["mix"] = dict(wl.mix)
        run["mix_demand"] = dict(wl.mix_demand)
    if task.settings.stop_at_window_end and win is not None:
        # what happened after the window is not replayed: its fields are unknown, not biased
        run.update({k: None for k in AFTER_WINDOW_KEYS if k in run}, stopped_at_window_end=True)
    llm = [{"job": r.job_id, "kind": r.kind, "status": r.status, "tokens": r.tokens,
            "tokens_done": r.tokens_done,
            "config": r.config, "startup_s": r.startup_s, "restarts": r.restarts,
            "jct_s": (r.finish_s - r.arrival_s) if r.finish_s is not None else None}
           for r in res.records if r.tokens > 0]
    lo = 0.0 if win is None else win.lo
    hi = math.inf if win is None else win.hi
    if llm:  # LLM inference and training jobs (Settings.llm_jobs): tokens, configuration, JCT;
        # the llm-mix workload's hundreds are not listed one by one (counts under mix)
        if task.settings.llm_jobs is not None:
            run["llm_jobs"] = llm
        run["llm_window"] = llm_window_metrics(res.records, lo, hi)
    counted = [r for r in res.records if r.kind != "service" and r.status == "finished"
               and not r.censored and lo - 1e-9 <= r.arrival_s <= hi + 1e-9]
    if task.settings.workload == "llm-mix":
        from elastico.sim.llm_mix import mix_window

        # per part's JCTs need the drain: null in a sweep run stopped at the window's end
        run["mix_window"] = None if run.get("stopped_at_window_end") else mix_window(counted)
    jct = sorted(r.finish_s - r.arrival_s for r in counted)
    slow = sorted((r.finish_s - r.arrival_s) / r.alone_s for r in counted if r.alone_s > 0)
    arrivals = [j.arrival_s for j in wl.jobs]
    span = (max(arrivals) - min(arrivals)) if arrivals else 0.0
    horizon = SERIES_SPANS * span if win is None else win.horizon
    series = _bin_series(res.timeline, task.gpus, horizon=horizon)
    if edges is not None:  # over the measurement window, hours from the first arrival
        t_first = min(arrivals) if arrivals else 0.0
        series["window_t"] = (edges[:-1] - t_first).tolist()
        series.update(meter.series(task.gpus))
        series["prices"] = recorder.price_series()
    return RunOutput(run, jct, series, slow)


def pool_of(config) -> str:
    """The GPU pool a configuration runs on, for the steering table (docs/metrics.md): its GPU
    model, with `` MIG`` for a MIG instance."""
    return config.gpu_model + (" MIG" if config.mig_profile is not None else "")


class RoundRecorder:
    """``policy`` (every attribute is its: ``name``, ``catalog``, ``sharing``, ``forget``, ...),
    plus a record of each round's outcome for the report (docs/metrics.md, "Prices and what
    they steered"): the shadow prices of a round that priced (``RoundResult.pricing.prices``,
    named by ``RoundResult.resource_names``; utility per unit of each resource) held from
    that round to the next, and the GPU compute each placed job holds
    (``Configuration.gpus_total``) from that round to the next, summed per (part, pool):
    ``part(job_id, kind)`` (the llm-mix part, or the job's kind) and :func:`pool_of`.  Both
    are integrated over ``edges`` (the measurement window's bin edges, seconds; None: nothing
    is recorded).  A round's configuration holds until the next round, which the simulator
    runs at every arrival, completion and policy wake-up, so the integral is the replay's own
    (a job that finishes at ``t`` is gone from the round at ``t``)."""

    def __init__(self, policy, part, edges):
        self.__dict__.update(policy=policy, _part=part, _edges=edges, _last=None,
                             _names=(), _prices={}, _gpu_s={}, _parts={})

    def __getattr__(self, name):
        return getattr(self.__dict__["policy"], name)

    def __call__(self, inp, state):
        res = self.policy(inp, state)
        if self._edges is not None:
            self._close(float(inp.now))
            pr = getattr(res.pricing, "prices", None) if res.pricing is not None else None
            prices = None
            if pr is not None and len(res.resource_names) == len(pr):
                self.__dict__["_names"] = tuple(res.resource_names)
                prices = np.asarray(pr, float).copy()
            held: dict[tuple[str, str], float] = {}
            parts = self._parts
            kinds = None  # job id -> kind, built once a round that places a job first seen
            for jid, d in res.decisions.items():
                c = d.config
                if c is None or c.is_wait or d.status.value not in ("placed", "degraded"):
                    continue
                part = parts.get(jid)
                if part is None:
                    if kinds is None:
                        kinds = {a.job.id: a.job.kind.value for a in inp.jobs}
                    part = parts[jid] = self._part(jid, kinds.get(jid, ""))
                key = (part, pool_of(c))
                held[key] = held.get(key, 0.0) + c.gpus_total
            self.__dict__["_last"] = (float(inp.now), prices, held)
        return res

    def _finish(self) -> None:
        """Integrate the last round to the window's end, once."""
        self._close(math.inf)
        self.__dict__["_last"] = None

    def _close(self, now: float) -> None:
        """Integrate the last round's prices and holdings from its time to ``now``."""
        last = self._last
        if last is None:
            return
        t0, prices, held = last
        lo, hi = float(self._edges[0]), float(self._edges[-1])
        a, b = max(t0, lo), min(now, hi)
        if b <= a:
            return
        if held:
            for key, g in held.items():
                self._gpu_s[key] = self._gpu_s.get(key, 0.0) + g * (b - a)
        if prices is not None:
            e = self._edges
            k = np.clip(np.minimum(e[1:], b) - np.maximum(e[:-1], a), 0.0, None)
            acc = self._prices.get(len(prices))
            if acc is None:
                acc = self._prices[len(prices)] = np.zeros((len(e) - 1, len(prices)))
            acc += k[:, None] * prices[None, :]

    def summary(self) -> dict:
        """results.json fields: ``gpu_seconds`` (``{part: {pool: GPU-seconds}}`` in the window)
        and ``prices_mean`` (``{resource: time-average price over the window}``, the rounds'
        prices held until the next round; null for a policy that never priced)."""
        self._finish()
        gs: dict[str, dict[str, float]] = {}
        for (part, pool), v in sorted(self._gpu_s.items()):
            gs.setdefault(part, {})[pool] = v
        acc = self._prices.get(len(self._names)) if self._names else None
        mean = None
        if acc is not None and self._edges is not None:
            span = float(self._edges[-1] - self._edges[0])
            mean = {n: float(v) / span for n, v in zip(self._names, acc.sum(axis=0))}
        return {"gpu_seconds": gs, "prices_mean": mean}

    def price_series(self) -> dict[str, list[float]]:
        """Per resource, the time-average price in each bin of ``edges`` (empty: never
        priced)."""
        self._finish()
        acc = self._prices.get(len(self._names)) if self._names else None
        if acc is None:
            return {}
        w = np.diff(self._edges)
        return {n: (acc[:, i] / w).tolist() for i, n in enumerate(self._names)}


class SeriesMeter(UtilisationMeter):
    """A :class:`~elastico.sim.utilisation.UtilisationMeter` that also keeps the cluster-wide SM
    activity and GPU utilisation (DCGM's) per time bin of ``edges`` (seconds; the measurement
    window's).  At each event interval that crosses a bin edge it reads the cluster's
    integrals before and after (each GPU's reading is constant within an event interval but
    for a restart ending in it), so each edge's integral is interpolated inside one event
    interval."""

    def __init__(self, nodes, edges, **kw):
        super().__init__(nodes, **kw)
        self._edges = np.asarray(edges, float)
        self._k = 0
        self._pts: list[tuple[float, float, float]] = []

    def _totals(self, t: float) -> tuple[float, float, float]:
        # the integrals are flat outside the window: a time outside it reads as its nearest
        # end, so the interpolation stays exact across the window's ends
        self._flush_all()
        t = min(max(t, float(self._edges[0])), float(self._edges[-1]))
        return (t, math.fsum(self._sm), math.fsum(self._util))

    def interval(self, t0, t1, window, state, live, placed, slow, duty) -> None:
        e = self._edges
        crossing = self._k < len(e) and t1 >= e[self._k]
        if crossing:
            self._pts.append(self._totals(t0))
        super().interval(t0, t1, window, state, live, placed, slow, duty)
        if crossing:
            self._pts.append(self._totals(t1))
            while self._k < len(e) and e[self._k] <= t1:
                self._k += 1

    def series(self, gpus: int) -> dict[str, list[float]]:
        """``sm_activity`` and ``dcgm_gpu_util``: per bin, the cluster-wide time average
        (every GPU, an idle one 0), in [0, 1]."""
        self._pts.append(self._totals(max(self._last, float(self._edges[-1]))))
        t, sm, util = (np.asarray(v, float) for v in zip(*self._pts))
        order = np.argsort(t, kind="stable")
        t, sm, util = t[order], sm[order], util[order]
        w = np.diff(self._edges) * max(gpus, 1)
        return {k: (np.diff(np.interp(self._edges, t, v)) / w).tolist()
                for k, v in (("sm_activity", sm), ("dcgm_gpu_util", util))}


def llm_window_metrics(records, lo: float, hi: float) -> dict:
    """The LLM jobs (records with tokens: offline inference and training) on their own, over
    the same measurement window ``[lo, hi]`` (s) as the run's metrics (docs/metrics.md):
    ``jobs`` (all of them), ``in_window`` (arrived in it), ``finished`` (of those), ``avg_jct_s`` and
    ``p50_jct_s`` over the finished ones (0 when none), ``tokens`` and ``tokens_done`` of the
    window's jobs, ``avg_slowdown`` (JCT / run time alone at the requested shape, start-up
    included)."""
    import numpy as np

    llm = [r for r in records if r.tokens > 0]
    win = [r for r in llm if lo - 1e-9 <= r.arrival_s <= hi + 1e-9]
    done = [r for r in win if r.status == "finished"]
    jct = np.array([r.finish_s - r.arrival_s for r in done])
    slow = [(r.finish_s - r.arrival_s) / r.alone_s for r in done if r.alone_s > 0]
    return {"jobs": len(llm), "in_window": len(win), "finished": len(done),
            "avg_jct_s": float(jct.mean()) if len(jct) else 0.0,
            "p50_jct_s": float(np.median(jct)) if len(jct) else 0.0,
            "avg_slowdown": float(np.mean(slow)) if slow else 0.0,
            "tokens": float(sum(r.tokens for r in win)),
            "tokens_done": float(sum(r.tokens_done for r in win))}


#: the offered loads (demand in the window / cluster GPUs) of ``elastico evaluate``'s load
#: sweep (docs/metrics.md, "Sustainable load")
SWEEP_LOADS = (0.25, 0.5, 0.75, 1.0)


def sweep_tasks(specs: Sequence[ClusterSpec], gpus: Sequence[int], policies: Sequence[str],
                seeds: Sequence[int], loads: Sequence[float], settings: Settings) -> list[Task]:
    """The load sweep: every (cluster, gpus, policy, seed) at every load of ``loads``, with
    ``settings`` otherwise (continuous arrivals for a meaningful backlog test), each replay
    stopped at the end of its measurement window (``stop_at_window_end``: the backlog test
    reads nothing after it; docs/metrics.md, "Sustainable load")."""
    from dataclasses import replace

    return [Task(s, g, p, seed, replace(settings, load=float(x), stop_at_window_end=True))
            for s in specs for g in gpus for p in policies for seed in seeds for x in loads]


def _full_replay(t: Task) -> Task:
    from dataclasses import replace

    return replace(t, settings=replace(t.settings, stop_at_window_end=False))


#: a sweep run's results.json fields that need what happens after the measurement window
#: (jobs finishing in the drain): null in a run stopped at the window's end
#: (``Settings.stop_at_window_end``); its windowed fields and backlog test are the full
#: replay's, number for number
AFTER_WINDOW_KEYS = (
    "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
    "jobs_completed", "jobs_unfinished", "jobs_censored", "jobs_in_jct", "jobs_in_jct_short",
    "jobs_window_unfinished", "avg_slowdown", "p50_slowdown", "p95_slowdown", "p99_slowdown",
    "avg_jct_short_s", "avg_jct_long_s", "p50_slowdown_short", "p50_slowdown_long", "restarts",
    "service_avg_queue_s", "services_placed", "services_never_placed",
    "service_bound_violations", "batch_bound_violations", "truth_pairs_unmeasured",
    "truth_pairs_unmeasured_gpu", "truth_gpus_contention_model",
    # counted over the whole replay (unknown profiles, issue 23; priority preemption, issue 24)
    "unknown_jobs_profiled", "unknown_profiles_recorded", "unknown_run_s",
    "unknown_bound_violation_jobs", "unknown_bound_violation_any",
    "unknown_bound_violation_time_share", "unknown_bound_violation_max",
    "evictions", "shrinks", "wasted_gpu_s", "wasted_tokens",
    # over the whole replay (issue 24: training jobs' time past their slowdown bound)
    "bound_violation_time_frac", "bound_violation_time_frac_max", "bound_violation_jobs_5pct")


class SweepLadder:
    """The load sweep walked upward (docs/metrics.md, "Sustainable load"): per (cluster, GPUs,
    policy, seed), the run of the lowest load of ``sweep`` first; the next load only once the
    backlog stayed bounded at this one.  A load above one where it grew cannot be that
    seed's sustainable load (:func:`sustainable_loads_by_seed` needs every lower load
    bounded), so it is not run: :func:`sustainable_loads_by_seed` and
    :func:`sustainable_loads` (every seed's: their minimum) of the runs made are those of the
    full grid.  Walking each seed apart costs the runs a seed makes above another seed's
    growing load; it buys each seed's own value (the spread over seeds, docs/metrics.md).
    A sweep point that is also one of ``main`` (the same task but for
    ``stop_at_window_end``: a full replay has the same backlog test) is that main run's
    result, not run twice.

    :meth:`start` gives the first runs; :meth:`done` is told of every finished run (main runs
    included) and gives the runs it makes due; :meth:`runs` is the sweep's results.json
    objects, in ``sweep`` order, of the points that ran."""

    def __init__(self, sweep: Sequence[Task], main: Sequence[Task] = ()):
        self._order = list(sweep)
        mains = set(main)
        # the task each sweep point runs as: a main run's, or its own
        self._run = {t: (_full_replay(t) if _full_replay(t) in mains else t)
                     for t in self._order}
        self._main = {r for r in self._run.values() if r in mains}
        self._point = {r: t for t, r in self._run.items()}
        # (cluster spec, GPUs, policy, seed) -> its loads ascending, each with its points
        ladders: dict[tuple, dict[float, list[Task]]] = {}
        for t in self._order:
            ladders.setdefault(self._key(t), {}).setdefault(
                float(t.settings.load), []).append(t)
        self._ladders = {k: [v[x] for x in sorted(v)] for k, v in ladders.items()}
        self._step = {k: 0 for k in self._ladders}
        self._out: dict[Task, RunOutput] = {}  # per sweep point

    @staticmethod
    def _key(t: Task) -> tuple:
        # the settings but the load: two workloads (or variants) on one cluster are two ladders
        from dataclasses import replace

        return (t.spec, t.gpus, t.policy, t.seed, replace(t.settings, load=None))

    def _runs_of(self, rung: Sequence[Task]) -> list[Task]:
        return [self._run[t] for t in rung if self._run[t] not in self._main]

    def most_runs(self) -> int:
        """Runs the sweep makes when no load's backlog grows (main runs apart)."""
        return sum(1 for r in self._run.values() if r not in self._main)

    def start(self) -> list[Task]:
        """The runs of every ladder's lowest load (those that are not main runs)."""
        return [r for rungs in self._ladders.values() for r in self._runs_of(rungs[0])]

    def done(self, task: Task, out: RunOutput) -> list[Task]:
        """Record a finished run; the runs its ladder's next load needs, when this completed
        a load whose backlog stayed bounded (those not among the main runs)."""
        point = self._point.get(task)
        if point is None:  # a main run that is no sweep point
            return []
        self._out[point] = out
        key = self._key(point)
        rungs, new = self._ladders[key], []
        while self._step[key] < len(rungs):
            rung = rungs[self._step[key]]
            if not all(t in self._out for t in rung):
                break  # the rest of this load is still running
            if not all(self._out[t].run["backlog_bounded"] for t in rung):
                self._step[key] = len(rungs)  # grew: no higher load can be sustainable
                break
            self._step[key] += 1
            if self._step[key] < len(rungs):
                new += self._runs_of(rungs[self._step[key]])
        return new

    def priority(self, task: Task) -> float:
        """``task``'s cost plus, for a run of a sweep point, the cost of the runs of its
        ladder's higher loads, which wait for it (so the runs that unlock long ones start
        early, and the long ones do not all come last)."""
        point = self._point.get(task)
        if point is None:
            return task.cost()
        rungs = self._ladders[self._key(point)]
        above = [t for rung in rungs for t in self._runs_of(rung)
                 if float(t.settings.load) > float(point.settings.load)]
        return task.cost() + sum(t.cost() for t in above)

    def runs(self) -> list[dict]:
        """The sweep's run objects, in sweep order, of the points that ran."""
        return [self._out[t].run for t in self._order if t in self._out]

    def skipped(self) -> list[Task]:
        """The sweep points not run (above a load whose backlog grew on that seed)."""
        return [t for t in self._order if t not in self._out]


def sustainable_loads_by_seed(runs: Sequence[dict]
                              ) -> dict[tuple[str, str], dict[int, float]]:
    """The maximum sustainable load per (cluster, policy) and seed from load-sweep runs
    (each with ``seed``, ``load_target`` and ``backlog_bounded``): the highest target load
    ``x`` such that the backlog stayed bounded on that seed at ``x`` and at every lower load
    of the sweep that ran; 0.0 when it is unbounded already at the lowest load (below the
    sweep's range).  A load not run for a seed ends its walk (:class:`SweepLadder` runs none
    above a growing one)."""
    by: dict[tuple[str, str], dict[int, dict[float, list[bool]]]] = {}
    for r in runs:
        by.setdefault((r["cluster"], r["policy"]), {}).setdefault(int(r["seed"]), {}).setdefault(
            float(r["load_target"]), []).append(bool(r["backlog_bounded"]))
    grid: dict[tuple[str, str], list[float]] = {
        key: sorted({x for per_load in seeds.values() for x in per_load})
        for key, seeds in by.items()}
    out: dict[tuple[str, str], dict[int, float]] = {}
    for key, seeds in by.items():
        out[key] = {}
        for seed in sorted(seeds):
            best = 0.0
            for x in grid[key]:
                if not all(seeds[seed].get(x, [False])):
                    break
                best = x
            out[key][seed] = best
    return out


def sustainable_loads(runs: Sequence[dict]) -> dict[tuple[str, str], float | None]:
    """The maximum sustainable load per (cluster, policy) from load-sweep runs (each with
    ``load_target`` and ``backlog_bounded``): the highest target load ``x`` such that the
    backlog stayed bounded on every seed at ``x`` and at every lower load of the sweep; 0.0
    when it is unbounded already at the lowest load (below the sweep's range).  It is the
    minimum over the seeds of :func:`sustainable_loads_by_seed`."""
    by: dict[tuple[str, str], dict[float, list[bool]]] = {}
    for r in runs:
        by.setdefault((r["cluster"], r["policy"]), {}).setdefault(
            float(r["load_target"]), []).append(bool(r["backlog_bounded"]))
    out: dict[tuple[str, str], float | None] = {}
    for key, per_load in by.items():
        best = 0.0
        for x in sorted(per_load):
            if not all(per_load[x]):
                break
            best = x
        out[key] = best
    return out


#: the plotted series cover this many arrival spans from the first event (the arrival window
#: and the start of the drain; the hours-long tail of a few long jobs would hide it)
SERIES_SPANS = 4.0


def _bin_series(tl: dict[str, list[float]], gpus: int, bins: int = SERIES_BINS,
                horizon: float = math.inf) -> dict:
    """Time-weighted means of the event-interval series over ``bins`` equal bins from the first
    event to the last, or to ``horizon`` seconds after the first when that comes earlier (each
    interval [t_i, t_{i+1}) carries its value)."""
    t = np.asarray(tl.get("t", []), float)
    if t.size < 2:
        return {"t": [], "utilization": [], "allocation": [], "queue": []}
    ends = np.append(t[1:], t[-1])
    lo = float(t[0])
    hi = min(float(t[-1]), lo + horizon) if horizon > 0 else float(t[-1])
    edges = np.linspace(lo, hi, bins + 1)
    out = {"t": (edges[:-1] - lo).tolist()}
    for key, name, scale in (("busy_all", "utilization", 1.0 / gpus),
                             ("allocated", "allocation", 1.0 / gpus), ("queue", "queue", 1.0)):
        v = np.asarray(tl[key], float) * scale
        acc = np.zeros(bins)
        for b in range(bins):
            a, z = edges[b], edges[b + 1]
            w = np.clip(np.minimum(ends, z) - np.maximum(t, a), 0.0, None)
            acc[b] = float((w * v).sum() / (z - a)) if z > a else 0.0
        out[name] = acc.tolist()
    return out


def run_all(tasks: Sequence[Task], workers: int | None = None,
            progress: Callable[[int, int, Task, RunOutput], None] | None = None
            ) -> list[RunOutput]:
    """Run ``tasks`` on ``workers`` processes (default: CPU count; 1 = in this process),
    longest first; results in the order of ``tasks``.  ``progress(done, total, task, out)``
    after each run.  A failing run raises (the pool is shut down, no partial report)."""
    done = run_tasks(tasks, workers, progress)
    return [done[t] for t in tasks]


def run_tasks(tasks: Sequence[Task], workers: int | None = None,
              progress: Callable[[int, int, Task, RunOutput], None] | None = None,
              then: Callable[[Task, RunOutput], Sequence[Task]] | None = None,
              priority: Callable[[Task], float] | None = None
              ) -> dict[Task, RunOutput]:
    """Run ``tasks`` (distinct) and every task ``then(task, out)`` adds after a run, on
    ``workers`` processes (default: CPU count; 1 = in this process); of the tasks waiting, the
    one of highest ``priority`` (default: the longest, :meth:`Task.cost`) starts first.
    Returns each task's output.
    ``progress(done, total, task, out)`` after each run (``total``: the tasks known so far).
    A failing run raises (the pool is shut down, no partial report); ``tasks`` with a task
    twice raise ValueError."""
    workers = workers or os.cpu_count() or 1
    queue = list(tasks)
    outs: dict[Task, RunOutput] = {}
    seen = set(queue)
    if len(seen) != len(queue):
        raise ValueError("tasks: a task twice")

    def finish(task: Task, out: RunOutput) -> None:
        outs[task] = out
        added = [t for t in (then(task, out) if then else ()) if t not in seen]
        seen.update(added)
        queue.extend(added)
        if progress:
            progress(len(outs), len(seen), task, out)

    rank = priority or Task.cost

    def pop() -> Task:  # the waiting task of highest priority; ties: the earliest queued
        i = max(range(len(queue)), key=lambda k: (rank(queue[k]), -k))
        return queue.pop(i)

    if workers == 1 or (len(queue) <= 1 and then is None):
        while queue:
            t = pop()
            finish(t, run_one(t))
        return outs
    ctx = multiprocessing.get_context()
    # SIGINT/SIGTERM are held while the workers are forked: a worker must not start with the
    # parent's handlers (evaluate's SIGTERM one raises "interrupted"), and a signal must not
    # land inside the fork machinery, where Python reports and drops the exception; it is
    # delivered to the parent right after, inside the try below.  Workers may be forked at
    # any submit (Python 3.14's forkserver starts them on demand), so every submit holds them.
    held = (signal.SIGINT, signal.SIGTERM)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), ctx.get_start_method()))
    running: dict = {}

    def fill() -> None:  # at most one task per worker in flight: the rest wait in `queue`
        while queue and len(running) < workers:
            t = pop()
            signal.pthread_sigmask(signal.SIG_BLOCK, held)
            try:
                running[pool.submit(run_one, t)] = t
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)

    try:
        fill()
        while running:
            # a dead worker (OOM killer) raises BrokenProcessPool from result()
            ready, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in ready:
                t = running.pop(f)
                finish(t, f.result())
            fill()
    except BaseException:
        # an interrupt or a failed run: stop the runs in progress now (shutdown alone waits
        # for them, up to a run's length, ~40 s at 512 GPUs)
        _terminate_workers(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return outs


def _terminate_workers(pool: ProcessPoolExecutor) -> None:
    # Python 3.14 has ProcessPoolExecutor.terminate_workers(); before it, the processes
    # are only reachable through the executor's _processes map
    stop = getattr(pool, "terminate_workers", None)
    if stop is not None:
        stop()
        return
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        if p.is_alive():
            p.terminate()


def _worker_init(parent: int, start_method: str) -> None:
    # Ctrl-C reaches the whole foreground group: the parent alone handles it (and stops the
    # workers), instead of every worker printing its own KeyboardInterrupt traceback; SIGTERM
    # just ends a worker.  Then the signals the parent held while forking are let through.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
    # die with the evaluate process: a forked worker's parent is it; under forkserver (Python
    # 3.14's default) or spawn the parent is the fork server or the interpreter that started
    # the worker, which go with it
    arm(parent if start_method == "fork" else os.getppid())
