"""Benchmarks of Elastic Shadow Pricing (not a test): run ``python bench/bench_pricing.py``.

Prints, measured in this one process:
1. native per-job selection vs a vectorised numpy reference (same inputs), N = 10k / 100k
   jobs, 16 configurations each, R = 10 resources;
2. float32 vs float64 and nthreads=2 vs 1 of the native selection;
3. full solve time, iterations and certified gap for random instances of N = 500, 5000, 50000.
Times are the median of repeated runs (time.perf_counter).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from elastico.pricing import kernel, solve


numpy_select = kernel.reference_select


def instance(rng, n, k=16, r=10, tight=0.4):
    """Correlated random instance: wait first, utility ~ (total demand)^0.7 with noise."""
    off = np.arange(n + 1, dtype=np.int64) * k
    m = off[-1]
    d = rng.uniform(0, 1, (m, r)) * rng.uniform(0, 2, (m, 1))
    u = d.sum(1) ** 0.7 * rng.uniform(0.5, 1.5, m)
    u[off[:-1]] = 0.0
    d[off[:-1]] = 0.0
    cap = np.maximum.reduceat(d, off[:-1], axis=0).sum(0) * tight
    return u, d, off, cap


def median_time(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    rng = np.random.default_rng(0)
    print("== selection: N jobs x 16 configurations, R = 10 (median ms) ==")
    print(f"{'N':>7} {'numpy':>9} {'f64 x1':>9} {'f32 x1':>9} {'f64 x2':>9} {'f32 x2':>9}"
          f" {'numpy/f64':>10} {'f64/f32':>8} {'x1/x2':>7}")
    for n in (10_000, 100_000):
        u, d, off, cap = instance(rng, n)
        p = rng.uniform(0, 0.5, d.shape[1])
        rep = 15 if n <= 10_000 else 5
        ref = numpy_select(off, u, d, p, cap)
        got = kernel.select(off, u, d, p, cap)
        assert np.array_equal(ref[0], got[0])
        prep = {(dt, nt): kernel.prepare(off, u, d, cap, dtype=dt, nthreads=nt)
                for dt in ("float64", "float32") for nt in (1, 2)}
        t_np = median_time(lambda: numpy_select(off, u, d, p, cap), rep)
        t = {key: median_time(lambda k=key: prep[k].select(p), rep * 4) for key in prep}
        print(f"{n:>7} {1e3 * t_np:>9.2f} {1e3 * t['float64', 1]:>9.2f} {1e3 * t['float32', 1]:>9.2f}"
              f" {1e3 * t['float64', 2]:>9.2f} {1e3 * t['float32', 2]:>9.2f}"
              f" {t_np / t['float64', 1]:>10.1f} {t['float64', 1] / t['float32', 1]:>8.2f}"
              f" {t['float64', 1] / t['float64', 2]:>7.2f}")

    print("\n== full solve: 16 configurations, R = 10, defaults (max 200 iterations, gap tolerance 1e-3) ==")
    print(f"{'N':>7} {'dtype':>8} {'seconds':>9} {'iters':>6} {'gap':>10} {'ms/iter':>8}")
    for n in (500, 5000, 50_000):
        u, d, off, cap = instance(rng, n)
        for dt in ("float64", "float32"):
            if n == 50_000 and dt == "float32":
                continue
            res = solve(u, d, off, cap, dtype=dt)
            print(f"{n:>7} {dt:>8} {res.seconds:>9.2f} {res.iterations:>6} {res.gap:>10.2e}"
                  f" {1e3 * res.seconds / res.iterations:>8.1f}")
        warm = solve(u, d, off, cap, initial_prices=res.prices)
        print(f"{n:>7} {'warm':>8} {warm.seconds:>9.2f} {warm.iterations:>6} {warm.gap:>10.2e}"
              f" {1e3 * warm.seconds / warm.iterations:>8.1f}")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    main()
