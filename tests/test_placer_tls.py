"""The placer over TLS: its upstream calls to pricing and predictor servers that require client
certificates (mutual TLS), configured the way ``elastico serve placer`` is (``upstream_ca``,
``upstream_cert``, ``upstream_key``), and the placer server itself under mutual TLS.

Documented behaviour without a client certificate (docs/api.md, "Degradation"): pricing is
required -- the round ends ``UNAVAILABLE`` ("round abandoned, nothing applied"); the predictor
is not -- the round runs degraded on the analytic model."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("cryptography.x509")
from elastico.runtime.grpc_server import channel_credentials  # noqa: E402
from elastico.placer.rpc import wire  # noqa: E402
from elastico.placer.round import ActiveJob  # noqa: E402
from elastico.placer.server import build_server  # noqa: E402
from elastico.predictor import AnalyticSlowdown  # noqa: E402
from elastico.cli.serve import start  # noqa: E402
from elastico.runtime.serve_config import load_serve_config  # noqa: E402
from elastico.v1 import placer_pb2, placer_pb2_grpc  # noqa: E402
from test_placer_grpc import NODES, _job  # noqa: E402
from tls_certs import make_pki  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _mtls(pki) -> dict:
    return {"address": "127.0.0.1:0", "tls_cert": pki["server"], "tls_key": pki["server_key"],
            "tls_client_ca": pki["ca"]}


@pytest.fixture(scope="module")
def upstream(pki):
    """Pricing and predictor servers that refuse clients without a certificate from the CA."""
    servers, addrs = [], {}
    try:
        for service in ("pricing", "predictor"):
            cfg = load_serve_config(service, env={}, overrides=_mtls(pki))
            assert cfg.security == "mtls"
            server, port = start(cfg)
            servers.append(server)
            addrs[service] = f"127.0.0.1:{port}"
        yield addrs
    finally:
        for s in servers:
            s.stop(0).wait()


def _placer(pki, **overrides):
    cfg = load_serve_config("placer", env={},
                            overrides={"address": "127.0.0.1:0", "plaintext": True, **overrides})
    return start(cfg)


def _request():
    # 8 quarter-GPU jobs on 4 GPUs: they share GPUs, so the round asks the predictor
    jobs = [ActiveJob(_job(i, share=0.25)) for i in range(8)]
    return placer_pb2.RunRoundRequest(now=100.0, nodes=[wire.node_to_message(n) for n in NODES],
                                      jobs=[wire.job_to_message(a) for a in jobs],
                                      policy="elastico")


def _run_round(port: int, creds: grpc.ChannelCredentials | None = None):
    target = f"localhost:{port}"
    ch = grpc.secure_channel(target, creds) if creds else grpc.insecure_channel(target)
    with ch:
        return placer_pb2_grpc.PlacerServiceStub(ch).RunRound(_request(), timeout=60)


def _decisions(resp):
    return [(d.job_id, d.status, d.placement.SerializeToString(deterministic=True)
             if d.HasField("placement") else b"") for d in resp.decisions]


def test_a_placer_with_a_client_certificate_prices_and_predicts_through_mtls(pki, upstream):
    server, port = _placer(pki, pricing_address=upstream["pricing"],
                           predictor_address=upstream["predictor"], upstream_ca=pki["ca"],
                           upstream_cert=pki["client"], upstream_key=pki["client_key"])
    try:
        resp = _run_round(port)
    finally:
        server.stop(0).wait()
    assert resp.degraded == ""
    assert resp.pricing_iterations >= 1 and len(resp.prices) == 4
    # the same round as a placer pricing and predicting (the same bundled model) in-process
    server, port = _placer(pki)
    try:
        ref = _run_round(port)
    finally:
        server.stop(0).wait()
    assert _decisions(resp) == _decisions(ref)
    assert list(resp.prices) == list(ref.prices)
    assert any(d.status == "placed" for d in resp.decisions)


@pytest.mark.parametrize("identity", ["none", "stranger"])
def test_without_a_valid_client_certificate_pricing_fails_the_round(pki, upstream, identity):
    tls = {"upstream_ca": pki["ca"]}
    if identity == "stranger":  # a certificate from a CA the servers do not trust
        tls.update(upstream_cert=pki["stranger"], upstream_key=pki["stranger_key"])
    server, port = _placer(pki, pricing_address=upstream["pricing"], **tls)
    try:
        with pytest.raises(grpc.RpcError) as e:
            _run_round(port)
    finally:
        server.stop(0).wait()
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert e.value.details().startswith("round abandoned, nothing applied: pricing: UNAVAILABLE")


def test_without_a_client_certificate_the_predictor_degrades_the_round(pki, upstream):
    server, port = _placer(pki, predictor_address=upstream["predictor"], upstream_ca=pki["ca"])
    try:
        resp = _run_round(port)
    finally:
        server.stop(0).wait()
    assert resp.degraded.startswith("predictor UNAVAILABLE")
    placed = [d for d in resp.decisions if d.HasField("placement")]
    assert placed and {d.status for d in placed} == {"degraded"}
    # what a placer on the analytic model decides, placed jobs marked degraded
    ref = build_server(slowdown=AnalyticSlowdown())
    ref[0].start()
    try:
        expect = _decisions(_run_round(ref[1]))
    finally:
        ref[0].stop(0).wait()
    assert _decisions(resp) == [(j, "degraded" if p else s, p) for j, s, p in expect]


def test_a_placer_that_does_not_trust_the_servers_ca_cannot_price(pki, upstream, tmp_path):
    other = make_pki(tmp_path)  # a CA that signed neither server certificate
    server, port = _placer(pki, pricing_address=upstream["pricing"], upstream_ca=other["ca"],
                           upstream_cert=pki["client"], upstream_key=pki["client_key"])
    try:
        with pytest.raises(grpc.RpcError) as e:
            _run_round(port)
    finally:
        server.stop(0).wait()
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "pricing: UNAVAILABLE" in e.value.details()


def test_the_placer_under_mtls_refuses_a_client_without_a_certificate(pki):
    cfg = load_serve_config("placer", env={}, overrides=_mtls(pki))
    assert cfg.security == "mtls"
    server, port = start(cfg)
    ca = pki["ca"].read_bytes()
    try:
        good = channel_credentials(ca, pki["client"].read_bytes(), pki["client_key"].read_bytes())
        assert len(_run_round(port, good).decisions) == 8
        for bad in (channel_credentials(ca),
                    channel_credentials(ca, pki["stranger"].read_bytes(),
                                        pki["stranger_key"].read_bytes())):
            with pytest.raises(grpc.RpcError) as e:
                _run_round(port, bad)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.RpcError) as e:  # plaintext to a TLS server
            _run_round(port)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0).wait()


@pytest.mark.parametrize("with_ca", [True, False])
def test_a_tls_stack_starts_only_when_its_services_answer(pki, with_ca):
    from elastico.cli.up import Stack, _healthy, free_ports

    ca = pki["ca"].read_bytes()
    stack = Stack(dict(zip(("pricing", "predictor"), free_ports(2))),
                  tls=["--tls-cert", str(pki["server"]), "--tls-key", str(pki["server_key"])],
                  ca=ca if with_ca else None)
    with stack:
        # start() returned: both already answer over TLS (no waiting here)
        assert all(_healthy(stack.address(s), 5.0, ca) for s in stack.ports)
        assert not any(_healthy(stack.address(s), 5.0) for s in stack.ports)  # not plaintext
    assert stack.dead() is not None  # stopped
