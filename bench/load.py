"""Load test of the ElastiCo services on loopback (issue 9 item 3, issue 6 goal): ``--clients``
concurrent clients (default 64) call PredictSlowdown, Solve and GetTelemetry in turn for
``--seconds`` (default 30) against ``elastico serve`` processes started here, each with
``--max-concurrent-rpcs`` (default 32, below the client count on purpose).  Prints one JSON
object: per RPC the calls, successes, throughput (successful calls/s), p50/p99 latency of the
successful calls (ms) and the errors by status code, plus the totals and the settings.

The issue 6 goal holds when every error is ``RESOURCE_EXHAUSTED`` (the configured bound doing
its job) and the services answer again once the load stops (``recovered``).

Clients are threads spread over ``--procs`` processes (the client side must not be the
bottleneck of one GIL).  Bounded: the run stops after ``--seconds``; every call has a 10 s
deadline; services are stopped with SIGTERM at the end.

    python bench/load.py                       # 64 clients, 30 s
    python bench/load.py --clients 16 --seconds 5 --max-concurrent-rpcs 8

Who uses it: docs/reliability.md (the numbers); tests/test_load.py runs :func:`drive` in a
short form.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

CALL_TIMEOUT_S = 10.0


@dataclass
class Tally:
    """One RPC's results: latencies (s) of the successful calls, error codes by name."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)

    def merge(self, other: "Tally") -> None:
        self.latencies += other.latencies
        self.errors.update(other.errors)

    def summary(self, seconds: float) -> dict:
        import numpy as np

        lat = np.array(self.latencies) * 1e3
        ok = len(lat)
        return {"calls": ok + sum(self.errors.values()), "ok": ok,
                "throughput_rps": round(ok / seconds, 1),
                "p50_ms": round(float(np.percentile(lat, 50)), 2) if ok else None,
                "p99_ms": round(float(np.percentile(lat, 99)), 2) if ok else None,
                "errors": dict(sorted(self.errors.items()))}


def drive(calls: Sequence[tuple[str, Callable[[], object]]], clients: int, seconds: float
          ) -> dict[str, Tally]:
    """``clients`` threads, each calling ``calls`` round-robin (client ``i`` starts at
    ``calls[i % len(calls)]``) until ``seconds`` have passed.  A call is
    ``(name, fn)``; ``fn()`` does one RPC and raises grpc.RpcError on failure.  Returns the
    tally per name.  Other exceptions are counted under their type name (never hidden)."""
    import grpc

    tallies = [{name: Tally() for name, _ in calls} for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    end_at = [0.0]

    def client(i: int) -> None:
        mine = tallies[i]
        k = i % len(calls)
        start.wait()
        while time.perf_counter() < end_at[0]:
            name, fn = calls[k]
            k = (k + 1) % len(calls)
            t0 = time.perf_counter()
            try:
                fn()
            except grpc.RpcError as e:
                mine[name].errors[e.code().name] += 1
            except Exception as e:  # noqa: BLE001 -- counted, not hidden
                mine[name].errors[type(e).__name__] += 1
            else:
                mine[name].latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    end_at[0] = time.perf_counter() + seconds
    start.wait()
    for t in threads:
        t.join(seconds + CALL_TIMEOUT_S + 30)
    out = {name: Tally() for name, _ in calls}
    for t in tallies:
        for name, tally in t.items():
            out[name].merge(tally)
    return out


# ---- the requests ------------------------------------------------------------------------

def predict_request(pairs: int = 8):
    from elastico.v1 import predictor_pb2 as pb

    jobs = ["ResNet-50 (batch size 64)", "LM (batch size 20)", "A3C", "CycleGAN",
            "Transformer (batch size 128)"]
    return pb.PredictSlowdownRequest(gpu_model="V100M16", include_b=True, pairs=[
        pb.ProfilePair(a=pb.JobProfile(job_type=jobs[i % 5], sm_activity=0.1 * (i % 9)),
                       b=pb.JobProfile(job_type=jobs[(i + 2) % 5]))
        for i in range(pairs)])


def solve_request(jobs: int = 200, seed: int = 0):
    """A pricing instance of ``jobs`` jobs x 4 configurations (a wait first) x 2 resources."""
    import numpy as np

    from elastico.v1 import pricing_pb2

    rng = np.random.default_rng(seed)
    k, r = 4, 2
    d = rng.uniform(0, 1, (jobs * k, r))
    d[::k] = 0.0
    u = d.sum(1) ** 0.8 * rng.uniform(0.5, 1.5, jobs * k)
    return pricing_pb2.SolveRequest(instance=pricing_pb2.PricingInstance(
        offsets=(np.arange(jobs + 1) * k).tolist(), utility=u.tolist(), demand=d.ravel().tolist(),
        capacity=(0.4 * d.reshape(jobs, k, r).max(1).sum(0)).tolist(),
        resource_names=["nvidia.com/gpu", "memory_gib"]))


def service_calls(ports: dict[str, int]):
    """``(name, fn)`` for each RPC of the load, each client with its own channels."""
    import grpc

    from elastico.v1 import (nodeagent_pb2, nodeagent_pb2_grpc, predictor_pb2_grpc,
                             pricing_pb2_grpc)

    calls = []
    if "predictor" in ports:
        stub = predictor_pb2_grpc.PredictorServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{ports['predictor']}"))
        req = predict_request()
        calls.append(("PredictSlowdown", lambda: stub.PredictSlowdown(req, timeout=CALL_TIMEOUT_S)))
    if "pricing" in ports:
        pstub = pricing_pb2_grpc.PricingServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{ports['pricing']}"))
        sreq = solve_request()
        calls.append(("Solve", lambda: pstub.Solve(sreq, timeout=CALL_TIMEOUT_S)))
    if "nodeagent" in ports:
        nstub = nodeagent_pb2_grpc.NodeAgentServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{ports['nodeagent']}"))
        treq = nodeagent_pb2.GetTelemetryRequest()
        calls.append(("GetTelemetry", lambda: nstub.GetTelemetry(treq, timeout=CALL_TIMEOUT_S)))
    return calls


def _worker(ports: dict[str, int], clients: int, seconds: float) -> dict[str, Tally]:
    return drive(service_calls(ports), clients, seconds)


# ---- the services ------------------------------------------------------------------------

def start_services(max_concurrent_rpcs: int, max_workers: int) -> tuple[dict[str, int], list]:
    """``elastico serve`` processes for pricing, predictor and nodeagent (simulated GPUs) on
    127.0.0.1, ports chosen by the servers; returns (ports, processes)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", ELASTICO_GPU_BACKEND="simulated",
               ELASTICO_SIMULATED_GPUS="8")
    procs, ports = [], {}
    for svc in ("pricing", "predictor", "nodeagent"):
        p = subprocess.Popen(
            [sys.executable, "-m", "elastico.cli", "serve", svc, "--port", "0", "--plaintext",
             "--max-concurrent-rpcs", str(max_concurrent_rpcs), "--max-workers",
             str(max_workers), "--grace-s", "5"],
            stderr=subprocess.PIPE, text=True, env=env)
        procs.append(p)
        for _ in range(20):  # the "listening on" line, after any warnings
            line = p.stderr.readline()
            m = re.search(r"listening on .*:(\d+) ", line)
            if m:
                ports[svc] = int(m.group(1))
                break
            if not line:
                stop_services(procs)
                raise RuntimeError(f"elastico serve {svc} did not start")
        threading.Thread(target=p.stderr.read, daemon=True).start()  # keep the pipe drained
    return ports, procs


def stop_services(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def recovered(ports: dict[str, int]) -> bool:
    """Every RPC of the load answers OK once more, one call at a time."""
    return all(_ok(fn) for _, fn in service_calls(ports))


def _ok(fn) -> bool:
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--procs", type=int, default=4, help="client processes (default 4)")
    ap.add_argument("--max-concurrent-rpcs", type=int, default=32)
    ap.add_argument("--max-workers", type=int, default=8)
    args = ap.parse_args(argv)
    if not (1 <= args.procs <= args.clients and 0 < args.seconds <= 600):
        ap.error("need 1 <= --procs <= --clients and 0 < --seconds <= 600")
    ports, procs = start_services(args.max_concurrent_rpcs, args.max_workers)
    try:
        share = [args.clients // args.procs + (i < args.clients % args.procs)
                 for i in range(args.procs)]
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.procs) as pool:
            parts = list(pool.map(_worker, [ports] * args.procs, share,
                                  [args.seconds] * args.procs))
        wall = time.perf_counter() - t0
        total: dict[str, Tally] = {}
        for part in parts:
            for name, t in part.items():
                total.setdefault(name, Tally()).merge(t)
        ok_after = recovered(ports)
    finally:
        stop_services(procs)
    rpcs = {name: t.summary(args.seconds) for name, t in total.items()}
    errors = Counter()
    for t in total.values():
        errors.update(t.errors)
    report = {
        "clients": args.clients, "seconds": args.seconds, "client_processes": args.procs,
        "max_concurrent_rpcs_per_service": args.max_concurrent_rpcs,
        "max_workers_per_service": args.max_workers, "wall_s": round(wall, 1),
        "cpus": os.cpu_count(), "rpcs": rpcs,
        "total_ok": sum(r["ok"] for r in rpcs.values()),
        "errors_by_code": dict(sorted(errors.items())),
        "only_resource_exhausted": set(errors) <= {"RESOURCE_EXHAUSTED"},
        "recovered": ok_after,
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0 if report["only_resource_exhausted"] and ok_after else 1


if __name__ == "__main__":
    sys.exit(main())
