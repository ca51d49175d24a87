"""MIG configurations in shape families (elastico.shapes.mig_configurations / build_family):
only profiles of the GPU model's MIG table, with its compute share and memory, the job's
footprint fitting; services only on instances at least as fast as their requested shape
(worked out by hand from MISO's timings for one case)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from elastico.model import Configuration, Job, JobKind, Request
from elastico.paths import data_file
from elastico.mig import MIG_PROFILES
from elastico.shapes import (FOOTPRINT_GIB, build_family, mig_configurations, pareto_prune,
                             requested_configuration)
from elastico.perf.throughput import ThroughputModel

MODEL = ThroughputModel.bundled()
R50 = "ResNet-50 (batch size 64)"
MIG_MODELS = {"A100-40GB": 40.0, "A100-80GB": 80.0, "H100-80GB": 80.0}
GPU_MODELS = {m: (8, mem) for m, mem in MIG_MODELS.items()}


def job(kind, gpus=1, share=1.0, jt=R50):
    return Job("j", kind, 0.0, 100.0, Request(gpus, share, 4.0, 16.0), job_type=jt,
               slowdown_bound=1.1 if kind is JobKind.SERVICE else 1.5)


@pytest.mark.parametrize("kind,gpus,share", [
    (JobKind.TRAINING, 1, 1.0), (JobKind.TRAINING, 2, 1.0), (JobKind.INFERENCE, 1, 0.22),
    (JobKind.INFERENCE, 2, 1.0), (JobKind.SERVICE, 1, 0.47), (JobKind.SERVICE, 1, 1.0)])
@pytest.mark.parametrize("jt", [R50, "A3C", "Transformer (batch size 128)"])
def test_only_valid_profiles_of_the_model(kind, gpus, share, jt):
    j = job(kind, gpus, share, jt)
    fam = build_family(j, GPU_MODELS, MODEL, mig_models=set(MIG_MODELS), max_configs=64)
    migs = [c for c in fam.configs if c.mig_profile is not None]
    if kind is JobKind.TRAINING and gpus > 1 and not MODEL.multi_gpu_measured(jt):
        assert not migs  # one instance would shrink the gang: Gavel never measured A3C on 2
        return
    assert migs, "every case here has at least one instance that fits"
    for c in migs:
        prof = MIG_PROFILES[c.gpu_model][c.mig_profile]  # KeyError = not a profile of the model
        assert c.gpu_share == pytest.approx(prof.compute_slices / prof.gpu_compute_slices)
        assert c.gpu_mem_gib == pytest.approx(
            MIG_MODELS[c.gpu_model] * prof.memory_slices / prof.gpu_memory_slices)
        assert share * FOOTPRINT_GIB <= c.gpu_mem_gib + 1e-9  # the footprint fits the slice
        if kind is JobKind.INFERENCE:
            assert 1 <= c.num_gpus <= gpus  # MAX_REPLICAS_UP = 1
            one = MODEL.mig(jt, c.mig_profile, c.gpu_model)
            ref = gpus * MODEL.solo(jt, "V100M16", 1, share)
            assert c.throughput == pytest.approx(c.num_gpus * one / ref)
        else:  # one instance: no P2P between MIG instances
            assert c.num_gpus == 1
            assert c.throughput == pytest.approx(
                MODEL.mig(jt, c.mig_profile, c.gpu_model) / MODEL.solo(jt, "V100M16", gpus, share))


def test_no_mig_without_mig_mode_gpus_or_on_models_without_a_table():
    j = job(JobKind.INFERENCE, 1, 0.22)
    fam = build_family(j, GPU_MODELS, MODEL)
    assert all(c.mig_profile is None for c in fam.configs)
    fam = build_family(j, {"V100M16": (8, 16.0), "A100-40GB": (8, 40.0)}, MODEL,
                       mig_models={"V100M16", "A100-40GB"}, max_configs=64)
    assert {c.gpu_model for c in fam.configs if c.mig_profile} == {"A100-40GB"}
    assert mig_configurations(j, "V100M16", 16.0, MODEL) == []


def test_footprint_excludes_small_slices():
    # a whole-GPU training pod has a 16 GiB footprint: A100-40GB's 1g.5gb, 1g.10gb and
    # 2g.10gb are too small; 3g.20gb, 4g.20gb, 7g.40gb fit
    got = {c.mig_profile for c in mig_configurations(job(JobKind.TRAINING), "A100-40GB", 40.0, MODEL)}
    assert got == {"3g.20gb", "4g.20gb", "7g.40gb"}


def _miso_ratio(family: str, g: int) -> float:
    t: dict[int, dict[int, float]] = {}
    slices = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}
    path = data_file("miso-a100-mig-slices", "derived", "mig_slice_batch_time_summary.csv")
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["model"] == family:
                t.setdefault(int(row["batch_size"]), {})[slices[row["mig_slice"]]] = \
                    float(row["median_batch_time_s_excl_first_of_epoch"])
    return float(np.median([d[7] / d[g] for d in t.values() if 7 in d and g in d]))


def test_service_gets_mig_only_when_at_least_as_fast_hand_worked():
    # ResNet-50 -> MISO resnet.  A service asking 0.47 of a GPU runs, on an A100-40GB with MPS,
    # at 1/(p/0.47 + 1 - p) of the whole GPU (p = 0.287: 0.756).  MISO's measured speed
    # relative to 7g: 2g.10gb 0.678 (slower: refused), 3g.20gb 0.891 and 4g.20gb 0.941
    # (faster: offered), 7g 1.0.  The 1g profiles are too small for its 7.5 GiB footprint.
    p = MODEL.parallel_fraction(R50)
    asked = 1.0 / (p / 0.47 + 1.0 - p)
    r2, r3, r4 = (_miso_ratio("resnet", g) for g in (2, 3, 4))
    assert r2 < asked < r3 < r4  # the hand-worked ordering the assertion below relies on
    assert (round(asked, 3), round(r2, 3), round(r3, 3)) == (0.756, 0.678, 0.891)
    svc = job(JobKind.SERVICE, 1, 0.47)
    got = mig_configurations(svc, "A100-40GB", 40.0, MODEL)
    assert [c.mig_profile for c in got] == ["3g.20gb", "4g.20gb", "7g.40gb"]
    req = requested_configuration(svc, "A100-40GB", 40.0, whole_gpus=False, model=MODEL)
    for c in got:
        assert c.throughput >= req.throughput
    assert got[0].throughput / req.throughput == pytest.approx(r3 / asked)


def test_whole_gpu_and_multi_gpu_services():
    # a whole-GPU service: only the whole-GPU instance is as fast; an 8-GPU service: none
    got = mig_configurations(job(JobKind.SERVICE, 1, 1.0), "A100-80GB", 80.0, MODEL)
    assert [c.mig_profile for c in got] == ["7g.80gb"]
    assert mig_configurations(job(JobKind.SERVICE, 8, 1.0), "A100-80GB", 80.0, MODEL) == []


def test_mig_and_mps_configurations_never_dominate_each_other():
    mps = Configuration("mps", "A100-40GB", 1, 1.0, 16.0, 4.0, 8.0, 1.2)
    mig7 = Configuration("mig", "A100-40GB", 1, 1.0, 40.0, 4.0, 8.0, 1.2, mig_profile="7g.40gb")
    worse = Configuration("mps-big", "A100-40GB", 1, 1.0, 40.0, 4.0, 8.0, 1.2)
    # mps dominates the identical-but-bigger MPS config, not the MIG one (other GPUs)
    assert [c.name for c in pareto_prune([mps, mig7, worse])] == ["mps", "mig"]
