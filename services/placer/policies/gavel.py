"""``gavel``: Gavel's heterogeneity-aware max-min fairness (LAS) with its round-based mechanism.

Source: D. Narayanan, K. Santhanam, F. Kazhamiaka, A. Phanishayee, M. Zaharia,
"Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads", OSDI 2020,
section 4.1 (policy) and section 5 (round-based mechanism); code
github.com/stanford-futuredata/gavel.  Re-implemented from the paper and the code's formulas,
with scipy's HiGHS instead of cvxpy.

**Allocation** (:func:`max_min_allocation`; Gavel ``scheduler/policies/max_min_fairness.py``,
``MaxMinFairnessPolicyWithPerf.get_allocation``).  ``X[i, j]`` is the fraction of time job ``i``
spends on GPU model ``j``.  With ``T[i, j]`` the job's throughput on ``s_i`` GPUs of model ``j``,
``s_i`` its scale factor (requested GPUs), ``w_i`` its priority weight and ``C_j`` the GPUs of
model ``j`` given to batch jobs::

    maximize   min_i  sum_j T[i, j] * s_i / (w_i * P_i) * X[i, j]
    subject to X >= 0,   sum_j X[i, j] <= 1,   sum_i s_i * X[i, j] <= C_j

``P_i = sum_j T[i, j] * C_j / sum_k C_k`` is the job's throughput under the *equal share*
(``X^equal``: time on every model in proportion to its GPU count; Gavel
``scheduler/policies/proportional.py``, ``ProportionalPolicy.get_throughputs``, whose common
``1/n`` factor does not change the argmax).  The capacity and per-job constraints are
Gavel's ``Policy.get_base_constraints`` (``scheduler/policies/policy.py``).  Solved as an LP with
``scipy.optimize.linprog`` (HiGHS): one LP, like Gavel's (not its water-filling variant), so
jobs not at the minimum get whatever the solver's optimal vertex gives them.

**Mechanism** (:class:`RoundMechanism`; Gavel ``scheduler/scheduler.py``,
``_update_priorities``, ``_reset_time_run_so_far``, ``_schedule_jobs_on_workers_helper``).  Per
model ``j``, ``fraction[i, j] = time job i ran on j / time all jobs ran on j`` since the last
reset; ``priority[i, j] = X[i, j] / fraction[i, j]`` (``X[i, j] * 1e9`` while the fraction is 0;
0 when ``X[i, j]`` is 0).  A new job starts with half a round of time on every model; when the
allocation has changed and at least ``reset_s`` (Gavel's ``minimum_time_between_allocation_
resets``, 1920 s) has passed, each job's deficit ``X * elapsed - (time received - round/2)``
accumulates and every time is set back to half a round.  The round's queue is, model by model
(fastest first, as Gavel's ``["v100", "p100", "k80"]``; here by mean solo throughput over
the job types), the jobs by ``(priority, deficit,
X)`` descending; a job is granted ``s_i`` whole GPUs of the first model in the queue where
``s_i`` GPUs are still free, once per round, never where its throughput is 0.  Granted jobs
keep their GPUs when they stay on their model (Gavel keeps a job on its previous workers);
the others are placed first-fit, larger gangs first; a job no longer granted is preempted
and pays ``restart_s`` when it runs again (charged by the simulator).

**Where this differs from Gavel, and why.**

* *Services.*  Gavel schedules training jobs only; ElastiCo's workload has latency-sensitive
  services that are never reshaped and never preempted (docs/model.md).  Services are placed
  first, FIFO, whole GPUs, exactly as ``exclusive`` places them; Gavel divides the GPUs they
  leave (``C_j``) among the batch jobs (training and offline inference, an inference job's
  replicas being its scale factor).  A pending service takes only free GPUs during a Gavel
  round and is placed before any batch job at a round boundary (the batch jobs' leases end
  there).
* *Round cadence.*  Gavel's rounds are ``round_s`` = 360 s.  Each result asks for the next
  round at the end of the current one (``RoundResult.wake_at_s``), which the simulator runs
  even when no job arrives or finishes by then, so leases last exactly 360 s as in Gavel
  (the Kubernetes loop runs rounds on its own timer instead).  Between
  boundaries running batch jobs keep their leases; GPUs freed by a completion are given at
  once to waiting jobs in the round's queue order (Gavel hands out GPUs only at round
  boundaries -- backfilling only makes this baseline stronger).  Time received is the
  virtual time between rounds (Gavel counts each micro-task's run time).
* *Space sharing* (Gavel's ``MaxMinFairnessPolicyWithPacking``) is left out: jobs get whole
  GPUs, nothing shares one.
* *Nodes.*  Gavel's LP and queue count GPUs per model; a grant that finds no node with the
  gang's GPUs (or CPU, memory) free on one node waits this round, and free GPUs then go to the
  next jobs of the queue that fit.  A job's throughput on a model counts as 0 where the
  batch jobs have fewer GPUs of it than the job's scale factor or no node of it is large
  enough (Gavel's LP would give such a job time it could never use).
* *When the LP runs.*  Whenever the batch jobs or their GPUs changed, at a round boundary or
  when free GPUs could take a waiting job (Gavel recomputes on every arrival and completion).
* *Throughputs* are the project's :class:`~elastico.perf.throughput.ThroughputModel` (built from
  Gavel's own measured throughputs, docs/model.md section 2) for the job's requested GPU count
  on each model, not online estimates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from elastico.errors import Infeasible, InvalidArgument
from elastico.model import Configuration

from ..placement import ClusterState, FailedShapes
from ..round import ActiveJob, Decision, RoundInput, RoundResult, Status
from .common import JobCatalog, PolicyEnv, is_service, keep_running, place_fixed_shape

__all__ = ["GavelPolicy", "RoundMechanism", "max_min_allocation", "equal_share_throughput"]

#: Gavel's round length (``time_per_iteration``, scheduler.py default 360 s).
ROUND_S = 360.0
#: Gavel's ``minimum_time_between_allocation_resets`` (scheduler.py default 1920 s).
RESET_S = 1920.0
#: Gavel's stand-in for an infinite priority (scheduler.py ``INFINITY``).
_BIG = 1e9
#: LP values below this are solver noise, not time shares.
_TINY = 1e-9


def equal_share_throughput(throughputs: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """``P`` [n]: each job's throughput when its time is spread over the models in proportion
    to their GPUs ``capacity`` [m] (Gavel's ``ProportionalPolicy``): ``T @ C / sum(C)``."""
    total = float(np.sum(capacity))
    if total <= 0:
        return np.zeros(throughputs.shape[0])
    return throughputs @ capacity / total


def max_min_allocation(throughputs: np.ndarray, scale: np.ndarray, weights: np.ndarray,
                       capacity: np.ndarray) -> tuple[np.ndarray, float]:
    """Gavel's heterogeneity-aware max-min fair allocation (module docstring).

    ``throughputs`` [n, m] ``T`` (>= 0; 0 = the job cannot run on that model), ``scale`` [n]
    GPUs per job (>= 1), ``weights`` [n] priority weights (> 0), ``capacity`` [m] GPUs per
    model (>= 0).  Returns ``(X [n, m], z)``: time fractions and the optimal minimum of the
    normalized, weighted throughputs ``sum_j T[i, j] s_i X[i, j] / (w_i P_i)``.  Every job needs
    ``P_i > 0`` (some throughput on a model with GPUs); InvalidArgument otherwise.
    """
    T = np.asarray(throughputs, dtype=float)
    s = np.asarray(scale, dtype=float)
    w = np.asarray(weights, dtype=float)
    C = np.asarray(capacity, dtype=float)
    if T.ndim != 2:
        raise InvalidArgument("throughputs", T.shape, "a 2-d array [jobs, models]")
    n, m = T.shape
    if s.shape != (n,) or w.shape != (n,) or C.shape != (m,):
        raise InvalidArgument("scale/weights/capacity", (s.shape, w.shape, C.shape),
                              f"shapes ({n},), ({n},), ({m},)")
    if not (np.all(np.isfinite(T)) and np.all(T >= 0)):
        raise InvalidArgument("throughputs", T.min() if T.size else T, "finite and >= 0")
    if not np.all(s >= 1):
        raise InvalidArgument("scale", s.min(), ">= 1 GPU per job")
    if not (np.all(np.isfinite(w)) and np.all(w > 0)):
        raise InvalidArgument("weights", w.min(), "finite and > 0")
    if not (np.all(np.isfinite(C)) and np.all(C >= 0)):
        raise InvalidArgument("capacity", C.min(), "finite and >= 0")
    if n == 0:
        return np.zeros((0, m)), math.inf
    P = equal_share_throughput(T, C)
    if not np.all(P > 0):
        bad = int(np.argmin(P))
        raise InvalidArgument(f"throughputs[{bad}]", T[bad].tolist(),
                              "some throughput on a model with capacity > 0")
    coef = T * (s / (w * P))[:, None]                      # [n, m]
    nv = n * m + 1                                          # x (row-major) then z
    ii, jj = np.nonzero(T > 0)
    col = ii * m + jj
    k = len(col)
    # rows [0, n): z - sum_j coef[i, j] x[i, j] <= 0;  [n, 2n): sum_j x[i, j] <= 1;
    # [2n, 2n + m): sum_i s_i x[i, j] <= C_j
    r = np.concatenate([ii, np.arange(n), n + ii, 2 * n + jj])
    cc = np.concatenate([col, np.full(n, nv - 1), col, col])
    v = np.concatenate([-coef[ii, jj], np.ones(n), np.ones(k), s[ii]])
    A = sparse.csr_matrix((v, (r, cc)), shape=(2 * n + m, nv))
    b = np.concatenate([np.zeros(n), np.ones(n), C])
    upper = np.where(T > 0, 1.0, 0.0).ravel()
    bounds = np.column_stack([np.zeros(nv), np.concatenate([upper, [np.inf]])])
    c = np.zeros(nv)
    c[-1] = -1.0
    res = linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs")
    if res.status != 0:  # the LP is always feasible (X = 0) and bounded (X <= 1)
        raise RuntimeError(f"gavel max-min LP failed: {res.message}")
    X = np.clip(res.x[:-1].reshape(n, m), 0.0, 1.0)
    X[X < _TINY] = 0.0
    return X, float(res.x[-1])


@dataclass
class RoundMechanism:
    """Gavel's round-based mechanism (module docstring), over job ids and model names only:
    no cluster, no clock (times are arguments).  ``models``: fastest first."""

    models: Sequence[str]
    round_s: float = ROUND_S
    reset_s: float = RESET_S
    allocation: dict[str, dict[str, float]] = field(default_factory=dict)
    job_time: dict[str, dict[str, float]] = field(default_factory=dict)
    worker_time: dict[str, float] = field(default_factory=dict)
    deficit: dict[str, dict[str, float]] = field(default_factory=dict)
    last_reset: float | None = None
    pending_reset: bool = False

    def add_job(self, job_id: str) -> None:
        """A new job: half a round of time on every model (Gavel's ``add_job``)."""
        if job_id not in self.job_time:
            self.job_time[job_id] = {m: self.round_s / 2.0 for m in self.models}
            self.deficit[job_id] = {m: 0.0 for m in self.models}

    def remove_job(self, job_id: str) -> None:
        self.job_time.pop(job_id, None)
        self.deficit.pop(job_id, None)
        self.allocation.pop(job_id, None)

    def credit(self, ran: Mapping[str, str], seconds: float) -> None:
        """Jobs in ``ran`` (job id -> model) ran ``seconds`` on that model."""
        if seconds <= 0:
            return
        for jid, m in ran.items():
            if jid in self.job_time:
                self.job_time[jid][m] = self.job_time[jid].get(m, 0.0) + seconds
                self.worker_time[m] = self.worker_time.get(m, 0.0) + seconds

    def set_allocation(self, allocation: Mapping[str, Mapping[str, float]], now: float) -> None:
        """Install a new allocation; reset the time accounting first when it is due
        (:meth:`maybe_reset`)."""
        self.pending_reset = True
        self.maybe_reset(now)
        self.allocation = {j: dict(a) for j, a in allocation.items()}

    def maybe_reset(self, now: float) -> None:
        """Gavel's ``_reset_time_run_so_far``: when the allocation changed since the last reset
        and ``reset_s`` has passed (or there never was one), add each job's deficit under the
        allocation in force and set every job's time back to half a round."""
        if not self.pending_reset:
            return
        if self.last_reset is not None and now - self.last_reset < self.reset_s:
            return
        elapsed = 0.0 if self.last_reset is None else now - self.last_reset
        half = self.round_s / 2.0
        for m in self.models:
            self.worker_time[m] = 0.0
            for jid, times in self.job_time.items():
                received = times.get(m, 0.0) - half
                should = self.allocation.get(jid, {}).get(m, 0.0) * elapsed
                self.deficit[jid][m] = self.deficit[jid].get(m, 0.0) + should - received
                times[m] = half
                self.worker_time[m] += half
        self.last_reset = now
        self.pending_reset = False

    def priority(self, job_id: str, model: str) -> float:
        """``X / fraction`` (module docstring); 0 for a job without allocation there."""
        x = self.allocation.get(job_id, {}).get(model, 0.0)
        if x <= 0:
            return 0.0
        wt = self.worker_time.get(model, 0.0)
        jt = self.job_time.get(job_id, {}).get(model, 0.0)
        if wt <= 0 or jt <= 0:
            return x * _BIG
        return x / (jt / wt)

    def queue(self, jobs: Sequence[str], runs_on: Mapping[str, frozenset[str]]
              ) -> list[tuple[str, str]]:
        """The round's ``(job, model)`` entries in grant order: models fastest first, within a
        model by (priority, deficit, allocation) descending, ties in ``jobs`` order.  Entries
        where the job cannot run (``runs_on[job]``) are left out."""
        out: list[tuple[str, str]] = []
        for m in self.models:
            entries = [(self.priority(j, m), self.deficit.get(j, {}).get(m, 0.0),
                        self.allocation.get(j, {}).get(m, 0.0), -k, j)
                       for k, j in enumerate(jobs) if m in runs_on.get(j, ())]
            entries.sort(reverse=True)
            out.extend((e[-1], m) for e in entries)
        return out


def grant(queue: Sequence[tuple[str, str]], scale: Mapping[str, int],
          free: Mapping[str, int]) -> dict[str, str]:
    """Gavel's ``_schedule_jobs_on_workers_helper``: walk the queue, give a job not yet granted
    its ``scale`` GPUs of the entry's model when that many are ``free``.  Returns job ->
    model."""
    left = dict(free)
    out: dict[str, str] = {}
    for jid, m in queue:
        if jid in out or scale[jid] > left.get(m, 0):
            continue
        left[m] -= scale[jid]
        out[jid] = m
    return out


class GavelPolicy:
    """The ``gavel`` policy (module docstring).  ``round_s``/``reset_s``: Gavel's round length
    and minimum time between time-accounting resets."""

    name = "gavel"
    #: whole GPUs for every pod (also a preemptor's: policies/priority.py)
    whole_gpus = True

    def __init__(self, env: PolicyEnv, *, round_s: float = ROUND_S, reset_s: float = RESET_S):
        for fld, v in (("round_s", round_s), ("reset_s", reset_s)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InvalidArgument(fld, v, "a finite number of seconds > 0")
        self.env = env
        self.catalog = JobCatalog(env)
        tm = env.throughput
        types = tm.job_types()
        models = list(self.catalog.gpu_models)
        speed = {m: float(np.mean([tm.solo(t, m) for t in types])) for m in models}
        self.models = sorted(models, key=lambda m: (-speed[m], m))  # fastest first
        self.capacity = {m: 0 for m in self.models}
        for nd in env.nodes:
            if nd.num_gpus:
                self.capacity[nd.gpu_model] += nd.num_gpus
        # model index per GPU in ClusterState's flat order (node by node)
        index = {m: k for k, m in enumerate(self.models)}
        self._gpu_model = np.array([index[nd.gpu_model] for nd in env.nodes
                                    for _ in range(nd.num_gpus)], dtype=np.int64)
        self._first_gpu = np.concatenate([[0], np.cumsum([nd.num_gpus for nd in env.nodes])])
        self.mech = RoundMechanism(self.models, round_s=float(round_s), reset_s=float(reset_s))
        self._prev_now: float | None = None
        self._round_end = -math.inf
        self._lp_key: tuple | None = None
        self.last_allocation: dict[str, dict[str, float]] = {}

    def forget(self, job_id: str) -> None:
        self.catalog.forget(job_id)
        self.mech.remove_job(job_id)

    def _configs(self, job) -> dict[str, Configuration]:
        return {c.gpu_model: c for c in self.catalog.requested(job, True)}

    def _allocate(self, batch: list[ActiveJob], cap: dict[str, int], now: float) -> None:
        """Solve the LP for ``batch`` on ``cap`` when either changed; install it."""
        key = (tuple(a.job.id for a in batch), tuple(cap[m] for m in self.models))
        if key == self._lp_key:
            return
        self._lp_key = key
        C = np.array([cap[m] for m in self.models], dtype=float)
        rows, T = [], []
        for a in batch:
            cfg = self._configs(a.job)
            t = [cfg[m].throughput if (m in cfg and cap[m] >= a.job.request.num_gpus) else 0.0
                 for m in self.models]
            if any(x > 0 for x in t):
                rows.append(a)
                T.append(t)
        alloc: dict[str, dict[str, float]] = {}
        if rows:
            X, _ = max_min_allocation(np.array(T), np.array([a.job.request.num_gpus for a in rows]),
                                      np.array([a.job.priority for a in rows]), C)
            for a, x in zip(rows, X):
                alloc[a.job.id] = {m: float(v) for m, v in zip(self.models, x) if v > 0}
        self.last_allocation = alloc
        self.mech.set_allocation(alloc, now)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        now = inp.now
        decisions: dict[str, Decision] = {}
        batch = [a for a in inp.jobs if not is_service(a.job)]
        services = sorted((a for a in inp.jobs if is_service(a.job)),
                          key=lambda a: (a.job.arrival_s, a.job.id))
        # time received since the previous round, by the jobs that held GPUs meanwhile
        if self._prev_now is not None:
            self.mech.credit({a.job.id: a.config.gpu_model for a in batch if a.running},
                             now - self._prev_now)
        self._prev_now = now
        for a in batch:
            self.mech.add_job(a.job.id)
        boundary = now >= self._round_end
        held: dict[str, tuple] = {}  # job -> (assignment, profile) of a released lease
        if boundary:  # every lease ends: batch GPUs are handed out again after the services
            self._round_end = now + self.mech.round_s
            for a in batch:
                if a.running:
                    prof = state.profile(a.job.id)
                    held[a.job.id] = (state.release(a.job.id), prof)
        # services first: FIFO, whole GPUs, never moved (exactly as ``exclusive``)
        failed = FailedShapes()
        svc_gpus = {m: 0 for m in self.models}
        for a in services:
            d = keep_running(a, state) if a.running else place_fixed_shape(
                self.catalog, state, a, whole_gpus=True, scorer="firstfit", failed=failed)
            decisions[a.job.id] = d
            if d.config is not None and d.status is Status.PLACED:
                svc_gpus[d.config.gpu_model] += d.config.num_gpus
        cap = {m: self.capacity[m] - svc_gpus[m] for m in self.models}

        runs_on: dict[str, frozenset[str]] = {}
        scale: dict[str, int] = {}
        cfgs: dict[str, dict[str, Configuration]] = {}
        for a in batch:
            cfg = self._configs(a.job)
            if not cfg:
                decisions[a.job.id] = Decision(
                    a.job.id, Status.UNPLACEABLE, None,
                    reason=f"no node of an allowed GPU model {sorted(a.job.request.gpu_models)} "
                           f"has {a.job.request.num_gpus} GPUs")
                continue
            cfgs[a.job.id] = cfg
            runs_on[a.job.id] = frozenset(m for m in cfg if cfg[m].throughput > 0)
            scale[a.job.id] = a.job.request.num_gpus
        live = [a for a in batch if a.job.id in cfgs]
        order = sorted(live, key=lambda a: (a.job.arrival_s, a.job.id))
        ids = [a.job.id for a in order]
        by_id = {a.job.id: a for a in live}
        self.mech.maybe_reset(now)
        if not boundary:
            # mid-round: running batch jobs keep their leases
            for a in live:
                if a.running:
                    decisions[a.job.id] = keep_running(a, state)
        free = self._free_gpus(state)
        # the allocation and the queue are needed at a boundary, or when free GPUs could take
        # a waiting job (skipping them otherwise keeps a full cluster's rounds cheap)
        queue: list[tuple[str, str]] = []
        if boundary or (any(free.values()) and any(
                scale[a.job.id] <= max((free[m] for m in runs_on[a.job.id]), default=0)
                for a in live if a.job.id not in decisions)):
            self._allocate(order, cap, now)
            queue = self.mech.queue(ids, runs_on)

        if boundary:
            granted = grant(queue, scale, cap)
            # keep granted jobs on their previous GPUs (no restart), larger gangs first
            rank = {j: k for k, j in enumerate(dict.fromkeys(j for j, _ in queue))}
            todo = sorted(granted, key=lambda j: (-scale[j], rank[j]))
            placed: set[str] = set()
            for jid in todo:
                d = self._renew(by_id[jid], granted[jid], held, state)
                if d is not None:
                    decisions[jid] = d
                    placed.add(jid)
            for jid in todo:
                if jid not in placed:
                    d = self._place(by_id[jid], cfgs[jid][granted[jid]], state, "granted",
                                    failed)
                    if d is not None:
                        decisions[jid] = d
                        placed.add(jid)
            free = self._free_gpus(state)
        # free GPUs go to waiting jobs in queue order (work conserving; see module docstring)
        for jid, m in queue:
            if jid in decisions or scale[jid] > free.get(m, 0):
                continue
            d = (self._renew(by_id[jid], m, held, state)
                 or self._place(by_id[jid], cfgs[jid][m], state, "backfill", failed))
            if d is not None:
                decisions[jid] = d
                free[m] -= scale[jid]
        for a in live:
            if a.job.id not in decisions:
                why = ("preempted: not granted this round" if a.running
                       else "waiting: not granted this round")
                decisions[a.job.id] = Decision(a.job.id, Status.WAITING, None, changed=a.running,
                                               reason=f"gavel: {why}")
        # the leases end at _round_end whether or not a job arrives or finishes by then
        return RoundResult(decisions, state, wake_at_s=self._round_end if batch else None)

    @staticmethod
    def _renew(a: ActiveJob, model: str, held: dict[str, tuple], state: ClusterState
               ) -> Decision | None:
        """Book a job whose lease just ended back on its previous GPUs when it stays on
        ``model`` (no restart, as Gavel keeps a job on its workers); None when it moved or a
        service took one of its GPUs."""
        if a.job.id not in held or a.config.gpu_model != model:
            return None
        old, prof = held[a.job.id]
        try:
            state.rebook(old, prof, a.job.slowdown_bound)
        except Infeasible:
            return None
        return Decision(a.job.id, Status.PLACED, a.config, old,
                        reason=f"gavel: lease renewed on {model}")

    def _place(self, a: ActiveJob, config: Configuration, state: ClusterState,
               why: str, failed: FailedShapes) -> Decision | None:
        out = state.place_unless_dominated(a.job.id, config, self.catalog.profile(a.job, config),
                                           a.job.slowdown_bound, failed, self.env.slowdown,
                                           scorer="firstfit")
        if out.assignment is None:
            return None
        return Decision(a.job.id, Status.PLACED, config, out.assignment, changed=True,
                        reason=f"gavel: {why} on {config.gpu_model}")

    def _free_gpus(self, state: ClusterState) -> dict[str, int]:
        """Whole healthy GPUs nothing is booked on, per model."""
        use = state.gpu_usage()
        idle = (use["residents"] == 0) & (use["used_share"] <= 0)
        for n, g in state.unhealthy_gpus():
            idle[self._first_gpu[n] + g] = False
        counts = np.bincount(self._gpu_model[idle], minlength=len(self.models))
        return {m: int(counts[k]) for k, m in enumerate(self.models)}
