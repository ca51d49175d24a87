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

import ipaddress
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

__all__ = ["SERVICES", "DEFAULT_PORTS", "TlsConfig", "ServeConfig", "load_serve_config",
           "overrides_from_args", "check_key_pair", "check_address", "is_loopback"]

#: The services ``elastico serve`` runs, with their default loopback ports (issue 6, local mode).
DEFAULT_PORTS: Mapping[str, int] = {"pricing": 50051, "predictor": 50052, "placer": 50053,
                                    "nodeagent": 50054}
SERVICES = tuple(DEFAULT_PORTS)

#: Placer-only settings: the services it calls and the TLS it calls them with.
_PLACER_KEYS = frozenset({"pricing_address", "predictor_address", "upstream_ca",
                          "upstream_cert", "upstream_key"})
#: The settings a command line may override (:func:`load_serve_config`'s ``overrides``), each
#: from the flag of the same name; ``address`` is the command's own (``--address``/``--port``,
#: ``--health-address``).
_OVERRIDE_KEYS = ("max_workers", "max_concurrent_rpcs", "grace_s", "tls_cert", "tls_key",
                  "tls_client_ca", "plaintext", "metrics_port", *sorted(_PLACER_KEYS))
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


def _int(field: str, value: Any, lo: int, hi: int, strict: bool = False) -> int:
    """``strict``: a TOML value, which must be a TOML integer (``"8"`` is a string there)."""
    if isinstance(value, bool) or (strict and not isinstance(value, int)):
        raise InvalidArgument(field, value, f"an integer in {lo}..{hi}"
                              + (" (a TOML integer, unquoted)" if strict else ""))
    try:
        v = int(value) if not isinstance(value, float) else None
    except (TypeError, ValueError):
        v = None
    if v is None or not lo <= v <= hi:
        raise InvalidArgument(field, value, f"an integer in {lo}..{hi}")
    return v


def _float(field: str, value: Any, lo: float, hi: float, strict: bool = False) -> float:
    """``strict``: a TOML value, which must be a TOML number."""
    if strict and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InvalidArgument(field, value,
                              f"a number of seconds in [{lo:g}, {hi:g}] (a TOML number, unquoted)")
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi):
        raise InvalidArgument(field, value, f"a number of seconds in [{lo:g}, {hi:g}]")
    return v


#: What an environment variable (or a string flag value) may say for a boolean.
_TEXT_BOOLS = {"1": True, "true": True, "yes": True, "on": True,
               "0": False, "false": False, "no": False, "off": False, "": False}


def _bool(field: str, value: Any, strict: bool = False) -> bool:
    """``strict``: a TOML value, which has real booleans -- only ``true``/``false``."""
    if isinstance(value, bool):
        return value
    if strict:
        raise InvalidArgument(field, value, "true or false (a TOML boolean, unquoted)")
    if isinstance(value, str) and value.strip().lower() in _TEXT_BOOLS:
        return _TEXT_BOOLS[value.strip().lower()]
    raise InvalidArgument(field, value, "1, true, yes or on; 0, false, no, off or empty")


def check_address(field: str, value: Any, *, listen: bool = True) -> str:
    """``value`` as a ``host:port`` address (``[v6]:port`` for IPv6); ``listen``: an address to
    listen on, where port 0 picks a free one -- an address to call needs a port in
    1..65535.  Raises InvalidArgument naming ``field``."""
    lo = 0 if listen else 1
    if not isinstance(value, str) or ":" not in value:
        raise InvalidArgument(field, value, "host:port, e.g. 127.0.0.1:50051 or [::]:50051")
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not lo <= int(port) <= 65535:
        raise InvalidArgument(field, value, f"host:port with a port in {lo}..65535")
    return value


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` listens on the loopback interface only (``127.0.0.0/8``, ``::1``,
    ``localhost``), or is a unix socket (grpc's ``unix:PATH``, ``unix-abstract:NAME``), which
    only this host reaches.  ``0.0.0.0``, ``[::]``, a host name or a routable address are
    reachable from other hosts."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _address(field: str, value: Any) -> str:
    return check_address(field, value)


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


def _path(field: str, value: Any) -> str:
    """A path-valued setting that a higher-precedence source overrides: only its type is
    checked (the file may exist only where that source is not used)."""
    if not isinstance(value, (str, Path)) or not str(value):
        raise InvalidArgument(field, value, "the path of a PEM file")
    return str(value)


def check_key_pair(cert_field: str, cert: Path, key_field: str, key: Path) -> None:
    """Refuses a private key that does not belong to the certificate (or that is encrypted,
    which grpc cannot use) at startup, before grpc would fail -- the server at bind, with
    only a C-core log line, a client at its first handshake.  The standard library's TLS
    (OpenSSL) checks the pair; nothing is added to the dependencies."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        # a password callback: an encrypted key fails here instead of prompting on the tty
        ctx.load_cert_chain(str(cert), str(key), password=lambda: b"")
    except ssl.SSLError as e:
        raise InvalidArgument(key_field, str(key),
                              f"the unencrypted private key of {cert_field} {str(cert)!r} "
                              f"({e.reason or e})") from None
    except OSError as e:
        raise InvalidArgument(key_field, str(key), f"a readable PEM file ({e})") from None


def _setting(key: str, value: Any, strict: bool) -> Any:
    """One non-TLS setting checked and converted; ``strict``: it comes from the TOML file.
    Returns None for an empty environment/flag value (= not set)."""
    if not strict and value == "" and key in ("metrics_port", *_PLACER_KEYS):
        return None
    if key == "address":
        return _address(key, value)
    if key.endswith("_address"):  # an address the placer calls
        return check_address(key, value, listen=False)
    if key == "max_workers":
        return _int(key, value, 1, _MAX_WORKERS, strict)
    if key == "max_concurrent_rpcs":
        return _int(key, value, 1, _MAX_RPCS, strict)
    if key == "metrics_port":
        return _int(key, value, 0, 65535, strict)
    if key == "grace_s":
        return _float(key, value, 0.0, _MAX_GRACE_S, strict)
    if key == "plaintext":
        return _bool(key, value, strict)
    if key in _PLACER_KEYS:  # a PEM path: its file is read once it wins (below)
        return _path(key, value)
    raise InvalidArgument(key, value, "a known setting")  # pragma: no cover - keys are fixed


_NUMBERS = ("max_workers", "max_concurrent_rpcs", "grace_s", "metrics_port")


#: what a TLS identity's halves are called where they were set (the config file's keys in
#: [serve.tls], the environment variables, the flags)
_TLS_NAMES = {"file": {"cert": "tls.cert", "key": "tls.key"},
              "env": {"cert": "ELASTICO_TLS_CERT", "key": "ELASTICO_TLS_KEY"},
              "flag": {"cert": "--tls-cert", "key": "--tls-key"}}


def _flag(key: str) -> str:
    """The command-line flag of an override key (``max_workers`` -> ``--max-workers``)."""
    return "--" + key.replace("_", "-")


def _renamed(source: str, key: str, value: Any) -> Any:
    """:func:`_setting` for a value from a flag or environment variable; a bad number names
    ``source`` (what the user typed) and shows the value as a number, not a string.  (Address
    and PEM settings keep their key: the placer's tests and docs name them so.)"""
    try:
        return _setting(key, value, strict=False)
    except InvalidArgument as e:
        if e.field != key or key not in _NUMBERS:
            raise
        shown: Any = e.value
        if isinstance(shown, str):
            try:
                shown = int(shown)
            except ValueError:
                try:
                    shown = float(shown)
                except ValueError:
                    pass
        raise InvalidArgument(source, shown, e.allowed) from None


def load_serve_config(service: str, *, config_path: Path | None = None,
                      env: Mapping[str, str] | None = None,
                      overrides: Mapping[str, Any] | None = None,
                      default_address: str | None = None,
                      plaintext_on_loopback: str | None = None) -> ServeConfig:
    """The configuration of ``service`` (one of :data:`SERVICES`) from the TOML file at
    ``config_path`` (optional), ``env`` (the process environment when None) and
    ``overrides`` (command-line values; None entries are ignored).  Keys of ``overrides``:
    ``address``, ``max_workers``, ``max_concurrent_rpcs``, ``grace_s``, ``tls_cert``,
    ``tls_key``, ``tls_client_ca``, ``plaintext``, ``metrics_port``; placer only
    ``pricing_address``, ``predictor_address``, ``upstream_ca``, ``upstream_cert``,
    ``upstream_key``.  ``default_address``: the address when no source sets one (default
    ``127.0.0.1:<the service's default port>``).  ``plaintext_on_loopback``: the address's
    name in errors (e.g. ``"health address"``); given, a loopback address
    (:func:`is_loopback`) with neither TLS nor plaintext configured serves plaintext (nothing
    off the host can reach it) and any other address is refused naming it.  Every value of
    every source is checked, also one that a higher-precedence source overrides; the TOML
    file's must have the TOML type (``plaintext = true``, not ``"yes"``).  Raises
    InvalidArgument on any bad value, on a half-configured TLS identity, a private key that
    is not the certificate's, upstream TLS files without an upstream address, and when
    neither TLS nor plaintext is configured (and the address is not a loopback one given
    ``plaintext_on_loopback``)."""
    if service not in SERVICES:
        raise InvalidArgument("service", service, f"one of {', '.join(SERVICES)}")
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    tls_source: dict[str, str] = {}  # cert/key -> where it was set (a key of _TLS_NAMES)
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
                    for tk, tv in v.items():
                        _path(f"tls.{tk}", tv)
                    tls.update(v)
                    tls_source.update(dict.fromkeys(v, "file"))
                elif k not in SERVICES:
                    raw[k] = _setting(k, v, strict=True)
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
            raw[key] = _renamed(name, key, env[name])
    for name, key in {"ELASTICO_TLS_CERT": "cert", "ELASTICO_TLS_KEY": "key",
                      "ELASTICO_TLS_CLIENT_CA": "client_ca"}.items():
        if name in env:
            tls[key] = env[name]
            tls_source[key] = "env"
    for key, v in (overrides or {}).items():
        if v is None:
            continue
        if key.startswith("tls_"):
            tls[key[4:]] = v
            tls_source[key[4:]] = "flag"
        elif key in _PLACER_KEYS and service != "placer" and v != "":
            raise InvalidArgument(key, v, "only for the placer")
        else:
            raw[key] = _renamed(_flag(key), key, v)

    address = raw.get("address") or default_address or f"127.0.0.1:{DEFAULT_PORTS[service]}"
    cfg = ServeConfig(service=service, address=_address("address", address))
    for key in ("max_workers", "max_concurrent_rpcs", "metrics_port", "grace_s"):
        if raw.get(key) is not None:
            cfg = replace(cfg, **{key: raw[key]})
    plaintext = bool(raw.get("plaintext", False))
    for key in sorted(_PLACER_KEYS):
        if raw.get(key) is None:
            continue
        if key.endswith("_address"):
            cfg = replace(cfg, **{key: raw[key]})
        else:
            cfg = replace(cfg, **{key: _pem(key, raw[key], "PRIVATE KEY" if key ==
                                            "upstream_key" else "CERTIFICATE")})
    if (cfg.upstream_cert is None) != (cfg.upstream_key is None):
        raise InvalidArgument("upstream_cert" if cfg.upstream_cert is None else "upstream_key",
                              "missing", "both a client certificate and its key, or neither")
    if cfg.upstream_cert is not None and cfg.upstream_ca is None:
        raise InvalidArgument("upstream_ca", "missing",
                              "the CA of the pricing/predictor servers, with a client identity")
    if cfg.upstream_cert is not None and cfg.upstream_key is not None:
        check_key_pair("upstream_cert", cfg.upstream_cert, "upstream_key", cfg.upstream_key)
    if cfg.upstream_ca is not None and not (cfg.pricing_address or cfg.predictor_address):
        raise InvalidArgument("upstream_ca", str(cfg.upstream_ca),
                              "only with a pricing_address or predictor_address to call over "
                              "TLS (--pricing-address/--predictor-address); without one the "
                              "placer prices and predicts in-process")
    if tls.get("client_ca") and not (tls.get("cert") or tls.get("key")):
        raise InvalidArgument("tls.client_ca", str(tls["client_ca"]),
                              "only with a server certificate and key (mutual TLS needs TLS)")
    if tls:
        if "cert" not in tls or "key" not in tls:
            given = "cert" if "cert" in tls else "key"
            # both halves named the way the given one was set: --tls-key for --tls-cert,
            # tls.key for a [serve.tls] cert, ELASTICO_TLS_KEY for ELASTICO_TLS_CERT
            names = _TLS_NAMES[tls_source[given]]
            want = names["key" if given == "cert" else "cert"]
            raise InvalidArgument(want, "missing",
                                  f"{names['cert']} and {names['key']} go together: a "
                                  f"certificate and its private key; {names[given]} is "
                                  f"{str(tls[given])!r}, give {want} too, or neither")
        if plaintext:
            raise InvalidArgument("plaintext", "true",
                                  "false (or unset) when a TLS certificate is configured")
        cfg = replace(cfg, tls=TlsConfig(
            cert=_pem("tls.cert", tls["cert"], "CERTIFICATE"),
            key=_pem("tls.key", tls["key"], "PRIVATE KEY"),
            client_ca=(_pem("tls.client_ca", tls["client_ca"], "CERTIFICATE")
                       if tls.get("client_ca") else None)))
        check_key_pair("tls.cert", cfg.tls.cert, "tls.key", cfg.tls.key)
    elif not plaintext and plaintext_on_loopback is not None:
        if not is_loopback(cfg.address):
            raise InvalidArgument(
                plaintext_on_loopback, cfg.address,
                "a loopback address, or TLS (--tls-cert/--tls-key, ELASTICO_TLS_CERT/KEY or "
                "[serve.tls]), or --plaintext")
        plaintext = True
    elif not plaintext:
        raise InvalidArgument(
            "tls", "not configured",
            "a certificate and key (--tls-cert/--tls-key, ELASTICO_TLS_CERT/KEY or [serve.tls]; "
            "add a client CA for mutual TLS), or --plaintext to serve unencrypted")
    return replace(cfg, plaintext=plaintext)


def overrides_from_args(args: Any, address: str | None) -> dict[str, Any]:
    """:func:`load_serve_config`'s ``overrides`` from a parsed command line (``args``, e.g. an
    ``argparse.Namespace``): each settable key from the attribute of the same name (None
    where the command has no such flag or it was not given), and ``address``."""
    return {"address": address, **{k: getattr(args, k, None) for k in _OVERRIDE_KEYS}}
