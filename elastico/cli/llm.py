"""``elastico llm plan|predict``: what the LLM inference model says about one job.

* ``elastico llm predict (--model NAME | --model-config config.json) --gpu G --tp N --batch B
  --input-tokens I --output-tokens O [--engine E] [--dtype D] [--json]``: one batch of ``B``
  sequences on one replica of ``N`` GPUs (:mod:`elastico.perf.llm`): ``latency_s`` for the
  whole batch (prefill and every decode step; in waves when its KV cache does not hold it at
  once), ``tokens_per_s`` = ``B x (I + O) / latency_s`` (prompt + generated tokens, as
  LLM-Inference-Bench counts them), ``fits`` and ``memory_gib`` (per GPU: weights, workspace
  and the KV cache of the sequences in flight).
* ``elastico llm plan --model M (--tokens N [--lengths L] | --requests I:OxN,...) [--gpu G
  ...]``: the job's shape family as the ``elastico`` policy would consider it
  (:mod:`elastico.llm_shapes`, :func:`elastico.shapes.build_family`) on a cluster of those GPU
  models: every configuration with one replica and whether it fits (and why not), then the
  family's configurations (replicas included) with their tokens/s, memory and start-up.  A
  configuration that does not fit is listed as such and never offered.

Exit status: 0 ok, 2 bad input (the message names the flag, the value and what is allowed).
Whom it calls: :mod:`elastico.perf.llm`, :mod:`elastico.llm_job`, :mod:`elastico.llm_shapes`,
:mod:`elastico.shapes`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from elastico.errors import InvalidArgument

__all__ = ["register", "predict", "plan", "DEFAULT_PLAN_GPUS", "NODE_GPUS"]

#: ``llm plan`` without ``--gpu``: the datacenter GPUs of the clusters bundled in data/clusters.
DEFAULT_PLAN_GPUS = ("A100-40GB", "A100-80GB", "H100-80GB")
#: GPUs per node ``llm plan`` assumes (an HGX/DGX board: 8 GPUs, the largest TP group offered).
NODE_GPUS = 8


def register(sub: argparse._SubParsersAction) -> None:
    from elastico.perf import llm as P

    p = sub.add_parser("llm", help="the offline LLM inference model: plan a job, predict a batch",
                       description="What ElastiCo's LLM inference model (docs/model.md, "
                                   "\"LLM inference\") says about a model on GPUs.")
    s = p.add_subparsers(dest="llm_command", required=True, metavar="COMMAND")

    pr = s.add_parser("predict", help="latency, tokens/s and memory of one batch",
                      description="One batch of --batch sequences of --input-tokens prompt and "
                                  "--output-tokens generated tokens on one replica of --tp GPUs.")
    _model_flags(pr)
    pr.add_argument("--gpu", required=True, metavar="G",
                    help="GPU model of the catalogue (elastico.hardware), e.g. A100-80GB, H100-SXM "
                         "(any case: a100-80gb is A100-80GB)")
    pr.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel degree: 1, 2, 4 or 8, a replica's GPUs "
                                                                 "within one node (default: 1)")
    pr.add_argument("--batch", type=int, required=True, metavar="B", help="sequences in the batch")
    pr.add_argument("--input-tokens", type=int, required=True, metavar="I", help="prompt tokens per sequence")
    pr.add_argument("--output-tokens", type=int, required=True, metavar="O",
                    help="generated tokens per sequence")
    _engine_flags(pr, P)
    pr.add_argument("--mps-share", type=float, default=None, metavar="S",
                    help="MPS active-thread share of each GPU, in (0, 1] (default: the whole "
                         "GPU); its memory limit defaults to the share's part of the GPU's "
                         "memory, as the placer books it")
    pr.add_argument("--mig-profile", default=None, metavar="P",
                    help="a MIG instance instead of the whole GPU, e.g. 3g.40gb (tp 1)")
    pr.add_argument("--memory-limit-gib", type=float, default=None, metavar="GIB",
                    help="GPU memory the job may use per GPU (an MPS pinned limit; default: "
                         "all, or the --mps-share's part)")
    pr.add_argument("--json", action="store_true", help="one JSON object instead of text")
    pr.set_defaults(func=_cmd_predict)

    pl = s.add_parser("plan", help="a job's shape family: configurations, tokens/s, memory, fit",
                      description="The configurations ElastiCo considers for an offline LLM "
                                  "job on GPUs of the given models (8 per node): GPU model x "
                                  "tensor parallel x replicas x MPS share or MIG profile, kept "
                                  "only where weights and KV cache fit.")
    _model_flags(pl)
    # the job's work: one of the two (argparse names what is missing or clashes)
    work = pl.add_mutually_exclusive_group(required=True)
    work.add_argument("--tokens", type=float, default=None, metavar="N",
                      help="the job's work as a token budget (prompt + generated), with --lengths")
    pl.add_argument("--lengths", default=None, metavar="L",
                    help="length distribution of a --tokens budget: azure-conv, azure-code, or "
                         "INPUT:OUTPUT[xWEIGHT],... (default: azure-conv)")
    work.add_argument("--requests", default=None, metavar="I:OxN,...",
                      help="the job's work as request classes INPUT:OUTPUTxCOUNT, e.g. "
                           "512:128x1000,2048:256x10 (instead of --tokens)")
    pl.add_argument("--gpu", action="append", metavar="G",
                    help="a GPU model of the cluster; repeat for several (default: "
                         + ", ".join(DEFAULT_PLAN_GPUS) + ")")
    pl.add_argument("--mig", action="store_true",
                    help="also MIG instances on the GPU models that have MIG profiles")
    pl.add_argument("--tp", type=int, default=None, metavar="N",
                    help="the requested tensor-parallel degree (default: the smallest of 1, 2, 4, "
                         "8 at which the model fits the first --gpu where it fits at all)")
    pl.add_argument("--replicas", type=int, default=1, metavar="R",
                    help="the requested replicas (default: 1); the family may run fewer or up to "
                         "twice the requested GPUs")
    _engine_flags(pl, P)
    pl.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    pl.set_defaults(func=_cmd_plan)


def _model_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", metavar="NAME",
                   help="a model of the catalogue (e.g. Llama-3-8B, Llama-2-70B, Mixtral-8x7B) "
                        "or its Hugging Face id; any case, e.g. llama-2-7b")
    g.add_argument("--model-config", type=Path, metavar="config.json",
                   help="a Hugging Face config.json of any other model")


def _engine_flags(p: argparse.ArgumentParser, P) -> None:
    p.add_argument("--engine", choices=list(P.ENGINES), default="vllm",
                   help="inference engine (default: %(default)s)")
    p.add_argument("--dtype", choices=list(P.DTYPES), default="fp16",
                   help="weight precision (default: %(default)s)")
    p.add_argument("--kv-dtype", choices=list(P.KV_DTYPES), default=None,
                   help="KV cache precision (default: fp8 with --dtype fp8, else 16-bit)")


def _model(args: argparse.Namespace):
    from elastico.perf import llm as P

    if args.model is not None:
        try:
            return P.find_llm_model(args.model)
        except InvalidArgument as e:
            raise InvalidArgument("--model", args.model, e.allowed) from None
    path = args.model_config
    from elastico.paths import check_input_file

    check_input_file("--model-config", path, "JSON file")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InvalidArgument("--model-config", str(path), f"a readable JSON file ({e})") from None
    try:
        return P.from_hf_config(cfg, name=str(cfg.get("_name_or_path") or path.stem)
                                if isinstance(cfg, dict) else path.stem)
    except InvalidArgument as e:
        raise InvalidArgument(f"--model-config {path}: {e.field}", e.value, e.allowed) from None


_FLAGS = {"gpu": "--gpu", "tp": "--tp", "batch": "--batch", "input_tokens": "--input-tokens",
          "output_tokens": "--output-tokens", "mps_share": "--mps-share",
          "mig_profile": "--mig-profile", "memory_limit_gib": "--memory-limit-gib",
          "engine": "--engine", "dtype": "--dtype", "kv_dtype": "--kv-dtype", "replicas": "--replicas"}


#: the model's API wording of "leave it out" (None), as a flag user reads it
_NONE_WORDING = ((", or None (the whole GPU)", " (leave --mps-share out for the whole GPU)"),
                 ("None when mig_profile is set", "left out with --mig-profile"),
                 (", or None (the engine's limit)", " (leave it out for the engine's limit)"),
                 ("a finite number of GiB > 0, or None", "a finite number of GiB > 0 (leave "
                                                         "--memory-limit-gib out for all of it)"))


def _as_flag(e: InvalidArgument) -> InvalidArgument:
    """A model error on a field the user gave as a flag, named by the flag (and without the
    API's None)."""
    allowed = e.allowed
    for api, cli in _NONE_WORDING:
        allowed = allowed.replace(api, cli)
    if allowed.startswith("None: ") and e.field == "mig_profile":  # "None: T4 has no MIG"
        allowed = "leave --mig-profile out: " + allowed[len("None: "):]
    return InvalidArgument(_FLAGS.get(e.field, e.field), e.value, allowed)


def predict(model, gpu: str, tp: int, batch: int, input_tokens: int, output_tokens: int, *,
            engine: str = "vllm", dtype: str = "fp16", kv_dtype: str | None = None,
            mps_share: float | None = None, mig_profile: str | None = None,
            memory_limit_gib: float | None = None) -> dict[str, Any]:
    """The ``llm predict`` result (module docstring) as a dict.  An MPS share without
    ``memory_limit_gib`` gets the share's part of the GPU's memory (floored to a MiB), the
    pinned limit the placer books for it (as ``llm plan``'s share rows)."""
    from elastico import hardware, llm_shapes
    from elastico.perf import llm as P

    try:
        gpu_mem: float | None = float(hardware.gpu_spec(gpu).memory_gib)
    except InvalidArgument:
        gpu_mem = None  # an unknown GPU: LlmConfig below names it
    if gpu_mem is not None and isinstance(memory_limit_gib, (int, float)):
        # above the memory there is it would be shown but not applied: refused
        from elastico.mig import MIG_PROFILES

        cap, where = gpu_mem, f"{gpu}'s {gpu_mem:g} GiB"
        prof = MIG_PROFILES.get(gpu, {}).get(mig_profile or "")
        if prof is not None:
            cap *= prof.memory_fraction
            where = f"the {cap:g} GiB of a {mig_profile} instance of {gpu}"
        if memory_limit_gib > cap + 1e-9:
            raise InvalidArgument("memory_limit_gib", memory_limit_gib, f"at most {where}")
    if gpu_mem is not None and mps_share is not None and mig_profile is None \
            and memory_limit_gib is None and isinstance(mps_share, (int, float)) \
            and 0 < mps_share < 1:
        memory_limit_gib = llm_shapes._mib_floor(mps_share * gpu_mem)
    cfg = P.LlmConfig(gpu=gpu, tp=tp, mps_share=mps_share, mig_profile=mig_profile, dtype=dtype,
                      kv_dtype=kv_dtype, engine=engine, memory_limit_gib=memory_limit_gib)
    mem = P.memory(model, cfg)
    lat = P.batch_latency_s(model, cfg, batch, input_tokens, output_tokens)
    mb = P.max_batch(model, cfg, input_tokens, output_tokens)
    fits = bool(mem.fits and mb >= 1)
    in_flight = min(batch, mb)
    kv = mem.kv_per_token_gib * in_flight * (input_tokens + output_tokens)
    return {
        "model": model.name, "gpu": gpu, "tp": tp, "batch": batch,
        "input_tokens": input_tokens, "output_tokens": output_tokens, "engine": engine,
        "dtype": dtype, "mps_share": mps_share, "mig_profile": mig_profile,
        "memory_limit_gib": memory_limit_gib,
        "latency_s": lat if math.isfinite(lat) else None,
        "tokens_per_s": batch * (input_tokens + output_tokens) / lat if fits and lat > 0 else None,
        "fits": fits,
        "memory_gib": mem.weights_gib + mem.workspace_gib + kv if fits else None,
        "weights_gib": mem.weights_gib, "workspace_gib": mem.workspace_gib,
        "kv_cache_gib": kv if fits else None,  # null: no batch runs
        "kv_capacity_tokens": mem.kv_tokens, "max_batch": mb,
        "waves": math.ceil(batch / mb) if mb else None,
        "reason": "" if fits else (mem.reason or "no sequence of this length fits the KV cache"),
    }


def _check_tp(tp: int | None) -> None:
    """A replica's tensor-parallel degree: within one node (elastico.llm_shapes.TP_DEGREES; the
    model has no inter-node link figures), or None."""
    from elastico.llm_shapes import TP_DEGREES

    if tp is not None and tp not in TP_DEGREES:
        raise InvalidArgument("--tp", tp, "one of " + ", ".join(map(str, TP_DEGREES))
                              + " (a replica's GPUs within one node)")


def _cmd_predict(args: argparse.Namespace) -> int:
    from elastico.hardware import find_gpu_name

    _check_tp(args.tp)
    model = _model(args)
    args.gpu = find_gpu_name(args.gpu)
    if args.mig_profile is not None:  # any case, as GPU and model names: 3G.40GB is 3g.40gb
        from elastico.mig import MIG_PROFILES

        same = [n for n in MIG_PROFILES.get(args.gpu, {})
                if n.casefold() == args.mig_profile.strip().casefold()]
        if len(same) == 1:
            args.mig_profile = same[0]
    try:
        out = predict(model, args.gpu, args.tp, args.batch, args.input_tokens, args.output_tokens,
                      engine=args.engine, dtype=args.dtype, kv_dtype=args.kv_dtype,
                      mps_share=args.mps_share, mig_profile=args.mig_profile,
                      memory_limit_gib=args.memory_limit_gib)
    except InvalidArgument as e:
        raise _as_flag(e) from None
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    share = (f", MIG {out['mig_profile']}" if out["mig_profile"]
             else f", MPS {out['mps_share']:g}" if out["mps_share"] else "")
    print(f"{model.name} on {args.gpu} x{args.tp}{share} ({args.engine}, {args.dtype}): batch "
          f"{args.batch} x ({args.input_tokens} + {args.output_tokens}) tokens")
    if not out["fits"]:
        print(f"does not fit: {out['reason']}")
        return 0
    print(f"latency {out['latency_s']:.3f} s for the whole batch"
          + (f" ({out['waves']} waves of at most {out['max_batch']})" if out["waves"] > 1 else "")
          + f"; {out['tokens_per_s']:,.0f} tokens/s (prompt + generated)")
    print(f"memory per GPU {out['memory_gib']:.2f} GiB: weights {out['weights_gib']:.2f}, "
          f"workspace {out['workspace_gib']:.2f}, KV cache {out['kv_cache_gib']:.2f} for this "
          f"batch (the engine's cache holds up to {out['kv_capacity_tokens']:,} tokens; largest "
          f"batch of these lengths {out['max_batch']})"
          + (f"; memory limit {out['memory_limit_gib']:g} GiB per GPU"
             if out["memory_limit_gib"] is not None else ""))
    return 0


def _hours(h: float) -> str:
    """A job's wall-clock hours for the plan table: thousands grouped, and small jobs in
    significant digits (0.00 would hide which configuration is faster)."""
    return f"{h:,.2f}" if h >= 1 else f"{h:.2g}"


def _plan_work(args: argparse.Namespace):
    from elastico import llm_job as LJ

    if args.requests is not None:
        if args.lengths is not None:
            raise InvalidArgument("--lengths", args.lengths, "only with --tokens")
        try:
            return LJ.requests_work((i, o, int(n)) for i, o, n in
                                    LJ.parse_classes(args.requests, "--requests", counts=True))
        except InvalidArgument as e:
            if e.field.startswith("--"):
                raise
            raise InvalidArgument("--requests", args.requests, f"{e.field}: {e.value:,} is "
                                  f"not allowed ({e.allowed})") from None
    try:
        return LJ.budget_work(args.tokens, LJ.length_distribution(args.lengths or "azure-conv",
                                                                  "--lengths"), field="--tokens")
    except InvalidArgument as e:
        if e.field.startswith("--"):
            raise
        if e.field == "work.tokens":  # whole requests round the budget up past the limit
            raise InvalidArgument("--tokens", args.tokens, f"{e.allowed} once the budget is "
                                  f"cut into whole requests ({e.value:,.0f} tokens)") from None
        raise InvalidArgument("--lengths", args.lengths or "azure-conv",
                              f"{e.field}: {e.allowed}") from None


def plan(model, work, gpus: list[str], *, tp: int | None = None, replicas: int = 1,
         engine: str = "vllm", dtype: str = "fp16", kv_dtype: str | None = None,
         mig: bool = False) -> dict[str, Any]:
    """The ``llm plan`` result (module docstring) as a dict: ``job`` (what was planned),
    ``configurations`` (one replica each, every GPU model x TP degree x share / MIG profile,
    with ``fits`` and ``reason``) and ``family`` (what the ``elastico`` policy is offered)."""
    from elastico import hardware, llm_shapes
    from elastico.llm_job import llm_job, mix_tokens_per_s
    from elastico.mig import MIG_PROFILES
    from elastico.perf import llm as P
    from elastico.perf.throughput import ThroughputModel
    from elastico.shapes import SHARES, build_family

    if not gpus:
        raise InvalidArgument("--gpu", gpus, "at least one GPU model")
    if len(set(gpus)) != len(gpus):
        raise InvalidArgument("--gpu", ",".join(gpus), "each GPU model once")
    mem = {}
    for g in gpus:
        try:
            mem[g] = float(hardware.gpu_spec(g).memory_gib)
        except InvalidArgument as e:
            raise InvalidArgument("--gpu", g, e.allowed) from None
        if not llm_shapes.llm_gpu_known(g):
            raise InvalidArgument("--gpu", g, "a GPU model with the figures the LLM model needs "
                                  "(memory, HBM bandwidth, 16-bit peak) in the catalogue")
    spec0 = dict(engine=engine, dtype=dtype, kv_dtype=kv_dtype)
    rows = []
    for g in gpus:
        table = MIG_PROFILES.get(g) if mig else None
        variants: list[tuple[int, float, str | None, float]] = []
        for t in llm_shapes.TP_DEGREES:
            for s in SHARES:
                variants.append((t, s, None, llm_shapes._mib_floor(s * mem[g]) if s < 1 else mem[g]))
        for name, prof in (table or {}).items():
            variants.append((1, prof.share, name, mem[g] * prof.memory_fraction))
        for t, s, prof, m in variants:
            cfg = P.LlmConfig(gpu=g, tp=t, mps_share=s if (s < 1 and prof is None) else None,
                              mig_profile=prof, memory_limit_gib=m, **spec0)
            row = {"gpu": g, "tp": t, "replicas": 1, "share": s, "mig_profile": prof,
                   "memory_gib_per_gpu": m}
            try:
                mm = P.memory(model, cfg)
            except InvalidArgument as e:
                rows.append({**row, "fits": False, "reason": f"{e.field}: {e.allowed}",
                             "tokens_per_s": None})
                continue
            tps = mix_tokens_per_s(model, cfg, work) if mm.fits else 0.0
            reason = mm.reason or ("" if tps > 0 else "a request class's sequence does not fit "
                                   "the KV cache")
            rows.append({**row, "fits": tps > 0, "reason": reason,
                         "tokens_per_s": tps if tps > 0 else None,  # null: does not fit
                         "weights_gib": mm.weights_gib, "kv_tokens": mm.kv_tokens})
    # the requested shape: the given tp, else the smallest that fits somewhere
    fitting = [r for r in rows if r["fits"] and r["share"] == 1.0 and r["mig_profile"] is None]
    if tp is None:
        if not fitting:
            raise InvalidArgument("--model", model.name, "a model that fits one of the GPUs "
                                  f"{', '.join(gpus)} whole at tensor parallel "
                                  f"{', '.join(map(str, llm_shapes.TP_DEGREES))}: "
                                  + "; ".join(sorted({r['reason'] for r in rows if r['reason']})))
        tp = min(r["tp"] for r in fitting)
    ref = next((r["gpu"] for r in fitting if r["tp"] == tp), None)
    if ref is None:
        raise InvalidArgument("--tp", tp, "a degree at which the model fits a whole GPU of one "
                              "of " + ", ".join(gpus))
    try:
        job = llm_job("plan", model, work, reference_gpu=ref, reference_memory_gib=mem[ref], tp=tp,
                      replicas=replicas, **spec0)
    except InvalidArgument as e:
        raise _as_flag(e) from None
    models = {g: (NODE_GPUS, mem[g]) for g in gpus}
    fam = build_family(job, models, ThroughputModel.bundled(), max_configs=32,
                       mig_models=[g for g in gpus if mig and g in MIG_PROFILES])
    ref_tps = job.llm.reference_tokens_per_s
    family = []
    for c in fam.configs[1:]:
        family.append({
            "name": c.name, "gpu": c.gpu_model, "gpus": c.num_gpus, "tp": c.replica_gpus,
            "replicas": c.replicas, "share": c.gpu_share, "mig_profile": c.mig_profile,
            "tokens_per_s": c.throughput * ref_tps, "throughput": c.throughput,
            "memory_gib_per_gpu": c.gpu_mem_gib,
            "hours": work.total_tokens / (c.throughput * ref_tps) / 3600.0,
            "startup_s": llm_shapes.startup_s(job, c)})
    return {"job": {"model": model.name, "params_b": model.params_b, "tokens": work.total_tokens,
                    "requests": work.total_requests, "classes": len(work.classes),
                    "engine": engine, "dtype": dtype, "tp": tp, "replicas": replicas,
                    "reference_gpu": ref, "reference_tokens_per_s": ref_tps},
            "configurations": rows, "family": family}


def _cmd_plan(args: argparse.Namespace) -> int:
    from elastico.hardware import find_gpu_name

    model = _model(args)
    work = _plan_work(args)
    gpus = [find_gpu_name(g) for g in (args.gpu or DEFAULT_PLAN_GPUS)]
    if args.replicas < 1:
        raise InvalidArgument("--replicas", args.replicas, "an integer >= 1")
    _check_tp(args.tp)
    try:
        out = plan(model, work, gpus, tp=args.tp, replicas=args.replicas, engine=args.engine,
                   dtype=args.dtype, kv_dtype=args.kv_dtype, mig=args.mig)
    except InvalidArgument as e:
        raise _as_flag(e) from None
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    j = out["job"]
    print(f"{j['model']} ({j['params_b']:g}B), {work.describe()}, {j['engine']}, {j['dtype']}; "
          f"requested tp {j['tp']} x {j['replicas']} replica(s), reference {j['reference_gpu']} "
          f"at {j['reference_tokens_per_s']:,.0f} tokens/s")
    print("\none replica per configuration (fits: weights, workspace and every request's KV "
          "cache within the engine's share of the GPU memory booked):")
    head = f"{'GPU':<12}{'tp':>3}{'share':>8}{'GiB/GPU':>9}{'weights':>9}{'tokens/s':>12}  fits"
    print(head)
    print("-" * len(head))
    for r in out["configurations"]:
        share = r["mig_profile"] or f"{r['share']:.2f}"
        w = f"{r['weights_gib']:.1f}" if "weights_gib" in r else "-"
        print(f"{r['gpu']:<12}{r['tp']:>3}{share:>8}{r['memory_gib_per_gpu']:>9.1f}{w:>9}"
              + (f"{r['tokens_per_s']:>12,.0f}" if r["fits"] else f"{'-':>12}")
              + "  " + ("yes" if r["fits"] else f"no: {r['reason']}"))
    print(f"\nshape family ({len(out['family'])} configurations; Pareto frontier, wait not "
          "shown; replicas split the requests):")
    head = (f"{'configuration':<28}{'GPUs':>5}{'tp':>3}{'repl':>5}{'tokens/s':>12}{'GiB/GPU':>9}"
            f"{'job hours':>12}{'start s':>9}")
    print(head)
    print("-" * len(head))
    for c in out["family"]:
        print(f"{c['name']:<28}{c['gpus']:>5}{c['tp']:>3}{c['replicas']:>5}{c['tokens_per_s']:>12,.0f}"
              f"{c['memory_gib_per_gpu']:>9.1f}{_hours(c['hours']):>12}{c['startup_s']:>9.1f}")
    return 0
