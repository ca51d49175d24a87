"""The round's memo of failed shapes (elastico.placer.placement.FailedShapes,
services/placer/placement/failed.py): its remembered
answers -- first_dominated, refusal, refused_all -- are those of a fresh scan of the failed
list, however the questions repeat and the list grows between them; and place_fixed_shape
gives a queue of jobs with one request the reasons it gave before the memo."""

from __future__ import annotations

import random

import pytest

from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState, FailedShapes, dominates
from elastico.placer.policies import PolicyEnv
from elastico.placer.policies.common import JobCatalog, place_fixed_shape
from elastico.placer.round import ActiveJob
from elastico.predictor import AnalyticSlowdown
from elastico.perf.throughput import ThroughputModel


def _pool(rng: random.Random, n: int) -> list[Configuration]:
    out = []
    for _ in range(n):
        model = rng.choice(["V100M16", "A100"])
        out.append(Configuration("s", model, rng.randint(1, 4), rng.choice([0.25, 0.5, 1.0]),
                                 rng.choice([4.0, 16.0]), rng.choice([1.0, 4.0]),
                                 rng.choice([2.0, 8.0]), 1.0))
    return out


def _message(f: Configuration, why: str) -> str:
    # the words place_unless_dominated used before refusal() existed
    return (f"no room: a smaller or equal shape ({f.num_gpus} x {f.gpu_share:g} {f.gpu_model}) "
            f"already failed this round" + (f" ({why})" if why else ""))


@pytest.mark.parametrize("seed", range(5))
def test_repeated_questions_answer_like_a_fresh_scan_as_the_list_grows(seed):
    rng = random.Random(seed)
    pool = _pool(rng, 25)  # few distinct shapes, asked again and again (a queue)
    failed = FailedShapes()
    plain: list[Configuration] = []
    reasons: dict[Configuration, str] = {}
    for step in range(600):
        # equal but distinct objects too: the memo is by value
        c = rng.choice(pool)
        if rng.random() < 0.5:
            c = Configuration(*(getattr(c, k) for k in (
                "name", "gpu_model", "num_gpus", "gpu_share", "gpu_mem_gib", "cpu", "mem_gib",
                "throughput", "mig_profile")))
        scan = next((f for f in plain if dominates(c, f)), None)
        assert failed.first_dominated(c) is scan
        assert failed.refusal(c) == (None if scan is None else
                                     _message(scan, reasons.get(scan, "")))
        if rng.random() < 0.1:
            why = rng.choice(["", f"no node {step}"])
            failed.append(c, why)
            plain.append(c)
            if why:
                reasons.setdefault(c, why)


def test_refused_all_holds_only_for_the_same_tuple_and_an_unchanged_list():
    a = Configuration("a", "V100M16", 1, 1.0, 16.0, 1.0, 2.0, 1.0)
    b = Configuration("b", "A100", 1, 1.0, 16.0, 1.0, 2.0, 1.0)
    failed = FailedShapes([a])
    shapes = (a,)
    assert failed.refused_all(shapes) is None  # nothing noted
    failed.note_refused_all(shapes, "why")
    assert failed.refused_all(shapes) == "why"
    assert failed.refused_all((a,)) is None  # an equal tuple, not this one
    failed.append(b, "full")
    assert failed.refused_all(shapes) is None  # the list grew: ask again


def test_a_queue_with_one_request_gets_the_reasons_it_gets_without_the_memo(monkeypatch):
    # one 2-GPU node, filled by two whole-GPU jobs; five more with the same request wait.
    # Each waiting job's reason is the one place_fixed_shape gives it when every job asks
    # the failed list afresh (refused_all never answers) -- the memo only skips the work
    node = Node("n0", "V100M16", 2, 16.0, 64.0, 256.0)
    env = PolicyEnv(nodes=[node], throughput=ThroughputModel.bundled(),
                    slowdown=AnalyticSlowdown(), restart_s=0.0)
    jobs = [Job(f"j{i}", JobKind.TRAINING, float(i), 100.0, Request(1, 1.0, 1.0, 2.0),
                job_type="ResNet-50 (batch size 64)") for i in range(7)]

    def round_of(upto: int) -> list:
        catalog, state, failed = JobCatalog(env), ClusterState([node]), FailedShapes()
        return [place_fixed_shape(catalog, state, ActiveJob(j), whole_gpus=True,
                                  scorer="bestfit", failed=failed) for j in jobs[:upto]]

    together = round_of(len(jobs))
    assert [d.status.value for d in together] == ["placed"] * 2 + ["waiting"] * 5
    catalog = JobCatalog(env)
    assert catalog.requested(jobs[2], True) is catalog.requested(jobs[3], True)  # one tuple
    calls = []
    real = FailedShapes.refused_all
    monkeypatch.setattr(FailedShapes, "refused_all",
                        lambda self, shapes: calls.append(real(self, shapes)))
    afresh = round_of(len(jobs))
    assert sum(c is not None for c in calls) == 3  # the memo would have answered j4..j6
    assert [(d.status, d.config, d.assignment, d.reason) for d in together] == [
        (d.status, d.config, d.assignment, d.reason) for d in afresh]
    assert together[2].reason.startswith("no node with")  # the search's own words
    assert together[3].reason.startswith("no room: a smaller or equal shape")


def test_elastico_round_shortcuts_change_no_decision(monkeypatch):
    # an overloaded replay (8 GPUs at load 4: a long queue) under elastico, decisions recorded
    # round by round, once as is and once with the backfill's shortcuts disarmed: every job's
    # family number made unique, so no family is "shut" and no waiting reason is reused (the
    # FIFO identity stays: it decides, it is not a shortcut)
    import itertools

    import elastico.sim.simulator as sim
    from elastico.placer.policies.pipeline import JobKeys
    from elastico.sim.clusters import load_cluster
    from elastico.sim.evaluate import Settings, Task, run_one

    task = Task(load_cluster("trace"), 8, "elastico", 0,
                Settings(arrivals="continuous", load=4.0, stop_at_window_end=True))

    real = sim.run_round

    def replay():
        seen = []

        def spy(policy, inp, **kw):
            res = real(policy, inp, **kw)
            seen.append(sorted((j, d.status.value, d.config, d.assignment, d.reason, d.changed)
                               for j, d in res.decisions.items()))
            return res

        monkeypatch.setattr(sim, "run_round", spy)
        return run_one(task).run, seen

    run_a, rounds_a = replay()
    fresh = itertools.count(10 ** 9)
    real_keys = JobKeys.of
    monkeypatch.setattr(JobKeys, "of",
                        lambda self, job, fam: (next(fresh), real_keys(self, job, fam)[1]))
    run_b, rounds_b = replay()
    assert not run_a["backlog_bounded"]  # a queue to shortcut
    assert rounds_a == rounds_b
    for k in ("wall_s", "round_ms_p50", "round_ms_p99"):
        run_a.pop(k), run_b.pop(k)
    assert run_a == run_b
