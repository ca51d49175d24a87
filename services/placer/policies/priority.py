"""Offline LLM inference is low priority: one preemption rule, the same for every policy.

What a real cluster does: batch inference pods get a low ``PriorityClass``; when a pod of
higher priority cannot be scheduled, the scheduler's preemption (Kubernetes docs, "Pod
Priority and Preemption") looks for lower-priority pods whose removal lets it fit, evicts
them (graceful termination), and the preemptor is scheduled; pods of equal priority never
preempt each other.  Offline inference here also gets what GFS (Duan et al., "GFS: A
Preemption-aware Scheduling Framework for GPU Clusters with Predictive Spot Instance
Management", ASPLOS 2026, arXiv 2509.11134) gives its low-priority spot tasks: a *guaranteed
duration* -- a running low-priority job is not evicted before it has run ``min_run_s``
seconds since it (re)started.

:class:`PriorityPreemption` wraps any policy (:func:`elastico.placer.policies.make_policy`
wraps every registered one, so the comparison is fair) and, after the policy's round:

1. *low priority*: an offline LLM inference job (``Job.llm`` set: only a job declared offline
   LLM inference has one -- kind ``inference`` in the simulator; a live pod with ``workload:
   inference`` and ``llm-*`` annotations, which the Kubernetes loop may enter as kind
   ``service`` when it keeps its shape: a bound pod, a gang member, ``shape-family: fixed``);
   everything else (training, LLM training, services, other inference) is normal priority
   and may preempt it.  Jobs of equal priority never preempt each other.
2. *preemptors*: normal-priority jobs the policy left waiting, in arrival order.
3. *victims*: low-priority jobs running after the policy's round whose current run began at
   least their minimum guaranteed run ago (``now - started >= min_run``), latest start
   first (the least work lost; ties by job id).
4. *shrink first*: when the policy can shrink a victim (only ``elastico`` can:
   ``policy.shrink_options(job, config)``, smaller configurations of the job's family on the
   same GPU model -- fewer replicas or a smaller MPS share, fastest first -- and
   ``policy.place_shrunk``, then ``policy.shrunk``; :meth:`~.elastico.ElasticoPolicy.shrink_options`), each victim
   in turn is tried in each smaller configuration until one lets the preemptor fit; the
   shrunk job keeps running (it restarts in its smaller configuration, ``changed``).  When
   no single shrink makes room, nothing is shrunk.
5. *evict*: otherwise victims are released one at a time until the preemptor fits with its
   requested shape, placed as the policy places it (``policy.place_preemptor`` when the
   policy has one, else :func:`~.common.place_fixed_shape` with ``policy.whole_gpus``);
   then every evicted victim that can go back onto exactly its old GPUs does
   (Kubernetes' "reprieve").  When even all victims do not make room, nothing changes.
6. *record*: every victim evicted (and not reprieved) or shrunk is named in
   ``RoundResult.preempted`` (victim id -> preemptor id), so that a caller that must carry
   the decision out -- the Kubernetes loop evicts a bound pod through the ``policy/v1``
   Eviction API and holds its preemptor back until the pod is gone
   (:mod:`elastico.placer.kube.loop`) -- acts on exactly what the rule decided.
7. *wake*: while a normal-priority job waits, the round asks to run again when the next
   running low-priority job's guarantee ends (``RoundResult.wake_at_s``), so that a
   preemption happens exactly then, not at the next arrival or completion.

``min_run_s``: the minimum guaranteed run, seconds (``PolicyEnv.min_run_s``, default
:data:`MIN_RUN_S`).  GFS makes the guaranteed duration a quota parameter; its production
value is not given in the abstract we could read (UNVERIFIED), so the default is a documented
choice: 300 s, the ``elastico`` policy's own dwell time (``PolicyEnv.dwell_factor`` x
``restart_s`` = 10 x 30 s), which bounds the time lost to restarts at ~10 % of run time; a
Llama-2-70B replica loads in 17.5 s at the simulator's load bandwidth (docs/model.md 8.), so
an evicted 70B job has run at least ~17x its start-up.  Kubernetes itself has no minimum run
(a victim gets only its graceful termination period, 30 s by default).

What an eviction costs is the simulator's business (:mod:`elastico.sim.simulator`,
"Evictions"): the in-flight requests (:func:`elastico.llm_shapes.inflight_tokens`) and a new
start-up.
"""

from __future__ import annotations

import math

from elastico.errors import Infeasible, InvalidArgument
from elastico.model import Job

from ..placement import ClusterState
from ..round import ActiveJob, Decision, RoundInput, RoundResult, Status
from .common import place_fixed_shape

#: Default minimum guaranteed run of a low-priority job, seconds (module docstring).
MIN_RUN_S = 300.0

_EPS = 1e-9


def low_priority(job: Job) -> bool:
    """Whether ``job`` is low priority: offline LLM inference, ``Job.llm`` set (module
    docstring, step 1; the kind does not matter: a live pod that keeps its shape enters the
    round as a ``service`` but is still the offline inference its pod declares)."""
    return job.llm is not None


def check_min_run(min_run_s: object) -> float:
    """``min_run_s`` as a float >= 0; InvalidArgument naming ``min_run_s`` otherwise."""
    if isinstance(min_run_s, bool) or not isinstance(min_run_s, (int, float)) \
            or not (math.isfinite(min_run_s) and min_run_s >= 0):
        raise InvalidArgument("min_run_s", min_run_s, "a finite number of seconds >= 0")
    return float(min_run_s)


class PriorityPreemption:
    """``policy`` plus the priority rule (module docstring).  Everything else --
    ``name``, ``env``, ``catalog``, ``sharing``, ``uses_mig``, ... -- is the policy's."""

    def __init__(self, policy, min_run_s: float = MIN_RUN_S):
        self.__dict__["policy"] = policy
        self.__dict__["min_run_s"] = check_min_run(min_run_s)
        # low-priority job id -> when its current run began (RoundInput.now's clock)
        self.__dict__["started"] = {}

    def __getattr__(self, name):
        return getattr(self.__dict__["policy"], name)

    def note_started(self, job_id: str, since_s: float) -> None:
        """Low-priority job ``job_id`` has run since ``since_s`` (seconds, ``RoundInput.now``'s
        clock): its minimum guaranteed run counts from then.  For a caller that knows when a
        run really began better than the rule's own memory -- the Kubernetes loop, from a
        bound pod's ``status.startTime``, across placer restarts and policy rebuilds; without
        it a run the rule has not seen counts from the round that first sees it."""
        self.started[job_id] = float(since_s)

    def forget(self, job_id: str) -> None:
        self.started.pop(job_id, None)
        f = getattr(self.policy, "forget", None)
        if f is not None:
            f(job_id)

    def __call__(self, inp: RoundInput, state: ClusterState) -> RoundResult:
        res = self.policy(inp, state)
        if not self.started and not any(low_priority(a.job) for a in inp.jobs):
            return res  # no low-priority job, none running: the rule changes nothing
        now = inp.now
        jobs = {a.job.id: a for a in inp.jobs}
        started = self.started
        for a in inp.jobs:  # a run the clock has not seen (e.g. a restarted placer): from now
            if a.running and low_priority(a.job) and a.job.id not in started:
                started[a.job.id] = now
        decisions = res.decisions
        victims = [jid for jid, d in decisions.items() if _runs(d) and low_priority(jobs[jid].job)
                   and now - started.get(jid, now) >= self.min_run_s - _EPS]
        if victims:
            waiting = sorted((jobs[jid] for jid, d in decisions.items()
                              if d.status is Status.WAITING and not low_priority(jobs[jid].job)),
                             key=lambda a: (a.job.arrival_s, a.job.id))
            # latest start first: the least work lost (ties by id)
            victims.sort(key=lambda j: (-started.get(j, now), j))
            # requests that found no room even with every victim gone: a later request that
            # asks at least as much on the same models cannot either (within a round the
            # victims only go and the cluster only fills)
            failed: list[tuple] = []
            for a in waiting:
                if not victims:
                    break
                req = a.job.request
                key = (req.num_gpus, req.gpu_share, req.gpu_models)
                if any(key[0] >= f[0] and key[1] >= f[1] - _EPS and key[2] == f[2]
                       for f in failed):
                    continue
                if not self._preempt(a, victims, decisions, jobs, res.state, now,
                                     res.preempted):
                    failed.append(key)
        for jid, d in decisions.items():
            if not low_priority(jobs[jid].job):
                continue
            if _runs(d):
                if jid not in started or not jobs[jid].running:
                    started[jid] = now
            else:
                started.pop(jid, None)
        # a normal-priority job still waits: the next round is due when the next
        # low-priority run's guarantee ends (not at the next arrival or completion)
        if any(d.status is Status.WAITING and not low_priority(jobs[jid].job)
               for jid, d in decisions.items()):
            ends = [started[jid] + self.min_run_s for jid, d in decisions.items()
                    if _runs(d) and jid in started and started[jid] + self.min_run_s > now + _EPS]
            if ends:
                due = min(ends)
                res.wake_at_s = due if res.wake_at_s is None else min(res.wake_at_s, due)
        return res

    def _place(self, a: ActiveJob, state: ClusterState) -> Decision:
        place = getattr(self.policy, "place_preemptor", None)
        if place is not None:
            return place(a, state)
        return place_fixed_shape(self.policy.catalog, state, a,
                                 whole_gpus=getattr(self.policy, "whole_gpus", False),
                                 scorer="bestfit")

    def _preempt(self, a: ActiveJob, victims: list[str], decisions: dict[str, Decision],
                 jobs: dict[str, ActiveJob], state: ClusterState, now: float,
                 preempted: dict[str, str]) -> bool:
        """Make room for ``a`` (module docstring, steps 4 and 5); updates ``decisions``,
        ``victims``, ``state`` and ``preempted`` (victim id -> ``a``'s id, step 6) and returns
        True when it succeeds, changes nothing and returns False otherwise."""
        if not self._room_without(a, victims, state):
            return False
        options = getattr(self.policy, "shrink_options", None)
        if options is not None:
            for v in victims:
                job, was = jobs[v].job, decisions[v].config
                booked = _booking(state, v)
                for c in options(job, was):
                    state.release(v)
                    d = self.policy.place_shrunk(job, c, state, now, was.name)
                    if d is not None:
                        placed = self._place(a, state)
                        if placed.status is Status.PLACED:
                            decisions[a.job.id] = placed
                            decisions[v] = d
                            victims.remove(v)  # shrunk once: not a victim again this round
                            self.policy.shrunk(v, now)
                            preempted[v] = a.job.id
                            return True
                        state.release(v)
                    state.rebook(*booked, unhealthy_ok=True)
        evicted = []
        for v in victims:
            evicted.append((v, _booking(state, v)))
            state.release(v)
            placed = self._place(a, state)
            if placed.status is not Status.PLACED:
                continue
            decisions[a.job.id] = placed
            for u, booked in reversed(evicted):  # reprieve: back onto exactly its GPUs
                try:
                    state.rebook(*booked, unhealthy_ok=True)
                except Infeasible:  # its GPUs are taken now
                    victims.remove(u)
                    preempted[u] = a.job.id
                    decisions[u] = Decision(
                        u, Status.WAITING, None,
                        reason=f"preempted by {a.job.id} (offline inference is low priority; "
                               f"it ran past its minimum guaranteed run of "
                               f"{self.min_run_s:g} s)")
            return True
        for v, booked in reversed(evicted):  # no room even without every victim: undo
            state.rebook(*booked, unhealthy_ok=True)
        return False

    def _room_without(self, a: ActiveJob, victims: list[str], state: ClusterState) -> bool:
        """Whether ``a`` finds room with every victim gone; ``state`` is left as it was.  The
        most room any shrink or eviction of :meth:`_preempt` can make (a shrunk victim still
        holds GPUs; an eviction that succeeds releases a prefix of ``victims``), so where
        this fails they all fail.  ASSUMPTION: placement is monotone -- what fits in less
        free capacity fits in more, and fewer co-residents only loosen slowdown bounds
        (checked: bench/decision_identity.py's cases and a whole ``elastico evaluate``
        bit-identical with and without this check).  Checked first because most
        preemptions fail (llm-mix a100h100-64 at load 2, seed 0: 7,365 of 7,506 calls, each
        of which tried every victim's shrink options and every eviction, 33 % of the run's
        CPU; bench/sim_cpu.py)."""
        booked = [_booking(state, v) for v in victims]
        for v in victims:
            state.release(v)
        placed = self._place(a, state)
        if placed.status is Status.PLACED:
            state.release(a.job.id)
        for b in reversed(booked):
            state.rebook(*b, unhealthy_ok=True)
        return placed.status is Status.PLACED


def _booking(state: ClusterState, job_id: str):
    """What :meth:`ClusterState.rebook` needs to book ``job_id`` again exactly as now.  Every
    rebook of such a booking passes ``unhealthy_ok=True``: it restores what the job held, and a
    running job may hold a GPU that turned unhealthy (the Kubernetes loop keeps a bound pod's
    booking there; found by tests/test_live_properties.py's priority search, where the undo
    raised Infeasible and the round failed)."""
    return state.assignment(job_id), state.profile(job_id), state.slowdown_bound(job_id)


def _runs(d: Decision) -> bool:
    return d.status in (Status.PLACED, Status.DEGRADED) and d.config is not None \
        and not d.config.is_wait
