"""The pod-facing API: ``elastico.io/*`` annotations -> :class:`elastico.model.Job`, and the
placer's decision -> annotations for the device plugin (docs/annotations.md is the reference;
the keys shared with the node agent are defined in :mod:`elastico.contract`, re-exported here).

Who calls it: the Kubernetes scheduler loop (:mod:`elastico.placer.kube.loop`) and the booking
rebuild (:mod:`elastico.placer.kube.bookings`).  Pure: pods are the plain JSON dicts of the
Kubernetes API (camelCase keys), CPU/memory quantities are parsed by the caller, no clock, no
I/O, no kubernetes import.

Validation is strict (issue 7): an unknown key under ``elastico.io/``, a malformed number
(``50m``, ``NaN``, ``inf``, ``1e``), a fraction that is not a whole percent in [0.01, 1]
(:func:`elastico.model.mps_percentage`), GPU memory <= 0 or beyond the allowed models', an unknown GPU
model (exact names only: ``A10`` is not ``A100-40GB``, ``A100`` is nothing) raise
:class:`elastico.errors.InvalidArgument` whose field is the annotation key and whose value is
the raw text; the loop turns it into a ``Rejected`` Event and never schedules the pod.  Only
the defaults in :data:`DEFAULTS` are ever filled in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from elastico.contract import (
    ALLOCATED, CONFIGURATION, GPU_RESOURCE, GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT,
    MPS_ACTIVE_THREAD_PERCENTAGE, MPS_PINNED_MEM_LIMIT_GIB, PREDICTED_SLOWDOWN, PREFIX, ROUND_ID,
    SCHEDULER_NAME, TENSOR_PARALLEL)
from elastico.errors import InvalidArgument
from elastico.model import (MAX_PRIORITY, MPS_SHARE_ALLOWED, Configuration, Job, JobKind, Request,
                            mps_percentage)
from elastico.hardware import GPU_MEMORY_GIB as MODEL_GPU_MEMORY_GIB
from elastico.shapes import config_name, mig_config_name

__all__ = [
    "PREFIX", "SCHEDULER_NAME", "GPU_RESOURCE", "JOB_LABEL", "USER_KEYS", "DECISION_KEYS",
    "DEFAULTS", "LLM_KEYS", "PodSpec", "LlmPod", "PodBooking", "parse_pod_annotations",
    "job_group", "build_job",
    "split_assignment", "decision_annotations", "clear_decision", "parse_booking",
]

#: Label grouping the pods of one job when they share no controller owner reference.
JOB_LABEL = "elastico.io/job"

WORKLOAD = PREFIX + "workload"
GPUS = PREFIX + "gpus"
GPU_FRACTION = PREFIX + "gpu-fraction"
GPU_MEMORY_GIB = PREFIX + "gpu-memory-gib"
GPU_MODEL = PREFIX + "gpu-model"
SHAPE_FAMILY = PREFIX + "shape-family"
PRIORITY = PREFIX + "priority"
SLOWDOWN_BOUND = PREFIX + "slowdown-bound"
WORK = PREFIX + "work"
JOB_TYPE = PREFIX + "job-type"
GANG_SIZE = PREFIX + "gang-size"
RESIZE_POLICY = PREFIX + "resize-policy"
# offline LLM inference (workload inference): the model, its work, precision and engine
LLM_MODEL = PREFIX + "llm-model"
LLM_MODEL_CONFIG = PREFIX + "llm-model-config"
LLM_REQUESTS = PREFIX + "llm-requests"
LLM_TOKENS = PREFIX + "llm-tokens"
LLM_LENGTHS = PREFIX + "llm-lengths"
LLM_DTYPE = PREFIX + "llm-dtype"
LLM_KV_DTYPE = PREFIX + "llm-kv-dtype"
LLM_ENGINE = PREFIX + "llm-engine"
LLM_TENSOR_PARALLEL = PREFIX + "llm-tensor-parallel"
LLM_KEYS = (LLM_MODEL, LLM_MODEL_CONFIG, LLM_REQUESTS, LLM_TOKENS, LLM_LENGTHS, LLM_DTYPE,
            LLM_KV_DTYPE, LLM_ENGINE, LLM_TENSOR_PARALLEL)
USER_KEYS = (WORKLOAD, GPUS, GPU_FRACTION, GPU_MEMORY_GIB, GPU_MODEL, SHAPE_FAMILY, PRIORITY,
             SLOWDOWN_BOUND, WORK, JOB_TYPE, GANG_SIZE, RESIZE_POLICY) + LLM_KEYS

#: Written by the placer with the decision keys of :mod:`elastico.contract`: the whole booking
#: as JSON, what a restarted placer rebuilds its book from (the node agent does not read it).
BOOKING = PREFIX + "booking"
DECISION_KEYS = (ROUND_ID, CONFIGURATION, GPU_UUIDS, MIG_PROFILE, MIG_START_SLOT,
                 MPS_ACTIVE_THREAD_PERCENTAGE, MPS_PINNED_MEM_LIMIT_GIB, PREDICTED_SLOWDOWN,
                 TENSOR_PARALLEL, BOOKING)
_KNOWN = frozenset(USER_KEYS + DECISION_KEYS + (ALLOCATED,))

SHAPE_FAMILIES = ("elastic", "fixed")
#: ``resize-policy``: ``none`` keeps the requested GPU count and share (a bound pod cannot be
#: resized); ``restart`` lets the placer give the pod more and take it back by evicting it,
#: for its controller to recreate (docs/annotations.md, "Resizing by restart").
RESIZE_POLICIES = ("none", "restart")
#: Documented defaults (docs/annotations.md); ``slowdown-bound`` defaults per workload.
DEFAULTS: Mapping[str, str] = {
    WORKLOAD: "training", GPUS: "1", GPU_FRACTION: "1", SHAPE_FAMILY: "elastic",
    PRIORITY: "1", WORK: "3600", JOB_TYPE: "ResNet-50 (batch size 64)", GANG_SIZE: "1",
    RESIZE_POLICY: "none",
}
DEFAULT_SLOWDOWN_BOUND = {JobKind.TRAINING: 1.5, JobKind.INFERENCE: 1.5, JobKind.SERVICE: 1.1}
#: Upper bounds that keep absurd values out of sums (GPUs per job, pods per gang, seconds).
MAX_GPUS = 64
MAX_GANG = 1024
MAX_WORK_S = 1e9
#: Smallest ``gpu-fraction``: MPS limits a client's active threads in whole percent, so 1 % of
#: a GPU is the finest share a pod can be given (below it the booking and the limit differ);
#: every fraction is a whole percent (:func:`elastico.model.mps_percentage`).
MIN_GPU_FRACTION = 0.01

# a decimal number, optionally with an exponent ("1e4"; docs/annotations.md): no units
# ("50m"), no NaN/inf, no underscores or spaces
# re.ASCII: \d would also match other scripts' digits, which int()/float() accept
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INT = re.compile(r"[+-]?\d+", re.ASCII)
#: Longest integer annotation read; far beyond any bound, and short of int()'s 4300-digit limit
_MAX_INT_DIGITS = 40


#: Longest ``llm-model-config`` JSON read, characters (a Hugging Face config.json is a few KB).
MAX_MODEL_CONFIG_CHARS = 65536


@dataclass(frozen=True)
class LlmPod:
    """An offline LLM inference pod's validated ``llm-*`` annotations: the ``model``
    (:class:`elastico.perf.llm.LlmModel`), its ``work`` (:class:`elastico.llm_job.LlmWork`),
    ``dtype``/``kv_dtype``, ``engine``, ``tp`` (GPUs per engine replica; the pod runs
    ``gpus / tp`` replicas) and the ``reference_gpu`` (with its ``reference_memory_gib``)
    whose requested-shape speed is the job's throughput 1.0 (:mod:`elastico.llm_job`)."""

    model: object
    work: object
    dtype: str
    kv_dtype: str | None
    engine: str
    tp: int
    reference_gpu: str
    reference_memory_gib: float


@dataclass(frozen=True)
class PodSpec:
    """A pod's validated ``elastico.io/*`` annotations (defaults filled in).  Units:
    ``gpu_fraction`` share of one GPU's compute, a whole percent in [:data:`MIN_GPU_FRACTION`,
    1]; ``gpu_memory_gib`` GiB per GPU (> 0, at most the largest allowed model's) or None;
    ``work`` normalized-throughput seconds (:class:`elastico.model.Job`)."""

    workload: JobKind
    gpus: int
    gpu_fraction: float
    gpu_memory_gib: float | None
    gpu_models: frozenset[str]
    shape_family: str
    priority: float
    slowdown_bound: float
    work: float
    job_type: str
    gang_size: int
    resize_policy: str = "none"
    #: an offline LLM inference pod (``workload: inference`` naming ``llm-model`` or
    #: ``llm-model-config``); None for every other pod
    llm: LlmPod | None = None


def _decimal(key: str, raw: str, allowed: str) -> float:
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw):
        raise InvalidArgument(key, raw, allowed)
    v = float(raw)
    if not math.isfinite(v):
        raise InvalidArgument(key, raw, allowed)
    return v


def _integer(key: str, raw: str, lo: int, hi: int) -> int:
    allowed = f"an integer in {lo}..{hi}"
    if not isinstance(raw, str) or len(raw) > _MAX_INT_DIGITS or not _INT.fullmatch(raw):
        raise InvalidArgument(key, raw, allowed)
    v = int(raw)
    if not lo <= v <= hi:
        raise InvalidArgument(key, raw, allowed)
    return v


def parse_pod_annotations(annotations: Mapping[str, str] | None, *, gpu_models: Iterable[str],
                          job_types: Iterable[str],
                          gpu_memory: Mapping[str, float] = MODEL_GPU_MEMORY_GIB) -> PodSpec:
    """Validate one pod's annotations.  ``gpu_models``: the model names the cluster's
    throughput model knows (exact match); ``job_types``: the known job types;
    ``gpu_memory``: GiB per GPU of each model (default the GPU catalogue's
    :data:`elastico.hardware.GPU_MEMORY_GIB`), which bounds ``gpu-memory-gib`` by the largest
    allowed model's.  Raises InvalidArgument (field = the annotation key, value = its raw
    text) for the first bad one; unknown keys are checked in sorted order so the message is
    deterministic."""
    ann = dict(annotations or {})
    for key in sorted(ann):
        if key.startswith(PREFIX) and key not in _KNOWN:
            raise InvalidArgument(key, ann[key], "an annotation this version knows: "
                                  + ", ".join(USER_KEYS) + f" ({JOB_LABEL} is a label)")
    get = lambda k: ann.get(k, DEFAULTS.get(k))  # noqa: E731
    raw = get(WORKLOAD)
    try:
        workload = JobKind(raw)
    except ValueError:
        raise InvalidArgument(WORKLOAD, raw, f"one of {[k.value for k in JobKind]}") from None
    gpus = _integer(GPUS, get(GPUS), 1, MAX_GPUS)
    frac_allowed = f"a decimal fraction, {MPS_SHARE_ALLOWED}"
    frac = _decimal(GPU_FRACTION, get(GPU_FRACTION), frac_allowed)
    try:
        frac = mps_percentage(frac) / 100  # exactly the whole percent MPS enforces
    except InvalidArgument:
        raise InvalidArgument(GPU_FRACTION, get(GPU_FRACTION), frac_allowed) from None
    if gpus > 1 and frac != 1.0:
        raise InvalidArgument(GPU_FRACTION, get(GPU_FRACTION),
                              f"1 when {GPUS} is {gpus} (only a single-GPU pod shares a GPU)")
    known_models = tuple(gpu_models)
    models: frozenset[str] = frozenset()
    if GPU_MODEL in ann:
        names = [m.strip() for m in ann[GPU_MODEL].split(",")]
        for m in names:
            if m not in known_models:
                raise InvalidArgument(GPU_MODEL, ann[GPU_MODEL],
                                      f"comma-separated exact names from {list(known_models)}")
        models = frozenset(names)
    mem = None
    if GPU_MEMORY_GIB in ann:
        # per GPU, up to what the largest allowed model has; booked and pinned as asked,
        # whatever gpu-fraction says (docs/annotations.md "GPU memory")
        sizes = {m: gpu_memory[m] for m in (models or known_models) if m in gpu_memory}
        top = max(sizes, key=lambda m: (sizes[m], m), default=None)
        mem_allowed = "a decimal number of GiB, at least 1 MiB (0.0009765625)" + (
            f", at most {sizes[top]:g} (the GPU memory of the largest allowed GPU model, {top})"
            if top is not None else "")
        mem = _decimal(GPU_MEMORY_GIB, ann[GPU_MEMORY_GIB], mem_allowed)
        if not mem > 0 or (top is not None and mem > sizes[top] + 1e-9):
            raise InvalidArgument(GPU_MEMORY_GIB, ann[GPU_MEMORY_GIB], mem_allowed)
        # booked as enforced: the MPS pinned device memory limit is written in whole MiB
        # (elastico.nodeagent.backend.pinned_mem_amount), so the booking is whole MiB too
        mem = math.floor(mem * 1024 + 1e-6) / 1024
        if mem <= 0:
            raise InvalidArgument(GPU_MEMORY_GIB, ann[GPU_MEMORY_GIB], mem_allowed)
    family = get(SHAPE_FAMILY)
    if family not in SHAPE_FAMILIES:
        raise InvalidArgument(SHAPE_FAMILY, family, f"one of {list(SHAPE_FAMILIES)}")
    if workload is JobKind.SERVICE and family != "fixed" and SHAPE_FAMILY in ann:
        raise InvalidArgument(SHAPE_FAMILY, family, "fixed (a service keeps its requested shape)")
    prio = _decimal(PRIORITY, get(PRIORITY), f"a decimal number in (0, {MAX_PRIORITY:g}]")
    if not 0 < prio <= MAX_PRIORITY:
        raise InvalidArgument(PRIORITY, get(PRIORITY), f"a decimal number in (0, {MAX_PRIORITY:g}]")
    if SLOWDOWN_BOUND in ann:
        bound = _decimal(SLOWDOWN_BOUND, ann[SLOWDOWN_BOUND], "a decimal number >= 1")
        if bound < 1.0:
            raise InvalidArgument(SLOWDOWN_BOUND, ann[SLOWDOWN_BOUND], "a decimal number >= 1")
    else:
        bound = DEFAULT_SLOWDOWN_BOUND[workload]
    work = _decimal(WORK, get(WORK), f"a decimal number of seconds in (0, {MAX_WORK_S:g}]")
    if not 0 < work <= MAX_WORK_S:
        raise InvalidArgument(WORK, get(WORK), f"a decimal number of seconds in (0, {MAX_WORK_S:g}]")
    jt = get(JOB_TYPE)
    types = tuple(job_types)
    if jt not in types:
        raise InvalidArgument(JOB_TYPE, jt, f"one of {list(types)}")
    gang = _integer(GANG_SIZE, get(GANG_SIZE), 1, MAX_GANG)
    resize = get(RESIZE_POLICY)
    if resize not in RESIZE_POLICIES:
        raise InvalidArgument(RESIZE_POLICY, resize, f"one of {list(RESIZE_POLICIES)}")
    if resize == "restart" and (workload is JobKind.SERVICE or family != "elastic" or gang != 1):
        raise InvalidArgument(RESIZE_POLICY, resize, (
            f"'none' unless the pod is a single elastic training or inference pod ({WORKLOAD} "
            f"{workload.value}, {SHAPE_FAMILY} {family}, {GANG_SIZE} {gang}): only such a pod "
            "is ever reshaped"))
    llm = None
    if any(k in ann for k in LLM_KEYS):
        llm = _parse_llm(ann, workload, gpus, frac, mem, models or frozenset(known_models),
                         known_models, gpu_memory)
    return PodSpec(workload, gpus, frac, mem, models, family, prio, bound, work, jt, gang,
                   resize_policy=resize, llm=llm)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: json.loads would accept them


def _reraise(key: str, raw: str, e: InvalidArgument) -> InvalidArgument:
    """``e`` (a field of the LLM model or work) as an error of annotation ``key``."""
    return InvalidArgument(key, raw if len(raw) <= 200 else raw[:200] + "...",
                           f"{e.field}: {e.value!r} is not allowed ({e.allowed})")


def _parse_llm(ann: Mapping[str, str], workload: JobKind, gpus: int, frac: float,
               mem: float | None, allowed_models: frozenset[str], known_models: Sequence[str],
               gpu_memory: Mapping[str, float]) -> LlmPod:
    """The ``llm-*`` annotations of an offline LLM inference pod (docs/annotations.md):
    InvalidArgument naming the annotation, its raw text and what is allowed."""
    from elastico import llm_job as LJ
    from elastico.llm_shapes import booked_memory_gib, llm_gpu_known
    from elastico.perf import llm as P

    present = [k for k in LLM_KEYS if k in ann]
    if workload is not JobKind.INFERENCE:
        raise InvalidArgument(present[0], ann[present[0]],
                              f"only on a pod with {WORKLOAD} inference (offline LLM inference)")
    for k in (WORK, JOB_TYPE):
        if k in ann:
            raise InvalidArgument(k, ann[k], f"absent on an offline LLM inference pod (its work is "
                                  f"its tokens, {LLM_REQUESTS} or {LLM_TOKENS}; its speed comes "
                                  f"from {LLM_MODEL})")
    if (LLM_MODEL in ann) == (LLM_MODEL_CONFIG in ann):
        k = LLM_MODEL if LLM_MODEL in ann else present[0]
        raise InvalidArgument(k, ann.get(k), f"exactly one of {LLM_MODEL} (a catalogue name: "
                              + ", ".join(P.LLM_MODELS) + f") and {LLM_MODEL_CONFIG} (the model's "
                              "config.json fields as JSON)")
    if LLM_MODEL in ann:
        raw = ann[LLM_MODEL]
        try:
            model = P.find_llm_model(raw)  # any case, as elastico llm --model
        except InvalidArgument:
            raise InvalidArgument(LLM_MODEL, raw, "a model of the catalogue: " + ", ".join(P.LLM_MODELS)
                                  + f" (or its Hugging Face id); another model: {LLM_MODEL_CONFIG}") from None
    else:
        raw = ann[LLM_MODEL_CONFIG]
        allowed = ("a JSON object of the model's Hugging Face config.json fields (num_hidden_layers, "
                   "hidden_size, num_attention_heads, num_key_value_heads, vocab_size, "
                   f"intermediate_size, ...), at most {MAX_MODEL_CONFIG_CHARS} characters")
        if not isinstance(raw, str) or len(raw) > MAX_MODEL_CONFIG_CHARS:
            raise InvalidArgument(LLM_MODEL_CONFIG, str(raw)[:200], allowed)
        try:
            cfg = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            raise InvalidArgument(LLM_MODEL_CONFIG, raw[:200], allowed) from None
        if not isinstance(cfg, dict):
            raise InvalidArgument(LLM_MODEL_CONFIG, raw[:200], allowed)
        name = cfg.get("_name_or_path") or "custom"
        try:
            model = P.from_hf_config(cfg, name=str(name)[:100])
        except InvalidArgument as e:
            raise _reraise(LLM_MODEL_CONFIG, raw, e) from None
        except (ValueError, OverflowError, TypeError):  # e.g. 1e400 read as inf
            raise InvalidArgument(LLM_MODEL_CONFIG, raw[:200], allowed + " (finite numbers)") from None
    if (LLM_REQUESTS in ann) == (LLM_TOKENS in ann):
        k = LLM_REQUESTS if LLM_REQUESTS in ann else LLM_MODEL if LLM_MODEL in ann else LLM_MODEL_CONFIG
        raise InvalidArgument(k, ann.get(k), f"its work as exactly one of {LLM_REQUESTS} (request "
                              f"classes INPUT:OUTPUTxCOUNT, e.g. 512:128x1000) and {LLM_TOKENS} "
                              f"(a token budget, with {LLM_LENGTHS})")
    if LLM_LENGTHS in ann and LLM_TOKENS not in ann:
        raise InvalidArgument(LLM_LENGTHS, ann[LLM_LENGTHS], f"only with {LLM_TOKENS} (a token budget)")
    try:
        if LLM_REQUESTS in ann:
            raw = ann[LLM_REQUESTS]
            work = LJ.requests_work((i, o, int(n)) for i, o, n in
                                    LJ.parse_classes(raw, LLM_REQUESTS, counts=True))
        else:
            raw = ann[LLM_TOKENS]
            allowed = f"a decimal number of tokens (prompt + generated) in [1, {LJ.MAX_TOKENS:g}]"
            tokens = _decimal(LLM_TOKENS, raw, allowed)
            if not 1 <= tokens <= LJ.MAX_TOKENS:
                raise InvalidArgument(LLM_TOKENS, raw, allowed)
            raw = ann.get(LLM_LENGTHS, LJ.LENGTH_DISTRIBUTIONS[0])
            work = LJ.budget_work(tokens, LJ.length_distribution(raw, LLM_LENGTHS))
    except InvalidArgument as e:
        if e.field in (LLM_REQUESTS, LLM_TOKENS, LLM_LENGTHS):
            raise
        key = LLM_REQUESTS if LLM_REQUESTS in ann else LLM_TOKENS
        raise _reraise(key, ann[key], e) from None
    dtype = ann.get(LLM_DTYPE, "fp16")
    if dtype not in P.DTYPES:
        raise InvalidArgument(LLM_DTYPE, dtype, "one of " + ", ".join(P.DTYPES))
    kv = ann.get(LLM_KV_DTYPE)
    if kv is not None and kv not in P.KV_DTYPES:
        raise InvalidArgument(LLM_KV_DTYPE, kv, "one of " + ", ".join(P.KV_DTYPES)
                              + f" (default: fp8 with {LLM_DTYPE} fp8, else 16-bit)")
    engine = ann.get(LLM_ENGINE, "vllm")
    if engine not in P.ENGINES:
        raise InvalidArgument(LLM_ENGINE, engine, "one of " + ", ".join(P.ENGINES))
    tp = gpus
    if LLM_TENSOR_PARALLEL in ann:
        tp = _integer(LLM_TENSOR_PARALLEL, ann[LLM_TENSOR_PARALLEL], 1, MAX_GPUS)
        if gpus % tp:
            raise InvalidArgument(LLM_TENSOR_PARALLEL, ann[LLM_TENSOR_PARALLEL],
                                  f"a divisor of {GPUS}={gpus} (the pod runs {GPUS} / it replicas)")
    # the requested shape must be one the model accepts and fit an allowed GPU model: the first
    # (in the known models' order) where it fits is the job's reference (elastico.llm_job)
    spec = LJ.LlmJobSpec(model, work, dtype, kv, engine, tp, gpus // tp)
    req = Request(gpus, frac, 0.0, 0.0, allowed_models, gpu_mem_gib=mem, device_memory=True)
    why = []
    for m in known_models:
        if m not in allowed_models or not llm_gpu_known(m) or m not in gpu_memory:
            continue
        share = frac
        cfg = spec.config(m, tp, gpus // tp, mps_share=share if share < 1.0 else None,
                          memory_limit_gib=booked_memory_gib(req, gpu_memory[m], share))
        try:
            fits = P.memory(model, cfg)
        except InvalidArgument as e:
            if e.field == "tp":
                raise InvalidArgument(LLM_TENSOR_PARALLEL, str(tp), e.allowed) from None
            raise
        if fits.fits and LJ.mix_tokens_per_s(model, cfg, work) > 0:
            return LlmPod(model, work, dtype, kv, engine, tp, m, float(gpu_memory[m]))
        why.append(f"{m}: {fits.reason or 'a request class does not fit the KV cache'}")
    key = LLM_MODEL if LLM_MODEL in ann else LLM_MODEL_CONFIG
    raise InvalidArgument(key, ann[key] if key == LLM_MODEL else model.name,
                          f"a model whose requested shape ({gpus} GPU(s) at {frac:g}, tensor "
                          f"parallel {tp}) fits an allowed GPU model; "
                          + ("; ".join(why) if why else
                             "no allowed GPU model has LLM figures in the GPU catalogue"))


def job_group(pod: Mapping) -> str:
    """The key shared by the pods of one job: ``ns/label/<elastico.io/job>`` when the label is
    set, else ``ns/<Kind>/<name>`` of the controller owner reference (the first owner when none
    is marked controller), else ``ns/pod/<pod name>``."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    label = (meta.get("labels") or {}).get(JOB_LABEL)
    if label:
        return f"{ns}/label/{label}"
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if owner:
        return f"{ns}/{owner.get('kind', '')}/{owner.get('name', '')}"
    return f"{ns}/pod/{meta.get('name', '')}"


def build_job(job_id: str, spec: PodSpec, members: int, cpu_per_pod: float,
              mem_gib_per_pod: float, arrival_s: float, *, may_resize: bool = True) -> Job:
    """The :class:`Job` of ``members`` pods sharing ``spec`` (one pod, or the pods of a gang
    still to place): ``members x gpus`` GPUs at ``gpu_fraction``, CPU cores and host GiB
    summed over the pods.

    Kind in the round: a single elastic pod keeps its workload kind (shape transformation may
    change its GPUs: it is one process that receives every GPU of the decision); a gang, a
    ``fixed`` shape family, or a service enters as ``service`` -- placed with its requested
    shape before the elastic jobs (pod requests are immutable, and a gang's pods must split
    the GPUs evenly, so only the requested shape is safe).  Every live pod keeps its
    ``gpu-fraction`` too (``Job.fixed_share``), also where a policy (``elastico``) gives the
    services of a trace whole GPUs: a bound pod cannot give back a GPU it did not ask for.

    GPU memory comes from each GPU's real size (``Request.device_memory``;
    :func:`elastico.shapes.gpu_memory_gib`): ``gpu-memory-gib`` when set, else the share of
    the GPU's memory.

    Shape: an elastic pod keeps its requested GPU count and share (``Job.reshape`` False; the
    GPU model and a MIG instance that holds the request are still chosen by the round) unless
    it opted in with ``resize-policy: restart`` and ``may_resize`` (the loop passes False when
    the job's restart budget is spent): only then may it be given more than it asked, since
    only then can the placer take it back (by evicting the pod)."""
    if members < 1:
        raise InvalidArgument("members", members, "at least one pod")
    elastic = members == 1 and spec.gang_size == 1 and spec.shape_family == "elastic" \
        and spec.workload is not JobKind.SERVICE
    num = spec.gpus * members
    if num > MAX_GPUS:
        raise InvalidArgument(GANG_SIZE, str(spec.gang_size),
                              f"at most {MAX_GPUS} GPUs per job ({GPUS} x pods = {num})")
    share = spec.gpu_fraction if num == 1 else 1.0
    if num > 1 and spec.gpu_fraction != 1.0:
        raise InvalidArgument(GPU_FRACTION, f"{spec.gpu_fraction:g}",
                              f"1 for a gang of {members} pods (only a single-GPU pod shares a GPU)")
    kind = spec.workload if elastic else JobKind.SERVICE
    reshape = elastic and spec.resize_policy == "restart" and may_resize
    if spec.llm is not None:  # offline LLM inference: its work in tokens (elastico.llm_job)
        from elastico.llm_job import llm_job

        L = spec.llm
        return llm_job(job_id, L.model, L.work, reference_gpu=L.reference_gpu,
                       reference_memory_gib=L.reference_memory_gib, gpu_models=spec.gpu_models,
                       tp=L.tp, replicas=num // L.tp, gpu_share=share,
                       gpu_mem_gib=spec.gpu_memory_gib, dtype=L.dtype, kv_dtype=L.kv_dtype,
                       engine=L.engine, arrival_s=arrival_s, cpu=cpu_per_pod * members,
                       mem_gib=mem_gib_per_pod * members, priority=spec.priority,
                       slowdown_bound=spec.slowdown_bound, reshape=reshape, kind=kind,
                       fixed_share=True)
    req = Request(num, share, cpu_per_pod * members, mem_gib_per_pod * members, spec.gpu_models,
                  gpu_mem_gib=spec.gpu_memory_gib, device_memory=True)
    return Job(id=job_id, kind=kind,
               arrival_s=arrival_s, work=spec.work, request=req, job_type=spec.job_type,
               priority=spec.priority, slowdown_bound=spec.slowdown_bound,
               fixed_share=True, reshape=reshape)


@dataclass(frozen=True)
class PodBooking:
    """One pod's part of a job's placement, as written on the pod.  ``gpu_share`` (fraction
    of a GPU) and ``gpu_mem_gib`` (GiB) per GPU; ``cpu`` (cores) and ``mem_gib`` (GiB) this
    pod's part of the node's host resources; ``throughput`` the configuration's normalized
    throughput; ``slowdown_bound``/``job_type``/``kind`` what the interference check needs
    to rebuild the booking."""

    job_id: str
    node: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    gpu_share: float
    gpu_mem_gib: float
    cpu: float
    mem_gib: float
    config_name: str
    gpu_model: str | None
    throughput: float
    slowdown_bound: float
    job_type: str
    kind: str
    round_id: str
    predicted_slowdown: float = 1.0
    mig_profile: str | None = None
    mig_starts: tuple[int, ...] = ()
    #: an offline LLM inference pod's tensor-parallel degree (GPUs per engine replica;
    #: ``elastico.io/tensor-parallel``); 0 for every other pod
    tensor_parallel: int = 0

    def configuration(self) -> Configuration:
        """This pod's part as a configuration (what the round sees while it runs)."""
        return Configuration(self.config_name or "booked", self.gpu_model, len(self.gpu_indices),
                             self.gpu_share, self.gpu_mem_gib, self.cpu, self.mem_gib,
                             self.throughput, self.mig_profile,
                             replica_gpus=max(1, self.tensor_parallel))


def split_assignment(job: Job, config: Configuration, assignment, pod_names: Sequence[str],
                     uuids: Mapping[str, Sequence[str]], round_id: str,
                     slowdown: float) -> list[PodBooking]:
    """Deal a job's ``assignment`` (:class:`elastico.placer.placement.Assignment`) to its pods
    (``pod_names`` order).  When the assignment has one part per pod, pod ``i`` gets part
    ``i``; when it has one part for several pods (a gang on one node), pod ``i`` gets GPUs
    ``i*k .. i*k+k-1`` of it with ``k = GPUs / pods`` and ``1/pods`` of its CPU and host
    memory.  ``uuids[node][g]``: UUID of GPU ``g`` of ``node``.  InvalidArgument when the
    decision cannot be dealt that way (its GPUs do not split evenly, or it spans nodes in a
    way that does not match the pods)."""
    n = len(pod_names)
    parts = tuple(assignment.parts)
    if n < 1:
        raise InvalidArgument("pods", n, "at least one pod")
    if len(parts) == n:
        slices = [(p, p.gpu_indices, p.mig_starts, p.cpu, p.mem_gib) for p in parts]
    elif len(parts) == 1 and len(parts[0].gpu_indices) % n == 0:
        p = parts[0]
        k = len(p.gpu_indices) // n
        slices = [(p, p.gpu_indices[i * k:(i + 1) * k], p.mig_starts[i * k:(i + 1) * k],
                   p.cpu / n, p.mem_gib / n) for i in range(n)]
    else:
        raise InvalidArgument("decision", f"{len(parts)} part(s), "
                              f"{sum(len(p.gpu_indices) for p in parts)} GPUs",
                              f"one part per pod, or one node whose GPUs split evenly into {n} pods")
    out = []
    for part, gpus, starts, cpu, mem in slices:
        # each pod's own shape (a gang's pods each run k of its GPUs): the name the pod, its
        # Scheduled Event and its container (ELASTICO_CONFIGURATION) see
        name = config.name if n == 1 else (
            mig_config_name(config.gpu_model, len(gpus), config.mig_profile)
            if config.mig_profile else config_name(config.gpu_model, len(gpus), config.gpu_share))
        try:
            ids = tuple(uuids[part.node][g] for g in gpus)
        except (IndexError, KeyError):
            raise InvalidArgument("gpu_indices", gpus, f"GPUs of node {part.node} in its "
                                  "inventory") from None
        out.append(PodBooking(
            job_id=job.id, node=part.node, gpu_indices=tuple(gpus), gpu_uuids=ids,
            gpu_share=assignment.gpu_share, gpu_mem_gib=assignment.gpu_mem_gib,
            cpu=cpu, mem_gib=mem, config_name=name, gpu_model=config.gpu_model,
            throughput=config.throughput / n, slowdown_bound=job.slowdown_bound,
            job_type=job.job_type, kind=job.kind.value, round_id=round_id,
            predicted_slowdown=float(slowdown), mig_profile=assignment.mig_profile,
            mig_starts=tuple(starts),
            tensor_parallel=config.replica_gpus if job.llm is not None else 0))
    return out


def decision_annotations(b: PodBooking) -> dict[str, str | None]:
    """The annotations of one pod's decision (docs/annotations.md).  Keys that do not apply
    map to None (a merge patch removes them, so no stale value of an earlier decision stays).
    The MPS active thread percentage is exactly the booked share x 100
    (:func:`elastico.model.mps_percentage`): a booked share MPS cannot enforce raises
    InvalidArgument (field ``elastico.io/booking.gpu_share``) instead of being rounded."""
    mps = b.mig_profile is None and b.gpu_share < 1.0
    return {
        ROUND_ID: b.round_id,
        CONFIGURATION: b.config_name,
        GPU_UUIDS: ",".join(b.gpu_uuids),
        MIG_PROFILE: b.mig_profile,
        MIG_START_SLOT: ",".join(str(s) for s in b.mig_starts) if b.mig_profile else None,
        MPS_ACTIVE_THREAD_PERCENTAGE: (str(mps_percentage(b.gpu_share, f"{BOOKING}.gpu_share"))
                                       if mps else None),
        MPS_PINNED_MEM_LIMIT_GIB: f"{b.gpu_mem_gib:g}" if mps else None,
        PREDICTED_SLOWDOWN: f"{b.predicted_slowdown:.4f}",
        TENSOR_PARALLEL: str(b.tensor_parallel) if b.tensor_parallel > 0 else None,
        BOOKING: json.dumps(asdict(b), sort_keys=True, separators=(",", ":")),
    }


def clear_decision() -> dict[str, None]:
    """A merge patch that removes every decision annotation (a reservation given up)."""
    return {k: None for k in DECISION_KEYS}


def parse_booking(annotations: Mapping[str, str] | None) -> PodBooking | None:
    """The booking a pod carries, or None.  InvalidArgument (field ``elastico.io/booking``)
    when it is not a booking this version wrote."""
    raw = (annotations or {}).get(BOOKING)
    if raw is None:
        return None
    try:
        d = json.loads(raw)
        d["gpu_indices"] = tuple(int(x) for x in d["gpu_indices"])
        d["gpu_uuids"] = tuple(str(x) for x in d["gpu_uuids"])
        d["mig_starts"] = tuple(int(x) for x in d.get("mig_starts", ()))
        d["tensor_parallel"] = int(d.get("tensor_parallel", 0))
        b = PodBooking(**d)
    except RecursionError:  # nested too deep to read: a pod's annotation must not stop rounds
        raise InvalidArgument(BOOKING, raw[:200], "a booking written by the placer (JSON "
                              "nested too deep)") from None
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidArgument(BOOKING, raw[:200], f"a booking written by the placer ({e})") from None
    for name in ("gpu_share", "gpu_mem_gib", "cpu", "mem_gib", "throughput", "slowdown_bound"):
        v = getattr(b, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise InvalidArgument(f"{BOOKING}.{name}", v, "a finite number >= 0")
    tp = b.tensor_parallel
    if tp < 0 or (tp and len(b.gpu_indices) % tp):
        raise InvalidArgument(f"{BOOKING}.tensor_parallel", tp,
                              f"0, or a divisor of the pod's {len(b.gpu_indices)} GPU(s)")
    return b
