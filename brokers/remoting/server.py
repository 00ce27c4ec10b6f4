"""The broker's remoting listener on ``listenPort`` (RocketMQ's 10911): RocketMQ's classic TCP protocol
(mqrules/remoting/), for 4.x clients, mqadmin and the dashboard, and for this broker's peers (the peer
channel's requests travel as remoting requests: brokers/control/peers.py).

One asyncio server. Each connection cuts frames with ``FrameDecoder`` and runs every request as a task
of its own, so a long-polling pull never holds up the sends and heartbeats behind it on the same
connection (clients match replies to requests by ``opaque``, as Java's do). Replies are written in the
request's serialization; a oneway request gets none.

Handlers are registered by request code (``handle``): ``await handler(request, connection)`` answers
the reply (None: no reply, e.g. a request that is answered later). What goes wrong stays with its
request or its connection, never the server:

- bytes that are no frame, a frame over the length limit: that connection is closed (Java's
  ``NettyDecoder`` closes it too), after the requests it already read are answered;
- a request whose header misses or garbles a required field: SYSTEM_ERROR naming the fields (Java's
  ``decodeCommandCustomHeader`` exception answers the same code);
- an unknown code: REQUEST_CODE_NOT_SUPPORTED (3) naming it;
- a handler that fails: SYSTEM_ERROR with the exception's type, logged with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from mqrules.remoting.codes import ResponseCode
from mqrules.remoting.decoder import MAX_FRAME_LENGTH, FrameDecoder
from mqrules.remoting.frame import ONEWAY_FLAG, FrameError, LanguageCode, RemotingCommand, encode_frame
from mqrules.remoting.headers import HeaderFieldError

from ..tasks import cancel_and_wait
from ..tls_front import MixedServer

log = logging.getLogger("brokers.remoting")

IDLE_TIMEOUT_S = 120.0  # NettyServerConfig.serverChannelMaxIdleTimeSeconds: an idle channel is closed
WRITE_TIMEOUT_S = 30.0  # a client that stops reading its replies loses its connection
CLOSE_TIMEOUT_S = 2.0
READ_CHUNK = 256 * 1024
MAX_IN_FLIGHT = 1024  # requests of one connection being answered at once; reading waits beyond that


class Connection:
    """One client's (or peer's) connection: where replies and the broker's own requests to the client
    (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED: both oneway) are written. ``client_id`` and
    ``language`` are what the client's heartbeat said."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_id: str | None = None
        self.language = LanguageCode.JAVA
        self.version = 0
        self.closed = False
        self._opaque = 0

    async def send(self, command: RemotingCommand) -> bool:
        """Write one command; False once the connection is gone (or stopped reading)."""
        if self.closed:
            return False
        try:
            self.writer.write(encode_frame(command))
            if self.writer.transport.get_write_buffer_size() > 0:
                await asyncio.wait_for(self.writer.drain(), WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError, RuntimeError):
            self.close()
            return False
        return True

    async def request_oneway(self, code: int, ext_fields: Mapping[str, str], body: bytes = b"") -> bool:
        """A oneway request from the broker to the client, in the serialization the client reads
        (JSON: every client reads it; the C++ client reads nothing else)."""
        self._opaque += 1
        command = RemotingCommand(code=code, opaque=self._opaque, flag=ONEWAY_FLAG, ext_fields=dict(ext_fields), body=body)
        return await self.send(command)

    def close(self) -> None:
        self.closed = True
        self.writer.close()

    @property
    def peer_certificate(self) -> dict | None:
        """The certificate the other end showed over TLS, verified against the cluster CA (None:
        plaintext, or none shown): who a peer is (brokers/control/peers.py)."""
        return self.writer.get_extra_info("peercert") or None


Handler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand | None]]
Closed = Callable[[Connection], None]
Answered = Callable[[RemotingCommand, "RemotingCommand | None", float], None]  # (request, reply, milliseconds)


class RemotingServer:
    """``handle(code, handler)`` before or after ``start``; ``on_closed(callback)``: told of every
    connection that ends (the client registry forgets its clients)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_frame_length: int = MAX_FRAME_LENGTH,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        answered: Answered | None = None,
        tls: ssl.SSLContext | None = None,
        tls_only: bool = False,
    ):
        """``answered``: told of every request answered, with the time it took (the metrics' rpc latency).
        ``tls``: TLS taken on the port besides plaintext (brokers/tls_front.py), or instead with ``tls_only``."""
        self.host, self.port = host, port
        self.tls, self.tls_only = tls, tls_only
        self.answered = answered
        self.max_frame_length = max_frame_length
        self.idle_timeout_s = idle_timeout_s
        self._handlers: dict[int, Handler] = {}
        self._closed_callbacks: list[Closed] = []
        self._withdrawn: dict[int, str] = {}
        self._server: asyncio.Server | MixedServer | None = None
        self._connections: dict[asyncio.Task, Connection] = {}

    def handle(self, code: int, handler: Handler) -> None:
        current = self._handlers.get(int(code))
        if current is not None and current is not handler:
            raise ValueError(f"request code {int(code)} is already handled by {getattr(current, '__qualname__', current)}")
        self._handlers[int(code)] = handler

    def handle_all(self, handlers: Mapping[int, Handler]) -> None:
        for code, handler in handlers.items():
            self.handle(code, handler)

    def withdraw(self, codes: Iterable[int], remark: str) -> None:
        """Stop serving ``codes``: from now on they are answered SYSTEM_BUSY with ``remark`` (a broker
        leaving its group stops serving clients before its peers)."""
        for code in codes:
            self._handlers.pop(int(code), None)
            self._withdrawn[int(code)] = remark

    def on_closed(self, callback: Closed) -> None:
        self._closed_callbacks.append(callback)

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        if self.tls is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        else:
            self._server = await MixedServer.start(self.host, self.port, self.tls, self.tls_only, self._accept)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("remoting listener on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in self._connections.values():
            connection.close()
        await cancel_and_wait(*self._connections)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = Connection(writer)
        self._connections[task] = connection
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        requests: set[asyncio.Task] = set()
        try:
            await self._serve(reader, connection, requests)
        except asyncio.CancelledError:
            pass  # stopping
        except FrameError as exc:
            log.info("remoting connection from %s sent no frame (%s): closing it", connection.remote, exc)
        except (TimeoutError, ConnectionError):
            pass  # idle past the limit, or gone
        except Exception:  # a bug here costs this connection, never the server
            log.exception("remoting connection from %s failed: closing it", connection.remote)
        finally:
            self._connections.pop(task, None)
            if requests:  # what was read before the end is still answered (a bad frame after good ones)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait(requests, timeout=CLOSE_TIMEOUT_S)
                await cancel_and_wait(*requests)
            connection.close()
            for callback in self._closed_callbacks:
                try:
                    callback(connection)
                except Exception:
                    log.exception("a closed-connection callback failed")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)

    async def _serve(self, reader: asyncio.StreamReader, connection: Connection, requests: set[asyncio.Task]) -> None:
        decoder = FrameDecoder(self.max_frame_length)
        loop = asyncio.get_running_loop()
        while True:
            data = await asyncio.wait_for(reader.read(READ_CHUNK), self.idle_timeout_s)
            if not data:
                return
            decoder.feed(data)
            for request in decoder.commands():
                if request.is_response:
                    continue  # the broker's requests to clients are oneway: nothing waits for an answer
                task = loop.create_task(self._answer(request, connection))
                requests.add(task)
                task.add_done_callback(requests.discard)
            while len(requests) >= MAX_IN_FLIGHT:
                await asyncio.wait(requests, return_when=asyncio.FIRST_COMPLETED)

    async def _answer(self, request: RemotingCommand, connection: Connection) -> None:
        started = time.perf_counter()
        reply = await self.reply(request, connection)
        if self.answered is not None:
            self.answered(request, reply, (time.perf_counter() - started) * 1000)
        if reply is not None and not request.is_oneway:
            await connection.send(reply)

    async def reply(self, request: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        """The reply to one request (never raises but for cancellation)."""
        handler = self._handlers.get(request.code)
        if handler is None:
            if request.code in self._withdrawn:
                return request.response(ResponseCode.SYSTEM_BUSY, self._withdrawn[request.code])
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request type {request.code} not supported")
        try:
            return await handler(request, connection)
        except asyncio.CancelledError:
            raise
        except HeaderFieldError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        except Exception as exc:
            log.exception("remoting request %d from %s failed", request.code, connection.remote if connection else "-")
            return request.response(ResponseCode.SYSTEM_ERROR, f"internal error: {type(exc).__name__}: {exc}"[:512])
