"""Issue 23: the contention prior worked by hand, the identity-free feature matrix, the
activity-v2 model (prior x learned correction), ``predictor score`` against numpy/scipy, and
the online refit's refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.predictor.activity_features import FEATURE_NAMES, ActivityFeatureBuilder
from elastico.predictor.evaluate import check_bound, score
from elastico.predictor.learned import bundled_predictor
from elastico.predictor.model import SlowdownPredictor, train
from elastico.predictor.observations import Observation, read_observations, write_observations
from elastico.predictor.prior import ContentionPrior, prior_pair, solo_activity
from elastico.predictor.profile import JobProfile
from elastico.predictor.service import (
    ModelStore,
    PredictorCore,
    RefitSchedule,
    held_out_folds,
    refit_if_due,
    retrain,
)

GPU = "A100-80GB"


def job(sm=None, dram=None, share=None, sharing=None, kind="training", jt="x", fam=None,
        **kw) -> JobProfile:
    return JobProfile(jt, kind, 1.0, gpu_model=GPU, sm_activity=sm, dram_activity=dram,
                      mps_share=share, sharing=sharing, model_family=fam, **kw)


# ------------------------------------------------------------------------------ the prior
def test_prior_time_slicing_by_hand():
    # a busy 60 % of its step, b 50 %: each unit of a's GPU work waits for b's share of it:
    # s_a = 1 + 0.6 * 0.5 = 1.30, and the same for b
    a, b = job(0.6, sharing="timeslice"), job(0.5, sharing="timeslice")
    assert prior_pair(a, b) == pytest.approx(1.30)
    assert prior_pair(b, a) == pytest.approx(1.30)
    # both busy all the time: the round-robin share, 2 each
    assert prior_pair(job(1.0, sharing="timeslice"), job(1.0)) == pytest.approx(2.0)


def test_prior_mps_with_shares_by_hand():
    # shares 0.5 + 0.5 fit the SMs; DRAM intensity while busy: a 0.4/0.8 = 0.5,
    # b 0.45/0.5 = 0.9, demand 1.4 -> the overlap runs 1.4x slower:
    # s_a = 1 + 0.8 * 0.5 * 0.4 = 1.16
    a = job(0.8, 0.4, share=0.5, sharing="mps")
    b = job(0.5, 0.45, share=0.5, sharing="mps")
    assert prior_pair(a, b) == pytest.approx(1.16)
    assert prior_pair(b, a) == pytest.approx(1.16)
    # the same jobs with bandwidth to spare (0.2 + 0.2 < 1): no slowdown at all
    assert prior_pair(job(0.8, 0.16, share=0.5), job(0.5, 0.1, share=0.5)) == 1.0
    # no shares, DRAM unmeasured (intensity 1, the worst case): D = 2, s = 1 + u_a u_b
    assert prior_pair(job(0.4), job(1.0)) == pytest.approx(1.4)


def test_prior_mig_and_idle_jobs_are_not_slowed():
    assert prior_pair(job(1.0, 1.0, sharing="mig"), job(1.0, 1.0)) == 1.0
    assert prior_pair(job(0.0), job(1.0)) == 1.0
    assert prior_pair(job(1.0), job(0.0)) == 1.0


def test_prior_without_counters_reads_the_catalogue_else_the_worst_case():
    from elastico.perf.throughput import ThroughputModel

    tm = ThroughputModel.bundled()
    a = job(jt="ResNet-50 (batch size 64)")  # family parsed from the Gavel name
    b = job(jt="LM (batch size 20)")
    pa = tm.parallel_fraction("ResNet-50 (batch size 64)")
    pb = tm.parallel_fraction("LM (batch size 20)")
    assert solo_activity(a).source == "catalogue" and solo_activity(a).u == pytest.approx(pa)
    assert prior_pair(a, b) == pytest.approx(1 + pa * pb)
    unknown = job(jt="my-own-job")
    assert solo_activity(unknown).source == "default" and solo_activity(unknown).u == 1.0
    # on one GPU the extra slowdowns add up
    three = ContentionPrior().gpu_slowdowns([job(0.5), job(0.5), job(1.0)])
    assert three[0] == pytest.approx(1 + 0.25 + 0.5)


# ------------------------------------------------------------------ no identity features
def test_job_type_and_family_never_enter_the_feature_matrix():
    assert not any(k in n for n in FEATURE_NAMES
                   for k in ("job_type", "family", "batch", "solo_tput"))
    fb = ActivityFeatureBuilder()
    a1 = job(0.7, 0.3, jt="ResNet-50 (batch size 64)", fam="ResNet-50", mem_gib=10.0)
    a2 = job(0.7, 0.3, jt="some-never-seen-llm", fam="Llama-3-70B", mem_gib=10.0)
    b = job(0.4, 0.6, jt="LM (batch size 20)", fam="LM")
    X1 = fb.matrix([a1, b], [b, a1], [GPU, GPU])
    X2 = fb.matrix([a2, b], [b, a2], [GPU, GPU])
    np.testing.assert_array_equal(X1, X2)
    # and a changed counter does change the row (the test can fail)
    a3 = job(0.9, 0.3, jt="ResNet-50 (batch size 64)", fam="ResNet-50", mem_gib=10.0)
    assert not np.array_equal(X1, fb.matrix([a3, b], [b, a3], [GPU, GPU]))


def _synthetic(n: int, seed: int, extra: float = 0.3) -> list[Observation]:
    """Time-sliced pairs whose truth is the prior plus ``extra`` x DRAM overlap."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ua, ub, da, db = rng.uniform(0.05, 1, 4)
        a = job(ua, da * ua, sharing="timeslice", jt=f"j{rng.integers(1000)}")
        b = job(ub, db * ub, sharing="timeslice", jt=f"j{rng.integers(1000)}")
        out.append(Observation(a, b, GPU, 1 + ua * ub + extra * da * db,
                               1 + ua * ub + extra * da * db, "synthetic"))
    return out


def test_activity_model_learns_the_correction_and_ignores_labels():
    tr, te = _synthetic(400, 0), _synthetic(100, 1)
    m = train(tr)
    assert m.feature_set == "activity-v2"
    pa, _ = m.predict_observations(te)
    true = np.array([o.slowdown_a for o in te])
    prior = np.array([prior_pair(o.a, o.b) for o in te])
    assert np.abs(pa - true).mean() < 0.5 * np.abs(prior - true).mean()
    renamed = [Observation(JobProfile("renamed", o.a.kind, 1.0, gpu_model=GPU,
                                      sm_activity=o.a.sm_activity,
                                      dram_activity=o.a.dram_activity, sharing="timeslice",
                                      model_family="NewFamily"), o.b, GPU, o.slowdown_a)
               for o in te]
    np.testing.assert_array_equal(m.predict_observations(renamed)[0], pa)


def test_outside_its_training_domain_the_model_serves_the_prior():
    m = train(_synthetic(200, 0))  # training / time-slicing / measured counters only
    a = job(0.6, 0.3, kind="inference", sharing="mps")
    b = job(0.5, 0.2, kind="inference", sharing="mps")
    s = m.predict([a], [b], [GPU])
    assert s[0] == pytest.approx(prior_pair(a, b))



def test_in_domain_says_where_the_learned_correction_serves():
    # trained on time-sliced training pairs with measured counters: that pair is inside, an
    # MPS inference pair (above: served by the prior alone) is outside -- and the placer's
    # bound rule (prior.UnknownSafe) then checks it against the mechanism bound
    from elastico.predictor.learned import LearnedSlowdown
    from elastico.predictor.prior import UnknownSafe
    from elastico.predictor.worst_case import MechanismBound

    tr = _synthetic(200, 0)
    m = train(tr)
    inside = (tr[0].a, tr[0].b)
    a = job(0.6, 0.3, kind="inference", sharing="mps")
    b = job(0.5, 0.2, kind="inference", sharing="mps")
    assert m.in_domain(*inside) and not m.in_domain(a, b)
    model = LearnedSlowdown([m])
    assert model.in_domain(*inside) and not model.in_domain(a, b)
    safe = UnknownSafe(model)
    np.testing.assert_array_equal(safe.gpu_slowdowns(list(inside)),
                                  model.gpu_slowdowns(list(inside)))
    np.testing.assert_allclose(safe.gpu_slowdowns([a, b]),
                               np.maximum(model.gpu_slowdowns([a, b]),
                                          MechanismBound().gpu_slowdowns([a, b])))
    assert safe.gpu_slowdowns([a, b])[0] > model.gpu_slowdowns([a, b])[0]  # it can fail

# ---------------------------------------------------------------------------- score
CSV_HEAD = ("a_job_type,a_kind,a_sharing,a_mps_share,a_sm_activity,a_dram_activity,"
            "b_job_type,b_model_family,b_kind,b_sharing,b_sm_activity,gpu_model,slowdown_a,"
            "slowdown_b,source\n")
CSV_ROWS = [
    "vllm-decode,inference,mps,0.5,0.3,0.6,my-trainer,NotInAnyCatalogue,training,mps,0.9,"
    "A100-80GB,1.08,1.02,x\n",
    "prefill,inference,timeslice,,0.8,0.2,bert,BERT,training,timeslice,0.5,A100-80GB,1.6,"
    "1.3,x\n",
    "a,training,mps,,0.2,,b,B,training,mps,0.3,H100-80GB,1.01,,x\n",
]


def test_score_matches_numpy_and_scipy_by_hand(tmp_path):
    p = tmp_path / "o.csv"
    p.write_text(CSV_HEAD + "".join(CSV_ROWS))
    obs = read_observations(p)
    model = bundled_predictor()
    res = score(model, obs, 1.1)
    true = np.array([1.08, 1.6, 1.01, 1.02, 1.3])
    # the prior by hand: row 1 a: shares 0.5 + 1.0 -> SM demand 1.5; DRAM 0.6/0.3 -> 1
    # (capped) + 1 (b unmeasured) = 2 -> D = 2: 1 + 0.3*0.9*1 = 1.27, b alike: 1.27;
    # row 2 time-slicing: 1 + 0.8*0.5 = 1.4 both; row 3: D = 2: 1 + 0.2*0.3 = 1.06
    prior = np.array([1.27, 1.4, 1.06, 1.27, 1.4])
    assert res["analytic_mae"] == pytest.approx(np.abs(prior - true).mean())
    assert res["analytic_mape"] == pytest.approx((np.abs(prior - true) / true).mean())
    assert res["analytic_spearman"] == pytest.approx(spearmanr(prior, true).statistic)
    # safe at 1.1 as measured: row 1 yes, row 2 no, row 3 yes; the prior says no, no, yes
    assert res["analytic_decision_accuracy"] == pytest.approx(2 / 3)
    assert res["no_slowdown_mae"] == pytest.approx(np.abs(1 - true).mean())
    assert res["no_slowdown_decision_accuracy"] == pytest.approx(2 / 3)
    assert res["no_slowdown_spearman"] is None  # constant predictions: undefined
    mean = model.meta["training"]["mean_slowdown"]
    assert res["constant_mae"] == pytest.approx(np.abs(mean - true).mean())
    assert res["majority_decision_accuracy"] == pytest.approx(2 / 3)
    pa, pb = model.predict_observations(obs)
    pred = np.array([pa[0], pa[1], pa[2], pb[0], pb[1]])
    assert res["mae"] == pytest.approx(np.abs(pred - true).mean())
    assert res["n_pairs"] == 3 and res["n_slowdowns"] == 5


def test_score_cli_json_and_bad_input(tmp_path, capsys):
    p = tmp_path / "o.csv"
    p.write_text(CSV_HEAD + "".join(CSV_ROWS))
    assert main(["predictor", "score", "--data", str(p), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    for k in ("mae", "mape", "spearman", "decision_accuracy", "constant_mae",
              "analytic_decision_accuracy", "no_slowdown_mae"):
        assert k in res
    assert res["bound"] == 1.5
    assert main(["predictor", "score", "--data", str(p), "--bound", "1.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bound"] == 1.1
    for bad in ("1.0", "0.5", "nan", "51"):
        assert main(["predictor", "score", "--data", str(p), "--bound", bad]) == 2
        assert "--bound" in capsys.readouterr().err
    broken = tmp_path / "bad.csv"
    broken.write_text(CSV_HEAD + CSV_ROWS[0] + CSV_ROWS[1].replace(",0.8,", ",1.8,"))
    assert main(["predictor", "score", "--data", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv:3: a_sm_activity" in err
    garbage = tmp_path / "m.json"
    garbage.write_text('{"format": "elastico-slowdown-model"')
    assert main(["predictor", "score", "--model", str(garbage), "--data", str(p)]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
    with pytest.raises(InvalidArgument):
        check_bound(True)


def test_the_legacy_model_still_loads_and_scores(tmp_path):
    from elastico.predictor.learned import LEGACY_MODEL

    p = tmp_path / "o.csv"
    p.write_text(CSV_HEAD + "".join(CSV_ROWS))
    old = SlowdownPredictor.load(LEGACY_MODEL)
    assert old.feature_set == "identity-v1"
    res = score(old, read_observations(p), 1.5)
    assert math.isfinite(res["mae"])


# ---------------------------------------------------------------------------- refit
def _store(tmp_path, base):
    st = ModelStore(tmp_path / "store")
    st.install(train(base, version="base-model"))
    return st


def test_refit_refuses_a_worse_model_and_a_corrupt_one(tmp_path):
    base = _synthetic(200, 0)
    st = _store(tmp_path, base)
    core = PredictorCore(st)
    core.report(_synthetic(40, 5, extra=0.8))

    def worse(obs, **kw):  # trained on the wrong truth: slowdowns inflated by 1.5
        bad = [Observation(o.a, o.b, o.gpu_model, min(o.slowdown_a + 1.5, 50),
                           None if o.slowdown_b is None else min(o.slowdown_b + 1.5, 50),
                           o.source) for o in obs]
        return train(bad, **kw)

    rep = retrain(st, base, train_fn=worse)
    assert rep["status"] == "kept" and rep["new_mae"] > rep["old_mae"]
    assert st.current_path().name == "base-model.json"

    def corrupt(obs, **kw):
        m = train(obs, **kw)
        m.booster = _NanBooster(m.booster)
        return m

    rep = retrain(st, base, train_fn=lambda o, **kw: train(o, **kw) if "training_info" not in kw
                  else corrupt(o, **kw))
    assert rep["status"] == "kept" and "refused" in rep["reason"]
    assert st.current_path().name == "base-model.json" and core.version == "base-model"


class _NanBooster:
    def __init__(self, b):
        self.b = b

    def predict(self, X, **kw):
        return np.full(len(X), np.nan) * self.b.predict(X, **kw)

    def model_to_string(self):
        return "not a booster"


def test_refit_schedule_and_promotion(tmp_path):
    base = _synthetic(200, 0, extra=0.0)
    st = _store(tmp_path, base)
    core = PredictorCore(st)
    sched = RefitSchedule(min_new_rows=30, min_interval_s=100)
    core.report(_synthetic(20, 3, extra=0.8))
    assert refit_if_due(core, sched, now=0.0, base=base) is None  # 20 < 30 rows
    core.report(_synthetic(40, 4, extra=0.8))
    rep = refit_if_due(core, sched, now=1.0, base=base)
    assert rep["status"] == "promoted" and rep["new_mae"] < rep["old_mae"]
    assert core.version == rep["new_version"]
    core.report(_synthetic(40, 6, extra=0.8))
    assert refit_if_due(core, sched, now=50.0, base=base) is None  # too soon
    with pytest.raises(InvalidArgument):
        RefitSchedule(min_new_rows=0)


def test_serve_refit_flags_are_checked(capsys, tmp_path):
    # no model store: nothing to refit into
    assert main(["serve", "predictor", "--port", "0", "--refit-every", "60"]) == 2
    assert "--refit-every" in capsys.readouterr().err
    assert main(["serve", "predictor", "--port", "0", "--model-dir", str(tmp_path),
                 "--refit-every", "0"]) == 2
    assert "--refit-every" in capsys.readouterr().err
    assert main(["serve", "predictor", "--port", "0", "--model-dir", str(tmp_path),
                 "--refit-every", "60", "--refit-min-rows", "0"]) == 2
    assert "--refit-min-rows" in capsys.readouterr().err


def test_held_out_folds_are_shuffled_not_file_order():
    import hashlib

    seed = hashlib.sha256(b"reported rows").hexdigest()
    folds = held_out_folds(100, 5, seed)
    assert len(folds) == 5
    assert sorted(np.concatenate(folds).tolist()) == list(range(100))  # each row once
    # file order would make fold 0 = rows 0..19; reports arrive grouped by node and job
    assert not any(np.array_equal(f, np.arange(20 * i, 20 * i + 20)) for i, f in
                   enumerate(folds))
    assert all(np.ptp(f) > 50 for f in folds)  # each fold spans the file
    # the same data give the same folds (the same decision)
    assert all(np.array_equal(a, b) for a, b in zip(folds, held_out_folds(100, 5, seed)))
    assert len(held_out_folds(3, 5, seed)) == 3
