"""The contention prior: a co-location slowdown from the two jobs' solo activity alone
(docs/predictor.md, "The contention prior").  It serves before any pair is observed; the
learned model (:mod:`elastico.predictor.model`, feature set ``activity-v2``) only corrects it.

Nothing here is fitted: every quantity is a measured counter of a solo profile or a share the
placement sets, and the formulas are the roofline argument below.  No constant was chosen on
any slowdown measurement.

**One job's activity** (:func:`solo_activity`), from its solo profile on the pair's GPU:

* ``u`` -- busy fraction: the share of the job's step during which its kernels hold the GPU.
  The measured ``sm_activity`` (DCGM ``SM_ACTIVE``) when the profile has it (source
  ``measured``).  Else the Amdahl parallel fraction ``p`` of the job's model family from the
  throughput model's MISO fit (:meth:`elastico.perf.throughput.ThroughputModel.
  parallel_fraction`; a job alone on a whole GPU at normalized speed 1 spends ``p`` of its step
  on the GPU) -- how Gavel's pairs, which carry no counters, get one (source ``catalogue``;
  data/gavel-pair-observations/PROVENANCE.md).  (Inverting Amdahl's law on each Gavel job
  type's K80 -> V100 solo speedup was tried instead: most types speed up by more than the
  FP32 peak ratio, so nearly all read as busy 100 %, and the Recommendation types run slower
  on the V100 -- the rule cannot read Gavel's solo numbers.)  Else 1.0, busy all the time (source
  ``default``: the worst case, so an unprofiled job is never taken for a light one).
  LIMITATION: ``SM_ACTIVE`` counts (SMs held x time), so a narrow kernel that holds few SMs
  for long reads low although it holds the GPU's time slice all along; with time-slicing the
  prior then under-states the wait.  A profile's GPU utilisation (DCGM ``GPU_UTIL``) would be
  the right busy time; the schema has no field for it.
* ``w`` -- width: the fraction of the SMs the job may use, its MPS active thread percentage
  / 100 (``mps_share``), 1.0 without a limit (NVIDIA MPS documentation,
  "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": a client's kernels run on at most that share of SMs).
* ``i`` -- DRAM intensity: the fraction of the memory bandwidth the job uses *while busy*,
  ``min(1, dram_activity / u)`` (DCGM ``DRAM_ACTIVE`` is a time average over the whole step,
  the busy phases carry all of it).  1.0 when ``dram_activity`` is not measured (the worst
  case: then an MPS share gives no relief on memory bandwidth).

**A pair** (:func:`prior_slowdowns`): slowdown of the *victim* ``a`` next to the *partner*
``b``.  Their busy phases fall at independent times (no common clock; the same assumption as
:func:`elastico.perf.activity.combine`), so ``b`` is busy during a fraction ``u_b`` of
``a``'s busy time.  ``a``'s step is ``(1 - u_a)`` off the GPU, untouched by the partner, plus
``u_a`` on it, stretched while both are busy:

* **MIG** (either side ``sharing == "mig"``): 1.  Instances own disjoint SMs, L2 slices and
  memory controllers (NVIDIA MIG user guide, "Introduction"); the prior ignores what MIG does
  not isolate (PCIe, power).
* **Time-slicing** (either side ``"timeslice"``; the driver's default, one context at a time):
  the contexts take turns, so each unit of ``a``'s GPU work waits for ``b``'s work that falls
  in it: ``s_a = 1 + u_a * u_b``.  Two jobs busy all the time get 2 each, the round-robin
  share (Gavel, Narayanan et al. OSDI'20, 4.1: time-sliced jobs each get their turn of the
  GPU; NVIDIA k8s-device-plugin time-slicing: "no memory or fault isolation", contexts
  interleaved).
* **MPS** (``"mps"`` or not given): kernels of both clients run at once on the SMs and share
  the memory bandwidth.  While both are busy the demand on the SMs is ``w_a + w_b`` and on
  DRAM bandwidth ``i_a + i_b`` (fractions of what the GPU has); a resource demanded beyond 1
  is shared, so the overlapping busy time runs ``D = max(1, w_a + w_b, i_a + i_b)`` times
  slower -- the roofline bound (Williams, Waterman, Patterson, CACM 2009: a kernel runs at the
  lower of its compute and bandwidth ceilings, here the share of each ceiling left to it;
  MISO, Li et al. SoCC'22, and Gavel measure MPS co-location slowdowns of this order):
  ``s_a = 1 + u_a * u_b * (D - 1)``.  Without shares ``D = 2`` and this equals time-slicing;
  with shares that fit (``w_a + w_b <= 1``) only memory bandwidth contends.
* A job with ``u == 0`` (never on the GPU) is neither slowed nor slowing: ``s = 1``.

So the prior lies in [1, 2] for a pair; on one GPU the extra slowdowns add up
(:func:`elastico.predictor.analytic.compose_additive`, the project's composition rule).
What it leaves out -- L2 cache thrashing, context-switch cost, launch queueing, memory
capacity -- is what the learned correction is for.  The GPU's specs do not enter: every
counter is a fraction of the same GPU's capacity (the profile is taken on the pair's GPU
model).

Who calls it: :mod:`elastico.predictor.activity_features` (the prior is the learned model's
base), the ``analytic`` baseline of ``elastico predictor score``, bench/predictor_loo_bench.py.
Whom it calls: numpy, the throughput model's Amdahl fractions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from elastico.predictor.analytic import compose_additive
from elastico.predictor.profile import JobProfile

__all__ = [
    "ACTIVITY_SOURCES",
    "MECHANISMS",
    "Activity",
    "solo_activity",
    "mechanism",
    "prior_slowdowns",
    "prior_pair",
    "ContentionPrior",
    "worst_case_profile",
    "is_worst_case",
    "UnknownSafe",
    "worst_case_pair",
]

#: Where a job's busy fraction ``u`` came from (:func:`solo_activity`).
ACTIVITY_SOURCES = ("measured", "catalogue", "default")
#: Sharing mechanisms of a pair, as :func:`mechanism` names them.
MECHANISMS = ("mps", "timeslice", "mig")


@dataclass(frozen=True)
class Activity:
    """A job's solo activity as the prior reads it (module docstring): ``u`` busy fraction,
    ``w`` SM width (MPS share), ``i`` DRAM intensity while busy, all in [0, 1];
    ``source`` one of :data:`ACTIVITY_SOURCES`."""

    u: float
    w: float
    i: float
    source: str


@lru_cache(maxsize=1)
def _parallel() -> dict[str, float]:
    from elastico.perf.throughput import GAVEL_TO_MISO, ThroughputModel

    tm = ThroughputModel.bundled()
    out = {fam: tm.parallel[miso] for fam, miso in GAVEL_TO_MISO.items()}
    out.update(tm.parallel)
    return out


def _family(p: JobProfile) -> str | None:
    if p.model_family is not None:
        return p.model_family
    from elastico.predictor.features import family_and_batch

    return family_and_batch(p.job_type)[0]


@lru_cache(maxsize=65536)
def solo_activity(p: JobProfile) -> Activity:
    """The job's :class:`Activity` (module docstring: measured counters first, then the
    catalogue's Amdahl fraction for a job without counters, then the worst case)."""
    w = 1.0 if p.mps_share is None else float(p.mps_share)
    if p.sm_activity is not None:
        u, src = float(p.sm_activity), "measured"
    else:
        fam = _family(p)
        u = _parallel().get(fam) if fam is not None else None
        u, src = (float(u), "catalogue") if u is not None else (1.0, "default")
    return Activity(u, w, dram_intensity(p, u), src)


def dram_intensity(p: JobProfile, u: float) -> float:
    """DRAM intensity while busy, in [0, 1]: the profile's DRAM activity over its busy fraction
    ``u`` (both fractions of time, DCGM 1005 over 1002), capped at 1; 1 (the worst case) with no
    DRAM counter, 0 for a job never busy."""
    if p.dram_activity is None:
        return 1.0
    if u > 0.0:
        return min(1.0, float(p.dram_activity) / u)
    return 0.0


def mechanism(a: JobProfile, b: JobProfile) -> str:
    """The pair's sharing mechanism (:func:`mechanism_of` of the two)."""
    return mechanism_of((a, b))


def mechanism_of(profiles: Sequence[JobProfile]) -> str:
    """The sharing mechanism of jobs on one GPU: ``mig`` if any says MIG, else ``timeslice``
    if any says time-slicing, else ``mps`` (the default of Gavel's runtime and of the
    project's co-location; docs/model.md, "Sharing mechanisms")."""
    s = {p.sharing for p in profiles}
    if "mig" in s:
        return "mig"
    if "timeslice" in s:
        return "timeslice"
    return "mps"


def prior_slowdowns(victims: Sequence[JobProfile], partners: Sequence[JobProfile]
                    ) -> np.ndarray:
    """The prior's slowdown of ``victims[k]`` next to ``partners[k]``, shape ``(n,)``, each
    in [1, 2] (module docstring)."""
    n = len(victims)
    if len(partners) != n:
        raise ValueError("victims and partners must have the same length")
    out = np.ones(n)
    for k in range(n):
        out[k] = prior_pair(victims[k], partners[k])
    return out


def prior_pair(a: JobProfile, b: JobProfile) -> float:
    """Slowdown of ``a`` next to ``b`` by the prior (module docstring), in [1, 2]."""
    mech = mechanism(a, b)
    if mech == "mig":
        return 1.0
    xa, xb = solo_activity(a), solo_activity(b)
    if xa.u <= 0.0 or xb.u <= 0.0:
        return 1.0
    if mech == "timeslice":
        return 1.0 + xa.u * xb.u
    d = max(1.0, xa.w + xb.w, xa.i + xb.i)
    s = 1.0 + xa.u * xb.u * (d - 1.0)
    return s if math.isfinite(s) else 1.0


class ContentionPrior:
    """:class:`~elastico.predictor.analytic.SlowdownModel` of the prior alone (the
    ``analytic`` baseline of ``predictor score`` and the model's base)."""

    version = "contention-prior-1"

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        return prior_pair(a, b)

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        return compose_additive(self, residents)


# -- unknown jobs (issue 23, deliverable 3; docs/predictor.md, "Unknown jobs") -------------------

def worst_case_profile(p: JobProfile) -> JobProfile:
    """``p`` as a job with no solo profile yet is assumed to behave: activity at its maximum
    -- busy all the time (``sm_activity`` 1, so the prior's ``u`` = 1), DRAM intensity 1
    (``dram_activity`` 1: ``i`` = 1), full SM width within its share (``mps_share`` kept: the
    MPS limit is enforced by the driver, so the width is the share and no more) -- and
    ``gpu_activity`` 1.  Everything else (kind, memory, GPU model, mechanism) is kept."""
    import dataclasses

    return dataclasses.replace(p, sm_activity=1.0, dram_activity=1.0, gpu_activity=1.0)


def is_worst_case(p: JobProfile) -> bool:
    """True for a profile at the worst case of :func:`worst_case_profile` (SM and DRAM
    activity both 1).  A measured profile that reads 1 and 1 *is* that worst case, so treating
    it as unknown changes nothing the prior says about it."""
    return p.sm_activity == 1.0 and p.dram_activity == 1.0


class UnknownSafe:
    """The placer's slowdown model with the bound rule (docs/predictor.md, "Unknown jobs" and
    "Outside the domain"): on a GPU where some resident has a worst-case profile
    (:func:`is_worst_case`, the profile the catalogue gives a job with no solo profile yet)
    -- or, with ``outside_domain`` (the default), where some ordered pair of residents lies
    outside the validated domain of ``base``'s prediction (``base.in_domain``) -- each
    resident's slowdown is the larger of ``base``'s prediction and the *mechanism bound*
    (:func:`elastico.predictor.worst_case.gpu_bounds`: the largest slowdown co-residents can
    inflict under the GPU's sharing mechanism -- an unknown job busy all the time, any DRAM
    intensity, any SMs its MPS share allows; known residents at their measured counters).  So
    such a job is co-located only where that bound keeps every resident within its slowdown
    bound; elsewhere the bound check refuses and it runs alone (an empty GPU, or its own MIG
    instance: MIG slowdowns are 1).

    Why outside the domain too (issue 24): a learned model's correction serves only inside
    the domain it was trained on; outside it the prior alone answers, and the prior is an
    *estimate* (its MPS value under-reads memory-bandwidth contention that the mechanism
    allows), so a bound checked on it is not a guarantee.  Measured:
    ``elastico simulate --workload llm-mix --cluster a100h100-mig --gpus 64 --load 0.5
    --arrivals continuous --policy elastico --seed S``, seeds 1-4: training jobs past their
    bound for > 5 % of their run 4/2/4/0 with the rule for unknown jobs only, 0/0/0/0 with
    it (docs/predictor.md 6c).

    GPUs where every pair is trusted and no resident is unknown get ``base``'s slowdowns
    unchanged (bit for bit).  ``base``: any SlowdownModel; the domain rule needs its
    ``in_domain(victim, partner)`` (:class:`~elastico.predictor.learned.LearnedSlowdown`, and
    the placer's gRPC client, which the predictor service tells per pair); a model without it
    (the analytic model, :class:`~elastico.predictor.NoInterference`) gets the unknown-job
    rule only.  ``bound``: the worst-case model (default
    :class:`~elastico.predictor.worst_case.MechanismBound` at its documented constants)."""

    def __init__(self, base, bound=None, *, outside_domain: bool = True):
        from elastico.predictor.worst_case import MechanismBound

        self.base = base
        self._bound = bound if bound is not None else MechanismBound()
        self.outside_domain = bool(outside_domain)
        self.version = getattr(base, "version", "?")

    def __getattr__(self, name):  # fell_back, degraded flags, ... of the base model
        if name in ("base", "_bound", "outside_domain"):  # not set yet (copy / unpickle)
            raise AttributeError(name)
        return getattr(self.base, name)

    def _bounded(self, residents: Sequence[JobProfile]) -> bool:
        """Whether the mechanism bound applies on a GPU with these residents."""
        if any(is_worst_case(p) for p in residents):
            return True
        f = getattr(self.base, "in_domain", None)
        if not self.outside_domain or f is None:
            return False  # a model that cannot say where it is validated: unknown jobs only
        return not all(f(v, p) for i, v in enumerate(residents)
                       for k, p in enumerate(residents) if i != k)

    def pair_slowdown(self, a: JobProfile, b: JobProfile) -> float:
        s = self.base.pair_slowdown(a, b)
        if self._bounded((a, b)):
            s = max(s, self._bound.pair_slowdown(a, b))
        return s

    def gpu_slowdowns(self, residents: Sequence[JobProfile]) -> np.ndarray:
        out = np.asarray(self.base.gpu_slowdowns(residents), float)
        if len(residents) >= 2 and self._bounded(residents):
            out = np.maximum(out, self._bound.gpu_slowdowns(residents))
        return out


def worst_case_pair(a: JobProfile, b: JobProfile) -> float:
    """The prior's largest slowdown of ``a`` next to ``b`` over what is not known of where
    their kernels run: 1 on MIG, else ``1 + u_a * u_b`` -- the prior's time-slicing value,
    which is also its MPS value at ``D = 2``, the most ``D = max(1, w_a + w_b, i_a + i_b)``
    can be for a pair.  Why not the MPS value with the shares' widths: an MPS active thread
    percentage caps *how many* SMs a client's kernels may use, not *which* -- clients "may
    execute on the same SM, depending on load-balancing" (NVIDIA MPS documentation, section
    2.3.5.2 / "Volta MPS execution resource provisioning") -- so two clients whose shares
    sum to <= 1 can still contend for the same SMs, and a bound that must hold for a job
    never measured cannot count on them not doing so.  ``u`` as :func:`solo_activity` reads
    it (1 for a worst-case profile).  NOT a bound of what the mechanism allows (memory
    bandwidth contention can exceed it, e.g. at a small MPS share): the placer's rule uses
    :mod:`elastico.predictor.worst_case` instead; this is the prior's value, kept for
    comparison (docs/predictor.md 6b)."""
    if mechanism(a, b) == "mig":
        return 1.0
    xa, xb = solo_activity(a), solo_activity(b)
    return 1.0 + xa.u * xb.u

