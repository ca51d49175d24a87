"""Rebuild ``derived/length_classes.csv`` from the two trace files (run from this folder).

Per service (``code``, ``conv``): the requests' (ContextTokens, GeneratedTokens) pairs are cut
into 8 classes of equal request count -- 4 quartiles of the prompt length (requests sorted by
prompt, then output, then row order), each halved by output length (sorted by output, then
prompt, then row order) -- and each class is written as its mean prompt and mean output
tokens (rounded to the nearest integer, at least 1) with its share of the requests.  The
classes keep the joint shape of the distribution (long prompts with short answers in
``code``) with few rows: ElastiCo prices a job's request mix class by class
(:mod:`elastico.llm_job`), so 8 classes bound that cost.  Standard library only.
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUARTILES = 4
HALVES = 2


def read(name: str) -> list[tuple[int, int, int]]:
    with open(HERE / f"AzureLLMInferenceTrace_{name}.csv", newline="") as f:
        return [(int(r["ContextTokens"]), int(r["GeneratedTokens"]), i)
                for i, r in enumerate(csv.DictReader(f))]


def split(rows: list, parts: int) -> list[list]:
    n = len(rows)
    return [rows[k * n // parts:(k + 1) * n // parts] for k in range(parts)]


def classes(rows: list[tuple[int, int, int]]) -> list[tuple[int, int, float]]:
    out = []
    for q in split(sorted(rows), QUARTILES):
        for h in split(sorted(q, key=lambda r: (r[1], r[0], r[2])), HALVES):
            i = max(1, round(sum(r[0] for r in h) / len(h)))
            o = max(1, round(sum(r[1] for r in h) / len(h)))
            out.append((i, o, len(h) / len(rows)))
    return out


def main() -> None:
    (HERE / "derived").mkdir(exist_ok=True)
    with open(HERE / "derived" / "length_classes.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["distribution", "input_tokens", "output_tokens", "share"])
        for name in ("conv", "code"):
            for i, o, s in classes(read(name)):
                w.writerow([f"azure-{name}", i, o, f"{s:.6f}"])


if __name__ == "__main__":
    main()
