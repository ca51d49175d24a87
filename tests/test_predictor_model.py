"""The LightGBM slowdown model: it recovers a known rule, is consistent under swapping the
pair, copes with missing features, and its file is refused when damaged while the model that
was serving keeps serving."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.predictor.features import FEATURE_NAMES, FeatureBuilder
from elastico.predictor.learned import LearnedSlowdown, bundled_predictor
from elastico.predictor.model import SlowdownPredictor, train
from elastico.predictor.observations import Observation
from elastico.predictor.profile import JobProfile
from elastico.predictor.service import ModelStore, PredictorCore

GPU = "A100-40GB"


def rule(u_victim: float, u_partner: float, d_partner: float) -> float:
    """The synthetic ground truth: 1 + 0.8 u_v u_p + 0.3 d_p (u = SM, d = DRAM activity)."""
    return 1.0 + 0.8 * u_victim * u_partner + 0.3 * d_partner


def job(u=None, d=None, **kw) -> JobProfile:
    return JobProfile(kw.pop("job_type", ""), "training", 1.0, gpu_model=GPU, sm_activity=u,
                      dram_activity=d, **kw)


def synthetic(n: int, seed: int, missing: float = 0.0) -> list[Observation]:
    """Pairs of random (SM, DRAM) activities with both slowdowns from :func:`rule`; with
    ``missing`` > 0 that fraction of the SM activities is left out of the profiles."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ua, ub, da, db = rng.uniform(0.0, 1.0, 4)
        hide_a, hide_b = rng.random(2) < missing
        out.append(Observation(job(None if hide_a else float(ua), float(da)),
                               job(None if hide_b else float(ub), float(db)), GPU,
                               rule(ua, ub, db), rule(ub, ua, da)))
    return out


@pytest.fixture(scope="module")
def synthetic_model() -> SlowdownPredictor:
    return train(synthetic(600, seed=0))


def test_recovers_a_known_rule(synthetic_model):
    test = synthetic(200, seed=1)
    pa, pb = synthetic_model.predict_observations(test)
    true_a = np.array([o.slowdown_a for o in test])
    true_b = np.array([o.slowdown_b for o in test])
    assert np.abs(pa - true_a).mean() < 0.03
    assert np.abs(pb - true_b).mean() < 0.03
    # hand-worked points of the rule, inside the training range:
    # (0.8, 0.8, 0.5): 1 + 0.8*0.64 + 0.15 = 1.662;  (0.5, 0.5, 1.0): 1 + 0.2 + 0.3 = 1.5;
    # (0.2, 0.3, 0.1): 1 + 0.048 + 0.03 = 1.078
    got = synthetic_model.predict([job(0.8, 0.2), job(0.5, 0.9), job(0.2, 0.7)],
                                  [job(0.8, 0.5), job(0.5, 1.0), job(0.3, 0.1)], [GPU] * 3)
    np.testing.assert_allclose(got, [1.662, 1.5, 1.078], atol=0.06)


def test_swapping_a_pair_swaps_the_predictions_exactly(synthetic_model):
    a = [job(0.9, 0.1), job(0.2, 0.8), job(None, 0.4)]
    b = [job(0.1, 0.9), job(0.7, 0.3), job(0.6, None)]
    sa, sb = synthetic_model.predict_pairs(a, b, [GPU] * 3)
    ta, tb = synthetic_model.predict_pairs(b, a, [GPU] * 3)
    assert sa.tolist() == tb.tolist() and sb.tolist() == ta.tolist()
    # a job next to itself: both sides are the same prediction
    s1, s2 = synthetic_model.predict_pairs([job(0.5, 0.5)], [job(0.5, 0.5)], [GPU])
    assert s1[0] == s2[0]


def test_bundled_model_is_symmetric_on_gavel_jobs():
    m = bundled_predictor()
    a = JobProfile("ResNet-50 (batch size 64)", "training", 0.3, gpu_model="V100M16",
                   solo_tput=4.39)
    b = JobProfile("LM (batch size 20)", "training", 0.2, gpu_model="V100M16", solo_tput=64.7)
    sa, sb = m.predict_pairs([a], [b], ["V100M16"])
    tb, ta = m.predict_pairs([b], [a], ["V100M16"])
    assert (sa[0], sb[0]) == (ta[0], tb[0])
    learned = LearnedSlowdown([m])
    sig = learned.gpu_slowdowns([a, b])
    assert sig.tolist() == [sa[0], sb[0]]
    # the GPU's slowdowns are remembered per resident set; a caller writing into its copy
    # changes nothing the next one gets
    sig[:] = 0.0
    assert learned.gpu_slowdowns([a, b]).tolist() == [sa[0], sb[0]]
    assert learned.gpu_slowdowns((b, a)).tolist() == [sb[0], sa[0]]


def test_missing_features_are_handled(synthetic_model):
    # a profile with nothing but its kind: every feature is NaN, the prediction is still a
    # finite slowdown in [1, 50]
    bare = JobProfile("", "", 1.0)
    s = synthetic_model.predict([bare, bare], [bare, job(0.9, 0.9)], [GPU, "no-such-gpu"])
    assert np.isfinite(s).all() and (s >= 1.0).all() and (s <= 50.0).all()
    X = FeatureBuilder().matrix([bare], [bare], [GPU])
    assert X.shape == (1, len(FEATURE_NAMES))
    # training with 30% of the SM activities missing still recovers the rule on complete rows
    m = train(synthetic(600, seed=2, missing=0.3))
    test = synthetic(200, seed=3)
    pa, _ = m.predict_observations(test)
    assert np.abs(pa - np.array([o.slowdown_a for o in test])).mean() < 0.05


def test_training_is_deterministic(synthetic_model):
    again = train(synthetic(600, seed=0))
    assert again.version == synthetic_model.version
    assert again.booster.model_to_string() == synthetic_model.booster.model_to_string()


def test_model_file_round_trip(tmp_path, synthetic_model):
    path = tmp_path / "m.json"
    synthetic_model.save(path)
    back = SlowdownPredictor.load(path)
    assert back.version == synthetic_model.version
    a, b = [job(0.3, 0.6)], [job(0.7, 0.2)]
    assert back.predict(a, b, [GPU]).tolist() == synthetic_model.predict(a, b, [GPU]).tolist()


def _damaged(tmp_path, good: str) -> dict[str, str]:
    doc = json.loads(good)
    wrong_schema = dict(doc, schema_version=doc["schema_version"] + 1)
    tampered = dict(doc, booster=doc["booster"].replace("Tree=0", "Tree=9", 1))
    other_features = dict(doc, feature_names=doc["feature_names"][:-1])
    return {
        "truncated": good[: len(good) // 2],
        "empty": "",
        "not json": "this is not a model\n",
        "wrong schema": json.dumps(wrong_schema),
        "checksum": json.dumps(tampered),
        "features": json.dumps(other_features),
    }


@pytest.mark.parametrize("kind,needle", [
    ("truncated", "truncated or corrupt"), ("empty", "truncated or corrupt"),
    ("not json", "truncated or corrupt"), ("wrong schema", "schema"),
    ("checksum", "checksum"), ("features", "feature list"),
])
def test_damaged_model_file_is_refused_and_the_previous_model_keeps_serving(
        tmp_path, synthetic_model, kind, needle):
    good = tmp_path / "good.json"
    synthetic_model.save(good)
    bad = tmp_path / "bad.json"
    bad.write_text(_damaged(tmp_path, good.read_text())[kind])
    with pytest.raises(InvalidArgument, match=needle) as err:
        SlowdownPredictor.load(bad)
    assert str(bad) in str(err.value)

    core = PredictorCore(model_path=good)
    a, b = [job(0.4, 0.4)], [job(0.9, 0.1)]
    before = core.predict(a, b, GPU)
    with pytest.raises(InvalidArgument, match=needle):
        core.load(bad)
    after = core.predict(a, b, GPU)
    assert after[2] == before[2] == synthetic_model.version
    assert after[0].tolist() == before[0].tolist()


def test_store_with_a_corrupt_current_model_keeps_serving_the_old_one(tmp_path, synthetic_model,
                                                                     caplog):
    store = ModelStore(tmp_path / "store")
    store.install(synthetic_model)
    core = PredictorCore(store)
    assert core.version == synthetic_model.version
    # a newer model arrives, but its file is truncated
    (store.models / "broken.json").write_text(synthetic_model.to_json()[:1000])
    store.current_file.write_text("broken.json\n")
    with caplog.at_level(logging.ERROR):
        _, _, version = core.predict([job(0.5, 0.5)], [job(0.5, 0.5)], GPU)
    assert version == synthetic_model.version
    assert "refused" in caplog.text and "truncated" in caplog.text


def test_missing_model_falls_back_to_the_analytic_model(tmp_path):
    core = PredictorCore(ModelStore(tmp_path / "empty"), use_bundled=False)
    sa, sb, version = core.predict([JobProfile("x", "training", 0.5)],
                                   [JobProfile("y", "training", 0.4)], GPU)
    assert version.startswith("analytic-kappa")
    # the analytic pair form: 1 + kappa * activity of the partner
    k = core._fallback.kappa
    assert sa[0] == pytest.approx(1 + k * 0.4) and sb[0] == pytest.approx(1 + k * 0.5)
