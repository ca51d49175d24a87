"""Offline LLM inference jobs for the simulator, from a jobs file (``elastico simulate
--llm-jobs FILE|demo``), replayed beside the trace's jobs.

Who calls it: ``elastico simulate`` and tests.  Whom it calls: :mod:`elastico.llm_job` (each
entry becomes :func:`elastico.llm_job.llm_job`), :mod:`elastico.perf.llm` (the model
catalogue, ``from_hf_config``).  Reads the file once; pure otherwise.

The file is JSON (docs/model.md, "LLM inference jobs in the simulator"): ``{"jobs": [JOB,
...]}``, each JOB an object with

======================  ==============================================================  =========
key                     value                                                           default
======================  ==============================================================  =========
``id``                  unique job id (text)                                            required
``model``               a catalogue model (:data:`elastico.perf.llm.LLM_MODELS`) or     one of
                        its Hugging Face id, any case                                   the two
``model_config``        instead: the model's Hugging Face ``config.json`` fields
``requests``            the work as request classes ``"INPUT:OUTPUTxCOUNT,..."``        one of
``tokens``              instead: a token budget (prompt + generated), with ``lengths``  the two
``lengths``             ``azure-conv``, ``azure-code`` or ``"INPUT:OUTPUT[xWEIGHT],..."``  azure-conv
``arrival_s``           seconds after the workload's first arrival                      0
``gpu_models``          allowed GPU models (list)                                       any
``reference_gpu``       the GPU whose requested-shape speed is throughput 1.0           required
``tp``, ``replicas``    the requested shape: TP degree, replicas                        1, 1
``gpu_fraction``        MPS share of a one-GPU request                                  1
``dtype``, ``kv_dtype``  weight / KV precision (:data:`elastico.perf.llm.DTYPES`)        fp16
``engine``              ``vllm``, ``tensorrt-llm``, ``vllm-eager``                      vllm
``cpu``, ``mem_gib``    host cores and GiB of the requested shape                       8, 64
``priority``            utility weight, (0, 1e6]                                        1
======================  ==============================================================  =========

Unknown keys, wrong types and out-of-range values are refused with the entry's path
(``jobs[2].tp``), the value and what is allowed.  ``demo`` is the bundled
``data/llm-jobs/demo.json``: five jobs (Llama-3-8B, Mistral-7B at half a GPU, Mixtral-8x7B,
Llama-2-70B at TP 4, Llama-3-70B in fp8) for an A100/H100 cluster such as ``--cluster
a100h100-mig``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from elastico.errors import InvalidArgument
from elastico.model import MAX_PRIORITY, Job

__all__ = ["load_llm_jobs", "llm_jobs_from", "arrivals_in_window", "DEMO", "KEYS"]

#: ``--llm-jobs demo``: the bundled demo file (data/llm-jobs/demo.json).
DEMO = "demo"
KEYS = ("id", "model", "model_config", "requests", "tokens", "lengths", "arrival_s",
        "gpu_models", "reference_gpu", "tp", "replicas", "gpu_fraction", "dtype", "kv_dtype",
        "engine", "cpu", "mem_gib", "priority")
#: the keys of a training entry (``"kind": "training"``)
TRAINING_KEYS = ("id", "kind", "model", "model_config", "tokens", "seq_len", "global_batch",
                 "global_batch_tokens", "mode", "precision", "zero", "recompute", "gpus",
                 "arrival_s", "gpu_models", "reference_gpu", "cpu", "mem_gib", "priority")
#: ``--llm-jobs train-demo``: the bundled training demo (data/llm-jobs/train-demo.json)
TRAIN_DEMO = "train-demo"
#: the bundled jobs files by name
BUNDLED = {DEMO: "demo.json", TRAIN_DEMO: "train-demo.json"}
_MAX_JOBS = 10_000


def _path(source: str | Path) -> Path:
    if str(source) in BUNDLED:
        from elastico.paths import data_file

        return data_file("llm-jobs", BUNDLED[str(source)])
    return Path(source)


def load_llm_jobs(source: str | Path, *, offset_s: float = 0.0) -> list[Job]:
    """The jobs of a jobs file (module docstring; ``demo`` for the bundled one), each arriving
    ``offset_s`` + its ``arrival_s``.  InvalidArgument naming the file and the entry's field."""
    p = _path(source)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise InvalidArgument("llm_jobs", str(p), f"a readable JSON file ({e.strerror})") from None
    except ValueError as e:
        raise InvalidArgument("llm_jobs", str(p), f"a JSON file ({e})") from None
    try:
        return llm_jobs_from(doc, offset_s=offset_s)
    except InvalidArgument as e:
        raise InvalidArgument(f"{p}: {e.field}", e.value, e.allowed) from None


def _num(where: str, v: Any, lo: float, hi: float, *, integer: bool = False,
         lo_open: bool = False) -> float:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and v <= hi and (not integer or v == int(v))
    if not ok:
        kind = "an integer" if integer else "a number"
        raise InvalidArgument(where, v, f"{kind} in {'(' if lo_open else '['}{lo:g}, {hi:g}]")
    return int(v) if integer else float(v)


def _text(where: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise InvalidArgument(where, v, "a non-empty string")
    return v


#: the numpy seed stream of :func:`arrivals_in_window`, beside the workload's own seed: the
#: trace jobs' draws (``numpy.random.default_rng(seed)``) are not shifted by the LLM jobs
_ARRIVAL_STREAM = 21


def arrivals_in_window(jobs: Sequence[Job], lo: float, hi: float, seed: int) -> list[Job]:
    """``jobs`` (copies) arriving over the measurement window ``[lo, hi)`` (seconds, the
    simulation clock): ``len(jobs)`` times drawn i.i.d. uniform on ``[lo, hi)``
    (``numpy.random.default_rng((seed, 21))``), sorted, and given to the jobs in the order of
    their own ``arrival_s`` (ties: file order).

    Why uniform: given that ``n`` arrivals of a homogeneous Poisson process fall in a window,
    their times are distributed as the order statistics of ``n`` i.i.d. uniforms on it (Ross,
    *Introduction to Probability Models*, 10th ed., Theorem 5.2) -- the same process as the
    continuous workload's trace pods (:func:`elastico.sim.workload.build_continuous_workload`,
    Poisson over the run), with ``n`` fixed to the file's jobs so every seed replays all of
    them.  Offline batch jobs are submitted as whole jobs, so the request-level arrivals of
    the Azure LLM inference trace 2023 (an online service's requests) are not their process.

    InvalidArgument for a window that is not finite with ``hi > lo``."""
    import numpy as np
    from dataclasses import replace

    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise InvalidArgument("window", (lo, hi), "finite seconds (lo, hi) with hi > lo")
    rng = np.random.default_rng((int(seed), _ARRIVAL_STREAM))
    times = np.sort(rng.uniform(lo, hi, size=len(jobs)))
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival_s, i))
    out = list(jobs)
    for k, i in enumerate(order):
        out[i] = replace(jobs[i], arrival_s=float(times[k]))
    return out


def llm_jobs_from(doc: Any, *, offset_s: float = 0.0) -> list[Job]:
    """The jobs of a parsed jobs file (module docstring)."""
    from elastico import llm_job as LJ
    from elastico.perf import llm as P

    if not isinstance(doc, dict) or set(doc) != {"jobs"} or not isinstance(doc["jobs"], list):
        raise InvalidArgument("jobs file", type(doc).__name__ if not isinstance(doc, dict)
                              else sorted(doc), 'an object {"jobs": [...]}')
    entries = doc["jobs"]
    if not 1 <= len(entries) <= _MAX_JOBS:
        raise InvalidArgument("jobs", len(entries), f"1..{_MAX_JOBS} jobs")
    out: list[Job] = []
    seen: set[str] = set()
    for k, e in enumerate(entries):
        w = f"jobs[{k}]"
        if not isinstance(e, dict):
            raise InvalidArgument(w, type(e).__name__, "an object")
        kind = e.get("kind", "inference")
        if kind not in ("inference", "training"):
            raise InvalidArgument(f"{w}.kind", kind, "'inference' (default) or 'training'")
        keys = TRAINING_KEYS if kind == "training" else KEYS + ("kind",)
        stray = sorted(set(e) - set(keys))
        if stray:
            raise InvalidArgument(f"{w}.{stray[0]}", e[stray[0]],
                                  f"a key of a {kind} job: " + ", ".join(keys))
        jid = _text(f"{w}.id", e.get("id"))
        if jid in seen:
            raise InvalidArgument(f"{w}.id", jid, "a job id not used by an earlier job")
        seen.add(jid)
        model = _model(w, e, jid)
        if kind == "training":
            out.append(_training_job(w, e, jid, model, offset_s))
            continue
        if ("requests" in e) == ("tokens" in e):
            raise InvalidArgument(f"{w}.requests", e.get("requests"),
                                  "exactly one of requests (INPUT:OUTPUTxCOUNT classes) and tokens")
        try:
            if "requests" in e:
                if "lengths" in e:
                    raise InvalidArgument(f"{w}.lengths", e["lengths"], "only with tokens")
                work = LJ.requests_work((i, o, int(n)) for i, o, n in LJ.parse_classes(
                    e["requests"], f"{w}.requests", counts=True))
            else:
                tokens = _num(f"{w}.tokens", e["tokens"], 1, LJ.MAX_TOKENS)
                lengths = e.get("lengths", "azure-conv")
                work = LJ.budget_work(tokens, LJ.length_distribution(lengths, f"{w}.lengths"),
                                      field=f"{w}.tokens")
        except InvalidArgument as err:
            if err.field.startswith(w):
                raise
            raise InvalidArgument(f"{w}.{err.field}", err.value, err.allowed) from None
        models = e.get("gpu_models", [])
        if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
            raise InvalidArgument(f"{w}.gpu_models", models, "a list of GPU model names")
        ref = _text(f"{w}.reference_gpu", e.get("reference_gpu"))
        arrival = _num(f"{w}.arrival_s", e.get("arrival_s", 0.0), 0, 1e9)
        for key in ("dtype", "kv_dtype", "engine"):
            if key in e:
                _text(f"{w}.{key}", e[key])
        try:
            job = LJ.llm_job(
                jid, model, work, reference_gpu=ref, gpu_models=models,
                tp=_num(f"{w}.tp", e.get("tp", 1), 1, 64, integer=True),
                replicas=_num(f"{w}.replicas", e.get("replicas", 1), 1, 64, integer=True),
                gpu_share=_num(f"{w}.gpu_fraction", e.get("gpu_fraction", 1.0), 0, 1, lo_open=True),
                dtype=e.get("dtype", "fp16"), kv_dtype=e.get("kv_dtype"),
                engine=e.get("engine", "vllm"), arrival_s=offset_s + arrival,
                cpu=_num(f"{w}.cpu", e.get("cpu", 8.0), 0, 1e4),
                mem_gib=_num(f"{w}.mem_gib", e.get("mem_gib", 64.0), 0, 1e6),
                priority=_num(f"{w}.priority", e.get("priority", 1.0), 0, MAX_PRIORITY,
                              lo_open=True))
        except InvalidArgument as err:
            if err.field.startswith(w):
                raise
            raise InvalidArgument(f"{w}.{err.field}", err.value, err.allowed) from None
        except ValueError as err:  # Request's own checks (share with several GPUs, ...)
            raise InvalidArgument(w, jid, str(err)) from None
        out.append(job)
    return out


def _model(w: str, e: dict, jid: str):
    """The entry's model: ``model`` (a catalogue name) or ``model_config`` (HF fields)."""
    from elastico.perf import llm as P

    if ("model" in e) == ("model_config" in e):
        raise InvalidArgument(f"{w}.model", e.get("model"), "exactly one of model (a catalogue "
                              "name: " + ", ".join(P.LLM_MODELS) + ") and model_config")
    try:
        if "model" in e:
            return P.find_llm_model(_text(f"{w}.model", e["model"]))
        cfg = e["model_config"]
        return P.from_hf_config(cfg, name=str(cfg.get("_name_or_path") or jid)
                                if isinstance(cfg, dict) else jid)
    except InvalidArgument as err:
        key = "model" if "model" in e else "model_config"
        raise InvalidArgument(f"{w}.{key}" + ("" if err.field == "model" else f".{err.field}"),
                              err.value, err.allowed) from None


def _training_job(w: str, e: dict, jid: str, model, offset_s: float) -> Job:
    """A ``"kind": "training"`` entry (docs/model.md 9.): ``tokens`` to train on (required),
    ``seq_len`` (required), the global batch as ``global_batch`` sequences or
    ``global_batch_tokens`` (a multiple of ``seq_len``), ``mode`` (``finetune`` default or
    ``pretrain``), ``precision`` (``bf16``), ``zero`` (0-3; default the smallest that fits),
    ``recompute`` (``selective`` default), ``gpus`` (1..8, default 8) and the common keys."""
    from elastico import llm_train_job as LTJ
    from elastico.llm_job import MAX_TOKENS
    from elastico.perf.llm_training import LlmTrainingJob

    if "tokens" not in e:
        raise InvalidArgument(f"{w}.tokens", None, "the tokens to train on (required)")
    tokens = _num(f"{w}.tokens", e["tokens"], 1, MAX_TOKENS)
    if "seq_len" not in e:
        raise InvalidArgument(f"{w}.seq_len", None, "the tokens per sequence (required)")
    seq = _num(f"{w}.seq_len", e["seq_len"], 1, 2**20, integer=True)
    if ("global_batch" in e) == ("global_batch_tokens" in e):
        raise InvalidArgument(f"{w}.global_batch", e.get("global_batch"),
                              "exactly one of global_batch (sequences) and global_batch_tokens")
    if "global_batch" in e:
        batch = _num(f"{w}.global_batch", e["global_batch"], 1, 2**24, integer=True)
    else:
        bt = _num(f"{w}.global_batch_tokens", e["global_batch_tokens"], 1, 2**34, integer=True)
        if bt % seq:
            raise InvalidArgument(f"{w}.global_batch_tokens", bt,
                                  f"a multiple of seq_len={seq} (whole sequences)")
        batch = bt // seq
    mode = e.get("mode", "finetune")
    if mode not in ("finetune", "pretrain"):
        raise InvalidArgument(f"{w}.mode", mode, "'finetune' (full-parameter) or 'pretrain' "
                              "(LoRA and other parameter-efficient fine-tuning are not modelled)")
    zero = e.get("zero")
    if zero is not None:
        zero = _num(f"{w}.zero", zero, 0, 3, integer=True)
    models = e.get("gpu_models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        raise InvalidArgument(f"{w}.gpu_models", models, "a list of GPU model names")
    ref = _text(f"{w}.reference_gpu", e.get("reference_gpu"))
    try:
        train = LlmTrainingJob(jid, model, seq, batch, tokens, mode,
                               e.get("precision", "bf16"))
        return LTJ.llm_train_job(
            jid, train, reference_gpu=ref, gpu_models=models, zero=zero,
            gpus=_num(f"{w}.gpus", e.get("gpus", 8), 1, LTJ.MAX_GPUS, integer=True),
            recompute=e.get("recompute", "selective"),
            arrival_s=offset_s + _num(f"{w}.arrival_s", e.get("arrival_s", 0.0), 0, 1e9),
            cpu=_num(f"{w}.cpu", e.get("cpu", 8.0), 0, 1e4),
            mem_gib=_num(f"{w}.mem_gib", e.get("mem_gib", 64.0), 0, 1e6),
            priority=_num(f"{w}.priority", e.get("priority", 1.0), 0, MAX_PRIORITY,
                          lo_open=True))
    except InvalidArgument as err:
        if err.field.startswith(w):
            raise
        field = err.field[4:] if err.field.startswith("job.") else err.field
        raise InvalidArgument(f"{w}.{field}", err.value, err.allowed) from None


def describe(jobs: Sequence[Job]) -> str:
    """``"5 LLM jobs (Llama-3-8B, ...), 1.2e+09 tokens"`` (training jobs: ``3 of them
    training``)."""
    def name(j: Job) -> str:
        return j.llm.model.name if j.llm is not None else j.llm_train.job.model.name

    def tokens(j: Job) -> float:
        return j.llm.work.total_tokens if j.llm is not None else j.llm_train.tokens

    names = ", ".join(dict.fromkeys(name(j) for j in jobs))
    total = sum(tokens(j) for j in jobs)
    train = sum(1 for j in jobs if j.llm_train is not None)
    of = f", {train} of them training" if train else ""
    return (f"{len(jobs)} LLM job{'s' if len(jobs) != 1 else ''} ({names}{of}), "
            f"{total:.3g} tokens")
