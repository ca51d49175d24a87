"""Rebuild ``derived/length_classes.csv`` from the two trace files (run from this folder).

Per service (``code``, ``conv``): the requests' (ContextTokens, GeneratedTokens) pairs are cut
into 8 classes of equal request count -- 4 quartiles of the prompt length (requests sorted by
prompt, then output, then row order), each halved by output length (sorted by output, then
prompt, then row order) -- and each class is written as its mean prompt and mean output
tokens (rounded to the nearest integer, at least 1) with its share of the requests.  The
classes keep the joint shape of the distribution (long prompts with short answers in
``code``) with few rows: ElastiCo prices a job's request mix class by class
(:mod:`elastico.llm_job`), so 8 classes bound that cost.  Standard library only.

It also writes ``derived/arrival_stats.csv``: per service, the request arrival process's
burstiness -- requests, span (s), mean inter-arrival gap (s), the gaps' coefficient of
variation (std / mean; 1 for a Poisson process) and the index of dispersion (variance / mean)
of the request counts in consecutive windows of 1 s, 10 s and 60 s (1 for Poisson at every
scale; larger = burstier).  ``elastico.sim.llm_mix`` shapes the llm-mix workload's inference
arrivals with the ``conv`` gaps (docs/model.md, "The llm-mix workload"); this file states
what that shape is.
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


def timestamps(name: str) -> list[float]:
    """Arrival times in seconds from the day's midnight (the files span one hour of one day),
    in file order; ``YYYY-MM-DD HH:MM:SS.fffffff``."""
    out = []
    with open(HERE / f"AzureLLMInferenceTrace_{name}.csv", newline="") as f:
        for r in csv.DictReader(f):
            day, clock = r["TIMESTAMP"].split(" ")
            h, m, sec = clock.split(":")
            out.append(int(day[-2:]) * 86400 + int(h) * 3600 + int(m) * 60 + float(sec))
    return out


def dispersion(times: list[float], window_s: float) -> float:
    """Variance / mean of the counts in consecutive ``window_s`` windows from the first
    arrival (the last, partial window dropped); population variance."""
    t0 = times[0]
    n = int((times[-1] - t0) // window_s)
    counts = [0] * n
    for t in times:
        k = int((t - t0) // window_s)
        if k < n:
            counts[k] += 1
    mean = sum(counts) / n
    return sum((c - mean) ** 2 for c in counts) / n / mean


def arrival_stats(name: str) -> list:
    t = timestamps(name)
    gaps = [b - a for a, b in zip(t, t[1:])]
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    return [f"azure-{name}", len(t), f"{t[-1] - t[0]:.3f}", f"{mean:.6f}", f"{sd / mean:.4f}",
            *(f"{dispersion(t, w):.4f}" for w in (1.0, 10.0, 60.0))]


def main() -> None:
    (HERE / "derived").mkdir(exist_ok=True)
    with open(HERE / "derived" / "length_classes.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["distribution", "input_tokens", "output_tokens", "share"])
        for name in ("conv", "code"):
            for i, o, s in classes(read(name)):
                w.writerow([f"azure-{name}", i, o, f"{s:.6f}"])
    with open(HERE / "derived" / "arrival_stats.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["service", "requests", "span_s", "mean_gap_s", "gap_cv", "dispersion_1s",
                    "dispersion_10s", "dispersion_60s"])
        for name in ("conv", "code"):
            w.writerow(arrival_stats(name))


if __name__ == "__main__":
    main()
