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
``elastico_pricing_price{resource}`` (last shadow price per resource, utility per unit).
The predictor adds ``elastico_predictor_pairs_total`` and
``elastico_predictor_fallback_total`` (pairs answered by the analytic fallback because no
learned model was available).  The placer's round metrics (round duration, jobs by state, GPU
allocation and utilization) come with the placer service.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ServiceMetrics", "RPC_BUCKETS_S"]

#: Histogram buckets for RPC and solve durations, seconds (1 ms .. 10 s).
RPC_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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
        for name, value in prices.items():
            self.price.labels(name).set(value)

    def observe_prediction(self, pairs: int, fallback: bool) -> None:
        """One PredictSlowdown batch of ``pairs`` pairs, answered by the fallback or not."""
        self.pairs.inc(pairs)
        if fallback:
            self.fallbacks.inc(pairs)
