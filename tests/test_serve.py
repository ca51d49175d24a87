"""``elastico serve``: configuration precedence and validation, TLS and mutual TLS handshakes
(with a client refused when it has no certificate), and graceful shutdown of a real process
(an in-flight Solve finishes after SIGTERM)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elastico.cli import main as cli_main
from elastico.errors import InvalidArgument
from elastico.runtime.grpc_server import channel_credentials
from elastico.cli.serve import start
from elastico.runtime.serve_config import DEFAULT_PORTS, load_serve_config
from elastico.v1 import pricing_pb2, pricing_pb2_grpc

pytest.importorskip("cryptography.x509")
from tls_certs import make_pki  # noqa: E402


# ---- configuration -----------------------------------------------------------------------------

def test_defaults_need_tls_or_an_explicit_plaintext():
    with pytest.raises(InvalidArgument, match="tls.*--plaintext"):
        load_serve_config("pricing", env={})
    cfg = load_serve_config("pricing", env={}, overrides={"plaintext": True})
    assert cfg.address == "127.0.0.1:50051" and cfg.security == "plaintext"
    assert [load_serve_config(s, env={}, overrides={"plaintext": True}).address.rsplit(":")[1]
            for s in DEFAULT_PORTS] == ["50051", "50052", "50053", "50054"]


def test_flags_beat_environment_beat_file(tmp_path):
    f = tmp_path / "elastico.toml"
    f.write_text('[serve]\nmax_concurrent_rpcs = 7\nmax_workers = 3\nplaintext = true\n'
                 '[serve.pricing]\naddress = "0.0.0.0:6000"\ngrace_s = 2.5\n')
    from_file = load_serve_config("pricing", config_path=f, env={})
    assert (from_file.address, from_file.max_concurrent_rpcs, from_file.max_workers,
            from_file.grace_s) == ("0.0.0.0:6000", 7, 3, 2.5)
    env = {"ELASTICO_PRICING_ADDRESS": "127.0.0.1:6001", "ELASTICO_MAX_CONCURRENT_RPCS": "9"}
    from_env = load_serve_config("pricing", config_path=f, env=env)
    assert (from_env.address, from_env.max_concurrent_rpcs, from_env.max_workers) == \
        ("127.0.0.1:6001", 9, 3)
    flags = load_serve_config("pricing", config_path=f, env=env,
                              overrides={"max_concurrent_rpcs": "11", "address": None})
    assert (flags.address, flags.max_concurrent_rpcs) == ("127.0.0.1:6001", 11)
    # another service's table does not leak into this one
    assert load_serve_config("predictor", config_path=f, env={}).address == "127.0.0.1:50052"


@pytest.mark.parametrize("toml, field", [
    ('[serve]\nmax_workers = 0\nplaintext = true\n', "max_workers"),
    ('[serve]\nmax_workers = 2.5\nplaintext = true\n', "max_workers"),
    ('[serve]\ngrace_s = -1\nplaintext = true\n', "grace_s"),
    ('[serve]\ngrace_s = nan\nplaintext = true\n', "grace_s"),
    ('[serve]\nplaintext = "maybe"\n', "plaintext"),
    ('[serve]\nmax_concurent_rpcs = 5\n', "config.serve.max_concurent_rpcs"),
    ('[serve.pricing]\naddress = "nohost"\n', "address"),
    ('[serve.pricing]\naddress = "h:99999"\n', "address"),
    ('[serve.tls]\ncert = "/no/such.pem"\nkey = "/no/such.key"\n', "tls.cert"),
    ('[serve.tls]\ncert = "x"\n', "tls.key"),
    ('[serve.tls]\ncertificate = "x"\n', "config.serve.tls"),
    ('serve = 3\n', "config.serve"),
    ('[serv]\nplaintext = true\n', "config.serv"),
    ('[serve]\nmetrics_port = 70000\nplaintext = true\n', "metrics_port"),
    ('[serve\n', "config"),
])
def test_bad_config_names_the_field(tmp_path, toml, field):
    f = tmp_path / "c.toml"
    f.write_text(toml)
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={})
    assert e.value.field == field, str(e.value)


@pytest.mark.parametrize("given, missing", [("--tls-cert", "--tls-key"),
                                            ("--tls-key", "--tls-cert")])
def test_half_a_tls_identity_on_the_command_line_names_the_flags(capsys, given, missing):
    # a fresh user saw "tls.key: 'missing'", a config key they never wrote
    assert cli_main(["serve", "pricing", "--port", "0", given, "/tmp/half.pem"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elastico: error: {missing}: 'missing' is not allowed (--tls-cert "
                          f"and --tls-key go together: a certificate and its private key; "
                          f"{given} is '/tmp/half.pem'"), err
    assert "tls.key" not in err and "tls.cert" not in err


def test_half_a_tls_identity_names_it_where_it_was_set(tmp_path):
    with pytest.raises(InvalidArgument) as e:  # the environment: the variables
        load_serve_config("pricing", env={"ELASTICO_TLS_KEY": "k.pem"})
    assert e.value.field == "ELASTICO_TLS_CERT" and "ELASTICO_TLS_KEY is 'k.pem'" in e.value.allowed
    f = tmp_path / "c.toml"  # the config file: its keys, as before
    f.write_text('[serve.tls]\nkey = "k.pem"\n')
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={})
    assert e.value.field == "tls.cert" and "tls.cert and tls.key go together" in e.value.allowed


def test_plaintext_with_a_certificate_is_named_in_toml_spelling(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[serve]\nplaintext = true\n[serve.tls]\ncert = "c.pem"\nkey = "k.pem"\n')
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={})
    assert (e.value.field, e.value.value) == ("plaintext", "true")  # not Python's True
    assert "false (or unset) when a TLS certificate is configured" in e.value.allowed


def test_config_must_be_a_regular_file(tmp_path):
    with pytest.raises(InvalidArgument, match="existing TOML file"):
        load_serve_config("pricing", config_path=tmp_path, env={})  # a folder
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgument, match="existing TOML file"):  # would block in open()
        load_serve_config("pricing", config_path=fifo, env={})


def test_tls_files_must_hold_pem_blocks_and_a_client_ca_needs_tls(tmp_path, pki):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={}, overrides={"tls_cert": junk,
                                                        "tls_key": pki["server_key"]})
    assert e.value.field == "tls.cert" and "PEM" in str(e.value)
    with pytest.raises(InvalidArgument) as e:  # a certificate where the key should be
        load_serve_config("pricing", env={}, overrides={"tls_cert": pki["server"],
                                                        "tls_key": pki["server"]})
    assert e.value.field == "tls.key"
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={}, overrides={"plaintext": True,
                                                        "tls_client_ca": pki["ca"]})
    assert e.value.field == "tls.client_ca"


def test_a_busy_address_or_a_key_of_another_certificate_exits_2(pki, capsys):
    import socket

    # a plain listening socket (grpc servers share ports through SO_REUSEPORT; this one
    # does not, like most other programs holding a port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli_main(["serve", "pricing", "--plaintext", "--port", str(port)]) == 2
        assert "address" in capsys.readouterr().err
    mismatched = ["--tls-cert", str(pki["server"]), "--tls-key", str(pki["client_key"])]
    assert cli_main(["serve", "pricing", "--port", "0", *mismatched]) == 2
    assert "tls" in capsys.readouterr().err


def test_grpc_itself_refuses_a_second_server_on_a_held_port():
    # the race the up-front check cannot close: grpc's SO_REUSEPORT must be off
    from elastico.runtime.grpc_server import serve_one

    kw = dict(thread_name="t", max_workers=1, max_concurrent_rpcs=1, max_message_bytes=1 << 20)
    first, port = serve_one("127.0.0.1:0", "x.Y", None, **kw)
    first.start()
    try:
        with pytest.raises(RuntimeError):
            serve_one(f"127.0.0.1:{port}", "x.Y", None, **kw)
    finally:
        first.stop(0)


def test_a_second_server_on_a_port_exits_2_instead_of_sharing_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICO_", "OTEL_"))}
    first = subprocess.Popen([sys.executable, "-m", "elastico", "serve", "pricing", "--port", "0",
                              "--plaintext"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        port = re.search(r"listening on 127\.0\.0\.1:(\d+)", first.stderr.readline()).group(1)
        # with grpc's default SO_REUSEPORT the second would bind too and serve half the calls
        second = subprocess.run([sys.executable, "-m", "elastico", "serve", "pricing", "--port",
                                 port, "--plaintext"], capture_output=True, text=True,
                                timeout=60, env=env)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    assert second.returncode == 2, second.stderr
    assert f"address: '127.0.0.1:{port}' is not allowed (a free address" in second.stderr
    assert "Traceback" not in second.stderr


@pytest.mark.parametrize("toml, field, allowed", [
    ('[serve]\nplaintext = "yes"\n', "plaintext", "a TOML boolean"),
    ('[serve]\nplaintext = 0\n', "plaintext", "a TOML boolean"),
    ('[serve]\nplaintext = true\nmax_workers = "8"\n', "max_workers", "a TOML integer"),
    ('[serve]\nplaintext = true\ngrace_s = "2"\n', "grace_s", "a TOML number"),
])
def test_toml_values_must_have_their_toml_type(tmp_path, toml, field, allowed):
    f = tmp_path / "c.toml"
    f.write_text(toml)
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={})
    assert e.value.field == field and allowed in e.value.allowed, str(e.value)
    assert "1/0" not in e.value.allowed and "yes" not in e.value.allowed


def test_environment_booleans_list_what_the_environment_accepts():
    for text in ("1", "yes", "On", "true"):
        assert load_serve_config("pricing", env={"ELASTICO_PLAINTEXT": text}).plaintext
    for text in ("0", "no", "off", ""):  # false: TLS is then required
        with pytest.raises(InvalidArgument) as e:
            load_serve_config("pricing", env={"ELASTICO_PLAINTEXT": text})
        assert (e.value.field, e.value.value) == ("tls", "not configured")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={"ELASTICO_PLAINTEXT": "maybe"})
    assert e.value.allowed == "1, true, yes or on; 0, false, no, off or empty"


def test_an_overridden_toml_value_is_still_checked(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[serve.pricing]\naddress = 51500\n')
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", config_path=f, env={},
                          overrides={"address": "127.0.0.1:0", "plaintext": True})
    assert (e.value.field, e.value.value) == ("address", 51500)
    assert cli_main(["serve", "pricing", "--config", str(f), "--port", "0", "--plaintext"]) == 2
    assert "address: 51500 is not allowed" in capsys.readouterr().err


def test_a_key_of_another_certificate_is_refused_before_grpc_sees_it(pki):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={}, overrides={"tls_cert": pki["server"],
                                                        "tls_key": pki["client_key"]})
    assert (e.value.field, e.value.value) == ("tls.key", str(pki["client_key"]))
    assert "private key of tls.cert" in e.value.allowed


def test_predictor_model_dir_must_be_creatable(tmp_path, capsys):
    bad = tmp_path / "missing-parent" / "store"
    assert cli_main(["serve", "predictor", "--plaintext", "--port", "0",
                     "--model-dir", str(bad)]) == 2
    assert "--model-dir" in capsys.readouterr().err


def test_bad_flags_exit_2_with_the_field(capsys):
    assert cli_main(["serve", "pricing", "--plaintext", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
    assert cli_main(["serve", "pricing"]) == 2  # neither TLS nor --plaintext
    assert "--plaintext" in capsys.readouterr().err
    assert cli_main(["serve", "pricing", "--plaintext", "--model-dir", "x"]) == 2
    assert cli_main(["serve", "placer", "--plaintext", "--model", "m.json"]) == 2
    assert "--model" in capsys.readouterr().err
    assert cli_main(["serve", "pricing", "--plaintext", "--pricing-address", "h:1"]) == 2
    assert "only for the placer" in capsys.readouterr().err


# ---- TLS / mutual TLS ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 'localhost', a client certificate from the same CA and one
    from a stranger's CA; written as PEM files."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def _health(port: int, creds: grpc.ChannelCredentials | None) -> int:
    target = f"localhost:{port}"
    ch = grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)
    with ch:
        return health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="elastico.v1.PricingService"),
            timeout=10).status


def test_tls_server_answers_a_client_that_trusts_its_ca(pki):
    cfg = load_serve_config("pricing", env={}, overrides={
        "address": "127.0.0.1:0", "tls_cert": pki["server"], "tls_key": pki["server_key"]})
    assert cfg.security == "tls"
    server, port = start(cfg)
    try:
        ok = channel_credentials(pki["ca"].read_bytes())
        assert _health(port, ok) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError):  # a plaintext client cannot talk to a TLS server
            _health(port, None)
    finally:
        server.stop(0).wait()


def test_mutual_tls_refuses_clients_without_a_valid_certificate(pki):
    cfg = load_serve_config("pricing", env={}, overrides={
        "address": "127.0.0.1:0", "tls_cert": pki["server"], "tls_key": pki["server_key"],
        "tls_client_ca": pki["ca"]})
    assert cfg.security == "mtls"
    server, port = start(cfg)
    ca = pki["ca"].read_bytes()
    try:
        good = channel_credentials(ca, pki["client"].read_bytes(),
                                   pki["client_key"].read_bytes())
        assert _health(port, good) == health_pb2.HealthCheckResponse.SERVING
        for bad in (channel_credentials(ca),  # no client certificate
                    channel_credentials(ca, pki["stranger"].read_bytes(),
                                        pki["stranger_key"].read_bytes())):  # wrong CA
            with pytest.raises(grpc.RpcError) as e:
                _health(port, bad)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0).wait()


# ---- a real process: graceful shutdown ----------------------------------------------------------

def _big_request(n: int = 60_000, k: int = 8, r: int = 4) -> pricing_pb2.SolveRequest:
    rng = np.random.default_rng(0)
    d = rng.uniform(0, 1, (n * k, r)) * rng.uniform(0, 2, (n * k, 1))
    u = d.sum(1) ** 0.7 * rng.uniform(0.5, 1.5, n * k)
    cap = 0.4 * d.reshape(n, k, r).max(1).sum(0)
    return pricing_pb2.SolveRequest(
        instance=pricing_pb2.PricingInstance(
            offsets=(np.arange(n + 1) * k).tolist(), utility=u.tolist(),
            demand=d.ravel().tolist(), capacity=cap.tolist()),
        max_iterations=400, gap_tolerance=1e-12)


def test_sigterm_lets_the_in_flight_solve_finish_then_exits_0():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "elastico.cli", "serve", "pricing", "--port",
                             "0", "--plaintext", "--grace-s", "60"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        m = re.search(r"listening on .*:(\d+) \(plaintext\)", line)
        assert m, line
        port = int(m.group(1))
        req = _big_request()
        result: dict = {}
        started = threading.Event()

        def call():
            with grpc.insecure_channel(f"127.0.0.1:{port}",
                                       options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
                started.set()
                try:
                    result["ok"] = pricing_pb2_grpc.PricingServiceStub(ch).Solve(req, timeout=120)
                except grpc.RpcError as e:  # pragma: no cover - the failure being tested for
                    result["err"] = e

        # One call first to learn how long a call takes here; the second is signalled half-way,
        # when the server is working on it.
        import time
        t0 = time.perf_counter()
        call()
        took = time.perf_counter() - t0
        assert "ok" in result
        result.clear()
        t = threading.Thread(target=call)
        t.start()
        started.wait(10)
        time.sleep(took / 2)
        assert t.is_alive(), ("the Solve finished before SIGTERM: make the instance bigger", result)
        proc.send_signal(signal.SIGTERM)
        t.join(120)
        assert "err" not in result, result.get("err")
        assert len(result["ok"].choice) == 60_000
        assert proc.wait(60) == 0
        rest = proc.stderr.read()
        assert "stopping" in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- Prometheus metrics -------------------------------------------------------------------------

def test_metrics_count_rpcs_by_code_and_record_the_solve():
    import urllib.request

    from prometheus_client import start_http_server

    from elastico.runtime.metrics import ServiceMetrics

    metrics = ServiceMetrics("pricing")
    cfg = load_serve_config("pricing", env={}, overrides={"address": "127.0.0.1:0",
                                                           "plaintext": True})
    server, port = start(cfg, metrics=metrics)
    http, _ = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        inst = pricing_pb2.PricingInstance(  # 2 jobs, 1 GPU: OPT = 3 at price 1
            offsets=[0, 2, 4], utility=[0, 3, 0, 2], demand=[0, 1, 0, 1], capacity=[1],
            resource_names=["nvidia.com/gpu"])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pricing_pb2_grpc.PricingServiceStub(ch)
            for _ in range(3):
                stub.Solve(pricing_pb2.SolveRequest(instance=inst), timeout=10)
            bad = pricing_pb2.PricingInstance(offsets=[0, 2, 4], utility=[0, 3, 0, 2],
                                              demand=[0, 1, 0, 1], capacity=[-1])
            with pytest.raises(grpc.RpcError):
                stub.Solve(pricing_pb2.SolveRequest(instance=bad), timeout=10)
        get = metrics.registry.get_sample_value
        method = "/elastico.v1.PricingService/Solve"
        assert get("elastico_rpc_total", {"service": "pricing", "method": method,
                                          "code": "OK"}) == 3
        assert get("elastico_rpc_total", {"service": "pricing", "method": method,
                                          "code": "INVALID_ARGUMENT"}) == 1
        assert get("elastico_rpc_duration_seconds_count",
                   {"service": "pricing", "method": method}) == 4
        assert get("elastico_pricing_solve_seconds_count") == 3
        assert get("elastico_pricing_gap") == 0.0  # the hand-worked instance certifies OPT
        assert get("elastico_pricing_price", {"resource": "nvidia.com/gpu"}) > 0
        body = urllib.request.urlopen(f"http://127.0.0.1:{http.server_port}/metrics",
                                      timeout=10).read().decode()
        assert 'elastico_rpc_total{code="INVALID_ARGUMENT"' in body
    finally:
        http.shutdown()
        server.stop(0).wait()


@pytest.mark.parametrize("flag, value, shown", [("--max-workers", "0", "0"),
                                                ("--max-concurrent-rpcs", "x", "'x'"),
                                                ("--grace-s", "-1", "-1"),
                                                ("--metrics-port", "70000", "70000")])
def test_a_bad_flag_value_names_the_flag_and_shows_a_number_as_one(flag, value, shown):
    key = flag[2:].replace("-", "_")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={}, overrides={key: value, "plaintext": True})
    assert str(e.value).startswith(f"{flag}: {shown} is not allowed")
