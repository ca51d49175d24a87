"""Memory soak (issue 9 item 3): repeated rounds, reporting how the resident set grows.

Two soaks in one process, each preceded by a warm-up whose RSS is the baseline (caches,
imported modules and the allocator's first arenas are not growth):

* ``rounds``: ``--rounds`` scheduling rounds in-process -- each round a fresh
  ``elastico.sim.simulator.simulate`` of ``--jobs`` trace jobs on a ``--gpus``-GPU sub-cluster
  with the ``elastico`` policy (shapes, pricing, prediction, placement: the whole round, many
  times per simulation), the policy and its state dropped afterwards;
* ``services``: ``--rpc-rounds`` rounds against the pricing, predictor and node-agent servers
  in this process over loopback gRPC -- per round one Solve (200 jobs), one PredictSlowdown
  (64 pairs), one ReportObservation, one ApplyNodePlan and one GetTelemetry -- plus one bad
  request per service (errors must not leak either).

RSS is read from ``/proc/self/statm`` (resident pages x page size; Linux).  Prints one JSON
object: per soak the baseline and final RSS (MiB), the growth (MiB and % of the baseline),
the growth per 1,000 rounds after the first half (the slope once warm: a leak keeps a
positive slope, an allocator settling does not), the rounds and seconds.

    python bench/soak.py                                  # defaults below
    python bench/soak.py --rounds 20 --rpc-rounds 3000    # longer

Measured, never asserted in tests; docs/reliability.md has the numbers.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time


def rss_mib() -> float:
    """Resident set size of this process, MiB (/proc/self/statm field 2 x page size)."""
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE") / 2**20


def _series(samples: list[tuple[int, float]], seconds: float, rounds: int) -> dict:
    base, final = samples[0][1], samples[-1][1]
    half = [s for s in samples if s[0] >= rounds // 2] or samples[-2:]
    slope = ((half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0]) * 1000
             if half[-1][0] > half[0][0] else 0.0)
    return {"rounds": rounds, "seconds": round(seconds, 1),
            "baseline_rss_mib": round(base, 1), "final_rss_mib": round(final, 1),
            "peak_rss_mib": round(max(s[1] for s in samples), 1),
            "growth_mib": round(final - base, 2),
            "growth_pct": round(100 * (final - base) / base, 2),
            "growth_mib_per_1000_rounds_second_half": round(slope, 3)}


def soak_rounds(rounds: int, gpus: int, jobs: int, seed: int) -> dict:
    from elastico import trace
    from elastico.sim import workload
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.predictor import AnalyticSlowdown
    from elastico.sim.simulator import simulate
    from elastico.perf.throughput import ThroughputModel

    nodes = trace.sub_cluster(trace.read_nodes(), gpus)
    model = ThroughputModel.bundled()
    wl = workload.build_workload(trace.read_pods(), nodes, seed=seed, load=1.0, model=model,
                                 jobs=jobs)

    def once() -> int:
        env = PolicyEnv(nodes=nodes, throughput=model, slowdown=AnalyticSlowdown())
        pol = make_policy("elastico", env)
        res = simulate(nodes, wl.jobs, pol,
                       activity=lambda j, c, _cat=pol.catalog: _cat.profile(j, c).gpu_activity)
        return int(res.metrics["jobs_completed"])

    once()  # warm-up: caches, imports, first arenas
    gc.collect()
    samples = [(0, rss_mib())]
    t0 = time.perf_counter()
    done = 0
    for i in range(1, rounds + 1):
        done = once()
        gc.collect()
        samples.append((i, rss_mib()))
    out = _series(samples, time.perf_counter() - t0, rounds)
    out.update(unit="simulation", gpus=gpus, jobs=len(wl.jobs), jobs_completed_last=done)
    return out


def soak_services(rounds: int) -> dict:
    import grpc

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from load import predict_request, solve_request  # noqa: E402 -- the same requests

    from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
    from elastico.nodeagent import server as na_server
    from elastico.predictor import server as predictor_server
    from elastico.predictor.service import PredictorCore
    from elastico.pricing import server as pricing_server
    from elastico.v1 import (nodeagent_pb2, nodeagent_pb2_grpc, predictor_pb2,
                             predictor_pb2_grpc, pricing_pb2, pricing_pb2_grpc)

    from elastico.hardware import GPU_MEMORY_GIB

    backend = SimulatedGpuBackend([GpuInfo(i, f"GPU-{i}", "A100-40GB", GPU_MEMORY_GIB["A100-40GB"])
                                   for i in range(4)])
    servers, stubs = [], {}
    # reports kept in memory grow by design (they are the retraining data); give the core a
    # store on disk so that the soak measures the service, not the data it was asked to keep
    import tempfile

    from elastico.predictor.service import ModelStore

    store_dir = tempfile.mkdtemp(prefix="elastico-soak-")
    for name, build, kw, stub in (
            ("pricing", pricing_server.build_server, {}, pricing_pb2_grpc.PricingServiceStub),
            ("predictor", predictor_server.build_server,
             {"core": PredictorCore(ModelStore(store_dir))}, predictor_pb2_grpc.PredictorServiceStub),
            ("nodeagent", na_server.build_server, {"backend": backend, "node_name": "soak"},
             nodeagent_pb2_grpc.NodeAgentServiceStub)):
        server, port = build("127.0.0.1:0", **kw)
        server.start()
        servers.append(server)
        stubs[name] = stub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    solve, predict = solve_request(200), predict_request(64)
    report = predictor_pb2.ReportObservationRequest(observations=[predictor_pb2.Observation(
        a=predictor_pb2.JobProfile(job_type="A3C"), b=predictor_pb2.JobProfile(job_type="LM"),
        gpu_model="T4", slowdown_a=1.2, source="soak")])
    bad_solve = pricing_pb2.SolveRequest(instance=pricing_pb2.PricingInstance(
        offsets=[0, 1], utility=[1.0], demand=[1.0], capacity=[float("nan")]))
    bad_predict = predictor_pb2.PredictSlowdownRequest(gpu_model="A1")

    def once(i: int) -> None:
        stubs["pricing"].Solve(solve, timeout=30)
        stubs["predictor"].PredictSlowdown(predict, timeout=30)
        stubs["predictor"].ReportObservation(report, timeout=30)
        stubs["nodeagent"].ApplyNodePlan(nodeagent_pb2.ApplyNodePlanRequest(mps_limits=[
            nodeagent_pb2.MpsLimit(client_id=f"c{i % 8}", gpu_index=i % 4,
                                   active_thread_percentage=10 + i % 90,
                                   pinned_mem_limit_gib=1 + i % 8)]), timeout=30)
        stubs["nodeagent"].GetTelemetry(nodeagent_pb2.GetTelemetryRequest(), timeout=30)
        for call, req in ((stubs["pricing"].Solve, bad_solve),
                          (stubs["predictor"].PredictSlowdown, bad_predict)):
            try:
                call(req, timeout=30)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            else:
                raise AssertionError("a bad request was answered")

    try:
        for i in range(min(200, rounds)):
            once(i)  # warm-up
        gc.collect()
        samples = [(0, rss_mib())]
        t0 = time.perf_counter()
        every = max(1, rounds // 50)
        for i in range(1, rounds + 1):
            once(i)
            if i % every == 0 or i == rounds:
                gc.collect()
                samples.append((i, rss_mib()))
        out = _series(samples, time.perf_counter() - t0, rounds)
    finally:
        for s in servers:
            s.stop(0).wait()
    out.update(unit="7 RPCs (5 valid, 2 invalid) over 3 services")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="simulations (default 10)")
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rpc-rounds", type=int, default=2000, help="service rounds (default 2000)")
    args = ap.parse_args(argv)
    if not (1 <= args.rounds <= 10_000 and 1 <= args.rpc_rounds <= 1_000_000):
        ap.error("--rounds in 1..10000, --rpc-rounds in 1..1000000")
    out = {"rounds": soak_rounds(args.rounds, args.gpus, args.jobs, args.seed),
           "services": soak_services(args.rpc_rounds)}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
