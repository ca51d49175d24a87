"""The per-job online correction (elastico.predictor.online) and the online-learning bench's
noise model, MAE and truth-never-input property (bench/online_learning.py)."""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from elastico.errors import InvalidArgument
from elastico.predictor.observations import Observation
from elastico.predictor.online import JobCorrections, job_key
from elastico.predictor.profile import JobProfile
from elastico.predictor.service import PredictorCore

GPU = "A100-80GB"


def _job(name: str, sm: float = 0.5) -> JobProfile:
    return JobProfile(job_type=name, kind="training", gpu_activity=sm, gpu_model=GPU,
                      sharing="mps", mps_share=0.5, sm_activity=sm, dram_activity=sm / 2)


def _const(value: float):
    """A population model predicting ``value`` for every pair."""
    return lambda a, b, gpu: np.full(len(a), value)


def _root(tv_tg: float, s2: float, terms) -> float:
    """The converged effect sum theta of one job's observations by hand: the posterior mode's
    stationarity ``theta = tv_tg * sum J_i(theta) r_i(theta) / s2`` (module docstring), each
    term ``(e, ln observed)`` with ``J = e exp(theta) / (1 + e exp(theta))``,
    ``r = ln observed - ln(1 + e exp(theta))``; solved by brentq."""
    from scipy.optimize import brentq

    def f(th):
        tot = 0.0
        for e, lo in terms:
            s = 1.0 + e * math.exp(th)
            tot += (e * math.exp(th) / s) * (lo - math.log(s))
        return th - tv_tg * tot / s2

    return brentq(f, -10.0, 10.0, xtol=1e-14)


def test_one_observation_moves_the_estimate_by_the_derived_gain():
    # tau_v2 = 0.04, tau_g2 = 0.01, s2 = 0.05; population says 1.2 (extra e = 0.2), observed
    # 1.5: y = ln(1.5 / 1.2) = 0.223144, slope J = e / 1.2 = 1/6.
    # First (Kalman) step: v = tau_v2 J y / (J^2 (tau_v2 + tau_g2) + s2)
    #                        = 0.04 * (1/6) * 0.223144 / (0.05/36 + 0.05) = 0.0289484
    tv, tg, s2 = 0.04, 0.01, 0.05
    c = JobCorrections(variances=(tv, tg, s2))
    a, b = _job("a"), _job("b")
    c.observe([Observation(a, b, GPU, 1.5)], _const(1.2), "m1")
    y, j = math.log(1.5 / 1.2), 0.2 / 1.2
    c._solve(iterations=1)
    assert c.v[job_key(a)] == pytest.approx(tv * j * y / (j * j * (tv + tg) + s2), abs=1e-12)
    assert c.v[job_key(a)] == pytest.approx(0.0289484, abs=1e-7)
    assert c.g[job_key(b)] == pytest.approx(tg * j * y / (j * j * (tv + tg) + s2), abs=1e-12)
    assert job_key(b) not in c.v and job_key(a) not in c.g
    # converged (posterior mode): theta = v + g solves the stationarity equation; v : g =
    # tau_v2 : tau_g2
    c._solve()
    th = _root(tv + tg, s2, [(0.2, math.log(1.5))])
    assert c.v[job_key(a)] == pytest.approx(th * tv / (tv + tg), abs=1e-9)
    assert c.g[job_key(b)] == pytest.approx(th * tg / (tv + tg), abs=1e-9)
    # served: 1 + e exp(theta), between the population's 1.2 and the observed 1.5
    out = c.apply([a], [b], np.array([1.2]))[0]
    assert out == pytest.approx(1.0 + 0.2 * math.exp(th), abs=1e-9)
    assert 1.2 < out < 1.5
    # a third job with no observations is served the population model unchanged
    assert c.apply([_job("z")], [_job("w")], np.array([1.3]))[0] == 1.3


def test_second_observation_of_the_victim_pools_both():
    # no partner effects (tau_g2 = 0): v solves v = tau_v2 sum J_i r_i / s2 over both
    c = JobCorrections(variances=(0.05, 0.0, 0.1))
    a = _job("a")
    obs = [Observation(a, _job("b1"), GPU, 1.1), Observation(a, _job("b2"), GPU, 1.3)]
    c.observe(obs, _const(1.2), "m")
    th = _root(0.05, 0.1, [(0.2, math.log(1.1)), (0.2, math.log(1.3))])
    assert c.v[job_key(a)] == pytest.approx(th, abs=1e-9)
    assert c.g == {}


def test_variances_are_estimated_from_the_data_by_moments():
    # ten victims, each observed next to six different partners, every observation of a
    # victim the same: 1 + 0.2 exp(+-0.2) on a population of 1.2 (J = 1/6)
    obs = []
    for i in range(10):
        sign = 1.0 if i % 2 else -1.0
        for j in range(6):
            obs.append(Observation(_job(f"v{i}"), _job(f"p{(i + j) % 8}"), GPU,
                                   1.0 + 0.2 * math.exp(sign * 0.2)))
    c = JobCorrections()
    c.observe(obs, _const(1.2), "m")
    tv, tg, s2 = c.variances
    # tau_v2 = sum y_i y_k / sum J_i J_k over same-victim pairs = mean(y+^2, y-^2) / J^2
    yp = math.log((1 + 0.2 * math.exp(0.2)) / 1.2)
    ym = math.log((1 + 0.2 * math.exp(-0.2)) / 1.2)
    assert tv == pytest.approx((yp * yp + ym * ym) / 2 * 36, rel=1e-9)
    assert tg >= 0.0 and s2 >= 1e-6


def test_too_few_jobs_means_no_correction():
    c = JobCorrections()
    a, b = _job("a"), _job("b")
    c.observe([Observation(a, b, GPU, 1.9), Observation(a, b, GPU, 1.8)], _const(1.2), "m")
    assert c.variances == (0.0, 0.0, 1.0)
    assert c.apply([a], [b], np.array([1.2]))[0] == 1.2


def test_bounded_and_rebased_on_a_new_population_model():
    c = JobCorrections(max_records=3, variances=(0.04, 0.0, 0.04))
    a = _job("a")
    c.observe([Observation(a, _job(f"b{i}"), GPU, 1.5) for i in range(5)], _const(1.5), "m1")
    assert len(c) == 3
    assert c.v == {}  # observed == population: no residual
    c.rebase(_const(1.2), "m2")  # the population model now says 1.2
    th = _root(0.04, 0.04, [(0.2, math.log(1.5))] * 3)
    assert c.v[job_key(a)] == pytest.approx(th, abs=1e-9)


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgument):
        JobCorrections(max_records=0)
    with pytest.raises(InvalidArgument):
        JobCorrections(variances=(0.1, 0.1, 0.0))


def test_the_core_applies_the_correction_on_its_observation_path():
    core = PredictorCore(use_bundled=False,
                         corrections=JobCorrections(variances=(0.04, 0.0, 0.04)))
    a, b = _job("a", 0.8), _job("b", 0.7)
    before = core.predict([a], [b], GPU, both=False)[0][0]
    pop = core.population([a], [b], GPU)[0]
    assert before == pytest.approx(pop)
    assert pop > 1.1
    core.report([Observation(a, b, GPU, pop * 1.5)])
    after = core.predict([a], [b], GPU, both=False)[0][0]
    th = _root(0.04, 0.04, [(pop - 1.0, math.log(pop * 1.5))])
    assert after == pytest.approx(1.0 + (pop - 1.0) * math.exp(th), rel=1e-9)
    assert pop < after < pop * 1.5
    assert PredictorCore(use_bundled=False, per_job=False).corrections is None


# -- the bench -----------------------------------------------------------------------------

def _bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "online_learning.py"
    spec = importlib.util.spec_from_file_location("online_learning_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("online_learning_bench", mod)  # dataclasses look the module up
    spec.loader.exec_module(mod)
    return mod


def test_bench_noise_model_and_mae_on_a_tiny_case():
    bench = _bench()
    rng = np.random.default_rng(7)
    a = bench.make_job("x", 0, rng, 0)
    b = bench.make_job("y", 0, rng, 0)
    ta, tb = bench.true_pair(a, b)
    o = bench.observe(a, b, np.random.default_rng(11), sigma=0.04)
    na, nb = np.exp(np.random.default_rng(11).normal(0.0, 0.04, 2))
    assert o.slowdown_a == pytest.approx(ta * na, rel=1e-12)
    assert o.slowdown_b == pytest.approx(tb * nb, rel=1e-12)
    assert bench.observe(a, b, np.random.default_rng(11), sigma=0.0).slowdown_a == \
        pytest.approx(ta, rel=1e-12)
    # MAE by hand: |1.2 - 1.0| and |1.0 - 1.5| -> 0.35
    assert bench.mae([1.2, 1.0], [1.0, 1.5]) == pytest.approx(0.35)
    with pytest.raises(ValueError):
        bench.mae([1.0], [1.0, 2.0])


def test_truth_is_never_a_predictor_input():
    bench = _bench()
    # the service API the bench calls takes profiles and observations, no truth
    for fn in (PredictorCore.report, PredictorCore.predict, PredictorCore.population):
        params = set(inspect.signature(fn).parameters)
        assert not params & {"truth", "demand", "true_slowdown"}, fn
    rng = np.random.default_rng(5)
    jobs = [bench.make_job(f"j{i}", 0, rng, 0) for i in range(8)]
    obs_rng = np.random.default_rng(9)
    obs = [bench.observe(jobs[i], jobs[(i + 1) % 8], obs_rng) for i in range(8)]
    obs += [bench.observe(jobs[i], jobs[(i + 3) % 8], obs_rng) for i in range(8)]

    def served(js):
        core = PredictorCore(use_bundled=False)
        core.report(obs)
        return bench.predict_pairs(core, js[:4], js[4:])

    p1 = served(jobs)
    # perturb every hidden truth parameter; the observations stay the same
    other = [replace(j, demand=replace(j.demand, busy=0.3, sm=0.9, compute_bound=0.1))
             for j in jobs]
    assert bench.true_pair(other[0], other[4]) != bench.true_pair(jobs[0], jobs[4])
    np.testing.assert_array_equal(served(other), p1)


def test_the_correction_is_rebuilt_from_the_store_after_a_restart(tmp_path):
    from elastico.predictor.service import ModelStore

    corr = (0.04, 0.01, 0.04)
    core = PredictorCore(ModelStore(tmp_path), use_bundled=False,
                         corrections=JobCorrections(variances=corr))
    a, b = _job("a", 0.8), _job("b", 0.7)
    pop = core.population([a], [b], GPU)[0]
    core.report([Observation(a, b, GPU, pop * 1.4, pop * 1.2)])
    served = core.predict([a], [b], GPU)
    again = PredictorCore(ModelStore(tmp_path), use_bundled=False,
                          corrections=JobCorrections(variances=corr))
    back = again.predict([a], [b], GPU)
    assert served[0][0] != pytest.approx(pop)
    np.testing.assert_allclose(back[0], served[0], rtol=1e-12)
    np.testing.assert_allclose(back[1], served[1], rtol=1e-12)


def test_repeated_observations_of_one_pair_feed_its_pair_effect():
    # only a pair effect (tau_p2 = 0.04, s2 = 0.04): two observations of a next to b, 1.5 on
    # a population of 1.2; the mode solves theta = tau_p2 * sum J r / s2 over both
    c = JobCorrections(variances=(0.0, 0.0, 0.04), pair_variance=0.04)
    a, b = _job("a"), _job("b")
    c.observe([Observation(a, b, GPU, 1.5)] * 2, _const(1.2), "m")
    th = _root(0.04, 0.04, [(0.2, math.log(1.5))] * 2)
    assert c.pair[(job_key(a), job_key(b))] == pytest.approx(th, abs=1e-9)
    assert c.v == {} and c.g == {}
    # the pair effect is the ordered pair's only: b next to a, or a next to another job, not
    assert c.apply([b], [a], np.array([1.2]))[0] == 1.2
    assert c.apply([a], [_job("c")], np.array([1.2]))[0] == 1.2


# -- the DRAM slopes (docs/predictor.md, "Per-job correction") --------------------------------

def test_a_victim_slope_on_the_partners_dram_activity_by_hand():
    # only a victim slope (tau_b2 = 0.5, s2 = 0.05).  a: DRAM activity 0.1, b: 0.5; the
    # centre is the mean over the stored sides, (0.1 + 0.5) / 2 = 0.3, so b's covariate is
    # c = 0.5 - 0.3 = 0.2.  Population 1.2 (e = 0.2, J = 1/6), observed 1.5:
    # y = ln(1.5 / 1.2) = 0.2231436.  First (Kalman) step:
    # beta = tau_b2 c J y / (tau_b2 c^2 J^2 + s2) = 0.5*0.2*(1/6)*0.2231436 / (0.5*0.04/36 +
    # 0.05) = 0.00371906 / 0.05055556 = 0.0735639
    c = JobCorrections(variances=(0.0, 0.0, 0.05), slope_variances=(0.5, 0.0))
    a, b = _job("a", 0.2), _job("b", 1.0)
    assert (a.dram_activity, b.dram_activity) == (0.1, 0.5)
    c.observe([Observation(a, b, GPU, 1.5)], _const(1.2), "m")
    assert c.dram_centre == pytest.approx(0.3, abs=1e-12)
    c._solve(iterations=1)
    assert c.victim_slope[job_key(a)] == pytest.approx(0.0735639, abs=1e-7)
    assert c.v == {} and c.g == {} and c.partner_slope == {}
    # converged: theta = beta c solves theta = tau_b2 c^2 sum J r / s2 (the mode)
    c._solve()
    th = _root(0.5 * 0.2 ** 2, 0.05, [(0.2, math.log(1.5))])
    beta = th / 0.2
    assert c.victim_slope[job_key(a)] == pytest.approx(beta, abs=1e-9)
    # served next to b: 1 + e exp(beta c); next to a partner at the centre: the population;
    # next to a partner with DRAM 0.7 (c = 0.4): 1 + 0.2 exp(0.4 beta), above b's
    assert c.apply([a], [b], np.array([1.2]))[0] == pytest.approx(1 + 0.2 * math.exp(th))
    mid = replace(_job("m"), dram_activity=0.3)
    assert c.apply([a], [mid], np.array([1.2]))[0] == pytest.approx(1.2, abs=1e-12)
    hi = replace(_job("h"), dram_activity=0.7)
    assert c.apply([a], [hi], np.array([1.2]))[0] == pytest.approx(1 + 0.2 * math.exp(0.4 * beta))
    # a partner whose DRAM activity is not measured gets no slope term
    none = replace(_job("n"), dram_activity=None)
    assert c.apply([a], [none], np.array([1.2]))[0] == pytest.approx(1.2, abs=1e-12)


def test_slope_variances_by_moments_match_a_brute_force_sum():
    # ten victims, each next to six partners of different DRAM activity; victim i's
    # observations follow 1 + 0.2 exp(s_i (dram_b - 0.3) * 5): residuals grow with the
    # partner's DRAM activity, with opposite signs for odd and even victims
    part = [replace(_job(f"p{k}"), dram_activity=0.05 + 0.1 * k) for k in range(8)]
    vic = [replace(_job(f"v{i}"), dram_activity=0.3) for i in range(10)]
    obs = []
    for i in range(10):
        s = 1.0 if i % 2 else -1.0
        for j in range(6):
            b = part[(i + j) % 8]
            slow = 1.0 + 0.2 * math.exp(s * 5 * (b.dram_activity - 0.3))
            obs.append(Observation(vic[i], b, GPU, slow))
    c = JobCorrections()
    c.observe(obs, _const(1.2), "m")
    # brute force: every ordered pair of sides with one victim and different partners
    m = np.mean([o.a.dram_activity for o in obs] + [o.b.dram_activity for o in obs])
    J = 0.2 / 1.2
    A = B = C = R1 = R2 = 0.0
    for i, oi in enumerate(obs):
        for k, ok in enumerate(obs):
            if i == k or oi.a is not ok.a or oi.b is ok.b:
                continue
            ci, ck = oi.b.dram_activity - m, ok.b.dram_activity - m
            yi, yk = math.log(oi.slowdown_a / 1.2), math.log(ok.slowdown_a / 1.2)
            A += J * J
            B += J * J * ci * ck
            C += J * J * (ci * ck) ** 2
            R1 += yi * yk
            R2 += yi * yk * ci * ck
    tv, tb = np.linalg.solve([[A, B], [B, C]], [R1, R2])
    assert tb > 0
    if tv >= 0:
        assert c.variances[0] == pytest.approx(tv, rel=1e-9, abs=1e-12)
        assert c.slope_variances[0] == pytest.approx(tb, rel=1e-9)
    else:  # the moment solution's negative component is set to 0, the other refitted
        assert c.variances[0] == 0.0
        assert c.slope_variances[0] == pytest.approx(R2 / C, rel=1e-9)
    assert c.dram_centre == pytest.approx(m, abs=1e-12)
    # served: the fitted slope moves an odd victim's slowdown up with the partner's DRAM
    lo_, hi_ = part[0], part[7]
    # (unguarded: everything was observed in one batch, so nothing was scored out of sample)
    assert not c.serving
    served = c.apply([vic[1], vic[1]], [lo_, hi_], np.array([1.2, 1.2]), guarded=False)
    assert served[1] > served[0]


def test_without_dram_spread_the_slopes_change_nothing():
    # every job with the same DRAM activity: every covariate is 0, so the slope moments have
    # no support (tau_b2 = tau_c2 = 0) and the effects equal those of slopes=False
    rng = np.random.default_rng(3)
    obs = [Observation(_job(f"v{i}"), _job(f"p{(i + j) % 7}"), GPU,
                       float(1.2 * math.exp(rng.normal(0.0, 0.2))),
                       float(1.2 * math.exp(rng.normal(0.0, 0.2))))
           for i in range(8) for j in range(4)]
    on, off = JobCorrections(), JobCorrections(slopes=False)
    on.observe(obs, _const(1.2), "m")
    off.observe(obs, _const(1.2), "m")
    assert on.slope_variances == (0.0, 0.0)
    assert on.variances == off.variances and on.variances[0] + on.variances[1] > 0
    assert on.v == off.v and on.g == off.g and on.victim_slope == {}
    with pytest.raises(InvalidArgument):
        JobCorrections(slope_variances=(0.1, -1.0))


def _victim_batch(effect_scale: float, pop: float = 1.2, n_victims: int = 10, seed: int = 0):
    """Ten victims, each next to six partners, observed at ``1 + (pop - 1) exp(+-scale)``
    times a measurement noise ``exp(N(0, 0.02^2))`` (seeded)."""
    rng = np.random.default_rng(seed)
    obs = []
    for i in range(n_victims):
        sign = 1.0 if i % 2 else -1.0
        for j in range(6):
            obs.append(Observation(_job(f"v{i}"), _job(f"p{(i + j) % 8}"), GPU,
                                   (1.0 + (pop - 1.0) * math.exp(sign * effect_scale))
                                   * math.exp(rng.normal(0.0, 0.02))))
    return obs


def test_variances_come_only_from_residuals_against_the_serving_model():
    # the first batch arrives while a poor model serves (population 1.0: the residuals are
    # large), the second while a good one serves ("m1", 1.2).  The variances must be those of
    # the second batch alone -- what a corrector that only ever saw "m1" estimates -- not
    # inflated by residuals against the replaced model (the over-correction after a refit).
    c = JobCorrections()
    c.observe(_victim_batch(0.8), _const(1.0), "m0")
    c.observe(_victim_batch(0.2), _const(1.2), "m1")
    fresh = JobCorrections()
    fresh.observe(_victim_batch(0.2), _const(1.2), "m1")
    assert c.variances == pytest.approx(fresh.variances, rel=1e-9)
    # and on a model change alone (rebase) nothing is left to estimate them from: no correction
    c.rebase(_const(1.25), "m2")
    assert c.variances == (0.0, 0.0, 1.0)
    a, b = _job("v1"), _job("p1")
    assert c.apply([a], [b], np.array([1.25]))[0] == 1.25


def test_the_guard_serves_the_correction_only_once_it_beats_the_population_out_of_sample():
    # batch 1 teaches victim effects (+-0.2 on the log extra slowdown); nothing scored yet:
    # the population model serves
    a, b = _job("v1"), _job("p1")
    c = JobCorrections()
    c.observe(_victim_batch(0.2), _const(1.2), "m")
    assert c.variances[0] > 0 and not c.degenerate and not c.serving
    assert c.apply([a], [b], np.array([1.2]))[0] == 1.2
    assert c.apply([a], [b], np.array([1.2]), guarded=False)[0] > 1.2
    # batch 2 repeats the same effects: scored before it was learned, the correction beats
    # the population (its log error is smaller) -> served
    c.observe(_victim_batch(0.2, seed=1), _const(1.2), "m")
    assert c.serving and c.apply([a], [b], np.array([1.2]))[0] > 1.2
    # a corrector whose second batch shows no effect at all (the population was right): the
    # correction learned from batch 1 loses out of sample -> held back, population served
    d = JobCorrections()
    d.observe(_victim_batch(0.2), _const(1.2), "m")
    d.observe(_victim_batch(0.0, seed=1), _const(1.2), "m")
    corr, pop, n = d._tally
    assert n == 60 and corr > pop
    assert not d.serving
    assert d.apply([a], [b], np.array([1.2]))[0] == 1.2


def test_a_degenerate_variance_estimate_is_not_served():
    # noise-free observations: the victims' variance claims all of the residuals' variance,
    # no room for noise (s2 <= 0 before its floor) -> degenerate, never served, even after
    # the same effects were seen again out of sample
    a, b = _job("v1"), _job("p1")
    c = JobCorrections()
    noiseless = [Observation(o.a, o.b, o.gpu_model, 1.0 + 0.2 * math.exp(
        0.2 if int(o.a.job_type[1:]) % 2 else -0.2)) for o in _victim_batch(0.2)]
    c.observe(noiseless, _const(1.2), "m")
    c.observe(noiseless, _const(1.2), "m")
    assert c.degenerate and c.variances[2] == 1e-6
    assert not c.serving and c.apply([a], [b], np.array([1.2]))[0] == 1.2
