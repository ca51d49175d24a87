"""The mechanism bound: the largest slowdown co-residents can inflict on a job, whatever they
do, under the GPU's sharing mechanism (docs/predictor.md, "6b. Unknown jobs stay safe").

The contention prior (:mod:`elastico.predictor.prior`) is an *estimate*: two jobs' demands on
the SMs and the memory bandwidth, the overlap of their busy phases.  A job with no solo
profile yet (an *unknown* job, :func:`elastico.predictor.prior.is_worst_case`) must be
booked at something that holds whatever the job turns out to be: a bound on what the
*mechanism* lets one client do to another, not the prior's value at a guessed profile.  This
module derives that bound from first principles; no constant here was chosen on a slowdown
measurement, and it shares no code or parameter with the simulator's contention truth
(:mod:`elastico.perf.contention`; tests/test_worst_case.py checks, independently, that the
truth never exceeds it).

**What a co-runner can be.**  Busy (kernels pending) any fraction of the time up to 1, any
DRAM intensity up to the whole peak bandwidth, kernels on as many SMs as its MPS active thread
percentage allows (the driver enforces the cap: NVIDIA MPS documentation,
"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), on *any* SMs (the cap says how many, not which:
clients "may execute on the same SM, depending on load-balancing", same documentation,
"Volta MPS execution resource provisioning").  A known job is read from its solo profile:
``u`` its busy fraction (``sm_activity``, which the profile store fills with NVML's
per-process SM utilisation, the share of time a kernel of the process runs; 1 when not
measured), ``i`` its DRAM intensity while busy (``dram_activity / u``, 1 when not measured),
``w`` its SM width (``mps_share``, 1 without a cap).  An unknown job is ``u = 1``, ``i = 1``,
``w`` its share (the worst case, :func:`~elastico.predictor.prior.worst_case_profile`).

**Busy and idle.**  Job ``a``'s step is ``1 - u_a`` host work (no co-resident slows it) and
``u_a`` GPU work, which runs ``g`` times slower while the set ``A`` of partners with work
pending is busy beside it (``g(empty) = 1``).  So ``S_a = 1 + u_a (E[g] - 1)``.  Partner
``b`` has work pending a fraction ``q_b`` of the wall time; because a slowed job's GPU work
takes longer while its host work does not, ``q_b = 1 - (1 - u_b) / S_b`` (the identity
``S_b = (1 - u_b) + u_b g_b`` solved for the pending share ``u_b g_b / S_b``) -- at most 1,
and at most ``1 - (1 - u_b) / S_b_max`` for any upper bound ``S_b_max`` of ``b``'s slowdown.
The jobs' busy phases fall at independent times (separate processes, separate data loaders,
no common clock -- the one assumption the bound shares with the prior), so ``b`` has work
pending during a share ``q_b`` of ``a``'s GPU time, and ``E[g] - 1 <= sum_b q_b x_ab``
whenever ``g(A) - 1 <= sum_{b in A} x_ab`` (linearity of expectation over the indicator of
``b in A``): so a per-partner coefficient ``x_ab`` bounds the GPU, summed over partners, and

    S_a <= 1 + u_a sum_b q_b x_ab

(the additive composition the prior uses, here as an inequality).  :func:`gpu_bounds` starts
from ``q_b = 1`` (a valid bound) and tightens it: each step's ``S`` bounds every job's
slowdown, so ``q_b <= 1 - (1 - u_b) / S_b`` for the next; the sequence only falls and every
term is a valid bound.

**The per-partner coefficient ``x_ab`` by mechanism.**

* **MIG**: 0.  Instances own disjoint SMs, L2 slices, memory controllers and DRAM ("each
  instance's processors have separate and isolated paths through the entire memory
  system", NVIDIA MIG user guide, "Introduction").  What MIG does not isolate (PCIe, power
  capping) is left out.
* **Time-slicing** (one context runs at a time; the contexts with work take turns: NVIDIA
  GPU Operator, "Time-Slicing GPUs in Kubernetes"; Gavel, Narayanan et al. OSDI'20, 4.1):
  with ``n >= 1`` partners holding work, ``a`` runs one turn in ``n + 1`` and each turn
  costs a context switch, ``g = (n + 1)(1 + o)`` with ``o`` the switch's cost as a fraction
  of a turn, so ``g - 1 = n (1 + o) + o <= n (1 + 2 o)``: ``x_ab = 1 + 2 o`` with ``o`` at
  most :data:`SWITCH_COST_MAX`.  On one GPU ``S_a`` is also at most ``k (1 + o)``
  (round robin among ``k`` residents, each turn with its switch), kept as a cap.
* **MPS** (one shared context; kernels of all clients run at once): ``a``'s busy time is
  part compute-bound (limited by its SMs) and part bandwidth-bound (the roofline, Williams,
  Waterman, Patterson, CACM 2009); the split is not in a profile, so the bound is the larger
  of the two stretches (``phi C + (1 - phi) B <= max(C, B)``, and ``max`` of two sums of
  non-negative per-partner terms is at most the sum of the per-partner ``max``):

  - *SMs*: a partner's blocks can land on the same SMs as ``a``'s (above), on at most
    ``min(w_b, w_a)`` of ``a``'s ``w_a``; an SM shared by two clients' resident warps
    issues for both, so at worst each runs at half speed there.  With a fraction ``f``
    of ``a``'s SMs shared, ``a``'s kernels run at ``1 - f / 2`` of their speed alone,
    ``1 / (1 - f / 2) - 1 <= f``: ``C - 1 <= min(1, w_b / w_a)`` per partner.
  - *Memory bandwidth*: MPS partitions SM threads, not memory bandwidth, L2 or memory
    controllers (NVIDIA MPS documentation: the active thread percentage limits execution
    resources; nothing limits a client's memory traffic).  Concurrent streams together
    reach at least :data:`CONTENDED_BW_FLOOR` ``E`` of the peak, and each gets a share in
    proportion to its demand (the controllers serve requests as they come; Chatterjee et
    al., "Managing DRAM latency divergence in irregular GPGPU applications", SC'14: GPU
    memory controllers interleave requests of different warps).  A job streaming ``d`` of
    the peak alone, next to partners streaming ``I = sum i_b``, then gets
    ``max(E, d) d / (d + I)`` at least: ``B = (d + I) / max(E, d) <= 1 + I / E`` for
    every ``d`` (``d >= E``: ``1 + I / d``; ``d < E``: ``(d + I) / E <= 1 + I / E``).  So
    ``B - 1 <= i_b / E`` per partner, whatever ``a``'s own DRAM intensity.

  ``x_ab = max(min(1, w_b / w_a), i_b / E)``.  Without MPS shares and with a partner
  streaming the whole peak this is ``1 / E = 2``; a victim busy all the time next to one
  unknown job may be slowed up to 3x -- L2 thrashing and launch queueing are inside the
  bandwidth floor's slack, not modelled apart.

**What the bound assumes** (each stated where it enters): a known job's measured busy
fraction and DRAM intensity are what it does next to others (a job whose DRAM demand within
its busy time is burstier than its average reads lower than its peaks: the profile carries
averages only); independent phases (above; phases locked in step would need ``q = 1``);
the two constants below.

Who calls it: :class:`elastico.predictor.prior.UnknownSafe` (the placer's rule for GPUs with
an unknown resident).  Whom it calls: numpy.  Pure: plain data in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from elastico.predictor.analytic import ResidentsMemo
from elastico.predictor.profile import JobProfile
from elastico.predictor.prior import dram_intensity, mechanism_of

__all__ = ["CONTENDED_BW_FLOOR", "SWITCH_COST_MAX", "Side", "side", "gpu_mechanism",
           "gpu_bounds", "pair_bound", "MechanismBound"]

#: The least fraction of the peak DRAM bandwidth that concurrent access streams reach
#: together.  One well-formed stream reaches 0.83-0.9 (Jia et al., "Dissecting the NVIDIA
#: Volta GPU Architecture via Microbenchmarking", 2018: 750 of 900 GB/s on a V100;
#: BabelStream, Deakin et al., ~0.9 on V100 / A100 / H100).  Interleaved streams of
#: different clients break each other's DRAM row-buffer locality: a row opened for one is
#: closed for the other (Chatterjee et al. SC'14, above).  ASSUMPTION (the bound's one
#: free number, chosen from the mechanism, not from any slowdown): every second access
#: pays a row switch and the bank parallelism no longer hides it, so half the peak -- a
#: loss of 0.4 of the peak on top of one stream's 0.1, four times what one stream loses.
#: A lower floor is safer and books fewer co-locations with unknown jobs
#: (:class:`MechanismBound` takes another).
CONTENDED_BW_FLOOR = 0.5

#: The most one time-slicing context switch costs, as a fraction of a time slice.  A switch
#: saves and restores the SMs' state (instruction-level compute preemption: NVIDIA Tesla
#: P100 whitepaper, "Compute Preemption"; Volta and later alike): registers and shared
#: memory, e.g. an H100 SXM 132 SMs x (256 KiB + 228 KiB) = 62 MiB, a V100 80 SMs x (256 KiB
#: + 96 KiB) = 28 MiB, written and read back at the DRAM bandwidth (3.35 TB/s, 0.9 TB/s:
#: datasheets) -- 40-65 us per switch.  NVIDIA publishes no slice length (``nvidia-smi
#: compute-policy --set-timeslice`` offers default / short / medium / long); ASSUMPTION: at
#: least 0.5 ms, so a switch costs at most 0.13 of a slice, doubled for what the save
#: leaves out (caches refilled after the switch): 0.25.
SWITCH_COST_MAX = 0.25

_ITERS = 100
_TOL = 1e-12


@dataclass(frozen=True)
class Side:
    """One resident as the bound reads it (module docstring): ``u`` busy fraction, ``w`` SM
    width (MPS share), ``i`` DRAM intensity while busy, each in [0, 1]."""

    u: float
    w: float
    i: float


def side(p: JobProfile) -> Side:
    """The :class:`Side` of a profile: measured counters where the profile has them, the
    worst case (1) where it does not (module docstring)."""
    w = 1.0 if p.mps_share is None else float(p.mps_share)
    u = 1.0 if p.sm_activity is None else float(p.sm_activity)
    i = dram_intensity(p, u)
    if p.gpu_activity <= 0.0:  # never on the GPU: neither slowed nor slowing (as the prior)
        u = 0.0
    return Side(u, w, i)


def gpu_mechanism(residents: Sequence[JobProfile]) -> str:
    """``"mig"`` if any resident says MIG, else ``"timeslice"`` if any says time-slicing,
    else ``"mps"`` (:func:`elastico.predictor.prior.mechanism_of`)."""
    return mechanism_of(residents)


def _coefficients(sides: Sequence[Side], mech: str, bw_floor: float,
                  switch_cost: float) -> np.ndarray:
    """``x[a, b]``, shape (k, k), zero diagonal (module docstring)."""
    k = len(sides)
    x = np.zeros((k, k))
    if mech == "mig":
        return x
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            if mech == "timeslice":
                x[a, b] = 1.0 + 2.0 * switch_cost
            else:
                sa, sb = sides[a], sides[b]
                sm = min(1.0, sb.w / sa.w) if sa.w > 0 else 1.0
                x[a, b] = max(sm, sb.i / bw_floor)
    return x


def gpu_bounds(residents: Sequence[JobProfile], bw_floor: float = CONTENDED_BW_FLOOR,
               switch_cost: float = SWITCH_COST_MAX) -> np.ndarray:
    """Upper bound of each resident's slowdown on one GPU, shape ``(k,)``, each >= 1 (module
    docstring: ``S_a <= 1 + u_a sum_b q_b x_ab``, ``q`` tightened from 1).  1 for a lone
    job, on MIG, and for a job never on the GPU.  ``bw_floor`` in (0, 1], ``switch_cost``
    >= 0 (ValueError otherwise)."""
    if not 0.0 < bw_floor <= 1.0:
        raise ValueError(f"bw_floor: {bw_floor!r} must be in (0, 1]")
    if not switch_cost >= 0.0:
        raise ValueError(f"switch_cost: {switch_cost!r} must be >= 0")
    k = len(residents)
    if k < 2:
        return np.ones(k)
    mech = gpu_mechanism(residents)
    sides = [side(p) for p in residents]
    x = _coefficients(sides, mech, bw_floor, switch_cost)
    u = np.array([s.u for s in sides])
    cap = (1.0 - u) + u * k * (1.0 + switch_cost) if mech == "timeslice" else np.inf
    q = np.where(u > 0.0, 1.0, 0.0)
    s = np.ones(k)
    for _ in range(_ITERS):
        s = np.minimum(1.0 + u * (x @ q), cap)
        q_new = np.where(u > 0.0, np.minimum(q, 1.0 - (1.0 - u) / s), 0.0)
        if np.max(np.abs(q_new - q)) < _TOL:
            break
        q = q_new
    return np.maximum(s, 1.0)


def pair_bound(a: JobProfile, b: JobProfile, bw_floor: float = CONTENDED_BW_FLOOR,
               switch_cost: float = SWITCH_COST_MAX) -> float:
    """:func:`gpu_bounds` of ``a`` with ``b`` alone beside it."""
    return float(gpu_bounds([a, b], bw_floor, switch_cost)[0])


#: most resident sets :class:`MechanismBound` keeps (cleared when full)
_GPU_CACHE_LIMIT = 100_000


class MechanismBound:
    """:func:`gpu_bounds` as a slowdown model (``pair_slowdown``, ``gpu_slowdowns``)."""

    version = "mechanism-bound-1"

    def __init__(self, bw_floor: float = CONTENDED_BW_FLOOR,
                 switch_cost: float = SWITCH_COST_MAX):
        gpu_bounds([], bw_floor, switch_cost)  # validates
        self.bw_floor, self.switch_cost = float(bw_floor), float(switch_cost)
        # residents -> their bounds: a function of them and the two constants (13 % of a
        # 512-GPU llm-mix replay's CPU before; bench/sim_cpu.py)
        self._gpu_memo = ResidentsMemo(_GPU_CACHE_LIMIT)

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        return pair_bound(a, b, self.bw_floor, self.switch_cost)

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        return self._gpu_memo.get(
            residents, lambda r: gpu_bounds(r, self.bw_floor, self.switch_cost))
