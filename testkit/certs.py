"""A cluster CA and the certificates it signs, for tests and the demo (docs/acl.md "TLS"), made with
``cryptography``: the CA, server certificates (the control plane's https, each broker's listeners)
with the addresses they are reached at as SANs, and per-broker certificates naming
``<cluster>/<brokerName>/<brokerId>`` (subject CN and URI SAN ``rocketmq://...``, brokers/tls.py),
which serve a broker both as server and as client on the HA link and the peer channel.

Keys are EC P-256 (quick to make, and every TLS stack here speaks them), written unencrypted with
mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_HOSTS = ("127.0.0.1", "localhost")
VALID_DAYS = 825  # the longest a public server certificate may live; the demo's are rotated by recreating them


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sans(hosts: tuple[str, ...], uris: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    names += [x509.UniformResourceIdentifier(uri) for uri in uris]
    return names


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def create_ca(directory: Path, common_name: str = "rmqha cluster CA", stem: str = "ca") -> CertFiles:
    """A self-signed CA: ``<stem>.pem`` (what every party trusts) and ``<stem>-key.pem`` (keep it safe)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(common_name), _name(common_name), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = CertFiles(directory / f"{stem}.pem", directory / f"{stem}-key.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def issue(
    ca: CertFiles | None,
    directory: Path,
    stem: str,
    common_name: str,
    *,
    hosts: tuple[str, ...] = LOCAL_HOSTS,
    uris: tuple[str, ...] = (),
) -> CertFiles:
    """A leaf certificate for server and client use, signed by ``ca`` (None: self-signed, a stranger's),
    with ``hosts`` (IP addresses and DNS names) and ``uris`` as SANs."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    if ca is None:
        issuer_name, signer = _name(common_name), key
    else:
        ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
        issuer_name, signer = ca_cert.subject, serialization.load_pem_private_key(ca.key.read_bytes(), None)
    builder = (
        _builder(_name(common_name), issuer_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_sans(hosts, uris)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    cert = builder.sign(signer, hashes.SHA256())
    files = CertFiles(directory / f"{stem}.pem", directory / f"{stem}-key.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def broker_identity(cluster: str, broker_name: str, broker_id: int) -> str:
    return f"{cluster}/{broker_name}/{broker_id}"


def issue_broker(
    ca: CertFiles | None, directory: Path, cluster: str, broker_name: str, broker_id: int, hosts: tuple[str, ...] = LOCAL_HOSTS
) -> CertFiles:
    """A broker's certificate: its identity as CN and URI SAN, its addresses as SANs."""
    identity = broker_identity(cluster, broker_name, broker_id)
    stem = f"broker-{broker_name}-{broker_id}"
    return issue(ca, directory, stem, identity, hosts=hosts, uris=(f"rocketmq://{identity}",))


def broker_tls_conf(ca: CertFiles, cert: CertFiles, mode: str = "enforcing", *, replication: bool = True) -> dict[str, str]:
    """broker.conf keys for a broker serving with ``cert`` under ``ca`` (brokers/tls.py)."""
    return {
        "tlsServerMode": mode,
        "tlsServerCertPath": str(cert.cert),
        "tlsServerKeyPath": str(cert.key),
        "tlsServerTrustCertPath": str(ca.cert),
        "tlsReplicationEnable": "true" if replication else "false",
    }
