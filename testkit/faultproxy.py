"""A fault-injecting TCP proxy for plain TCP links (e.g. broker HA replication), used by end-to-end tests and chaos runs.

Usage from a synchronous test::

    with FaultProxy(target=("127.0.0.1", master_ha_port)) as proxy:
        start_slave(master_ha_addr=proxy.addr)
        proxy.delay(0.2)      # every chunk, both directions, held 200 ms (order kept)
        proxy.drop(True)      # black hole: bytes read and discarded, connections stay open
        proxy.drop(False)
        proxy.cut()           # RST every current connection, both sides
        proxy.refuse(True)    # new connections accepted and closed at once
        proxy.heal()          # delay 0, drop off, refuse off

The proxy runs an asyncio server on its own event loop in a background thread. Fault settings can be
changed at any time from any thread. Chunks are forwarded as read (no re-framing); a half-close
(EOF) is forwarded as a half-close; buffering is bounded (a small queue of chunks per direction,
then TCP back-pressure). Leaving the ``with`` block aborts every connection, closes the listener,
stops the loop and joins the thread.

Semantics worth knowing:

* ``delay`` is sampled when a chunk is read: a chunk is written no earlier than ``read time + delay``
  and never before the chunks read earlier, so lowering the delay does not reorder anything.
* ``drop`` discards chunks both when read and when about to be written, so nothing reaches either
  endpoint while it is on (a chunk read before ``drop(True)`` but still held by ``delay`` is lost
  too). An EOF that arrives while dropping is held until ``drop(False)`` (like a retransmitted
  FIN after a partition heals); a connection reset is propagated at once.
* A reset or error on either side aborts (RST) the other side; a failed connect to the target
  (refused or ``connect_timeout``) aborts the client connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

_EOF = object()
_LINGER_ZERO = struct.pack("ii", 1, 0)


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close a connection abruptly: SO_LINGER 0 makes the kernel send RST instead of FIN."""
    if writer is None:
        return
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
    transport.abort()


class _Link:
    """One proxied connection: the accepted client side and (once connected) the target side."""

    __slots__ = ("client", "upstream", "task", "aborted")

    def __init__(self, client: asyncio.StreamWriter):
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.task: asyncio.Task | None = None
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True
        _abort(self.client)
        _abort(self.upstream)


class FaultProxy:
    """TCP proxy ``127.0.0.1:<port>`` -> ``target`` with injectable faults (see the module docstring)."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        connect_timeout: float = 5.0,
        chunk_size: int = 64 * 1024,
        queue_chunks: int = 16,
        op_timeout: float = 10.0,
    ):
        self.target = (target[0], int(target[1]))
        self.host = host
        self._requested_port = port
        self.connect_timeout = connect_timeout
        self.chunk_size = chunk_size
        self.queue_chunks = queue_chunks
        self.op_timeout = op_timeout  # how long the test thread waits for start/cut/stop

        self._lock = threading.Lock()
        self._delay = 0.0
        self._drop = False
        self._refuse = False

        self._connections_accepted = 0
        self._connections_refused = 0
        self._bytes_up = 0
        self._bytes_down = 0
        self._bytes_dropped = 0
        self._cuts = 0
        self._connections_cut = 0

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._port: int | None = None

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run_loop, name=f"FaultProxy->{self.target[0]}:{self.target[1]}", daemon=True)
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Abort every connection, close the listener, stop the loop and join the thread. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        try:
            if thread.is_alive() and not loop.is_closed():
                with contextlib.suppress(Exception):
                    self._call(self._shutdown())
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(loop.stop)
            thread.join(self.op_timeout)
            if thread.is_alive():
                raise RuntimeError("FaultProxy thread did not stop")
        finally:
            self._thread = None
            self._server = None

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            # normally _shutdown() already did all this; here for a loop stopped some other way
            try:
                for link in list(self._links):
                    link.abort()
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.wait(pending, timeout=self.op_timeout))
                loop.run_until_complete(asyncio.sleep(0))  # let aborted transports close their sockets
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                self._links.clear()
                loop.close()

    def _call(self, coro):
        """Run a coroutine on the proxy loop and wait (bounded) for its result from the calling thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("FaultProxy methods must not be called from the proxy's own thread")
        if self._loop is None or self._loop.is_closed():
            coro.close()
            raise RuntimeError("FaultProxy is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self.op_timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self._requested_port, limit=self.chunk_size)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._abort_all()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), self.op_timeout)

    async def _abort_all(self) -> int:
        links = list(self._links)
        tasks = []
        for link in links:
            link.abort()
            if link.task is not None and not link.task.done():
                link.task.cancel()
                tasks.append(link.task)
        if tasks:
            await asyncio.wait(tasks, timeout=self.op_timeout)
        return len(links)

    # ----------------------------------------------------------------- address

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FaultProxy is not started")
        return self._port

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    # ----------------------------------------------------------------- faults

    def delay(self, seconds: float) -> None:
        """Hold every chunk read from now on, in either direction, for ``seconds`` (0 turns it off)."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        with self._lock:
            self._delay = float(seconds)

    def drop(self, on: bool = True) -> None:
        """While on, bytes are read and discarded in both directions; the connections stay open."""
        with self._lock:
            self._drop = bool(on)

    def refuse(self, on: bool = True) -> None:
        """While on, new connections are accepted and closed at once (never reach the target)."""
        with self._lock:
            self._refuse = bool(on)

    def heal(self) -> None:
        """Turn every standing fault off: delay 0, drop off, refuse off."""
        with self._lock:
            self._delay = 0.0
            self._drop = False
            self._refuse = False

    def cut(self) -> int:
        """Abort (RST) every current connection on both sides; returns how many were cut.

        Returns after they are closed. New connections are accepted afterwards (unless refusing).
        """
        n = self._call(self._abort_all())
        with self._lock:
            self._cuts += 1
            self._connections_cut += n
        return n

    @property
    def delay_seconds(self) -> float:
        return self._delay

    @property
    def dropping(self) -> bool:
        return self._drop

    @property
    def refusing(self) -> bool:
        return self._refuse

    # ----------------------------------------------------------------- counters

    @property
    def connections_accepted(self) -> int:
        """Every connection the listener accepted, including refused ones."""
        return self._connections_accepted

    @property
    def connections_refused(self) -> int:
        return self._connections_refused

    @property
    def active_connections(self) -> int:
        return len(self._links)

    @property
    def bytes_up(self) -> int:
        """Bytes handed to the target (client -> target)."""
        return self._bytes_up

    @property
    def bytes_down(self) -> int:
        """Bytes handed to the client (target -> client)."""
        return self._bytes_down

    @property
    def bytes_forwarded(self) -> int:
        return self._bytes_up + self._bytes_down

    @property
    def bytes_dropped(self) -> int:
        return self._bytes_dropped

    @property
    def cuts(self) -> int:
        """How many times ``cut()`` was called."""
        return self._cuts

    @property
    def connections_cut(self) -> int:
        return self._connections_cut

    def wait_until(self, predicate: Callable[[FaultProxy], bool], timeout: float = 10.0, interval: float = 0.01) -> None:
        """Poll ``predicate(proxy)`` until true; raise TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    # ----------------------------------------------------------------- forwarding

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._connections_accepted += 1
        if self._refuse:
            self._connections_refused += 1
            client_writer.close()
            return
        link = _Link(client_writer)
        self._links.add(link)
        # Our own task rather than the server's callback task: cut() cancels it, and asyncio 3.11 logs
        # an error when a client_connected_cb task ends cancelled.
        link.task = asyncio.get_running_loop().create_task(self._forward(link, client_reader, client_writer))

    async def _forward(self, link: _Link, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await self._connect()
            link.upstream = up_writer
            up_queue: asyncio.Queue = asyncio.Queue(self.queue_chunks)
            down_queue: asyncio.Queue = asyncio.Queue(self.queue_chunks)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._read_side(client_reader, up_queue))
                tg.create_task(self._write_side(up_queue, up_writer, up=True))
                tg.create_task(self._read_side(up_reader, down_queue))
                tg.create_task(self._write_side(down_queue, client_writer, up=False))
        except asyncio.CancelledError:
            link.abort()
            raise
        except Exception:  # any failure (reset, refused target, connect timeout) aborts both sides
            link.abort()
        else:
            for writer in (client_writer, link.upstream):
                writer.close()
            for writer in (client_writer, link.upstream):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), self.op_timeout)
        finally:
            self._links.discard(link)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The target side of a new link (testkit.balancer picks among several targets here)."""
        return await asyncio.wait_for(asyncio.open_connection(*self.target, limit=self.chunk_size), self.connect_timeout)

    async def _read_side(self, reader: asyncio.StreamReader, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await reader.read(self.chunk_size)
            if not data:
                await queue.put((loop.time() + self._delay, _EOF))
                return
            if self._drop:
                self._bytes_dropped += len(data)
                continue
            await queue.put((loop.time() + self._delay, data))  # blocks when full: back-pressure

    async def _write_side(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, *, up: bool) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is _EOF:
                while self._drop:  # a FIN is "retransmitted" once the black hole is gone
                    await asyncio.sleep(0.02)
                if writer.can_write_eof():
                    writer.write_eof()
                    await writer.drain()
                else:
                    writer.close()
                return
            if self._drop:
                self._bytes_dropped += len(data)
                continue
            # counted before the write so a test that has received the bytes sees them counted
            if up:
                self._bytes_up += len(data)
            else:
                self._bytes_down += len(data)
            writer.write(data)
            await writer.drain()
