"""A job's DRAM activity has one source in the simulator: the roofline
(:func:`elastico.perf.contention.roofline_dram`, ``(1 - phi) x SOLO_BW_EFFICIENCY`` while it
computes, ``phi`` its roofline compute-bound share on the GPU).  The activity model's
``dram_level``, the simulated node's solo measurement, the utilisation meter's
``dcgm_dram_active`` and the contention truth's ``Demand.dram`` all read it (docs/model.md 10.).
"""

from __future__ import annotations

import pytest

from elastico.errors import InvalidArgument
from elastico.model import Configuration, Job, JobKind, Node, Request
from elastico.perf import contention as cm
from elastico.predictor import JobProfile
from elastico.predictor.prior import prior_pair
from elastico.sim.contention_truth import GroundTruth
from elastico.sim.simulator import _measure_solo
from elastico.sim.utilisation import UtilisationMeter

TRANSFORMER = "Transformer (batch size 64)"


def _job(i: int, job_type: str, share: float = 1.0) -> Job:
    return Job(f"j{i}", JobKind.TRAINING, 0.0, 1000.0, Request(1, share, 1.0, 2.0),
               job_type=job_type, slowdown_bound=1.5)


def _config(gpu: str, share: float = 1.0) -> Configuration:
    return Configuration(f"1x{gpu}@{share:g}", gpu, 1, share, 10.0, 1.0, 2.0, 1.0)


def test_dram_rule_by_hand_for_a_transformer_on_two_gpus():
    # Transformer's roofline compute share at the reference V100M16: 0.7608244714 (Sia bert's
    # per-sample fit, TrainingSpeedModel.compute_share).  On the V100 itself:
    # DRAM = (1 - 0.7608244714) x 0.9 = 0.2152579757
    assert cm.job_compute_bound(TRANSFORMER, "V100M16") == pytest.approx(0.7608244714)
    assert cm.roofline_dram(cm.job_compute_bound(TRANSFORMER, "V100M16")) \
        == pytest.approx(0.2152579757, abs=1e-9)
    # On an A100-40GB (catalogue, the training precision's peak: A100 TF32 156 vs V100 FP32
    # 15.7 TFLOP/s; HBM 1555 vs 900 GB/s): compute time x 15.7/156, bandwidth time x
    # 900/1555, so phi = 0.76082 x 0.100641 / (0.76082 x 0.100641 + 0.23918 x 0.578778)
    #                  = 0.0765700 / (0.0765700 + 0.1384300) = 0.356140
    # DRAM = (1 - 0.356140) x 0.9 = 0.579474: more bandwidth-bound on the faster-compute GPU
    a = 0.7608244714 * 15.7 / 156.0
    b = (1 - 0.7608244714) * 900.0 / 1555.0
    assert a == pytest.approx(0.0765700, abs=1e-6) and b == pytest.approx(0.1384300, abs=1e-6)
    phi = cm.job_compute_bound(TRANSFORMER, "A100-40GB")
    assert phi == pytest.approx(0.356140, abs=1e-5)
    assert cm.roofline_dram(phi) == pytest.approx(0.579474, abs=1e-5)
    # the trace's anonymised G2: no catalogue figures, runs as the reference
    assert cm.roofline_dram(cm.job_compute_bound(TRANSFORMER, "G2")) \
        == pytest.approx(0.2152579757, abs=1e-9)
    # the activity model's profile carries it
    p = UtilisationMeter([Node("n", "A100-40GB", 1, 16, 32, 128)]).profile(
        _job(0, TRANSFORMER), _config("A100-40GB"), 1)
    assert p.dram_level == pytest.approx(0.579474, abs=1e-5)
    with pytest.raises(InvalidArgument, match="compute_bound"):
        cm.roofline_dram(1.5)


@pytest.mark.parametrize("gpu,job_type", [("A100-40GB", TRANSFORMER), ("G2", TRANSFORMER),
                                          ("V100M16", "ResNet-50 (batch size 64)")])
def test_measurement_meter_and_truth_agree_for_a_solo_job(gpu, job_type):
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.perf.throughput import ThroughputModel
    from elastico.predictor import NoInterference
    from elastico.sim.simulator import simulate

    node = Node("n0", gpu, 1, 16.0, 32.0, 128.0)
    job, config = _job(0, job_type), _config(gpu)
    meter = UtilisationMeter([node])
    p = meter.profile(job, config, 1)
    assert p.sync == 0.0  # one GPU: compute = kernel
    # (b) the simulated node's solo measurement over a whole number of steps: no phase noise
    busy, dram = _measure_solo(meter, job, config, 1, 100 * p.step_s)
    # (d) the truth's demand: DRAM while busy x busy = the time-average DRAM activity
    d = GroundTruth().demand(job, config, 1, False, meter.profile)
    # (c) the meter: the job alone on the whole GPU for a window
    env = PolicyEnv(nodes=[node], throughput=ThroughputModel.bundled(), slowdown=NoInterference())
    pol = make_policy("exclusive", env)
    res = simulate([node], [Job("j0", JobKind.TRAINING, 0.0, 100.0, Request(1, 1.0, 1.0, 2.0),
                                job_type=job_type, slowdown_bound=1.5)], pol,
                   activity=lambda j, c: pol.catalog.profile(j, c).gpu_activity,
                   window=(0.0, 50.0))
    want = cm.roofline_dram(cm.job_compute_bound(job_type, gpu)) * p.kernel
    assert dram == pytest.approx(want, rel=1e-9)
    assert d.busy * d.dram == pytest.approx(want, rel=1e-9)
    assert d.busy == pytest.approx(busy, rel=1e-9)
    assert res.metrics["dcgm_dram_active"] == pytest.approx(want, rel=1e-6)


def test_two_bandwidth_bound_profiled_jobs_under_mps_are_predicted_to_contend():
    # Two ResNet-50 jobs (roofline compute share 0: bandwidth-bound) with 50 % MPS shares on a
    # G2 GPU, each profiled alone by the simulated node.  The truth's DRAM demands sum past 1
    # (0.9 + 0.9), so the truth slows them; the prior (which reads only the measured counters:
    # D = max(1, w_a + w_b, i_a + i_b), i = dram / busy) must then see i_a + i_b > 1 too.
    # Before (DRAM = 0.5 x the share-capped SM level): i <= 0.25 each, D = max(1, 1, <= 0.5) = 1,
    # a predicted slowdown of exactly 1.0 while the truth ran such pairs at 1.64-1.98.
    gpu, share = "G2", 0.5
    meter = UtilisationMeter([Node("n0", gpu, 1, 16.0, 32.0, 128.0)])
    truth = GroundTruth()
    profiles, demands = [], []
    for i in (0, 1):
        job, config = _job(i, "ResNet-50 (batch size 64)", share), _config(gpu, share)
        p = meter.profile(job, config, 1)
        busy, dram = _measure_solo(meter, job, config, 1, 60.0)
        profiles.append(JobProfile(job.job_type, "training", busy, 4.0, gpu, sharing="mps",
                                   mps_share=share, sm_activity=busy, dram_activity=dram))
        demands.append(truth.demand(job, config, 1, False, meter.profile))
        assert p.level > 0 and busy > 0
    assert sum(d.dram for d in demands) > 1.0
    assert cm.slowdowns(demands, "mps").min() > 1.0
    u = [pr.sm_activity for pr in profiles]
    i_sum = sum(pr.dram_activity / pr.sm_activity for pr in profiles)
    assert i_sum > 1.0
    got = prior_pair(profiles[0], profiles[1])
    assert got == pytest.approx(1.0 + u[0] * u[1] * (min(2.0, i_sum) - 1.0))
    assert got > 1.0
