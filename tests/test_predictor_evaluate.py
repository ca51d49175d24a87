"""Evaluation: metrics on hand-worked numbers, folds that never train on what they predict,
baselines recomputed independently, and the CLI's JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from elastico.cli import main
from elastico.errors import InvalidArgument
from elastico.predictor.evaluate import (
    METRIC_KEYS,
    evaluate,
    fit_kappa_profiles,
    make_folds,
    metrics,
    model_group,
)
from elastico.predictor.observations import Observation, bundled_observations
from elastico.predictor.profile import JobProfile


def ob(a: str, b: str, sa: float, sb: float | None, act_a=0.5, act_b=0.5) -> Observation:
    return Observation(JobProfile(a, "training", act_a), JobProfile(b, "training", act_b),
                       "V100M16", sa, sb)


def test_metrics_hand_worked():
    obs = [ob("A (batch size 1)", "B", 1.2, 1.6), ob("A", "C", 2.0, None),
           ob("B", "C", 1.1, 1.2)]
    pa = np.array([1.0, 2.5, 1.3])
    pb = np.array([1.6, np.nan, 1.0])
    m = metrics(obs, pa, pb)
    # sides: (1.2 -> 1.0), (1.6 -> 1.6), (2.0 -> 2.5), (1.2 -> 1.0 for row 3 b), (1.1 -> 1.3)
    errs = [0.2, 0.0, 0.5, 0.2, 0.2]
    trues = [1.2, 1.6, 2.0, 1.2, 1.1]
    assert m["mae"] == pytest.approx(sum(errs) / 5)
    assert m["mape"] == pytest.approx(sum(e / t for e, t in zip(errs, trues)) / 5)
    # safe at 1.25: truly only row 3 (1.1, 1.2); predicted (1.3, 1.0) -> unsafe: 2 of 3 right
    assert m["decision_acc_1.25"] == pytest.approx(2 / 3)
    # safe at 1.5: truly row 3 only; predicted row 3 (1.3, 1.0) safe, rows 1, 2 unsafe: 3/3
    assert m["decision_acc_1.5"] == 1.0
    # ranks: true (1.2, 2.0, 1.1, 1.6, 1.2) -> (2.5, 5, 1, 4, 2.5);
    # pred (1.0, 2.5, 1.3, 1.6, 1.0) -> (1.5, 5, 3, 4, 1.5); Pearson of the ranks:
    rt = np.array([2.5, 5, 1, 4, 2.5])
    rp = np.array([1.5, 5, 3, 4, 1.5])
    want = np.corrcoef(rt, rp)[0, 1]
    assert m["spearman"] == pytest.approx(want)
    assert m["n_pairs"] == 3
    assert metrics(obs, np.full(3, 1.4), np.full(3, 1.4))["spearman"] == 0.0  # constant


def test_kappa_refit_hand_worked():
    v = [JobProfile("a", "training", 0.5), JobProfile("b", "training", 0.0),
         JobProfile("c", "training", 1.0)]
    p = [JobProfile("x", "training", 1.0), JobProfile("y", "training", 1.0),
         JobProfile("z", "training", 0.5)]
    # x = (1.0, 0 [idle victim], 0.5), y = (0.8, 0.3, 0.6): kappa = (0.8 + 0.3) / (1 + 0.25)
    assert fit_kappa_profiles(v, p, np.array([1.8, 1.3, 1.6])) == pytest.approx(0.88)


def test_leave_one_model_out_never_trains_on_the_victims_family():
    obs = bundled_observations()
    folds = make_folds(obs, "leave-one-model-out")
    assert sorted(f.name for f in folds) == ["A3C", "CycleGAN", "LM", "Recommendation",
                                             "ResNet-18", "ResNet-50", "Transformer"]
    count_a = np.zeros(len(obs), int)
    count_b = np.zeros(len(obs), int)
    for f in folds:
        train_fams = {model_group(o.a) for o in (obs[i] for i in f.train)} | {
            model_group(o.b) for o in (obs[i] for i in f.train)}
        assert f.name not in train_fams
        assert all(model_group(obs[i].a) == f.name for i in f.pred_a)
        assert all(model_group(obs[i].b) == f.name for i in f.pred_b)
        np.add.at(count_a, f.pred_a, 1)
        np.add.at(count_b, f.pred_b, 1)
    assert (count_a == 1).all() and (count_b == 1).all()  # every side predicted once


def test_kfold_and_job_type_folds_partition():
    obs = bundled_observations()
    folds = make_folds(obs, "kfold", k=5, seed=3)
    test_rows = np.sort(np.concatenate([f.pred_a for f in folds]))
    assert test_rows.tolist() == list(range(len(obs)))
    for f in folds:
        assert not set(f.train.tolist()) & set(f.pred_a.tolist())
    for f in make_folds(obs, "job-type-kfold", k=5, seed=0):
        held = {obs[i].a.job_type for i in f.pred_a} | {obs[i].b.job_type for i in f.pred_b}
        seen = {t for i in f.train for t in (obs[i].a.job_type, obs[i].b.job_type)}
        assert held and not held & seen


def test_constant_baseline_recomputed_independently():
    obs = bundled_observations()
    res = evaluate(obs, "leave-one-model-out", train_fn=lambda rows: _Stub()).summary()
    fam = lambda o, s: model_group(o.a if s == "a" else o.b)  # noqa: E731
    means = {}
    for F in {fam(o, "a") for o in obs}:
        ys = [y for o in obs if fam(o, "a") != F and fam(o, "b") != F
              for y in (o.slowdown_a, o.slowdown_b)]
        means[F] = sum(ys) / len(ys)
    errs = [abs(means[fam(o, "a")] - o.slowdown_a) for o in obs] + [
        abs(means[fam(o, "b")] - o.slowdown_b) for o in obs]
    assert res["constant"]["mae"] == pytest.approx(sum(errs) / len(errs), rel=1e-12)
    assert res["constant"]["n_pairs"] == len(obs)


class _Stub:
    """Stands in for a trained model (the baselines do not depend on it)."""

    def predict(self, victims, partners, gpus):
        return np.full(len(victims), 1.5)


def test_evaluate_cli_json(capsys):
    assert main(["predictor", "evaluate", "--cv", "leave-one-model-out", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["model", "constant", "analytic"]
    for name, m in doc.items():
        assert list(m) == list(METRIC_KEYS)
        assert m["n_pairs"] == len(bundled_observations())
        assert 0 <= m["decision_acc_1.5"] <= 1 and -1 <= m["spearman"] <= 1
    # the learned model is more accurate than both baselines on models it never saw
    assert doc["model"]["mae"] < min(doc["constant"]["mae"], doc["analytic"]["mae"])
    assert main(["predictor", "evaluate", "--cv", "kfold"]) == 0
    assert "decision_acc_1.5" in capsys.readouterr().out


def test_evaluate_works_on_any_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = ["a_job_type,a_sm_activity,b_job_type,b_sm_activity,gpu_model,slowdown_a,slowdown_b"]
    for i in range(40):
        ua, ub = rng.uniform(0, 1, 2)
        rows.append(f"F{i % 4} (batch size 8),{ua},F{(i + 1) % 4},{ub},T4,"
                    f"{1 + ua * ub},{1 + ua * ub}")
    p = tmp_path / "any.csv"
    p.write_text("\n".join(rows) + "\n")
    for cv in ("kfold", "leave-one-model-out", "job-type-kfold"):
        folds = [] if cv == "leave-one-model-out" else ["--folds", "2"]  # LOMO refuses K
        assert main(["predictor", "evaluate", "--data", str(p), "--cv", cv, "--json",
                     *folds]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["model"]["n_pairs"] == 40


def test_folds_that_cannot_train_are_refused():
    one_family = [ob("X (batch size 1)", "X (batch size 2)", 1.5, 1.5)] * 3
    with pytest.raises(InvalidArgument, match="training"):
        make_folds(one_family, "leave-one-model-out")
    with pytest.raises(InvalidArgument, match="--folds"):
        make_folds(one_family, "kfold", k=10)
    with pytest.raises(InvalidArgument, match="--cv"):
        make_folds(one_family, "bootstrap")
    one_type = [ob("X (batch size 1)", "X (batch size 1)", 1.5, 1.5)] * 3
    with pytest.raises(InvalidArgument, match="at least 2 job types"):
        make_folds(one_type, "job-type-kfold", k=2)


