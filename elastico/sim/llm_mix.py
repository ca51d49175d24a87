"""The ``llm-mix`` workload: training jobs and bursty offline LLM inference jobs arriving
continuously over a window (``elastico simulate|evaluate --workload llm-mix``).

Who calls it: :mod:`elastico.sim.evaluate`, ``elastico simulate`` and tests.  Whom it calls:
:mod:`elastico.sim.workload` (the trace's batch pods as training jobs of the measured families,
the window, the demand), :mod:`elastico.llm_job` and :mod:`elastico.llm_train_job` (the LLM
jobs), :mod:`elastico.perf.llm` (the model catalogue) and the bundled traces (read once).
Deterministic for a seed; no clock, no global state.  docs/model.md, "The llm-mix workload",
is the full description; in short:

* **Demand split.**  ``load`` is the demand offered in the measurement window
  (:func:`elastico.sim.workload.window_demand`: requested GPU-seconds / cluster GPU-seconds),
  as for the openb workload's continuous arrivals.  A share ``inference_share`` of it is
  offline LLM inference, the rest training; of the training demand a share
  :data:`LLM_TRAIN_SHARE` is LLM fine-tuning and the rest the measured families.  Each part is
  its own arrival process whose rate is found by bisection so that its demand in the window is
  its part of ``load`` (a documented choice: the split is of demand, not of job counts, so
  that a share means a share of the cluster).
* **Measured families** (kind ``training``): the trace's batch (BE) GPU pods through
  :func:`elastico.sim.workload.build_continuous_workload`: Poisson arrivals, each job a BE pod
  drawn with replacement -- its GPU request and share, CPU, memory and duration (the Alibaba
  GPU trace v2023; Weng et al., ATC'23) -- with a seeded Gavel/Sia job type.
* **LLM fine-tuning** (kind ``training``, ``Job.llm_train``): Poisson arrivals; a catalogue
  model with a full-fine-tuning plan on one 8-GPU node of the reference GPU, drawn uniformly;
  ``seq_len`` 4,096 and a global batch of 64 sequences (Llama 2's SFT recipe: Touvron et al.,
  arXiv:2307.09288, section 3.1); GPUs drawn uniformly from the counts of
  :data:`elastico.llm_train_job.GPU_COUNTS` at which a plan fits; its duration at the
  requested shape drawn from the trace's BE durations (the same source as the measured
  families), tokens = duration x the requested shape's tokens/s.
* **Offline LLM inference** (kind ``inference``, ``Job.llm``): arrivals in bursts -- the
  inter-arrival gaps of the Azure LLM inference trace 2023 (:data:`BURST_SOURCES`, in trace
  order from a seeded offset, wrapped) rescaled to unit mean, then by the rate; a catalogue
  model that fits one node of the reference GPU in fp16, drawn uniformly; the requested shape
  the smallest TP degree (1, 2, 4, 8) where it fits, one replica; the request lengths drawn
  with replacement from one of :data:`LENGTH_SOURCES` (drawn uniformly per job) and summed up
  as 8 classes (:func:`length_classes`, the rule of data/azure-llm-inference-2023/derive.py);
  its size (tokens) from a duration at the requested shape drawn from the trace's BE durations
  (the trace's batch pods include batch inference), tokens = duration x tokens/s.

The reference GPU (throughput 1.0 of every LLM job) is the cluster's GPU model with the most
memory (ties: the most GPUs) that the LLM catalogue knows (for LLM training: that has a cited
MFU).  A cluster where no GPU model has a cited MFU (the trace's own mix) gets no LLM training
job: that demand goes to the measured families (``Workload.mix_demand`` says so).
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Node
from elastico.sim.workload import MAX_LOAD, Workload, rate_for_demand
from elastico.trace import TracePod

__all__ = ["WORKLOADS", "OPENB", "LLM_MIX", "SHARE_SWEEP", "DEFAULT_INFERENCE_SHARE",
           "LLM_TRAIN_SHARE", "LENGTH_SOURCES", "BURST_SOURCES", "check_workload",
           "check_inference_share", "request_lengths", "sample_request_lengths",
           "length_classes", "arrival_gaps", "burst_epochs", "build_llm_mix_workload",
           "inference_models", "train_models", "reference_gpu", "MixWorkload", "PARTS", "check_cluster", "part_of",
           "mix_window"]

OPENB = "openb"
LLM_MIX = "llm-mix"
#: the workloads ``elastico simulate|evaluate --workload`` take
WORKLOADS = (OPENB, LLM_MIX)
#: the inference shares of the sensitivity sweep (issue 24: 0.2, 0.4, 0.6)
SHARE_SWEEP = (0.2, 0.4, 0.6)
#: default share of the offered demand that is offline LLM inference: the middle of the sweep
#: (a documented choice; no public trace gives a training / offline-inference split)
DEFAULT_INFERENCE_SHARE = 0.4
#: share of the training demand that is LLM fine-tuning (the rest: the measured families) --
#: a documented choice, half and half, so that both models of training are exercised
LLM_TRAIN_SHARE = 0.5
#: where an inference job's request lengths come from (drawn uniformly per job)
LENGTH_SOURCES = ("azure-conv", "azure-code", "mooncake-conv")
#: the traces whose inter-arrival gaps shape the inference arrivals
BURST_SOURCES = ("azure-conv", "azure-code")
DEFAULT_BURST_SOURCE = "azure-conv"
#: Llama 2's supervised fine-tuning: sequence length 4,096, batch 64 (Touvron et al., "Llama 2:
#: Open Foundation and Fine-Tuned Chat Models", arXiv:2307.09288, 2023, section 3.1)
SFT_SEQ_LEN = 4096
SFT_GLOBAL_BATCH = 64
#: requests drawn per inference job to set its length classes (the classes' shares; the
#: job's request count comes from its size)
LENGTH_SAMPLE = 2048
#: tokens of the probe job that gives a requested shape's tokens/s (enough requests for full
#: batches: ~7,000 Azure conversation requests)
PROBE_TOKENS = 1e7
#: the CPU cores and host GiB an LLM job asks for: a quarter of a DGX A100 node's per 8 GPUs
#: (128 cores, 2 TiB; NVIDIA DGX A100 datasheet) scaled to its GPUs
_CPU_PER_GPU = 128 / 8 / 4
_MEM_PER_GPU = 2048 / 8 / 4
_TP_DEGREES = (1, 2, 4, 8)
#: the parts of the workload (``Workload.mix`` keys)
PARTS = ("training-measured", "training-llm", "inference-llm")


def check_workload(value: object, field: str = "workload") -> str:
    """``value`` (in any case, returned in lower case) if it is one of :data:`WORKLOADS`, else
    InvalidArgument (field, value, allowed)."""
    if isinstance(value, str) and value.lower() in WORKLOADS:
        return value.lower()
    if value not in WORKLOADS:
        raise InvalidArgument(field, value, "one of " + ", ".join(WORKLOADS))
    return str(value)


def check_inference_share(value: object, field: str = "inference_share") -> float:
    """``value`` as a float if it is a number in [0, 1], else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidArgument(field, value, "a number in [0, 1] (the share of the offered "
                                            "demand that is offline LLM inference)")
    return float(value)


# ---- the traces ---------------------------------------------------------------------------

@lru_cache(maxsize=4)
def request_lengths(source: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of every request of ``source`` (:data:`LENGTH_SOURCES`),
    in trace order, as int arrays."""
    from elastico.paths import data_file

    if source in ("azure-conv", "azure-code"):
        path = data_file("azure-llm-inference-2023",
                         f"AzureLLMInferenceTrace_{source.split('-')[1]}.csv")
        cols = ("ContextTokens", "GeneratedTokens")
    elif source == "mooncake-conv":
        path = data_file("mooncake-llm-traces", "conversation_lengths.csv")
        cols = ("input_length", "output_length")
    else:
        raise InvalidArgument("lengths", source, "one of " + ", ".join(LENGTH_SOURCES))
    with open(path, newline="") as f:
        rows = [(int(r[cols[0]]), int(r[cols[1]])) for r in csv.DictReader(f)]
    a = np.array(rows, dtype=np.int64)
    return a[:, 0], a[:, 1]


def sample_request_lengths(source: str, n: int, rng: np.random.Generator
                           ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests' (prompt, output) lengths drawn uniformly with replacement from the
    requests of ``source`` (one ``rng.integers`` draw of ``n`` row indices)."""
    inp, out = request_lengths(source)
    k = rng.integers(len(inp), size=n)
    return inp[k], out[k]


def length_classes(inp: np.ndarray, out: np.ndarray) -> tuple[tuple[int, int, float], ...]:
    """8 request classes of equal count (the rule of data/azure-llm-inference-2023/derive.py):
    prompt quartiles (requests sorted by prompt, then output, then index), each halved by
    output (sorted by output, then prompt, then index); each class as its mean prompt and mean
    output tokens (rounded, at least 1) and its share of the requests.  Classes that would be
    empty (fewer than 8 requests) are dropped.  The token-weighted means are kept up to the
    rounding."""
    n = len(inp)
    idx = np.lexsort((np.arange(n), out, inp))  # by prompt, then output, then index
    classes = []
    for q in range(4):
        part = idx[q * n // 4:(q + 1) * n // 4]
        part = part[np.lexsort((part, inp[part], out[part]))]
        m = len(part)
        for h in range(2):
            cls = part[h * m // 2:(h + 1) * m // 2]
            if len(cls):
                classes.append((max(1, int(round(float(inp[cls].mean())))),
                                max(1, int(round(float(out[cls].mean())))), len(cls) / n))
    return tuple(classes)


@lru_cache(maxsize=4)
def arrival_gaps(source: str = DEFAULT_BURST_SOURCE) -> np.ndarray:
    """The inter-arrival gaps of the Azure trace ``source`` (:data:`BURST_SOURCES`) in trace
    order, divided by their mean (unit mean; seconds of the trace / its mean gap)."""
    from elastico.paths import data_file

    if source not in BURST_SOURCES:
        raise InvalidArgument("burst_source", source, "one of " + ", ".join(BURST_SOURCES))
    path = data_file("azure-llm-inference-2023",
                     f"AzureLLMInferenceTrace_{source.split('-')[1]}.csv")
    t = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            day, clock = r["TIMESTAMP"].split(" ")
            h, m, s = clock.split(":")
            t.append(int(day[-2:]) * 86400 + int(h) * 3600 + int(m) * 60 + float(s))
    g = np.diff(np.array(t))
    return g / g.mean()


def burst_epochs(rng: np.random.Generator, n: int, source: str = DEFAULT_BURST_SOURCE
                 ) -> np.ndarray:
    """``n`` arrival epochs of a unit-rate process with the trace's burst shape: the cumulative
    sum of the trace's unit-mean gaps (:func:`arrival_gaps`) taken in trace order from a seeded
    offset (one ``rng.integers`` draw), wrapping at the end.  The first arrival is one gap
    after 0.  Dividing by a rate ``lam`` gives arrivals at ``lam`` per second whose burstiness
    in units of the mean gap (gap CV, counts' dispersion over k mean gaps) is the trace's."""
    g = arrival_gaps(source)
    start = int(rng.integers(len(g)))
    return np.cumsum(np.take(g, np.arange(start, start + n), mode="wrap"))


# ---- the LLM models a cluster can run ------------------------------------------------------

def reference_gpu(nodes: Sequence[Node], *, training: bool) -> str | None:
    """The cluster's GPU model with the most memory, ties broken by the most GPUs, then by
    name, among those the LLM catalogue knows (``training``: with a cited MFU); None if
    none."""
    from elastico import hardware
    from elastico.llm_train_job import train_gpu_known

    gpus: Counter = Counter()
    mem: dict[str, float] = {}
    for n in nodes:
        try:
            mem[n.gpu_model] = hardware.gpu_spec(n.gpu_model).memory_gib
        except (InvalidArgument, KeyError, LookupError):
            continue
        if training and not train_gpu_known(n.gpu_model):
            continue
        gpus[n.gpu_model] += n.num_gpus
    if not gpus:
        return None
    return max(gpus, key=lambda m: (mem[m], gpus[m], m))


@lru_cache(maxsize=8)
def inference_models(ref: str) -> tuple[str, ...]:
    """Catalogue models (:data:`elastico.perf.llm.LLM_MODELS`, catalogue order) whose fp16
    weights fit one 8-GPU node of ``ref`` at some TP degree of 1, 2, 4, 8 (a probe of the
    ``azure-conv`` lengths)."""
    from elastico.perf.llm import LLM_MODELS

    return tuple(name for name in LLM_MODELS
                 if _inference_tp(name, ref, _probe_work("azure-conv")) is not None)


@lru_cache(maxsize=8)
def _probe_work(dist):
    from elastico.llm_job import budget_work

    return budget_work(PROBE_TOKENS, dist)


def _inference_tp(name: str, ref: str, work) -> Job | None:
    """The probe job of ``name`` at the smallest TP degree where ``work`` fits on ``ref``."""
    from elastico.llm_job import llm_job
    from elastico.perf.llm import llm_model

    model = llm_model(name)
    for tp in _TP_DEGREES:
        try:
            return llm_job("probe", model, work, reference_gpu=ref, tp=tp)
        except InvalidArgument:
            continue
    return None


@lru_cache(maxsize=8)
def train_models(ref: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(model, GPU counts with a fitting plan) for the catalogue models that have a
    full-fine-tuning plan (seq 4,096, batch 64) on at most 8 GPUs of ``ref``."""
    from elastico.llm_train_job import GPU_COUNTS, llm_train_job
    from elastico.perf.llm import LLM_MODELS
    from elastico.perf.llm_training import LlmTrainingJob

    out = []
    for name, model in LLM_MODELS.items():
        counts = []
        for g in GPU_COUNTS:
            try:
                llm_train_job("probe", LlmTrainingJob("probe", model, SFT_SEQ_LEN,
                                                      SFT_GLOBAL_BATCH, 1e9, "finetune"),
                              reference_gpu=ref, gpus=g)
                counts.append(g)
            except InvalidArgument:
                continue
        if counts:
            out.append((name, tuple(counts)))
    return tuple(out)


def part_of(job_id: str) -> str:
    """The part (:data:`PARTS`) of a job of this workload, from its id: ``llm-inf-*`` inference,
    ``llm-train-*`` LLM fine-tuning, else (``<pod>#<i>``) the measured families."""
    if job_id.startswith("llm-inf-"):
        return PARTS[2]
    if job_id.startswith("llm-train-"):
        return PARTS[1]
    return PARTS[0]


def mix_window(records) -> dict:
    """Per part (:data:`PARTS`): ``finished``, ``avg_jct_s``, ``p50_jct_s`` (numpy median) and
    ``avg_slowdown`` (JCT / run time alone at the requested shape) of ``records``
    (:class:`elastico.sim.simulator.JobRecord`, already restricted to the jobs the JCT metrics
    count); 0.0 where a part has none."""
    out = {}
    for part in PARTS:
        rs = [r for r in records if part_of(r.job_id) == part]
        jct = np.array([r.finish_s - r.arrival_s for r in rs], float)
        slow = [(r.finish_s - r.arrival_s) / r.alone_s for r in rs if r.alone_s > 0]
        out[part] = {"finished": len(rs),
                     "avg_jct_s": float(jct.mean()) if len(rs) else 0.0,
                     "p50_jct_s": float(np.median(jct)) if len(rs) else 0.0,
                     "avg_slowdown": float(np.mean(slow)) if slow else 0.0}
    return out


def check_cluster(nodes: Sequence[Node], inference_share: float) -> tuple[str, ...]:
    """The inference model pool of ``nodes`` (:func:`inference_models` of its reference GPU);
    InvalidArgument (field ``nodes``, the cluster's GPU models) when it is empty and
    ``inference_share`` > 0.  Cheap: the CLIs call it before any run."""
    ref = reference_gpu(nodes, training=False)
    pool = inference_models(ref) if ref is not None else ()
    if not pool and inference_share > 0:
        raise InvalidArgument("nodes", ", ".join(sorted({n.gpu_model for n in nodes})),
                              "a GPU model of the LLM catalogue (elastico.hardware) where a "
                              "catalogue model fits, for an inference share > 0; or "
                              "inference_share 0")
    return pool


# ---- the builder ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Draft:
    job: Job
    g: float  # requested GPUs
    w: float  # work, s at the requested shape on the reference GPU


def _llm_train_draft(rng: np.random.Generator, i: int, ref: str, durations: np.ndarray,
                     models) -> _Draft:
    from elastico.llm_train_job import llm_train_job
    from elastico.perf.llm import llm_model
    from elastico.perf.llm_training import LlmTrainingJob

    name, counts = models[int(rng.integers(len(models)))]
    gpus = counts[int(rng.integers(len(counts)))]
    dur = float(durations[int(rng.integers(len(durations)))])
    model = llm_model(name)
    probe = llm_train_job("probe", LlmTrainingJob("probe", model, SFT_SEQ_LEN, SFT_GLOBAL_BATCH,
                                                  1e9, "finetune"), reference_gpu=ref, gpus=gpus)
    tokens = max(1.0, dur * probe.llm_train.reference_tokens_per_s)
    jid = f"llm-train-{i}-{name}"
    job = llm_train_job(jid, LlmTrainingJob(jid, model, SFT_SEQ_LEN, SFT_GLOBAL_BATCH, tokens,
                                            "finetune"), reference_gpu=ref, gpus=gpus,
                        cpu=_CPU_PER_GPU * gpus, mem_gib=_MEM_PER_GPU * gpus)
    return _Draft(job, float(gpus), job.work)


def _inference_draft(rng: np.random.Generator, i: int, ref: str, durations: np.ndarray,
                     models: tuple[str, ...]) -> _Draft | None:
    from elastico.llm_job import budget_work, llm_job
    from elastico.perf.llm import llm_model

    name = models[int(rng.integers(len(models)))]
    source = LENGTH_SOURCES[int(rng.integers(len(LENGTH_SOURCES)))]
    dur = float(durations[int(rng.integers(len(durations)))])
    inp, out = sample_request_lengths(source, LENGTH_SAMPLE, rng)
    dist = length_classes(inp, out)
    probe = _inference_tp(name, ref, _probe_work(dist))
    if probe is None:  # a class's KV cache fits no TP degree of one node
        return None
    tp = probe.llm.tp
    tokens = min(max(1.0, dur * probe.llm.reference_tokens_per_s), 1e13)
    job = llm_job(f"llm-inf-{i}-{name}", llm_model(name), budget_work(tokens, dist),
                  reference_gpu=ref, tp=tp, cpu=_CPU_PER_GPU * tp, mem_gib=_MEM_PER_GPU * tp)
    return _Draft(job, float(tp), job.work)


def _process(make: Callable[[int], "_Draft | None"], epochs_of: Callable[[int], np.ndarray],
             target: float, cluster_gpus: int, lo: float, hi: float, horizon: float,
             what: str) -> tuple[list[Job], float]:
    """The jobs of one arrival process whose demand in ``[lo, hi)`` is ``target`` (a fraction
    of the cluster): drafts ``make(i)`` (None = dropped, never arrives) on unit-rate epochs
    ``epochs_of(n)``, rate found by bisection (demand grows with the rate); drafts are added
    until the fastest rate considered offers ``target``.  Returns (jobs with arrival times,
    rate per second)."""
    from elastico.sim.workload import _overlap_demand

    if target <= 0:
        return [], 0.0
    drafts: list[_Draft | None] = []

    def grow(n: int) -> None:
        while len(drafts) < n:
            drafts.append(make(len(drafts)))

    grow(32)
    kept = [d for d in drafts if d is not None]
    if not kept:
        raise InvalidArgument(what, 0, "at least one job that fits this cluster")
    e_demand = float(np.mean([d.g * min(d.w, hi - lo) for d in kept]))
    lam0 = target * cluster_gpus / max(e_demand, 1e-12)
    n = int(math.ceil(2.0 * lam0 * horizon)) + 32
    for _ in range(8):
        grow(n)
        epochs = epochs_of(n)
        g = np.array([0.0 if d is None else d.g for d in drafts[:n]])
        w = np.array([0.0 if d is None else d.w for d in drafts[:n]])

        def demand(lam: float) -> float:
            a = epochs / lam
            m = a < horizon
            return _overlap_demand(a[m], g[m], w[m], lo, hi) / (cluster_gpus * (hi - lo))

        top = float(epochs[-1]) / horizon  # the fastest rate these epochs cover to the horizon
        if demand(top) >= target:
            break
        n *= 2
    else:
        raise InvalidArgument(what, target, "a demand these jobs can offer in the window")
    lam = rate_for_demand(demand, target, top / 1e6, top)
    arrivals = epochs / lam
    jobs = [replace(d.job, arrival_s=float(a)) for d, a in zip(drafts[:n], arrivals)
            if d is not None and a < horizon]
    return jobs, lam


def build_llm_mix_workload(pods: Sequence[TracePod], nodes: Sequence[Node], *, seed: int = 0,
                           load: float = 0.5, inference_share: float = DEFAULT_INFERENCE_SHARE,
                           model, window, burst_source: str = DEFAULT_BURST_SOURCE):
    """The llm-mix workload (module docstring) for ``nodes`` over ``window``
    (:class:`elastico.sim.workload.Window`): a :class:`elastico.sim.workload.Workload` whose
    ``mix`` counts the jobs of each part (:data:`PARTS`) and ``mix_demand`` each part's demand
    in the measurement window (fractions of the cluster; they sum to ``offered_load``).
    ``scale`` is the inference arrival rate (per s).  Seeds: the measured families use
    ``seed`` as the openb builder does; the LLM training and inference processes draw from
    ``default_rng([seed, 1])`` and ``default_rng([seed, 2])``.

    Raises InvalidArgument for a ``load`` not a number in (0, :data:`MAX_LOAD`], an ``inference_share``
    outside [0, 1], a bad seed, a cluster without GPUs, an unknown ``burst_source``, or a
    cluster where no catalogue model fits (with an inference share > 0).
    """
    from elastico.sim import workload as W

    if isinstance(load, bool) or not isinstance(load, (int, float)) or not math.isfinite(load) \
            or not 0 < load <= MAX_LOAD:
        raise InvalidArgument("load", load, f"a number in (0, {MAX_LOAD:g}] (the demand "
                                            "offered in the window over the cluster's GPUs)")
    share = check_inference_share(inference_share)
    if burst_source not in BURST_SOURCES:
        raise InvalidArgument("burst_source", burst_source, "one of " + ", ".join(BURST_SOURCES))
    cluster_gpus = W._check_seed_and_gpus(seed, nodes)
    lo, hi, horizon = window.lo, window.hi, window.horizon
    be = [p for p in pods if p.qos == "BE"]
    durations = W.batch_durations(be)
    if durations.size == 0:
        raise InvalidArgument("pods", len(pods), "at least one BE pod asking GPUs that ran")
    ref_inf = reference_gpu(nodes, training=False)
    ref_train = reference_gpu(nodes, training=True)
    train_pool = train_models(ref_train) if ref_train is not None else ()
    llm_train_load = load * (1.0 - share) * LLM_TRAIN_SHARE if train_pool else 0.0
    measured_load = load * (1.0 - share) - llm_train_load
    inf_load = load * share
    jobs: list[Job] = []
    excluded: dict = {r: 0 for r in W.EXCLUSION_REASONS}
    if measured_load > 0:
        wl = W.build_continuous_workload(be, nodes, seed=seed, load=measured_load, model=model,
                                         window=window)
        jobs += wl.jobs
        excluded = dict(wl.excluded)
    mix = {PARTS[0]: len(jobs)}
    rng_t = np.random.default_rng([seed, 1])
    if llm_train_load > 0:
        epochs_t = np.cumsum(rng_t.exponential(1.0, size=1 << 16))
        tj, _ = _process(lambda i: _llm_train_draft(rng_t, i, ref_train, durations, train_pool),
                         lambda n: _first(epochs_t, n), llm_train_load,
                         cluster_gpus, lo, hi, horizon, "training-llm")
    else:
        tj = []
    mix[PARTS[1]] = len(tj)
    rng_i = np.random.default_rng([seed, 2])
    lam = 0.0
    ij: list[Job] = []
    if inf_load > 0:
        pool = check_cluster(nodes, share)
        epochs_i = burst_epochs(rng_i, 1 << 16, burst_source)
        ij, lam = _process(lambda i: _inference_draft(rng_i, i, ref_inf, durations, pool),
                           lambda n: _first(epochs_i, n), inf_load, cluster_gpus, lo, hi, horizon,
                           "inference-llm")
    mix[PARTS[2]] = len(ij)
    parts = [jobs, tj, ij]
    all_jobs = sorted([j for p in parts for j in p], key=lambda j: j.arrival_s)
    kinds = Counter(j.kind.value for j in all_jobs)
    demand = {name: W.window_demand(p, cluster_gpus, lo, hi) for name, p in zip(PARTS, parts)}
    return MixWorkload(all_jobs, excluded, lam, cluster_gpus, 1.0,
                        W.window_demand(all_jobs, cluster_gpus, lo, hi),
                        {kd.value: kinds.get(kd.value, 0) for kd in JobKind}, window,
                        mix=mix, mix_demand=demand, inference_share=share,
                        reference_gpus={"inference": ref_inf, "training": ref_train})


def _first(epochs: np.ndarray, n: int) -> np.ndarray:
    if n > len(epochs):
        raise InvalidArgument("load", f"{n:,} arrivals of one part",
                              f"at most {len(epochs):,} arrivals of one part per run; lower "
                              "the load")
    return epochs[:n]


@dataclass(frozen=True)
class MixWorkload(Workload):
    """:class:`elastico.sim.workload.Workload` with the llm-mix composition: ``mix`` job
    counts and ``mix_demand`` window demand per part (:data:`PARTS`), the ``inference_share``
    asked for, and the ``reference_gpus`` of the LLM jobs (``inference``, ``training``; None
    where the cluster has none)."""

    mix: dict = field(default_factory=dict)
    mix_demand: dict = field(default_factory=dict)
    inference_share: float = DEFAULT_INFERENCE_SHARE
    reference_gpus: dict = field(default_factory=dict)
