"""The LLM inference model (elastico.perf.llm) against every bundled measurement it can express:
fit its efficiency constants, score it leave-one-model-out, time it.

    python bench/llm_model.py --json        # one JSON object per (dataset, engine, gpu, fit)
    python bench/llm_model.py --fit         # refit and write elastico/perf/llm_constants.json
    python bench/llm_model.py --cost        # evaluation cost of a 512-GPU round's families

Measurements (data/*/PROVENANCE.md): Argonne LLM-Inference-Bench (vLLM and TensorRT-LLM on
A100/H100: whole-batch throughput), Splitwise (prefill time and decode time per token,
vLLM-based and eager), TensorRT-LLM's perf overview (offline max throughput, FP8, H100/H200),
Vidur (linear-operator times; NCCL all-reduce times).  Rows whose model is not in the
catalogue are counted as skipped, never guessed.

Fit (``--fit``): per engine, per GPU generation, four constants -- eta_flops, eta_hbm,
t_fixed_s, t_layer_s -- by scipy.optimize.least_squares on log(predicted / measured) over the
engine's rows (bounded, deterministic start), and the engine's constants pooled over
generations (``"*"``, the fallback for a generation without data); per generation the
all-reduce latency and link efficiency from Vidur's NVLink all-reduce times.  The fitted
file records the data files' sha256, the row counts and the fit's residuals.

Score (``--json``): ``fitted`` = leave-one-model-out: every model's rows are predicted by
constants fitted on the engine's rows of all *other* models (all datasets); ``physics`` = the
pure roofline (efficiency 1, no overhead).  APE = |predicted - measured| / measured.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from scipy.optimize import least_squares

from elastico.paths import data_file
from elastico.perf import llm

ROOT = Path(__file__).resolve().parents[1]
EFF = ("eta_flops", "eta_hbm", "t_fixed_s", "t_layer_s", "t_seq_s")
NP = len(EFF)
#: bounds of the fitted constants (physical: an efficiency is at most 1)
LOWER = np.array([0.02, 0.02, 1e-6, 1e-8, 1e-8])
UPPER = np.array([1.0, 1.0, 1.0, 0.05, 0.01])
#: starts of the fit; the launch time per layer starts from each of these in turn (the max()
#: with the GPU time gives it no gradient where the GPU binds) and the best fit is kept
START = np.array([0.6, 0.7, 1e-3, 1e-5, 1e-5])
T_LAYER_STARTS = (1e-6, 1e-4, 4e-4)
MAX_NFEV = 300
LINK_LOWER, LINK_UPPER, LINK_START = np.array([1e-7, 0.05]), np.array([1e-3, 1.0]), np.array([2e-5, 0.7])

#: measurement GPU names -> catalogue names (see each PROVENANCE.md, "In ElastiCo")
#: (GH200: not in the bundled copy -- kept aside upstream to score the model on a GPU it never
#: saw -- but named here so that the held-out rows are scored when present)
ARGONNE_GPUS = {"Nvidia A100 GPU": "A100-40GB", "Nvidia H100 GPU": "H100-SXM", "Nvidia GH200 GPU": "GH200"}
ARGONNE_ENGINES = {"vLLM": "vllm", "TensorRT-LLM": "tensorrt-llm"}
SPLITWISE_GPUS = {"a100-80gb": "A100-80GB", "h100-80gb": "H100-SXM"}
TRT_GPUS = {"H100": "H100-SXM", "H200": "H200"}
VIDUR_GPUS = {"a100": "A100-80GB", "h100": "H100-SXM", "a40": "A40"}
DATA_FILES = (
    ("argonne-llm-inference-bench", "All_results.csv"),
    ("splitwise-llm-perf-model", "perf_model.csv"),
    ("tensorrt-llm-perf-overview", "throughput_h100_h200.csv"),
    ("vidur-llm-operator-profiles", "derived", "linear_ops.csv"),
    ("vidur-llm-operator-profiles", "network", "h100_dgx", "all_reduce.csv"),
    ("vidur-llm-operator-profiles", "network", "a100_pairwise_nvlink", "all_reduce.csv"),
)


@dataclass
class Row:
    """One measurement the model can express."""

    dataset: str        # argonne | splitwise-prefill | splitwise-decode | tensorrt-llm-overview | vidur-linear
    engine: str
    gpu: str            # catalogue name
    model: str          # catalogue name
    kind: str           # throughput | prefill | decode | max-throughput | linear
    batch: int
    input_tokens: int
    output_tokens: int
    tp: int
    dtype: str
    measured: float     # tokens/s, or seconds


@dataclass
class Loaded:
    rows: list[Row]
    skipped: dict[str, int] = field(default_factory=dict)


def _model_name(name: str) -> str | None:
    try:
        return llm.llm_model(name).name
    except Exception:
        return None


def load_rows() -> Loaded:
    """Every bundled measurement the model can express (and counts of those it cannot)."""
    rows: list[Row] = []
    skipped: dict[str, int] = defaultdict(int)
    with open(data_file("argonne-llm-inference-bench", "All_results.csv"), newline="") as f:
        for r in csv.DictReader(f):
            r = {k.strip(): (v or "").strip() for k, v in r.items() if k}
            gpu, eng = ARGONNE_GPUS.get(r["Hardware"]), ARGONNE_ENGINES.get(r["Framework"])
            if gpu is None or eng is None:
                continue
            model = _model_name(r["Model"])
            if model is None:
                skipped[f"argonne {r['Model']} (not in the catalogue)"] += 1
                continue
            n = int(r["Input Output Length"])
            rows.append(Row("argonne", eng, gpu, model, "throughput", int(r["Batch Size"]), n, n,
                            int(r["Num of Hardware"]), "fp16", float(r["Throughput"])))
    with open(data_file("splitwise-llm-perf-model", "perf_model.csv"), newline="") as f:
        for r in csv.DictReader(f):
            gpu = SPLITWISE_GPUS.get(r["hardware"])
            if gpu is None:
                skipped[f"splitwise {r['hardware']} (power-capped)"] += 1
                continue
            model = _model_name(r["model"])
            b, i, o, tp = int(r["batch_size"]), int(r["prompt_size"]), int(r["token_size"]), int(r["tensor_parallel"])
            rows.append(Row("splitwise-prefill", "vllm-eager", gpu, model, "prefill", b, i, o, tp, "fp16",
                            float(r["prompt_time"]) / 1e3))
            rows.append(Row("splitwise-decode", "vllm-eager", gpu, model, "decode", b, i, o, tp, "fp16",
                            float(r["token_time"]) / 1e3))
    with open(data_file("tensorrt-llm-perf-overview", "throughput_h100_h200.csv"), newline="") as f:
        for r in csv.DictReader(f):
            model = _model_name(r["model"])
            if model is None:
                skipped[f"tensorrt-llm-overview {r['model']} (not in the catalogue)"] += 1
                continue
            rows.append(Row("tensorrt-llm-overview", "tensorrt-llm", TRT_GPUS[r["gpu"]], model, "max-throughput",
                            0, int(r["isl"]), int(r["osl"]), int(r["tp"]), r["precision"].lower(),
                            float(r["total_output_tokens_per_s"])))
    with open(data_file("vidur-llm-operator-profiles", "derived", "linear_ops.csv"), newline="") as f:
        for r in csv.DictReader(f):
            model = _model_name(r["model"])
            ms = sum(float(r[f"{op}_median_ms"]) for op in
                     ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"))
            rows.append(Row("vidur-linear", "vllm", VIDUR_GPUS[r["gpu"]], model, "linear", 0,
                            int(r["num_tokens"]), 0, int(r["tp"]), "fp16", ms / 1e3))
    return Loaded(rows, dict(skipped))


def load_allreduce() -> list[tuple[str, int, float, float]]:
    """(catalogue GPU, GPUs, bytes, seconds) of Vidur's single-node NVLink all-reduces."""
    out = []
    for folder, gpu, sizes in (("h100_dgx", "H100-SXM", (2, 4, 8)), ("a100_pairwise_nvlink", "A100-80GB", (2,))):
        with open(data_file("vidur-llm-operator-profiles", "network", folder, "all_reduce.csv"), newline="") as f:
            for r in csv.DictReader(f):
                n = int(r["num_workers"])
                if n in sizes and int(r["devices_per_node"]) == n:
                    out.append((gpu, n, float(r["size"]), float(r["time_stats.all_reduce.median"]) / 1e3))
    return out


# --------------------------------------------------------------------------------------------
# vectorised prediction
# --------------------------------------------------------------------------------------------

class Block:
    """Rows of one engine family (engines whose GPU kernels are the same: they share
    eta_flops and eta_hbm per generation; each engine has its own host overheads), their
    efficiency-independent physics precomputed."""

    def __init__(self, rows: Sequence[Row], generations: Sequence[str], engines: Sequence[str]):
        self.rows = list(rows)
        self.gens = list(generations)
        self.engines = list(engines)
        self.measured = np.array([r.measured for r in rows])
        # every (dataset, GPU) weighs the same in a fit, however many rows it has
        groups = [(r.dataset, r.gpu) for r in rows]
        count: dict[tuple[str, str], int] = defaultdict(int)
        for g in groups:
            count[g] += 1
        self.weight = np.array([1.0 / math.sqrt(count[g]) for g in groups])
        cfgs = [llm.LlmConfig(r.gpu, tp=r.tp, dtype=r.dtype, engine=r.engine) for r in rows]
        self.gen_idx = np.array([self.gens.index(_generation(r.gpu)) for r in rows], dtype=int)
        self.eng_idx = np.array([self.engines.index(r.engine) for r in rows], dtype=int)
        self.m = llm._model_arrays([llm.llm_model(r.model) for r in rows])
        self.c0 = llm._cfg_arrays(cfgs, eff=llm.ROOFLINE)
        self.kind = np.array([r.kind for r in rows])
        self.b = np.array([max(r.batch, 1) for r in rows], dtype=float)
        self.i = np.array([r.input_tokens for r in rows], dtype=float)
        self.o = np.array([max(r.output_tokens, 1) for r in rows], dtype=float)
        self.conc = llm._concurrency(self.m, self.c0, self.i, self.o)
        self.models = np.array([r.model for r in rows])
        self.linear = _linear_features(rows)

    @property
    def nparams(self) -> int:
        """Per generation: eta_flops, eta_hbm, then (t_fixed_s, t_layer_s, t_seq_s) per engine."""
        return 2 + 3 * len(self.engines)

    def effs(self, table: np.ndarray, links: dict[str, tuple[float, float]]) -> llm.Efficiency:
        """Per-row efficiencies from a (generations x nparams) table."""
        p = np.asarray(table)[self.gen_idx]
        r = np.arange(len(self.rows))
        t = {k: p[r, 2 + 3 * self.eng_idx + j] for j, k in enumerate(("t_fixed_s", "t_layer_s", "t_seq_s"))}
        la = np.array([links.get(g, (0.0, 1.0))[0] for g in self.gens])[self.gen_idx]
        le = np.array([links.get(g, (0.0, 1.0))[1] for g in self.gens])[self.gen_idx]
        return llm.Efficiency(eta_flops=p[:, 0], eta_hbm=p[:, 1], **t, alpha_s=la, eta_link=le, origin="bench")

    def predict(self, eff: llm.Efficiency) -> np.ndarray:
        c = replace(self.c0, eff=eff)
        m, k = self.m, self.kind
        out = np.full(len(self.rows), np.nan)
        sel = k == "throughput"
        if sel.any():
            lat = llm._batch_latency(m, c, self.b, self.i, self.o, self.conc)
            out = np.where(sel, self.b * (self.i + self.o) / lat, out)
        sel = k == "prefill"
        if sel.any():
            out = np.where(sel, llm._prefill_time(llm._step_physics(m, c, self.b, self.i, 0), eff), out)
        sel = k == "decode"
        if sel.any():
            out = np.where(sel, llm._decode_total(llm._step_physics(m, c, self.b, self.i, self.o), eff) / self.o, out)
        sel = k == "max-throughput"
        if sel.any():
            tps, _ = llm._tokens_per_s(m, c, self.i, self.o)
            out = np.where(sel, tps * self.o / (self.i + self.o), out)
        sel = k == "linear"
        if sel.any():
            f, w = self.linear
            t = np.maximum(f / (np.asarray(eff.eta_flops)[:, None] * c.flops[:, None]),
                           w / (np.asarray(eff.eta_hbm)[:, None] * c.hbm[:, None]))
            out = np.where(sel, t.sum(axis=1), out)
        return out


def _generation(gpu: str) -> str:
    return str(llm.hardware.gpu_spec(gpu).generation)


def _linear_features(rows: Sequence[Row]):
    """FLOPs and bytes of Vidur's four linear operators per row (QKV, O, gate+up, down), per
    layer per GPU: FLOPs 2 x weights x tokens; bytes: 16-bit weights + input and output."""
    f = np.zeros((len(rows), 4))
    w = np.zeros((len(rows), 4))
    for n, r in enumerate(rows):
        if r.kind != "linear":
            continue
        md = llm.llm_model(r.model)
        h, d, tp, t = md.hidden, md.head_dim, r.tp, r.input_tokens
        shapes = ((h, (md.heads + 2 * md.kv_heads) * d / tp), (md.heads * d / tp, h),
                  (h, 2 * md.intermediate / tp), (md.intermediate / tp, h))
        for j, (k_in, n_out) in enumerate(shapes):
            f[n, j] = 2.0 * k_in * n_out * t
            w[n, j] = 2.0 * (k_in * n_out + t * (k_in + n_out))
    return f, w


def _log_residual(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(pred, 1e-30) / meas)


def fit_links(samples=None) -> dict[str, dict[str, float]]:
    """Per generation: all-reduce latency ``alpha_s`` and link efficiency ``eta_link`` from
    Vidur's measured NVLink all-reduce times, least squares on log time."""
    samples = load_allreduce() if samples is None else samples
    by_gen: dict[str, list] = defaultdict(list)
    for gpu, n, size, t in samples:
        spec = llm.hardware.gpu_spec(gpu)
        by_gen[str(spec.generation)].append((n, size, t, float(spec.nvlink_gbps) * 1e9 / 2))
    out = {}
    pooled = {"*": [x for v in by_gen.values() for x in v]}
    for gen, s in sorted(by_gen.items()) + list(pooled.items()):
        n, size, t, bw = (np.array(x, dtype=float) for x in zip(*s))

        def res(x, n=n, size=size, t=t, bw=bw):
            return np.log((x[0] + 2 * (n - 1) / n * size / (x[1] * bw)) / t)
        r = least_squares(res, LINK_START, bounds=(LINK_LOWER, LINK_UPPER), x_scale=LINK_START, method="trf")
        out[gen] = {"alpha_s": float(r.x[0]), "eta_link": float(r.x[1]), "rows": int(len(t)),
                    "median_ape": float(np.median(np.abs(np.expm1(r.fun))))}
    return out


def _start(block: Block, t_layer: float) -> np.ndarray:
    x = [START[0], START[1]]
    for _ in block.engines:
        x += [START[2], t_layer, START[4]]
    return np.array(x)


def _bounds(block: Block) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = list(LOWER[:2]), list(UPPER[:2])
    for _ in block.engines:
        lo += list(LOWER[2:])
        hi += list(UPPER[2:])
    return np.array(lo), np.array(hi)


def _fit_one(block: Block, links: dict, mask: np.ndarray, gens: Sequence[int]):
    """One parameter vector shared by the rows under ``mask`` (generations ``gens``), least
    squares on weighted log error, from each start of :data:`T_LAYER_STARTS`; the best (vector,
    unweighted log residuals of the masked rows).  Host overheads of an engine with no row
    under the mask are not free (they stay at the start and come back NaN)."""
    lo, hi = _bounds(block)
    present = sorted({int(e) for e in block.eng_idx[mask]})
    free = np.array([True, True] + [e in present for e in range(len(block.engines)) for _ in range(3)])
    table = np.ones((len(block.gens), block.nparams))

    best = None
    for tl in T_LAYER_STARTS:
        x0 = np.log(_start(block, tl))
        full = x0.copy()

        def res(x, full=full):
            full[free] = x
            table[list(gens)] = np.exp(full)
            return (block.weight * _log_residual(block.predict(block.effs(table, links)), block.measured))[mask]

        r = least_squares(res, x0[free], bounds=(np.log(lo)[free], np.log(hi)[free]), method="trf",
                          xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=MAX_NFEV)
        if best is None or r.cost < best[0] - 1e-12:
            full[free] = r.x
            best = (r.cost, np.exp(full), r.fun)
    _, x, fun = best
    x = np.where(free, x, np.nan)
    return x, fun / block.weight[mask]


def fit_family(block: Block, links: dict, mask: np.ndarray | None = None, pooled: bool = False):
    """Constants fitted to ``block``'s rows under ``mask``: a (generations x nparams) table,
    one vector per generation (NaN where the mask leaves it no row), or with ``pooled`` one
    vector for all generations; and the log residuals of the masked rows."""
    mask = np.ones(len(block.rows), bool) if mask is None else mask
    present = sorted({int(g) for g in block.gen_idx[mask]})
    out = np.full((len(block.gens), block.nparams), np.nan)
    fun = np.zeros(len(block.rows))
    if pooled:
        x, f = _fit_one(block, links, mask, present)
        out[:] = x
        fun[mask] = f
        return out, fun[mask]
    for g in present:
        sel = mask & (block.gen_idx == g)
        x, f = _fit_one(block, links, sel, [g])
        out[g] = x
        fun[sel] = f
    return out, fun[mask]


def _links_tuple(links: dict) -> dict[str, tuple[float, float]]:
    return {g: (v["alpha_s"], v["eta_link"]) for g, v in links.items()}


#: engines whose GPU kernels are the same (vLLM with and without CUDA graphs): one family
#: shares eta_flops / eta_hbm per generation in a fit; host overheads are per engine
FAMILIES = {"vllm": ("vllm", "vllm-eager"), "tensorrt-llm": ("tensorrt-llm",)}


def family_of(engine: str) -> str:
    return next(f for f, engines in FAMILIES.items() if engine in engines)


def blocks(loaded: Loaded, with_linear: bool = False) -> dict[str, Block]:
    """One block per engine family: the rows it is fitted on (Vidur's linear operators only
    with ``with_linear``: they are scored, never fitted)."""
    by_family: dict[str, list[Row]] = defaultdict(list)
    for r in loaded.rows:
        if with_linear or r.kind != "linear":
            by_family[family_of(r.engine)].append(r)
    return {f: Block(rows, sorted({_generation(r.gpu) for r in rows}), FAMILIES[f])
            for f, rows in sorted(by_family.items())}


def _engine_constants(block: Block, table: np.ndarray, e: int) -> np.ndarray:
    """(generations x 5) constants of engine ``e`` in EFF order, from a family table."""
    return np.column_stack([table[:, 0], table[:, 1], table[:, 2 + 3 * e], table[:, 3 + 3 * e],
                            table[:, 4 + 3 * e]])


def fit_all(loaded: Loaded | None = None) -> dict[str, Any]:
    """The bundled constants file's content (deterministic: no dates)."""
    loaded = load_rows() if loaded is None else loaded
    links = fit_links()
    lt = _links_tuple(links)
    engines: dict[str, Any] = {}
    for fam, blk in blocks(loaded).items():
        per, fun = fit_family(blk, lt)
        pooled, pfun = fit_family(blk, lt, pooled=True)
        for e, eng in enumerate(blk.engines):
            pe, po = _engine_constants(blk, per, e), _engine_constants(blk, pooled, e)
            d: dict[str, Any] = {}
            for g, gen in enumerate(blk.gens):
                sel = (blk.gen_idx == g) & (blk.eng_idx == e)
                if sel.any():
                    d[gen] = {**{k: float(pe[g, j]) for j, k in enumerate(EFF)}, "rows": int(sel.sum()),
                              "median_ape": float(np.median(np.abs(np.expm1(fun[sel]))))}
            sel = blk.eng_idx == e
            d["*"] = {**{k: float(po[0, j]) for j, k in enumerate(EFF)}, "rows": int(sel.sum()),
                      "median_ape": float(np.median(np.abs(np.expm1(pfun[sel]))))}
            engines[eng] = d
    return {
        "about": "Fitted constants of elastico.perf.llm; regenerate with `python bench/llm_model.py --fit`.",
        "method": "scipy.optimize.least_squares (trf, bounded, starts t_layer_s in %s) on log(predicted/measured), "
                  "each (dataset, GPU) weighted equally, per GPU generation and engine family (vllm and "
                  "vllm-eager share eta_flops/eta_hbm); '*' = one set pooled over generations; links from "
                  "Vidur's NVLink all-reduce times" % (list(T_LAYER_STARTS),),
        "bounds": {"lower": dict(zip(EFF, LOWER.tolist())), "upper": dict(zip(EFF, UPPER.tolist()))},
        "data": {"/".join(p): _sha256(data_file(*p)) for p in DATA_FILES},
        "rows_skipped": loaded.skipped,
        "links": links,
        "engines": engines,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------

def score(loaded: Loaded | None = None) -> list[dict[str, Any]]:
    """One result per (dataset, engine, gpu, fit): leave-one-model-out ``fitted`` and the pure
    roofline ``physics``."""
    loaded = load_rows() if loaded is None else loaded
    links = _links_tuple(fit_links())
    fit_blocks = blocks(loaded)
    results: list[dict[str, Any]] = []
    for fam, blk in blocks(loaded, with_linear=True).items():
        fit_blk = fit_blocks[fam]
        pred_fit = np.full(len(blk.rows), np.nan)
        for model in sorted(set(blk.models)):
            mask = fit_blk.models != model
            per, _ = fit_family(fit_blk, links, mask)
            pooled, _ = fit_family(fit_blk, links, mask, pooled=True)
            table = np.array([per[fit_blk.gens.index(g)] if g in fit_blk.gens else pooled[0] for g in blk.gens])
            table = np.where(np.isnan(table), pooled[0], table)
            sel = blk.models == model
            pred_fit[sel] = blk.predict(blk.effs(table, links))[sel]
        roof = np.tile([1.0, 1.0] + [0.0, 0.0, 0.0] * len(blk.engines), (len(blk.gens), 1))
        pred_phys = blk.predict(blk.effs(roof, {}))
        for ds, eng, gpu in sorted({(r.dataset, r.engine, r.gpu) for r in blk.rows}):
            sel = np.array([(r.dataset, r.engine, r.gpu) == (ds, eng, gpu) for r in blk.rows])
            for name, pred in (("fitted", pred_fit), ("physics", pred_phys)):
                ape = np.abs(pred[sel] - blk.measured[sel]) / blk.measured[sel]
                results.append({"dataset": ds, "engine": eng, "gpu": gpu, "fit": name, "rows": int(sel.sum()),
                                "median_ape": round(float(np.median(ape)), 4),
                                "p90_ape": round(float(np.quantile(ape, 0.9)), 4)})
    return results


def score_links() -> list[dict[str, Any]]:
    samples = load_allreduce()
    links = fit_links(samples)
    out = []
    for gpu in sorted({s[0] for s in samples}):
        spec = llm.hardware.gpu_spec(gpu)
        lk = links[str(spec.generation)]
        n, size, t = (np.array(x, dtype=float) for x in zip(*[(s[1], s[2], s[3]) for s in samples if s[0] == gpu]))
        bw = float(spec.nvlink_gbps) * 1e9 / 2
        for name, a, e in (("fitted", lk["alpha_s"], lk["eta_link"]), ("physics", 0.0, 1.0)):
            ape = np.abs(a + 2 * (n - 1) / n * size / (e * bw) - t) / t
            out.append({"dataset": "vidur-allreduce", "engine": "nccl", "gpu": gpu, "fit": name, "rows": int(len(t)),
                        "median_ape": round(float(np.median(ape)), 4), "p90_ape": round(float(np.quantile(ape, 0.9)), 4),
                        "in_sample": name == "fitted"})
    return out


# --------------------------------------------------------------------------------------------
# cost
# --------------------------------------------------------------------------------------------

def cost(jobs: int = 2000, repeat: int = 5, seed: int = 0) -> dict[str, Any]:
    """Milliseconds to evaluate ``jobs`` LLM jobs (catalogue models, token mixes drawn at
    random) x a 512-GPU round's ~30 configurations each (GPU model x TP x replicas x MPS share
    or MIG profile): tokens/s, batch, memory and fit, through :func:`elastico.perf.llm.evaluate_grid`."""
    rng = np.random.default_rng(seed)
    names = sorted(llm.LLM_MODELS)
    models = [llm.LLM_MODELS[names[k]] for k in rng.integers(0, len(names), jobs)]
    inp = rng.integers(32, 4096, jobs)
    out = rng.integers(16, 2048, jobs)
    cfgs = []
    for gpu in ("A100-80GB", "H100-SXM"):
        for tp in (1, 2, 4, 8):
            for rep in (1, 2):
                cfgs.append(llm.LlmConfig(gpu, tp=tp, replicas=rep))
        for share in (0.25, 0.5, 0.75):
            cfgs.append(llm.LlmConfig(gpu, mps_share=share))
    for prof in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"):
        cfgs.append(llm.LlmConfig("A100-80GB", mig_profile=prof))
    for gpu in ("A100-40GB", "L40S"):
        for tp in (1, 2):
            cfgs.append(llm.LlmConfig(gpu, tp=tp))
    llm.evaluate_grid(models, cfgs, inp, out)  # warm the per-configuration cache (a round reuses it)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        g = llm.evaluate_grid(models, cfgs, inp, out)
        times.append((time.perf_counter() - t0) * 1e3)
    base = baseline_family_ms(jobs)
    med = float(np.median(times))
    return {"bench": "cost", "jobs": jobs, "configurations": len(cfgs), "evaluations": jobs * len(cfgs),
            "ms_median": round(med, 2), "ms_max": round(float(np.max(times)), 2),
            "fits": int(g.fits.sum()), "goal_ms": 50, **base,
            "ratio_vs_today": round(med / base["today_family_ms"], 3) if base["today_family_ms"] else None}


def baseline_family_ms(jobs: int) -> dict[str, Any]:
    """Today's family build in the same run: ``elastico.shapes.build_family`` of up to ``jobs``
    non-service trace jobs on the 512-GPU trace sub-cluster (wall ms of the loop)."""
    from elastico import trace
    from elastico.model import JobKind
    from elastico.perf.throughput import ThroughputModel
    from elastico.shapes import build_family, gpu_models_of
    from elastico.sim.workload import build_workload

    nodes = trace.sub_cluster(trace.read_nodes(), 512)
    tm = ThroughputModel.bundled()
    wl = build_workload(trace.read_pods(), nodes, model=tm, load=None, jobs=jobs, seed=0)
    todo = [j for j in wl.jobs if j.kind is not JobKind.SERVICE][:jobs]
    gm = gpu_models_of(nodes)
    t0 = time.perf_counter()
    for j in todo:
        build_family(j, gm, tm)
    return {"today_family_jobs": len(todo), "today_family_ms": round((time.perf_counter() - t0) * 1e3, 2)}


# --------------------------------------------------------------------------------------------

def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--fit", action="store_true", help=f"refit and write {llm.CONSTANTS_FILE.relative_to(ROOT)}")
    ap.add_argument("--cost", action="store_true", help="only the evaluation-cost bench")
    ap.add_argument("--jobs", type=int, default=2000, help="jobs in the cost bench (default 2000)")
    a = ap.parse_args(list(argv) if argv is not None else None)
    if a.jobs < 1:
        ap.error(f"--jobs: {a.jobs}: an integer >= 1")
    if a.fit:
        consts = fit_all()
        llm.CONSTANTS_FILE.write_text(json.dumps(consts, indent=1, sort_keys=True) + "\n")
        print(f"wrote {llm.CONSTANTS_FILE}", file=sys.stderr)
        return 0
    lines = [] if a.cost else score() + score_links()
    lines.append(cost(a.jobs))
    for line in lines:
        print(json.dumps(line) if a.json else "  ".join(f"{k}={v}" for k, v in line.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
