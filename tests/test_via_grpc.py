"""``simulate --via-grpc`` equals the in-process simulation: the same trace slice replayed
through PlacerService.RunRound (pricing through PricingService, prediction through
PredictorService serving the simulator's k-fold model) gives the same metrics (wall-clock
round times aside) and the same record for every job."""

from __future__ import annotations

import dataclasses

import pytest

from elastico import trace, workload
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.remote import RemotePlacerPolicy, RemotePricer, RemoteSlowdownModel, open_channel
from elastico.placer.server import build_server as placer_server
from elastico.predictor.server import build_server as predictor_server
from elastico.pricing.server import build_server as pricing_server
from elastico.serve_cli import _simulator_core
from elastico.simulate_cli import _slowdown_models
from elastico.simulator import simulate
from elastico.throughput import ThroughputModel


# gavel: its rounds at lease ends (RoundResult.wake_at_s) must cross the wire too
@pytest.mark.parametrize("policy_name", ["elastico", "gavel"])
def test_simulation_through_the_services_equals_the_in_process_one(policy_name):
    nodes = trace.sub_cluster(trace.read_nodes(), 16)
    tm = ThroughputModel.bundled()
    wl = workload.build_workload(trace.read_pods(), nodes, seed=3, model=tm, jobs=50)
    slow, truth = _slowdown_models("predictor")
    servers = []
    try:
        psrv, pport = pricing_server()
        dsrv, dport = predictor_server(core=_simulator_core("kfold"))
        for s in (psrv, dsrv):
            s.start()
        lsrv, lport = placer_server(
            pricer=RemotePricer(open_channel(f"127.0.0.1:{pport}")),
            slowdown=RemoteSlowdownModel(open_channel(f"127.0.0.1:{dport}"), timeout_s=30))
        lsrv.start()
        servers = [psrv, dsrv, lsrv]
        runs = []
        for via in (False, True):
            env = PolicyEnv(nodes=nodes, throughput=tm, slowdown=slow, restart_s=30.0)
            policy = (RemotePlacerPolicy(open_channel(f"127.0.0.1:{lport}"), policy_name, env,
                                         timeout_s=120) if via else make_policy(policy_name, env))
            runs.append(simulate(nodes, wl.jobs, policy, restart_s=30.0, truth=truth,
                                 activity=lambda j, c, cat=policy.catalog:
                                 cat.profile(j, c).gpu_activity))
    finally:
        for s in servers:
            s.stop(0)
    a, b = runs
    wall = {"round_ms_p50", "round_ms_p99"}
    assert {k: v for k, v in a.metrics.items() if k not in wall} == {
        k: v for k, v in b.metrics.items() if k not in wall}
    assert [dataclasses.asdict(r) for r in a.records] == [dataclasses.asdict(r) for r in b.records]
    assert a.rounds == b.rounds and a.metrics["restarts"] > 0 and a.metrics["jobs_completed"] > 0
