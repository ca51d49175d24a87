"""Make linear_ops.csv from Vidur's per-model mlp.csv profiles (not bundled: 6.3 MB).

Usage: python derive.py <vidur checkout>/data/profiling/compute > linear_ops.csv

For each of {a100, h100, a40} x {meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf,
codellama/CodeLlama-34b-Instruct-hf}, one row per CSV row of mlp.csv (values unchanged): the
GPU, the model, the shape columns, num_tokens, the TP degree and the MEDIAN time (ms, per
layer, per GPU) of the four linear operators (attn_pre_proj = QKV GEMM, attn_post_proj = O
GEMM, mlp_up_proj = gate+up GEMM, mlp_down_proj) and of mlp_act.  The other operators
(embedding, norms, rope, add) and the min/max/mean/std columns are left out.
"""

import csv
import sys
from pathlib import Path

GPUS = ("a100", "h100", "a40")
MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf")
OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act")
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")


def main(root: Path) -> None:
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["gpu", "model", *SHAPE, "num_tokens", "tp", *(f"{op}_median_ms" for op in OPS)])
    for gpu in GPUS:
        for model in MODELS:
            with open(root / gpu / model / "mlp.csv", newline="") as f:
                for r in csv.DictReader(f):
                    w.writerow([gpu, model, *(r[c] for c in SHAPE), r["num_tokens"],
                                r["num_tensor_parallel_workers"],
                                *(r[f"time_stats.{op}.median"] for op in OPS)])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
