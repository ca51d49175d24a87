"""Issue 19, findings 5, 6 and 8: the baselines share GPUs as their mechanism does, the
elastico policy plans without the true remaining work, and RST's ablation comes in parts.

Expected values are worked out here by hand from the model's documented formulas
(docs/model.md, "Sharing mechanisms", "Remaining work", "Ablations")."""

from __future__ import annotations

import zlib

import pytest

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.placer.placement import ClusterState
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.policies.remaining import RemainingEstimator
from elastico.placer.round import ActiveJob, RoundInput, run_round
from elastico.predictor import JobProfile, NoInterference
from elastico.predictor.learned import MeasuredSlowdown
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel

TM = ThroughputModel.bundled()
T = "ResNet-50 (batch size 64)"
W = 1000.0  # seconds of work at normalized throughput 1.0


def _node(name: str, model: str, gpus: int = 1, labels=()) -> Node:
    return Node(name, model, gpus, 16.0, 32.0, 128.0, labels=tuple(labels))


def _job(jid: str, share: float = 0.5, work: float = W, gpus: int = 1, **kw) -> Job:
    return Job(jid, JobKind.TRAINING, 0.0, work, Request(gpus, share, 2.0, 8.0), job_type=T,
               **kw)


def _run(policy_name: str, nodes, jobs, truth):
    env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference())
    policy = make_policy(policy_name, env)
    res = simulate(nodes, jobs, policy, activity=lambda j, c: 0.5, truth=truth, restart_s=0.0)
    return {r.job_id: r for r in res.records}


def _amdahl_speed(share: float) -> float:
    """share_speed by hand: 1 / (p/s + 1 - p), p = the job type's Amdahl parallel fraction."""
    p = TM.parallel_fraction(T)
    return 1.0 / (p / share + 1.0 - p)


# ---------------------------------------------------------------- finding 5: time-slicing
@pytest.mark.parametrize("policy", ["time-slicing", "fgd"])
def test_lone_time_sliced_pod_runs_at_the_whole_gpus_speed(policy):
    # normalized 1.0 = the requested 0.5 share on a V100; time-slicing enforces no share, so
    # alone the pod runs at the whole V100: 1 / share_speed(0.5) = 1 + p
    recs = _run(policy, [_node("v", "V100M16")], [_job("a")], MeasuredSlowdown({}))
    assert recs["a"].status == "finished"
    assert recs["a"].finish_s == pytest.approx(W * _amdahl_speed(0.5), rel=1e-9)


@pytest.mark.parametrize("pair,total", [(1.6, 1.6), (2.4, 2.0)])
def test_two_time_sliced_pods_progress_at_whole_gpu_over_measured_pair_slowdown(pair, total):
    # the measured pair slowdown is the total effect relative to the whole GPU (not on top of
    # the 0.5 cap), at most k = 2 (round-robin: each context gets its turn)
    truth = MeasuredSlowdown({("V100M16", T, T): pair})
    recs = _run("time-slicing", [_node("v", "V100M16")], [_job("a"), _job("b")], truth)
    rate = (1.0 / _amdahl_speed(0.5)) / total
    for j in "ab":
        assert recs[j].finish_s == pytest.approx(W / rate, rel=1e-9)
    # original code: 0.5-share speed / (1 + (pair - 1) x share_speed(0.5)) -- not this


def _profile(model: str) -> JobProfile:
    return JobProfile(job_type=T, kind="training", gpu_activity=0.5, gpu_model=model)


def test_v100_pair_slowdown_is_not_applied_on_a_t4():
    truth = MeasuredSlowdown({("V100M16", T, T): 1.6})
    assert list(truth.gpu_slowdowns([_profile("V100M16")] * 2)) == pytest.approx([1.6, 1.6])
    assert list(truth.gpu_slowdowns([_profile("V100M32")] * 2)) == pytest.approx([1.6, 1.6])
    # no pair was measured on a T4 (or G2, A100, ...): the V100 value is not carried over
    for m in ("T4", "G2", "A100-40GB"):
        assert list(truth.gpu_slowdowns([_profile(m)] * 2)) == [1.0, 1.0]
        assert not truth.measured_on(m)


def test_time_sliced_pair_on_a_t4_gets_the_round_robin_share():
    # two 0.5 pods on one T4 under time-slicing, no T4 measurement: each gets half of the
    # whole T4 (k = 2), whatever the V100 pair slowdown (here 1.6) says
    truth = MeasuredSlowdown({("V100M16", T, T): 1.6})
    recs = _run("time-slicing", [_node("t", "T4")], [_job("a"), _job("b")], truth)
    whole_t4 = TM.solo(T, "T4") / TM.solo(T, "V100M16", 1, 0.5)  # normalized: V100 at 0.5 = 1
    for j in "ab":
        assert recs[j].finish_s == pytest.approx(W / (whole_t4 / 2.0), rel=1e-9)


# ---------------------------------------------------------------- finding 6: no oracle
def _decisions(work_b: float, **env_kw):
    nodes = [_node("v", "V100M16")]
    env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference(), **env_kw)
    policy = make_policy("elastico", env)
    # whole-GPU requests that keep their shape: one GPU, two jobs, only one can run
    jobs = [_job("a", share=1.0, work=10_000.0, reshape=False),
            _job("b", share=1.0, work=work_b, reshape=False)]
    inp = RoundInput(now=0.0, nodes=nodes, state=ClusterState(nodes),
                     jobs=[ActiveJob(j, None) for j in jobs])
    res = run_round(policy, inp)
    return {jid: (d.status.value, d.config.name if d.config else None)
            for jid, d in res.decisions.items()}


def test_elastico_decisions_do_not_depend_on_true_remaining_work():
    # same observable state (arrival, request, type, progress 0); only the true work differs
    short, long_ = _decisions(100.0), _decisions(1e6)
    assert short == long_
    assert short["a"][0] == "placed"  # equal estimates: the earlier (by id) job first


def test_oracle_is_only_an_explicit_option():
    assert PolicyEnv(nodes=[], throughput=TM, slowdown=NoInterference()).remaining_estimate \
        == "elapsed"
    short = _decisions(100.0, remaining_estimate="oracle")
    assert short["b"][0] == "placed"  # the oracle sees b's 100 s and runs it first
    with pytest.raises(InvalidArgument, match="remaining_estimate.*'guess'.*elapsed, user, oracle"):
        PolicyEnv(nodes=[], throughput=TM, slowdown=NoInterference(), remaining_estimate="guess")


def test_remaining_estimates_by_hand():
    est = RemainingEstimator("elapsed", prior=[10.0, 20.0, 30.0, 100.0])
    j = _job("x", work=55.0)
    assert est(j) == pytest.approx(40.0)  # E[W] = 160 / 4
    j.done = 15.0
    assert est(j) == pytest.approx(50.0 - 15.0)  # E[W | W > 15] = (20 + 30 + 100) / 3
    j.done = 200.0 - 1e-9
    j.work = 300.0
    assert est(j) == pytest.approx(200.0)  # past the prior: as long again
    user = RemainingEstimator("user", prior=[10.0, 20.0, 30.0, 100.0],
                              user_estimates={"x": 50.0})
    j.work, j.done = 40.0, 10.0
    assert user(j) == pytest.approx(40.0)  # 50 declared - 10 done
    j.work, j.done = 80.0, 60.0
    assert user(j) == pytest.approx(100.0 - 60.0)  # outran its estimate: elapsed
    assert RemainingEstimator("oracle")(j) == pytest.approx(20.0)


# ---------------------------------------------------------------- finding 8: ablation parts
MIG_LABEL = (("elastico.io/mig-gpus", "1"),)


def _families(name: str, jid: str = "j"):
    nodes = [_node("a100", "A100-40GB", 2, MIG_LABEL), _node("v100", "V100M16", 4)]
    env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=NoInterference())
    policy = make_policy(name, env)
    job = _job(jid, share=1.0)
    return policy, [c for c in policy.catalog.family(job).configs if not c.is_wait]


def _growth(c) -> bool:
    return c.num_gpus > 1 or c.gpus_total > 1.0 + 1e-9


def test_full_elastico_family_has_every_part():
    policy, fam = _families("elastico")
    assert policy.uses_mig
    assert any(_growth(c) for c in fam)
    assert len({c.gpu_model for c in fam}) == 2
    assert any(c.mig_profile for c in fam)


def test_no_growth_disables_growth_only():
    policy, fam = _families("elastico-no-growth")
    assert policy.uses_mig
    assert fam and not any(_growth(c) for c in fam)
    assert len({c.gpu_model for c in fam}) == 2
    assert any(c.mig_profile for c in fam)
    _, full = _families("elastico")
    assert set(fam) == {c for c in full if not _growth(c)}


@pytest.mark.parametrize("jid", ["c", "j"])
def test_no_model_choice_disables_model_choice_only(jid):
    policy, fam = _families("elastico-no-model-choice", jid)
    assert policy.uses_mig
    # bound to one model drawn by capacity: u = crc32(id) / 2^32 x 6 GPUs (2 A100, 4 V100),
    # A100 if u < 2 ("c": u = 0.158; "j": u = 2.986)
    u = zlib.crc32(jid.encode()) / 2.0 ** 32 * 6
    want = "A100-40GB" if u < 2 else "V100M16"
    assert want == {"c": "A100-40GB", "j": "V100M16"}[jid]
    assert {c.gpu_model for c in fam} == {want}
    _, full = _families("elastico", jid)
    assert set(fam) == {c for c in full if c.gpu_model == want}
    assert any(_growth(c) for c in fam)
    if want == "A100-40GB":
        assert any(c.mig_profile for c in fam)


def test_no_mig_disables_mig_only():
    policy, fam = _families("elastico-no-mig")
    assert not policy.uses_mig
    assert not any(c.mig_profile for c in fam)
    assert any(_growth(c) for c in fam)
    assert len({c.gpu_model for c in fam}) == 2


def test_no_rst_is_every_part_off():
    policy, fam = _families("elastico-no-rst")
    assert not policy.uses_mig
    assert {(c.gpu_model, c.num_gpus, c.gpu_share, c.mig_profile) for c in fam} == {
        ("A100-40GB", 1, 1.0, None), ("V100M16", 1, 1.0, None)}


# ---------------------------------------------------------------- the CLI
SMALL = ["simulate", "--gpus", "64", "--jobs", "60", "--load", "0.5", "--no-progress"]


def test_simulate_takes_the_estimate_and_the_ablation_parts(tmp_path, capsys):
    import json

    from elastico.cli import main

    out = tmp_path / "r.json"
    code = main(SMALL + ["--remaining-estimate", "user", "--policy", "elastico-no-growth",
                         "--policy", "elastico-no-model-choice", "--policy", "elastico-no-mig",
                         "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    runs = json.loads(out.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["elastico-no-growth", "elastico-no-model-choice",
                                           "elastico-no-mig"]
    assert {r["remaining_estimate"] for r in runs} == {"user"}


@pytest.mark.parametrize("args,needles", [
    (["--user-estimate-badness", "-1"], ["--user-estimate-badness: -1", "[0, 1000]"]),
    (["--user-estimate-badness", "nan"], ["--user-estimate-badness: nan"]),
    (["--remaining-estimate", "oracle", "--via-grpc"], ["--remaining-estimate: 'oracle'",
                                                        "elapsed with --via-grpc"]),
])
def test_simulate_refuses_bad_estimate_flags(capsys, args, needles):
    from elastico.cli import main

    code = main(SMALL + args)
    err = capsys.readouterr().err
    assert code == 2, err
    for n in needles:
        assert n in err, err


def test_equal_jobs_with_different_families_keep_their_own_choices():
    # two identical pending jobs whose families differ (elastico-no-model-choice binds "c" to
    # the A100 and "j" to the V100): the FIFO-among-equal-jobs rule, which deals the group's
    # choices out again in arrival order, must not hand "j"'s choice (index 2 of its family)
    # to "c" (a 2-entry family) -- it did once families could depend on the job id
    import numpy as np

    from elastico.placer.policies.pipeline import fifo_among_equals as _fifo_among_equals

    pol, _ = _families("elastico-no-model-choice", "c")
    fc, fj = (pol.catalog.family(_job(jid, share=1.0)) for jid in ("c", "j"))
    assert fc.configs != fj.configs
    elastic = [ActiveJob(_job("c", share=1.0), None), ActiveJob(_job("j", share=1.0), None)]
    offsets = np.array([0, len(fc), len(fc) + len(fj)])
    choice = np.array([0, len(fj) - 1])  # "c" waits, "j" takes its last configuration
    util = np.ones(offsets[-1])
    util[0] = util[len(fc)] = 0.0  # wait is worth 0
    out = _fifo_among_equals(elastic, choice, util, offsets, np.array([5.0, 5.0]), [fc, fj])
    assert out is None  # not one group: nothing to deal out
