"""A scheduling round is one span tree: ``elastico.round`` with the policy's phases as
children (``shapes.generate``, ``pricing.solve`` with the solver's numbers, ``placer.place``),
recorded here by a plain in-memory tracer (no OpenTelemetry needed)."""

from __future__ import annotations

from contextlib import contextmanager

from elastico import trace
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel
from elastico.sim.workload import build_workload


class Recorder:
    """Spans as dicts: name, parent name, attributes (set at start or later)."""

    def __init__(self):
        self.spans, self.stack = [], []

    @contextmanager
    def span(self, name, attributes=None):
        rec = {"name": name, "parent": self.stack[-1]["name"] if self.stack else None,
               "attrs": dict(attributes or {})}
        self.spans.append(rec)
        self.stack.append(rec)

        class S:
            def set_attribute(self, k, v):
                rec["attrs"][k] = v
        try:
            yield S()
        finally:
            self.stack.pop()


def test_every_round_is_one_tree_with_the_solver_numbers():
    nodes = trace.sub_cluster(trace.read_nodes(), 16)
    model = ThroughputModel.bundled()
    wl = build_workload(trace.read_pods(), nodes, model=model, load=None, jobs=24, seed=0)
    rec = Recorder()
    env = PolicyEnv(nodes=nodes, throughput=model, slowdown=AnalyticSlowdown(), tracer=rec)
    policy = make_policy("elastico", env)
    res = simulate(nodes, wl.jobs, policy, activity=lambda j, c: 0.5, tracer=rec)
    rounds = [s for s in rec.spans if s["name"] == "elastico.round"]
    assert rounds and all(s["parent"] is None for s in rounds)
    assert len(rounds) > 1 and res.metrics["jobs_completed"] > 0
    solves = [s for s in rec.spans if s["name"] == "pricing.solve"]
    assert solves and all(s["parent"] == "elastico.round" for s in solves)
    for s in solves:
        a = s["attrs"]
        assert a["pricing.iterations"] >= 1 and 0.0 <= a["pricing.gap"]
        assert any(k.startswith("pricing.price.gpu:") for k in a)
    for name in ("shapes.generate", "placer.place"):
        spans = [s for s in rec.spans if s["name"] == name]
        assert spans and all(s["parent"] == "elastico.round" for s in spans), name
    # the round's decision counts add up to its jobs
    for s in rounds:
        a = s["attrs"]
        assert a["round.placed"] + a["round.waiting"] + a["round.unplaceable"] == a["round.jobs"]
