"""Round latency in-process vs through the services (issue 6 goal: grpc p99 <= 2x in-process
p99 and <= 250 ms).

    python bench/rpc.py [--gpus 512] [--jobs 1000] [--rounds 5] [--json]

Cluster: ``trace.sub_cluster(read_nodes(), gpus)``; jobs: ``workload.build_workload`` of the
bundled pod list (seed 0, ``--jobs`` pods), all pending at the last arrival -- one round of a
512-GPU cluster facing 1,000 pending jobs, policy ``elastico`` with the bundled LightGBM
model.  Each path first runs one warm-up round (shape families, predictor caches: reported
as ``*_cold_ms``), then ``--rounds`` rounds of the same input, timed by the caller
(``grpc``: placer -> pricing + predictor, each its own process on loopback, started with
:class:`elastico.up_cli.Stack`).  Prints one JSON object: inproc_p50_ms, inproc_p99_ms,
grpc_p50_ms, grpc_p99_ms, ratio_p99 (grpc p99 / inproc p99).  Measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None) -> int:
    from elastico import trace, workload
    from elastico.placer.placement import ClusterState
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.placer.remote import RemotePlacerPolicy, open_channel
    from elastico.placer.round import ActiveJob, RoundInput, run_round
    from elastico.predictor import default_slowdown_model
    from elastico.throughput import ThroughputModel
    from elastico.up_cli import Stack, free_ports

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    nodes = trace.sub_cluster(trace.read_nodes(), a.gpus)
    tm = ThroughputModel.bundled()
    wl = workload.build_workload(trace.read_pods(), nodes, seed=0, model=tm, jobs=a.jobs)
    jobs = [ActiveJob(j) for j in wl.jobs[:a.jobs]]
    now = max(j.job.arrival_s for j in jobs)
    slow, _ = default_slowdown_model()

    def timed(policy) -> tuple[float, list[float]]:
        inp = RoundInput(now, nodes, ClusterState(nodes), jobs)
        t0 = time.perf_counter()
        run_round(policy, inp)
        cold = time.perf_counter() - t0
        out = []
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            run_round(policy, inp)
            out.append(time.perf_counter() - t0)
        return cold, out

    cold_in, inproc = timed(make_policy("elastico", PolicyEnv(nodes, tm, slow)))
    with Stack(dict(zip(("pricing", "predictor", "placer"), free_ports(3)))) as stack:
        ch = open_channel(stack.address("placer"))
        cold_rpc, rpc = timed(RemotePlacerPolicy(ch, "elastico", PolicyEnv(nodes, tm, slow),
                                                 timeout_s=600))
        ch.close()
    ms = lambda xs, q: round(1000 * float(np.percentile(xs, q)), 1)  # noqa: E731
    out = {"gpus": a.gpus, "jobs": len(jobs), "rounds": a.rounds,
           "inproc_p50_ms": ms(inproc, 50), "inproc_p99_ms": ms(inproc, 99),
           "grpc_p50_ms": ms(rpc, 50), "grpc_p99_ms": ms(rpc, 99),
           "ratio_p99": round(float(np.percentile(rpc, 99) / np.percentile(inproc, 99)), 3),
           "inproc_cold_ms": round(1000 * cold_in, 1), "grpc_cold_ms": round(1000 * cold_rpc, 1)}
    print(json.dumps(out) if a.json else "\n".join(f"{k:>15} {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
