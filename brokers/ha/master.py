"""The master side of the HA link (reference §2.4): one ``MasterConnection`` per slave, owned by
``HAServer``. It answers the slave's handshake with the epoch entries, ships the log in batches of
at most haTransferBatchSize that never cross an epoch's end, sends empty transfers as heartbeats,
and records each ack (quorum waits, caught-up times, water levels)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..store.store import MessageStore
from ..tasks import cancel_and_wait
from ..tls import HANDSHAKE_TIMEOUT_S
from .epoch import EpochCache
from .packets import (
    SLAVE_ACK_SIZE,
    SLAVE_HANDSHAKE_SIZE,
    HAState,
    MasterHandshake,
    PacketError,
    SlaveAck,
    SlaveHandshake,
    TransferHeader,
)

log = logging.getLogger("brokers.ha")
WRITE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LinkTimings:
    transfer_batch_size: int = 32 * 1024  # haTransferBatchSize
    heartbeat_interval_s: float = 5.0  # haSendHeartbeatInterval
    housekeeping_interval_s: float = 20.0  # haHousekeepingInterval


def now_ms() -> int:
    return int(time.time() * 1000)


class MasterConnection:
    def __init__(self, server: HAServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.reader, self.writer = reader, writer
        host, port = writer.get_extra_info("peername")[:2]
        self.peer = f"{host}:{port}"
        self.state = HAState.HANDSHAKE
        self.slave_id: int | None = None
        self.async_learner = False
        self.sync_from_last_file = False
        self.ack_offset = -1  # slaveAckOffset; -1 until the first ack
        self.request_offset = -1  # where the slave asked to start
        self.last_master_max = 0  # the master's max offset when it last shipped a batch
        self.last_transfer_ms = 0
        self.caught_up_ms = 0  # connectionCaughtUpTimeTable
        self.bytes_shipped = 0
        self._rate_window: tuple[float, int] = (time.monotonic(), 0)
        self.transfer_rate = 0.0  # bytes/s over the last second or so
        self._wake = asyncio.Event()
        self._transfer: asyncio.Task | None = None

    @property
    def store(self) -> MessageStore:
        return self.server.store

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        timings = self.server.timings
        try:
            while True:
                head = await asyncio.wait_for(self.reader.readexactly(4), timings.housekeeping_interval_s)
                state = int.from_bytes(head, "big", signed=True)
                if state == HAState.HANDSHAKE:
                    rest = await asyncio.wait_for(self.reader.readexactly(SLAVE_HANDSHAKE_SIZE - 4), WRITE_TIMEOUT_S)
                    await self._on_handshake(SlaveHandshake.decode(head + rest))
                else:
                    rest = await asyncio.wait_for(self.reader.readexactly(SLAVE_ACK_SIZE - 4), WRITE_TIMEOUT_S)
                    self._on_ack(SlaveAck.decode(head + rest))
        except (asyncio.IncompleteReadError, ConnectionError):
            log.info("HA slave %s (id %s) disconnected", self.peer, self.slave_id)
        except TimeoutError:
            log.warning(
                "HA slave %s (id %s) silent for %.0f s; closing", self.peer, self.slave_id, timings.housekeeping_interval_s
            )
        except PacketError as exc:
            log.warning("HA slave %s sent a malformed packet (%s); closing", self.peer, exc)
        except Exception:
            log.exception("HA connection to slave %s failed; closing", self.peer)
        finally:
            await self.close()

    async def close(self) -> None:
        await cancel_and_wait(self._transfer)
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except (TimeoutError, OSError):
            pass
        self.server.forget(self)

    async def _send(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionResetError("the HA connection is closed")
        self.writer.write(data)
        await asyncio.wait_for(self.writer.drain(), WRITE_TIMEOUT_S)

    async def _on_handshake(self, hs: SlaveHandshake) -> None:
        self.state = HAState.HANDSHAKE
        self.slave_id, self.async_learner, self.sync_from_last_file = hs.slave_broker_id, hs.async_learner, hs.sync_from_last_file
        epochs = self.server.epochs
        reply = MasterHandshake(
            self.store.max_offset, epochs.last_epoch(), tuple((e.epoch, e.start_offset) for e in epochs.entries)
        )
        await self._send(reply.encode())
        log.info(
            "HA slave %s (id %d) handshake; master max offset %d, epoch %d",
            self.peer,
            self.slave_id,
            self.store.max_offset,
            epochs.last_epoch(),
        )

    def _on_ack(self, ack: SlaveAck) -> None:
        if ack.state != HAState.TRANSFER:
            raise PacketError(f"unexpected slave state {ack.state}")
        self.state = HAState.TRANSFER
        self.ack_offset = ack.max_offset
        if self.request_offset < 0:
            self.request_offset = ack.max_offset
            self._transfer = asyncio.get_running_loop().create_task(self._ship_or_close(), name=f"ha-ship-{self.peer}")
        if not self.async_learner and ack.max_offset >= self.last_master_max and self.last_transfer_ms:
            # §2.2 caught-up tracking
            caught = now_ms() if ack.max_offset >= self.store.max_offset else self.last_transfer_ms
            self.caught_up_ms = max(self.caught_up_ms, caught)
        self.server.acked(self)

    def _start_position(self) -> int:
        store = self.store
        if self.request_offset == 0:
            if self.sync_from_last_file:
                size = store.config.mapped_file_size_commit_log
                return max(store.min_offset, store.max_offset - store.max_offset % size)
            return store.min_offset
        return max(self.request_offset, store.min_offset)  # below the min: seed 004 case 1-1

    async def _ship_or_close(self) -> None:
        """Shipping ends only with the connection: a failed write closes it (the slave reconnects)."""
        try:
            await self._ship()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info(
                "shipping to HA slave %s (id %s) stopped (%s: %s); closing", self.peer, self.slave_id, type(exc).__name__, exc
            )
            self.writer.close()

    async def _ship(self) -> None:
        timings = self.server.timings
        pos = self._start_position()
        if pos > self.store.max_offset:
            log.error(
                "HA slave %s (id %s) asks for offset %d beyond this master's max %d: its log forked "
                "and was not truncated; closing",
                self.peer,
                self.slave_id,
                pos,
                self.store.max_offset,
            )
            self.writer.close()
            return
        last_send = time.monotonic()
        while True:
            self._wake.clear()
            epoch, epoch_start, epoch_end = self.server.epoch_bounds(pos)
            limit = timings.transfer_batch_size if epoch_end is None else min(timings.transfer_batch_size, epoch_end - pos)
            data = await self.store.read_raw(pos, limit) if limit > 0 else b""
            if data:
                self.last_master_max = self.store.max_offset
                self.last_transfer_ms = now_ms()
                header = TransferHeader(len(data), pos, epoch, epoch_start, self.store.confirm_offset)
                await self._send(header.encode() + data)
                pos += len(data)
                self._count(len(data))
                last_send = time.monotonic()
                continue
            if self.ack_offset >= self.store.max_offset and not self.async_learner:
                self.caught_up_ms = now_ms()  # nothing to send: the slave is caught up (§2.2)
            idle = time.monotonic() - last_send
            if idle >= timings.heartbeat_interval_s:
                header = TransferHeader(0, pos, epoch, epoch_start, self.store.confirm_offset)
                await self._send(header.encode())
                last_send = time.monotonic()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timings.heartbeat_interval_s - idle)
            except TimeoutError:
                pass

    def _count(self, n: int) -> None:
        self.bytes_shipped += n
        start, at_start = self._rate_window
        elapsed = time.monotonic() - start
        if elapsed >= 1.0:
            self.transfer_rate = (self.bytes_shipped - at_start) / elapsed
            self._rate_window = (time.monotonic(), self.bytes_shipped)

    def water_level(self, in_sync_state_set: bool, in_sync: bool) -> dict:
        """This slave's entry of the water-level report; ``in_sync``: quorum.slave_in_sync's verdict."""
        idle = time.monotonic() - self._rate_window[0]
        rate = self.transfer_rate if idle < 3 else 0.0
        return {
            "brokerId": self.slave_id if self.slave_id is not None else -1,
            "addr": self.peer,
            "ackOffset": max(0, self.ack_offset),
            "lagBytes": max(0, self.store.max_offset - max(0, self.ack_offset)),
            "lastCaughtUpMs": self.caught_up_ms,
            "transferBytesPerS": round(rate, 1),
            "inSyncStateSet": in_sync_state_set,
            "inSync": in_sync,
        }


class HAServer:
    """Listens on haListenPort and owns every slave connection."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochCache,
        timings: LinkTimings,
        on_ack: Callable[[MasterConnection], None],
        *,
        tls: ssl.SSLContext | None = None,
        admit: Callable[[dict | None], bool] | None = None,
    ):
        """``tls``: mutual TLS (a slave without a certificate of the cluster CA fails the handshake);
        ``admit(peer_certificate)``: whether a verified slave is one of this group (brokers/tls.py)."""
        self.store = store
        self.tls, self.admit = tls, admit
        self.epochs = epochs
        self.timings = timings
        self.acked = on_ack  # each ack of a connection, and its close (quorum counts, the SyncStateSet)
        self.connections: set[MasterConnection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> None:
        handshake_s = HANDSHAKE_TIMEOUT_S if self.tls else None
        self._server = await asyncio.start_server(self._accept, host, port, ssl=self.tls, ssl_handshake_timeout=handshake_s)
        self.store.write_listeners.add(self._wake_all)

    async def stop(self) -> None:
        self.store.write_listeners.discard(self._wake_all)
        if self._server is not None:
            self._server.close()
        await cancel_and_wait(*self._tasks)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.admit is not None and not self.admit(writer.get_extra_info("peercert")):
            peer = writer.get_extra_info("peername")
            log.warning("HA connection from %s refused: its certificate names no broker of this group", peer)
            writer.close()
            return
        conn = MasterConnection(self, reader, writer)
        self.connections.add(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # stopping; ending normally keeps asyncio's stream callback from logging it as an error
        finally:
            if task is not None:
                self._tasks.discard(task)

    def forget(self, conn: MasterConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.acked(conn)  # a closed connection changes quorum counts

    def _wake_all(self) -> None:
        for conn in self.connections:
            conn.wake()

    def epoch_bounds(self, offset: int) -> tuple[int, int, int | None]:
        """(epoch, its start, its end or None for the open last epoch) of the entry covering ``offset``."""
        entries = self.epochs.entries
        chosen = None
        for i, e in enumerate(entries):
            if e.start_offset <= offset:
                chosen = i
            else:
                break
        if chosen is None:
            return (entries[0].epoch, entries[0].start_offset, entries[0].start_offset) if entries else (0, 0, None)
        end = entries[chosen + 1].start_offset if chosen + 1 < len(entries) else None
        return entries[chosen].epoch, entries[chosen].start_offset, end
