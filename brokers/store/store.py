"""The message store on the broker's event loop: a writer task does the blocking I/O in one thread.

put_message enqueues; the writer takes everything queued (a batch), places and encodes the records,
writes them with one pwrite per segment, dispatches them to the consume queues and, under
SYNC_FLUSH, fsyncs once for the whole batch before acknowledging any of them (group commit).
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

from .commitlog import CommitLog, RecoveryReport
from .consumequeue import ConsumeQueues, tags_code
from .message import END_FILE_MIN_BLANK_LENGTH, Message, encode, record_size, validate

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


@dataclass(frozen=True)
class PutResult:
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
        accepted: list[tuple[int, Message, bytes, bytes, int]] = []
        for i, msg in enumerate(messages):
            try:
                topic, props = validate(msg)
            except ValueError as exc:
                status = (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED if "properties" in str(exc)
                          else PutMessageStatus.MESSAGE_ILLEGAL)
                results[i] = PutResult(status, detail=str(exc))
                continue
            size = record_size(topic, msg.body, props)
            if size + END_FILE_MIN_BLANK_LENGTH > self.config.mapped_file_size_commit_log:
                results[i] = PutResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                       detail=f"a {size}-byte record does not fit a commit-log segment")
                continue
            accepted.append((i, msg, topic, props, size))
        if accepted:
            fut = asyncio.get_running_loop().create_future()
            await self._queue.put(([a[1:] for a in accepted], fut))
            for (i, *_), result in zip(accepted, await fut, strict=True):
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
                flat = await loop.run_in_executor(self._io, self._append, records, sync)
            except Exception as exc:
                # An I/O error mid-batch: stop taking writes (fenced) rather than risk consume-queue
                # entries that point past the log; a restart's recovery rebuilds a consistent store.
                self.running = False
                log.exception("commit-log write failed; the store stops taking writes")
                flat = [PutResult(PutMessageStatus.UNKNOWN_ERROR, detail=str(exc))] * len(records)
            at = 0
            for rs, fut in batch:
                if not fut.done():
                    fut.set_result(flat[at:at + len(rs)])
                at += len(rs)

    def _append(self, records: list[tuple[Message, bytes, bytes, int]], sync: bool) -> list[PutResult]:
        """Place, encode and write a batch of validated (message, topic, properties, size) records."""
        now = int(time.time() * 1000)
        sizes = [r[3] for r in records]
        queue_offsets: list[int] = []
        get_queue = self.consume_queues.get

        def make(i: int, physical: int) -> bytes:
            msg, topic, props, size = records[i]
            qo = get_queue(msg.topic, msg.queue_id).add(physical, size, tags_code(msg.properties.get("TAGS")))
            queue_offsets.append(qo)
            return encode(msg, queue_offset=qo, physical_offset=physical, store_timestamp=now, topic=topic, props=props)

        offsets = self.commit_log.append_batch(sizes, make)
        if sync:
            self.commit_log.flush()  # one fsync acknowledges the whole batch
            self.stats["fsyncs"] += 1
        self.stats["messages"] += len(records)
        self.stats["batches"] += 1
        for cq in self.consume_queues.queues.values():
            cq.write_pending()
        return [PutResult(PutMessageStatus.PUT_OK, off, qo, size, now)
                for off, qo, size in zip(offsets, queue_offsets, sizes, strict=True)]

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
