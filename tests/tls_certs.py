"""A throwaway PKI for TLS tests, made with ``cryptography``: a CA, a server certificate for
``localhost`` (and 127.0.0.1), a client certificate from the same CA, and a client certificate
from a stranger's CA, written as PEM files.  Used by tests/test_serve.py and
tests/test_placer_tls.py."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["make_pki"]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer_name, issuer_key, *, ca: bool, server: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return obj.public_bytes(serialization.Encoding.PEM)


def make_pki(d: Path) -> dict[str, Path]:
    """PEM files in ``d``: ``ca``, ``server`` / ``server_key`` (SAN localhost, 127.0.0.1),
    ``client`` / ``client_key`` (same CA), ``stranger`` / ``stranger_key`` (another CA)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("elastico-test-ca", ca_key, _name("elastico-test-ca"), ca_key, ca=True)
    out = {"ca": ca}
    for who in ("server", "client"):
        k = ec.generate_private_key(ec.SECP256R1())
        out[who] = _cert(who, k, ca.subject, ca_key, ca=False, server=who == "server")
        out[who + "_key"] = k
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("other-ca", other_key, _name("other-ca"), other_key, ca=True)
    k = ec.generate_private_key(ec.SECP256R1())
    out["stranger"] = _cert("stranger", k, other.subject, other_key, ca=False)
    out["stranger_key"] = k
    paths = {}
    for name, obj in out.items():
        p = Path(d) / f"{name}.pem"
        p.write_bytes(_pem(obj))
        paths[name] = p
    return paths
