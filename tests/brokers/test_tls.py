"""brokers/tls.py: the TLS keys of broker.conf (each bad combination refused with one line), the
contexts they build, broker identities in certificates, and the listeners that take plaintext and TLS
on one port (brokers/tls_front.py): the remoting listener and its peer guard."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from brokers.config import ConfigInvalid, from_mapping
from brokers.control.peers import CertificateGuard, PeerClient, PeerError, peer_handlers
from brokers.remoting.server import RemotingServer
from brokers.tls import BrokerIdentity, identity_of, remoting_server_context, replication_client_context, same_group
from brokers.tls_front import _FRONT_PEERS, client_address
from testkit.certs import broker_tls_conf, create_ca, issue, issue_broker

pytestmark = pytest.mark.unit

GOOD = {
    "brokerName": "broker-a",
    "storePathRootDir": "/tmp/x",
    "controlPlaneUrl": "https://127.0.0.1:8000",
    "controlPlaneToken": "rmq_x",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = create_ca(root)
    other_ca = create_ca(root, "a stranger's CA", stem="other-ca")
    return {
        "root": root,
        "ca": ca,
        "a0": issue_broker(ca, root, "DefaultCluster", "broker-a", 0),
        "a1": issue_broker(ca, root, "DefaultCluster", "broker-a", 1),
        "b0": issue_broker(ca, root, "DefaultCluster", "broker-b", 0),
        "stranger": issue_broker(other_ca, root, "DefaultCluster", "broker-a", 2),
        "self_signed": issue(None, root, "self", "DefaultCluster/broker-a/3"),
    }


def _conf(pki, cert="a0", **extra) -> dict[str, str]:
    return {**GOOD, **broker_tls_conf(pki["ca"], pki[cert]), **extra}


def test_tls_is_off_by_default():
    c = from_mapping(GOOD)
    assert (c.tlsServerMode, c.tlsReplicationEnable) == ("disabled", False)
    assert remoting_server_context(c) is None and replication_client_context(c) is None


@pytest.mark.parametrize("mode", ["disabled", "permissive", "enforcing"])
def test_each_rocketmq_tls_mode_is_taken(pki, mode):
    assert from_mapping(_conf(pki, tlsServerMode=mode)).tlsServerMode == mode


def _problems(values: dict) -> list[str]:
    with pytest.raises(ConfigInvalid) as caught:
        from_mapping(values)
    return caught.value.problems


REFUSED = [
    (
        "unknown-mode",
        lambda p: {**GOOD, "tlsServerMode": "strict"},
        "tlsServerMode: must be one of disabled, permissive, enforcing",
    ),
    (
        "permissive-without-cert",
        lambda p: {**GOOD, "tlsServerMode": "permissive", "tlsServerKeyPath": str(p["a0"].key)},
        "tlsServerCertPath: required when",
    ),
    (
        "enforcing-without-replication",
        lambda p: _conf(p, tlsReplicationEnable="false"),
        "tlsServerMode: enforcing makes the remoting listener TLS-only",
    ),
    (
        "replication-without-ca",
        lambda p: {**_conf(p, tlsServerMode="disabled"), "tlsServerTrustCertPath": ""},
        "tlsServerTrustCertPath: required when tlsReplicationEnable",
    ),
    (
        "missing-cert-file",
        lambda p: _conf(p, tlsServerCertPath="/nonexistent.pem"),
        "tlsServerCertPath: /nonexistent.pem does not exist",
    ),
    ("key-of-another-cert", lambda p: _conf(p, tlsServerKeyPath=str(p["b0"].key)), "does not load"),
    ("client-cert-without-key", lambda p: _conf(p, tlsClientCertPath=str(p["a0"].cert)), "set both or neither"),
    ("ca-is-no-pem", lambda p: _conf(p, tlsServerTrustCertPath=str(p["a0"].key)), "tlsServerTrustCertPath:"),
    (
        "control-plane-ca-over-http",
        lambda p: {**GOOD, "controlPlaneUrl": "http://127.0.0.1:8000", "controlPlaneCaPath": str(p["ca"].cert)},
        "controlPlaneCaPath: set, but controlPlaneUrl is http://",
    ),
]


@pytest.mark.parametrize("values, expected", [(r[1], r[2]) for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_bad_tls_combination_is_refused_with_one_clear_line(pki, values, expected):
    problems = _problems(values(pki))
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_control_plane_ca_is_taken_with_https(pki):
    assert from_mapping({**GOOD, "controlPlaneCaPath": str(pki["ca"].cert)}).controlPlaneCaPath


IDENTITIES = [
    ("cn", {"subject": ((("commonName", "c1/broker-a/2"),),)}, BrokerIdentity("c1", "broker-a", 2)),
    (
        "uri-san-first",
        {"subject": ((("commonName", "x/y/1"),),), "subjectAltName": (("URI", "rocketmq://c1/broker-b/0"),)},
        BrokerIdentity("c1", "broker-b", 0),
    ),
    ("no-id", {"subject": ((("commonName", "c1/broker-a"),),)}, None),
    ("hostname-cn", {"subject": ((("commonName", "localhost"),),)}, None),
    ("plaintext", None, None),
]


@pytest.mark.parametrize("cert, expected", [(r[1], r[2]) for r in IDENTITIES], ids=[r[0] for r in IDENTITIES])
def test_a_broker_certificate_names_cluster_broker_name_and_id(cert, expected):
    assert identity_of(cert) == expected
    assert same_group(cert, "c1", "broker-a") == (expected is not None and expected.broker_name == "broker-a")


@pytest.mark.parametrize(
    "peer, expected",
    [
        ("ipv4:127.0.0.1:40001", "ipv4:10.1.2.3:5555"),
        ("ipv4:127.0.0.1:40002", "ipv4:127.0.0.1:40002"),  # not the front's
        ("ipv4:10.0.0.9:40001", "ipv4:10.0.0.9:40001"),  # a direct client
        ("unix:/tmp/x", "unix:/tmp/x"),
    ],
)
def test_the_real_client_address_behind_the_permissive_front(peer, expected):
    _FRONT_PEERS[40001] = ("10.1.2.3", 5555)
    try:
        assert client_address(peer) == expected
    finally:
        _FRONT_PEERS.pop(40001)


# --- the remoting listener: plaintext and TLS on one port, peers known by their certificates ------------


def _client_ctx(pki, cert: str | None, trust: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(trust))
    if cert is not None:
        ctx.load_cert_chain(str(pki[cert].cert), str(pki[cert].key))
    return ctx


async def _ok(_body: dict) -> dict:
    return {"ok": True}


async def _with_listener(pki, mode: str, calls):
    config = from_mapping(_conf(pki, tlsServerMode=mode, listenPort="1"))
    server = RemotingServer("127.0.0.1", 0, tls=remoting_server_context(config), tls_only=mode == "enforcing")
    server.handle_all(peer_handlers(CertificateGuard("DefaultCluster", "broker-a"), {906: _ok}))
    await server.start()
    try:
        return await calls(f"127.0.0.1:{server.port}")
    finally:
        await server.stop()


@pytest.mark.parametrize(
    "mode, cert, answered",
    [
        ("permissive", "a1", True),  # a replica of the group
        ("permissive", "b0", False),  # a broker of another group: NO_PERMISSION
        ("permissive", None, False),  # TLS without a certificate: NO_PERMISSION
        ("enforcing", "a1", True),
    ],
)
def test_a_peer_request_is_answered_for_a_broker_certificate_of_the_group(pki, mode, cert, answered):
    async def calls(addr):
        client = PeerClient("", tls=_client_ctx(pki, cert, pki["ca"].cert))
        try:
            return await client.call(addr, 906)
        except PeerError as exc:
            return exc.code

    result = asyncio.run(_with_listener(pki, mode, calls))
    assert result == ({"ok": True} if answered else 16)


@pytest.mark.parametrize(
    "mode, how",
    [
        ("permissive", "plaintext-token"),  # the listener takes plaintext, but a token is no identity here
        ("enforcing", "plaintext"),  # refused at the door
        ("permissive", "stranger-ca"),  # a certificate of another CA fails the handshake
        ("permissive", "self-signed"),
    ],
)
def test_no_peer_request_is_answered_without_a_certificate_of_the_cluster_ca(pki, mode, how):
    async def calls(addr):
        if how.startswith("plaintext"):
            client = PeerClient("rmq_x")
        else:
            client = PeerClient(
                "", tls=_client_ctx(pki, {"stranger-ca": "stranger", "self-signed": "self_signed"}[how], pki["ca"].cert)
            )
        with pytest.raises(PeerError) as caught:
            await client.call(addr, 906)
        return caught.value.code

    code = asyncio.run(_with_listener(pki, mode, calls))
    assert code == (16 if how == "plaintext-token" else None)


def test_a_peer_client_refuses_a_listener_whose_certificate_the_ca_did_not_sign(pki):
    async def calls(addr):
        other = _client_ctx(pki, "a1", pki["root"] / "other-ca.pem")
        with pytest.raises(PeerError) as caught:
            await PeerClient("", tls=other).call(addr, 906)
        return caught.value.code

    assert asyncio.run(_with_listener(pki, "permissive", calls)) is None
