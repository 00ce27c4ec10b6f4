"""The TCP balancer in front of several web processes (testkit/balancer.py), against tiny echo servers:
connections take the targets in turn, a target that refuses is skipped, and the clients of a
target that dies reconnect to a live one."""

from __future__ import annotations

import pytest

from testkit.balancer import Balancer
from testkit.ports import free_port, release_port
from tests.test_faultproxy import EchoServer, assert_closed_by_peer, connect, recv_exactly

pytestmark = pytest.mark.unit


@pytest.fixture
def echoes():
    servers = [EchoServer(), EchoServer()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def dead_port():
    """A reserved port nobody listens on: connecting to it is refused."""
    port = free_port()
    yield port
    release_port(port)


def round_trip(balancer: Balancer, payload: bytes = b"ping") -> None:
    with connect(balancer) as sock:
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload


def test_new_connections_take_the_targets_in_turn(echoes):
    a, b = echoes
    with Balancer([("127.0.0.1", a.port), ("127.0.0.1", b.port)]) as balancer:
        for _ in range(4):
            round_trip(balancer)
    assert (a.accepted, b.accepted) == (2, 2)


def test_a_target_that_refuses_is_skipped_for_the_next_one(echoes, dead_port):
    a, b = echoes
    dead = ("127.0.0.1", dead_port)
    with Balancer([("127.0.0.1", a.port), dead, ("127.0.0.1", b.port)]) as balancer:
        for _ in range(6):
            round_trip(balancer)
        assert balancer.skipped[dead] == 2 and dead not in balancer.connections_to
    assert a.accepted + b.accepted == 6


def test_the_clients_of_a_dead_target_reconnect_to_a_live_one(echoes):
    a, b = echoes
    with Balancer([("127.0.0.1", a.port), ("127.0.0.1", b.port)]) as balancer:
        with connect(balancer) as sock:
            sock.sendall(b"on a")
            assert recv_exactly(sock, 4) == b"on a"
            a.stop()  # its listener and connections close, as a killed process's do
            assert_closed_by_peer(sock)
        for _ in range(3):
            round_trip(balancer)
    assert (a.accepted, b.accepted) == (1, 3)


def test_when_every_target_refuses_the_client_is_disconnected(dead_port):
    other = free_port()
    try:
        with Balancer([("127.0.0.1", dead_port), ("127.0.0.1", other)]) as balancer:
            try:
                sock = connect(balancer)
            except ConnectionResetError:  # the balancer's reset can beat the end of connect() on loopback
                return
            with sock:
                assert_closed_by_peer(sock)
    finally:
        release_port(other)


def test_routes_name_the_target_of_each_open_link(echoes):
    a, b = echoes
    with Balancer([("127.0.0.1", a.port), ("127.0.0.1", b.port)]) as balancer:
        with connect(balancer) as first, connect(balancer) as second:
            for sock in (first, second):
                sock.sendall(b"up")
                assert recv_exactly(sock, 2) == b"up"
            assert balancer.routes() == {
                first.getsockname()[1]: ("127.0.0.1", a.port),
                second.getsockname()[1]: ("127.0.0.1", b.port),
            }
