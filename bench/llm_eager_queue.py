"""Experiment for issue 21's one unmet goal (Splitwise H100 decode, leave-one-model-out): is
BLOOM-176B's extra ~6 ms per decode step GPU time that eager vLLM's kernel launches expose?

vLLM 0.2.5 without CUDA graphs (the Splitwise runs, engine ``vllm-eager``) launches a decode
step's kernels one by one from Python.  Two ways to turn a per-kernel launch cost ``c`` and
per-kernel GPU times into a step time, one layer's kernels repeated ``layers`` times:

* ``queue`` -- the eager pipeline as it runs: the host launches kernel k at ``k c``; the GPU
  runs kernels in order, each once launched and the previous one done; the step ends with the
  last kernel (vLLM copies the sampled tokens to the host: a sync per step).
* ``per-kernel`` -- ``sum_k max(c, g_k)``: no queue (each launch waits for the previous
  kernel), an upper bound of the pipeline's time.

Kernels per layer as counted in docs/model.md section 7 (attempt 2): 14 for vLLM's Llama layer,
15 for its BLOOM layer; GPU times from the roofline at the fitted ``vllm-eager`` efficiencies
of :func:`elastico.perf.llm.efficiency` (GEMMs: max(FLOPs, weight bytes); attention: the KV
cache read at the run's mean context; all-reduce: the fitted latency + ring bytes over NVLink);
norms, activations, rotary and cache writes are launch-bound (GPU time 0).  ``c`` is fitted on
the *other* model's Splitwise decode rows of the same GPU (least squares on log time, one
number), then the held-out model is scored, every repetition a row, as bench/llm_model.py
scores it.  Prints one JSON object per (mode, GPU, held-out model).  Nothing here is used by
the model: see docs/model.md section 7, "What was tried".  ~5 s.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elastico import hardware  # noqa: E402
from elastico.paths import data_file  # noqa: E402
from elastico.perf import llm  # noqa: E402

MODELS = {"llama2-70b": "Llama-2-70B", "bloom-176b": "BLOOM-176B"}
GPUS = {"a100-80gb": ("A100-80GB", "ampere"), "h100-80gb": ("H100-SXM", "hopper")}


def rows():
    out = defaultdict(list)
    with open(data_file("splitwise-llm-perf-model", "perf_model.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["hardware"] in GPUS:
                key = (r["model"], r["hardware"], int(r["tensor_parallel"]), int(r["prompt_size"]),
                       int(r["batch_size"]), int(r["token_size"]))
                out[key].append(float(r["token_time"]) / 1e3)
    return out


def layer_kernels(name: str, tp: int, b: int, ctx: float, hw: str) -> list[float]:
    """GPU seconds of each kernel of one decode layer, in launch order."""
    m = llm.llm_model(MODELS[name])
    gpu, gen = GPUS[hw]
    s, e = hardware.gpu_spec(gpu), llm.efficiency(gen, "vllm-eager")
    flops, hbm = s.peak_tflops["fp16"] * 1e12 * e.eta_flops, s.hbm_gbps * 1e9 * e.eta_hbm
    link = e.eta_link * s.nvlink_gbps * 1e9 / 2

    def gemm(k_in, n_out):
        return max(2 * k_in * n_out * b / flops, 2 * k_in * n_out / hbm)

    h, d = m.hidden, m.head_dim
    attn = 2 * max(m.kv_heads / tp, 1) * d * 2 * ctx * b / hbm
    ar = e.alpha_s + 2 * (tp - 1) / tp * b * h * 2 / link
    qkv, o = gemm(h, (m.heads + 2 * m.kv_heads) * d / tp), gemm(m.heads * d / tp, h)
    if name == "llama2-70b":  # norm, qkv, rotary, cache, attn, o, ar, norm, gate_up, silu, down, ar, add, add
        return [0, qkv, 0, 0, attn, o, ar, 0, gemm(h, 2 * m.intermediate / tp), 0,
                gemm(m.intermediate / tp, h), ar, 0, 0]
    # norm, qkv+bias, cache, alibi attn, dense, ar, bias, add, norm, h_to_4h, gelu, 4h_to_h, ar, bias, add
    return [0, qkv, 0, attn, o, ar, 0, 0, 0, gemm(h, m.intermediate / tp), 0,
            gemm(m.intermediate / tp, h), ar, 0, 0]


def step_s(key, c: float, mode: str) -> float:
    name, hw, tp, p, b, o = key
    ks = layer_kernels(name, tp, b, p + o / 2, hw) * llm.llm_model(MODELS[name]).layers
    if mode == "per-kernel":
        return float(sum(max(c, g) for g in ks))
    end = 0.0
    for k, g in enumerate(ks, start=1):
        end = max(k * c, end) + g
    return end


def main() -> int:
    data = rows()
    for mode in ("queue", "per-kernel"):
        for hw in GPUS:
            for held in MODELS:
                train = [k for k in data if k[1] == hw and k[0] != held]
                test = [k for k in data if k[1] == hw and k[0] == held]

                def loss(lc, train=train):
                    return sum((np.log(step_s(k, np.exp(lc), mode))
                                - np.log(statistics.median(data[k]))) ** 2 for k in train)
                c = float(np.exp(minimize_scalar(loss, bounds=(np.log(1e-6), np.log(1e-3)),
                                                 method="bounded", options={"xatol": 1e-4}).x))
                ape = [abs(step_s(k, c, mode) - v) / v for k in test for v in data[k]]
                ratio = [step_s(k, c, mode) / statistics.median(data[k]) for k in test]
                print(json.dumps({"mode": mode, "gpu": GPUS[hw][0], "held_out": MODELS[held],
                                  "launch_us": round(c * 1e6, 1), "rows": len(ape),
                                  "median_ape": round(float(np.median(ape)), 4),
                                  "median_pred_over_meas": round(float(np.median(ratio)), 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
