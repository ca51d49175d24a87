"""Analytic slowdown model: pair form, additive composition, and the kappa fit on Gavel."""

from pathlib import Path

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.predictor import (
    DEFAULT_KAPPA,
    KAPPA_FULL_ACTIVITY,
    AnalyticSlowdown,
    GavelPair,
    JobProfile,
    NoInterference,
    SlowdownModel,
    compose_additive,
    fit_kappa,
    fit_kappa_from_gavel,
    load_gavel_pairs,
)

PAIRS = Path(__file__).resolve().parents[1] / "data/gavel-throughputs/derived/simulation_throughputs_pairs_flat.csv"


def prof(a, name="j"):
    return JobProfile(name, "training", a, 1.0)


def test_pair_slowdown_hand_worked():
    m = AnalyticSlowdown(kappa=0.5)
    # 1 + 0.5 * 0.6 = 1.3 ; an idle job (activity 0) is not slowed
    assert m.pair_slowdown(prof(0.4), prof(0.6)) == pytest.approx(1.3)
    assert m.pair_slowdown(prof(0.0), prof(0.6)) == 1.0
    assert m.pair_slowdown(prof(0.4), prof(0.0)) == 1.0


def test_gpu_slowdowns_additive_composition():
    m = AnalyticSlowdown(kappa=0.5)
    res = [prof(0.2), prof(0.4), prof(0.0)]
    # job0: 1 + 0.5*(0.4+0) = 1.2 ; job1: 1 + 0.5*0.2 = 1.1 ; job2 idle: 1.0
    np.testing.assert_allclose(m.gpu_slowdowns(res), [1.2, 1.1, 1.0])
    np.testing.assert_allclose(compose_additive(m, res), [1.2, 1.1, 1.0])
    assert m.gpu_slowdowns([prof(0.9)]).tolist() == [1.0]
    assert m.gpu_slowdowns([]).shape == (0,)


def test_protocol_and_no_interference():
    assert isinstance(AnalyticSlowdown(), SlowdownModel)
    assert isinstance(NoInterference(), SlowdownModel)
    n = NoInterference()
    assert n.pair_slowdown(prof(1), prof(1)) == 1.0
    assert n.gpu_slowdowns([prof(1)] * 3).tolist() == [1.0, 1.0, 1.0]


def test_bad_inputs():
    with pytest.raises(InvalidArgument, match="gpu_activity"):
        JobProfile("x", "training", 1.5)
    with pytest.raises(InvalidArgument, match="mem_gib"):
        JobProfile("x", "training", 0.5, -1)
    with pytest.raises(InvalidArgument, match="kappa"):
        AnalyticSlowdown(kappa=-0.1)


def test_a_profile_built_directly_has_the_bounds_of_the_csv_and_grpc_paths():
    from elastico.predictor.schema import MAX_BATCH_SIZE, MAX_MEM_GIB, check_job_field

    # 5000 GiB is no GPU's memory (a byte count or a typo): refused by the readers' check...
    with pytest.raises(InvalidArgument, match="mem_gib"):
        check_job_field("mem_gib", 5000.0)
    # ...and now by the profile itself, naming the field, the value and the range
    with pytest.raises(InvalidArgument, match=r"profile\.mem_gib: 5000 .*\[0, 1024\]"):
        JobProfile("x", "training", 0.5, mem_gib=5000)
    with pytest.raises(InvalidArgument, match="profile.mem_gib"):
        JobProfile("x", "training", 0.5, mem_gib=MAX_MEM_GIB + 0.5)
    assert JobProfile("x", "training", 0.5, mem_gib=MAX_MEM_GIB).mem_gib == 1024.0
    with pytest.raises(InvalidArgument, match="profile.batch_size"):
        JobProfile("x", "training", 0.5, batch_size=MAX_BATCH_SIZE + 1)
    assert JobProfile("x", "training", 0.5, batch_size=MAX_BATCH_SIZE).batch_size == 2**20


def test_fit_recovers_known_kappa_on_synthetic_pairs():
    rng = np.random.default_rng(0)
    act = {f"t{i}": float(a) for i, a in enumerate(rng.uniform(0.05, 1.0, 12))}
    pairs = [GavelPair(a, b, 1.0 + 0.7 * act[b]) for a in act for b in act]
    assert fit_kappa(pairs, act.__getitem__) == pytest.approx(0.7, rel=1e-12)
    # hand-worked: x = (1, 0.5), y = (0.8, 0.6): kappa = (0.8 + 0.3) / (1 + 0.25) = 0.88
    act2 = {"a": 1.0, "b": 0.5}
    two = [GavelPair("a", "a", 1.8), GavelPair("a", "b", 1.6)]
    assert fit_kappa(two, act2.__getitem__) == pytest.approx(0.88)
    with pytest.raises(InvalidArgument):
        fit_kappa([GavelPair("a", "b", 2.0)], lambda t: 0.0)


def test_gavel_loader_filters_caveat_rows():
    pairs = load_gavel_pairs(PAIRS)
    # 676 V100 scale-1 entries - 40 both-zero - 80 with colocated == isolated (PROVENANCE.md)
    assert len(pairs) == 556
    assert all(p.slowdown_a > 1.0 for p in pairs)


def test_gavel_fit_full_activity_is_the_mean_extra_slowdown():
    pairs = load_gavel_pairs(PAIRS)
    k = fit_kappa_from_gavel(PAIRS)
    assert k == pytest.approx(np.mean([p.slowdown_a - 1 for p in pairs]), rel=1e-12)
    assert k == pytest.approx(KAPPA_FULL_ACTIVITY, rel=1e-12)
    assert 0.1 < k < 5.0


def test_default_kappa_is_the_gavel_fit():
    throughput = pytest.importorskip("elastico.perf.throughput")
    model = throughput.ThroughputModel.bundled()
    k = fit_kappa_from_gavel(PAIRS, model.parallel_fraction)
    assert np.isfinite(k) and 0.1 < k < 5.0
    assert k == pytest.approx(DEFAULT_KAPPA, rel=1e-9), (
        f"the throughput model's parallel fractions changed: refresh DEFAULT_KAPPA to {k!r}"
    )
