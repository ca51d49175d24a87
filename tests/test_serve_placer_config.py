"""The placer's own settings of ``elastico serve placer`` (elastico/runtime/serve_config.py): where it
prices (``pricing_address``) and predicts (``predictor_address``) and the TLS it calls them
with (``upstream_ca``, ``upstream_cert``, ``upstream_key``): flags > environment > TOML file,
and every bad value an InvalidArgument naming the key and the value."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography.x509")
from elastico.cli import main as cli_main  # noqa: E402
from elastico.errors import InvalidArgument  # noqa: E402
from elastico.runtime.serve_config import load_serve_config  # noqa: E402
from tls_certs import make_pki  # noqa: E402

PLAIN = {"plaintext": True}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _toml(tmp_path, body: str):
    f = tmp_path / "elastico.toml"
    f.write_text("[serve]\nplaintext = true\n" + body)
    return f


def test_defaults_price_and_predict_in_process():
    cfg = load_serve_config("placer", env={}, overrides=PLAIN)
    assert (cfg.pricing_address, cfg.predictor_address, cfg.upstream_ca, cfg.upstream_cert,
            cfg.upstream_key) == (None, None, None, None, None)
    assert cfg.address == "127.0.0.1:50053"


def test_addresses_flags_beat_environment_beat_file(tmp_path):
    f = _toml(tmp_path, '[serve.placer]\npricing_address = "10.0.0.1:7001"\n'
                        'predictor_address = "10.0.0.1:7002"\n')
    cfg = load_serve_config("placer", config_path=f, env={})
    assert (cfg.pricing_address, cfg.predictor_address) == ("10.0.0.1:7001", "10.0.0.1:7002")
    env = {"ELASTICO_PLACER_PRICING_ADDRESS": "10.0.0.2:7001"}
    cfg = load_serve_config("placer", config_path=f, env=env)
    assert (cfg.pricing_address, cfg.predictor_address) == ("10.0.0.2:7001", "10.0.0.1:7002")
    cfg = load_serve_config("placer", config_path=f, env=env,
                            overrides={"predictor_address": "[::1]:7003", "pricing_address": None})
    assert (cfg.pricing_address, cfg.predictor_address) == ("10.0.0.2:7001", "[::1]:7003")


def test_upstream_tls_flags_beat_environment_beat_file(tmp_path, pki):
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other")
    # (upstream TLS needs an upstream address to be used on)
    f = _toml(tmp_path, f'[serve.placer]\npricing_address = "127.0.0.1:7001"\n'
                        f'upstream_ca = "{pki["ca"]}"\n'
                        f'upstream_cert = "{pki["client"]}"\nupstream_key = "{pki["client_key"]}"\n')
    cfg = load_serve_config("placer", config_path=f, env={})
    assert (cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key) == (
        pki["ca"], pki["client"], pki["client_key"])
    env = {"ELASTICO_UPSTREAM_CA": str(other["ca"]), "ELASTICO_UPSTREAM_CERT": str(other["client"]),
           "ELASTICO_UPSTREAM_KEY": str(other["client_key"])}
    cfg = load_serve_config("placer", config_path=f, env=env)
    assert (cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key) == (
        other["ca"], other["client"], other["client_key"])
    cfg = load_serve_config("placer", config_path=f, env=env,
                            overrides={"upstream_ca": pki["ca"], "upstream_cert": pki["stranger"],
                                       "upstream_key": pki["stranger_key"]})
    assert (cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key) == (
        pki["ca"], pki["stranger"], pki["stranger_key"])
    # a CA alone: TLS to the upstream services without a client identity
    cfg = load_serve_config("placer", env={"ELASTICO_UPSTREAM_CA": str(pki["ca"]),
                                           "ELASTICO_PLACER_PREDICTOR_ADDRESS": "h:7002"},
                            overrides=PLAIN)
    assert (cfg.upstream_ca, cfg.upstream_cert) == (pki["ca"], None)


def test_an_empty_value_means_unset_so_a_flag_can_clear_the_environment():
    env = {"ELASTICO_PLACER_PRICING_ADDRESS": "10.0.0.2:7001"}
    cfg = load_serve_config("placer", env=env, overrides={**PLAIN, "pricing_address": ""})
    assert cfg.pricing_address is None


@pytest.mark.parametrize("key, value", [
    ("pricing_address", "nohost"),
    ("pricing_address", "h:99999"),
    ("pricing_address", ":7001"),
    ("predictor_address", "h:port"),
    ("predictor_address", 7002),
])
def test_bad_addresses_name_the_key_and_the_value(key, value):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={**PLAIN, key: value})
    assert (e.value.field, e.value.value) == (key, value)
    assert str(e.value).startswith(f"{key}: {value!r}") and "host:port" in str(e.value)


@pytest.mark.parametrize("env_name, key", [
    ("ELASTICO_PLACER_PRICING_ADDRESS", "pricing_address"),
    ("ELASTICO_PLACER_PREDICTOR_ADDRESS", "predictor_address"),
])
def test_bad_addresses_from_the_environment_name_the_key(env_name, key):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={env_name: "localhost"}, overrides=PLAIN)
    assert (e.value.field, e.value.value) == (key, "localhost")


def test_bad_pem_files_name_the_key_and_the_path(tmp_path, pki):
    junk = tmp_path / "junk.pem"
    junk.write_text("not PEM\n")
    cases = [({"upstream_ca": tmp_path / "missing.pem"}, "upstream_ca", "existing"),
             ({"upstream_ca": tmp_path}, "upstream_ca", "existing"),  # a folder
             ({"upstream_ca": junk}, "upstream_ca", "CERTIFICATE"),
             ({"upstream_ca": pki["ca"], "upstream_cert": pki["client_key"],
               "upstream_key": pki["client_key"]}, "upstream_cert", "CERTIFICATE"),
             ({"upstream_ca": pki["ca"], "upstream_cert": pki["client"],
               "upstream_key": pki["client"]}, "upstream_key", "PRIVATE KEY")]
    for overrides, key, allowed in cases:
        with pytest.raises(InvalidArgument) as e:
            load_serve_config("placer", env={}, overrides={**PLAIN, **overrides})
        assert e.value.field == key, (overrides, str(e.value))
        assert e.value.value == str(overrides[key]) and allowed in e.value.allowed


def test_a_client_identity_needs_both_halves_and_a_ca(pki):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={**PLAIN, "upstream_ca": pki["ca"],
                                                       "upstream_cert": pki["client"]})
    assert (e.value.field, e.value.value) == ("upstream_key", "missing")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={**PLAIN, "upstream_ca": pki["ca"],
                                                       "upstream_key": pki["client_key"]})
    assert (e.value.field, e.value.value) == ("upstream_cert", "missing")
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={**PLAIN, "upstream_cert": pki["client"],
                                                       "upstream_key": pki["client_key"]})
    assert (e.value.field, e.value.value) == ("upstream_ca", "missing")


def test_placer_keys_belong_to_the_placer_only(tmp_path):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("pricing", env={}, overrides={**PLAIN, "pricing_address": "h:1"})
    assert (e.value.field, e.value.value) == ("pricing_address", "h:1")
    assert "only for the placer" in str(e.value)
    for body, field in (('[serve.pricing]\npredictor_address = "h:1"\n',
                         "config.serve.pricing.predictor_address"),
                        ('pricing_address = "h:1"\n', "config.serve.pricing_address"),
                        ('[serve.placer]\nupstream = "x"\n', "config.serve.placer.upstream")):
        f = _toml(tmp_path, body)
        with pytest.raises(InvalidArgument) as e:
            load_serve_config("pricing" if "pricing]" in body else "placer", config_path=f,
                              env={})
        assert e.value.field == field, str(e.value)
    # the placer's environment names are not read by the other services
    cfg = load_serve_config("pricing", env={"ELASTICO_PLACER_PRICING_ADDRESS": "nohost"},
                            overrides=PLAIN)
    assert cfg.pricing_address is None


def test_bad_placer_flags_exit_2_naming_the_key(capsys, pki):
    assert cli_main(["serve", "placer", "--plaintext", "--port", "0",
                     "--pricing-address", "nohost"]) == 2
    err = capsys.readouterr().err
    assert "pricing_address" in err and "'nohost'" in err
    assert cli_main(["serve", "placer", "--plaintext", "--port", "0", "--upstream-ca",
                     str(pki["ca"]), "--upstream-cert", str(pki["client"])]) == 2
    assert "upstream_key" in capsys.readouterr().err
    assert cli_main(["serve", "placer", "--plaintext", "--port", "0",
                     "--upstream-ca", str(pki["client_key"])]) == 2
    err = capsys.readouterr().err
    assert "upstream_ca" in err and str(pki["client_key"]) in err


def test_upstream_tls_needs_an_upstream_address_and_a_matching_key(pki, capsys):
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={**PLAIN, "upstream_ca": pki["ca"]})
    assert (e.value.field, e.value.value) == ("upstream_ca", str(pki["ca"]))
    assert "pricing_address or predictor_address" in e.value.allowed
    assert cli_main(["serve", "placer", "--plaintext", "--port", "0",
                     "--upstream-ca", str(pki["ca"])]) == 2
    assert "upstream_ca" in capsys.readouterr().err
    # a client certificate with the key of another one fails at startup, not at each call
    with pytest.raises(InvalidArgument) as e:
        load_serve_config("placer", env={}, overrides={
            **PLAIN, "pricing_address": "127.0.0.1:7001", "upstream_ca": pki["ca"],
            "upstream_cert": pki["client"], "upstream_key": pki["server_key"]})
    assert (e.value.field, e.value.value) == ("upstream_key", str(pki["server_key"]))
    assert "private key of upstream_cert" in e.value.allowed
