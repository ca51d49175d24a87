"""The load sweep walked upward (elastico.sim.evaluate.SweepLadder; docs/metrics.md,
"Sustainable load"): each (cluster, policy, seed) runs its next load only while its backlog
stayed bounded, and the sustainable loads of the runs it makes -- per seed and over all
seeds -- equal those of the full grid.  The runs are fakes whose bounded/growing answers are
set by hand; nothing is simulated (but in the last test, which replays two short runs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from elastico.sim.clusters import load_cluster
from elastico.sim.evaluate import (RunOutput, Settings, SweepLadder, run_tasks, sustainable_loads,
                                   sustainable_loads_by_seed, sweep_tasks, tasks_for)

LOADS = [0.25, 0.5, 0.75, 1.0]
SEEDS = [0, 1]
# per policy: bounded? at each load of LOADS, per seed (True = bounded)
PATTERN = {
    # bounded up to 0.5, grows at 0.75 on seed 1 only, and at 1.0 on both: seed 0 sustains
    # 0.75, seed 1 0.5, every seed 0.5; seed 1 never runs 1.0
    "exclusive": {0.25: (True, True), 0.5: (True, True), 0.75: (True, False),
                  1.0: (False, False)},
    # bounded everywhere: sustainable 1.0 (the grid's top), every load run
    "elastico": {x: (True, True) for x in LOADS},
    # grows already at the lowest load on seed 0 (0.0, only 0.25 run), never on seed 1 (1.0)
    "gavel": {0.25: (False, True), 0.5: (True, True), 0.75: (True, True), 1.0: (True, True)},
    # not monotone on seed 0: grows at 0.5 but is bounded again above.  The definition needs
    # every lower load bounded, so seed 0's answer is 0.25, and its walk stops at 0.5
    "fgd": {0.25: (True, True), 0.5: (False, True), 0.75: (True, True), 1.0: (True, True)},
}
SPEC = load_cluster("trace")
SETTINGS = Settings(arrivals="continuous", load=0.5)
# by hand from PATTERN
BY_SEED = {("trace-64", "exclusive"): {0: 0.75, 1: 0.5}, ("trace-64", "elastico"): {0: 1.0, 1: 1.0},
           ("trace-64", "gavel"): {0: 0.0, 1: 1.0}, ("trace-64", "fgd"): {0: 0.25, 1: 1.0}}
POOLED = {("trace-64", "exclusive"): 0.5, ("trace-64", "elastico"): 1.0,
          ("trace-64", "gavel"): 0.0, ("trace-64", "fgd"): 0.25}


def fake_run(task) -> RunOutput:
    ok = PATTERN[task.policy][float(task.settings.load)][task.seed]
    return RunOutput({"cluster": task.cluster, "policy": task.policy, "seed": task.seed,
                      "load_target": task.settings.load, "backlog_bounded": ok,
                      "queue_growth": 0.0 if ok else 50.0}, [], {})


def grid():
    return sweep_tasks([SPEC], [64], list(PATTERN), SEEDS, LOADS, SETTINGS)


def walk(ladder: SweepLadder, first, order=lambda q: q.pop(0)) -> list:
    """Drive ``ladder`` by hand: run what it asks for, in ``order``; return what ran."""
    queue, ran = list(first), []
    while queue:
        t = order(queue)
        ran.append(t)
        queue += ladder.done(t, fake_run(t))
    return ran


def test_the_full_grids_sustainable_loads_are_those_worked_by_hand():
    full = [fake_run(t).run for t in grid()]
    assert sustainable_loads_by_seed(full) == BY_SEED
    assert sustainable_loads(full) == POOLED
    # every seed's: the least of the seeds'
    assert {k: min(v.values()) for k, v in BY_SEED.items()} == POOLED


def test_the_ladder_gives_the_full_grids_sustainable_loads_with_fewer_runs():
    for order in (lambda q: q.pop(0), lambda q: q.pop()):  # FIFO and LIFO
        ladder = SweepLadder(grid())
        ran = walk(ladder, ladder.start(), order)
        assert sustainable_loads(ladder.runs()) == POOLED
        assert sustainable_loads_by_seed(ladder.runs()) == BY_SEED
        by = {}
        for t in ran:
            by.setdefault((t.policy, t.seed), set()).add(float(t.settings.load))
        # each seed walks up to its first growing load
        assert by == {("exclusive", 0): set(LOADS), ("exclusive", 1): {0.25, 0.5, 0.75},
                      ("elastico", 0): set(LOADS), ("elastico", 1): set(LOADS),
                      ("gavel", 0): {0.25}, ("gavel", 1): set(LOADS),
                      ("fgd", 0): {0.25, 0.5}, ("fgd", 1): set(LOADS)}
        assert len(ran) == 4 + 3 + 8 + 1 + 4 + 2 + 4 and len(set(ran)) == len(ran)
        assert {(t.policy, t.seed, float(t.settings.load)) for t in ladder.skipped()} == {
            ("exclusive", 1, 1.0), ("gavel", 0, 0.5), ("gavel", 0, 0.75), ("gavel", 0, 1.0),
            ("fgd", 0, 0.75), ("fgd", 0, 1.0)}
        # runs() keeps the grid's order
        assert ladder.runs() == [fake_run(t).run for t in grid() if t in set(ran)]


def test_a_sweep_point_that_is_a_main_run_is_taken_from_it_not_run_again():
    main = tasks_for([SPEC], [64], list(PATTERN), [0], SETTINGS)  # load 0.5, seed 0
    ladder = SweepLadder(grid(), main)
    first = ladder.start()
    assert all(float(t.settings.load) == 0.25 for t in first)
    # the sweep's loads 0.25 finish first; the main runs later (in the pool they run together)
    ran = walk(ladder, first)
    assert not any(t in set(main) for t in ran)
    # seed 0's 0.75 waits for its main run at 0.5; seed 1 has no main run to wait for
    assert all(float(t.settings.load) <= 0.5 for t in ran if t.seed == 0)
    assert any(float(t.settings.load) == 1.0 for t in ran if t.seed == 1)
    more = []
    for t in main:
        more += ladder.done(t, fake_run(t))
    ran += walk(ladder, more)
    assert sustainable_loads(ladder.runs()) == POOLED
    assert sustainable_loads_by_seed(ladder.runs()) == BY_SEED
    assert not any(t in set(main) for t in ran)
    # the main runs are the sweep's seed-0 points at 0.5 (one run, one result), gavel's too,
    # although its seed-0 walk stopped at 0.25: a measured point is kept
    assert {(r["policy"], r["seed"]) for r in ladder.runs() if r["load_target"] == 0.5} == {
        (p, s) for p in PATTERN for s in SEEDS}


def test_run_tasks_runs_what_then_adds_once_each(monkeypatch):
    import elastico.sim.evaluate as ev

    monkeypatch.setattr(ev, "run_one", fake_run)
    main = tasks_for([SPEC], [64], list(PATTERN), [0], SETTINGS)
    ladder = SweepLadder(grid(), main)
    seen = []
    done = run_tasks(main + ladder.start(), workers=1, then=ladder.done,
                     priority=ladder.priority,
                     progress=lambda n, total, t, out: seen.append((n, total, t)))
    # every sweep point not skipped ran once: as a main run (seed 0 at 0.5) or as itself
    skipped = set(ladder.skipped())
    as_main = {t for t in grid()
               if replace(t, settings=replace(t.settings, stop_at_window_end=False)) in main}
    assert len(as_main) == len(PATTERN)
    assert set(done) == set(main) | {t for t in grid() if t not in skipped and t not in as_main}
    assert [n for n, _, _ in seen] == list(range(1, len(done) + 1))
    assert sustainable_loads(ladder.runs()) == POOLED
    assert sustainable_loads_by_seed(ladder.runs()) == BY_SEED
    # the longest first: a load-1.0 elastico run costs more than a load-0.25 one
    hi = replace(main[0], policy="elastico", settings=replace(SETTINGS, load=1.0))
    lo = replace(hi, settings=replace(SETTINGS, load=0.25))
    assert hi.cost() > lo.cost()
    with pytest.raises(ValueError):
        run_tasks([main[0], main[0]], workers=1)


def test_runs_that_unlock_higher_loads_come_first():
    # a load-0.25 run waits for nothing and unlocks its ladder's 0.75 and 1.0 runs: it ranks
    # above a main run of equal or larger own cost that unlocks nothing
    main = tasks_for([SPEC], [64], list(PATTERN), [0, 2], SETTINGS)  # load 0.5
    ladder = SweepLadder(grid(), main)
    assert ladder.most_runs() == len(grid()) - len(PATTERN)  # seed 0 at 0.5 is a main run
    low = [t for t in ladder.start() if t.policy == "exclusive" and t.seed == 0][0]
    seed2 = [m for m in main if m.policy == "exclusive" and m.seed == 2][0]  # no sweep seed
    seed0 = [m for m in main if m.policy == "exclusive" and m.seed == 0][0]
    # costs by hand (Task.cost: GPUs x jobs per GPU x load^2): 64 x 4 x 0.25^2 = 16 for the
    # 0.25 run, 64 for a 0.5 run, 144 at 0.75, 256 at 1.0; above seed 0's 0.25 run: its 0.5
    # is a main run (not the sweep's to run), then 0.75 and 1.0
    assert low.cost() == 16 and seed2.cost() == 64
    assert ladder.priority(low) == 16 + 144 + 256
    assert ladder.priority(seed2) == seed2.cost() == 64
    # the seed-0 main run is the sweep's 0.5 point: it unlocks 0.75 and 1.0 too
    assert ladder.priority(seed0) == 64 + 144 + 256


def test_the_default_sweep_runs_at_the_smallest_cluster_size_and_any_size_on_request():
    import argparse

    from elastico.cli.evaluate import DEFAULT_SWEEP_GPUS, DEFAULT_SWEEP_SEEDS, parse_sweep

    args = argparse.Namespace(sweep_loads="0.25,0.5,0.75,1", sweep_seeds=DEFAULT_SWEEP_SEEDS,
                              sweep_gpus=DEFAULT_SWEEP_GPUS)
    loads, seeds, sizes = parse_sweep(args, SETTINGS, [512, 64])
    assert loads == [0.25, 0.5, 0.75, 1.0] and sizes == [64]
    args.sweep_gpus = "64,512"
    assert parse_sweep(args, SETTINGS, [64, 512])[2] == [64, 512]


def test_a_sweep_run_stopped_at_the_window_end_has_the_full_replays_backlog_test():
    # the load sweep's runs stop at the end of the measurement window: every field the
    # backlog test and the windowed metrics read is the full replay's, number for number;
    # the fields that need the drain are null, not biased
    from elastico.sim.evaluate import AFTER_WINDOW_KEYS, run_one

    wall = ("wall_s", "round_ms_p50", "round_ms_p99")
    for policy in ("exclusive", "elastico"):
        cut = sweep_tasks([SPEC], [16], [policy], [0], [1.5], SETTINGS)[0]
        assert cut.settings.stop_at_window_end
        full = replace(cut, settings=replace(cut.settings, stop_at_window_end=False))
        a, b = run_one(full).run, run_one(cut).run
        assert not b["backlog_bounded"] and b["queue_growth"] > 1  # overloaded: it grew
        assert b.pop("stopped_at_window_end") is True and "stopped_at_window_end" not in a
        for k in AFTER_WINDOW_KEYS:  # (a policy without profiles has no unknown_* fields)
            assert (k in a) == (k in b)
            if k in a:
                assert b.pop(k) is None and a.pop(k) is not None
        assert {"avg_jct_s", "unknown_run_s"} <= set(AFTER_WINDOW_KEYS)
        for k in wall:
            a.pop(k), b.pop(k)
        assert a == b
