"""The bundled observations are exactly the documented conversion of Gavel's measured pairs,
counted here independently from Gavel's original JSON."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from elastico.cli import main
from elastico.predictor.gavel import GAVEL_GPU, convert_gavel_pairs
from elastico.predictor.learned import BUNDLED_MODEL, bundled_predictor
from elastico.predictor.observations import bundled_observations, file_sha256, read_observations

ROOT = Path(__file__).resolve().parents[1]
OBS_DIR = ROOT / "data" / "gavel-pair-observations"


def _from_json():
    """Unordered scale-1 pairs per worker straight from simulation_throughputs.json:
    {(worker, frozenset(jobs)): (iso_a, iso_b, col_a, col_b) oriented as first met}."""
    raw = json.loads((ROOT / "data/gavel-throughputs/simulation_throughputs.json").read_text())
    out = {}
    for w in GAVEL_GPU:
        for key, entry in raw[w].items():
            a, sa = ast.literal_eval(key)
            if sa != 1:
                continue
            for other, val in entry.items():
                if other == "null":
                    continue
                b, sb = ast.literal_eval(other)
                if sb != 1 or val == [0.0, 0.0]:
                    continue
                k = (w, frozenset((a, b)))
                out.setdefault(k, (entry["null"], raw[w][other]["null"], val[0], val[1]))
    return out


def test_bundled_files_are_the_conversion(tmp_path):
    clean, suspect = convert_gavel_pairs()
    assert read_observations(OBS_DIR / "observations.csv") == clean
    assert read_observations(OBS_DIR / "suspect.csv") == suspect
    assert main(["predictor", "convert-gavel", "--out-dir", str(tmp_path)]) == 0
    for name in ("observations.csv", "suspect.csv"):
        assert (tmp_path / name).read_bytes() == (OBS_DIR / name).read_bytes()


def test_counts_and_slowdowns_match_gavels_json():
    pairs = _from_json()
    # usable = neither side's co-located throughput reaches its isolated one
    usable = {k: v for k, v in pairs.items() if v[2] < v[0] and v[3] < v[1]}
    clean, suspect = convert_gavel_pairs()
    assert len(clean) == len(usable) and len(suspect) == len(pairs) - len(usable)
    per_gpu = {g: sum(1 for k in usable if k[0] == w) for w, g in GAVEL_GPU.items()}
    assert {g: sum(1 for o in clean if o.gpu_model == g) for g in per_gpu} == per_gpu
    # every suspect pair is a V100 one (PROVENANCE: the artefacts are V100 entries)
    assert {o.gpu_model for o in suspect} == {"V100M16"}
    for o in clean:
        w = next(w for w, g in GAVEL_GPU.items() if g == o.gpu_model)
        ia, ib, ca, cb = pairs[(w, frozenset((o.a.job_type, o.b.job_type)))]
        if o.a.job_type != o.b.job_type and ia != o.a.solo_tput:
            ia, ib, ca, cb = ib, ia, cb, ca  # met in the other orientation
        assert o.slowdown_a == pytest.approx(ia / ca, rel=1e-12)
        assert o.slowdown_b == pytest.approx(ib / cb, rel=1e-12)
        assert o.a.solo_tput == ia and o.a.kind == "training" and o.a.sharing == "mps"
        assert o.a.sm_activity is None and o.a.precision is None  # Gavel recorded neither


def test_bundled_model_was_trained_on_the_bundled_data():
    m = bundled_predictor()
    assert m.meta["training"]["data_sha256"] == file_sha256(OBS_DIR / "observations.csv")
    assert m.meta["training"]["observations"] == len(bundled_observations())
    report = json.loads(BUNDLED_MODEL.with_suffix(".report.json").read_text())
    assert report["model_version"] == m.version
    assert report["data"]["sha256"] == m.meta["training"]["data_sha256"]
    assert set(report["evaluation"]) == {"leave-one-model-out", "kfold", "job-type-kfold"}
