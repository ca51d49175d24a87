"""Contention of co-resident jobs on one GPU, from what each job does alone: the simulator's
ground truth where nobody measured the pair (docs/model.md, "Interference on other GPU models").

Who calls it: :mod:`elastico.sim.contention_truth` (the simulator's ground truth), ``bench/
contention_check.py`` (the check against Gavel's measured V100 pairs) and tests.  Whom it calls:
numpy, the GPU catalogue (:mod:`elastico.hardware`) and the training roofline's peak
(:func:`elastico.perf.training.compute_peak_tflops`).  Pure: plain data in, numbers out; no
clock, no state.  It shares no code and no parameter with the predictor's contention prior
(``services/predictor``): it is what the jobs *run at* in simulation, the prior is what the
scheduler *believes*.

**What each job does alone** (:class:`Demand`, fractions; on each of its GPUs):

* ``busy``: the fraction of its wall time it has work on the GPU (a kernel running:
  ``DCGM_FI_DEV_GPU_UTIL`` alone); the rest is host work (input pipeline, Python) that no
  co-resident slows.
* ``sm``: the fraction of the GPU's SMs its kernels hold while it is busy (SM activity while
  busy, ``DCGM_FI_PROF_SM_ACTIVE / GPU_UTIL``).
* ``dram``: the fraction of the GPU's peak DRAM bandwidth it uses while busy
  (``DCGM_FI_PROF_DRAM_ACTIVE / GPU_UTIL``).
* ``compute_bound``: the share ``phi`` of its busy time that SMs limit; the rest ``1 - phi`` is
  limited by memory bandwidth (the roofline: training, :mod:`elastico.perf.training`'s
  per-job ``a / C + b / B``; LLM prefill is compute-bound, ``phi ~ 1``, decode
  bandwidth-bound, ``phi ~ 0``: :mod:`elastico.perf.llm`).
* ``share``: its MPS active-thread percentage as a fraction (1 = none).

**Phase overlap.**  Each job alternates busy and idle phases at times independent of its
partners' (no common clock: separate processes, separate data loaders) -- the independence
:mod:`elastico.perf.activity` already assumes for SM activity.  So while job ``i`` is busy, the
set ``A`` of partners that are busy too is random, partner ``j`` in it with probability ``q_j``,
independently.  While ``A`` is busy alongside it, ``i``'s GPU work runs ``g_i(A) >= 1`` times
slower (the mechanism's rule, below; ``g_i(empty) = 1``).  Its idle phases are not slowed, so
its slowdown (wall time per unit of work relative to alone) is::

    S_i = (1 - busy_i) + busy_i * E_A[g_i(A)]

and the fraction of wall time it has GPU work pending -- what its partners see as ``q_i`` --
is ``busy_i E[g_i] / S_i`` (a slowed job's work waits longer, so it overlaps more).  ``q`` is
the fixed point of these equations, found by iteration from ``q = busy`` (each step can only
raise it, and it is bounded by 1, so the iteration converges monotonically).  ``E_A`` is exact
(every subset of the partners) up to :data:`MAX_EXACT_PARTNERS` partners, above that the
mean-field value ``g_i`` at the expected demands.

**The mechanisms** (``g_i(A)`` with ``m = |A|``):

* ``"time-slicing"`` (CUDA's default sharing of a GPU between processes; the Kubernetes device
  plugin's shared-GPU mode): one context runs at a time, and contexts with work take turns
  (NVIDIA GPU Operator documentation, "Time-Slicing GPUs in Kubernetes": the processes'
  work is interleaved in time, with no memory or fault isolation).  Round robin among the ``m + 1`` contexts
  with work, each switch costing ``switch_overhead`` of a time slice (the saved and restored
  context: instruction-level compute preemption, NVIDIA Tesla P100 whitepaper, "Compute
  Preemption"): ``g = (m + 1)(1 + switch_overhead)`` for ``m >= 1``.  ``S_i`` is at most
  ``k`` for ``k`` residents -- the round-robin bound (each context gets its ``1/k`` turn) the
  simulator's measured time-slicing truth also keeps; the overhead is not charged past it.
* ``"mps"`` (CUDA MPS: the clients' kernels run at the same time on one shared context, no
  time slicing; NVIDIA MPS documentation, "Volta MPS": the active-thread percentage "limits how
  much resources can be used by a client" without reserving them, and kernels of different
  clients "may execute on the same SM, depending on load-balancing").  Compute-bound work shares the SMs: with the busy
  clients' SM demands ``D = sum min(sm, share)`` over ``i`` and ``A``, each gets ``1/D`` of
  what it asks when ``D > 1`` (the block scheduler spreads everyone's blocks over the SMs).
  Bandwidth-bound work shares the DRAM: MPS does not partition memory bandwidth (the same
  documentation; :mod:`elastico.perf.llm` relies on it), and concurrent streams reach only
  ``bw_efficiency`` of the datasheet bandwidth together, so with ``W = sum dram`` the
  bandwidth-bound part runs ``W / max(bw_efficiency, dram_i)`` times slower when that is above
  1 (``dram_i``: job ``i``'s own solo use, so a lone job is never slowed)::

      g_i(A) = phi_i max(1, D) + (1 - phi_i) max(1, W / max(bw_efficiency, dram_i))

  Clients whose SM caps sum to at most 1 and whose bandwidth sums to at most
  ``bw_efficiency`` do not slow each other.
* ``"mig"``: instances own disjoint SMs, L2 slices, memory controllers and DRAM (NVIDIA MIG
  user guide, "each instance's processors have separate and isolated paths through the entire
  memory system"): ``S = 1``; what the slice's size costs is its solo speed (the MIG
  configuration's throughput), not interference.

**Parameters** (:class:`ContentionParams`; :data:`PARAM_RANGES` the plausible range each is
held to, :data:`PRESETS` the ``low`` / ``default`` / ``high`` contention the simulator's
``--contention`` names): ``switch_overhead`` and ``bw_efficiency``, sources at their
definitions.  Nothing here is fitted to measured pairs; ``bench/contention_check.py`` only
scores the model on Gavel's V100 pairs (docs/model.md has the numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from elastico.errors import InvalidArgument

__all__ = ["Demand", "ContentionParams", "PARAM_RANGES", "PRESETS", "MECHANISMS",
           "MAX_EXACT_PARTNERS", "slowdowns", "pair_slowdown", "contention_params",
           "compute_bound_on", "SOLO_BW_EFFICIENCY", "roofline_demand", "roofline_dram",
           "job_compute_bound"]

MECHANISMS = ("time-slicing", "mps", "mig")
#: above this many partners of one job ``E_A`` is the mean-field value (module docstring)
MAX_EXACT_PARTNERS = 10
_TOL = 1e-10
_MAX_ITER = 200

#: The plausible range of each parameter (inclusive); a value outside is refused.
#:
#: ``switch_overhead`` -- the time one time-slicing context switch costs, as a fraction of a
#: time slice.  A switch saves and restores a context with instruction-level compute
#: preemption (NVIDIA Tesla P100 whitepaper, "Compute Preemption"; Volta and later alike):
#: the SMs' registers and shared memory go to DRAM and back, which the GPU-preemption
#: literature puts at tens to a few hundred microseconds per switch, growing with the
#: context's state (Tanasic et al., "Enabling preemptive multiprogramming on GPUs", ISCA 2014;
#: Park et al., "Chimera", ASPLOS 2015 -- order of magnitude, not a measurement of today's
#: driver); the driver's time slice is of the order of milliseconds (``nvidia-smi
#: compute-policy --set-timeslice`` offers default / short / medium / long; ASSUMPTION: 1-2
#: ms for the default, NVIDIA publishes no length).  So 0.01-0.15 of a slice (the presets),
#: widened to [0, 0.25] for explicit values: 0 is free switching, 0.25 a 0.5 ms switch on a
#: 2 ms slice.
#:
#: ``bw_efficiency`` -- the fraction of the datasheet DRAM bandwidth concurrent streams
#: reach together.  One stream: ~0.83-0.9 of the datasheet (Jia et al., "Dissecting the
#: NVIDIA Volta GPU Architecture via Microbenchmarking", 2018: 750 of 900 GB/s on a V100;
#: BabelStream, Deakin et al., about 0.9 on V100 / A100 / H100).
#: Contending streams lose more to DRAM row-buffer conflicts than one stream (ASSUMPTION,
#: direction only), so the plausible range is [0.6, 1.0].
PARAM_RANGES: Mapping[str, tuple[float, float]] = MappingProxyType({
    "switch_overhead": (0.0, 0.25),
    "bw_efficiency": (0.6, 1.0),
})

#: ``--contention`` presets: ``default`` the middle of the cited values (a 50 us switch on a
#: 1-2 ms slice ~ 0.03-0.05: 0.05; one-stream BabelStream efficiency 0.9 lowered a little for
#: contending streams: 0.85), ``low`` and ``high`` the ends of the cited values (not of the
#: widened ranges): the least and the most contention the sources allow.
PRESETS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "low": MappingProxyType({"switch_overhead": 0.01, "bw_efficiency": 0.95}),
    "default": MappingProxyType({"switch_overhead": 0.05, "bw_efficiency": 0.85}),
    "high": MappingProxyType({"switch_overhead": 0.15, "bw_efficiency": 0.70}),
})


#: The fraction of the datasheet DRAM bandwidth one bandwidth-bound job streams at alone: V100
#: ~0.83-0.9 (Jia et al. 2018, 750 GB/s of 900 measured; BabelStream ~0.9), A100 and H100
#: ~0.9 (BabelStream, Deakin et al.).  A job's DRAM demand while busy is its bandwidth-bound
#: share times this (:func:`roofline_demand`).
SOLO_BW_EFFICIENCY = 0.9


def _number(name: str, v: object, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(v)) or not lo <= float(v) <= hi:
        raise InvalidArgument(name, v, f"a number in [{lo:g}, {hi:g}]")
    return float(v)


@dataclass(frozen=True)
class ContentionParams:
    """The contention model's parameters (module docstring; defaults :data:`PRESETS`
    ``default``).  Each is held to :data:`PARAM_RANGES`: InvalidArgument names the field
    (``contention.<name>``), the value and the range."""

    switch_overhead: float = PRESETS["default"]["switch_overhead"]
    bw_efficiency: float = PRESETS["default"]["bw_efficiency"]

    def __post_init__(self) -> None:
        for f in fields(self):
            lo, hi = PARAM_RANGES[f.name]
            object.__setattr__(self, f.name,
                               _number(f"contention.{f.name}", getattr(self, f.name), lo, hi))

    def describe(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name):g}" for f in fields(self))


def contention_params(spec: str | ContentionParams | None) -> ContentionParams:
    """Parameters from a preset name (``low``, ``default``, ``high``), explicit values
    (``"switch_overhead=0.1,bw_efficiency=0.8"``, the rest from ``default``), an instance, or
    None (``default``).  InvalidArgument (field ``contention``) for anything else."""
    if spec is None:
        return ContentionParams()
    if isinstance(spec, ContentionParams):
        return spec
    allowed = (f"one of {', '.join(PRESETS)}, or name=value pairs of "
               f"{', '.join(PARAM_RANGES)} separated by commas")
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgument("contention", spec, allowed)
    s = spec.strip()
    if s in PRESETS:
        return ContentionParams(**PRESETS[s])
    values: dict[str, float] = {}
    for part in s.split(","):
        name, eq, val = part.partition("=")
        name = name.strip()
        if not eq or name not in PARAM_RANGES or name in values:
            raise InvalidArgument("contention", spec, allowed)
        try:
            values[name] = float(val)
        except ValueError:
            lo, hi = PARAM_RANGES[name]
            raise InvalidArgument(f"contention.{name}", val.strip(),
                                  f"a number in [{lo:g}, {hi:g}]") from None
    return ContentionParams(**values)


@dataclass(frozen=True)
class Demand:
    """What one job does alone on one GPU (module docstring): ``busy``, ``sm``, ``dram``,
    ``compute_bound`` fractions in [0, 1]; ``share`` the MPS active-thread fraction in (0, 1]
    (1 = no cap).  InvalidArgument (field ``demand.<name>``) outside those ranges."""

    busy: float
    sm: float
    dram: float
    compute_bound: float
    share: float = 1.0

    def __post_init__(self) -> None:
        for name in ("busy", "sm", "dram", "compute_bound"):
            object.__setattr__(self, name, _number(f"demand.{name}", getattr(self, name), 0, 1))
        s = self.share
        if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(s)) or not 0.0 < float(s) <= 1.0:
            raise InvalidArgument("demand.share", s, "a fraction in (0, 1]")
        object.__setattr__(self, "share", float(s))


def _stretch_ts(n_busy: np.ndarray, o: float) -> np.ndarray:
    """Time-slicing ``g`` for ``n_busy`` busy partners."""
    return np.where(n_busy > 0, (n_busy + 1.0) * (1.0 + o), 1.0)


def _expected_stretch(i: int, d: Sequence[Demand], q: np.ndarray, mechanism: str,
                      p: ContentionParams) -> float:
    """``E_A[g_i(A)]`` over the busy subsets ``A`` of i's partners (module docstring)."""
    others = [j for j in range(len(d)) if j != i]
    me = d[i]
    sm = np.array([min(d[j].sm, d[j].share) for j in others])
    dram = np.array([d[j].dram for j in others])
    qo = q[others]
    sm_i = min(me.sm, me.share)
    denom_bw = max(p.bw_efficiency, me.dram)
    if len(others) > MAX_EXACT_PARTNERS:  # mean field: the expected demands
        if mechanism == "time-slicing":
            return float(_stretch_ts(np.array(qo.sum()), p.switch_overhead))
        D, W = sm_i + float(sm @ qo), me.dram + float(dram @ qo)
        return me.compute_bound * max(1.0, D) + (1 - me.compute_bound) * max(1.0, W / denom_bw)
    n = len(others)
    states = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1          # (2^n, n)
    prob = np.prod(np.where(states == 1, qo, 1.0 - qo), axis=1)         # (2^n,)
    if mechanism == "time-slicing":
        g = _stretch_ts(states.sum(axis=1), p.switch_overhead)
    else:
        D = sm_i + states @ sm
        W = me.dram + states @ dram
        g = me.compute_bound * np.maximum(1.0, D) \
            + (1.0 - me.compute_bound) * np.maximum(1.0, W / denom_bw)
    return float(prob @ g)


def slowdowns(demands: Sequence[Demand], mechanism: str,
              params: ContentionParams | None = None) -> np.ndarray:
    """Slowdown of each of ``demands`` (co-residents of one GPU) relative to running alone in
    the same configuration, shape ``(k,)``, each >= 1 (module docstring: the formula, its
    sources).  ``mechanism``: one of :data:`MECHANISMS`.  1.0 for a lone job, for every job
    under ``"mig"``, and for a job with ``busy == 0``; under time-slicing at most ``k``.
    InvalidArgument for an unknown mechanism or a non-:class:`Demand` entry."""
    if mechanism not in MECHANISMS:
        raise InvalidArgument("mechanism", mechanism, f"one of {list(MECHANISMS)}")
    d = list(demands)
    for n, x in enumerate(d):
        if not isinstance(x, Demand):
            raise InvalidArgument(f"demands[{n}]", type(x).__name__, "a Demand")
    p = params if params is not None else ContentionParams()
    k = len(d)
    if k < 2 or mechanism == "mig":
        return np.ones(k)
    busy = np.array([x.busy for x in d])
    q = busy.copy()
    s = np.ones(k)
    for _ in range(_MAX_ITER):
        g = np.array([_expected_stretch(i, d, q, mechanism, p) for i in range(k)])
        s = (1.0 - busy) + busy * g
        if mechanism == "time-slicing":
            s = np.minimum(s, float(k))
            g = np.where(busy > 0, (s - (1.0 - busy)) / np.where(busy > 0, busy, 1.0), 1.0)
        q_new = np.minimum(1.0, np.where(s > 0, busy * g / s, 0.0))
        if np.max(np.abs(q_new - q)) < _TOL:
            q = q_new
            break
        q = q_new
    return np.maximum(s, 1.0)


def pair_slowdown(victim: Demand, partner: Demand, mechanism: str,
                  params: ContentionParams | None = None) -> float:
    """:func:`slowdowns` of ``victim`` beside ``partner`` alone."""
    return float(slowdowns([victim, partner], mechanism, params)[0])


def roofline_dram(compute_bound: float) -> float:
    """A job's DRAM activity while it computes, as a fraction of the GPU's peak bandwidth, from
    its roofline compute-bound share ``phi`` on that GPU: the ONE rule for a job's DRAM
    activity in the simulator (the activity model's ``dram_level``, so the simulated node's solo
    measurement and the utilisation meter's ``dcgm_dram_active``, and the truth's
    :class:`Demand` ``dram``).  ``DCGM_FI_PROF_DRAM_ACTIVE`` is the fraction of cycles the
    device memory interface is active, i.e. ~ achieved bandwidth / peak (DCGM user guide,
    "Profiling Metrics").  While bandwidth-bound (``1 - phi`` of its compute time) a job streams
    at :data:`SOLO_BW_EFFICIENCY` of the peak; while compute-bound its DRAM traffic is counted
    as 0 (ASSUMPTION: it is small next to a streaming phase; the roofline's ``a / C + b / B``
    charges no bandwidth time to it either), so ``(1 - phi) x SOLO_BW_EFFICIENCY``.  ``phi``:
    training, :func:`job_compute_bound` (the roofline fitted to measured speeds,
    :mod:`elastico.perf.training`); LLM inference, the prefill share of its batch time (prefill
    compute-bound, decode bandwidth-bound: :mod:`elastico.perf.llm`).  InvalidArgument
    (field ``compute_bound``) for ``phi`` outside [0, 1]."""
    phi = _number("compute_bound", compute_bound, 0.0, 1.0)
    return (1.0 - phi) * SOLO_BW_EFFICIENCY


def roofline_demand(busy: float, sm: float, compute_bound: float, share: float = 1.0
                    ) -> Demand:
    """A job's :class:`Demand` from its busy fraction, SM level and roofline compute-bound share
    ``phi``: ``dram`` = :func:`roofline_dram` (``(1 - phi) SOLO_BW_EFFICIENCY``), the same number
    :mod:`elastico.perf.activity`'s ``dram_level`` carries for the job."""
    phi = _number("demand.compute_bound", compute_bound, 0.0, 1.0)
    return Demand(busy, sm, roofline_dram(phi), phi, share)


@lru_cache(maxsize=4096)
def _phi_ref(job_type: str | None) -> float:
    from elastico.perf.training import TrainingSpeedModel

    tr = TrainingSpeedModel.bundled()
    if job_type is not None:
        try:
            return float(tr.compute_share(job_type)[0])
        except InvalidArgument:
            pass
    return float(np.median([tr.compute_share(j)[0] for j in tr.job_types()]))


@lru_cache(maxsize=4096)
def job_compute_bound(job_type: str | None, gpu: str | None) -> float:
    """The roofline compute-bound share of a training job of ``job_type`` on ``gpu``: its share
    at the reference V100 (:meth:`elastico.perf.training.TrainingSpeedModel.compute_share`;
    a type the model does not know, or None: the median over its types -- ASSUMPTION, the
    middle of the measured types) moved to ``gpu`` by :func:`compute_bound_on` (``gpu`` None:
    the reference).  In [0, 1]."""
    phi = _phi_ref(job_type)
    return phi if gpu is None else compute_bound_on(phi, gpu)


def compute_bound_on(phi_ref: float, gpu: str, ref_gpu: str = "V100M16") -> float:
    """The compute-bound share of a roofline job on ``gpu`` given its share ``phi_ref`` on
    ``ref_gpu``: its compute time scales with ``1 / C`` and its bandwidth time with ``1 / B``
    (:mod:`elastico.perf.training`'s roofline, ``C`` the peak its training precision runs at,
    ``B`` the memory bandwidth, both from the catalogue), so
    ``phi_g = phi C_ref/C_g / (phi C_ref/C_g + (1 - phi) B_ref/B_g)``.  A GPU without catalogue
    figures (the trace's anonymised G2 / G3): ``phi_ref`` unchanged (ASSUMPTION, as the
    training model runs them as the reference V100).  InvalidArgument for ``phi_ref``
    outside [0, 1]."""
    from elastico.hardware import gpu_spec
    from elastico.perf.training import compute_peak_tflops

    phi = _number("phi_ref", phi_ref, 0.0, 1.0)
    try:
        c_g, b_g = compute_peak_tflops(gpu), gpu_spec(gpu).hbm_gbps
        c_r, b_r = compute_peak_tflops(ref_gpu), gpu_spec(ref_gpu).hbm_gbps
    except InvalidArgument:
        return phi
    if not (c_g and b_g and c_r and b_r):
        return phi
    a = phi * c_r / c_g
    b = (1.0 - phi) * b_r / b_g
    return a / (a + b) if a + b > 0 else phi
