"""Configuration of one ElastiCo service process (``elastico serve SERVICE``): where it listens,
how many RPCs it takes at once, and its TLS identity.  Pure: reads a TOML file, a mapping of
environment variables and the command-line overrides; knows nothing of gRPC.

Precedence (highest first): command-line flags, environment, config file, defaults.

Config file (TOML; ``[serve]`` holds defaults for every service, ``[serve.SERVICE]`` overrides
them for one)::

    [serve]
    max_concurrent_rpcs = 32
    grace_s = 10.0

    [serve.tls]
    cert = "/etc/elastico/tls/tls.crt"      # PEM certificate chain of this server
    key = "/etc/elastico/tls/tls.key"       # PEM private key
    client_ca = "/etc/elastico/tls/ca.crt"  # optional: require client certificates (mutual TLS)

    [serve.pricing]
    address = "0.0.0.0:50051"

    [serve.placer]                           # placer only: where it prices and predicts
    pricing_address = "127.0.0.1:50051"     # default: in-process pricing
    predictor_address = "127.0.0.1:50052"   # default: the bundled model in-process
    upstream_ca = "/etc/elastico/tls/ca.crt"    # TLS to those services (else plaintext)
    upstream_cert = "/etc/elastico/tls/placer.crt"  # client identity for mutual TLS
    upstream_key = "/etc/elastico/tls/placer.key"

Environment: ``ELASTICO_<SERVICE>_ADDRESS`` (e.g. ``ELASTICO_PRICING_ADDRESS``),
``ELASTICO_MAX_WORKERS``, ``ELASTICO_MAX_CONCURRENT_RPCS``, ``ELASTICO_GRACE_S``,
``ELASTICO_TLS_CERT``, ``ELASTICO_TLS_KEY``, ``ELASTICO_TLS_CLIENT_CA``, ``ELASTICO_PLAINTEXT``
(``1``/``true``/``yes``), ``ELASTICO_METRICS_PORT``; placer only:
``ELASTICO_PLACER_PRICING_ADDRESS``, ``ELASTICO_PLACER_PREDICTOR_ADDRESS``,
``ELASTICO_UPSTREAM_CA``, ``ELASTICO_UPSTREAM_CERT``, ``ELASTICO_UPSTREAM_KEY``.

Plaintext is served only when asked for (``plaintext = true``, ``--plaintext`` or
``ELASTICO_PLAINTEXT=1``); otherwise a certificate and key are required.  Every bad value
raises :class:`elastico.errors.InvalidArgument` naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from elastico.errors import InvalidArgument

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["SERVICES", "DEFAULT_PORTS", "TlsConfig", "ServeConfig", "load_serve_config"]

#: The services ``elastico serve`` runs, with their default loopback ports (issue 6, local mode).
DEFAULT_PORTS: Mapping[str, int] = {"pricing": 50051, "predictor": 50052, "placer": 50053,
                                    "nodeagent": 50054}
SERVICES = tuple(DEFAULT_PORTS)

#: Placer-only settings: the services it calls and the TLS it calls them with.
_PLACER_KEYS = frozenset({"pricing_address", "predictor_address", "upstream_ca",
                          "upstream_cert", "upstream_key"})
_MAX_WORKERS = 256
_MAX_RPCS = 100_000
_MAX_GRACE_S = 3600.0


@dataclass(frozen=True)
class TlsConfig:
    """PEM file paths: the server's certificate chain and key; ``client_ca`` set = mutual TLS."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None


@dataclass(frozen=True)
class ServeConfig:
    """One service process.  ``address`` is ``host:port`` (port 0 = any free port);
    ``max_workers`` threads serve RPCs; beyond ``max_concurrent_rpcs`` in flight callers get
    ``RESOURCE_EXHAUSTED``; on SIGTERM/SIGINT in-flight RPCs get ``grace_s`` seconds to finish.
    ``tls`` None only with ``plaintext``.  ``metrics_port``: serve Prometheus metrics on
    ``http://<host of address>:metrics_port/metrics`` (None = off; 0 = any free port)."""

    service: str
    address: str
    max_workers: int = 8
    max_concurrent_rpcs: int = 32
    grace_s: float = 10.0
    tls: TlsConfig | None = None
    plaintext: bool = False
    metrics_port: int | None = None
    # placer only: the services it calls (None = in-process) and the TLS it calls them with
    pricing_address: str | None = None
    predictor_address: str | None = None
    upstream_ca: Path | None = None
    upstream_cert: Path | None = None
    upstream_key: Path | None = None

    @property
    def security(self) -> str:
        """``"mtls"``, ``"tls"`` or ``"plaintext"`` (for logs)."""
        if self.tls is None:
            return "plaintext"
        return "mtls" if self.tls.mutual else "tls"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():  # also refuses folders and FIFOs, which open() would hang on
        raise InvalidArgument("config", str(path), "an existing TOML file")
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise InvalidArgument("config", str(path), "an existing TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgument("config", str(path), f"valid TOML ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument("config", str(path), f"a readable TOML file ({e})") from None
    unknown = sorted(set(doc) - {"serve"})
    if unknown:
        raise InvalidArgument(f"config.{unknown[0]}", doc[unknown[0]],
                              "not a known table (the file has one table, [serve], with "
                              "[serve.tls] and [serve.<service>] inside)")
    return doc


def _int(field: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise InvalidArgument(field, value, f"an integer in {lo}..{hi}")
    try:
        v = int(value) if not isinstance(value, float) else None
    except (TypeError, ValueError):
        v = None
    if v is None or not lo <= v <= hi:
        raise InvalidArgument(field, value, f"an integer in {lo}..{hi}")
    return v


def _float(field: str, value: Any, lo: float, hi: float) -> float:
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi):
        raise InvalidArgument(field, value, f"a number of seconds in [{lo:g}, {hi:g}]")
    return v


def _bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise InvalidArgument(field, value, "true or false (1/0, yes/no)")


def _address(field: str, value: Any) -> str:
    if not isinstance(value, str) or ":" not in value:
        raise InvalidArgument(field, value, "host:port, e.g. 127.0.0.1:50051 or [::]:50051")
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(field, value, "host:port with a port in 0..65535")
    return value


def _pem(field: str, value: Any, kind: str) -> Path:
    """A PEM file holding a ``kind`` block ("CERTIFICATE" or "PRIVATE KEY")."""
    if not isinstance(value, (str, Path)) or not str(value):
        raise InvalidArgument(field, value, "the path of a PEM file")
    p = Path(value)
    if not p.is_file():
        raise InvalidArgument(field, str(value), "an existing, readable PEM file")
    try:
        head = p.read_bytes()[: 1 << 20]
    except OSError as e:
        raise InvalidArgument(field, str(value), f"a readable PEM file ({e})") from None
    if not re.search(rb"-----BEGIN [A-Z ]*" + kind.encode() + rb"-----", head):
        raise InvalidArgument(field, str(value), f"a PEM file with a {kind} block "
                              f"(-----BEGIN ...{kind}-----); DER or other formats are not read")
    return p


def load_serve_config(service: str, *, config_path: Path | None = None,
                      env: Mapping[str, str] | None = None,
                      overrides: Mapping[str, Any] | None = None) -> ServeConfig:
    """The configuration of ``service`` (one of :data:`SERVICES`) from the TOML file at
    ``config_path`` (optional), ``env`` (the process environment when None) and
    ``overrides`` (command-line values; None entries are ignored).  Keys of ``overrides``:
    ``address``, ``max_workers``, ``max_concurrent_rpcs``, ``grace_s``, ``tls_cert``,
    ``tls_key``, ``tls_client_ca``, ``plaintext``, ``metrics_port``; placer only
    ``pricing_address``, ``predictor_address``, ``upstream_ca``, ``upstream_cert``,
    ``upstream_key``.  Raises InvalidArgument
    on any bad value, on a half-configured TLS identity, and when neither TLS nor plaintext
    is configured."""
    if service not in SERVICES:
        raise InvalidArgument("service", service, f"one of {', '.join(SERVICES)}")
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    if config_path is not None:
        doc = _read_file(Path(config_path))
        serve = doc.get("serve", {})
        if not isinstance(serve, dict):
            raise InvalidArgument("config.serve", type(serve).__name__, "a table")
        common = {"max_workers", "max_concurrent_rpcs", "grace_s", "plaintext", "tls",
                  "metrics_port"}
        sections = ((serve, "serve", common | set(SERVICES)),
                    (serve.get(service, {}), f"serve.{service}",
                     common | {"address"} | (_PLACER_KEYS if service == "placer" else set())))
        for table, prefix, allowed in sections:
            if not isinstance(table, dict):
                raise InvalidArgument(f"config.{prefix}", type(table).__name__, "a table")
            for k, v in table.items():
                if k not in allowed:
                    raise InvalidArgument(f"config.{prefix}.{k}", v,
                                          f"one of the keys {sorted(allowed)}")
                if k == "tls":
                    if not isinstance(v, dict) or set(v) - {"cert", "key", "client_ca"}:
                        raise InvalidArgument(f"config.{prefix}.tls", v,
                                              "a table with cert, key and optional client_ca")
                    tls.update(v)
                elif k not in SERVICES:
                    raw[k] = v
    env_keys = {f"ELASTICO_{service.upper()}_ADDRESS": "address",
                "ELASTICO_MAX_WORKERS": "max_workers",
                "ELASTICO_MAX_CONCURRENT_RPCS": "max_concurrent_rpcs",
                "ELASTICO_GRACE_S": "grace_s", "ELASTICO_PLAINTEXT": "plaintext",
                "ELASTICO_METRICS_PORT": "metrics_port"}
    if service == "placer":
        env_keys.update({"ELASTICO_PLACER_PRICING_ADDRESS": "pricing_address",
                         "ELASTICO_PLACER_PREDICTOR_ADDRESS": "predictor_address",
                         "ELASTICO_UPSTREAM_CA": "upstream_ca",
                         "ELASTICO_UPSTREAM_CERT": "upstream_cert",
                         "ELASTICO_UPSTREAM_KEY": "upstream_key"})
    for name, key in env_keys.items():
        if name in env:
            raw[key] = env[name]
    for name, key in {"ELASTICO_TLS_CERT": "cert", "ELASTICO_TLS_KEY": "key",
                      "ELASTICO_TLS_CLIENT_CA": "client_ca"}.items():
        if name in env:
            tls[key] = env[name]
    for key, v in (overrides or {}).items():
        if v is None:
            continue
        if key.startswith("tls_"):
            tls[key[4:]] = v
        else:
            raw[key] = v

    cfg = ServeConfig(service=service,
                      address=_address("address", raw.get("address",
                                                          f"127.0.0.1:{DEFAULT_PORTS[service]}")))
    if "max_workers" in raw:
        cfg = replace(cfg, max_workers=_int("max_workers", raw["max_workers"], 1, _MAX_WORKERS))
    if "max_concurrent_rpcs" in raw:
        cfg = replace(cfg, max_concurrent_rpcs=_int("max_concurrent_rpcs",
                                                    raw["max_concurrent_rpcs"], 1, _MAX_RPCS))
    if raw.get("metrics_port") not in (None, ""):
        cfg = replace(cfg, metrics_port=_int("metrics_port", raw["metrics_port"], 0, 65535))
    if "grace_s" in raw:
        cfg = replace(cfg, grace_s=_float("grace_s", raw["grace_s"], 0.0, _MAX_GRACE_S))
    plaintext = _bool("plaintext", raw.get("plaintext", False))
    for key in _PLACER_KEYS:
        if raw.get(key) in (None, ""):
            continue
        if service != "placer":
            raise InvalidArgument(key, raw[key], "only for the placer")
        if key.endswith("_address"):
            cfg = replace(cfg, **{key: _address(key, raw[key])})
        else:
            cfg = replace(cfg, **{key: _pem(key, raw[key], "PRIVATE KEY" if key ==
                                            "upstream_key" else "CERTIFICATE")})
    if (cfg.upstream_cert is None) != (cfg.upstream_key is None):
        raise InvalidArgument("upstream_cert" if cfg.upstream_cert is None else "upstream_key",
                              "missing", "both a client certificate and its key, or neither")
    if cfg.upstream_cert is not None and cfg.upstream_ca is None:
        raise InvalidArgument("upstream_ca", "missing",
                              "the CA of the pricing/predictor servers, with a client identity")
    if tls.get("client_ca") and not (tls.get("cert") or tls.get("key")):
        raise InvalidArgument("tls.client_ca", str(tls["client_ca"]),
                              "only with a server certificate and key (mutual TLS needs TLS)")
    if tls:
        if "cert" not in tls or "key" not in tls:
            missing = "tls.cert" if "cert" not in tls else "tls.key"
            raise InvalidArgument(missing, "missing",
                                  "both a certificate and its key (tls.cert and tls.key)")
        if plaintext:
            raise InvalidArgument("plaintext", True, "false when a TLS certificate is configured")
        cfg = replace(cfg, tls=TlsConfig(
            cert=_pem("tls.cert", tls["cert"], "CERTIFICATE"),
            key=_pem("tls.key", tls["key"], "PRIVATE KEY"),
            client_ca=(_pem("tls.client_ca", tls["client_ca"], "CERTIFICATE")
                       if tls.get("client_ca") else None)))
    elif not plaintext:
        raise InvalidArgument(
            "tls", "not configured",
            "a certificate and key (--tls-cert/--tls-key, ELASTICO_TLS_CERT/KEY or [serve.tls]; "
            "add a client CA for mutual TLS), or --plaintext to serve unencrypted")
    return replace(cfg, plaintext=plaintext)
