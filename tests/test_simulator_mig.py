"""MIG in the simulator: instances of one GPU never slow each other (the ground truth is not
consulted for MIG GPUs), a service's recorded slowdown counts a slice slower than it asked
for, MIG mode applies only under MIG-aware policies, and ``elastico`` puts fractional
services on MIG slices without a bound violation."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.model import MIG_GPUS_LABEL
from elastico.model import Job, JobKind, Node, Request
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.common import JobCatalog
from elastico.placer.round import Decision, RoundResult, Status
from elastico.predictor import AnalyticSlowdown
from elastico.shapes import mig_configurations
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
R50 = "ResNet-50 (batch size 64)"
TR = "Transformer (batch size 128)"


def a100(name="n0", gpus=1, mig=0):
    labels = ((MIG_GPUS_LABEL, str(mig)),) if mig else ()
    return Node(name, "A100-40GB", gpus, 40.0, 64.0, 512.0, labels)


def job(i, work, *, kind=JobKind.TRAINING, share=1.0, jt=R50, arrival=0.0, bound=None):
    return Job(f"j{i}", kind, arrival, work, Request(1, share, 1.0, 2.0), job_type=jt,
               slowdown_bound=bound or (1.1 if kind is JobKind.SERVICE else 1.5))


class Harsh:
    """Ground truth that triples the step time of every job sharing a GPU."""

    def pair_slowdown(self, a, b):
        return 3.0

    def gpu_slowdowns(self, residents):
        return np.full(len(residents), 3.0 if len(residents) > 1 else 1.0)


class Fixed:
    """Places each job on the configuration given for it (once), nothing else."""

    name = "fixed"

    def __init__(self, nodes, configs, uses_mig=True):
        self.catalog = JobCatalog(PolicyEnv(nodes=nodes, throughput=MODEL,
                                            slowdown=AnalyticSlowdown()))
        self.configs = configs
        self.uses_mig = uses_mig

    def __call__(self, inp, state):
        out = {}
        for a in inp.jobs:
            if a.running:
                out[a.job.id] = Decision(a.job.id, Status.PLACED, a.config,
                                         state.assignment(a.job.id))
                continue
            c = self.configs[a.job.id]
            got = state.place(a.job.id, c, self.catalog.profile(a.job, c), a.job.slowdown_bound,
                              AnalyticSlowdown())
            assert got.assignment is not None, got.reason
            out[a.job.id] = Decision(a.job.id, Status.PLACED, c, got.assignment, changed=True)
        return RoundResult(out, state)


def _run(nodes, jobs, policy, truth=None):
    return simulate(nodes, jobs, policy, restart_s=30.0, truth=truth, validate=True,
                    activity=lambda j, c: policy.catalog.profile(j, c).gpu_activity)


def _mig(j, profile):
    return next(c for c in mig_configurations(j, "A100-40GB", 40.0, MODEL)
                if c.mig_profile == profile)


def test_instances_of_one_gpu_run_at_their_solo_mig_speed():
    a, b = job(0, 100.0, jt=R50), job(1, 100.0, jt=TR)
    ca, cb = _mig(a, "3g.20gb"), _mig(b, "4g.20gb")
    nodes = [a100(mig=1)]
    res = _run(nodes, [a, b], Fixed(nodes, {"j0": ca, "j1": cb}), truth=Harsh())
    fin = {r.job_id: r.finish_s for r in res.records}
    # both on the one GPU, each at its MIG throughput: work / throughput, no interference
    assert fin["j0"] == pytest.approx(100.0 / ca.throughput)
    assert fin["j1"] == pytest.approx(100.0 / cb.throughput)
    assert all(r.max_slowdown == 1.0 for r in res.records)
    # the same shares under MPS on a normal GPU: the harsh truth applies (3x while together;
    # loose bounds so the placer's own prediction admits the pair)
    a, b = job(0, 100.0, jt=R50, bound=5.0), job(1, 100.0, jt=TR, bound=5.0)
    mps = {"j0": ca.__class__(**{**ca.__dict__, "mig_profile": None, "gpu_mem_gib": 16.0}),
           "j1": cb.__class__(**{**cb.__dict__, "mig_profile": None, "gpu_mem_gib": 16.0})}
    nodes = [a100()]
    res = _run(nodes, [a, b], Fixed(nodes, mps), truth=Harsh())
    assert max(r.max_slowdown for r in res.records) == 3.0
    first = min(r.finish_s for r in res.records)
    assert first == pytest.approx(3.0 * 100.0 / max(ca.throughput, cb.throughput))


def test_service_on_a_slower_slice_counts_against_its_bound():
    # a 0.47-GPU ResNet-50 service asks for 1/(p/0.47 + 1 - p) = 0.756 of an A100's speed;
    # 2g.10gb gives MISO's 0.678: slowdown 0.756 / 0.678 = 1.114 > 1.1 -> a violation.
    # 3g.20gb gives 0.891 (faster than asked): its slowdown stays 1.0.
    svc = job(0, 1e6, kind=JobKind.SERVICE, share=0.47)
    batch = job(1, 50.0, jt=TR)
    p = MODEL.parallel_fraction(R50)
    asked = 1.0 / (p / 0.47 + 1.0 - p)
    slow2g = asked / (MODEL.mig(R50, "2g.10gb") / MODEL.solo(R50, "A100-40GB"))
    assert slow2g == pytest.approx(1.114, abs=1e-3)
    c2 = _mig(job(9, 1.0, share=0.47), "2g.10gb")  # not offered to a service: built as batch
    c2 = c2.__class__(**{**c2.__dict__, "throughput": MODEL.mig(R50, "2g.10gb", "A100-40GB")
                         / MODEL.solo(R50, "V100M16", 1, 0.47)})
    nodes = [a100(mig=1)]
    cb = _mig(batch, "4g.20gb")
    res = _run(nodes, [svc, batch], Fixed(nodes, {"j0": c2, "j1": cb}))
    rec = {r.job_id: r for r in res.records}
    assert rec["j0"].max_slowdown == pytest.approx(slow2g)
    assert res.metrics["service_bound_violations"] == 1
    res = _run(nodes, [svc, batch], Fixed(nodes, {"j0": _mig(svc, "3g.20gb"), "j1": cb}))
    assert res.metrics["service_bound_violations"] == 0
    assert {r.job_id: r for r in res.records}["j0"].max_slowdown == 1.0


def test_mig_mode_only_under_mig_aware_policies():
    # one labelled GPU: exclusive (MIG-unaware) sees it in normal mode and runs a whole-GPU
    # job on it; a MIG-aware policy gets it in MIG mode, where only MIG instances fit
    nodes = [a100(mig=1)]
    j = job(0, 100.0)
    res = _run(nodes, [j], make_policy("exclusive", PolicyEnv(
        nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())))
    assert res.metrics["jobs_completed"] == 1
    whole = Fixed(nodes, {}).catalog.requested(j, False)[0]
    with pytest.raises(AssertionError, match="MPS"):
        _run(nodes, [j], Fixed(nodes, {"j0": whole}))


def test_elastico_puts_fractional_services_on_mig_within_their_bound():
    # one MIG-mode A100-40GB and one normal one.  Two 0.47-GPU services fit one MIG GPU
    # (3g.20gb each: 6 of 7 SM slices, 8 of 8 memory slices); a third waits for a slice or the
    # normal GPU.  The harsh truth would break any co-located service's bound under MPS.
    nodes = [a100("mig", 1, mig=1), a100("mps", 1)]
    jobs = [job(i, 1e6, kind=JobKind.SERVICE, share=0.47, arrival=float(i)) for i in range(3)]
    jobs.append(job(9, 500.0, jt=TR, arrival=5.0))
    env = PolicyEnv(nodes=nodes, throughput=MODEL, slowdown=AnalyticSlowdown())
    pol = make_policy("elastico", env)
    seen: dict[str, str | None] = {}
    inner = pol.__call__

    class Spy:
        name, uses_mig, catalog = pol.name, pol.uses_mig, pol.catalog

        def __call__(self, inp, state):
            r = inner(inp, state)
            for jid, d in r.decisions.items():
                if d.config is not None and d.changed:
                    seen.setdefault(jid, d.config.mig_profile)
            return r

        def forget(self, jid):
            pol.forget(jid)

    res = _run(nodes, jobs, Spy(), truth=Harsh())
    assert seen["j0"] == seen["j1"] == "3g.20gb"
    assert seen["j2"] is None  # the MIG GPU is full: whole normal GPU
    assert res.metrics["service_bound_violations"] == 0
    assert res.metrics["services_never_placed"] == 0 and res.metrics["jobs_completed"] == 1
    # elastico-no-rst: requested shapes only, so no MIG mode: the services queue for GPUs
    nr = make_policy("elastico-no-rst", env)
    assert nr.uses_mig is False


def test_changing_profile_costs_a_restart():
    # j0 runs on 3g.20gb from 0; at the arrival of j1 (t = 10) the policy moves it to 4g.20gb:
    # no progress for restart_s = 30, then the 4g speed.  finish = 10 + 30 + (W - 10 x3) / x4
    a = job(0, 1000.0)
    b = job(1, 50.0, kind=JobKind.INFERENCE, share=0.22, arrival=10.0)
    c3, c4, cb = _mig(a, "3g.20gb"), _mig(a, "4g.20gb"), _mig(b, "1g.5gb")
    nodes = [a100(mig=1)]

    class Switch(Fixed):
        def __call__(self, inp, state):
            if inp.now < 10.0 or not any(x.running for x in inp.jobs):
                return super().__call__(inp, state)
            out = {}
            for x in inp.jobs:
                if x.job.id == "j0" and x.config == c3:
                    state.release("j0")
                    got = state.place("j0", c4, self.catalog.profile(x.job, c4), 1.5,
                                      AnalyticSlowdown())
                    out["j0"] = Decision("j0", Status.PLACED, c4, got.assignment, changed=True)
            rest = super().__call__(
                type(inp)(inp.now, inp.nodes, state, [x for x in inp.jobs if x.job.id not in out]),
                state)
            return RoundResult({**rest.decisions, **out}, state)

    res = _run(nodes, [a, b], Switch(nodes, {"j0": c3, "j1": cb}))
    rec = {r.job_id: r for r in res.records}
    assert rec["j0"].restarts == 1
    assert rec["j0"].finish_s == pytest.approx(10.0 + 30.0 + (1000.0 - 10.0 * c3.throughput)
                                               / c4.throughput)
