"""testkit.ports in one process: reserved ports are outside the kernel's ephemeral range, bindable,
never handed out twice, and free again once released."""

from __future__ import annotations

import random
import socket

import pytest

from testkit import ports

pytestmark = pytest.mark.unit


@pytest.fixture
def same_start(monkeypatch):
    """Every pick scans the candidates from the first one: without the locks, picks would collide."""
    monkeypatch.setattr(random, "randrange", lambda n: 0)


def test_a_reserved_port_is_outside_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(20)]
    try:
        assert all(not low <= p <= high and ports.FLOOR <= p <= ports.CEILING for p in picked), (low, high, picked)
    finally:
        for p in picked:
            ports.release_port(p)


def test_two_reservations_never_return_the_same_port(same_start):
    picked = [ports.free_port() for _ in range(50)]
    try:
        assert len(set(picked)) == len(picked)
        assert set(picked) <= ports.held_ports()
    finally:
        for p in picked:
            ports.release_port(p)


def test_a_held_port_is_locked_until_released(same_start):
    port = ports.free_port()
    assert ports._try_lock(port) is None  # another open file (as another process would have) cannot take it
    ports.release_port(port)
    fd = ports._try_lock(port)
    assert fd is not None
    ports.os.close(fd)


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    with ports.reserved_port() as port:
        pass
    with socket.create_server(("127.0.0.1", port)):  # a server outside the scheme
        candidates = ports.candidate_ports()
        monkeypatch.setattr(random, "randrange", lambda n: candidates.index(port))
        with ports.reserved_port() as other:
            assert other != port


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path, monkeypatch):
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("20000\t40000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", fake)
    assert ports.ephemeral_range() == (20000, 40000)
    candidates = ports.candidate_ports()
    assert candidates[0] == ports.FLOOR and 19999 in candidates and 40001 in candidates
    assert not any(20000 <= p <= 40000 for p in candidates)
