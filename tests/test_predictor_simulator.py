"""The simulator's slowdowns: ground truth from Gavel's measured pairs, a placer predictor that
never predicts a slowdown it was trained on (k-fold by job type), both behind the one
SlowdownModel interface, and the simulator running jobs at the truth."""

from __future__ import annotations

import numpy as np
import pytest

from elastico.model import Job, JobKind, Node, Request
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.predictor import AnalyticSlowdown, NoInterference, SlowdownModel
from elastico.predictor.evaluate import make_folds
from elastico.predictor.learned import (
    LearnedSlowdown,
    MeasuredSlowdown,
    default_slowdown_model,
    kfold_by_job_type,
    share_factor,
)
from elastico.predictor.observations import bundled_observations
from elastico.predictor.profile import JobProfile
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel

R50 = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"
TM = ThroughputModel.bundled()


def prof(jt, gpu="V100M16", share=None, act=0.3):
    return JobProfile(jt, "training", act, gpu_model=gpu, mps_share=share)


def measured(gpu_model, a, b):
    for o in bundled_observations():
        if o.gpu_model == gpu_model and (o.a.job_type, o.b.job_type) == (a, b):
            return o.slowdown_a
        if o.gpu_model == gpu_model and (o.b.job_type, o.a.job_type) == (a, b):
            return o.slowdown_b
    return None


def test_truth_is_the_measured_pair():
    truth = MeasuredSlowdown.from_observations(bundled_observations())
    want = measured("V100M16", R50, LM)
    assert want is not None and want > 1
    assert truth.pair_slowdown(prof(R50), prof(LM)) == pytest.approx(want)
    # V100M32 uses Gavel's V100 pairs, P100 its P100 pairs; on GPUs Gavel did not measure
    # (G2, T4, ...) no V100 pair slowdown is applied (issue 19, finding 5; docs/model.md)
    assert truth.pair_slowdown(prof(R50, "V100M32"), prof(LM, "V100M32")) == pytest.approx(want)
    assert truth.pair_slowdown(prof(R50, "G2"), prof(LM, "G2")) == 1.0
    assert truth.pair_slowdown(prof(R50, "P100"), prof(LM, "P100")) == pytest.approx(
        measured("P100", R50, LM))
    # a partner held to MPS share 0.5 causes the measured extra slowdown x its relative
    # activity 1 / (p/0.5 + 1 - p), p = LM's parallel fraction (deepspeech2's MISO fit)
    p = TM.parallel_fraction(LM)
    f = 1 / (p / 0.5 + 1 - p)
    assert share_factor(prof(LM, share=0.5)) == pytest.approx(f)
    assert truth.pair_slowdown(prof(R50), prof(LM, share=0.5)) == pytest.approx(
        1 + (want - 1) * f)
    # additive composition over the residents
    sig = truth.gpu_slowdowns([prof(R50), prof(LM), prof(LM)])
    assert sig[0] == pytest.approx(1 + 2 * (want - 1))
    # an unmeasured pair falls back to the analytic model
    a, b = prof("not-a-gavel-job", act=0.5), prof("nor-this", act=0.4)
    assert truth.pair_slowdown(a, b) == pytest.approx(AnalyticSlowdown().pair_slowdown(a, b))
    assert truth.misses >= 1


class _Recorder:
    """A stand-in predictor that remembers which job types it was trained on."""

    def __init__(self, rows):
        self.types = {o.a.job_type for o in rows} | {o.b.job_type for o in rows}
        self.share_varied = False
        self.version = f"rec{len(rows)}"

    def predict(self, victims, partners, gpus):
        return np.array([2.0 if v.job_type in self.types else 1.0 for v in victims])


def test_kfold_predictor_never_answers_for_a_type_it_was_trained_on():
    obs = bundled_observations()
    kf = kfold_by_job_type(obs, k=5, seed=0, train_fn=_Recorder)
    assert isinstance(kf, SlowdownModel)
    folds = make_folds(obs, "job-type-kfold", 5, 0)
    assert len(kf.predictors) == len(folds) + 1  # + the all-rows model for unknown types
    for jt in TM.job_types():
        r = kf.route(prof(jt))
        assert r < len(folds), jt
        assert jt not in kf.predictors[r].types
        # hence the recorder says 1.0 (never trained on this victim) for every partner
        assert kf.pair_slowdown(prof(jt), prof(R50)) == 1.0
    # a type in no fold goes to the model trained on everything
    assert kf.route(prof("unknown job")) == len(folds)


def test_default_model_is_the_bundled_predictor_with_analytic_fallback(tmp_path):
    model, note = default_slowdown_model()
    assert isinstance(model, LearnedSlowdown) and note.startswith("predictor activity-lgbm-")
    bad = tmp_path / "m.json"
    bad.write_text("{")
    model, note = default_slowdown_model(bad)
    assert isinstance(model, AnalyticSlowdown) and "analytic fallback" in note


def test_learned_model_keeps_the_interface_rules():
    learned, _ = default_slowdown_model()
    a, b = prof(R50), prof(LM)
    # an idle job (activity 0) is neither slowed nor slowing
    idle = prof(LM, act=0.0)
    assert learned.pair_slowdown(idle, a) == 1.0 and learned.pair_slowdown(a, idle) == 1.0
    assert learned.gpu_slowdowns([a]).tolist() == [1.0]
    # additive composition: adding a co-runner never lowers anyone's slowdown
    two = learned.gpu_slowdowns([a, b])
    three = learned.gpu_slowdowns([a, b, prof(R50)])
    assert (three[:2] >= two - 1e-12).all()
    assert two[0] == pytest.approx(learned.pair_slowdown(a, b))


class _Constant:
    """Truth stub: every co-resident of an MPS GPU runs at slowdown ``s``."""

    def __init__(self, s):
        self.s = s

    def pair_slowdown(self, a, b):
        return self.s

    def gpu_slowdowns(self, residents):
        return np.full(len(residents), self.s if len(residents) > 1 else 1.0)


def test_simulator_runs_jobs_at_the_truth_not_the_prediction():
    # two half-GPU inference pods share one V100: the placer predicts with the analytic
    # model; the jobs run at the truth.  Arrivals at 0 and no restarts, so when every
    # co-resident runs at slowdown 2 instead of 1, every event time doubles.
    nodes = [Node("n0", "V100M16", 1, 16.0, 32.0, 128.0)]
    jobs = [Job(f"j{i}", JobKind.INFERENCE, 0.0, 1000.0, Request(1, 0.5, 1.0, 2.0),
                job_type=R50, slowdown_bound=1.5) for i in range(2)]

    def run(truth):
        env = PolicyEnv(nodes=nodes, throughput=TM, slowdown=AnalyticSlowdown(), restart_s=0.0)
        pol = make_policy("elastico", env)
        return simulate(nodes, jobs, pol, restart_s=0.0, truth=truth,
                        activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity)

    free, slow = run(NoInterference()), run(_Constant(2.0))
    assert free.metrics["jobs_completed"] == slow.metrics["jobs_completed"] == 2
    assert slow.metrics["makespan_s"] == pytest.approx(2 * free.metrics["makespan_s"])
    assert slow.metrics["avg_jct_s"] == pytest.approx(2 * free.metrics["avg_jct_s"])
