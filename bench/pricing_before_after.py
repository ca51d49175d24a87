"""Before/after of the pricing solver on the same instances (measures; changes nothing).

Run ``python bench/pricing_before_after.py [--rev REV] CASE...`` with CASE =
``KIND:N[:K]`` (KIND in random, trace, trace-tight, llm-mix of bench/pricing.py; K = 32 by
default, R = 8).  The solver module of git revision REV (default ``ce03386``, the Polyak
subgradient before issue 24) is loaded from ``git show REV:services/pricing/solver.py`` beside
the installed one; both solve the instance drawn with ``default_rng(SEED)``, cold, defaults,
twice; the line gives iterations, the faster time and the certified gap of each.  docs/pricing.md
section 3 quotes its output.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import pricing as P  # bench/pricing.py (this folder is on sys.path when the script runs)
from bench_pricing import instance as random_instance
from elastico.pricing import solve

REPO = Path(__file__).resolve().parents[1]


def load_solver(rev: str):
    src = subprocess.run(["git", "show", f"{rev}:services/pricing/solver.py"], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "solver_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("solver_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["solver_before"] = mod
    spec.loader.exec_module(mod)
    return mod.solve


def build(kind: str, n: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return random_instance(rng, n, k, 8)
    pool = P.LlmMixPool.get(8, k, P.LLM_MIX_PER_KIND) if kind == "llm-mix" else P.TracePool.get(8, k)
    u, d, off, cap = pool.instance(rng, n)[0]
    return u, d, off, cap * (P.TIGHT if kind == "trace-tight" else 1.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+", help="KIND:N[:K], e.g. trace-tight:10000")
    ap.add_argument("--rev", default="ce03386", help="git revision of the 'before' solver")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    before = load_solver(args.rev)
    for case in args.cases:
        parts = case.split(":")
        if len(parts) not in (2, 3) or parts[0] not in P.KINDS:
            ap.error(f"case {case!r}: expected KIND:N[:K] with KIND in {', '.join(P.KINDS)}")
        kind, n, k = parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else 32
        inst = build(kind, n, k, args.seed)
        out = []
        for name, fn in ((args.rev, before), ("now", solve)):
            runs = [fn(*inst) for _ in range(2)]
            r = runs[-1]
            out.append(f"{name}: {r.iterations} it, {1e3 * min(x.seconds for x in runs):.0f} ms, "
                       f"gap {100 * r.gap:.3f} %")
        print(f"{kind} N={n} K={k} R=8  " + "  |  ".join(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
