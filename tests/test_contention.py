"""The contention model (elastico.perf.contention) and the simulator's ground truth built on it
(elastico.sim.contention_truth): worked values by hand, bounds, monotonicity, refusals, and
how it composes with Gavel's measured pairs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node, Request
from elastico.perf import contention as cm
from elastico.perf.contention import (ContentionParams, Demand, PARAM_RANGES, PRESETS,
                                      contention_params, pair_slowdown, slowdowns)

NO_SWITCH = ContentionParams(switch_overhead=0.0)


# ------------------------------------------------------------------------------ by hand
def test_time_slicing_two_jobs_half_busy_by_hand():
    # each busy b = 0.5, no switch cost.  While i is busy its partner has work with chance q,
    # then i runs at half speed: E[g] = 1 + q; S = (1 - b) + b (1 + q) = 1 + q/2; and
    # q = b E[g] / S = (1 + q) / (2 + q)  =>  q^2 + q - 1 = 0  =>  q = (sqrt 5 - 1) / 2.
    a = Demand(0.5, 0.8, 0.3, 0.6)
    q = (math.sqrt(5) - 1) / 2
    assert slowdowns([a, a], "time-slicing", NO_SWITCH) == pytest.approx([1 + q / 2] * 2)


def test_time_slicing_half_busy_beside_always_busy_by_hand():
    # partner always has work (q_j = 1): the victim's GPU work runs at half speed, S_i = 0.5 +
    # 0.5 * 2 = 1.5, so it has work 0.5 * 2 / 1.5 = 2/3 of the time; the partner's S_j = 1 + 2/3
    v, p = Demand(0.5, 0.5, 0.2, 0.5), Demand(1.0, 0.9, 0.4, 0.5)
    assert slowdowns([v, p], "time-slicing", NO_SWITCH) == pytest.approx([1.5, 5 / 3])


def test_time_slicing_both_always_busy_is_round_robin_k():
    b = Demand(1.0, 0.8, 0.4, 0.6)
    # 2 (1 + o) per turn, held to the round-robin bound k = 2
    assert slowdowns([b, b], "time-slicing") == pytest.approx([2.0, 2.0])
    assert slowdowns([b, b, b], "time-slicing", NO_SWITCH) == pytest.approx([3.0] * 3)


def test_time_slicing_switch_cost_by_hand():
    # b = 0.5, switch overhead o: E[g] = 1 + q (1 + 2o), S = 1 + b q (1 + 2o) / ... solved as
    # the fixed point q = b (1 + c q) / (1 - b + b (1 + c q)), c = 1 + 2 o
    o = 0.1
    c = 1 + 2 * o
    # q (1 + 0.5 c q) = 0.5 (1 + c q)  =>  0.5 c q^2 + (1 - 0.5 c) q - 0.5 = 0
    A, B, C = 0.5 * c, 1 - 0.5 * c, -0.5
    q = (-B + math.sqrt(B * B - 4 * A * C)) / (2 * A)
    a = Demand(0.5, 0.8, 0.3, 0.6)
    assert slowdowns([a, a], "time-slicing", ContentionParams(switch_overhead=o)) \
        == pytest.approx([1 + 0.5 * c * q] * 2)


def test_mps_pair_within_the_gpu_is_not_slowed():
    # SM caps 0.5 + 0.5 <= 1 and bandwidth 0.3 + 0.3 <= bw_efficiency 0.85: no contention
    c = Demand(1.0, 0.8, 0.3, 0.5, share=0.5)
    assert slowdowns([c, c], "mps") == pytest.approx([1.0, 1.0])


def test_mps_pair_always_busy_by_hand():
    # D = 0.8 + 0.8 = 1.6, W = 0.4 + 0.4 = 0.8 = bw_efficiency: 0.6 * 1.6 + 0.4 * 1 = 1.36
    b = Demand(1.0, 0.8, 0.4, 0.6)
    p = ContentionParams(bw_efficiency=0.8)
    assert slowdowns([b, b], "mps", p) == pytest.approx([1.36, 1.36])
    # bandwidth over: W = 1.0 -> 1.0 / 0.8 = 1.25 on the bandwidth-bound 0.4
    b2 = Demand(1.0, 0.8, 0.5, 0.6)
    assert slowdowns([b2, b2], "mps", p) == pytest.approx([0.6 * 1.6 + 0.4 * 1.25] * 2)


def test_mps_pair_half_busy_by_hand():
    # compute-bound (phi 1), sm 0.8 each, b = 0.5: E[g] = 1 + 0.6 q, S = 1 + 0.3 q,
    # q = 0.5 (1 + 0.6 q) / (1 + 0.3 q)  =>  0.3 q^2 + 0.7 q - 0.5 = 0
    q = (-0.7 + math.sqrt(0.49 + 0.6)) / 0.6
    a = Demand(0.5, 0.8, 0.0, 1.0)
    assert slowdowns([a, a], "mps") == pytest.approx([1 + 0.3 * q] * 2)


def test_lone_job_mig_and_idle_jobs_are_not_slowed():
    b = Demand(1.0, 1.0, 0.9, 0.3)
    for mech in cm.MECHANISMS:
        assert slowdowns([b], mech).tolist() == [1.0]
        assert slowdowns([], mech).shape == (0,)
    assert slowdowns([b, b, b], "mig").tolist() == [1.0, 1.0, 1.0]
    idle = Demand(0.0, 1.0, 0.9, 0.3)
    for mech in ("mps", "time-slicing"):
        assert slowdowns([b, idle], mech).tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------ properties
def _random_demand(rng):
    return Demand(*rng.random(4), share=float(rng.uniform(0.1, 1.0)))


def test_bounds_on_random_residents():
    rng = np.random.default_rng(0)
    for _ in range(150):
        k = int(rng.integers(2, 6))
        ds = [_random_demand(rng) for _ in range(k)]
        params = ContentionParams(float(rng.uniform(0, 0.25)), float(rng.uniform(0.6, 1.0)))
        ts = slowdowns(ds, "time-slicing", params)
        assert np.all(ts >= 1.0) and np.all(ts <= k + 1e-9)
        mps = slowdowns(ds, "mps", params)
        assert np.all(mps >= 1.0) and np.all(np.isfinite(mps))


@pytest.mark.parametrize("mech", ["time-slicing", "mps"])
@pytest.mark.parametrize("field", ["busy", "sm", "dram"])
def test_monotone_in_the_partners_activity(mech, field):
    victim = Demand(0.7, 0.6, 0.5, 0.5)
    last = 1.0
    for x in np.linspace(0.0, 1.0, 11):
        base = dict(busy=0.8, sm=0.7, dram=0.5, compute_bound=0.5)
        base[field] = float(x)
        s = pair_slowdown(victim, Demand(**base), mech)
        assert s >= last - 1e-12
        last = s
    assert last > 1.0


def test_more_contention_parameters_never_slow_less():
    ds = [Demand(0.9, 0.7, 0.6, 0.3), Demand(0.6, 0.9, 0.5, 0.5), Demand(0.8, 0.4, 0.7, 0.2)]
    lo, hi = (contention_params(x) for x in ("low", "high"))
    for mech in ("mps", "time-slicing"):
        assert np.all(slowdowns(ds, mech, lo) <= slowdowns(ds, mech, hi) + 1e-12)


def test_many_partners_use_the_mean_field_and_stay_bounded():
    ds = [Demand(0.3, 0.2, 0.1, 0.5, share=0.08)] * (cm.MAX_EXACT_PARTNERS + 3)
    s = slowdowns(ds, "mps")
    assert np.allclose(s, s[0]) and s[0] >= 1.0
    t = slowdowns(ds, "time-slicing")
    assert np.all(t <= len(ds)) and np.all(t > 1.0)


# ------------------------------------------------------------------------------ inputs
def test_compute_bound_share_moves_with_the_roofline_by_hand():
    # V100 FP32 15.7 TFLOP/s, 900 GB/s; A100 TF32 156, 1555: a = 0.6 * 15.7/156,
    # b = 0.4 * 900/1555, phi = a / (a + b)
    a, b = 0.6 * 15.7 / 156, 0.4 * 900 / 1555
    assert cm.compute_bound_on(0.6, "A100-40GB") == pytest.approx(a / (a + b))
    assert cm.compute_bound_on(0.6, "V100M16") == pytest.approx(0.6)
    assert cm.compute_bound_on(0.6, "G2") == 0.6  # no catalogue figures: unchanged
    assert cm.compute_bound_on(0.6, "H100-SXM") < cm.compute_bound_on(0.6, "A100-40GB")


def test_roofline_demand():
    d = cm.roofline_demand(0.7, 0.8, 0.25, share=0.5)
    assert d.dram == pytest.approx(0.75 * cm.SOLO_BW_EFFICIENCY)
    assert (d.busy, d.sm, d.compute_bound, d.share) == (0.7, 0.8, 0.25, 0.5)


@pytest.mark.parametrize("name", list(PARAM_RANGES))
def test_parameters_outside_their_range_are_refused(name):
    lo, hi = PARAM_RANGES[name]
    for bad in (lo - 0.01, hi + 0.01, math.nan, "x", True):
        with pytest.raises(InvalidArgument) as e:
            ContentionParams(**{name: bad})
        assert e.value.field == f"contention.{name}"
        assert f"[{lo:g}, {hi:g}]" in e.value.allowed


def test_contention_params_from_text():
    assert contention_params(None) == ContentionParams()
    for name, values in PRESETS.items():
        assert contention_params(name) == ContentionParams(**values)
        for k, v in values.items():  # every preset inside the documented range
            assert PARAM_RANGES[k][0] <= v <= PARAM_RANGES[k][1]
    got = contention_params("switch_overhead=0.1, bw_efficiency=0.7")
    assert (got.switch_overhead, got.bw_efficiency) == (0.1, 0.7)
    assert contention_params("bw_efficiency=0.9").switch_overhead \
        == PRESETS["default"]["switch_overhead"]
    for bad in ("", "medium", "speed=1", "bw_efficiency", "bw_efficiency=0.9,bw_efficiency=0.8"):
        with pytest.raises(InvalidArgument) as e:
            contention_params(bad)
        assert e.value.field == "contention" and "low, default, high" in e.value.allowed
    with pytest.raises(InvalidArgument) as e:
        contention_params("bw_efficiency=0.3")
    assert e.value.field == "contention.bw_efficiency"
    with pytest.raises(InvalidArgument) as e:
        contention_params("switch_overhead=abc")
    assert e.value.field == "contention.switch_overhead"


def test_bad_demands_and_mechanisms_are_refused():
    for kw, field in ((dict(busy=1.2), "demand.busy"), (dict(sm=-0.1), "demand.sm"),
                      (dict(dram=math.inf), "demand.dram"),
                      (dict(compute_bound=2), "demand.compute_bound"),
                      (dict(share=0.0), "demand.share")):
        base = dict(busy=0.5, sm=0.5, dram=0.5, compute_bound=0.5)
        with pytest.raises(InvalidArgument) as e:
            Demand(**{**base, **kw})
        assert e.value.field == field
    with pytest.raises(InvalidArgument) as e:
        slowdowns([Demand(1, 1, 1, 1)] * 2, "vgpu")
    assert e.value.field == "mechanism"
    with pytest.raises(InvalidArgument):
        slowdowns([Demand(1, 1, 1, 1), (1, 1, 1, 1)], "mps")


# ------------------------------------------------------------------------------ ground truth
R50 = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"


def _state(gpu_model, jobs, share):
    """Two jobs placed on one GPU of ``gpu_model`` at ``share`` each; (state, live)."""
    from elastico.perf.throughput import ThroughputModel
    from elastico.placer.placement import ClusterState
    from elastico.placer.policies import PolicyEnv
    from elastico.placer.policies.common import JobCatalog
    from elastico.predictor import NoInterference
    from elastico.shapes import requested_configuration

    tm = ThroughputModel.bundled()
    mem = {"A100-40GB": 40.0, "V100M16": 16.0}[gpu_model]
    nodes = [Node("n0", gpu_model, 1, mem, 64.0, 512.0)]
    cat = JobCatalog(PolicyEnv(nodes=nodes, throughput=tm, slowdown=NoInterference()))
    state = ClusterState(nodes, ())
    live = {}
    for j in jobs:
        c = requested_configuration(j, gpu_model, mem, whole_gpus=False, model=tm)
        got = state.place(j.id, c, cat.profile(j, c), 100.0, NoInterference())
        assert got.assignment is not None, got.reason
        live[j.id] = SimpleNamespace(job=j, config=c)
    return state, live


def _jobs(share, types=(R50, LM)):
    return [Job(f"j{i}", JobKind.TRAINING, 0.0, 100.0, Request(1, share, 1.0, 2.0),
                job_type=t) for i, t in enumerate(types)]


def test_truth_on_an_unmeasured_gpu_is_the_contention_model():
    from elastico.perf.activity import draw_profile
    from elastico.predictor.learned import MeasuredSlowdown
    from elastico.predictor.observations import bundled_observations
    from elastico.sim.contention_truth import GroundTruth

    jobs = _jobs(0.5)
    state, live = _state("A100-40GB", jobs, 0.5)
    measured = MeasuredSlowdown.from_observations(bundled_observations())
    truth = GroundTruth(measured)

    def prof(job, config, nodes):
        return draw_profile(job.id, seed=0, gpus=1, nodes=nodes, gpu_model=config.gpu_model,
                            data_parallel=True)

    for ts, mech in ((False, "mps"), (True, "time-slicing")):
        got = truth.slowdowns_of(state, live, ts, prof)
        want = []
        for j in jobs:  # the demand built by hand from the profile and the roofline
            p = prof(j, live[j.id].config, 1)
            phi = cm.compute_bound_on(cm.job_compute_bound(j.job_type, None), "A100-40GB")
            want.append(Demand(p.kernel, p.level, (1 - phi) * cm.SOLO_BW_EFFICIENCY, phi,
                               1.0 if ts else 0.5))
        assert [got[j.id] for j in jobs] == pytest.approx(slowdowns(want, mech).tolist())
        assert truth.by_model >= 1 and truth.by_measured == 0
    # before this model, the truth here was 1.0 under MPS: two bandwidth-bound jobs (the
    # roofline on an A100) whose bandwidth sums past the GPU's now slow each other
    assert min(truth.slowdowns_of(state, live, False, prof).values()) > 1.2


def test_truth_on_a_measured_gpu_is_gavels_pairs():
    from elastico.perf.activity import draw_profile
    from elastico.predictor.learned import MeasuredSlowdown, TimeSlicedTruth
    from elastico.predictor.observations import bundled_observations
    from elastico.sim.contention_truth import GroundTruth

    jobs = _jobs(0.5)
    state, live = _state("V100M16", jobs, 0.5)
    measured = MeasuredSlowdown.from_observations(bundled_observations())
    truth = GroundTruth(measured, contention_params("high"))
    prof = lambda job, config, nodes: draw_profile(job.id)  # noqa: E731
    profiles = state.book.gpu_profiles(0)[0]
    got = truth.slowdowns_of(state, live, False, prof)
    assert [got[j.id] for j in jobs] == pytest.approx(measured.gpu_slowdowns(profiles).tolist())
    got = truth.slowdowns_of(state, live, True, prof)
    assert [got[j.id] for j in jobs] == pytest.approx(
        TimeSlicedTruth(measured).gpu_slowdowns(profiles).tolist())
    assert truth.by_measured == 2 and truth.by_model == 0


def test_truth_without_measured_pairs_uses_the_model_everywhere():
    from elastico.sim.contention_truth import GroundTruth

    from elastico.perf.activity import draw_profile

    state, live = _state("V100M16", _jobs(0.5), 0.5)
    truth = GroundTruth(None)
    got = truth.slowdowns_of(state, live, True, lambda j, c, n: draw_profile(j.id))
    assert all(1.0 <= s <= 2.0 for s in got.values()) and truth.by_model == 1
    # the same GPU again (its answer now cached) counts again, under the same rule: the
    # share truth_gpus_contention_model reports is 1 here, not the share of cache misses
    again = truth.slowdowns_of(state, live, True, lambda j, c, n: draw_profile(j.id))
    assert again == got
    assert (truth.gpu_evaluations, truth.by_model, truth.by_mixed, truth.by_measured) == (2, 2, 0, 0)


def test_slowdown_models_refuses_bad_contention_before_building():
    from elastico.sim.simulator import slowdown_models

    with pytest.raises(InvalidArgument) as e:
        slowdown_models("analytic", "bw_efficiency=2")
    assert e.value.field == "contention.bw_efficiency"


def test_llm_prefill_is_compute_bound_and_decode_bandwidth_bound():
    from elastico import llm_job as LJ
    from elastico import llm_shapes as LS
    from elastico.perf import llm as P
    from elastico.sim.contention_truth import GroundTruth

    l8 = P.llm_model("Llama-3-8B")
    demands = {}
    for name, (inp, out) in {"prefill": (2048, 16), "decode": (128, 1024)}.items():
        j = LJ.llm_job(name, l8, LJ.requests_work([(inp, out, 200)]), reference_gpu="A100-80GB")
        c = LS.llm_configuration(j, "A100-80GB", 80.0, 1, 1)
        demands[name] = GroundTruth().demand(j, c, 1, False, None)
    assert demands["prefill"].compute_bound > 0.9 and demands["decode"].compute_bound < 0.1
    assert demands["decode"].dram > 0.8 and demands["prefill"].busy == 1.0
    # beside a half-GPU bandwidth-bound training job (phi 0.1, busy 1): the decode-heavy
    # engine, capped at half the SMs, contends for bandwidth; the prefill-heavy one barely
    train = cm.roofline_demand(1.0, 0.5, 0.1, share=0.5)
    slow = {k: pair_slowdown(train, Demand(d.busy, d.sm, d.dram, d.compute_bound, 0.5), "mps")
            for k, d in demands.items()}
    assert slow["decode"] > slow["prefill"] >= 1.0 and slow["decode"] > 1.5
