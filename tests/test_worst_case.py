"""The mechanism bound for unknown jobs (services/predictor/worst_case.py; docs/predictor.md 6b).

Hand-worked values of ``S_a <= 1 + u_a sum_b q_b x_ab`` (q tightened from 1 by ``q_b = 1 -
(1 - u_b) / S_b``), and the independent check the bound exists for: the simulator's contention
truth (elastico/perf/contention.py, which the predictor never imports) never exceeds it, over
a hypothesis sample of jobs, MPS shares, mechanisms and the truth's whole parameter range.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico.perf import contention as cm
from elastico.predictor import JobProfile, NoInterference
from elastico.predictor.prior import UnknownSafe, worst_case_pair, worst_case_profile
from elastico.predictor.worst_case import (CONTENDED_BW_FLOOR, SWITCH_COST_MAX, MechanismBound,
                                           gpu_bounds, pair_bound)

GPU = "A100-40GB"


def known(u, dram_active, share=None, sharing=None, name="known"):
    """A profiled job: busy fraction ``u`` (sm_activity), DCGM DRAM_ACTIVE time average."""
    return JobProfile(name, "training", max(u, 1e-3), 4.0, GPU, sharing=sharing,
                      mps_share=share, sm_activity=u, dram_activity=dram_active)


def unknown(share=None, sharing=None, name="new"):
    return worst_case_profile(JobProfile(name, "training", 0.2, 4.0, GPU, sharing=sharing,
                                         mps_share=share))


def test_constants_are_the_documented_ones():
    assert (CONTENDED_BW_FLOOR, SWITCH_COST_MAX) == (0.5, 0.25)


def test_mps_pair_by_hand():
    # resident: u 0.4, DRAM intensity 0.1 / 0.4 = 0.25, share 0.5; unknown: u 1, i 1, share 0.5
    # x[r, n] = max(min(1, 0.5/0.5), 1/0.5) = 2; x[n, r] = max(1, 0.25/0.5) = 1
    # q = 1: S_r = 1 + 0.4 * 2 = 1.8, S_n = 1 + 1 * 1 = 2
    # q_r = 1 - 0.6/1.8 = 2/3 (q_n = 1): S_r = 1.8, S_n = 1 + 2/3
    r, n = known(0.4, 0.1, share=0.5), unknown(share=0.5)
    assert gpu_bounds([r, n]).tolist() == pytest.approx([1.8, 5 / 3])
    assert pair_bound(r, n) == pytest.approx(1.8)
    assert pair_bound(n, r) == pytest.approx(5 / 3)
    # a light resident (u 0.2, i 0.1): 1 + 0.2 * 2 = 1.4; q_r = 1 - 0.8/1.4 = 3/7: 1 + 3/7
    r2 = known(0.2, 0.02, share=0.5)
    assert gpu_bounds([r2, n]).tolist() == pytest.approx([1.4, 1 + 3 / 7])


def test_the_model_remembers_a_gpus_bounds_and_hands_out_copies():
    # MechanismBound keeps each resident set's bounds (the placer asks for the same GPUs over
    # and over): the values are the hand-worked ones above, again on a second call, and a
    # caller that writes into the array it got changes nothing the next caller sees
    r, n = known(0.4, 0.1, share=0.5), unknown(share=0.5)
    model = MechanismBound()
    first = model.gpu_slowdowns([r, n])
    assert first.tolist() == pytest.approx([1.8, 5 / 3])
    first[:] = 99.0
    assert model.gpu_slowdowns([r, n]).tolist() == pytest.approx([1.8, 5 / 3])
    assert model.gpu_slowdowns((n, r)).tolist() == pytest.approx([5 / 3, 1.8])  # by position
    assert model.gpu_slowdowns([r]).tolist() == [1.0]


def test_sm_term_counts_the_partner_width_relative_to_the_victims():
    # DRAM-free jobs: only the SM term; victim share 0.25, partner 0.5 -> min(1, 2) = 1;
    # victim share 1, partner 0.25 -> 0.25
    v = known(1.0, 0.0, share=0.25)
    p = known(1.0, 0.0, share=0.5)
    assert pair_bound(v, p) == pytest.approx(2.0)
    assert pair_bound(known(1.0, 0.0), known(1.0, 0.0, share=0.25)) == pytest.approx(1.25)


def test_time_slicing_and_mig_and_trivial_cases_by_hand():
    # time-slicing: x = 1 + 2 * 0.25 = 1.5; r u 0.4: S_r = 1 + 0.4 * 1.5 = 1.6 (cap 0.6 + 0.4 *
    # 2 * 1.25 = 1.6); unknown: min(1 + 1.5, 2 * 1.25) = 2.5, then q_r = 1 - 0.6/1.6 = 0.625:
    # 1 + 1.5 * 0.625 = 1.9375
    r, n = known(0.4, 0.1, sharing="timeslice"), unknown(sharing="timeslice")
    assert gpu_bounds([r, n]).tolist() == pytest.approx([1.6, 1.9375])
    # MIG: isolated
    assert gpu_bounds([known(1, 1, sharing="mig"), unknown(sharing="mig")]).tolist() == [1, 1]
    # alone; a job never on the GPU
    assert gpu_bounds([unknown()]).tolist() == [1.0]
    idle = JobProfile("idle", "training", 0.0, 1.0, GPU, sm_activity=0.0, dram_activity=0.0)
    b = gpu_bounds([idle, unknown()])
    assert b.tolist() == [1.0, 1.0]
    # three residents: the unknown job's bound adds both partners' terms
    a, c = known(1.0, 0.0, share=0.5), known(1.0, 0.0, share=0.5)
    assert gpu_bounds([a, c, unknown(share=0.5)])[2] == pytest.approx(3.0)


def test_bad_constants_are_refused():
    with pytest.raises(ValueError, match="bw_floor"):
        MechanismBound(bw_floor=0.0)
    with pytest.raises(ValueError, match="switch_cost"):
        MechanismBound(switch_cost=-0.1)


def test_unknown_safe_uses_the_bound_only_where_an_unknown_resides():
    # the unknown-job rule alone (outside_domain=False): known pairs keep the base model's
    r, n = known(0.4, 0.1, share=0.5), unknown(share=0.5)
    only_unknown = UnknownSafe(NoInterference(), outside_domain=False)
    assert only_unknown.gpu_slowdowns([r, n]).tolist() == pytest.approx([1.8, 5 / 3])
    assert only_unknown.gpu_slowdowns([r, known(0.9, 0.9)]).tolist() == [1, 1]


class _Domain(NoInterference):
    """NoInterference that says which ordered pairs are inside its validated domain."""

    def __init__(self, inside):
        self.inside = inside

    def in_domain(self, victim, partner):
        return self.inside(victim, partner)


def test_the_bound_also_applies_to_known_pairs_outside_the_models_domain():
    # two known jobs: r busy 0.4 (DRAM 0.1 -> intensity 0.25), k busy 0.9 (intensity 1), both
    # whole GPUs (w = 1).  Mechanism bound by hand (worst_case.py): x[r,k] = max(1, 1/0.5) = 2,
    # x[k,r] = max(1, 0.25/0.5) = 1, so S_r = 1 + 0.8 q_k, S_k = 1 + 0.9 q_r with the pending
    # shares q_k = 1 - 0.1/S_k, q_r = 1 - 0.6/S_r; the fixed point of the two equations, solved
    # independently by scipy's fsolve, is (1.74972919, 1.59138081).
    r, k = known(0.4, 0.1), known(0.9, 0.9)
    bound = MechanismBound().gpu_slowdowns([r, k])
    assert bound.tolist() == pytest.approx([1.74972919, 1.59138081], abs=1e-7)
    # a model that cannot say (no in_domain: the analytic model): the unknown-job rule only
    assert UnknownSafe(NoInterference()).gpu_slowdowns([r, k]).tolist() == [1, 1]
    # one that says no pair is inside: the bound
    assert UnknownSafe(_Domain(lambda v, p: False)).gpu_slowdowns([r, k]).tolist() \
        == pytest.approx(bound.tolist())
    # trusted both ways: the base model's answer, bit for bit
    assert UnknownSafe(_Domain(lambda v, p: True)).gpu_slowdowns([r, k]).tolist() == [1, 1]
    # one direction outside the domain is enough: the whole GPU gets the bound
    one_way = _Domain(lambda v, p: v is r)
    assert UnknownSafe(one_way).gpu_slowdowns([r, k]).tolist() == pytest.approx(bound.tolist())
    assert UnknownSafe(one_way).pair_slowdown(r, k) == pytest.approx(
        MechanismBound().pair_slowdown(r, k))
    # MIG pairs: the bound is 1 wherever it applies
    rm, km = known(0.4, 0.1, sharing="mig"), known(0.9, 0.9, sharing="mig")
    assert UnknownSafe(_Domain(lambda v, p: False)).gpu_slowdowns([rm, km]).tolist() == [1, 1]


# ---- the missed case (main at c99681c, `elastico simulate --gpus 64 --jobs 128 --policy
# elastico --seed 0`): openb-pod-5946 (ResNet-18 bs 64, MPS share 0.25, unknown) next to
# openb-pod-5524 (ResNet-50 bs 16, share 0.5, profiled: busy 0.4834, DRAM_ACTIVE 0.4350) on a
# G2; the old rule 1 + u_a u_b = 1.483 <= 1.5 allowed it, the truth ran the unknown job at
# 1.632 (8.8 % past its bound 1.5).  The truth's demands are the simulator's (printed by
# elastico.sim.contention_truth.GroundTruth.demand for that pair).

MISSED_TRUTH = [cm.Demand(busy=0.4835211654391138, sm=0.5313074584558932, dram=0.9,
                          compute_bound=0.0, share=0.5),
                cm.Demand(busy=1.0, sm=0.5763012617465246, dram=0.8418316270054343,
                          compute_bound=0.06463152554951747, share=0.25)]


def _missed_profiles():
    res = JobProfile("openb-pod-5524", "training", 0.3, 4.0, "", mps_share=0.5,
                     sm_activity=0.48336969840469685, dram_activity=0.43503272856422714)
    new = worst_case_profile(JobProfile("openb-pod-5946", "training", 0.3, 4.0, "",
                                        mps_share=0.25))
    return res, new


def test_the_missed_pair_is_bounded_and_refused_at_bound_1_5():
    res, new = _missed_profiles()
    truth = cm.slowdowns(MISSED_TRUTH, "mps")
    assert truth[1] == pytest.approx(1.632, abs=1e-3)        # what the old rule let through
    assert worst_case_pair(new, res) < 1.5                    # the old rule: 1.483
    bound = UnknownSafe(NoInterference()).gpu_slowdowns([res, new])
    assert np.all(truth <= bound + 1e-9)
    assert bound[1] > 1.5 * 1.05                              # now refused
    # also at the truth's most contended parameters
    worst = cm.slowdowns(MISSED_TRUTH, "mps",
                         cm.ContentionParams(switch_overhead=0.25, bw_efficiency=0.6))
    assert np.all(worst <= bound + 1e-9)


# ---- the truth never exceeds the bound ------------------------------------------------------

_frac = st.floats(0.0, 1.0)
_share = st.sampled_from([1.0, 0.75, 0.5, 0.3, 0.25, 0.22, 0.1])


@st.composite
def _gpu(draw):
    k = draw(st.integers(2, 4))
    jobs = []
    for n in range(k):
        share = draw(_share)
        d = cm.Demand(busy=draw(_frac), sm=draw(_frac) * share, dram=draw(_frac),
                      compute_bound=draw(_frac), share=share)
        jobs.append((d, draw(st.booleans())))
    if not any(u for _, u in jobs):
        jobs[draw(st.integers(0, k - 1))] = (jobs[0][0], True)
    mech = draw(st.sampled_from(["mps", "time-slicing"]))
    params = cm.ContentionParams(switch_overhead=draw(st.floats(0.0, 0.25)),
                                 bw_efficiency=draw(st.floats(0.6, 1.0)))
    return jobs, mech, params


def _profile(d: cm.Demand, is_unknown: bool, mech: str, n: int) -> JobProfile:
    sharing = "timeslice" if mech == "time-slicing" else None
    share = d.share if d.share < 1.0 and mech == "mps" else None
    # what the node measures alone: busy (NVML process SM utilisation) and DRAM_ACTIVE
    # (time average: dram while busy x busy)
    p = JobProfile(f"j{n}", "training", max(d.busy, 1e-3), 1.0, GPU, sharing=sharing,
                   mps_share=share, sm_activity=d.busy, dram_activity=d.dram * d.busy)
    return worst_case_profile(p) if is_unknown else p


@settings(max_examples=400, deadline=None)
@given(_gpu())
def test_contention_truth_never_exceeds_the_mechanism_bound(case):
    jobs, mech, params = case
    demands = [d if mech == "mps" else cm.Demand(d.busy, d.sm, d.dram, d.compute_bound, 1.0)
               for d, _ in jobs]
    truth = cm.slowdowns(demands, mech, params)
    profiles = [_profile(d, u, mech, n) for n, (d, u) in enumerate(jobs)]
    bound = UnknownSafe(NoInterference()).gpu_slowdowns(profiles)
    assert np.all(truth <= bound + 1e-9), (truth, bound)


def test_contention_truth_never_exceeds_the_bound_on_a_grid_of_pairs():
    # a known victim (busy, DRAM intensity, share) next to one unknown partner (any share):
    # the truth's largest slowdown over the partner's possible demands stays under the bound
    grid = np.linspace(0.0, 1.0, 5)
    hi = cm.ContentionParams(switch_overhead=0.25, bw_efficiency=0.6)
    worst_gap = -np.inf
    for sv in (1.0, 0.5, 0.22):
        for sp in (1.0, 0.5, 0.22):
            for ub in grid:
                for dv in grid:
                    for phi in (0.0, 0.5, 1.0):
                        v = cm.Demand(ub, sv, dv, phi, sv)
                        vp = _profile(v, False, "mps", 0)
                        up = _profile(cm.Demand(1, 1, 1, 0, sp), True, "mps", 1)
                        b = gpu_bounds([vp, up])
                        for bp in (0.5, 1.0):
                            for dp in (0.5, 1.0):
                                part = cm.Demand(bp, sp, dp, 0.0, sp)
                                t = cm.slowdowns([v, part], "mps", hi)
                                assert t[0] <= b[0] + 1e-9 and t[1] <= b[1] + 1e-9
                                worst_gap = max(worst_gap, float(np.max(t - b)))
    assert worst_gap <= 1e-9


def test_seed_0_trace_run_has_no_unknown_job_past_its_bound(tmp_path):
    # the run that missed the goal on main (1 job 8.8 % past its bound while unknown)
    from elastico.cli import main

    out = tmp_path / "m.json"
    rc = main(["simulate", "--gpus", "64", "--jobs", "128", "--policy", "elastico",
               "--seed", "0", "--json", str(out)])
    assert rc in (0, None)
    m = json.loads(out.read_text())
    assert m["unknown_bound_violation_jobs"] == 0
    assert m["unknown_run_s"] > 0
