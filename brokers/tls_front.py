"""Plaintext and TLS on one port, told apart by the connection's first byte (0x16: a TLS ClientHello),
as RocketMQ's ``TlsMode.PERMISSIVE`` does.

- ``GrpcFront``: the gRPC endpoint in permissive mode. gRPC's server cannot serve both on one port,
  so it listens on two internal ports of 127.0.0.1 (plaintext and TLS) and this front, on
  grpcServerPort, splices each connection to one of them without touching its bytes. The gRPC server
  then sees the front as every call's peer: ``client_address(context.peer())`` gives the real one
  (ACL source-IP checks, logs).
- ``MixedServer``: the remoting listener when it takes TLS (brokers/remoting/server.py): its own
  accept loop peeks at the first byte, then hands the socket to asyncio with or without TLS
  (``loop.connect_accepted_socket``); with ``tls_only`` a plaintext connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

from .tasks import cancel_and_wait
from .tls import HANDSHAKE_TIMEOUT_S, TLS_RECORD_HANDSHAKE

log = logging.getLogger("brokers.tls")

FIRST_BYTE_TIMEOUT_S = 10.0  # a connection that says nothing this long is closed
SPLICE_CHUNK = 256 * 1024
STREAM_LIMIT = 2**16

# The front's outgoing local port (as the internal gRPC server sees it) -> the client's (host, port).
_FRONT_PEERS: dict[int, tuple[str, int]] = {}


def client_address(peer: str) -> str:
    """``context.peer()`` of a gRPC call (``ipv4:127.0.0.1:51234``) with the real client's address
    when the call came through a permissive mode's front (``ipv4:10.0.0.7:40100``); any other peer
    as given."""
    if not _FRONT_PEERS:  # no front (the usual case): nothing to look up
        return peer
    kind, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    if kind in ("ipv4", "ipv6") and host.strip("[]") in ("127.0.0.1", "::1") and port.isdigit():
        real = _FRONT_PEERS.get(int(port))
        if real is not None:
            real_host = f"[{real[0]}]" if ":" in real[0] else real[0]
            return f"{'ipv6' if ':' in real[0] else 'ipv4'}:{real_host}:{real[1]}"
    return peer


def is_tls(first: bytes) -> bool:
    return first[:1] == bytes([TLS_RECORD_HANDSHAKE])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        while data := await reader.read(SPLICE_CHUNK):
            writer.write(data)
            await writer.drain()


class GrpcFront:
    """Listens on ``host:port`` and splices each connection to ``plain_port`` or ``tls_port`` on
    127.0.0.1. ``start()``, ``stop()``."""

    def __init__(self, host: str, port: int, plain_port: int, tls_port: int):
        self.host, self.port = host, port
        self.plain_port, self.tls_port = plain_port, tls_port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await cancel_and_wait(*self._tasks)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        local_port = None
        try:
            first = await asyncio.wait_for(reader.read(1), FIRST_BYTE_TIMEOUT_S)
            if not first:
                return
            target = self.tls_port if is_tls(first) else self.plain_port
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", target)
            local_port = upstream.get_extra_info("sockname")[1]
            _FRONT_PEERS[local_port] = writer.get_extra_info("peername")[:2]
            upstream.write(first)
            pipes = [asyncio.ensure_future(_pipe(reader, upstream)), asyncio.ensure_future(_pipe(up_reader, writer))]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                await cancel_and_wait(*pipes)
        except (TimeoutError, OSError, asyncio.CancelledError):
            pass  # silent client, internal port gone, stopping
        finally:
            self._tasks.discard(task)
            if local_port is not None:
                _FRONT_PEERS.pop(local_port, None)
            for w in (upstream, writer):
                if w is not None:
                    w.close()


async def _readable(sock: socket.socket, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait_for(ready, timeout)
    finally:
        loop.remove_reader(sock.fileno())


Accepted = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class MixedServer:
    """``asyncio.Server``'s part the remoting listener uses (``sockets``, ``close``, ``wait_closed``)
    over an accept loop that takes TLS (``ctx``) and, unless ``tls_only``, plaintext on one port."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, tls_only: bool, accepted: Accepted):
        self.sockets = [sock]
        self._sock, self._ctx, self._tls_only, self._accepted = sock, ctx, tls_only, accepted
        self._tasks: set[asyncio.Task] = set()
        self._loop_task = asyncio.get_running_loop().create_task(self._accept_loop(), name="mixed-accept")

    @classmethod
    async def start(cls, host: str, port: int, ctx: ssl.SSLContext, tls_only: bool, accepted: Accepted) -> MixedServer:
        sock = socket.create_server((host, port), backlog=1024)
        sock.setblocking(False)
        return cls(sock, ctx, tls_only, accepted)

    def close(self) -> None:
        self._loop_task.cancel()
        for task in self._tasks:
            task.cancel()
        self._sock.close()

    async def wait_closed(self) -> None:
        await cancel_and_wait(self._loop_task, *self._tasks)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                log.warning("remoting accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._open(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _open(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setblocking(False)
            await _readable(conn, FIRST_BYTE_TIMEOUT_S)
            tls = is_tls(conn.recv(1, socket.MSG_PEEK))
            if not tls and self._tls_only:
                raise ConnectionRefusedError("plaintext on a TLS-only listener")
            reader = asyncio.StreamReader(limit=STREAM_LIMIT)
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, conn, ssl=self._ctx if tls else None, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if tls else None
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            log.info("remoting connection dropped before its first frame: %s", exc)
            conn.close()
            return
        await self._accepted(reader, asyncio.StreamWriter(transport, protocol, reader, loop))
