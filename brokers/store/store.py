"""The message store on the broker's event loop: a writer task does the blocking I/O in one thread.

put_message enqueues; the writer takes everything queued (a batch), places and encodes the records
on the event loop, then in one I/O thread writes them (pwritev per segment), under SYNC_FLUSH fsyncs
once for the whole batch, and writes their consume-queue entries, before acknowledging any of them
(group commit).
Under ASYNC_FLUSH sends are acknowledged after the write and a flusher fsyncs periodically.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from .commitlog import CommitLog, RecoveryReport, Writes
from .consumequeue import ConsumeQueues, tags_code
from .message import END_FILE_MIN_BLANK_LENGTH, HEAD_BODY_SIZE, Message, body_crc, encode_head, record_tail, validate

log = logging.getLogger(__name__)


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class PutMessageStatus(StrEnum):
    """Reference §4.4 (the ones this store produces)."""

    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class PutResult(NamedTuple):  # a tuple: one is built per message stored, and tuples are cheapest
    status: PutMessageStatus
    physical_offset: int = -1
    queue_offset: int = -1
    size: int = 0
    store_timestamp: int = 0
    detail: str = ""


@dataclass(frozen=True)
class StoreConfig:
    store_path_root_dir: Path
    mapped_file_size_commit_log: int = 1 << 30
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms, ASYNC_FLUSH
    max_batch: int = 4096  # records per group commit
    max_pending: int = 65536  # back-pressure: put_message waits beyond this


class MessageStore:
    def __init__(self, config: StoreConfig):
        self.config = config
        root = Path(config.store_path_root_dir)
        self.commit_log = CommitLog(root / "commitlog", config.mapped_file_size_commit_log)
        self.consume_queues = ConsumeQueues(root / "consumequeue")
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-io")
        self._queue: asyncio.Queue | None = None
        self._tasks: list[asyncio.Task] = []
        self.running = False
        self.recovery: RecoveryReport | None = None
        # Counters for operators and tests: group commit shows as batches << messages.
        self.stats = {"messages": 0, "batches": 0, "fsyncs": 0}

    # --- life cycle -------------------------------------------------------------------------------

    def recover(self) -> RecoveryReport:
        """Blocking: cut the torn tail of the commit log and rebuild the consume queues from it."""
        self.consume_queues.reset()

        def dispatch(offset: int, size: int, msg: Message) -> None:
            cq = self.consume_queues.get(msg.topic, msg.queue_id)
            cq.add(offset, size, tags_code(msg.properties.get("TAGS")))

        self.recovery = self.commit_log.recover(dispatch)
        for cq in self.consume_queues.queues.values():
            cq.write_pending()
        self.consume_queues.flush()
        return self.recovery

    async def start(self) -> RecoveryReport:
        loop = asyncio.get_running_loop()
        report = await loop.run_in_executor(self._io, self.recover)
        self._queue = asyncio.Queue(self.config.max_pending)
        self._tasks = [loop.create_task(self._writer(), name="store-writer")]
        if self.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self._tasks.append(loop.create_task(self._flusher(), name="store-flusher"))
        self.running = True
        return report

    async def shutdown(self) -> None:
        self.running = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._io, self._close)
        self._io.shutdown(wait=True)

    def _close(self) -> None:
        self.commit_log.flush()
        self.consume_queues.flush()
        self.commit_log.close()
        self.consume_queues.close()

    # --- writing ----------------------------------------------------------------------------------

    async def put_message(self, msg: Message) -> PutResult:
        return (await self.put_messages([msg]))[0]

    async def put_messages(self, messages: list[Message]) -> list[PutResult]:
        """Store several messages (a batch send); one result each, in order. Illegal messages are
        refused one by one; the others are written together."""
        if not self.running or self._queue is None:
            return [PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail="the store is not running")] * len(messages)
        results: list[PutResult | None] = [None] * len(messages)
        accepted: list[int] = []
        records: list[tuple[Message, bytes, int]] = []  # (message, record tail, record size)
        limit = self.config.mapped_file_size_commit_log - END_FILE_MIN_BLANK_LENGTH
        for i, msg in enumerate(messages):
            try:
                topic, props = validate(msg)
            except ValueError as exc:
                status = (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(exc)
                          else PutMessageStatus.MESSAGE_ILLEGAL)
                results[i] = PutResult(status, detail=str(exc))
                continue
            tail = record_tail(topic, props)
            size = HEAD_BODY_SIZE + len(msg.body) + len(tail)
            if size > limit:
                results[i] = PutResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                       detail=f"a {size}-byte record does not fit a commit-log segment")
                continue
            accepted.append(i)
            records.append((msg, tail, size))
        if records:
            fut = asyncio.get_running_loop().create_future()
            await self._queue.put((records, fut))
            stored = await fut
            if len(accepted) == len(messages):
                return stored
            for i, result in zip(accepted, stored, strict=True):
                results[i] = result
        return results  # type: ignore[return-value]

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        sync = self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        while True:
            batch = [await self._queue.get()]
            count = len(batch[0][0])
            while count < self.config.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
                count += len(batch[-1][0])
            records = [r for rs, _ in batch for r in rs]
            try:
                # Placing and encoding is CPU work: here, on the loop (a second Python thread would
                # only contend for the GIL). The writes and the fsync release the GIL: I/O thread.
                flat, writes, entries = self._place(records)
                await loop.run_in_executor(self._io, self._write, writes, entries, sync)
            except Exception as exc:
                # An I/O error mid-batch: stop taking writes (fenced) rather than risk consume-queue
                # entries that point past the log; a restart's recovery rebuilds a consistent store.
                self.running = False
                log.exception("commit-log write failed; the store stops taking writes")
                flat = [PutResult(PutMessageStatus.UNKNOWN_ERROR, detail=str(exc))] * len(records)
            self.stats["messages"] += len(records)
            self.stats["batches"] += 1
            at = 0
            for rs, fut in batch:
                if not fut.done():
                    fut.set_result(flat[at:at + len(rs)])
                at += len(rs)

    def _place(self, records: list[tuple[Message, bytes, int]]) -> tuple[list[PutResult], Writes, list]:
        """Give a batch of validated (message, record tail, size) records their physical and queue
        offsets and encode them; no I/O. Returns the results and what ``_write`` must write."""
        now = int(time.time() * 1000)
        queues = self.consume_queues.queues
        get_queue = self.consume_queues.get
        queue_offsets: list[int] = []

        def make(i: int, physical: int) -> tuple[bytes, bytes, bytes]:
            msg, tail, size = records[i]
            cq = queues.get((msg.topic, msg.queue_id)) or get_queue(msg.topic, msg.queue_id)
            qo = cq.add(physical, size, tags_code(msg.properties.get("TAGS")))
            queue_offsets.append(qo)
            body = msg.body
            return encode_head(msg, size, body_crc(body), qo, physical, now), body, tail

        offsets, writes = self.commit_log.place_batch([r[2] for r in records], make)
        ok = PutMessageStatus.PUT_OK
        results = [PutResult(ok, off, qo, r[2], now) for off, qo, r in zip(offsets, queue_offsets, records, strict=True)]
        return results, writes, self.consume_queues.take_pending()

    def _write(self, writes: Writes, entries: list, sync: bool) -> None:
        """Blocking (I/O thread): the commit-log writes, then (SYNC_FLUSH) one fsync for the whole
        batch, then the consume-queue entries, so an entry never points at bytes not yet written."""
        self.commit_log.write(writes)
        if sync:
            self.commit_log.flush()  # one fsync acknowledges the whole batch (group commit)
            self.stats["fsyncs"] += 1
        for cq, first, data in entries:
            cq.write(first, data)

    async def _flusher(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.flush_interval_commit_log / 1000)
            await loop.run_in_executor(self._io, self._flush_all)

    def _flush_all(self) -> None:
        self.commit_log.flush()
        self.consume_queues.flush()

    # --- reading ----------------------------------------------------------------------------------

    async def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32) -> list[Message]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._get, topic, queue_id, queue_offset, max_count)

    def _get(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> list[Message]:
        cq = self.consume_queues.queues.get((topic, queue_id))
        if cq is None:
            return []
        return [self.commit_log.read_message(phys, size) for _, phys, size, _ in cq.entries(queue_offset, max_count)]

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0
