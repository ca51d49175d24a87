"""Activity over time of a job on its GPUs: busy and idle phases, read as DCGM reads a GPU.

Who calls it: the simulator's utilisation metrics (:mod:`elastico.sim.utilisation`),
``bench/activity_model.py`` (the fit of :data:`LEVEL_MIX` and the ``sm_active_ks`` check) and
tests.  Whom it calls: :mod:`elastico.paths` (two bundled CSVs, read once), numpy, scipy's
inverse regularised incomplete beta function.  Pure: no clock, no state; every draw is seeded
by ``(seed, job id)``, so a job has the same activity under every policy of a run.

**What DCGM measures** (NVIDIA DCGM user guide, "Profiling Metrics",
https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html; NVML
``nvmlUtilization_t``, https://docs.nvidia.com/deploy/nvml-api/structnvmlUtilization__t.html):

* ``DCGM_FI_PROF_SM_ACTIVE`` (1002): "the fraction of time at least one warp was active on a
  multiprocessor, averaged over all multiprocessors"; warps waiting on memory count as active;
  "a kernel using N/5 blocks that runs over the entire time interval will correspond to an
  activity of 0.2".  So SM activity = the sum over kernels of (fraction of SMs they hold x
  fraction of the interval they run).
* ``DCGM_FI_DEV_GPU_UTIL`` (203, nvidia-smi's "GPU-Util"): "percent of time over the past sample
  period during which one or more kernels was executing on the GPU" -- the length of the union
  of the kernels' busy intervals, however few SMs they hold.
* ``DCGM_FI_PROF_DRAM_ACTIVE`` (1005): the fraction of cycles the device memory interface sends
  or receives data.

**The model of one job** (docs/model.md 10.).  A step alternates three phases, as fractions of
the step: *compute* (``kernel - sync``: the job's kernels hold ``level`` of the GPU's SMs),
*all-reduce* (``sync``: a data-parallel job waits for its gradients; only NCCL's few blocks run,
counted as no SM activity -- ASSUMPTION, NCCL runs one block per channel, a few SMs of 40-132
-- but as kernel time) and *idle* (``1 - kernel``: no kernel -- input pipeline, host work).
Per job, seeded:

* ``level`` ~ the mixture :data:`LEVEL_MIX` of two beta distributions, fitted
  (``bench/activity_model.py --fit``) so that the population reproduces the calibration CDF;
* ``kernel`` ~ AcmeTrace Seren's ``DCGM_FI_DEV_GPU_UTIL`` distribution given a value above 0
  (its quantile function, linear between the 1,000 bundled quantiles);
* ``sync``: for a data-parallel job on more than one GPU, the median share of its step Sia
  measured waiting for the all-reduce (``data/sia-sync-share``) on the same GPUs and nodes, for a
  Sia job drawn uniformly among the six and the Sia cluster of the job's GPU model (T4, V100,
  A100; another model: the median over the five clusters); 0 on one GPU (no all-reduce);
  ``step_s`` the same rows' median step time;
* ``dram_level``: its DRAM activity while computing, from its roofline compute-bound share
  ``phi`` on its GPU (:func:`elastico.perf.contention.roofline_dram`:
  ``(1 - phi) x SOLO_BW_EFFICIENCY``; ``phi`` from the training roofline fitted to measured
  speeds, or an LLM inference job's prefill share): the same number the simulator's contention
  truth uses as the job's DRAM demand, so what a node measures alone and what contention the
  truth charges come from one source.  Not drawn: no bundled trace has DRAM activity
  (AcmeTrace's CSV has none), so it is not calibrated against a population.

Its SM activity alone on a whole GPU is ``level x (kernel - sync)``, its GPU utilisation
``kernel``.  Calibration (data/acmetrace-gpu-utilization/PROVENANCE.md): AcmeTrace Seren's
``DCGM_FI_PROF_SM_ACTIVE`` quantiles **above 0** -- the mass at 0 mixes GPUs no job held with
held-but-idle ones, which no job model can claim.  Seren (663,813 GPU jobs) is the calibration,
Kalos (19,907) the held-out comparison; their own CDFs are 0.15 apart in KS distance, so no
single model reproduces both within 0.1.

**Co-located jobs** (:func:`combine`): a GPU's reading from its residents, never above 1:

* ``"mps"`` (MPS clients, or one job alone): the clients' kernels run at once.  SM activity =
  ``E[min(1, sum_i sm_i B_i)]`` with ``B_i`` independent Bernoulli(``compute_i``): each
  client's compute phases fall at independent times (no common clock), and resident warps of
  different clients on different SMs add up (DCGM's N/5-blocks rule) until every SM holds one.
  MPS's active-thread percentage caps a client's SMs, so with shares summing to at most 1 the
  cap never binds and this is ``sum_i sm_i compute_i`` exactly.  GPU utilisation = the union of
  the clients' kernel intervals under the same independence, ``1 - prod_i (1 - kernel_i)``
  (NVML's "one or more kernels").  DRAM activity like SM activity.
* ``"mig"``: instances own disjoint SMs and memory slices (NVIDIA MIG user guide), so their SM
  and DRAM activities add (each at most its slice), and GPU utilisation is the same union.
* ``"time-slicing"``: the GPU runs one context at a time (CUDA time-slicing), so the contexts'
  busy intervals are disjoint: SM activity ``min(1, sum_i sm_i compute_i)``, GPU utilisation
  ``min(1, sum_i kernel_i)``; the caller gives each job's fractions of *wall* time (its solo
  fractions over its time-slicing slowdown), and the cap binds only where measured pair
  slowdowns are below what turn-taking could deliver.
"""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy.special import betaincinv

from elastico.errors import InvalidArgument
from elastico.paths import data_file
from elastico.perf.contention import job_compute_bound, roofline_dram

__all__ = [
    "ActivityProfile", "Phase", "Resident", "GpuActivity", "MECHANISMS", "LEVEL_MIX",
    "CALIBRATION_CLUSTER", "HELD_OUT_CLUSTER", "SM_ACTIVE", "GPU_UTIL", "SIA_JOBS",
    "acmetrace_quantiles", "sync_share", "draw_profile", "combine", "ks_distance",
    "population_sm_active",
]

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: the AcmeTrace cluster the level distribution is fitted to, and the held-out one
CALIBRATION_CLUSTER = "Seren"
HELD_OUT_CLUSTER = "Kalos"

#: The per-job SM level while computing: with probability ``w_low`` a draw from
#: Beta(a_low, b_low), else from Beta(a, b).  Fitted by ``bench/activity_model.py --fit``
#: (minimum KS distance of 20,000 one-GPU jobs to Seren's SM_ACTIVE above 0, Nelder-Mead from
#: three starts, seed 0: KS 0.041); the low component stands for jobs that hold GPUs with little SM
#: activity (debugging, evaluation, small models).
LEVEL_MIX: Mapping[str, float] = MappingProxyType({"w_low": 0.176, "a_low": 0.702,
                                                   "b_low": 3.06, "a": 7.23, "b": 3.14})

#: the Sia jobs whose all-reduce shares are bundled (data/sia-sync-share)
SIA_JOBS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
#: Sia cluster of each GPU model measured there (simulator_config.py); others use all five
_SIA_CLUSTER_OF = {"T4": "aws", "V100M16": "azure", "V100M32": "azure",
                   "V100-PCIE-16GB": "azure", "V100-PCIE-32GB": "azure",
                   "V100S-PCIE-32GB": "azure", "A100-40GB": "dgx-ext", "A100-80GB": "dgx-ext",
                   "A100-80GB-PCIE": "dgx-ext"}
MECHANISMS = ("mps", "mig", "time-slicing")
#: more co-residents than this: the MPS expectation is bounded by min(1, mean) (Jensen) and
#: by the chance that any of them computes
MAX_EXACT_RESIDENTS = 16


# ------------------------------------------------------------------------------------------
# bundled data
# ------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _acmetrace() -> dict[tuple[str, str], tuple[float, ...]]:
    out: dict[tuple[str, str], list[float]] = {}
    with open(data_file("acmetrace-gpu-utilization", "gpu_util_cdf.csv"), newline="") as f:
        for r in csv.DictReader(f):
            out.setdefault((r["cluster"], r["metric"]), []).append(float(r["value_pct"]) / 100.0)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def acmetrace_quantiles(cluster: str = CALIBRATION_CLUSTER, metric: str = SM_ACTIVE, *,
                        positive: bool = True) -> np.ndarray:
    """AcmeTrace's bundled quantiles of ``metric`` on ``cluster`` as fractions, sorted (1,000
    evenly spaced quantiles; with ``positive`` only those above 0: the distribution given a
    value above 0).  InvalidArgument for a cluster or metric the CSV does not hold."""
    data = _acmetrace()
    clusters = sorted({c for c, _ in data})
    if cluster not in clusters:
        raise InvalidArgument("cluster", cluster, f"one of {clusters}")
    metrics = sorted(m for c, m in data if c == cluster)
    if metric not in metrics:
        raise InvalidArgument("metric", metric, f"one of {metrics} for {cluster}")
    v = np.asarray(data[(cluster, metric)], float)
    return v[v > 0] if positive else v


@lru_cache(maxsize=None)
def _sync_rows() -> dict[tuple[str, str], list[tuple[int, int, float, float]]]:
    rows: dict[tuple[str, str], list[tuple[int, int, float, float]]] = {}
    with open(data_file("sia-sync-share", "sync_share.csv"), newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault((r["sia_job"], r["sia_cluster"]), []).append(
                (int(r["gpus"]), int(r["nodes"]), float(r["sync_share_median"]),
                 float(r["step_time_median_s"])))
    return rows


def _lookup(rows: list[tuple[int, int, float, float]], gpus: int, nodes: int
            ) -> tuple[float, float]:
    """The row of the same node count with the most GPUs not above ``gpus`` (else the fewest
    above: never a count Sia did not measure extrapolated), from the largest node count not
    above ``nodes`` that was measured."""
    counts = sorted({n for _, n, _, _ in rows})
    node = max([n for n in counts if n <= nodes], default=counts[0])
    same = sorted((g, s, t) for g, n, s, t in rows if n == node)
    below = [x for x in same if x[0] <= gpus]
    g, s, t = below[-1] if below else same[0]
    return s, t


def sync_share(sia_job: str, gpu_model: str | None, gpus: int, nodes: int = 1
               ) -> tuple[float, float]:
    """``(share of a step in the all-reduce, median step seconds)`` Sia measured for
    ``sia_job`` on ``gpus`` GPUs over ``nodes`` nodes of ``gpu_model``'s Sia cluster (median
    over the five clusters for a model Sia did not run).  ``(0, step)`` on one GPU."""
    if sia_job not in SIA_JOBS:
        raise InvalidArgument("sia_job", sia_job, f"one of {list(SIA_JOBS)}")
    for name, v in (("gpus", gpus), ("nodes", nodes)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidArgument(name, v, "an integer >= 1")
    if nodes > gpus:
        raise InvalidArgument("nodes", nodes, f"at most gpus={gpus}")
    table = _sync_rows()
    cluster = _SIA_CLUSTER_OF.get(gpu_model or "")
    clusters = [cluster] if cluster else sorted({c for j, c in table if j == sia_job})
    found = [_lookup(table[(sia_job, c)], gpus, nodes) for c in clusters]
    share = float(np.median([s for s, _ in found]))
    step = float(np.median([t for _, t in found]))
    return (0.0 if gpus == 1 else share), step


# ------------------------------------------------------------------------------------------
# one job
# ------------------------------------------------------------------------------------------

def _fraction(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(v)) or not 0.0 <= float(v) <= 1.0:
        raise InvalidArgument(name, v, "a fraction in [0, 1]")
    return float(v)


@dataclass(frozen=True)
class Phase:
    """One phase of a step: ``name``, ``seconds``, SM and DRAM activity while it lasts (fractions
    of the GPU), ``kernel``: whether a kernel of the job runs (GPU utilisation counts it)."""

    name: str
    seconds: float
    sm: float
    dram: float
    kernel: bool


@dataclass(frozen=True)
class ActivityProfile:
    """A job's activity on each of its GPUs alone on a whole GPU (module docstring).

    ``level``: SM activity while its compute kernels run; ``dram_level`` the same for DRAM;
    ``kernel``: the fraction of time a kernel of it runs; ``sync``: the fraction in the
    all-reduce (part of ``kernel``); ``step_s``: one step's length; ``sia_job``: the Sia job
    whose all-reduce share it took.  Validated: fractions in [0, 1], ``sync <= kernel``,
    ``step_s > 0`` (InvalidArgument names the field, the value and what is allowed)."""

    level: float
    dram_level: float
    kernel: float
    sync: float = 0.0
    step_s: float = 1.0
    sia_job: str = ""

    def __post_init__(self) -> None:
        for f in ("level", "dram_level", "kernel", "sync"):
            object.__setattr__(self, f, _fraction(f"activity.{f}", getattr(self, f)))
        if self.sync > self.kernel + 1e-12:
            raise InvalidArgument("activity.sync", self.sync, f"at most kernel={self.kernel}")
        s = self.step_s
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise InvalidArgument("activity.step_s", s, "a finite number of seconds > 0")

    @property
    def compute(self) -> float:
        """Fraction of time in compute phases."""
        return max(0.0, self.kernel - self.sync)

    def sm_active(self) -> float:
        """DCGM_FI_PROF_SM_ACTIVE of the job alone on a whole GPU (time average)."""
        return self.level * self.compute

    def gpu_util(self) -> float:
        """DCGM_FI_DEV_GPU_UTIL of the job alone (time average)."""
        return self.kernel

    def dram_active(self) -> float:
        """DCGM_FI_PROF_DRAM_ACTIVE of the job alone (time average): ``dram_level x compute``."""
        return self.dram_level * self.compute

    def phases(self) -> tuple[Phase, ...]:
        """One step: compute, then the all-reduce, then idle (phases of zero length left out)."""
        out = (Phase("compute", self.compute * self.step_s, self.level, self.dram_level, True),
               Phase("all-reduce", self.sync * self.step_s, 0.0, 0.0, True),
               Phase("idle", (1.0 - self.kernel) * self.step_s, 0.0, 0.0, False))
        return tuple(p for p in out if p.seconds > 0)

    def sm_active_samples(self, duration_s: float, sample_s: float,
                          offset_s: float = 0.0) -> np.ndarray:
        """SM activity averaged over consecutive windows of ``sample_s`` seconds (as DCGM
        samples it) over ``duration_s`` seconds of steps repeating from ``-offset_s``: the
        job's activity over time.  Windows much longer than a step read :meth:`sm_active`."""
        for name, v in (("duration_s", duration_s), ("sample_s", sample_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise InvalidArgument(name, v, "a finite number of seconds > 0")
        if sample_s > duration_s:
            raise InvalidArgument("sample_s", sample_s, f"at most duration_s={duration_s}")
        n = int(duration_s // sample_s)
        edges = offset_s + sample_s * np.arange(n + 1)
        busy = self.compute * self.step_s

        def integral(t: np.ndarray) -> np.ndarray:  # SM-seconds from 0 to t
            steps, rem = np.divmod(t, self.step_s)
            return self.level * (steps * busy + np.minimum(rem, busy))

        return np.diff(integral(edges)) / sample_s


def _job_rng(job_id: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(job_id.encode())])


def _uniforms(job_id: str, seed: int) -> np.ndarray:
    """The four uniforms a job's profile is drawn from: mixture class, level, kernel, Sia job."""
    return _job_rng(job_id, seed).random(4)


def _level(u_class: np.ndarray | float, u_level: np.ndarray | float,
           mix: Mapping[str, float] = LEVEL_MIX) -> np.ndarray:
    low = np.asarray(u_class) < mix["w_low"]
    return np.where(low, betaincinv(mix["a_low"], mix["b_low"], u_level),
                    betaincinv(mix["a"], mix["b"], u_level))


def _kernel(u: np.ndarray | float) -> np.ndarray:
    q = acmetrace_quantiles(CALIBRATION_CLUSTER, GPU_UTIL)
    return np.interp(np.asarray(u) * (len(q) - 1), np.arange(len(q)), q)


def draw_profile(job_id: str, *, seed: int = 0, gpus: int = 1, nodes: int = 1,
                 gpu_model: str | None = None, data_parallel: bool = True,
                 sia_job: str | None = None, compute_bound: float | None = None
                 ) -> ActivityProfile:
    """The activity profile of job ``job_id`` on ``gpus`` GPUs over ``nodes`` nodes of
    ``gpu_model`` (module docstring), the same for the same ``(seed, job_id)``.
    ``data_parallel=False``: no all-reduce share (e.g. an inference job's replicas).
    ``sia_job``: the Sia job whose all-reduce share it takes instead of a drawn one (an LLM
    training job: ``bert``, the one attention model Sia measured; docs/model.md 10.); the
    other draws are unchanged by it.  ``compute_bound``: the job's roofline compute-bound share
    on ``gpu_model`` (:func:`elastico.perf.contention.job_compute_bound` for a training job of a
    known type; an LLM inference job's prefill share), which sets ``dram_level``
    (:func:`elastico.perf.contention.roofline_dram`); None: the median training type's on
    ``gpu_model``.  No draw depends on it."""
    if sia_job is not None and sia_job not in SIA_JOBS:
        raise InvalidArgument("sia_job", sia_job, f"one of {list(SIA_JOBS)} or None")
    if not isinstance(job_id, str) or not job_id:
        raise InvalidArgument("job_id", job_id, "a non-empty string")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgument("seed", seed, "an integer >= 0")
    u = _uniforms(job_id, seed)
    level = float(_level(u[0], u[1]))
    kernel = float(_kernel(u[2]))
    if sia_job is None:
        sia_job = SIA_JOBS[min(int(u[3] * len(SIA_JOBS)), len(SIA_JOBS) - 1)]
    share, step = sync_share(sia_job, gpu_model, gpus, nodes)
    sync = min(share, kernel) if data_parallel else 0.0
    if compute_bound is None:
        compute_bound = job_compute_bound(None, gpu_model)
    return ActivityProfile(level, roofline_dram(compute_bound), kernel, sync, step, sia_job)


def population_sm_active(n_jobs: int, *, seed: int = 0, gpus: int = 1, nodes: int = 1,
                         gpu_model: str | None = None,
                         mix: Mapping[str, float] = LEVEL_MIX) -> np.ndarray:
    """SM activity alone of ``n_jobs`` jobs ``"job-0"``, ``"job-1"``, ... drawn as
    :func:`draw_profile` draws them (with ``mix`` for the level: what the fit varies), one
    value per job: the population whose CDF the ``sm_active_ks`` check compares (each job
    equally long on equally many GPUs)."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs < 1:
        raise InvalidArgument("n_jobs", n_jobs, "an integer >= 1")
    u = np.array([_uniforms(f"job-{i}", seed) for i in range(n_jobs)])
    level = _level(u[:, 0], u[:, 1], mix)
    kernel = _kernel(u[:, 2])
    idx = np.minimum((u[:, 3] * len(SIA_JOBS)).astype(int), len(SIA_JOBS) - 1)
    shares = np.array([sync_share(j, gpu_model, gpus, nodes)[0] for j in SIA_JOBS])
    sync = np.minimum(shares[idx], kernel)
    return level * np.maximum(0.0, kernel - sync)


def ks_distance(sample: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray,
                weights: Sequence[float] | np.ndarray | None = None) -> float:
    """Kolmogorov-Smirnov distance ``sup_x |F(x) - G(x)|`` between the (``weights``-weighted)
    empirical CDF of ``sample`` and the empirical CDF of ``reference`` (both right-continuous
    step functions, compared at every jump).  InvalidArgument for empty or non-finite input
    or weights that are negative, all zero or of another length."""
    x = np.asarray(sample, float).ravel()
    r = np.sort(np.asarray(reference, float).ravel())
    for name, v in (("sample", x), ("reference", r)):
        if v.size == 0 or not np.all(np.isfinite(v)):
            raise InvalidArgument(name, f"{v.size} values", "a non-empty list of finite numbers")
    w = np.ones_like(x) if weights is None else np.asarray(weights, float).ravel()
    if w.shape != x.shape or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidArgument("weights", f"{w.size} values",
                              f"{x.size} finite weights >= 0, not all 0")
    order = np.argsort(x, kind="stable")
    xs, cw = x[order], np.cumsum(w[order]) / w.sum()
    grid = np.union1d(xs, r)
    f = np.concatenate([[0.0], cw])[np.searchsorted(xs, grid, side="right")]
    g = np.searchsorted(r, grid, side="right") / r.size
    return float(np.max(np.abs(f - g)))


# ------------------------------------------------------------------------------------------
# several jobs on one GPU
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resident:
    """One job on one GPU as :func:`combine` reads it, fractions of *wall* time on this GPU:
    ``sm`` (``dram``): the GPU's SMs (DRAM) it keeps active while computing; ``compute``: the
    time it computes; ``kernel``: the time a kernel of it runs (compute + all-reduce)."""

    sm: float
    dram: float
    compute: float
    kernel: float

    def __post_init__(self) -> None:
        for f in ("sm", "dram", "compute", "kernel"):
            object.__setattr__(self, f, _fraction(f"resident.{f}", getattr(self, f)))
        if self.compute > self.kernel + 1e-12:
            raise InvalidArgument("resident.compute", self.compute,
                                  f"at most kernel={self.kernel} (compute runs kernels)")


@dataclass(frozen=True)
class GpuActivity:
    """What DCGM reads on one GPU (time averages, fractions): SM activity, GPU utilisation,
    DRAM activity."""

    sm_active: float
    gpu_util: float
    dram_active: float


IDLE = GpuActivity(0.0, 0.0, 0.0)


def _expected_capped(levels: np.ndarray, probs: np.ndarray) -> float:
    """``E[min(1, sum_i levels_i B_i)]``, ``B_i`` independent Bernoulli(``probs_i``)."""
    if levels.sum() <= 1.0 + 1e-12:
        return float(levels @ probs)  # the cap cannot bind: linearity
    n = levels.size
    if n > MAX_EXACT_RESIDENTS:
        return float(min(1.0, levels @ probs))  # Jensen's bound (docs/metrics.md)
    states = (np.arange(1 << n)[:, None] >> np.arange(n)) & 1
    p = np.prod(np.where(states == 1, probs, 1.0 - probs), axis=1)
    return float(p @ np.minimum(1.0, states @ levels))


def combine(residents: Iterable[Resident], mechanism: str = "mps") -> GpuActivity:
    """One GPU's SM activity, GPU utilisation and DRAM activity from its ``residents`` under
    ``mechanism`` (one of :data:`MECHANISMS`; the rules in the module docstring).  Each value
    is in [0, 1]; no resident reads 0."""
    if mechanism not in MECHANISMS:
        raise InvalidArgument("mechanism", mechanism, f"one of {list(MECHANISMS)}")
    rs = list(residents)
    for i, r in enumerate(rs):
        if not isinstance(r, Resident):
            raise InvalidArgument(f"residents[{i}]", type(r).__name__, "a Resident")
    if not rs:
        return IDLE
    sm = np.array([r.sm for r in rs])
    dram = np.array([r.dram for r in rs])
    compute = np.array([r.compute for r in rs])
    kernel = np.array([r.kernel for r in rs])
    if mechanism == "time-slicing":
        return GpuActivity(min(1.0, float(sm @ compute)), min(1.0, float(kernel.sum())),
                           min(1.0, float(dram @ compute)))
    util = 1.0 - float(np.prod(1.0 - kernel))
    if mechanism == "mig":
        return GpuActivity(min(1.0, float(sm @ compute)), util, min(1.0, float(dram @ compute)))
    # E[min(1, sum)] <= P(some client computes): keeps Jensen's bound (many clients) below it
    any_compute = 1.0 - float(np.prod(1.0 - compute))
    return GpuActivity(min(_expected_capped(sm, compute), any_compute), util,
                       min(_expected_capped(dram, compute), any_compute))
