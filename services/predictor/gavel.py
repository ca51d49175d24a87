"""Gavel's measured pair throughputs -> observations (data/gavel-pair-observations/).

Source: ``data/gavel-throughputs/derived/simulation_throughputs_pairs_flat.csv`` (Gavel,
Narayanan et al., OSDI'20, MIT; the flat copy of ``simulation_throughputs.json``).  Rules
(data/gavel-pair-observations/PROVENANCE.md says the same):

* worker types k80, p100, v100 (the ``*_unconsolidated`` copies hold nothing new at scale 1),
  scale factor 1 on both sides (every multi-GPU pair entry is [0, 0]); GPU model K80, P100,
  V100M16 (Gavel's V100 memory size is not recorded; ASSUMED 16 GB -- no feature depends on it);
* ``both_zero`` entries (pair not run) are skipped;
* each unordered pair appears twice, mirrored; one row per unordered pair, in the orientation
  first met in the file; a mirror that disagrees marks the pair suspect;
* ``slowdown = isolated / co-located throughput`` (= 1 / normalized throughput) for each side;
* SUSPECT (written to ``suspect.csv``, not used for training): a side whose co-located
  throughput equals (or exceeds) its isolated throughput -- the PROVENANCE caveat (80 V100
  entries, likely capped values or measurement artefacts), or a disagreeing mirror.

Per-job features: job_type (Gavel's name), kind ``training`` (all Gavel jobs train),
model_family and batch_size (parsed from the name; A3C and CycleGAN carry none), sharing
``mps`` (Gavel's runtime starts CUDA MPS for co-located jobs), solo_tput = Gavel's isolated
steps/s on that worker.  Missing: precision, mps_share (Gavel sets no limit that the files
record), every hardware counter (Gavel recorded none).

Who calls it: ``elastico predictor convert-gavel`` and tests/test_predictor_data.py (which
checks that the bundled files are exactly this conversion).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from elastico.paths import data_file
from elastico.predictor.features import family_and_batch
from elastico.predictor.observations import Observation, analytic_activity
from elastico.predictor.profile import JobProfile

__all__ = ["GAVEL_GPU", "convert_gavel_pairs"]

#: Gavel worker type -> GPU model of :data:`elastico.predictor.schema.GPU_SPECS`.
GAVEL_GPU = {"k80": "K80", "p100": "P100", "v100": "V100M16"}


def _profile(job: str, tput: float, gpu: str) -> JobProfile:
    fam, bs = family_and_batch(job)
    p = JobProfile(job, "training", 1.0, gpu_model=gpu, model_family=fam, batch_size=bs,
                   sharing="mps", solo_tput=tput)
    return replace(p, gpu_activity=analytic_activity(p))


def convert_gavel_pairs(pairs_csv: str | Path | None = None
                        ) -> tuple[list[Observation], list[Observation]]:
    """``(clean, suspect)`` observations from Gavel's flat pairs CSV (module docstring);
    default: the bundled file.  Deterministic: file order."""
    path = pairs_csv or data_file("gavel-throughputs", "derived",
                                  "simulation_throughputs_pairs_flat.csv")
    entries: dict[tuple[str, str, str], tuple[float, float, float, float]] = {}
    order: list[tuple[str, str, str]] = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            w = row["worker_type"]
            if w not in GAVEL_GPU or row["scale_factor_a"] != "1" or row["scale_factor_b"] != "1":
                continue
            if row["both_zero"] not in ("0", "False", "false", ""):
                continue
            key = (w, row["job_a"], row["job_b"])
            entries[key] = (float(row["isolated_tput_a"]), float(row["isolated_tput_b"]),
                            float(row["colocated_tput_a"]), float(row["colocated_tput_b"]))
            order.append(key)
    clean: list[Observation] = []
    suspect: list[Observation] = []
    done: set[tuple[str, frozenset[str]]] = set()
    for key in order:
        w, a, b = key
        ukey = (w, frozenset((a, b)))
        if ukey in done:
            continue
        done.add(ukey)
        ia, ib, ca, cb = entries[key]
        mirror = entries.get((w, b, a))
        reasons = []
        if ca <= 0 or cb <= 0:
            reasons.append("zero co-located throughput")
        if ca >= ia or cb >= ib:
            reasons.append("co-located throughput >= isolated")
        if mirror is not None and mirror != (ib, ia, cb, ca):
            reasons.append("mirror entry disagrees")
        if ca <= 0 or cb <= 0:
            continue  # no slowdown can be computed; counted in PROVENANCE
        gpu = GAVEL_GPU[w]
        src = f"gavel:{w}" + (f" suspect: {'; '.join(reasons)}" if reasons else "")
        o = Observation(_profile(a, ia, gpu), _profile(b, ib, gpu), gpu, ia / ca, ib / cb, src)
        (suspect if reasons else clean).append(o)
    return clean, suspect
