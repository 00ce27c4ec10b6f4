"""The slave side of the HA link (reference §2.4): connect to the master's HA address, handshake,
cut a forked tail where the epoch entries say the logs part (reference §2.5, seed 004's six cases),
then append what the master ships and ack it. Reconnects with backoff after any error."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable

from ..retry import Backoff
from ..store.cuts import CutCause, CutRefused
from ..store.store import MessageStore
from ..tasks import cancel_and_wait
from .epoch import EpochCache, EpochEntry, EpochFile, ForkCase, plan_catch_up
from .master import WRITE_TIMEOUT_S, LinkTimings
from .packets import (
    MASTER_HANDSHAKE_HEADER_SIZE,
    TRANSFER_HEADER_SIZE,
    HAState,
    MasterHandshake,
    PacketError,
    SlaveAck,
    SlaveHandshake,
    TransferHeader,
)

log = logging.getLogger("brokers.ha")
CONNECT_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 5.0
BACKOFF_START_S, BACKOFF_MAX_S = 0.1, 5.0
REFUSED_RETRY_S = 30.0
TRANSFER_QUEUE = 256  # transfers read ahead of the appender (at most 256 x haTransferBatchSize)
MAX_APPEND = 4 * 1024 * 1024  # bytes appended (and acked) together


class ReplicationError(Exception):
    """The link must be dropped and started again (offset mismatch, protocol violation)."""


class ReplicationRefused(ReplicationError):
    """The logs cannot be reconciled automatically (seed 004 case 3-3): manual intervention."""


class HAClient:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFile,
        broker_id: int,
        master_addr: Callable[[], str | None],
        timings: LinkTimings,
        sync_from_last_file: bool = False,
        async_learner: bool = False,
        *,
        tls: ssl.SSLContext | None = None,
    ):
        """``tls``: mutual TLS (tlsReplicationEnable): a master whose certificate the cluster CA did
        not sign, or that does not name its address, fails the handshake and is not copied from."""
        self.store = store
        self.tls = tls
        self.epochs = epochs
        self.broker_id = broker_id
        self.master_addr = master_addr
        self.timings = timings
        self.sync_from_last_file = sync_from_last_file
        self.async_learner = async_learner
        self.state = HAState.READY
        self.connected_to: str | None = None
        self.refused: str | None = None  # why the logs could not be reconciled (3-3), for operators
        self.last_truncation: tuple[str, int] | None = None  # (fork case, offset) of the last handshake cut
        self.reconnects = 0
        self._task: asyncio.Task | None = None
        self._writer: asyncio.StreamWriter | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ha-client")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self.state = HAState.SHUTDOWN

    async def _run(self) -> None:
        backoff = Backoff(BACKOFF_START_S, BACKOFF_MAX_S)
        while True:
            refused = False
            self.state = HAState.READY
            addr = self.master_addr()
            if not addr:
                await asyncio.sleep(1.0)
                continue
            host, _, port = addr.rpartition(":")
            writer = None
            try:
                reader, writer = await asyncio.wait_for(self._connect(host, int(port)), CONNECT_TIMEOUT_S)
                self._writer = writer
                self.connected_to = addr
                await self._session(reader, writer)
            except ReplicationRefused as exc:
                self.refused = str(exc)
                log.error(
                    "replication from %s refused: %s; manual intervention needed (retrying in %.0f s)", addr, exc, REFUSED_RETRY_S
                )
                refused = True
            except (OSError, TimeoutError, asyncio.IncompleteReadError, PacketError, ReplicationError) as exc:
                log.info("HA link to %s down (%s: %s); reconnecting in %.1f s", addr, type(exc).__name__, exc, backoff.current)
            except Exception:  # the link must come back whatever broke it (uvloop raises RuntimeError on a closed socket)
                log.exception("HA link to %s failed; reconnecting in %.1f s", addr, backoff.current)
            finally:
                self.connected_to = None
                self._writer = None
                if writer is not None:
                    writer.close()
            self.reconnects += 1
            if refused:  # a long wait (an operator's turn), then quick attempts again
                backoff.reset()
                await asyncio.sleep(REFUSED_RETRY_S)
            else:
                await backoff.sleep()

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.tls is None:
            return await asyncio.open_connection(host, port)
        return await asyncio.open_connection(
            host, port, ssl=self.tls, server_hostname=host, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
        )

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if writer.is_closing():
            raise ConnectionResetError("the HA connection is closed")
        writer.write(data)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.state = HAState.HANDSHAKE
        await self._send(writer, SlaveHandshake(self.sync_from_last_file, self.async_learner, self.broker_id).encode())
        raw = await asyncio.wait_for(reader.readexactly(MASTER_HANDSHAKE_HEADER_SIZE), HANDSHAKE_TIMEOUT_S)
        state = int.from_bytes(raw[:4], "big", signed=True)
        if state != HAState.HANDSHAKE:
            raise ReplicationError(f"expected the master's handshake, got state {state}")
        body_size, master_max, _last_epoch = MasterHandshake.decode_header(raw)
        body = await asyncio.wait_for(reader.readexactly(body_size), HANDSHAKE_TIMEOUT_S) if body_size else b""
        master_entries = [EpochEntry(e, s) for e, s in MasterHandshake.decode_body(body)]
        fresh = await self._reconcile(master_entries, master_max)
        self.refused = None
        self.state = HAState.TRANSFER
        await self._send(writer, SlaveAck(HAState.TRANSFER, 0 if fresh else self.store.max_offset).encode())
        transfers: asyncio.Queue = asyncio.Queue(TRANSFER_QUEUE)
        pump = asyncio.get_running_loop().create_task(self._read_transfers(reader, transfers), name="ha-read")
        try:
            await self._apply_transfers(writer, transfers)
        finally:
            await cancel_and_wait(pump)

    async def _read_transfers(self, reader: asyncio.StreamReader, transfers: asyncio.Queue) -> None:
        """Read transfers as they come, so the appender can take every one already here at once."""
        try:
            while True:
                raw = await asyncio.wait_for(reader.readexactly(TRANSFER_HEADER_SIZE), self.timings.housekeeping_interval_s)
                state = int.from_bytes(raw[:4], "big", signed=True)
                if state != HAState.TRANSFER:
                    raise ReplicationError(f"expected a transfer, got state {state}")
                header = TransferHeader.decode(raw)
                data = await asyncio.wait_for(reader.readexactly(header.body_size), WRITE_TIMEOUT_S) if header.body_size else b""
                await transfers.put((header, data))
        except Exception as exc:
            await transfers.put(exc)

    async def _apply_transfers(self, writer: asyncio.StreamWriter, transfers: asyncio.Queue) -> None:
        first = True
        last_ack = time.monotonic()
        current_epoch = self.epochs.last_epoch()
        while True:
            items = [await transfers.get()]
            size = len(items[0][1]) if isinstance(items[0], tuple) else 0
            while not transfers.empty() and size < MAX_APPEND:
                items.append(transfers.get_nowait())
                size += len(items[-1][1]) if isinstance(items[-1], tuple) else 0
            chunks: list[tuple[int, bytes]] = []
            end = self.store.max_offset
            confirm = None
            for item in items:
                if isinstance(item, BaseException):
                    if chunks:
                        await self.store.append_replicated(chunks)
                    raise item
                header, data = item
                if header.offset != end:
                    # The master ships from its min when it no longer has what was asked (it deleted
                    # its oldest files): an empty replica, or seed 004 case 1-1 found only now (the
                    # handshake's epochs still start below the master's min), starts again there.
                    if first and header.offset > end:
                        await self._restart_at(header.offset, header.offset)
                        end = self.store.max_offset
                    else:
                        raise ReplicationError(f"the master ships offset {header.offset}, this log ends at {end}")
                first = False
                if header.epoch != current_epoch and header.epoch > self.epochs.last_epoch():
                    if chunks:  # the epoch entry is written after the bytes before it
                        await self.store.append_replicated(chunks)
                        chunks = []
                    self.epochs.append(EpochEntry(header.epoch, header.epoch_start_offset))
                current_epoch = header.epoch
                if data:
                    chunks.append((header.offset, data))
                    end += len(data)
                confirm = header.confirm_offset
            if chunks:
                await self.store.append_replicated(chunks)
            if confirm is not None:
                self.store.set_confirm_offset(min(confirm, self.store.max_offset))
            if size or time.monotonic() - last_ack >= self.timings.heartbeat_interval_s:
                await self._send(writer, SlaveAck(HAState.TRANSFER, self.store.max_offset).encode())
                last_ack = time.monotonic()

    async def _restart_at(self, offset: int, master_min: int) -> None:
        """Start the log again, empty, at ``offset``: allowed when the whole log lies below the
        master's min (retention, seed 004 case 1-1) or is empty (cuts.py)."""
        store = self.store
        log.info("replica log restarts at the master's offset %d (it had %d..%d)", offset, store.min_offset, store.max_offset)
        cut = store.cut_evidence(CutCause.RESTART_FROM_MASTER, store.min_offset, "from the master's min", master_min=master_min)
        await self._guarded(store.restart_at(offset, cut, first=lambda: self.epochs.truncate_suffix_by_offset(-1)))

    @staticmethod
    async def _guarded(cutting) -> None:
        """A cut the acknowledged-data guard refuses leaves the log as it is: the link is refused."""
        try:
            await cutting
        except CutRefused as exc:
            raise ReplicationRefused(str(exc)) from exc

    async def _reconcile(self, master: list[EpochEntry], master_max: int) -> bool:
        """The handshake's truncation (reference §2.4 doTruncate, seed 004). Returns True when this
        replica starts afresh (reports offset 0: the master chooses where to start)."""
        store = self.store
        await store.drop_unwritten()
        if not self.epochs.entries:
            if store.max_offset > store.min_offset:
                log.warning(
                    "replica log %d..%d has no epoch entries; it is discarded and copied again",
                    store.min_offset,
                    store.max_offset,
                )
                cut = store.cut_evidence(CutCause.NO_EPOCHS, store.min_offset, "no epoch entries")
                await self._guarded(store.restart_at(0, cut, first=lambda: self.epochs.truncate_suffix_by_offset(-1)))
            return True
        if not master:
            raise ReplicationError("the master has no epoch entries yet")
        point = self.epochs.find_consistent_point(store.max_offset, master, master_max)
        if point < 0 and self.epochs.last_epoch() < master[0].epoch:
            return await self._older_than_the_master(master, master_max)
        plan = plan_catch_up(store.min_offset, store.max_offset, master[0].start_offset, master_max, point)
        self.last_truncation = (str(plan.case), plan.offset)
        if plan.action == "REFUSE":
            raise ReplicationRefused(
                f"fork case {plan.case}: replica log {store.min_offset}..{store.max_offset}, "
                f"master up to {master_max}, consistent point {point}"
            )
        if plan.action == "START_FROM_MASTER_MIN":
            if point is not None and 0 <= point < store.max_offset:
                await self._cut_fork(str(plan.case), point, master, master_max)  # the forked part first
            await self._restart_at(0, master[0].start_offset)
            return True
        if plan.offset < store.max_offset:
            await self._cut_fork(str(plan.case), plan.offset, master, master_max)
        return False

    async def _older_than_the_master(self, master: list[EpochEntry], master_max: int) -> bool:
        """The master holds none of this replica's epochs: retention deleted them (truncatePrefixByOffset),
        so its log starts after everything they cover (seed 004 case 1-1, seen through the epochs). What
        this replica holds from the master's first entry on is of older epochs than the master's bytes
        there: a fork, cut as one; the rest lies below the master's min, and the first transfer (from
        the master's min: this replica reports 0) starts the log again there."""
        store = self.store
        at = max(master[0].start_offset, store.min_offset)
        self.last_truncation = (str(ForkCase.CASE_1_1), at)
        if at < store.max_offset:
            await self._cut_fork(str(ForkCase.CASE_1_1), at, master, master_max)
        return True

    async def _cut_fork(self, case: str, offset: int, master: list[EpochEntry], master_max: int) -> None:
        store = self.store
        log.warning("fork case %s: cutting this replica's log at %d (it ended at %d)", case, offset, store.max_offset)
        cut = store.cut_evidence(
            CutCause.FORK,
            offset,
            f"fork case {case}",
            own_epoch=_entry_at(self.epochs, offset, store.max_offset),
            master_epoch=_entry_at(EpochCache(master), offset, master_max),
        )
        # The epoch file first: see docs/replication.md
        await self._guarded(store.truncate(cut, first=lambda: self.epochs.truncate_suffix_by_offset(offset)))

    def water_level(self) -> dict:
        return {"haState": self.state.name, "masterHaAddr": self.connected_to or "", "refused": self.refused or ""}


def _entry_at(epochs: EpochCache, offset: int, log_end: int) -> tuple[int, int] | None:
    """(epoch, start) of the entry covering ``offset`` in a log ending at ``log_end``; None past the end."""
    entry = epochs.find_entry_by_offset(offset, log_end)
    return None if entry is None else (entry.epoch, entry.start_offset)
