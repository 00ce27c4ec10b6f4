"""TLS for the broker's sockets, built from broker.conf (docs/acl.md "TLS").

- The gRPC client endpoint (grpcServerPort) follows ``tlsServerMode``, RocketMQ's ``TlsMode``:
  ``disabled`` plaintext only, ``permissive`` plaintext and TLS on the one port (brokers/tls_front.py
  tells them apart by the first byte), ``enforcing`` TLS only. ``tlsServerCertPath`` /
  ``tlsServerKeyPath`` are the certificate and key it presents (the remoting listener presents them
  too).
- ``tlsReplicationEnable`` (ours): the HA link and the peer channel use mutual TLS with the cluster CA
  (``tlsServerTrustCertPath``): each side presents its broker's certificate (``tlsClientCertPath`` /
  ``tlsClientKeyPath``, else the server's) and accepts only one the CA signed. A broker's certificate
  names it ``<cluster>/<brokerName>/<brokerId>`` (its subject's CN, or a URI SAN
  ``rocketmq://<cluster>/<brokerName>/<brokerId>``): that identity replaces the shared peerToken.
- ``controlPlaneCaPath`` (ours): the CA that signed the control plane's https / wss certificate
  (empty: the system's roots).

A bad combination is refused at start (``tls_problems``, called by brokers/config.py), one line each.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

    from .config import BrokerConfig

TLS_RECORD_HANDSHAKE = 0x16  # the first byte of a TLS ClientHello record
HANDSHAKE_TIMEOUT_S = 5.0
IDENTITY_URI_SCHEME = "rocketmq://"


class TlsMode(StrEnum):
    """RocketMQ's ``TlsMode`` (``tls.server.mode``)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


# --- validation (pure but for reading the files it names) --------------------------------------------


def _file_problems(c: BrokerConfig, keys: tuple[str, ...], why: str) -> list[str]:
    problems = []
    for key in keys:
        path = getattr(c, key)
        if not path:
            problems.append(f"{key}: required when {why}")
        elif not Path(path).is_file():
            problems.append(f"{key}: {path} does not exist")
    return problems


def _chain_problem(cert_key: str, cert: str, key: str) -> str | None:
    """Whether ``cert`` and ``key`` load as one certificate chain (a key of another certificate, a
    file that is no PEM)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        return f"{cert_key}: {cert} with its key {key} does not load ({exc.reason if isinstance(exc, ssl.SSLError) else exc})"
    return None


def _ca_problem(key: str, path: str) -> str | None:
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError):
        return f"{key}: {path} holds no PEM CA certificate"
    return None


def tls_problems(c: BrokerConfig) -> list[str]:
    """What is wrong with ``c``'s TLS keys, one line each (empty: nothing)."""
    if c.tlsServerMode not in set(TlsMode):
        return [f"tlsServerMode: must be one of {', '.join(TlsMode)} (RocketMQ's TlsMode)"]
    problems: list[str] = []
    if c.tlsServerMode == TlsMode.ENFORCING and not c.tlsReplicationEnable:
        problems.append(
            "tlsServerMode: enforcing makes the remoting listener TLS-only, and the peer channel shares it: "
            "set tlsReplicationEnable=true too"
        )
    serving = c.tlsServerMode != TlsMode.DISABLED or c.tlsReplicationEnable
    server_keys = ("tlsServerCertPath", "tlsServerKeyPath")
    if serving:
        problems += _file_problems(c, server_keys, "tlsServerMode is not disabled or tlsReplicationEnable is true")
    if c.tlsReplicationEnable:
        problems += _file_problems(c, ("tlsServerTrustCertPath",), "tlsReplicationEnable is true (the cluster CA)")
    if bool(c.tlsClientCertPath) != bool(c.tlsClientKeyPath):
        problems.append("tlsClientCertPath/tlsClientKeyPath: set both or neither")
    elif c.tlsClientCertPath:
        problems += _file_problems(c, ("tlsClientCertPath", "tlsClientKeyPath"), "")
    for key in ("tlsClientTrustCertPath", "controlPlaneCaPath"):
        if getattr(c, key) and not Path(getattr(c, key)).is_file():
            problems.append(f"{key}: {getattr(c, key)} does not exist")
    if c.controlPlaneCaPath and c.controlPlaneUrl.startswith("http://"):
        problems.append("controlPlaneCaPath: set, but controlPlaneUrl is http:// (use https:// to check the CA)")
    if problems:
        return problems
    if serving and (problem := _chain_problem("tlsServerCertPath", c.tlsServerCertPath, c.tlsServerKeyPath)):
        problems.append(problem)
    if c.tlsClientCertPath and (problem := _chain_problem("tlsClientCertPath", c.tlsClientCertPath, c.tlsClientKeyPath)):
        problems.append(problem)
    for key in ("tlsServerTrustCertPath", "tlsClientTrustCertPath", "controlPlaneCaPath"):
        if getattr(c, key) and (problem := _ca_problem(key, getattr(c, key))):
            problems.append(problem)
    return problems


# --- contexts ------------------------------------------------------------------------------------------


def grpc_server_credentials(c: BrokerConfig) -> grpc.ServerCredentials:
    """The gRPC endpoint's certificate (clients are not asked for one: RocketMQ's default
    ``tlsServerNeedClientAuth=none``; the official clients authenticate with signatures)."""
    import grpc

    key, cert = Path(c.tlsServerKeyPath).read_bytes(), Path(c.tlsServerCertPath).read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])


def grpc_channel_credentials(c: BrokerConfig) -> grpc.ChannelCredentials | None:
    """For this broker's gRPC calls to other brokers (the forwarder to its group's master, the escape
    to another group's): TLS when this broker's endpoint serves it (the cluster's brokers are then
    taken to serve it too), checked against the cluster CA (else the system's roots), showing this
    broker's certificate. None: plaintext."""
    if c.tlsServerMode == TlsMode.DISABLED:
        return None
    import grpc

    trust = _trust_path(c)
    return grpc.ssl_channel_credentials(
        root_certificates=Path(trust).read_bytes() if trust else None,
        private_key=Path(c.tlsClientKeyPath or c.tlsServerKeyPath).read_bytes(),
        certificate_chain=Path(c.tlsClientCertPath or c.tlsServerCertPath).read_bytes(),
    )


def _trust_path(c: BrokerConfig) -> str:
    return c.tlsClientTrustCertPath or c.tlsServerTrustCertPath


def replication_server_context(c: BrokerConfig, *, client_cert: ssl.VerifyMode = ssl.CERT_REQUIRED) -> ssl.SSLContext:
    """The HA link's (CERT_REQUIRED: every slave shows a certificate the cluster CA signed) and the
    remoting listener's (CERT_OPTIONAL: remoting clients show none; a peer's is checked when shown)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(c.tlsServerCertPath, c.tlsServerKeyPath)
    if c.tlsServerTrustCertPath:
        ctx.load_verify_locations(cafile=c.tlsServerTrustCertPath)
        ctx.verify_mode = client_cert
    return ctx


def remoting_server_context(c: BrokerConfig) -> ssl.SSLContext | None:
    """The remoting listener's TLS, or None when it speaks plaintext only."""
    if c.tlsServerMode == TlsMode.DISABLED and not c.tlsReplicationEnable:
        return None
    return replication_server_context(c, client_cert=ssl.CERT_OPTIONAL)


def replication_client_context(c: BrokerConfig) -> ssl.SSLContext | None:
    """A slave's (HA link) and the peer client's: checks the other broker's certificate against the
    cluster CA and its address, shows this broker's. None without tlsReplicationEnable."""
    if not c.tlsReplicationEnable:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=_trust_path(c))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(c.tlsClientCertPath or c.tlsServerCertPath, c.tlsClientKeyPath or c.tlsServerKeyPath)
    return ctx


def control_plane_context(c: BrokerConfig) -> ssl.SSLContext | None:
    """For https / wss to the control plane: its certificate checked against controlPlaneCaPath (else
    the system's roots). None for http://."""
    if not c.controlPlaneUrl.startswith("https://"):
        return None
    return ssl.create_default_context(cafile=c.controlPlaneCaPath or None)


# --- broker identities ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerIdentity:
    """Whom a broker certificate names: ``<cluster>/<brokerName>/<brokerId>``."""

    cluster: str
    broker_name: str
    broker_id: int

    def __str__(self) -> str:
        return f"{self.cluster}/{self.broker_name}/{self.broker_id}"

    @classmethod
    def parse(cls, text: str) -> BrokerIdentity | None:
        parts = text.removeprefix(IDENTITY_URI_SCHEME).split("/")
        if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


def identity_of(peer_cert: dict | None) -> BrokerIdentity | None:
    """The broker a verified certificate (``SSLSocket.getpeercert()``) names: a URI SAN
    ``rocketmq://c/n/i`` first, else the subject's CN ``c/n/i``; None if it names none."""
    if not peer_cert:
        return None
    for kind, value in peer_cert.get("subjectAltName", ()):
        if kind == "URI" and value.startswith(IDENTITY_URI_SCHEME) and (found := BrokerIdentity.parse(value)):
            return found
    for rdn in peer_cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName" and (found := BrokerIdentity.parse(value)):
                return found
    return None


def same_group(peer_cert: dict | None, cluster: str, broker_name: str) -> bool:
    """Whether a verified certificate names a broker of this replica group."""
    found = identity_of(peer_cert)
    return found is not None and (found.cluster, found.broker_name) == (cluster, broker_name)
