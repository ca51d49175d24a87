"""The caches behind the 512-GPU load sweep's speed (issue 19) answer as the plain computation.

* :meth:`JobCatalog.slot_of` (``profile_slot`` cached per configuration object) equals
  :func:`profile_slot` for every configuration, also for configurations made and dropped one
  after the other (an id reused by a new object must not hit the old entry);
* :meth:`JobCatalog.is_unknown` with the cache equals the definition (unknown, and the slot not
  among the known ones) over random sequences of arrivals, solo profiles and forgets;
* the simulator's loops over the jobs with a configuration (``running``) instead of every live
  job keep every live job without one off the profiling clock (``validate=True`` checks it after
  every round), on random small workloads with unknown profiles.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.perf.throughput import ThroughputModel
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.common import ANY_SLOT, profile_slot
from elastico.predictor import AnalyticSlowdown
from elastico.sim.simulator import simulate

MODEL = ThroughputModel.bundled()
JT = "ResNet-50 (batch size 64)"
NODES = [Node("g2", "G2", 2, 16.0, 32.0, 128.0), Node("v", "V100M32", 2, 16.0, 32.0, 128.0)]
MODELS = ("G2", "V100M32", "A100-40GB")
MIG = (None, None, "1g.5gb", "3g.20gb")


def _catalog():
    return make_policy("elastico", PolicyEnv(nodes=NODES, throughput=MODEL,
                                             slowdown=AnalyticSlowdown())).catalog


configs = st.builds(
    lambda m, share, mig: Configuration(f"c-{m}-{share}-{mig}", m, 1, share, 8.0, 1.0, 2.0,
                                        1.0, mig_profile=mig),
    st.sampled_from(MODELS), st.sampled_from((0.0, 0.25, 0.3333333, 0.5, 0.75, 1.0)),
    st.sampled_from(MIG))


@given(st.lists(configs, min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_slot_of_is_profile_slot_also_for_objects_made_and_dropped_in_turn(cs):
    cat = _catalog()
    for c in cs:
        # a fresh copy each time, the previous one dropped: its id may be reused
        fresh = dataclasses.replace(c)
        assert cat.slot_of(fresh) == profile_slot(fresh)
        del fresh
    for c in cs:  # the same objects twice: cached answers
        assert cat.slot_of(c) == profile_slot(c) == cat.slot_of(c)


ops = st.lists(st.tuples(st.sampled_from(("arrive", "profile", "forget", "any")),
                         st.integers(0, 3), st.integers(0, 7)), max_size=60)


@given(ops, st.lists(configs, min_size=8, max_size=8))
@settings(max_examples=80, deadline=None)
def test_is_unknown_equals_its_definition_over_random_events(events, cs):
    cat = _catalog()
    unknown: set[str] = set()
    known: dict[str, set] = {}
    for what, j, k in events:
        jid = f"j{j}"
        if what == "arrive":
            cat.unknown.add(jid)
            unknown.add(jid)
        elif what == "profile":
            cat.mark_profiled(jid, cs[k], (0.5, 0.2))
            known.setdefault(jid, set()).add(profile_slot(cs[k]))
        elif what == "any":  # an older predictor's per-job answer
            cat.known.setdefault(jid, set()).add(ANY_SLOT)
            known.setdefault(jid, set()).add(ANY_SLOT)
        else:
            cat.forget(jid)
            unknown.discard(jid)
            known.pop(jid, None)
        for i in range(4):
            q = f"j{i}"
            for c in cs:
                want = q in unknown and (not known.get(q) or (
                    ANY_SLOT not in known[q] and profile_slot(c) not in known[q]))
                assert cat.is_unknown(q, c) == want
            assert cat.is_unknown(q) == (q in unknown and not known.get(q))


def _jobs(spec):
    out = []
    for i, (arrival, work, gpus, share) in enumerate(spec):
        out.append(Job(f"j{i}", JobKind.TRAINING, float(arrival), float(work),
                       Request(gpus, share if gpus == 1 else 1.0, 1.0, 2.0), job_type=JT,
                       reshape=True))
    return out


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(20, 900), st.sampled_from((1, 2)),
                          st.sampled_from((0.25, 0.5, 1.0))), min_size=1, max_size=14))
@settings(max_examples=15, deadline=None)
def test_profiling_clock_only_runs_for_jobs_with_a_configuration(spec):
    jobs = _jobs(spec)
    pol = make_policy("elastico", PolicyEnv(nodes=NODES, throughput=MODEL,
                                            slowdown=AnalyticSlowdown()))
    res = simulate(NODES, jobs, pol, activity=lambda j, c: 0.5, validate=True,
                   unknown_profiles=True)
    by = {r.job_id: r for r in res.records}
    for j in jobs:  # every job finishes, with its work done, as without the fast paths
        r = by[j.id]
        assert r.status == "finished"
        assert abs(r.progress - j.work) <= 1e-6 * j.work
        # a recorded solo profile needs a run alone of the profiling window (60 s)
        if r.profiled_s is not None:
            assert r.first_start_s is not None and r.profiled_s >= r.first_start_s + 60.0 - 1e-6
