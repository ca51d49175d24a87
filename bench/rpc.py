"""Round latency in-process vs through the services (issue 6 goal: grpc p99 <= 2x in-process
p99 and <= 250 ms).

    python bench/rpc.py [--gpus 512] [--jobs 1000] [--rounds 5] [--json]

Cluster: ``trace.sub_cluster(read_nodes(), gpus)``; jobs: ``workload.build_workload`` of the
bundled pod list (seed 0, ``--jobs`` pods), all pending at the last arrival -- one round of a
512-GPU cluster facing 1,000 pending jobs, policy ``elastico`` with the bundled LightGBM
model.  Each path first runs one warm-up round (shape families, predictor caches: reported
as ``*_cold_ms``), then ``--rounds`` rounds of the same input, timed by the caller, the two
paths alternating round by round so that both see the same machine state (``grpc``: placer
-> pricing + predictor, each its own process on loopback, started with
:class:`elastico.cli.up.Stack`).  Prints one JSON object: inproc_p50_ms, inproc_p99_ms,
grpc_p50_ms, grpc_p99_ms, ratio_p99 (grpc p99 / inproc p99).  Measured, never asserted.

``--profile`` adds ``breakdown``: where a round through the services spends its time, the
p50 over ``--rounds`` rounds (after one warm-up) of the ms each stage took in a round.  The
placer's servicer runs in this process (pricing and predictor still their own processes) and
the RunRound request and response are serialized and parsed as the transport would, so every
stage can be timed: ``client_encode`` (RemotePlacerPolicy.request), ``request_wire``
(serialize + parse), ``server_decode`` (nodes, jobs, bookings), ``round`` (the policy's
round, of which ``pricing`` = ``pricing_codec`` (instance encode, result decode) +
``pricing_rpc`` (the Solve call: transport, the service's decode, solve, encode), and
``predictor_rpc``), ``server_encode`` (decisions into the response), ``response_wire``
(serialize + parse), ``client_decode`` (RemotePlacerPolicy.result: the new book); ``total``:
all of it; ``inproc_round``: the same round in-process, alternating with it (same machine
state); ``predictor_calls`` per round; ``request_bytes`` / ``response_bytes``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv=None) -> int:
    from elastico import trace
    from elastico.sim import workload
    from elastico.placer.placement import ClusterState
    from elastico.placer.policies import PolicyEnv, make_policy
    from elastico.placer.rpc.remote import RemotePlacerPolicy, open_channel
    from elastico.placer.round import ActiveJob, RoundInput, run_round
    from elastico.predictor import default_slowdown_model
    from elastico.perf.throughput import ThroughputModel
    from elastico.cli.up import Stack, free_ports

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="add the per-stage breakdown of a round through the services")
    a = ap.parse_args(argv)
    nodes = trace.sub_cluster(trace.read_nodes(), a.gpus)
    tm = ThroughputModel.bundled()
    wl = workload.build_workload(trace.read_pods(), nodes, seed=0, model=tm, jobs=a.jobs)
    jobs = [ActiveJob(j) for j in wl.jobs[:a.jobs]]
    now = max(j.job.arrival_s for j in jobs)
    slow, _ = default_slowdown_model()

    def once(policy, inp) -> float:
        t0 = time.perf_counter()
        run_round(policy, inp)
        return time.perf_counter() - t0

    inp = RoundInput(now, nodes, ClusterState(nodes), jobs)
    local = make_policy("elastico", PolicyEnv(nodes, tm, slow))
    inproc: list[float] = []
    rpc: list[float] = []
    with Stack(dict(zip(("pricing", "predictor", "placer"), free_ports(3)))) as stack:
        ch = open_channel(stack.address("placer"))
        remote = RemotePlacerPolicy(ch, "elastico", PolicyEnv(nodes, tm, slow), timeout_s=600)
        cold_in, cold_rpc = once(local, inp), once(remote, inp)
        # alternated, so that both paths see the same machine (load from other processes
        # comes and goes; the services idle while the in-process round runs)
        for _ in range(a.rounds):
            inproc.append(once(local, inp))
            rpc.append(once(remote, inp))
        ch.close()
    ms = lambda xs, q: round(1000 * float(np.percentile(xs, q)), 1)  # noqa: E731
    breakdown = None
    if a.profile:
        breakdown = _breakdown(nodes, tm, slow, jobs, now, a.rounds,
                               make_policy("elastico", PolicyEnv(nodes, tm, slow)))
    out = {"gpus": a.gpus, "jobs": len(jobs), "rounds": a.rounds,
           "inproc_p50_ms": ms(inproc, 50), "inproc_p99_ms": ms(inproc, 99),
           "grpc_p50_ms": ms(rpc, 50), "grpc_p99_ms": ms(rpc, 99),
           "ratio_p99": round(float(np.percentile(rpc, 99) / np.percentile(inproc, 99)), 3),
           "inproc_cold_ms": round(1000 * cold_in, 1), "grpc_cold_ms": round(1000 * cold_rpc, 1)}
    if breakdown is not None:
        out["breakdown"] = breakdown
    print(json.dumps(out) if a.json else "\n".join(f"{k:>15} {v}" for k, v in out.items()))
    return 0


class _Context:
    """The servicer's view of an RPC with no deadline (the breakdown calls it directly)."""

    def time_remaining(self) -> float | None:
        return None

    def is_active(self) -> bool:
        return True

    def abort(self, code, details):
        raise RuntimeError(f"{code}: {details}")


def _breakdown(nodes, tm, slow, jobs, now, rounds: int, inproc_policy) -> dict:
    """``--profile``: p50 ms of each stage of a round through the services (module docstring)."""
    from collections import defaultdict

    from elastico.placer import server as placer_server
    from elastico.placer.rpc import wire
    from elastico.placer.placement import ClusterState
    from elastico.placer.policies import PolicyEnv
    from elastico.placer.rpc.remote import (RemotePlacerPolicy, RemotePricer, RemoteSlowdownModel,
                                        open_channel)
    from elastico.placer.round import RoundInput, run_round
    from elastico.cli.up import Stack, free_ports
    from elastico.v1 import placer_pb2

    # per round: stage -> seconds (summed over the stage's calls in that round)
    per_round: list[dict[str, float]] = []
    calls: dict[str, int] = defaultdict(int)

    def clocked(stage, fn):
        def call(*args, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent = per_round[-1]
                spent[stage] = spent.get(stage, 0.0) + time.perf_counter() - t0
                calls[stage] += 1
        return call

    saved = {name: getattr(wire, name) for name in ("nodes_from_messages", "book_all",
                                                    "fill_decision")}
    saved_run_round = placer_server.run_round
    with Stack(dict(zip(("pricing", "predictor"), free_ports(2)))) as stack:
        pricer = RemotePricer(open_channel(stack.address("pricing")))
        predictor = RemoteSlowdownModel(open_channel(stack.address("predictor")))
        pricer._stub.Solve = clocked("pricing_rpc", pricer._stub.Solve)
        predictor._stub.PredictSlowdown = clocked("predictor_rpc",
                                                  predictor._stub.PredictSlowdown)
        servicer = placer_server.PlacerServicer(pricer=clocked("pricing", pricer),
                                                slowdown=predictor)
        client = RemotePlacerPolicy(open_channel("127.0.0.1:9"), "elastico",  # never called
                                    PolicyEnv(nodes, tm, slow))
        servicer._decode_jobs = clocked("server_decode", servicer._decode_jobs)
        for name in ("nodes_from_messages", "book_all"):
            setattr(wire, name, clocked("server_decode", saved[name]))
        wire.fill_decision = clocked("server_encode", saved["fill_decision"])
        placer_server.run_round = clocked("round", saved_run_round)
        try:
            inp = RoundInput(now, nodes, ClusterState(nodes), jobs)
            for r in range(rounds + 1):
                if r == 1:  # the first round warms the caches (the benchmark's *_cold_ms)
                    per_round.clear()
                    calls.clear()
                per_round.append({})
                t0 = time.perf_counter()
                run_round(inproc_policy, inp)
                t1 = time.perf_counter()
                req = client.request(inp, inp.state)
                t2 = time.perf_counter()
                req_bytes = req.SerializeToString()
                wire_req = placer_pb2.RunRoundRequest.FromString(req_bytes)
                t3 = time.perf_counter()
                resp = servicer.RunRound(wire_req, _Context())
                t4 = time.perf_counter()
                resp_bytes = resp.SerializeToString()
                wire_resp = placer_pb2.RunRoundResponse.FromString(resp_bytes)
                t5 = time.perf_counter()
                client.result(inp, wire_resp)
                t6 = time.perf_counter()
                for stage, dt in (("inproc_round", t1 - t0), ("client_encode", t2 - t1),
                                  ("request_wire", t3 - t2), ("client_decode", t6 - t5),
                                  ("response_wire", t5 - t4), ("total", t6 - t1)):
                    per_round[-1][stage] = dt
        finally:
            for name, fn in saved.items():
                setattr(wire, name, fn)
            placer_server.run_round = saved_run_round
    for spent in per_round:
        spent["pricing_codec"] = spent.get("pricing", 0.0) - spent.get("pricing_rpc", 0.0)
    out = {stage: round(1000 * float(np.median([s.get(stage, 0.0) for s in per_round])), 2)
           for stage in ("inproc_round", "total", "client_encode", "request_wire",
                         "server_decode", "round", "pricing", "pricing_codec", "pricing_rpc",
                         "predictor_rpc", "server_encode", "response_wire", "client_decode")}
    out["predictor_calls"] = round(calls["predictor_rpc"] / rounds, 1)
    out["request_bytes"], out["response_bytes"] = len(req_bytes), len(resp_bytes)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
