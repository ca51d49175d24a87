"""``simulate --via-grpc`` equals the in-process simulation: the same trace slice replayed
through PlacerService.RunRound (pricing through PricingService, prediction through
PredictorService serving the simulator's k-fold model) gives the same metrics (wall-clock
round times aside) and the same record for every job -- on the trace cluster and on a MIG
cluster (the MIG-mode GPUs the simulator sets for a MIG-aware policy travel to the placer;
the service, like the Kubernetes loop, keeps them fixed: no MIG lending)."""

from __future__ import annotations

import dataclasses

import pytest

from elastico import trace

from elastico.sim import workload
from elastico.sim.clusters import load_cluster
from elastico.model import mig_gpus_of
from elastico.placer.policies import PolicyEnv, make_policy
from elastico.placer.rpc.remote import RemotePlacerPolicy, RemotePricer, RemoteSlowdownModel, open_channel
from elastico.placer.server import build_server as placer_server
from elastico.predictor import AnalyticSlowdown
from elastico.predictor.server import build_server as predictor_server
from elastico.pricing.server import build_server as pricing_server
from elastico.cli.serve import _simulator_core
from elastico.sim.simulator import slowdown_models as _slowdown_models
from elastico.sim.simulator import simulate
from elastico.perf.throughput import ThroughputModel


class _Configs:
    """``policy`` that remembers the configurations its rounds placed."""

    def __init__(self, policy):
        self._policy, self.configs = policy, set()

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def __call__(self, inp, state):
        result = self._policy(inp, state)
        self.configs |= {d.config for d in result.decisions.values() if d.config is not None}
        return result


# gavel: its rounds at lease ends (RoundResult.wake_at_s) must cross the wire too;
# a100-mig: elastico places MIG instances (the simulator's MIG-mode GPUs reach the placer),
# with MIG mode fixed and with MIG lending (the mode changes cross the wire both ways)
@pytest.mark.parametrize("policy_name,cluster,lending", [
    ("elastico", "trace", True), ("gavel", "trace", True), ("elastico", "a100-mig", False),
    ("elastico", "a100-mig", True)])
def test_simulation_through_the_services_equals_the_in_process_one(policy_name, cluster, lending):
    tm = ThroughputModel.bundled()
    if cluster == "trace":
        nodes = trace.sub_cluster(trace.read_nodes(), 16)
        wl = workload.build_workload(trace.read_pods(), nodes, seed=3, model=tm, jobs=50)
    else:
        nodes = load_cluster(cluster).nodes(16, trace.read_nodes())
        # with lending: a workload that lends and returns (3 mode changes in-process)
        wl = workload.build_workload(trace.read_pods(), nodes, seed=3 if lending else 0,
                                     load=None, model=tm, jobs=64 if lending else 16)
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
        runs, policies = [], []
        for via in (False, True):
            env = PolicyEnv(nodes=nodes, throughput=tm, slowdown=slow, restart_s=30.0,
                            mig_lending=lending)
            policy = _Configs(RemotePlacerPolicy(open_channel(f"127.0.0.1:{lport}"),
                                                 policy_name, env, timeout_s=120)
                              if via else make_policy(policy_name, env))
            policies.append(policy)
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
    assert a.rounds == b.rounds and a.metrics["jobs_completed"] > 0
    if cluster == "trace":
        assert a.metrics["restarts"] > 0
    else:  # the case is about MIG: the remote round placed MIG instances too
        assert any(c.mig_profile for c in policies[1].configs)
        # and with lending, changed modes (both runs the same times: the metrics are equal)
        assert (a.metrics["mig_mode_switches"] > 0) is lending


def test_the_remote_policy_sends_the_mig_gpus_the_simulator_sets_for_its_policy():
    """elastico uses MIG instances: the simulator puts the nodes' labelled MIG GPUs in MIG
    mode (uses_mig) and each request's nodes carry them; elastico-no-rst does not: none."""
    nodes = load_cluster("a100-mig").nodes(16, trace.read_nodes())
    env = PolicyEnv(nodes=nodes, throughput=ThroughputModel.bundled(), slowdown=AnalyticSlowdown())
    ch = open_channel("127.0.0.1:9")  # never called
    for name in ("elastico", "elastico-no-rst", "gavel"):
        remote = RemotePlacerPolicy(ch, name, env)
        assert remote.uses_mig is getattr(make_policy(name, env), "uses_mig", False)
        want = mig_gpus_of(nodes) if remote.uses_mig else []
        assert [(i, g) for i, m in enumerate(remote._nodes) for g in m.mig_gpus] == want
    assert RemotePlacerPolicy(ch, "elastico", env).uses_mig and mig_gpus_of(nodes)
