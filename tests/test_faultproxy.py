"""The fault-injecting TCP proxy used by replication end-to-end tests, against a tiny echo server."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from testkit.faultproxy import FaultProxy

pytestmark = pytest.mark.unit

IO_TIMEOUT = 5.0


class EchoServer:
    """Threaded echo server on 127.0.0.1; echoes a half-close too. ``stop()`` ends every thread it started."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.closed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept_loop, name="echo-accept", daemon=True)
        self._acceptor.start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            thread = threading.Thread(target=self._serve, args=(conn,), name="echo-conn", daemon=True)
            with self._lock:
                self.accepted += 1
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket):
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    conn.shutdown(socket.SHUT_WR)
                    return
                conn.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self.closed += 1

    def stop(self):
        self._stop.set()
        self._acceptor.join(IO_TIMEOUT)
        self.listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
            except OSError:
                pass
        for thread in threads:
            thread.join(IO_TIMEOUT)
        for conn in conns:
            conn.close()
        assert not self._acceptor.is_alive() and not any(t.is_alive() for t in threads)


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.stop()


@pytest.fixture
def proxy(echo):
    with FaultProxy(target=("127.0.0.1", echo.port)) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def assert_closed_by_peer(sock: socket.socket) -> None:
    sock.settimeout(IO_TIMEOUT)
    try:
        data = sock.recv(1024)
    except (ConnectionResetError, ConnectionAbortedError):
        return
    assert data == b""


def wait_for(predicate, timeout=IO_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_round_trip_and_address(proxy, echo):
    assert proxy.addr == f"127.0.0.1:{proxy.port}"
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
    assert echo.accepted == 1


def test_large_transfer_both_ways(proxy):
    payload = bytes(range(256)) * 8192  # 2 MiB, far more than the proxy's bounded buffers
    received = bytearray()
    with connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            assert chunk
            received += chunk
        sender.join(IO_TIMEOUT)
        assert not sender.is_alive()
    assert bytes(received) == payload


def test_half_close_is_forwarded(proxy, echo):
    with connect(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(1024) == b""  # the echo server's half-close came back through the proxy
    wait_for(lambda: echo.closed == 1)
    wait_for(lambda: proxy.active_connections == 0)


def test_delay_holds_every_chunk(proxy):
    proxy.delay(0.3)
    with connect(proxy) as sock:
        started = time.monotonic()
        sock.sendall(b"ping")
        assert recv_exactly(sock, 4) == b"ping"
        assert time.monotonic() - started >= 0.5  # held once each way (0.6 s); generous
        proxy.delay(0)
        for i in range(20):  # order is kept, with and without delay
            sock.sendall(b"%03d" % i)
        assert recv_exactly(sock, 60) == b"".join(b"%03d" % i for i in range(20))


def test_drop_black_holes_data_but_keeps_connection(proxy):
    with connect(proxy) as sock:
        sock.sendall(b"before")
        assert recv_exactly(sock, 6) == b"before"
        proxy.drop(True)
        assert proxy.dropping
        sock.sendall(b"lost")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nothing arrives, and the connection is not closed either
            sock.recv(1024)
        wait_for(lambda: proxy.bytes_dropped >= 4)
        assert proxy.active_connections == 1
        proxy.drop(False)
        sock.settimeout(IO_TIMEOUT)
        sock.sendall(b"after")
        assert recv_exactly(sock, 5) == b"after"


def test_eof_during_drop_is_held_until_drop_ends(proxy):
    with connect(proxy) as sock:
        proxy.drop(True)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1024)
        proxy.drop(False)
        sock.settimeout(IO_TIMEOUT)
        assert sock.recv(1024) == b""


def test_cut_resets_current_connections_and_accepts_new_ones(proxy, echo):
    a, b = connect(proxy), connect(proxy)
    with a, b:
        for sock in (a, b):
            sock.sendall(b"x")
            assert recv_exactly(sock, 1) == b"x"
        assert proxy.cut() == 2
        assert proxy.cuts == 1 and proxy.connections_cut == 2
        assert_closed_by_peer(a)
        assert_closed_by_peer(b)
        wait_for(lambda: echo.closed == 2)  # the target side was closed as well
    assert proxy.active_connections == 0
    with connect(proxy) as sock:
        sock.sendall(b"again")
        assert recv_exactly(sock, 5) == b"again"
    wait_for(lambda: proxy.active_connections == 0)  # the graceful close goes through the echo server first
    assert proxy.cut() == 0
    assert proxy.cuts == 2


def test_refuse_accepts_and_closes(proxy, echo):
    proxy.refuse(True)
    with connect(proxy) as sock:
        assert_closed_by_peer(sock)
    assert proxy.connections_refused == 1
    assert echo.accepted == 0
    proxy.heal()
    assert not proxy.refusing and not proxy.dropping and proxy.delay_seconds == 0
    with connect(proxy) as sock:
        sock.sendall(b"ok")
        assert recv_exactly(sock, 2) == b"ok"
    assert proxy.connections_accepted == 2
    assert echo.accepted == 1


def test_counters(proxy):
    with connect(proxy) as sock:
        sock.sendall(b"a" * 1000)
        assert recv_exactly(sock, 1000) == b"a" * 1000
        with connect(proxy) as other:
            other.sendall(b"bb")
            assert recv_exactly(other, 2) == b"bb"
    proxy.wait_until(lambda p: p.bytes_up == 1002 and p.bytes_down == 1002)
    assert proxy.bytes_forwarded == 2004
    assert proxy.connections_accepted == 2
    assert proxy.cuts == 0 and proxy.bytes_dropped == 0


def test_unreachable_target_closes_client():
    # A port bound but never listened on: connecting is refused, and as long as the socket holds it
    # no other process can listen there and the proxy's own connect cannot pick it as its source
    # port (a TCP self-connect would succeed).
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        dead_port = placeholder.getsockname()[1]
        with FaultProxy(target=("127.0.0.1", dead_port)) as proxy:
            try:
                sock = connect(proxy)
            except ConnectionResetError:
                # The proxy accepted and reset before create_connection read the socket's status (its
                # connect polls, then checks SO_ERROR): on a loaded machine that is the same outcome, earlier.
                pass
            else:
                with sock:
                    assert_closed_by_peer(sock)
            proxy.wait_until(lambda p: p.active_connections == 0)
            assert proxy.connections_accepted == 1


def test_exit_stops_everything(echo):
    threads_before = set(threading.enumerate())
    with FaultProxy(target=("127.0.0.1", echo.port)) as proxy:
        port = proxy.port
        sock = connect(proxy)
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        proxy.delay(5)
        sock.sendall(b"held")  # a chunk still held by the delay must not keep the proxy alive
    with sock:
        assert_closed_by_peer(sock)
    leftover = set(threading.enumerate()) - threads_before
    assert {t.name for t in leftover} <= {"echo-conn"}  # none of the proxy's: they are joined when `with` exits
    wait_for(lambda: not any(t.is_alive() for t in leftover))  # the echo server's ends after the proxy's RST
    assert echo.closed == 1
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT).close()
