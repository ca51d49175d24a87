"""The LightGBM slowdown model: training, prediction, and its file (docs/predictor.md).

Training: every observation gives one sample per measured side -- (A, B) -> slowdown of A and
(B, A) -> slowdown of B -- built by :class:`elastico.predictor.features.FeatureBuilder`.  The
target is the *normalized throughput* ``1 / slowdown`` and the loss is L1: on Gavel's pairs
this was more accurate than log-slowdown or L2 (heavy tail: a few pairs are slowed > 5x).
Prediction: ``slowdown = 1 / clip(prediction, 0.02, 1)``, so always in [1, 50].

Model file (JSON, one object): ``format`` (:data:`MODEL_FORMAT`), ``format_version``,
``schema_version`` (:data:`elastico.predictor.schema.SCHEMA_VERSION`), ``version`` (the
string PredictSlowdown returns), ``feature_names``, ``families`` (model-family vocabulary),
``share_varied`` (did any training profile carry an MPS share < 1), ``params``, ``rounds``,
``training`` (row counts, data checksum), ``booster`` (LightGBM's text model) and
``booster_sha256``.  :meth:`SlowdownPredictor.load` refuses a file that is truncated, not
JSON, of another format or schema version, built for other features, or whose booster does
not match its checksum or does not parse -- with InvalidArgument naming the file and why.

Who calls it: the CLI, the evaluation, the service core and the simulator's k-fold
predictor.  Whom it calls: lightgbm, numpy, :mod:`elastico.predictor.features`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.predictor import activity_features as _v2
from elastico.predictor import features as _v1
from elastico.predictor.features import family_and_batch
from elastico.predictor.observations import Observation
from elastico.predictor.profile import JobProfile
from elastico.predictor.schema import MAX_SLOWDOWN, SCHEMA_VERSION

__all__ = [
    "MODEL_FORMAT",
    "FORMAT_VERSION",
    "DEFAULT_PARAMS",
    "DEFAULT_ROUNDS",
    "FEATURE_SETS",
    "DEFAULT_FEATURE_SET",
    "SlowdownPredictor",
    "training_samples",
    "train",
]

MODEL_FORMAT = "elastico-slowdown-model"
FORMAT_VERSION = 1
#: LightGBM parameters of the bundled model (chosen on leave-one-model-out error of the
#: Gavel data among a handful of settings; docs/predictor.md).  One thread and
#: ``deterministic`` so that a retrain on the same rows gives the same booster.
DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "l1", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 10,
    "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "seed": 1,
    "num_threads": 1, "deterministic": True, "force_row_wise": True, "verbose": -1,
}
DEFAULT_ROUNDS = 300
_MIN_NORM = 1.0 / MAX_SLOWDOWN  # normalized-throughput floor: predicted slowdown <= 50

#: Feature sets: name -> (builder class, feature names, categorical column indices).
#: ``identity-v1`` (the model of issue 22: Gavel job-type features -- solo speed ratios per
#: job type, the family's Amdahl fraction, model family and batch size -- target
#: 1/slowdown) is kept so that its files load and it can be compared; ``activity-v2`` (issue
#: 23: no identity, a correction of the contention prior, :mod:`elastico.predictor.prior`)
#: is the default.
FEATURE_SETS: dict[str, tuple[Any, tuple[str, ...], tuple[int, ...]]] = {
    "identity-v1": (_v1.FeatureBuilder, _v1.FEATURE_NAMES, _v1.CATEGORICAL_FEATURES),
    "activity-v2": (_v2.ActivityFeatureBuilder, _v2.FEATURE_NAMES, _v2.CATEGORICAL_FEATURES),
}
DEFAULT_FEATURE_SET = "activity-v2"
#: The largest correction exp(f) the activity-v2 model may apply to the prior either way:
#: 50 (= MAX_SLOWDOWN; the prior is >= 1 and the result is clipped to [1, 50] anyway) --
#: a guard against a NaN/inf from a corrupt booster, not a tuned constant.
_MAX_LOG_CORRECTION = float(np.log(MAX_SLOWDOWN))


def _lgb():
    import lightgbm

    return lightgbm


class SlowdownPredictor:
    """A trained model: ``booster`` (lightgbm.Booster) and ``meta`` (the file's fields but
    the booster).  Thread-safe for prediction (the feature cache is a plain dict; LightGBM's
    predict is re-entrant)."""

    def __init__(self, booster: Any, meta: dict[str, Any]):
        self.booster = booster
        self.meta = meta
        self.feature_set = str(meta.get("feature_set", "identity-v1"))
        self.builder = FEATURE_SETS[self.feature_set][0](meta.get("families", ()))
        self.domain = frozenset(meta.get("domain", ()))

    @property
    def version(self) -> str:
        """The model version string (e.g. ``gavel-lgbm-1a2b3c4d``)."""
        return str(self.meta["version"])

    @property
    def share_varied(self) -> bool:
        """True when the training data varied the MPS share (else the model cannot know it)."""
        return bool(self.meta.get("share_varied", False))

    def predict(self, victims: Sequence[JobProfile], partners: Sequence[JobProfile],
                gpu_models: Sequence[str]) -> np.ndarray:
        """Slowdown of ``victims[i]`` next to ``partners[i]`` on ``gpu_models[i]``, shape
        ``(n,)``, each in [1, 50].  Unknown GPU models and missing fields are NaN features."""
        if len(victims) == 0:
            return np.ones(0)
        X = self.builder.matrix(victims, partners, gpu_models)
        raw = self.booster.predict(X, num_threads=1)
        if self.feature_set == "identity-v1":
            return 1.0 / np.clip(raw, _MIN_NORM, 1.0)
        # activity-v2: prior x exp(correction), the correction only inside the training
        # domain (docs/predictor.md, "Domain"); outside it the prior alone
        prior = np.exp(X[:, _V2_LOG_PRIOR])
        inside = np.fromiter((_v2.domain_key(v, p) in self.domain
                              for v, p in zip(victims, partners)), dtype=bool, count=len(X))
        corr = np.where(inside & np.isfinite(raw),
                        np.clip(raw, -_MAX_LOG_CORRECTION, _MAX_LOG_CORRECTION), 0.0)
        return np.clip(prior * np.exp(corr), 1.0, MAX_SLOWDOWN)

    def in_domain(self, victim: JobProfile, partner: JobProfile) -> bool:
        """Whether this model's prediction for ``victim`` next to ``partner`` is inside the
        domain it was trained on: for ``activity-v2``, the pair's domain key
        (:func:`elastico.predictor.activity_features.domain_key`) is in the model file's
        ``domain`` (outside it the prior alone answers, docs/predictor.md "Domain");
        ``identity-v1`` models know jobs by their Gavel job type, so every pair they answer
        is theirs."""
        if self.feature_set == "identity-v1":
            return True
        return _v2.domain_key(victim, partner) in self.domain

    def predict_pairs(self, a: Sequence[JobProfile], b: Sequence[JobProfile],
                      gpu_models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(slowdown of a[i], slowdown of b[i])`` for pairs sharing ``gpu_models[i]``, one
        LightGBM call for both sides.  Swapping a and b swaps the results exactly."""
        n = len(a)
        s = self.predict(list(a) + list(b), list(b) + list(a), list(gpu_models) * 2)
        return s[:n], s[n:]

    def predict_observations(self, obs: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(slowdown_a, slowdown_b)`` for each observation's pair."""
        return self.predict_pairs([o.a for o in obs], [o.b for o in obs],
                                  [o.gpu_model for o in obs])

    # ----------------------------------------------------------------------- the file
    def to_json(self) -> str:
        """The model file's text (module docstring)."""
        text = self.booster.model_to_string()
        doc = {**self.meta, "booster": text,
               "booster_sha256": hashlib.sha256(text.encode()).hexdigest()}
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    def save(self, path: str | Path) -> None:
        """Writes the model file atomically (temporary file + rename): a reader never sees a
        half-written model."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=".model-", dir=path.parent or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.to_json())
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; models are shared read-only
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> "SlowdownPredictor":
        """Reads and checks a model file; InvalidArgument (field ``model``, value the path)
        saying why it is refused (module docstring)."""
        p = Path(path)
        if not p.is_file():
            raise InvalidArgument("model", str(path), "an existing model file")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgument("model", str(path), f"a readable model file ({e})") from None
        return cls.from_json(text, str(path))

    @classmethod
    def from_json(cls, text: str, where: str = "model") -> "SlowdownPredictor":
        """Parses and checks a model file's text (see :meth:`load`)."""
        def bad(why: str) -> InvalidArgument:
            return InvalidArgument("model", where, why)

        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise bad(f"not a complete JSON model file (truncated or corrupt: {e})") from None
        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
            raise bad(f"not an ElastiCo slowdown model (format must be {MODEL_FORMAT!r})")
        if doc.get("format_version") != FORMAT_VERSION:
            raise bad(f"format_version {doc.get('format_version')!r}; this code reads "
                      f"{FORMAT_VERSION}")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise bad(f"trained on feature schema {doc.get('schema_version')!r}; this code has "
                      f"schema {SCHEMA_VERSION}: retrain it")
        fset = doc.get("feature_set", "identity-v1")
        if fset not in FEATURE_SETS:
            raise bad(f"feature_set {fset!r}; this code has " + ", ".join(FEATURE_SETS))
        names = FEATURE_SETS[fset][1]
        if tuple(doc.get("feature_names", ())) != names:
            raise bad("built for another feature list: retrain it")
        booster_text = doc.get("booster")
        if not isinstance(booster_text, str) or not isinstance(doc.get("version"), str):
            raise bad("missing booster or version")
        digest = hashlib.sha256(booster_text.encode()).hexdigest()
        if digest != doc.get("booster_sha256"):
            raise bad("booster does not match its checksum (corrupt)")
        lgb = _lgb()
        try:
            booster = lgb.Booster(model_str=booster_text)
        except Exception as e:  # lightgbm raises LightGBMError (and others on garbage)
            raise bad(f"booster does not parse ({e})") from None
        if booster.num_feature() != len(names):
            raise bad(f"booster has {booster.num_feature()} features, expected {len(names)}")
        dom = doc.get("domain", [])
        if not (isinstance(dom, list) and all(isinstance(d, str) for d in dom)):
            raise bad("domain must be a list of strings")
        meta = {k: v for k, v in doc.items() if k not in ("booster", "booster_sha256")}
        return cls(booster, meta)


_V2_LOG_PRIOR = _v2.FEATURE_NAMES.index("pair.log_prior")


def _family(p: JobProfile) -> str | None:
    return p.model_family if p.model_family is not None else family_and_batch(p.job_type)[0]


def training_samples(obs: Sequence[Observation]
                     ) -> tuple[list[JobProfile], list[JobProfile], list[str], np.ndarray]:
    """``(victims, partners, gpu_models, slowdowns)``: one sample per measured side of each
    observation (A next to B; B next to A when ``slowdown_b`` is measured)."""
    v: list[JobProfile] = []
    p: list[JobProfile] = []
    g: list[str] = []
    y: list[float] = []
    for o in obs:
        v.append(o.a), p.append(o.b), g.append(o.gpu_model), y.append(o.slowdown_a)
        if o.slowdown_b is not None:
            v.append(o.b), p.append(o.a), g.append(o.gpu_model), y.append(o.slowdown_b)
    return v, p, g, np.asarray(y, dtype=np.float64)


def train(obs: Sequence[Observation], *, params: dict[str, Any] | None = None,
          rounds: int = DEFAULT_ROUNDS, version: str | None = None,
          training_info: dict[str, Any] | None = None,
          feature_set: str = DEFAULT_FEATURE_SET) -> SlowdownPredictor:
    """Trains a model on ``obs`` (at least 2 samples).  ``params`` override
    :data:`DEFAULT_PARAMS`; ``rounds`` boosting rounds (>= 1); ``version`` defaults to
    ``lgbm-<first 8 hex of the booster's SHA-256>``; ``training_info`` is stored under
    ``training`` in the file; ``feature_set`` one of :data:`FEATURE_SETS`.  Targets:
    ``identity-v1`` 1/slowdown; ``activity-v2`` ln(slowdown / prior), L1 loss, so a
    prediction is ``prior x exp(f)`` (docs/predictor.md, "The model").  Raises
    InvalidArgument for too few samples, bad rounds or an unknown feature set."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 100_000:
        raise InvalidArgument("rounds", rounds, "an integer in 1..100000")
    if feature_set not in FEATURE_SETS:
        raise InvalidArgument("feature_set", feature_set, "one of " + ", ".join(FEATURE_SETS))
    victims, partners, gpus, y = training_samples(obs)
    if len(y) < 2:
        raise InvalidArgument("observations", len(obs), "at least one pair with two measured "
                              "slowdowns, or two pairs")
    builder_cls, names, cats = FEATURE_SETS[feature_set]
    families = (sorted({f for prof in victims for f in [_family(prof)] if f is not None})
                if feature_set == "identity-v1" else [])
    builder = builder_cls(families)
    X = builder.matrix(victims, partners, gpus)
    domain: list[str] = []
    if feature_set == "identity-v1":
        label = 1.0 / y
    else:
        label = np.log(y) - X[:, _V2_LOG_PRIOR]
        domain = sorted({_v2.domain_key(v, p) for v, p in zip(victims, partners)})
    prm = {**DEFAULT_PARAMS, **(params or {})}
    # tiny data sets (tests, a first few reports) need leaves that small data can fill
    prm["min_data_in_leaf"] = int(min(prm["min_data_in_leaf"], max(1, len(y) // 4)))
    lgb = _lgb()
    ds = lgb.Dataset(X, label=label, feature_name=[n.replace(".", "__") for n in names],
                     categorical_feature=list(cats), free_raw_data=True,
                     params={"verbose": -1, "min_data_in_bin": 1})
    booster = lgb.train(prm, ds, num_boost_round=rounds)
    text = booster.model_to_string()
    share_varied = any(p.mps_share is not None and p.mps_share < 1.0 for p in victims)
    meta = {
        "format": MODEL_FORMAT, "format_version": FORMAT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "version": version or "lgbm-" + hashlib.sha256(text.encode()).hexdigest()[:8],
        "feature_set": feature_set, "feature_names": list(names), "families": families,
        "domain": domain,
        "share_varied": share_varied, "params": prm, "rounds": rounds,
        "training": {"observations": len(obs), "samples": int(len(y)),
                     "mean_slowdown": float(np.mean(y)), **(training_info or {})},
    }
    return SlowdownPredictor(booster, meta)

