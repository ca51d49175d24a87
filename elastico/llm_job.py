"""Offline LLM inference jobs: what such a job names (its model, its work, its precision and
engine) and how much work it is, in tokens.

Who calls it: the simulator's LLM workloads (:mod:`elastico.sim.llm_workload`), the live
annotations (:mod:`elastico.placer.kube.annotations`), ``elastico llm plan|predict`` and the
LLM shape families (:mod:`elastico.llm_shapes`).  Whom it calls: the LLM performance and memory
model :mod:`elastico.perf.llm` and the bundled length distributions (read once).  Pure
otherwise: no clock, no I/O at call time.

**Work.**  A job's work is a mix of requests, :class:`LlmWork`: classes of requests with the
same prompt (``input_tokens``) and output length (``output_tokens``) and how many there are.
A user gives either the requests themselves (:func:`requests_work`) or a token budget with a
length distribution (:func:`budget_work`): the budget is cut into requests of each class in
proportion to the distribution's shares.  The distributions bundled by name
(:data:`LENGTH_DISTRIBUTIONS`) are 8 classes of the Azure LLM inference trace 2023
(``azure-conv``, ``azure-code``; data/azure-llm-inference-2023, ``derive.py`` there).
**Tokens** count prompt + generated tokens, as LLM-Inference-Bench counts throughput
(:func:`elastico.perf.llm.tokens_per_s`).

**Replicas split the requests.**  A job run as ``r`` independent replicas (engine instances)
gives each replica ``1/r`` of every class, rounded up (:meth:`LlmWork.split`: the busiest
replica's share, which decides when the job ends); sequences are independent, so nothing else
couples the replicas.

**Time of a mix** (:func:`mix_seconds`).  One replica serves its share class by class, each
class as the engine runs an offline batch: all its sequences at once when their KV cache
fits, else in waves of the largest batch that fits
(:func:`elastico.perf.llm.batch_latency_s`).  A job's speed on a configuration is its total
tokens over that time (:func:`mix_tokens_per_s`).  ASSUMPTION: classes do not share a batch
(an engine would mix them; it is the per-class time the model was fitted to).

**Progress.**  The scheduler's unit of work is normalized seconds (:class:`elastico.model.Job`):
an LLM job's ``work`` is its total tokens over its *reference speed*,
``reference_tokens_per_s`` -- the tokens/s of its requested shape (TP degree, replicas, share)
on its ``reference_gpu`` -- so throughput 1.0 is that speed, as a training job's 1.0 is its
requested shape on the reference GPU.  Tokens done = ``Job.done x reference_tokens_per_s``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

from elastico import hardware
from elastico.errors import InvalidArgument
from elastico.model import Job, JobKind, Request
from elastico.perf import llm as perf_llm
from elastico.perf.llm import LlmConfig, LlmModel

__all__ = [
    "LengthClass", "LlmWork", "LlmJobSpec", "requests_work", "budget_work",
    "length_distribution", "LENGTH_DISTRIBUTIONS", "MAX_CLASSES", "MAX_TOKENS", "MAX_REQUESTS",
    "mix_seconds", "mix_tokens_per_s", "llm_job", "llm_job_type", "LLM_JOB_TYPE_PREFIX",
    "parse_classes", "tokens_done",
]

#: Most request classes one job may name (a request list is given as classes; a distribution
#: has 8): each class costs one latency evaluation per configuration of the shape family.
MAX_CLASSES = 64
#: Largest token budget / total tokens of one job: 1e13 (10 trillion tokens, ~100x the
#: pre-training corpus of Llama 3); beyond it the number is a typo, not a job.
MAX_TOKENS = 1e13
#: Most requests in one class or one job.
MAX_REQUESTS = 10**12
#: Longest prompt or output of one request, tokens: 2^20 (no bundled model's context is longer).
MAX_SEQUENCE = 2**20
#: ``Job.job_type`` of an LLM job: this prefix and the model's name (the interference
#: predictor's workload name; no Gavel job type has it).
LLM_JOB_TYPE_PREFIX = "LLM "


@dataclass(frozen=True)
class LengthClass:
    """``requests`` requests of ``input_tokens`` prompt and ``output_tokens`` generated tokens."""

    input_tokens: int
    output_tokens: int
    requests: int

    @property
    def tokens(self) -> int:
        return self.requests * (self.input_tokens + self.output_tokens)


def _int(field: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgument(field, v, f"an integer in {lo}..{hi}")
    return v


@dataclass(frozen=True)
class LlmWork:
    """A job's requests as classes (module docstring).  Validated: 1..:data:`MAX_CLASSES`
    classes of positive integers, prompt and output at most :data:`MAX_SEQUENCE`, at most
    :data:`MAX_TOKENS` tokens in all; InvalidArgument names ``work.classes[i].<field>``."""

    classes: tuple[LengthClass, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.classes, tuple) or not 1 <= len(self.classes) <= MAX_CLASSES:
            raise InvalidArgument("work.classes", len(self.classes) if isinstance(self.classes, tuple)
                                  else self.classes, f"1..{MAX_CLASSES} request classes")
        for i, c in enumerate(self.classes):
            if not isinstance(c, LengthClass):
                raise InvalidArgument(f"work.classes[{i}]", c, "a LengthClass")
            _int(f"work.classes[{i}].input_tokens", c.input_tokens, 1, MAX_SEQUENCE)
            _int(f"work.classes[{i}].output_tokens", c.output_tokens, 1, MAX_SEQUENCE)
            _int(f"work.classes[{i}].requests", c.requests, 1, MAX_REQUESTS)
        if self.total_tokens > MAX_TOKENS:
            raise InvalidArgument("work.tokens", self.total_tokens, f"at most {MAX_TOKENS:g} tokens")

    @property
    def total_tokens(self) -> int:
        """Prompt + generated tokens of every request."""
        return sum(c.tokens for c in self.classes)

    @property
    def total_requests(self) -> int:
        return sum(c.requests for c in self.classes)

    def split(self, replicas: int) -> "LlmWork":
        """The busiest replica's share when ``replicas`` replicas split every class evenly:
        ``ceil(requests / replicas)`` of each class (classes with fewer requests than replicas
        leave some replicas without that class).  InvalidArgument for ``replicas`` < 1."""
        _int("replicas", replicas, 1, MAX_REQUESTS)
        if replicas == 1:
            return self
        return LlmWork(tuple(replace(c, requests=-(-c.requests // replicas)) for c in self.classes))

    def describe(self) -> str:
        """``"1,000 requests, 1.2e+06 tokens (3 classes)"``."""
        n = len(self.classes)
        return (f"{self.total_requests:,} requests, {self.total_tokens:.3g} tokens "
                f"({n} class{'es' if n != 1 else ''})")


def requests_work(requests: Iterable[tuple[int, int, int]]) -> LlmWork:
    """Work from ``(input_tokens, output_tokens, count)`` triples; equal lengths are merged
    into one class (first-seen order).  InvalidArgument as :class:`LlmWork`."""
    merged: dict[tuple[int, int], int] = {}
    for i, t in enumerate(requests):
        try:
            inp, out, n = t
        except (TypeError, ValueError):
            raise InvalidArgument(f"work.requests[{i}]", t,
                                  "(input_tokens, output_tokens, count)") from None
        _int(f"work.requests[{i}].input_tokens", inp, 1, MAX_SEQUENCE)
        _int(f"work.requests[{i}].output_tokens", out, 1, MAX_SEQUENCE)
        _int(f"work.requests[{i}].count", n, 1, MAX_REQUESTS)
        merged[(inp, out)] = merged.get((inp, out), 0) + n
        if len(merged) > MAX_CLASSES:
            raise InvalidArgument("work.requests", f"more than {MAX_CLASSES} distinct lengths",
                                  f"at most {MAX_CLASSES} distinct (input, output) lengths")
    if not merged:
        raise InvalidArgument("work.requests", "[]", "at least one request")
    return LlmWork(tuple(LengthClass(i, o, n) for (i, o), n in merged.items()))


@lru_cache(maxsize=1)
def _bundled_distributions() -> Mapping[str, tuple[tuple[int, int, float], ...]]:
    from elastico.paths import data_file

    out: dict[str, list[tuple[int, int, float]]] = {}
    with open(data_file("azure-llm-inference-2023", "derived", "length_classes.csv"), newline="") as f:
        for r in csv.DictReader(f):
            out.setdefault(r["distribution"], []).append(
                (int(r["input_tokens"]), int(r["output_tokens"]), float(r["share"])))
    return {k: tuple(v) for k, v in out.items()}


#: Named length distributions (data/azure-llm-inference-2023/derived/length_classes.csv):
#: ``azure-conv`` (conversation: mean prompt 1,155, output 211 tokens), ``azure-code``
#: (coding assistant: 2,048 and 28).
LENGTH_DISTRIBUTIONS = ("azure-conv", "azure-code")


def parse_classes(text: str, field: str, *, counts: bool) -> list[tuple[int, int, float]]:
    """``"512:128x3,2048:256"`` -> ``[(512, 128, 3), (2048, 256, 1)]``: comma-separated
    ``INPUT:OUTPUT`` classes, each with an optional ``xN`` (a request count when ``counts``,
    else a relative weight, a decimal > 0; default 1).  InvalidArgument naming ``field``, the
    text and the format."""
    fmt = ("comma-separated INPUT:OUTPUT[xCOUNT] request classes, e.g. 512:128x1000,2048:256x10 "
           if counts else
           "a distribution name (" + ", ".join(LENGTH_DISTRIBUTIONS) + ") or comma-separated "
           "INPUT:OUTPUT[xWEIGHT] classes, e.g. 512:128x3,2048:256 ")
    fmt += f"(integer token counts in 1..{MAX_SEQUENCE}, at most {MAX_CLASSES} classes)"
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(field, text, fmt)
    out: list[tuple[int, int, float]] = []
    parts = text.split(",")
    if len(parts) > MAX_CLASSES:
        raise InvalidArgument(field, text, fmt)
    for part in parts:
        body, _, mult = part.strip().partition("x")
        io = body.split(":")
        if len(io) != 2 or not all(s.isascii() and s.isdigit() and len(s) <= 8 for s in io):
            raise InvalidArgument(field, text, fmt)
        i, o = int(io[0]), int(io[1])
        if not (1 <= i <= MAX_SEQUENCE and 1 <= o <= MAX_SEQUENCE):
            raise InvalidArgument(field, text, fmt)
        w: float = 1
        if _:
            if counts:
                if not (mult.isascii() and mult.isdigit() and len(mult) <= 13 and 1 <= int(mult) <= MAX_REQUESTS):
                    raise InvalidArgument(field, text, fmt)
                w = int(mult)
            else:
                try:
                    w = float(mult) if mult.strip() == mult and mult.replace(".", "", 1).isdigit() else -1.0
                except ValueError:
                    w = -1.0
                if not (math.isfinite(w) and w > 0):
                    raise InvalidArgument(field, text, fmt)
        out.append((i, o, w))
    return out


def length_distribution(spec: str | Sequence[tuple[int, int, float]],
                        field: str = "lengths") -> tuple[tuple[int, int, float], ...]:
    """A length distribution as ``((input, output, share), ...)`` with shares summing to 1:
    a name of :data:`LENGTH_DISTRIBUTIONS`, a text for :func:`parse_classes`, or the triples
    themselves (weights > 0, normalised here).  InvalidArgument naming ``field``."""
    if isinstance(spec, str):
        if spec in LENGTH_DISTRIBUTIONS:
            return _bundled_distributions()[spec]
        triples = parse_classes(spec, field, counts=False)
    else:
        triples = list(spec)
    if not triples or len(triples) > MAX_CLASSES:
        raise InvalidArgument(field, spec, f"1..{MAX_CLASSES} (input, output, weight) classes")
    for k, t in enumerate(triples):
        try:
            i, o, w = t
        except (TypeError, ValueError):
            raise InvalidArgument(f"{field}[{k}]", t, "(input_tokens, output_tokens, weight)") from None
        _int(f"{field}[{k}].input_tokens", i, 1, MAX_SEQUENCE)
        _int(f"{field}[{k}].output_tokens", o, 1, MAX_SEQUENCE)
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w > 0):
            raise InvalidArgument(f"{field}[{k}].weight", w, "a finite number > 0")
    total = float(sum(t[2] for t in triples))
    return tuple((int(i), int(o), float(w) / total) for i, o, w in triples)


def budget_work(tokens: float, lengths: str | Sequence[tuple[int, int, float]] = "azure-conv",
                field: str = "tokens") -> LlmWork:
    """Work of a token budget (prompt + generated tokens) with a length distribution
    (:func:`length_distribution`): ``n = ceil(tokens / mean tokens per request)`` requests,
    ``round(share x n)`` of each class (classes that round to none are dropped; at least one
    request).  The work's own ``total_tokens`` is therefore the budget up to a class's
    rounding.  InvalidArgument naming ``field`` for a budget that is not a number in
    [1, :data:`MAX_TOKENS`]."""
    if (isinstance(tokens, bool) or not isinstance(tokens, (int, float))
            or not math.isfinite(tokens) or not 1 <= tokens <= MAX_TOKENS):
        raise InvalidArgument(field, tokens, f"a number of tokens in [1, {MAX_TOKENS:g}]")
    dist = length_distribution(lengths)
    mean = sum(s * (i + o) for i, o, s in dist)
    n = max(1, math.ceil(tokens / mean))
    classes = [LengthClass(i, o, round(s * n)) for i, o, s in dist]
    classes = [c for c in classes if c.requests > 0]
    if not classes:  # every class rounded to nothing: one request of the likeliest class
        i, o, _ = max(dist, key=lambda t: t[2])
        classes = [LengthClass(i, o, 1)]
    return LlmWork(tuple(classes))


@dataclass(frozen=True)
class LlmJobSpec:
    """What an offline LLM inference job names (module docstring): its ``model``, its
    ``work``, weight ``dtype`` and ``kv_dtype`` (None: the model's default for the dtype),
    ``engine`` (:data:`elastico.perf.llm.ENGINES`), the requested ``tp`` degree and
    ``replicas``, and the reference: ``reference_gpu`` and the requested shape's
    ``reference_tokens_per_s`` there (throughput 1.0)."""

    model: LlmModel
    work: LlmWork
    dtype: str = "fp16"
    kv_dtype: str | None = None
    engine: str = "vllm"
    tp: int = 1
    replicas: int = 1
    reference_gpu: str = ""
    reference_tokens_per_s: float = 0.0

    def config(self, gpu: str, tp: int, replicas: int, *, mps_share: float | None = None,
               mig_profile: str | None = None, memory_limit_gib: float | None = None) -> LlmConfig:
        """The :class:`~elastico.perf.llm.LlmConfig` of this job on ``gpu``."""
        return LlmConfig(gpu=gpu, tp=tp, replicas=replicas, mps_share=mps_share,
                         mig_profile=mig_profile, dtype=self.dtype, kv_dtype=self.kv_dtype,
                         engine=self.engine, memory_limit_gib=memory_limit_gib)


def llm_job_type(model: LlmModel) -> str:
    """``Job.job_type`` of a job running ``model``: ``"LLM <name>"``."""
    return LLM_JOB_TYPE_PREFIX + model.name


def mix_seconds(model: LlmModel, cfg: LlmConfig, work: LlmWork) -> float:
    """Seconds the job's ``work`` takes on ``cfg`` (module docstring): the busiest replica's
    share (:meth:`LlmWork.split` by ``cfg.replicas``), class by class, on one replica;
    ``inf`` when a class does not fit (its KV cache holds not one sequence).  Raises
    InvalidArgument for a configuration the model refuses (e.g. a TP degree that does not
    divide the heads)."""
    return _mix_seconds(model, replace(cfg, replicas=1), work, cfg.replicas)


@lru_cache(maxsize=65536)
def _mix_seconds(model: LlmModel, one: LlmConfig, work: LlmWork, replicas: int) -> float:
    # the classes' latencies in one evaluation of the model's arrays (a family build asks for
    # tens of configurations x classes per job); summed in class order, as one by one
    classes = work.split(replicas).classes
    t = perf_llm.batch_latencies_s(model, one, [c.requests for c in classes],
                                   [c.input_tokens for c in classes],
                                   [c.output_tokens for c in classes])
    total = 0.0
    for x in t.tolist():
        if not math.isfinite(x):
            return math.inf
        total += x
    return total


def mix_tokens_per_s(model: LlmModel, cfg: LlmConfig, work: LlmWork) -> float:
    """The job's tokens/s on ``cfg``: ``work.total_tokens / mix_seconds``; 0.0 when it does
    not fit."""
    t = mix_seconds(model, cfg, work)
    return work.total_tokens / t if math.isfinite(t) and t > 0 else 0.0


def tokens_done(job: Job) -> float:
    """Tokens an LLM job has processed: ``job.done x reference_tokens_per_s`` (0 for another
    job)."""
    spec = getattr(job, "llm", None)
    return job.done * spec.reference_tokens_per_s if spec is not None else 0.0


def llm_job(job_id: str, model: LlmModel, work: LlmWork, *, reference_gpu: str,
            gpu_models: Iterable[str] = (), tp: int = 1, replicas: int = 1,
            gpu_share: float = 1.0, gpu_mem_gib: float | None = None, dtype: str = "fp16",
            kv_dtype: str | None = None, engine: str = "vllm", arrival_s: float = 0.0,
            cpu: float = 4.0, mem_gib: float = 32.0, priority: float = 1.0,
            slowdown_bound: float = 1.5, reshape: bool = True,
            kind: JobKind = JobKind.INFERENCE, fixed_share: bool = False,
            reference_memory_gib: float | None = None) -> Job:
    """An ``inference`` :class:`~elastico.model.Job` running ``model`` over ``work``.

    Its request: ``tp x replicas`` GPUs (``gpu_share`` of one GPU only when that is one GPU,
    as any request), ``cpu`` cores and ``mem_gib`` host GiB in all, on ``gpu_models`` (empty:
    any), GPU memory per GPU from the GPU's real memory (``Request.device_memory``; the
    ``gpu_mem_gib`` asked for an MPS share, else the share's part of the GPU).  Its
    reference (module docstring): the requested shape on ``reference_gpu`` (GPUs of
    ``reference_memory_gib`` GiB, default the catalogue's) must fit there;
    ``work`` = total tokens / its tokens/s.  ``kind``: ``inference``, or ``service`` for a
    live pod that keeps its requested shape (a gang, ``shape-family: fixed``).  Raises
    InvalidArgument naming the field for a request or configuration the model refuses, or a
    requested shape that does not fit the reference GPU."""
    from elastico.llm_shapes import requested_llm_config  # the shape rules own memory booking

    models = tuple(gpu_models)
    _int("tp", tp, 1, 64)
    _int("replicas", replicas, 1, 64)
    req = Request(tp * replicas, gpu_share, cpu, mem_gib, frozenset(models),
                  gpu_mem_gib=gpu_mem_gib, device_memory=True)
    spec = LlmJobSpec(model, work, dtype, kv_dtype, engine, tp, replicas, reference_gpu, 0.0)
    if reference_memory_gib is None:
        try:
            reference_memory_gib = hardware.gpu_spec(reference_gpu).memory_gib
        except (InvalidArgument, KeyError, LookupError):
            raise InvalidArgument("reference_gpu", reference_gpu,
                                  "a GPU model of the catalogue (elastico.hardware)") from None
    cfg = requested_llm_config(spec, req, reference_gpu, float(reference_memory_gib))
    mem = perf_llm.memory(model, cfg)
    tps = mix_tokens_per_s(model, cfg, work)
    if not (mem.fits and tps > 0):
        why = mem.reason or "a request class's KV cache does not fit (no sequence of it fits at once)"
        raise InvalidArgument("reference_gpu", reference_gpu,
                              f"a GPU model where the requested shape (tp {tp}, {replicas} "
                              f"replica(s), share {gpu_share:g}) of {model.name} fits: {why}")
    spec = replace(spec, reference_tokens_per_s=tps)
    return Job(id=job_id, kind=kind, arrival_s=arrival_s,
               work=work.total_tokens / tps, request=req, job_type=llm_job_type(model),
               priority=priority, slowdown_bound=slowdown_bound, reshape=reshape,
               fixed_share=fixed_share, llm=spec)
