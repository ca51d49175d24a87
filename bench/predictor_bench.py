"""Benchmark of PredictSlowdown (not a test): ``python bench/predictor_bench.py [--pairs N]``.

Measures, in this one process and on one core (LightGBM ``num_threads=1``, BLAS/OpenMP
limited to 1 thread before numpy loads), the time to predict a batch of N pairs (default
10,000; both slowdowns of every pair) with the bundled LightGBM model:

* ``core``: :meth:`elastico.predictor.service.PredictorCore.predict` -- what the gRPC
  handler calls -- for the slowdown of each pair's ``a`` (``both``: also of its ``b``, twice
  the rows), on a new core each run, in two batches: ``few`` (the pairs draw from 26 Gavel
  job types x 4 MPS shares, the simulator's case) and ``distinct`` (every profile has its own
  measured counters, so every feature vector is built);
* ``grpc``: the same ``distinct`` batch through a server on 127.0.0.1 (serialization and the
  adapter's conversion included; ``a`` sides);
* ``baseline``: the analytic fallback (``AnalyticSlowdown.pair_slowdown``, ``a`` sides) on
  the same ``distinct`` pairs -- the model it replaces, a few float operations per pair.

Prints one line per measurement (median of 5 runs, ms) and the ratios to the baseline.  The
goal (issue: "a batch of 10,000 pairs takes well under a second on one core") is the
``core distinct`` time.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from elastico.predictor import AnalyticSlowdown  # noqa: E402
from elastico.predictor.profile import JobProfile  # noqa: E402
from elastico.predictor.service import PredictorCore  # noqa: E402
from elastico.perf.throughput import ThroughputModel  # noqa: E402

GPU = "V100M16"


def profiles(n: int, rng: np.random.Generator, distinct: bool) -> list[JobProfile]:
    tm = ThroughputModel.bundled()
    types = tm.job_types()
    out = []
    for i in range(n):
        jt = types[int(rng.integers(len(types)))]
        share = float(rng.choice([0.25, 0.5, 0.75, 1.0]))
        act = tm.parallel_fraction(jt) * tm.share_speed(jt, share)
        kw = {}
        if distinct:
            kw = dict(sm_activity=float(rng.uniform()), dram_activity=float(rng.uniform()),
                      mem_gib=float(rng.uniform(1, 16)), power_frac=float(rng.uniform(0.2, 1)))
        out.append(JobProfile(jt, "training", act, gpu_model=GPU,
                              mps_share=share if share < 1 else None,
                              solo_tput=tm.solo(jt, GPU), **kw))
    return out


def median_ms(fn, repeat: int = 5) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10_000, help="pairs per batch (default 10000)")
    args = ap.parse_args()
    n = args.pairs
    rng = np.random.default_rng(0)
    core = PredictorCore()
    print(f"model {core.version}; {n} pairs per batch; {os.cpu_count()} CPUs visible, "
          f"1 thread used")

    fa, fb = profiles(n, rng, False), profiles(n, rng, False)
    few = median_ms(lambda: PredictorCore().predict(fa, fb, GPU, both=False))
    a, b = profiles(n, rng, True), profiles(n, rng, True)
    distinct = median_ms(lambda: PredictorCore().predict(a, b, GPU, both=False))
    both = median_ms(lambda: PredictorCore().predict(a, b, GPU, both=True))
    analytic = AnalyticSlowdown()
    base = median_ms(lambda: [analytic.pair_slowdown(x, y) for x, y in zip(a, b)])
    grpc_ms = _grpc(a, b)
    print(f"core few       {few:9.1f} ms  ({few / base:6.1f} x baseline)")
    print(f"core distinct  {distinct:9.1f} ms  ({distinct / base:6.1f} x baseline)")
    print(f"core both      {both:9.1f} ms  ({both / base:6.1f} x baseline; a and b sides)")
    if grpc_ms is not None:
        print(f"grpc distinct  {grpc_ms:9.1f} ms  ({grpc_ms / base:6.1f} x baseline)")
    print(f"baseline       {base:9.1f} ms  (analytic fallback, same pairs)")
    print(f"goal: core distinct < 1000 ms for 10,000 pairs: "
          f"{'met' if distinct < 1000 * n / 10_000 else 'MISSED'}")


def _grpc(a, b) -> float | None:
    try:
        import grpc

        from elastico.predictor.server import build_server
        from elastico.v1 import predictor_pb2 as pb
        from elastico.v1 import predictor_pb2_grpc
    except ImportError:
        return None

    def msg(p: JobProfile):
        return pb.JobProfile(job_type=p.job_type, kind=p.kind, gpu_activity=p.gpu_activity,
                             mem_gib=p.mem_gib, mps_share=p.mps_share, solo_tput=p.solo_tput,
                             sm_activity=p.sm_activity, dram_activity=p.dram_activity,
                             power_frac=p.power_frac)

    req = pb.PredictSlowdownRequest(gpu_model=GPU, pairs=[
        pb.ProfilePair(a=msg(x), b=msg(y)) for x, y in zip(a, b)])
    server, port = build_server("127.0.0.1:0", max_workers=1)
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}",
                               options=[("grpc.max_receive_message_length", 256 * 2**20),
                                        ("grpc.max_send_message_length", 256 * 2**20)])
    stub = predictor_pb2_grpc.PredictorServiceStub(ch)
    try:
        stub.PredictSlowdown(req, timeout=60)  # warm the channel
        return median_ms(lambda: stub.PredictSlowdown(req, timeout=60))
    finally:
        ch.close()
        server.stop(None)


if __name__ == "__main__":
    main()
