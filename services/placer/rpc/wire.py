"""The placer's wire format (protos/elastico/v1/placer.proto) <-> the round's objects.

Both directions in one module so that a value survives the round trip exactly (float64
travels as proto ``double``: bit for bit).  Conventions: a proto empty string is ``None`` for
``Configuration.gpu_model`` / ``mig_profile``; a booking (:class:`Assignment`) travels as a
``Placement`` whose ``gpu_share`` / ``gpu_mem_gib`` are the amounts booked per GPU.

Reading (``*_from_message``) validates everything before anything is built and raises
:class:`~elastico.errors.InvalidArgument` naming the field path and value (``jobs[3].request
.gpu_share``) or :class:`~elastico.errors.NotFound` (a booking on an unknown node, of a job
not in the request).  Who calls it: the placer server (:mod:`elastico.placer.server`) and its
client (:mod:`elastico.placer.rpc.remote`).  An adapter module (it imports ``elastico.v1``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from google.protobuf.message import Message

from elastico.model import with_mig_count
from elastico.errors import Infeasible, InvalidArgument, NotFound
from elastico.model import (MAX_PRIORITY, MIG_CAPABLE_MODELS, Configuration, Job, JobKind, Node,
                            Request, mps_percentage)
from elastico.llm_job import LengthClass, LlmJobSpec, LlmWork, llm_job_type
from elastico import llm_train_job as LTJ
from elastico.llm_train_job import LlmTrainSpec, llm_train_job_type
from elastico.perf import llm_training as perf_train
from elastico.mig import MIG_PROFILES
from elastico.perf import llm as perf_llm
from elastico.perf.llm import LlmModel
from elastico.trace import MAX_GPUS_PER_NODE
from elastico.v1 import common_pb2, placer_pb2

from elastico.placer.placement import Assignment, ClusterState, Part
from elastico.placer.round import ActiveJob, Decision, Status

__all__ = ["config_to_message", "config_from_message", "node_to_message", "nodes_from_messages",
           "mig_home_of",
           "job_to_message", "job_from_message", "jobs_from_messages",
           "assignment_from_message", "book_all", "decision_to_message",
           "decision_from_message", "merge_packed_doubles", "JobDecoder", "DecisionDecoder",
           "fill_job", "fill_config", "fill_booking", "fill_decision", "fill_llm",
           "llm_from_message", "fill_llm_train", "llm_train_from_message", "KIND_TO_WIRE"]

KIND_TO_WIRE = {JobKind.TRAINING: common_pb2.JOB_KIND_TRAINING,
                JobKind.INFERENCE: common_pb2.JOB_KIND_INFERENCE,
                JobKind.SERVICE: common_pb2.JOB_KIND_SERVICE}
_KIND_FROM_WIRE = {v: k for k, v in KIND_TO_WIRE.items()}
_STATUS = {s.value: s for s in Status}


# ---------------------------------------------------------------------------- packed arrays
def _varint(x: int) -> bytes:
    out = bytearray()
    while x > 0x7F:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def merge_packed_doubles(msg: Message, **fields: Any) -> Message:
    """Set ``repeated double`` fields of ``msg`` from float64 arrays without a Python float
    per element: a packed ``repeated double`` is, on the wire, its tag, its byte length and
    the values as little-endian IEEE 754 doubles (protobuf encoding, "packed repeated
    fields"), so ``arr.tobytes()`` is merged as it is -- bit for bit the values
    ``field.extend(arr.tolist())`` would give, ~20x faster for the pricing instance's
    ``demand`` [M*R].  Appends to what the fields hold; returns ``msg``.  A field that is
    not a repeated double raises ValueError naming it."""
    parts = []
    for name, values in fields.items():
        fd = msg.DESCRIPTOR.fields_by_name.get(name)
        if fd is None or fd.type != fd.TYPE_DOUBLE or not _is_repeated(fd):
            raise ValueError(f"{msg.DESCRIPTOR.full_name}.{name} is not a repeated double")
        raw = np.ascontiguousarray(values, dtype="<f8").tobytes()
        if raw:
            parts += [_varint(fd.number << 3 | 2), _varint(len(raw)), raw]
    msg.MergeFromString(b"".join(parts))
    return msg


def _is_repeated(fd: Any) -> bool:
    rep = getattr(fd, "is_repeated", None)  # protobuf >= 5.28; `label` is deprecated there
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


# ------------------------------------------------------------------------------ checks
def _number(field: str, v: float, *, lo: float = 0.0, hi: float = math.inf,
            lo_open: bool = False, allowed: str = "finite and >= 0") -> float:
    if not (math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi):
        raise InvalidArgument(field, v, allowed)
    return v


def _mps_share(field: str, share: float, num_gpus: int, mig_profile: str | None) -> None:
    """An MPS share (GPUs, no MIG profile) must be enforceable: a whole percent
    (:func:`elastico.model.mps_percentage`), else InvalidArgument naming ``field``."""
    if num_gpus and not mig_profile:
        mps_percentage(share, field)


# ------------------------------------------------------------------------ configurations
def config_to_message(c: Configuration) -> common_pb2.Configuration:
    return fill_config(common_pb2.Configuration(), c)


def fill_config(m: common_pb2.Configuration, c: Configuration) -> common_pb2.Configuration:
    """Writes ``c`` into ``m`` (a fresh message or an unset sub-message: filled in place,
    no copy); returns ``m``."""
    m.name, m.gpu_model, m.num_gpus = c.name, c.gpu_model or "", c.num_gpus
    m.gpu_share, m.gpu_mem_gib, m.cpu, m.mem_gib = c.gpu_share, c.gpu_mem_gib, c.cpu, c.mem_gib
    m.throughput, m.mig_profile = c.throughput, c.mig_profile or ""
    if c.replica_gpus != 1:  # 1 travels as unset: a non-LLM configuration's bytes as before
        m.replica_gpus = c.replica_gpus
    return m


def config_from_message(m: common_pb2.Configuration, where: str) -> Configuration:
    """A checked configuration: num_gpus >= 0; gpu_share in (0, 1] with GPUs (in [0, 1]
    without); memory, CPU and throughput finite and >= 0; a GPU model with GPUs; a MIG profile
    only with GPUs, one of its model's profiles; ``replica_gpus`` (0 = 1) a divisor of
    num_gpus in 1..64 (1 without GPUs)."""
    if m.num_gpus < 0:
        raise InvalidArgument(f"{where}.num_gpus", m.num_gpus, "an integer >= 0")
    if m.num_gpus:
        _number(f"{where}.gpu_share", m.gpu_share, lo_open=True, hi=1.0,
                allowed="a fraction in (0, 1] when num_gpus > 0")
        if not m.gpu_model:
            raise InvalidArgument(f"{where}.gpu_model", m.gpu_model,
                                  "a GPU model when num_gpus > 0")
    else:
        _number(f"{where}.gpu_share", m.gpu_share, hi=1.0, allowed="a fraction in [0, 1]")
    _mps_share(f"{where}.gpu_share", m.gpu_share, m.num_gpus, m.mig_profile)
    for name in ("gpu_mem_gib", "cpu", "mem_gib", "throughput"):
        _number(f"{where}.{name}", getattr(m, name))
    if m.mig_profile:
        table = MIG_PROFILES.get(m.gpu_model)
        if not m.num_gpus or table is None or m.mig_profile not in table:
            raise InvalidArgument(f"{where}.mig_profile", m.mig_profile,
                                  f"a MIG profile of {m.gpu_model or 'the GPU model'} "
                                  f"({sorted(table) if table else 'none: not MIG-capable'}), "
                                  "with num_gpus > 0")
    rg = m.replica_gpus or 1
    if m.num_gpus:
        if not (1 <= rg <= MAX_GPUS_PER_NODE and m.num_gpus % rg == 0):
            raise InvalidArgument(f"{where}.replica_gpus", m.replica_gpus,
                                  f"a divisor of num_gpus = {m.num_gpus} in 1..{MAX_GPUS_PER_NODE} "
                                  "(one replica's GPUs, its tensor-parallel degree; 0 = 1)")
    elif rg != 1:
        raise InvalidArgument(f"{where}.replica_gpus", m.replica_gpus, "0 or 1 when num_gpus = 0")
    return Configuration(m.name, m.gpu_model or None, m.num_gpus, m.gpu_share, m.gpu_mem_gib,
                         m.cpu, m.mem_gib, m.throughput, m.mig_profile or None, replica_gpus=rg)


# --------------------------------------------------------------------------------- nodes
def node_to_message(n: Node, mig_gpus: Iterable[int] = (),
                    mig_home_gpus: Iterable[int] = ()) -> placer_pb2.NodeSpec:
    return placer_pb2.NodeSpec(name=n.name, gpu_model=n.gpu_model, num_gpus=n.num_gpus,
                               gpu_mem_gib=n.gpu_mem_gib, cpu=n.cpu, mem_gib=n.mem_gib,
                               unhealthy_gpus=sorted(n.unhealthy_gpus), mig_gpus=list(mig_gpus),
                               mig_home_gpus=list(mig_home_gpus), labels=dict(n.labels))


def nodes_from_messages(msgs: Sequence[placer_pb2.NodeSpec], where: str = "nodes", *,
                        lending: bool = False
                        ) -> tuple[list[Node], list[tuple[int, int]]]:
    """``(nodes, MIG-mode (node index, GPU index) pairs)``; at least one node, unique names.
    ``lending`` (``PolicyOptions.mig_lending``): each node's MIG count label counts its home
    MIG GPUs (``mig_home_gpus``, a superset of ``mig_gpus``; empty = ``mig_gpus``) -- what the
    policy offers and prices MIG instances by -- and :func:`mig_home_of` reads them."""
    if not msgs:
        raise InvalidArgument(where, 0, "at least one node")
    nodes: list[Node] = []
    mig: list[tuple[int, int]] = []
    seen: set[str] = set()
    for i, m in enumerate(msgs):
        w = f"{where}[{i}]"
        if not m.name or m.name in seen:
            raise InvalidArgument(f"{w}.name", m.name, "a non-empty name, unique among nodes")
        seen.add(m.name)
        if not 0 <= m.num_gpus <= MAX_GPUS_PER_NODE:  # the placement state is per GPU
            raise InvalidArgument(f"{w}.num_gpus", m.num_gpus,
                                  f"an integer in 0..{MAX_GPUS_PER_NODE} (GPUs of one node)")
        if m.num_gpus and not m.gpu_model:
            raise InvalidArgument(f"{w}.gpu_model", m.gpu_model, "a GPU model when num_gpus > 0")
        for name in ("gpu_mem_gib", "cpu", "mem_gib"):
            _number(f"{w}.{name}", getattr(m, name))
        for field in ("unhealthy_gpus", "mig_gpus", "mig_home_gpus"):
            vals = list(getattr(m, field))
            for k, g in enumerate(vals):
                if not 0 <= g < m.num_gpus or g in vals[:k]:
                    raise InvalidArgument(f"{w}.{field}[{k}]", g,
                                          f"distinct GPU indices in 0..{m.num_gpus - 1}")
        home = list(m.mig_home_gpus) if lending and len(m.mig_home_gpus) else list(m.mig_gpus)
        if lending and not set(m.mig_gpus) <= set(home):
            raise InvalidArgument(f"{w}.mig_home_gpus", home,
                                  f"every index of mig_gpus {list(m.mig_gpus)} among them (a GPU "
                                  "in MIG mode has MIG as its home mode)")
        if (len(m.mig_gpus) or home) and (m.gpu_model not in MIG_CAPABLE_MODELS
                                           or m.gpu_model not in MIG_PROFILES):
            field = "mig_gpus" if len(m.mig_gpus) else "mig_home_gpus"
            raise InvalidArgument(f"{w}.{field}", list(getattr(m, field)),
                                  f"empty: {m.gpu_model!r} is not a MIG-capable model with a "
                                  f"profile table ({sorted(MIG_PROFILES)})")
        # the MIG-mode GPUs' count, as the label the policy reads (offered MIG instances,
        # capacity): the indices themselves go to the ClusterState, never through the label
        nodes.append(Node(m.name, m.gpu_model, m.num_gpus, m.gpu_mem_gib, m.cpu, m.mem_gib,
                          labels=with_mig_count(m.labels, len(home)),
                          unhealthy_gpus=frozenset(m.unhealthy_gpus)))
        mig += [(i, g) for g in m.mig_gpus]
    return nodes, mig


def mig_home_of(msgs: Sequence[placer_pb2.NodeSpec]) -> dict[int, tuple[int, ...]]:
    """Node index -> its home MIG GPUs (``mig_home_gpus``, else ``mig_gpus``), sorted; only
    nodes with some (checked by :func:`nodes_from_messages` with ``lending``)."""
    out = {}
    for i, m in enumerate(msgs):
        home = sorted(m.mig_home_gpus) if len(m.mig_home_gpus) else sorted(m.mig_gpus)
        if home:
            out[i] = tuple(home)
    return out


def check_known(model, nodes: Sequence[Node], jobs: Iterable[tuple[str, Job]]) -> None:
    """Every node with GPUs has a GPU model and every job but an LLM job (checked by
    :func:`job_from_message`) a job type that the throughput ``model`` knows
    (:class:`elastico.perf.throughput.ThroughputModel`), else InvalidArgument naming the
    request's field (``nodes[2].gpu_model``, ``jobs[0].job_type``) -- checked before the
    round, where the same mistake would surface without its path.  ``nodes``: the request's
    ``nodes``; ``jobs``: (field path, job) pairs, e.g. ``("jobs[0]", job)``."""
    models = set(model.gpu_models())
    for i, n in enumerate(nodes):
        if n.num_gpus and n.gpu_model not in models:
            raise InvalidArgument(f"nodes[{i}].gpu_model", n.gpu_model,
                                  "a GPU model the throughput model knows: "
                                  + ", ".join(sorted(models)))
    types = model.job_types()
    for where, job in jobs:
        # an LLM job's speed: perf.llm / perf.llm_training
        if job.llm is None and job.llm_train is None and job.job_type not in types:
            raise InvalidArgument(f"{where}.job_type", job.job_type,
                                  "one of the throughput model's job types: " + ", ".join(types))


# ---------------------------------------------------------------------------------- jobs
def job_to_message(a: ActiveJob) -> placer_pb2.JobSpec:
    return fill_job(placer_pb2.JobSpec(), a)


def fill_job(m: placer_pb2.JobSpec, a: ActiveJob) -> placer_pb2.JobSpec:
    """:func:`job_to_message` written into an empty ``m`` in place (e.g.
    ``request.jobs.add()``); returns ``m``."""
    j, r = a.job, a.job.request
    m.id, m.kind, m.arrival_s, m.work = j.id, KIND_TO_WIRE[j.kind], j.arrival_s, j.work
    q = m.request
    q.num_gpus, q.gpu_share, q.cpu, q.mem_gib = r.num_gpus, r.gpu_share, r.cpu, r.mem_gib
    q.gpu_models.extend(sorted(r.gpu_models))
    if r.gpu_mem_gib is not None:
        q.gpu_mem_gib = r.gpu_mem_gib
    q.device_memory = r.device_memory
    m.job_type, m.priority, m.slowdown_bound, m.done = (j.job_type, j.priority,
                                                        j.slowdown_bound, j.done)
    m.fixed_share = j.fixed_share
    if j.llm is not None:
        fill_llm(m.llm, j.llm)
    if j.llm_train is not None:
        fill_llm_train(m.llm_train, j.llm_train)
    if a.config is not None:
        fill_config(m.current, a.config)
    return m


def _fill_model(mm: placer_pb2.LlmModelSpec, md: LlmModel) -> None:
    mm.name, mm.params_b, mm.layers, mm.hidden = md.name, md.params_b, md.layers, md.hidden
    mm.heads, mm.kv_heads, mm.head_dim, mm.vocab = md.heads, md.kv_heads, md.head_dim, md.vocab
    mm.intermediate, mm.experts, mm.experts_active = md.intermediate, md.experts, md.experts_active
    mm.tied_embeddings = md.tied_embeddings


def _model_from_message(mm: placer_pb2.LlmModelSpec) -> LlmModel:
    """InvalidArgument with the LlmModel's own field (``model.<field>``)."""
    return LlmModel(mm.name, mm.params_b, mm.layers, mm.hidden, mm.heads, mm.kv_heads,
                    mm.head_dim, mm.vocab, mm.intermediate, mm.experts or 1,
                    mm.experts_active or 1, mm.tied_embeddings)


def fill_llm(m: placer_pb2.LlmJob, spec: LlmJobSpec) -> placer_pb2.LlmJob:
    """Writes an LLM job's :class:`~elastico.llm_job.LlmJobSpec` into an empty ``m`` (every
    field explicit, defaults included); returns ``m``."""
    _fill_model(m.model, spec.model)
    for c in spec.work.classes:
        m.classes.add(input_tokens=c.input_tokens, output_tokens=c.output_tokens,
                      requests=c.requests)
    m.dtype, m.kv_dtype, m.engine = spec.dtype, spec.kv_dtype or "", spec.engine
    m.tensor_parallel, m.replicas = spec.tp, spec.replicas
    m.reference_gpu, m.reference_tokens_per_s = spec.reference_gpu, spec.reference_tokens_per_s
    return m


#: where an LLM field's own error (elastico.perf.llm / elastico.llm_job field names) sits in
#: a JobSpec's ``llm`` message
_LLM_FIELD = {"tp": "tensor_parallel", "replicas": "replicas", "dtype": "dtype",
              "kv_dtype": "kv_dtype", "engine": "engine", "gpu": "reference_gpu",
              "work.tokens": "classes", "work.classes": "classes"}


def _llm_path(w: str, field: str) -> str:
    if field.startswith("model."):
        return f"{w}.{field}"
    if field.startswith("work.classes["):
        return f"{w}.{field[len('work.'):]}"
    return f"{w}.{_LLM_FIELD.get(field, field)}"


def llm_from_message(m: placer_pb2.LlmJob, where: str) -> LlmJobSpec:
    """A checked :class:`~elastico.llm_job.LlmJobSpec` from a JobSpec's ``llm`` at field
    path ``where`` (e.g. ``jobs[3].llm``): the model's fields as
    :class:`~elastico.perf.llm.LlmModel` validates them (experts 0 = 1), the classes as
    :class:`~elastico.llm_job.LlmWork` does, dtype / kv_dtype / engine of their tables
    (empty = fp16 / the dtype's default / vllm), tensor_parallel and replicas in 1..64
    (0 = 1) with a TP degree the model splits over, a catalogue reference GPU and a finite
    reference speed > 0.  InvalidArgument names ``where.<field>``."""
    try:
        model = _model_from_message(m.model)
        work = LlmWork(tuple(LengthClass(c.input_tokens, c.output_tokens, c.requests)
                             for c in m.classes))
    except InvalidArgument as e:
        raise InvalidArgument(_llm_path(where, e.field), e.value, e.allowed) from None
    for name in ("tensor_parallel", "replicas"):
        v = getattr(m, name) or 1
        if not 1 <= v <= MAX_GPUS_PER_NODE:
            raise InvalidArgument(f"{where}.{name}", getattr(m, name),
                                  f"an integer in 1..{MAX_GPUS_PER_NODE} (0 = 1)")
    _number(f"{where}.reference_tokens_per_s", m.reference_tokens_per_s, lo_open=True,
            allowed="finite tokens/s > 0")
    spec = LlmJobSpec(model, work, m.dtype or "fp16", m.kv_dtype or None, m.engine or "vllm",
                      m.tensor_parallel or 1, m.replicas or 1, m.reference_gpu,
                      m.reference_tokens_per_s)
    try:  # dtype, kv_dtype, engine, the TP degree against the model, the reference GPU
        perf_llm.memory(model, spec.config(m.reference_gpu, spec.tp, spec.replicas))
    except InvalidArgument as e:
        raise InvalidArgument(_llm_path(where, e.field), e.value, e.allowed) from None
    return spec


def fill_llm_train(m: placer_pb2.LlmTrainJob, spec: LlmTrainSpec) -> placer_pb2.LlmTrainJob:
    """Writes an LLM training job's :class:`~elastico.llm_train_job.LlmTrainSpec` into an
    empty ``m`` (every field explicit, defaults included; ``zero`` only when the job names a
    stage); returns ``m``."""
    j = spec.job
    m.name = j.name
    _fill_model(m.model, j.model)
    m.seq_len, m.global_batch, m.tokens = j.seq_len, j.global_batch, float(j.tokens or 0.0)
    m.mode, m.precision, m.source = j.mode, j.precision, j.source
    if spec.zero is not None:
        m.zero = spec.zero
    m.recompute = spec.recompute
    m.reference_gpu, m.reference_tokens_per_s = spec.reference_gpu, spec.reference_tokens_per_s
    return m


def llm_train_from_message(m: placer_pb2.LlmTrainJob, where: str) -> LlmTrainSpec:
    """A checked :class:`~elastico.llm_train_job.LlmTrainSpec` from a JobSpec's
    ``llm_train`` at field path ``where`` (e.g. ``jobs[3].llm_train``): the model's fields as
    :class:`~elastico.perf.llm.LlmModel` validates them (experts 0 = 1), ``seq_len`` and
    ``global_batch`` integers >= 1, ``tokens`` finite and > 0, ``mode`` pretrain / finetune
    (empty = finetune), ``precision`` of :data:`elastico.llm_train_job.PRECISIONS` (empty =
    bf16), ``zero`` 0..3 or unset, ``recompute`` of
    :data:`elastico.perf.llm_training.RECOMPUTE` (empty = selective), a reference GPU with a
    cited MFU and a finite reference speed > 0.  InvalidArgument names ``where.<field>``."""
    try:
        model = _model_from_message(m.model)
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}.{e.field}", e.value, e.allowed) from None
    for name in ("seq_len", "global_batch"):
        v = getattr(m, name)
        if v < 1:
            raise InvalidArgument(f"{where}.{name}", v, "an integer >= 1")
    _number(f"{where}.tokens", m.tokens, lo_open=True, allowed="finite tokens > 0 (the work)")
    precision = m.precision or "bf16"
    if precision not in LTJ.PRECISIONS:
        raise InvalidArgument(f"{where}.precision", m.precision,
                              f"one of {list(LTJ.PRECISIONS)} (the cited MFU figures are BF16; "
                              "empty = bf16)")
    try:
        job = perf_train.LlmTrainingJob(m.name, model, int(m.seq_len), int(m.global_batch),
                                        float(m.tokens), m.mode or "finetune", precision,
                                        m.source)
    except InvalidArgument as e:  # fields "job.<name>"
        raise InvalidArgument(f"{where}.{e.field.removeprefix('job.')}", e.value,
                              e.allowed) from None
    zero = None
    if m.HasField("zero"):
        if not 0 <= m.zero <= 3:
            raise InvalidArgument(f"{where}.zero", m.zero, "a ZeRO stage 0..3, or unset (the "
                                  "smallest that fits)")
        zero = m.zero
    recompute = m.recompute or "selective"
    if recompute not in perf_train.RECOMPUTE:
        raise InvalidArgument(f"{where}.recompute", m.recompute,
                              f"one of {list(perf_train.RECOMPUTE)} (empty = selective)")
    if not LTJ.train_gpu_known(m.reference_gpu):
        raise InvalidArgument(f"{where}.reference_gpu", m.reference_gpu,
                              "a GPU model with a cited MFU: " + ", ".join(perf_train.MFU)
                              + " (and their aliases, e.g. H100-80GB)")
    _number(f"{where}.reference_tokens_per_s", m.reference_tokens_per_s, lo_open=True,
            allowed="finite tokens/s > 0")
    return LlmTrainSpec(job, zero, recompute, m.reference_gpu, m.reference_tokens_per_s)


def _llm_train_job(m: placer_pb2.JobSpec, kind: JobKind, where: str) -> LlmTrainSpec:
    """The ``llm_train`` of JobSpec ``m`` checked against the job: not with ``llm``, kind
    training, job_type ``"LLM train " + model name``, whole GPUs of one node (gpu_share 1,
    1..:data:`elastico.llm_train_job.MAX_GPUS` GPUs), GPU memory from the device
    (``request.device_memory``), and ``work`` = tokens / reference tokens/s (relative 1e-9:
    the same float64 division on both sides)."""
    w = f"{where}.llm_train"
    if m.HasField("llm"):
        raise InvalidArgument(f"{where}.llm", m.llm.model.name,
                              "unset with llm_train (a job is LLM inference or LLM training)")
    if kind is not JobKind.TRAINING:
        raise InvalidArgument(f"{where}.kind", m.kind,
                              "JOB_KIND_TRAINING for an LLM training job (llm_train set)")
    spec = llm_train_from_message(m.llm_train, w)
    if m.job_type != llm_train_job_type(spec):
        raise InvalidArgument(f"{where}.job_type", m.job_type,
                              f"{llm_train_job_type(spec)!r} for an LLM training job of this model")
    r = m.request
    if not 1 <= r.num_gpus <= LTJ.MAX_GPUS:
        raise InvalidArgument(f"{where}.request.num_gpus", r.num_gpus,
                              f"1..{LTJ.MAX_GPUS} whole GPUs of one node for an LLM training job")
    if r.gpu_share != 1.0:
        raise InvalidArgument(f"{where}.request.gpu_share", r.gpu_share,
                              "1.0 for an LLM training job (whole GPUs: no MPS share, no MIG)")
    if not r.device_memory:
        raise InvalidArgument(f"{where}.request.device_memory", False,
                              "true for an LLM training job (its memory is the plan's on each GPU)")
    want = spec.tokens / spec.reference_tokens_per_s
    if not math.isclose(m.work, want, rel_tol=1e-9):
        raise InvalidArgument(f"{where}.work", m.work,
                              f"the job's tokens over llm_train.reference_tokens_per_s = {want!r}")
    return spec


def job_from_message(m: placer_pb2.JobSpec, where: str) -> ActiveJob:
    """A checked job (module docstring) with its current configuration."""
    if not m.id:
        raise InvalidArgument(f"{where}.id", m.id, "a non-empty job id")
    kind = _KIND_FROM_WIRE.get(m.kind)
    if kind is None:
        raise InvalidArgument(f"{where}.kind", m.kind,
                              "JOB_KIND_TRAINING, JOB_KIND_INFERENCE or JOB_KIND_SERVICE")
    _number(f"{where}.arrival_s", m.arrival_s, lo=-math.inf, allowed="finite")
    _number(f"{where}.work", m.work)
    _number(f"{where}.done", m.done, hi=m.work, allowed=f"in [0, work = {m.work!r}]")
    priority = m.priority or 1.0
    _number(f"{where}.priority", priority, lo_open=True, hi=MAX_PRIORITY,
            allowed=f"in (0, {MAX_PRIORITY:g}] (0 = 1.0)")
    bound = m.slowdown_bound or 1.5
    _number(f"{where}.slowdown_bound", bound, lo=1.0, allowed="finite and >= 1 (0 = 1.5)")
    r = m.request
    w = f"{where}.request"
    if not 0 <= r.num_gpus <= MAX_GPUS_PER_NODE:
        raise InvalidArgument(f"{w}.num_gpus", r.num_gpus,
                              f"an integer in 0..{MAX_GPUS_PER_NODE} (a pod's GPUs are on one node)")
    if r.num_gpus:
        _number(f"{w}.gpu_share", r.gpu_share, lo_open=True, hi=1.0,
                allowed="a fraction in (0, 1] when num_gpus > 0")
        if r.num_gpus > 1 and r.gpu_share != 1.0:
            raise InvalidArgument(f"{w}.gpu_share", r.gpu_share, "1.0 when num_gpus > 1")
        _mps_share(f"{w}.gpu_share", r.gpu_share, r.num_gpus, None)
    else:
        _number(f"{w}.gpu_share", r.gpu_share, hi=1.0, allowed="a fraction in [0, 1]")
    _number(f"{w}.cpu", r.cpu)
    _number(f"{w}.mem_gib", r.mem_gib)
    gpu_mem = None
    if r.HasField("gpu_mem_gib"):
        gpu_mem = _number(f"{w}.gpu_mem_gib", r.gpu_mem_gib, lo_open=True,
                          allowed="finite and > 0 GiB per GPU, or unset")
    llm = llm_train = None
    if m.HasField("llm_train"):
        llm_train = _llm_train_job(m, kind, where)
    elif m.HasField("llm"):
        llm = _llm_job(m, kind, where)
    job = Job(m.id, kind, m.arrival_s, m.work,
              Request(r.num_gpus, r.gpu_share, r.cpu, r.mem_gib, frozenset(r.gpu_models),
                      gpu_mem_gib=gpu_mem, device_memory=r.device_memory),
              job_type=m.job_type, priority=priority, slowdown_bound=bound, done=m.done,
              fixed_share=m.fixed_share, llm=llm, llm_train=llm_train)
    cur = config_from_message(m.current, f"{where}.current") if m.HasField("current") else None
    return ActiveJob(job, cur)


def _llm_job(m: placer_pb2.JobSpec, kind: JobKind, where: str) -> LlmJobSpec:
    """The ``llm`` of JobSpec ``m`` checked against the job: kind inference or service,
    job_type ``"LLM " + model name``, as many requested GPUs as tensor_parallel x replicas,
    GPU memory from the device (``request.device_memory``), and ``work`` = tokens /
    reference tokens/s (relative 1e-9: the same float64 division on both sides)."""
    w = f"{where}.llm"
    if kind not in (JobKind.INFERENCE, JobKind.SERVICE):
        raise InvalidArgument(f"{where}.kind", m.kind, "JOB_KIND_INFERENCE or JOB_KIND_SERVICE "
                              "for an LLM job (llm set)")
    spec = llm_from_message(m.llm, w)
    if m.job_type != llm_job_type(spec.model):
        raise InvalidArgument(f"{where}.job_type", m.job_type,
                              f"{llm_job_type(spec.model)!r} for an LLM job of this model")
    if m.request.num_gpus != spec.tp * spec.replicas:
        raise InvalidArgument(f"{where}.request.num_gpus", m.request.num_gpus,
                              f"tensor_parallel x replicas = {spec.tp * spec.replicas} "
                              "for an LLM job")
    if not m.request.device_memory:
        raise InvalidArgument(f"{where}.request.device_memory", False,
                              "true for an LLM job (its memory is the model's on each GPU)")
    want = spec.work.total_tokens / spec.reference_tokens_per_s
    if not math.isclose(m.work, want, rel_tol=1e-9):
        raise InvalidArgument(f"{where}.work", m.work,
                              f"the job's tokens over llm.reference_tokens_per_s = {want!r}")
    return spec


def jobs_from_messages(msgs: Sequence[placer_pb2.JobSpec], where: str = "jobs") -> list[ActiveJob]:
    out = [job_from_message(m, f"{where}[{i}]") for i, m in enumerate(msgs)]
    _check_unique(out, where)
    return out


class JobDecoder:
    """:func:`jobs_from_messages` that remembers the previous call: a JobSpec whose bytes
    equal one decoded then is that same (frozen) :class:`ActiveJob`, checked then -- equal
    bytes are equal field values, so the result is what decoding it again would give.  A
    round's pending jobs come back unchanged round after round; this skips their checks.
    Keeps only the last call's jobs (bounded by one request)."""

    def __init__(self) -> None:
        self._last: dict[bytes, ActiveJob] = {}

    def __call__(self, msgs: Sequence[placer_pb2.JobSpec], where: str = "jobs"
                 ) -> list[ActiveJob]:
        last, seen_now, out = self._last, {}, []
        for i, m in enumerate(msgs):
            key = m.SerializeToString()
            a = last.get(key)
            if a is None:
                a = job_from_message(m, f"{where}[{i}]")
            seen_now[key] = a
            out.append(a)
        _check_unique(out, where)
        self._last = seen_now  # only after the whole request checked out
        return out


def _check_unique(out: Sequence[ActiveJob], where: str) -> None:
    seen: set[str] = set()
    for i, a in enumerate(out):
        if a.job.id in seen:
            raise InvalidArgument(f"{where}[{i}].id", a.job.id, "unique among jobs")
        seen.add(a.job.id)


# ------------------------------------------------------------------------------ bookings
def fill_booking(m: placer_pb2.Placement, a: Assignment, config: Configuration | None = None,
                 slowdown: float = 1.0) -> placer_pb2.Placement:
    """Writes the booking ``a`` (of ``config``, with its predicted ``slowdown``) into an
    empty ``m`` in place (e.g. ``request.bookings.add()``); returns ``m``."""
    m.job_id, m.predicted_slowdown = a.job_id, slowdown
    m.gpu_share, m.gpu_mem_gib = a.gpu_share, a.gpu_mem_gib
    for p in a.parts:
        m.parts.add(node=p.node, gpu_indices=p.gpu_indices, cpu=p.cpu, mem_gib=p.mem_gib,
                    mig_starts=p.mig_starts)
    if len(a.parts) == 1:
        p = a.parts[0]
        m.node = p.node
        m.gpu_indices.extend(p.gpu_indices)
        m.mig_starts.extend(p.mig_starts)
    if config is not None:
        fill_config(m.configuration, config)
    return m


def _parts(m: placer_pb2.Placement, config: Configuration):
    """(node, gpu indices, cpu, mem_gib, mig starts, field prefix) of each part."""
    if len(m.parts):
        return [(p.node, tuple(p.gpu_indices), p.cpu, p.mem_gib, tuple(p.mig_starts),
                 f"parts[{i}].") for i, p in enumerate(m.parts)]
    return [(m.node, tuple(m.gpu_indices), config.cpu, config.mem_gib, tuple(m.mig_starts), "")]


def assignment_from_message(m: placer_pb2.Placement, config: Configuration, nodes: Sequence[Node],
                            node_index: Mapping[str, int], mig: set[tuple[int, int]],
                            where: str) -> Assignment:
    """The :class:`Assignment` of a booking of ``config`` (checked against the nodes: GPU
    model, GPU indices, MIG mode and slots, as many GPUs as the configuration)."""
    parts = []
    total = 0
    for node_name, gpus, cpu, mem, starts, pre in _parts(m, config):
        w = f"{where}.{pre}"
        n = node_index.get(node_name)
        if n is None:
            raise NotFound(f"{w}node: {node_name!r} is not a node of this request")
        node = nodes[n]
        for k, g in enumerate(gpus):
            if not 0 <= g < node.num_gpus or g in gpus[:k]:
                raise InvalidArgument(f"{w}gpu_indices[{k}]", g,
                                      f"distinct GPU indices of node {node.name} "
                                      f"(0..{node.num_gpus - 1})")
            if ((n, g) in mig) != (config.mig_profile is not None):
                raise InvalidArgument(f"{w}gpu_indices[{k}]", g, "a MIG-mode GPU for a MIG "
                                      "configuration, else a non-MIG GPU")
        if gpus and config.gpu_model != node.gpu_model:
            raise InvalidArgument(f"{w}node", node_name, f"a node of the configuration's GPU "
                                  f"model {config.gpu_model!r} (it has {node.gpu_model!r})")
        if len(starts) != (len(gpus) if config.mig_profile is not None else 0):
            raise InvalidArgument(f"{w}mig_starts", list(starts),
                                  "one start slot per GPU for a MIG configuration, else none")
        _number(f"{w}cpu", cpu)
        _number(f"{w}mem_gib", mem)
        parts.append(Part(node.name, n, gpus, cpu, mem, starts))
        total += len(gpus)
    if total != config.num_gpus:
        raise InvalidArgument(f"{where}.gpu_indices", total,
                              f"{config.num_gpus} GPUs in all (the configuration's num_gpus)")
    share = (m.gpu_share or config.gpu_share) if total else 0.0
    mem = (m.gpu_mem_gib or config.gpu_mem_gib) if total else 0.0
    _number(f"{where}.gpu_share", share, hi=1.0, allowed="a fraction in [0, 1]")
    _mps_share(f"{where}.gpu_share", share, total, config.mig_profile)
    _number(f"{where}.gpu_mem_gib", mem)
    return Assignment(job_id=m.job_id, parts=tuple(parts), gpu_share=share, gpu_mem_gib=mem,
                      mig_profile=config.mig_profile, config_name=config.name,
                      gpu_model=config.gpu_model if total else None)


def book_all(state: ClusterState, bookings: Sequence[placer_pb2.Placement],
             jobs: Mapping[str, ActiveJob], profile, where: str = "bookings",
             jobs_field: str = "jobs") -> None:
    """Books every booking on ``state`` in order (``profile(job, config)`` gives each job's
    interference profile); all or nothing is the caller's (it passes a fresh state).  Every
    job with a current (non-wait) configuration must be booked exactly once."""
    nodes = state.nodes
    node_index = {nd.name: i for i, nd in enumerate(nodes)}
    mig = {(n, g) for n in range(len(nodes)) for g in range(nodes[n].num_gpus)
           if state.is_mig(n, g)} if any(nd.mig_capable for nd in nodes) else set()
    for i, m in enumerate(bookings):
        w = f"{where}[{i}]"
        a = jobs.get(m.job_id)
        if a is None:
            raise NotFound(f"{w}.job_id: {m.job_id!r} is not a job of {jobs_field}")
        if a.config is None or a.config.is_wait:
            raise InvalidArgument(f"{w}.job_id", m.job_id,
                                  f"a job with a current configuration in {jobs_field}")
        asg = assignment_from_message(m, a.config, nodes, node_index, mig, w)
        try:
            state.rebook(asg, profile(a.job, a.config), a.job.slowdown_bound)
        except Infeasible as e:
            raise InvalidArgument(w, m.job_id, f"a booking that fits: {e}") from None
    for jid, a in jobs.items():
        if a.running and jid not in state:
            raise InvalidArgument(f"{jobs_field}[{jid!r}].current", a.config.name,
                                  f"unset, or a booking of {jid!r} in {where}")


# ----------------------------------------------------------------------------- decisions
def decision_to_message(d: Decision, slowdown: float = 1.0) -> placer_pb2.JobDecision:
    return fill_decision(placer_pb2.JobDecision(), d, slowdown)


def fill_decision(m: placer_pb2.JobDecision, d: Decision,
                  slowdown: float = 1.0) -> placer_pb2.JobDecision:
    """:func:`decision_to_message` written into an empty ``m`` in place (e.g.
    ``response.decisions.add()``: a thousand decisions without a copy each); returns ``m``."""
    m.job_id, m.status, m.reason, m.changed = d.job_id, d.status.value, d.reason, d.changed
    if d.assignment is not None and d.config is not None:
        fill_booking(m.placement, d.assignment, d.config, slowdown)
    return m


class DecisionDecoder:
    """:func:`decision_from_message` of each of a response's decisions, remembering the
    previous call's: a JobDecision whose bytes equal one decoded then is that same (frozen)
    :class:`Decision` (equal bytes, equal fields).  Keeps only the last call's."""

    def __init__(self, nodes: Sequence[Node], node_index: Mapping[str, int]) -> None:
        self.nodes, self.node_index = nodes, node_index
        self._last: dict[bytes, Decision] = {}

    def __call__(self, msgs: Sequence[placer_pb2.JobDecision]) -> dict[str, Decision]:
        last, seen_now, out = self._last, {}, {}
        for m in msgs:
            key = m.SerializeToString()
            d = last.get(key)
            if d is None:
                d = decision_from_message(m, self.nodes, self.node_index)
            seen_now[key] = d
            out[m.job_id] = d
        self._last = seen_now
        return out


def decision_from_message(m: placer_pb2.JobDecision, nodes: Sequence[Node],
                          node_index: Mapping[str, int]) -> Decision:
    """A decision as the round returned it (trusted: it comes from the placer)."""
    config = asg = None
    slowdown = 1.0
    if m.HasField("placement"):
        p = m.placement
        config = config_from_message(p.configuration, "placement.configuration")
        parts = tuple(Part(node, node_index[node], gpus, cpu, mem, starts)
                      for node, gpus, cpu, mem, starts, _ in _parts(p, config))
        any_gpu = any(pt.gpu_indices for pt in parts)
        asg = Assignment(job_id=m.job_id, parts=parts,
                         gpu_share=p.gpu_share if any_gpu else 0.0,
                         gpu_mem_gib=p.gpu_mem_gib if any_gpu else 0.0,
                         mig_profile=config.mig_profile, config_name=config.name,
                         gpu_model=config.gpu_model if any_gpu else None)
        slowdown = p.predicted_slowdown
    return Decision(m.job_id, _STATUS[m.status], config, asg, slowdown=slowdown,
                    reason=m.reason, changed=m.changed)
