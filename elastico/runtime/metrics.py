"""Prometheus metrics of one ElastiCo service process (issue 6, "Metrics").

One :class:`ServiceMetrics` per server, on its own ``CollectorRegistry`` (no process-global
registry: two servers in one process, e.g. in tests or ``elastico up``, keep their own
numbers).  ``elastico serve --metrics-port P`` exposes it on ``http://HOST:P/metrics``.

Every service has:

==============================================  =========  ======================================
metric                                          type       labels / unit
==============================================  =========  ======================================
``elastico_rpc_duration_seconds``               histogram  ``service``, ``method``; seconds
``elastico_rpc_total``                          counter    ``service``, ``method``, ``code``
                                                           (gRPC status name, ``OK`` included)
==============================================  =========  ======================================

Pricing adds ``elastico_pricing_solve_seconds`` (histogram), ``elastico_pricing_gap``
(certified relative gap of the last solve), ``elastico_pricing_iterations`` (of the last solve),
``elastico_pricing_price{resource}`` (last shadow price per resource, utility per unit; only
the last solve's resources carry a value).  A placer that prices in-process observes the same
from each round's solve.
The predictor adds ``elastico_predictor_pairs_total`` and
``elastico_predictor_fallback_total`` (pairs answered by the analytic fallback because no
learned model was available).

Rounds (the placer service, and an in-process ``run_round(..., metrics=...)``):

==============================================  =========  ======================================
``elastico_round_duration_seconds``             histogram  seconds of one whole round
``elastico_round_jobs{status}``                 gauge      jobs of the last round by decision
                                                           status (placed, waiting, ...)
``elastico_gpu_allocation``                     gauge      booked GPU compute / cluster GPUs
                                                           after the last round, fraction
``elastico_gpu_utilization``                    gauge      predicted busy GPU compute of the
                                                           jobs with a solo profile (GPUs x
                                                           SM activity / slowdown) / cluster
                                                           GPUs, fraction
``elastico_gpu_unknown_allocation``             gauge      booked GPU compute of jobs with no
                                                           solo profile yet (their activity is
                                                           not known, so not in the line
                                                           above) / cluster GPUs, fraction
``elastico_pricing_price{resource}``            gauge      the round's shadow prices
``elastico_placer_predictor_fallbacks_total``  counter    placer calls to the predictor that
                                                           the analytic model answered instead
``elastico_rounds_degraded_total``              counter    rounds that ran degraded
==============================================  =========  ======================================

The scheduler loop (``elastico schedule``, :class:`LoopMetrics`) has the placer's metrics
(the round metrics above come from its rounds with pending pods) plus:

==============================================  =========  ======================================
``elastico_loop_round_duration_seconds``        histogram  seconds of one leader round: book,
                                                           decide, annotate, bind
``elastico_loop_rounds_total{outcome}``         counter    ``completed``, ``standby`` (not the
                                                           leader), ``abandoned`` (pricing
                                                           failed: nothing applied), ``failed``
``elastico_loop_pods{outcome}``                 gauge      pods of the last leader round:
                                                           reserved, bound, held, waiting,
                                                           rejected, error
``elastico_job_errors_total{stage}``            counter    jobs whose handling raised (pod,
                                                           gang, round, reserve, bind, book);
                                                           the others went on
``elastico_binds_total``                        counter    pods bound (Binding subresource)
``elastico_bind_conflicts_total``               counter    Bindings answered 409 Conflict
``elastico_events_total{reason}``               counter    Kubernetes Events written
``elastico_leader``                             gauge      1 while this replica leads, else 0
==============================================  =========  ======================================
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ServiceMetrics", "LoopMetrics", "RPC_BUCKETS_S", "ROUND_BUCKETS_S"]

#: Histogram buckets for RPC and solve durations, seconds (1 ms .. 10 s).
RPC_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Histogram buckets for round durations, seconds (10 ms .. 60 s).
ROUND_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServiceMetrics:
    """The metrics of one service (``service``: ``"pricing"``, ``"predictor"``, ...) on
    ``registry`` (a new one when None)."""

    def __init__(self, service: str, registry: CollectorRegistry | None = None):
        self.service = service
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.rpc_seconds = Histogram("elastico_rpc_duration_seconds",
                                     "Wall time of one RPC in the server, seconds",
                                     ("service", "method"), buckets=RPC_BUCKETS_S, registry=r)
        self.rpc_total = Counter("elastico_rpc", "RPCs answered, by gRPC status code",
                                 ("service", "method", "code"), registry=r)
        self.solve_seconds = Histogram("elastico_pricing_solve_seconds",
                                       "Wall time of one pricing solve, seconds",
                                       buckets=RPC_BUCKETS_S, registry=r)
        self.gap = Gauge("elastico_pricing_gap",
                         "Certified relative optimality gap of the last solve", registry=r)
        self.iterations = Gauge("elastico_pricing_iterations",
                                "Lagrangian evaluations of the last solve", registry=r)
        self.price = Gauge("elastico_pricing_price",
                           "Shadow price of each resource after the last solve "
                           "(utility per unit of the resource)", ("resource",), registry=r)
        self.pairs = Counter("elastico_predictor_pairs", "Pairs whose slowdown was predicted",
                             registry=r)
        self.fallbacks = Counter("elastico_predictor_fallback",
                                 "Pairs answered by the analytic fallback model", registry=r)
        self.round_seconds = Histogram("elastico_round_duration_seconds",
                                       "Wall time of one scheduling round, seconds",
                                       buckets=ROUND_BUCKETS_S, registry=r)
        self.round_jobs = Gauge("elastico_round_jobs",
                                "Jobs of the last round by decision status", ("status",),
                                registry=r)
        self.gpu_allocation = Gauge("elastico_gpu_allocation",
                                    "Booked GPU compute / cluster GPUs after the last round "
                                    "(fraction)", registry=r)
        self.gpu_utilization = Gauge("elastico_gpu_utilization",
                                     "Predicted busy GPU compute (GPUs x SM activity / "
                                     "slowdown) of the jobs with a solo profile / cluster GPUs "
                                     "after the last round (fraction; jobs with none are in "
                                     "elastico_gpu_unknown_allocation)", registry=r)
        self.gpu_unknown_allocation = Gauge(
            "elastico_gpu_unknown_allocation",
            "Booked GPU compute of jobs with no solo profile yet / cluster GPUs after the last "
            "round (fraction): their activity is not known, so not in elastico_gpu_utilization",
            registry=r)
        self.predictor_fallbacks = Counter(
            "elastico_placer_predictor_fallbacks",
            "Placer calls to the predictor answered by the analytic model instead "
            "(predictor unreachable, slow or failing)", registry=r)
        self.rounds_degraded = Counter("elastico_rounds_degraded",
                                       "Scheduling rounds that ran degraded", registry=r)

    def observe_rpc(self, method: str, code: str, seconds: float) -> None:
        """One finished RPC: ``method`` is the full gRPC method name, ``code`` the status name."""
        self.rpc_seconds.labels(self.service, method).observe(seconds)
        self.rpc_total.labels(self.service, method, code).inc()

    def observe_solve(self, seconds: float, gap: float, iterations: int,
                      prices: dict[str, float]) -> None:
        """One pricing solve; ``prices`` maps resource names to shadow prices."""
        self.solve_seconds.observe(seconds)
        self.gap.set(gap)
        self.iterations.set(iterations)
        self._set_prices(prices.items())

    def _set_prices(self, prices) -> None:
        # only this solve's resources: another cluster's names would otherwise stay forever
        self.price.clear()
        for name, value in prices:
            self.price.labels(name).set(float(value))

    def observe_prediction(self, pairs: int, fallback: bool) -> None:
        """One PredictSlowdown batch of ``pairs`` pairs, answered by the fallback or not."""
        self.pairs.inc(pairs)
        if fallback:
            self.fallbacks.inc(pairs)

    def observe_round(self, inp: Any, result: Any,
                      slowdowns: Mapping[str, float] | None = None,
                      unknown: Collection[str] = ()) -> None:
        """One finished round (:func:`elastico.placer.round.run_round`'s ``RoundInput`` and
        ``RoundResult``): duration, jobs by status, GPU allocation and predicted utilization
        (``slowdowns``: job id -> predicted slowdown; None = the result state's own model),
        the shadow prices, and whether it ran degraded.  ``unknown``: ids of the placed jobs
        with no solo profile yet (:func:`elastico.placer.round.unknown_job_ids`): booked at a
        worst case, not at what they do, so they count in ``elastico_gpu_unknown_allocation``
        (their booked compute) and not in ``elastico_gpu_utilization`` (which would otherwise
        report them busy all the time)."""
        self.round_seconds.observe(float(result.phase_seconds.get("round", 0.0)))
        counts: dict[str, int] = {}
        for d in result.decisions.values():
            key = getattr(d.status, "value", str(d.status))
            counts[key] = counts.get(key, 0) + 1
        for status in ("placed", "waiting", "unplaceable", "degraded", "error"):
            self.round_jobs.labels(status).set(counts.get(status, 0))
        gpus = sum(n.num_gpus for n in inp.nodes)
        state = result.state
        if gpus:
            self.gpu_allocation.set(state.used_gpus() / gpus)
            slow = state.predicted_slowdowns() if slowdowns is None else slowdowns
            # every part's GPUs: gpu_indices raises on a job that spans nodes
            unknown = frozenset(unknown)
            busy = held = 0.0
            for a in state.assignments():
                if a.job_id in unknown:
                    held += len(a.gpus) * a.gpu_share
                else:
                    busy += (len(a.gpus) * state.profile(a.job_id).gpu_activity
                             / slow.get(a.job_id, 1.0))
            self.gpu_utilization.set(busy / gpus)
            self.gpu_unknown_allocation.set(held / gpus)
        res = result.pricing
        if res is not None:
            self._set_prices(zip(result.resource_names, res.prices))
            if res.iterations:  # a solve, not the greedy ablation's choice (no prices, no gap)
                self.solve_seconds.observe(float(res.seconds))
                self.gap.set(float(res.gap))
                self.iterations.set(int(res.iterations))
        if result.degraded:
            self.rounds_degraded.inc()

    def observe_predictor_fallback(self, calls: int = 1) -> None:
        """``calls`` predictor calls of the placer answered by the analytic fallback."""
        self.predictor_fallbacks.inc(calls)


#: Outcomes of a scheduler-loop round (``elastico_loop_rounds_total``) and of its pods
#: (``elastico_loop_pods``).
LOOP_ROUND_OUTCOMES = ("completed", "standby", "abandoned", "failed")
LOOP_POD_OUTCOMES = ("reserved", "bound", "held", "waiting", "rejected", "error")
#: Where a scheduler-loop job error happened (``elastico_job_errors_total{stage}``): reading a
#: pod, placing a gang, the round's decision, writing the decision, the Binding, rebuilding a
#: booking.
JOB_ERROR_STAGES = ("pod", "gang", "round", "reserve", "bind", "book", "preempt")


class LoopMetrics(ServiceMetrics):
    """The Kubernetes scheduler loop's metrics: :class:`ServiceMetrics` of the ``placer`` plus
    loop rounds, pods by outcome, binds, bind conflicts, Events and the leader state (module
    docstring).  Its methods take plain values, so this module knows nothing of the loop."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("placer", registry)
        r = self.registry
        self.loop_seconds = Histogram("elastico_loop_round_duration_seconds",
                                      "Wall time of one leader round of the scheduler loop "
                                      "(book, decide, annotate, bind), seconds",
                                      buckets=ROUND_BUCKETS_S, registry=r)
        self.loop_rounds = Counter("elastico_loop_rounds", "Scheduler-loop rounds by outcome",
                                   ("outcome",), registry=r)
        self.loop_pods = Gauge("elastico_loop_pods",
                               "Pods of the last leader round by outcome", ("outcome",),
                               registry=r)
        self.binds = Counter("elastico_binds", "Pods bound through the Binding subresource",
                             registry=r)
        self.bind_conflicts = Counter("elastico_bind_conflicts",
                                      "Bindings answered 409 Conflict", registry=r)
        self.events = Counter("elastico_events", "Kubernetes Events written, by reason",
                              ("reason",), registry=r)
        self.job_errors = Counter("elastico_job_errors",
                                  "Jobs whose handling raised an error in a scheduler-loop "
                                  "round, by stage (the job is skipped that round, the "
                                  "others are scheduled)", ("stage",), registry=r)
        for st in JOB_ERROR_STAGES:
            self.job_errors.labels(st)
        self.mig_switches = Counter("elastico_mig_mode_switches",
                                    "MIG lending's mode changes written to a Node "
                                    "(elastico.io/mig-lending): to='normal' lent, to='mig' "
                                    "returned", ("to",), registry=r)
        for to in ("normal", "mig"):
            self.mig_switches.labels(to)
        self.leader = Gauge("elastico_leader",
                            "1 while this replica holds the Lease (or runs without leader "
                            "election), else 0", registry=r)
        for o in LOOP_ROUND_OUTCOMES:  # every series exists from the start (rate() needs it)
            self.loop_rounds.labels(o)

    def observe_loop_round(self, outcome: str, seconds: float | None = None,
                           pods: Mapping[str, int] | None = None) -> None:
        """One loop round: ``outcome`` (one of :data:`LOOP_ROUND_OUTCOMES`), its wall time
        (leader rounds) and its pods by outcome (``pods``: outcome -> count; None keeps the
        gauge; a missing outcome counts 0)."""
        if outcome not in LOOP_ROUND_OUTCOMES:
            raise ValueError(f"outcome: {outcome!r} is not one of {LOOP_ROUND_OUTCOMES}")
        self.loop_rounds.labels(outcome).inc()
        if seconds is not None:
            self.loop_seconds.observe(seconds)
        if pods is not None:
            for o in LOOP_POD_OUTCOMES:
                self.loop_pods.labels(o).set(pods.get(o, 0))
