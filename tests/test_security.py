"""Security by configuration (issue 9 item 4), beyond tests/test_serve.py's handshakes (which
cover the pricing service: a TLS client that trusts the CA, and mutual TLS refusing a client
without a certificate or with one from another CA):

* mutual TLS on every other service (predictor, node agent) refuses a client without a
  certificate, with a certificate from another CA, or with a self-signed one, and admits one
  from the configured CA -- the refusal happens in the handshake, so no RPC runs;
* a client refuses a server whose certificate chains to a CA it does not trust, or that is
  not for the name it dialled;
* no secrets in logs or traces: a real ``elastico serve`` process with TLS key paths, whose
  RPCs fail and succeed, writes no key material (no PEM private-key block, no base64 line of
  the key) to its stderr, and the spans it exports over OTLP carry none either.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import signal
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from elastico.runtime.grpc_server import channel_credentials, server_credentials
from elastico.nodeagent import GpuInfo, SimulatedGpuBackend
from elastico.nodeagent import server as na_server
from elastico.predictor import server as predictor_server
from elastico.predictor.service import PredictorCore
from elastico.v1 import pricing_pb2, pricing_pb2_grpc

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

TIMEOUT = 10


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, key, issuer, issuer_key, *, ca, san=None):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return obj.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """PEM bytes (and files): our CA; a server for 'localhost' and a client from it; a server
    for another name; a stranger CA with its own server and client; a self-signed client."""
    d = tmp_path_factory.mktemp("pki")
    out = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("elastico-ca", ca_key, _name("elastico-ca"), ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("other-ca", other_key, _name("other-ca"), other_key, ca=True)
    out["ca"], out["other_ca"] = _pem(ca), _pem(other)
    for who, issuer, issuer_key, san in (("server", ca, ca_key, "localhost"),
                                         ("client", ca, ca_key, None),
                                         ("wrong_name", ca, ca_key, "placer.elastico.svc"),
                                         ("other_server", other, other_key, "localhost"),
                                         ("other_client", other, other_key, None)):
        k = ec.generate_private_key(ec.SECP256R1())
        out[who] = _pem(_cert(who, k, issuer.subject, issuer_key, ca=False, san=san))
        out[who + "_key"] = _pem(k)
    k = ec.generate_private_key(ec.SECP256R1())
    out["selfsigned"] = _pem(_cert("selfsigned", k, _name("selfsigned"), k, ca=False))
    out["selfsigned_key"] = _pem(k)
    for name, data in list(out.items()):
        (d / f"{name}.pem").write_bytes(data)
    out["dir"] = d
    return out


def _health(port, creds, service=""):
    with grpc.secure_channel(f"localhost:{port}", creds) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT).status


def _servers(pki):
    """(name, build) for the predictor and node agent with mutual TLS from our CA."""
    creds = lambda: server_credentials(pki["server"], pki["server_key"], pki["ca"])  # noqa: E731
    backend = SimulatedGpuBackend([GpuInfo(0, "GPU-0", "A100-40GB", 40.0)])
    return [
        ("predictor", lambda: predictor_server.build_server(
            "127.0.0.1:0", core=PredictorCore(use_bundled=False), credentials=creds())),
        ("nodeagent", lambda: na_server.build_server(
            "127.0.0.1:0", backend=backend, node_name="n", credentials=creds())),
    ]


@pytest.mark.parametrize("which", ["predictor", "nodeagent"])
def test_mutual_tls_on_every_service_refuses_clients_without_our_certificate(pki, which):
    build = dict(_servers(pki))[which]
    server, port = build()
    server.start()
    try:
        good = channel_credentials(pki["ca"], pki["client"], pki["client_key"])
        assert _health(port, good) == health_pb2.HealthCheckResponse.SERVING
        refused = {
            "no certificate": channel_credentials(pki["ca"]),
            "another CA": channel_credentials(pki["ca"], pki["other_client"],
                                              pki["other_client_key"]),
            "self-signed": channel_credentials(pki["ca"], pki["selfsigned"],
                                               pki["selfsigned_key"]),
        }
        for why, creds in refused.items():
            with pytest.raises(grpc.RpcError) as e:
                _health(port, creds)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, why
        with pytest.raises(grpc.RpcError) as e:  # plaintext to a TLS port
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                     timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0).wait()


def _plain_server(cert, key):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    from grpc_health.v1 import health

    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_secure_port("127.0.0.1:0", server_credentials(cert, key))
    server.start()
    return server, port


@pytest.mark.parametrize("cert", ["other_server", "wrong_name"])
def test_clients_refuse_a_server_they_cannot_verify(pki, cert):
    """A server certificate from a CA the client does not trust, or for another name, fails
    the handshake on the client's side (a placer will not send bookings to an impostor)."""
    server, port = _plain_server(pki[cert], pki[cert + "_key"])
    try:
        with pytest.raises(grpc.RpcError) as e:
            _health(port, channel_credentials(pki["ca"], pki["client"], pki["client_key"]))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0).wait()


# ---- no secrets in logs or traces ------------------------------------------------------

def _key_fragments(key_pem: bytes) -> list[str]:
    """What would betray the key in a log: the PEM header, each base64 line, and the raw key
    bytes in base64 and hex."""
    body = b"".join(l for l in key_pem.splitlines() if not l.startswith(b"-----"))
    raw = base64.b64decode(body)
    lines = [l.decode() for l in key_pem.splitlines() if l and not l.startswith(b"-----")]
    return ["PRIVATE KEY-----", *lines, raw.hex(), raw.hex()[:32]]


def _otlp_receiver():
    """An OTLP/gRPC trace receiver on loopback that keeps every request's bytes."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    got: list[bytes] = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            got.append(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, got


def test_a_tls_server_writes_no_key_material_to_its_logs_or_spans(pki):
    d: Path = pki["dir"]
    receiver, otlp_port, exported = _otlp_receiver()
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp_port}",
               OTEL_EXPORTER_OTLP_INSECURE="true", OTEL_BSP_SCHEDULE_DELAY="100",
               ELASTICO_TLS_KEY=str(d / "server_key.pem"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastico.cli", "serve", "pricing", "--port", "0",
         "--tls-cert", str(d / "server.pem"), "--tls-client-ca", str(d / "ca.pem")],
        stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stderr.readline()
        m = re.search(r"listening on .*:(\d+) \(mtls\)", first)
        assert m, first
        port = int(m.group(1))
        creds = channel_credentials(pki["ca"], pki["client"], pki["client_key"])
        with grpc.secure_channel(f"localhost:{port}", creds) as ch:
            stub = pricing_pb2_grpc.PricingServiceStub(ch)
            inst = pricing_pb2.PricingInstance(offsets=[0, 2], utility=[0, 1], demand=[0, 1],
                                               capacity=[1], resource_names=["gpu"])
            stub.Solve(pricing_pb2.SolveRequest(instance=inst), timeout=TIMEOUT)
            with pytest.raises(grpc.RpcError):  # an error is logged too
                stub.Solve(pricing_pb2.SolveRequest(instance=pricing_pb2.PricingInstance(
                    offsets=[0, 1], utility=[1], demand=[1], capacity=[-1])), timeout=TIMEOUT)
        with pytest.raises(grpc.RpcError):  # a refused handshake
            _health(port, channel_credentials(pki["ca"]))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        log = first + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        receiver.stop(0)
    assert "stopped" in log
    assert exported, "the server exported no spans (OTLP not configured?)"
    spans = b"".join(exported).decode("latin-1")
    for secret in _key_fragments(pki["server_key"]):
        assert secret not in log, f"key material in the log: {secret[:20]}..."
        assert secret not in spans, f"key material in a span: {secret[:20]}..."
    # the paths may be logged; the key itself never
    assert "BEGIN" not in log
