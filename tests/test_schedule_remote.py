"""The scheduler loop pricing and predicting through real PricingService / PredictorService
servers on loopback (``elastico schedule --pricing-address/--predictor-address``), its health
endpoint and its metrics, against the Kubernetes API emulator of tests/test_kube_loop.py.

What must hold (issue 6 item 4, issue 7 item 1):

* through the services the loop decides exactly what it decides in-process (the remote pricer
  carries float64 exactly, so the decision annotations are equal);
* pricing down: the round is abandoned before any write -- no annotation, no bind, no Event --
  the loop keeps running, and schedules once pricing is back;
* predictor down: pods are still scheduled, by the analytic model; the ``elastico.round``
  span's ``round.degraded_reason`` and ``elastico_rounds_degraded_total`` say so;
* health: ``NOT_SERVING`` until the informers synced, ``SERVING`` for leader and standby,
  ``NOT_SERVING`` once the loop thread died or stopped turning;
* ``elastico schedule`` wires it all from flags, over mutual TLS, and its ``/metrics`` parses.

Workloads: ``training`` pods at ``gpu-fraction 0.5`` are elastic, so every round with one
pending prices (a ``service`` never reaches the pricer), and two of them on one GPU make the
placer ask for a co-location slowdown.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import grpc
import pytest

pytest.importorskip("kmock")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from kubernetes import client  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from elastico.runtime.grpc_server import server_credentials  # noqa: E402
from elastico.runtime.metrics import LoopMetrics, ServiceMetrics  # noqa: E402
from elastico.placer.kube import annotations as A  # noqa: E402
from elastico.placer.kube.health import LoopHealth, start_health_endpoint  # noqa: E402
from elastico.placer.kube.leader import LeaseElector  # noqa: E402
from elastico.placer.kube.loop import LoopConfig, SchedulerLoop, default_policy_factory  # noqa: E402
from elastico.placer.rpc.remote import RemotePricer, RemoteSlowdownModel, open_channel  # noqa: E402
from elastico.predictor import AnalyticSlowdown  # noqa: E402
from elastico.predictor.server import build_server as predictor_server  # noqa: E402
from elastico.pricing.server import build_server as pricing_server  # noqa: E402
from elastico.perf.throughput import ThroughputModel  # noqa: E402
from kube_emulator import Emulator  # noqa: E402
from test_kube_loop import (NS, FakeClock, Recorder, core, emu, events, make_loop,  # noqa: E402,F401
                            make_node, make_pod, pod, step, synced, wait_until)
from tls_certs import make_pki  # noqa: E402

TM = ThroughputModel.bundled()
TRAIN = {A.WORKLOAD: "training", A.GPU_FRACTION: "0.5", A.WORK: "7200"}
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _started(build, address="127.0.0.1:0", **kw):
    server, port = build(address, **kw)
    server.start()
    return server, port


def _free_port() -> int:
    """A loopback port that a pricing server just released (to restart one there later)."""
    server, port = _started(pricing_server)
    server.stop(0).wait()
    return port


def _remote_loop(make_loop, *, pricing=None, predictor=None, metrics=None, tracer=None,
                 clock=None, identity="placer-a", elector=None):
    """A started loop pricing at ``pricing`` / predicting at ``predictor`` (ports; None =
    in-process, with the analytic slowdown model)."""
    pricer = RemotePricer(open_channel(f"127.0.0.1:{pricing}")) if pricing else None
    kw = {} if tracer is None else {"tracer": tracer}
    slowdown = (RemoteSlowdownModel(open_channel(f"127.0.0.1:{predictor}"), timeout_s=5, **kw)
                if predictor else AnalyticSlowdown())
    return make_loop(throughput=TM, slowdown=slowdown, metrics=metrics, elector=elector,
                     config=LoopConfig(identity=identity, watch_timeout_s=5, round_timeout_s=20),
                     policy_factory=default_policy_factory(TM, slowdown, pricer=pricer, **kw),
                     **kw, **({} if clock is None else {"clock": clock}))


def _decisions(core, names) -> dict:
    """The decision annotations of ``names`` without the round id (it names the replica)."""
    out = {}
    for n in names:
        ann = dict(pod(core, n)["metadata"]["annotations"])
        ann.pop(A.ROUND_ID, None)
        if A.BOOKING in ann:
            b = json.loads(ann[A.BOOKING])
            b.pop("round_id")
            ann[A.BOOKING] = b
        out[n] = ann
    return out


def _cluster(core):
    make_node(core, "n1", gpus=2)
    make_node(core, "n2", gpus=1)
    for i, frac in enumerate(("0.5", "0.5", "1", "0.5")):
        make_pod(core, f"t{i}", {**TRAIN, A.GPU_FRACTION: frac})


# ---- through the services: the same decisions ------------------------------------------------
def test_remote_pricing_decides_exactly_what_in_process_pricing_decides(core, make_loop):
    metrics = ServiceMetrics("pricing")
    srv, port = _started(pricing_server, metrics=metrics)
    names = [f"t{i}" for i in range(4)]
    _cluster(core)
    clock = FakeClock()
    try:
        rep = step(_remote_loop(make_loop, pricing=port, clock=clock), core)
    finally:
        srv.stop(0)
    assert rep.abandoned == "" and rep.reserved and rep.bound
    solves = metrics.registry.get_sample_value(
        "elastico_rpc_total", {"service": "pricing", "code": "OK",
                               "method": "/elastico.v1.PricingService/Solve"})
    assert solves >= 1                                # the round really priced remotely
    remote = _decisions(core, names)

    # the reference: the same cluster and pods on a second API server, priced in-process
    other = Emulator().start()
    try:
        core2 = client.CoreV1Api(other.api_client())
        _cluster(core2)
        loop = SchedulerLoop(core2, throughput=TM, slowdown=AnalyticSlowdown(), clock=clock,
                             config=LoopConfig(identity="ref", watch_timeout_s=5))
        loop.start()
        try:
            assert loop.wait_synced(10)
            ref_rep = step(loop, core2)
            local = _decisions(core2, names)
        finally:
            loop.stop()
    finally:
        other.stop()
    assert sorted(ref_rep.reserved) == sorted(rep.reserved)
    assert remote == local


# ---- pricing down: nothing applied, the loop survives ---------------------------------------
def test_pricing_down_abandons_each_round_before_any_write_and_the_loop_recovers(core, make_loop,
                                                                                 emu):
    port = _free_port()                              # nobody serves pricing there yet
    make_node(core, "n1")
    make_pod(core, "t0", TRAIN)
    metrics = LoopMetrics()
    loop = _remote_loop(make_loop, pricing=port, metrics=metrics)
    synced(loop, core)

    rep = loop.run_round()                           # one round, looked at closely
    assert rep.leader and rep.abandoned.startswith("pricing: UNAVAILABLE")
    assert rep.reserved == rep.bound == [] and rep.decisions == {}
    ann = pod(core, "t0")["metadata"]["annotations"]
    assert ann == TRAIN                              # no decision annotation
    assert emu.server.binds == [] and events(core, "t0") == []

    stop = threading.Event()
    thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        def abandoned():
            return metrics.registry.get_sample_value("elastico_loop_rounds_total",
                                                     {"outcome": "abandoned"})
        wait_until(lambda: abandoned() >= 3, timeout=60)
        assert thread.is_alive()
        assert pod(core, "t0")["metadata"]["annotations"] == TRAIN
        assert emu.server.binds == [] and events(core, "t0") == []
        assert metrics.registry.get_sample_value("elastico_loop_rounds_total",
                                                 {"outcome": "completed"}) == 0
        srv, _ = _started(pricing_server, f"127.0.0.1:{port}")   # pricing is back
        try:
            wait_until(lambda: pod(core, "t0")["spec"].get("nodeName") == "n1", timeout=90)
        finally:
            srv.stop(0)
    finally:
        stop.set()
        thread.join(30)
    assert emu.server.binds == [(NS, "t0", "n1")]
    assert A.BOOKING in pod(core, "t0")["metadata"]["annotations"]
    assert metrics.registry.get_sample_value("elastico_binds_total") == 1


# ---- predictor down: scheduled, degraded, and said so ------------------------------------------
def test_predictor_down_still_schedules_by_the_analytic_model_and_marks_the_round(core,
                                                                                  make_loop):
    port = _free_port()                              # nobody serves the predictor there
    make_node(core, "n1", gpus=1)
    for i in range(3):
        make_pod(core, f"t{i}", TRAIN)               # three halves for one GPU: co-location
    metrics = LoopMetrics()
    tracer = Recorder()
    loop = _remote_loop(make_loop, predictor=port, metrics=metrics, tracer=tracer)
    rep = step(loop, core)
    assert rep.abandoned == ""
    assert len(rep.bound) == 1 and rep.reserved       # scheduled all the same
    placed = [d for d in rep.decisions.values() if d.assignment is not None]
    assert placed and {d.status.value for d in placed} == {"degraded"}
    rounds = [a for n, a in tracer.spans if n == "elastico.round"]
    assert len(rounds) == 1
    assert rounds[0]["round.degraded_reason"].startswith("predictor UNAVAILABLE")
    assert rounds[0]["round.degraded_reason"] in next(iter(placed)).reason
    assert rounds[0]["round.degraded"] == len(placed)      # the per-status count stays an int
    calls = [a for n, a in tracer.spans if n == "predictor.predict"]
    assert calls and all(a["predictor.fallback"].startswith("predictor UNAVAILABLE")
                         for a in calls)
    r = metrics.registry
    assert r.get_sample_value("elastico_rounds_degraded_total") == 1
    assert r.get_sample_value("elastico_placer_predictor_fallbacks_total") >= 1
    assert r.get_sample_value("elastico_round_jobs", {"status": "degraded"}) == len(placed)

    # the predictor comes back: a later round asks it again (each round starts undegraded;
    # the channel reconnects with backoff) and, answered, is not degraded
    srv, _ = _started(predictor_server, f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while True:
            tracer.spans.clear()
            step(loop, core)
            asked = [a for n, a in tracer.spans if n == "predictor.predict"]
            if asked and all("predictor.model_version" in a for a in asked):
                break
            assert time.monotonic() < deadline, asked
            time.sleep(0.5)
    finally:
        srv.stop(0)
    rounds = [a for n, a in tracer.spans if n == "elastico.round"]
    assert rounds and rounds[-1]["round.degraded"] == 0
    assert "round.degraded_reason" not in rounds[-1]
    assert r.get_sample_value("elastico_rounds_degraded_total") >= 1


# ---- health -------------------------------------------------------------------------------
def _check(port: int, creds=None) -> int:
    target = f"127.0.0.1:{port}"
    ch = grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)
    with ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                    timeout=10).status


class LoopCrash(BaseException):
    """Not an Exception: run_forever's per-round guard does not catch it, the thread dies."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_health_is_serving_for_leader_and_standby_and_not_serving_once_the_loop_died(core, emu,
                                                                                    caplog):
    caplog.set_level("INFO", logger="elastico.placer.kube.health")
    coord = client.CoordinationV1Api(emu.api_client())
    make_node(core, "n1")
    stops, threads, endpoints, loops = [], [], [], []
    metrics = {}
    try:
        for name in ("placer-a", "placer-b"):
            metrics[name] = LoopMetrics()
            loop = SchedulerLoop(core, metrics=metrics[name], throughput=TM,
                                 elector=LeaseElector(coord, NS, "elastico-placer", name),
                                 config=LoopConfig(identity=name, watch_timeout_s=5,
                                                   round_interval_s=0.2))
            stop = threading.Event()
            thread = threading.Thread(target=loop.run_forever, args=(stop,), daemon=True)
            ep = start_health_endpoint("127.0.0.1:0", LoopHealth(loop, thread), poll_s=0.05)
            loops.append(loop), stops.append(stop), threads.append(thread), endpoints.append(ep)
            # not started: not serving, and the reason names the thread
            assert _check(ep.port) == NOT_SERVING
            assert "not running" in ep.health.problem()
            # ...which at start is no alarm: logged as starting, not as a NOT_SERVING warning
            assert "health: starting (NOT_SERVING until ready: the scheduler loop thread is " \
                "not running)" in caplog.text
            assert not [r for r in caplog.records if r.levelname == "WARNING"]
            thread.start()
            if name == "placer-a":                  # a takes the Lease before b starts
                wait_until(lambda: metrics["placer-a"].registry.get_sample_value(
                    "elastico_leader") == 1)
        for ep in endpoints:
            wait_until(lambda ep=ep: _check(ep.port) == SERVING)
        wait_until(lambda: metrics["placer-b"].registry.get_sample_value(
            "elastico_loop_rounds_total", {"outcome": "standby"}) >= 1)
        assert metrics["placer-b"].registry.get_sample_value("elastico_leader") == 0
        assert _check(endpoints[1].port) == SERVING   # a standby is healthy

        def crash():
            raise LoopCrash("boom")
        loops[0].run_round = crash                    # the leader's thread dies...
        threads[0].join(30)
        assert not threads[0].is_alive()
        wait_until(lambda: _check(endpoints[0].port) == NOT_SERVING)
        assert "not running" in endpoints[0].health.problem()
        assert _check(endpoints[1].port) == SERVING   # ...the standby stays healthy
        # once it had been SERVING, losing the thread is a warning
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
            "health: NOT_SERVING: the scheduler loop thread is not running"]
    finally:
        for stop, thread, ep in zip(stops, threads, endpoints):
            stop.set()
            thread.join(30)
            ep.stop(0)


def test_health_says_a_loop_that_stopped_turning_is_not_serving(core, make_loop):
    loop = make_loop()                                # informers synced
    idle = threading.Event()
    thread = threading.Thread(target=idle.wait, daemon=True)   # alive, but never turns
    thread.start()
    try:
        now = [loop.heartbeat + 5.0]
        health = LoopHealth(loop, thread, stall_s=60.0, clock=lambda: now[0])
        assert health.problem() == ""
        now[0] = loop.heartbeat + 61.0
        assert health.problem() == "no loop turn for 61 s (limit 60 s)"
        loop.nodes.synced.clear()                     # as before the first list
        assert health.problem() == "informers not synced yet: nodes"
    finally:
        idle.set()


# ---- elastico schedule: flags, mutual TLS, /metrics ------------------------------------------
def _metric(text: str, name: str, labels: dict | None = None) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                return s.value
    raise AssertionError(f"{name}{labels or ''} not exposed")


def test_elastico_schedule_prices_and_predicts_over_mutual_tls_with_health_and_metrics(
        core, emu, tmp_path):
    pki = make_pki(tmp_path)
    creds = server_credentials(pki["server"].read_bytes(), pki["server_key"].read_bytes(),
                               pki["ca"].read_bytes())
    pm, qm = ServiceMetrics("pricing"), ServiceMetrics("predictor")
    psrv, pport = _started(pricing_server, credentials=creds, metrics=pm)
    qsrv, qport = _started(predictor_server, credentials=creds, metrics=qm)
    make_node(core, "n1", gpus=1)
    make_pod(core, "t0", TRAIN)
    make_pod(core, "t1", TRAIN)
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "emu", "user": "u"}}]}))
    log = tmp_path / "schedule.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICO_", "OTEL_"))}
    args = [sys.executable, "-m", "elastico.cli", "schedule", "--kubeconfig", str(kubeconfig),
            "--identity", "cli-1", "--lease-namespace", NS, "--round-interval", "0.2",
            "--health-address", "127.0.0.1:0", "--metrics-port", "0",
            "--tls-cert", str(pki["server"]), "--tls-key", str(pki["server_key"]),
            "--tls-client-ca", str(pki["ca"]),
            "--pricing-address", f"localhost:{pport}", "--predictor-address", f"localhost:{qport}",
            "--upstream-ca", str(pki["ca"]), "--upstream-cert", str(pki["client"]),
            "--upstream-key", str(pki["client_key"])]
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: "health on" in log.read_text(), timeout=60)
        line = next(x for x in log.read_text().splitlines() if "health on" in x)
        hport, mport = map(int, re.search(r"health on 127\.0\.0\.1:(\d+) \(mtls\); metrics on "
                                          r"http://127\.0\.0\.1:(\d+)/metrics", line).groups())
        assert f"pricing localhost:{pport}, predictor localhost:{qport}" in line
        wait_until(lambda: pod(core, "t0")["spec"].get("nodeName") == "n1"
                   or pod(core, "t1")["spec"].get("nodeName") == "n1", timeout=60)
        probe = grpc.ssl_channel_credentials(pki["ca"].read_bytes(), pki["client_key"].read_bytes(),
                                             pki["client"].read_bytes())
        wait_until(lambda: _check(hport, probe) == SERVING)
        stranger = grpc.ssl_channel_credentials(pki["ca"].read_bytes())   # no client cert
        with pytest.raises(grpc.RpcError) as e:
            _check(hport, stranger)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE

        def scrape():
            with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
                return r.read().decode()
        wait_until(lambda: _metric(scrape(), "elastico_binds_total") >= 1)
        text = scrape()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        psrv.stop(0)
        qsrv.stop(0)
    assert rc == 0, log.read_text()
    assert _metric(text, "elastico_leader") == 1
    assert _metric(text, "elastico_loop_rounds_total", {"outcome": "completed"}) >= 1
    assert _metric(text, "elastico_loop_round_duration_seconds_count") >= 1
    assert _metric(text, "elastico_events_total", {"reason": "Scheduled"}) >= 1
    assert _metric(text, "elastico_rounds_degraded_total") == 0
    # the decisions came through the services, over mutual TLS
    solve = pm.registry.get_sample_value("elastico_rpc_total", {
        "service": "pricing", "code": "OK", "method": "/elastico.v1.PricingService/Solve"})
    predict = qm.registry.get_sample_value("elastico_rpc_total", {
        "service": "predictor", "code": "OK",
        "method": "/elastico.v1.PredictorService/PredictSlowdown"})
    assert solve >= 1 and predict >= 1
    lease = client.CoordinationV1Api(emu.api_client()).read_namespaced_lease("elastico-placer", NS)
    assert lease.spec.holder_identity == ""           # released on SIGTERM


# ---- configuration: serve placer's keys and precedence -----------------------------------------
def _args(*argv):
    from elastico.cli import build_parser

    return build_parser().parse_args(["schedule", *argv])


def test_schedule_reads_the_placer_configuration_with_serves_precedence(tmp_path):
    from elastico.errors import InvalidArgument
    from elastico.cli.schedule import load_config

    pki = make_pki(tmp_path)
    toml = tmp_path / "elastico.toml"
    toml.write_text(f'[serve]\nmetrics_port = 9090\n[serve.placer]\naddress = "127.0.0.1:7000"\n'
                    f'pricing_address = "file:1"\npredictor_address = "file:2"\n'
                    f'upstream_ca = "{pki["ca"]}"\n')
    env = {"ELASTICO_PLACER_PRICING_ADDRESS": "env:1"}
    cfg = load_config(_args("--config", str(toml), "--predictor-address", "flag:2"), env=env)
    # flag > environment > file > default
    assert (cfg.pricing_address, cfg.predictor_address) == ("env:1", "flag:2")
    assert (cfg.address, cfg.metrics_port, cfg.upstream_ca) == ("127.0.0.1:7000", 9090, pki["ca"])
    assert cfg.security == "plaintext"               # loopback, no TLS configured
    # the default: loopback, off elastico up's ports 50051..50054 (its placer has 50053)
    assert load_config(_args(), env={}).address == "127.0.0.1:50055"
    # off loopback the health endpoint needs TLS, or plaintext asked for
    with pytest.raises(InvalidArgument) as e:
        load_config(_args("--health-address", "0.0.0.0:50053"), env={})
    assert e.value.field == "health address" and e.value.value == "0.0.0.0:50053"
    assert load_config(_args("--health-address", "0.0.0.0:50053", "--plaintext"),
                       env={}).security == "plaintext"
    cfg = load_config(_args("--health-address", "0.0.0.0:50053", "--tls-cert", str(pki["server"]),
                            "--tls-key", str(pki["server_key"]), "--tls-client-ca", str(pki["ca"])),
                      env={})
    assert cfg.security == "mtls"
    # a half client identity is refused, naming the missing half (serve_config's own check)
    with pytest.raises(InvalidArgument) as e:
        load_config(_args("--upstream-ca", str(pki["ca"]), "--upstream-cert",
                          str(pki["client"])), env={})
    assert e.value.field == "upstream_key"


def _schedule(*argv, timeout=60, env=None):
    env = {**{k: v for k, v in os.environ.items()
              if not k.startswith(("ELASTICO_", "OTEL_", "KUBERNETES_"))}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "elastico", "schedule", *argv],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_a_missing_or_broken_kubeconfig_exits_2_naming_it(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [unclosed\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    for argv, needle in (([], "in-cluster config"),
                         (["--kubeconfig", str(tmp_path / "none")], str(tmp_path / "none")),
                         (["--kubeconfig", str(tmp_path)], str(tmp_path)),
                         (["--kubeconfig", str(broken)], str(broken)),
                         (["--kubeconfig", str(listed)], str(listed))):
        r = _schedule(*argv, "--health-address", "127.0.0.1:0")
        assert r.returncode == 2, (argv, r.stderr)
        assert "Traceback" not in r.stderr and needle in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def _unreachable_kubeconfig(tmp_path):
    """A kubeconfig whose API server (127.0.0.1:9, the discard port) is never there."""
    path = tmp_path / "config"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


def test_a_busy_health_address_exits_2_naming_it(tmp_path):
    # a grpc server holds the port: without SO_REUSEPORT off, a second one would share it
    srv, port = _started(pricing_server)
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    try:
        r = _schedule("--kubeconfig", str(kubeconfig), "--no-leader-election",
                      "--health-address", f"127.0.0.1:{port}")
    finally:
        srv.stop(0)
    assert r.returncode == 2, r.stderr
    assert f"health address: '127.0.0.1:{port}' is not allowed (a free address" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flag, value", [
    ("--lease-name", ""), ("--lease-name", "Bad_Name"), ("--lease-name", "a..b"),
    ("--lease-namespace", "Bad_NS!"), ("--lease-namespace", "x" * 64),
    ("--lease-namespace", "ns-"),
])
def test_a_lease_name_kubernetes_would_refuse_exits_2_before_any_api_call(flag, value):
    # refused up front (Kubernetes' DNS-1123 rules), not as an API error logged every round
    r = _schedule(flag, value, "--health-address", "127.0.0.1:0")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"elastico: error: {flag}: {value!r} is not allowed (a DNS-1123"), r.stderr
    assert "Traceback" not in r.stderr


def test_sigterm_while_the_api_server_is_unreachable_stops_at_once_and_quietly(tmp_path):
    # before: the loop waited out 30 s for its first lists whatever the stop said (a pod
    # killed on rollout would hang for its grace period), and urllib3 wrote three warnings
    # per retry on top of the informers' own line, about 24 lines a second
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ELASTICO_", "OTEL_", "KUBERNETES_"))}  # as _schedule's
    proc = subprocess.Popen([sys.executable, "-m", "elastico", "schedule", "--kubeconfig",
                             str(kubeconfig), "--no-leader-election",
                             "--health-address", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "starting" in proc.stderr.readline() + proc.stderr.readline()
        time.sleep(4.0)  # the informers fail and back off meanwhile
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert stopped_in < 10.0, stopped_in  # was ~25 s: the 30 s first-list wait
    assert "urllib3" not in err
    # two informers backing off from 0.8 s: a handful of lines in 4 s, not ~100
    assert 2 <= err.count("watch broke") <= 12, err
