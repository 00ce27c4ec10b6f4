"""testkit.netns, the hosts and partitions of tests/e2e/test_partitions.py: a partition drops packets
silently (a connection attempt times out, it is not refused; an open connection goes quiet and
delivers what it held once healed), cuts only the pairs asked for, and everything is removed on
close, also after an error, and after a run whose process died."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from testkit.netns import Network, reap_leftovers
from testkit.procs import ARTIFACTS, wait_until

pytestmark = pytest.mark.e2e

PORT = 17000  # inside a host's own namespace, nobody else can hold it
ECHO = """
import socket, sys, threading
def echo(conn):
    while data := conn.recv(4096):
        conn.sendall(data)
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close()
    print("connected")
except TimeoutError:
    print("timeout")
except OSError as exc:
    print(type(exc).__name__)
"""


def connect_from(source_ip: str, ip: str, timeout_s: float = 1.0) -> str:
    """What a connection attempt from ``source_ip`` (an address of the root namespace) gets."""
    try:
        socket.create_connection((ip, PORT), timeout=timeout_s, source_address=(source_ip, 0)).close()
        return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return type(exc).__name__


def namespaces() -> str:
    return (
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        + subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )


def test_a_partition_is_silent_cuts_only_the_pairs_asked_and_heals():
    with Network() as net:
        cp, n1, n2 = net.root_host("cp"), net.host("n1"), net.host("n2")
        echo = n1.process("echo-n1", [sys.executable, "-c", ECHO, n1.ip, str(PORT)], ARTIFACTS / "netns-echo.log").start()
        try:
            wait_until(lambda: connect_from(cp.ip, n1.ip) == "connected", 10, "the echo server on n1")
            held = socket.create_connection((n1.ip, PORT), timeout=1.0, source_address=(cp.ip, 0))
            held.sendall(b"before")
            assert held.recv(16) == b"before"

            net.partition([cp], [n1])
            assert connect_from(cp.ip, n1.ip) == "timeout", "a partition must drop, not refuse"
            assert connect_from(net.root_ip, n1.ip) == "connected", "the observer is cut"
            assert n2.run([sys.executable, "-c", CONNECT, n1.ip, str(PORT)]).stdout.strip() == "connected"
            held.sendall(b"during")
            with pytest.raises(TimeoutError):
                held.recv(16)
            assert net.dropped_packets() > 0

            net.heal()
            held.settimeout(10.0)  # TCP retransmits on its own backoff
            assert held.recv(16) == b"during", "an open connection delivers what it held once healed"
            assert connect_from(cp.ip, n1.ip) == "connected"
            held.close()
        finally:
            echo.stop()
    assert net.bridge_ns not in namespaces() and net.root_link not in namespaces()


def test_everything_is_removed_after_an_error_and_after_a_run_whose_process_died():
    with pytest.raises(RuntimeError, match="boom"), Network() as net:
        net.host("n1")
        raise RuntimeError("boom")
    assert f"rmqha-{net.id}-" not in namespaces() and net.root_link not in namespaces()

    dead = subprocess.Popen(["true"])
    dead.wait()
    leftovers = [f"rmqha-{dead.pid}-1-br", f"rmq{dead.pid}x1"]
    subprocess.run(["ip", "netns", "add", leftovers[0]], check=True)
    subprocess.run(["ip", "link", "add", leftovers[1], "type", "veth", "peer", "name", f"rmq{dead.pid}y1"], check=True)
    try:
        assert set(leftovers) <= set(reap_leftovers())
        time.sleep(0.2)
        assert not any(name in namespaces() for name in leftovers)
    finally:
        for argv in (["ip", "netns", "del", leftovers[0]], ["ip", "link", "del", leftovers[1]]):
            subprocess.run(argv, capture_output=True)
