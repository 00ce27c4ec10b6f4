"""The message store on the broker's event loop: a writer task does the blocking I/O in one thread.

put_message enqueues; the writer takes everything queued (a batch), places and encodes the records
on the event loop, then in one I/O thread writes them (pwritev per segment) and, under SYNC_FLUSH,
fsyncs once for the whole batch before acknowledging any of them (group commit). Under ASYNC_FLUSH
sends are acknowledged after the write and a flusher fsyncs periodically.

Consume-queue entries become visible only up to the confirm offset (reference §2.6): a master whose
confirm offset follows its max offset (``follow_max``, the default) publishes them right after the
commit-log write; otherwise (a slave, or a master waiting for its whole SyncStateSet) they are parked
until ``set_confirm_offset`` covers them, so consumers never see unconfirmed data, also after a
restart (the confirm offset is checkpointed and recovery parks what lies beyond it).

Replication (brokers/ha/): a slave appends its master's bytes with ``append_replicated`` and cuts a
forked tail with ``truncate``; a master ships ``read_raw`` bytes and, through ``replicas`` (a
``ReplicaGate``), makes sends wait for replica acks (quorum write, reference §4).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Protocol

from ..core.retention import LogFile
from ..tasks import cancel_and_wait
from . import codec
from .codec import Entries, Record
from .commitlog import CommitLog, RecoveryReport, Writes
from .consumequeue import ConsumeQueues, tags_code
from .cuts import MARKER, Cut, CutCause, CutRefused, TailShape, judge, tail_shape
from .cuts import describe as describe_cut
from .files import write_json_atomically
from .index import IndexDisabled, IndexLayout, MessageIndex
from .message import END_FILE_MIN_BLANK_LENGTH, Blank, CorruptRecord, Message, decode, record_length, tags_of
from .results import PutMessageStatus, PutResult

__all__ = ["FlushDiskType", "MessageStore", "PutMessageStatus", "PutResult", "ReplicaGate", "StoreConfig", "WriteGate"]

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 0.5
PROBE_BYTES = 1 << 20  # a repair writes (and fsyncs) this much before the store takes writes again
PAGE_SIZE = 4096
_SIZE = itemgetter(2)  # a prepared record's size (codec.Record)
WRITE_JOBS_IN_FLIGHT = 2  # the loop encodes the next batch while the I/O thread writes this one


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class WriteGate(Protocol):
    """Who decides whether this store takes sends: on a broker, brokers/ha/gate.py's ``WritePermission``
    (the one owner of that decision; the store has no flag of its own to set)."""

    def refusal(self) -> str | None:
        """None while sends are taken, else why not (a refused send's detail)."""


class ReplicaGate(Protocol):
    """What a master's HA service offers the store for quorum writes (reference §4.2-4.3)."""

    def precheck(self) -> tuple[PutMessageStatus | None, int]:
        """Before writing: a refusal (IN_SYNC_REPLICAS_NOT_ENOUGH) or None, and needAckNums."""

    async def wait(self, next_offset: int, need_acks: int) -> PutMessageStatus:
        """PUT_OK once enough replicas acked ``next_offset``, else FLUSH_SLAVE_TIMEOUT."""


@dataclass(frozen=True)
class StoreConfig:
    store_path_root_dir: Path
    mapped_file_size_commit_log: int = 1 << 30
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500  # ms, ASYNC_FLUSH: the flush thread waits at most this long
    flush_commit_log_least_pages: int = 4  # ASYNC_FLUSH: flush once this many 4 KB pages are unflushed
    flush_commit_log_thorough_interval: int = 10_000  # ms: then flush whatever is unflushed
    max_batch: int = 4096  # records per group commit
    max_pending: int = 65536  # back-pressure: put_message waits beyond this
    # The message index (index.py; RocketMQ's messageIndexEnable, maxHashSlotNum, maxIndexNum).
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000


class MessageStore:
    def __init__(self, config: StoreConfig, write_gate: WriteGate | None = None, *, follow_max: bool = True):
        """``write_gate``: who decides whether sends are taken (None: always, as a standalone store).
        ``follow_max``: whether the confirm offset follows the max offset from recovery on (a master's;
        a slave publishes only up to its master's confirm offset, reference §2.6)."""
        self.config = config
        self._write_gate = write_gate
        root = Path(config.store_path_root_dir)
        self.commit_log = CommitLog(root / "commitlog", config.mapped_file_size_commit_log, self._segment_started)
        self.consume_queues = ConsumeQueues(root / "consumequeue")
        layout = IndexLayout(config.max_hash_slot_num, config.max_index_num)
        self.index = MessageIndex(root / "index", self.commit_log, layout) if config.message_index_enable else None
        self.checkpoint_path = root / "checkpoint"
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-io")
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-read")
        self._flushes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-flush")  # ASYNC_FLUSH
        self._written: asyncio.Event | None = None  # set after each commit-log write: wakes the flusher
        self._published: asyncio.Event | None = None  # set (and replaced) when consume-queue entries become readable
        self._queue: asyncio.Queue | None = None
        self._acks: asyncio.Queue | None = None  # (write job, batch, results) in log order
        self._write_slots: asyncio.Semaphore | None = None
        self._write_error: BaseException | None = None  # set by the I/O thread: later jobs write nothing
        self._tasks: list[asyncio.Task] = []
        self.running = False
        self.recovery: RecoveryReport | None = None
        # Counters for operators and tests: group commit shows as batches << messages.
        self.stats = {"messages": 0, "batches": 0, "fsyncs": 0, "flushes": 0}  # fsyncs: SYNC_FLUSH; flushes: ASYNC
        self.flushed_offset = 0  # the log is on disk up to here (rocketmq_storage_flush_behind_bytes)
        # Role-dependent behaviour, changed by role changes (set_follow_max, the HA service's replicas).
        self.follow_max = follow_max  # the confirm offset follows the max offset (a master, §2.6)
        self.replicas: ReplicaGate | None = None
        self.confirm_offset = 0
        self._checkpointed_confirm = -1
        self._parked: deque[tuple[int, Entries]] = deque()  # (record end offset, entries), in log order
        self._reput_offset = 0  # replicated bytes up to here are turned into consume-queue entries
        self._reput_carry = b""  # a replicated record cut by the end of a transfer
        self.write_listeners: set[Callable[[], None]] = set()  # told after every commit-log write
        self.truncations = 0  # times the log was cut or restarted: readers of a queue start over
        self.deletions = 0  # oldest files deleted (retention): queues' min offsets moved
        self.segment_listeners: set[Callable[[], None]] = set()  # told when a commit-log file is started
        # Set when a commit-log write failed and the store stopped taking writes (``repair`` clears it):
        # a broker watching it steps down as master instead of refusing every send in place.
        self.failed = asyncio.Event()
        self._undecodable_at: int | None = None  # a replicated position whose bytes are no record (logged once)
        # Set once a cut has changed the log files, cleared once ``recover`` has rebuilt what derives
        # from them: while set, the consume queues and the dispatch position describe cut bytes.
        self._rebuild_owed = False

    @property
    def writable(self) -> bool:
        """Whether sends are taken now (read-only: the write gate decides; sends get SERVICE_NOT_AVAILABLE)."""
        return self._refusal() is None

    def _refusal(self) -> str | None:
        return None if self._write_gate is None else self._write_gate.refusal()

    # --- life cycle -------------------------------------------------------------------------------

    def _load_confirm_offset(self) -> int | None:
        try:
            return int(json.loads(self.checkpoint_path.read_text())["confirmPhyOffset"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            log.warning("checkpoint %s is unreadable; the confirm offset restarts at the min offset", self.checkpoint_path)
            return 0

    def recover(self, confirm: int | None = None) -> RecoveryReport:
        """Blocking: cut the torn tail of the commit log and rebuild the consume queues from it;
        entries of records beyond the checkpointed confirm offset (or ``confirm``, when given) are
        parked, not published (reference §2.6: recovery dispatches only up to the confirm offset,
        clamped into the log)."""
        self.consume_queues.reset()
        self._parked.clear()
        saved = self._load_confirm_offset() if confirm is None else confirm
        limit = None if self.follow_max or saved is None else saved

        def dispatch(offset: int, size: int, msg: Message) -> None:
            self._dispatch_record(offset, size, msg, publish=limit is None or offset + size <= limit)

        def before_cut(valid_end: int, log_end: int) -> None:
            shape = self.commit_log.tail_shape(valid_end)
            self._allow(Cut(CutCause.TORN_TAIL, valid_end, log_end, saved or 0, "recovery", tail=shape))

        self.recovery = self.commit_log.recover(dispatch, before_cut)
        if self.index is not None:
            self.index.recover()  # clamped to the log as it is now, its un-indexed tail indexed
        end = self.commit_log.max_offset
        self.confirm_offset = end if limit is None else max(self.commit_log.min_offset, min(limit, end))
        for cq in self.consume_queues.queues.values():
            cq.write_pending()
        self.consume_queues.flush()
        self._reput_offset, self._reput_carry = end, b""
        self._rebuild_owed = False
        return self.recovery

    def _rebuild_after_cut(self, confirm: int | None = None) -> RecoveryReport:
        """Blocking, once a cut changed the log files: checkpoint ``confirm`` and rebuild. The rebuild
        runs even when the checkpoint cannot be written (a full disk, soak seed 31337: the dispatch
        position stayed past the cut, and every later entry pointed at other bytes); a rebuild that
        fails itself stays owed (``drop_unwritten`` does it)."""
        if confirm is None:  # the confirm offset, clamped into the log as it is after the cut
            confirm = min(self.confirm_offset, self.commit_log.max_offset)
        self._rebuild_owed = True
        try:
            self._write_checkpoint(confirm)
        finally:
            report = self.recover(confirm)
        return report

    def _dispatch_record(self, offset: int, size: int, msg: Message, publish: bool) -> None:
        """One record read back from the log (recovery, replication) into its consume queue, at the
        queue offset the record carries: a replica that started at its master's min offset has no
        entries below it, so the gap is filled with holes (size 0) that readers skip."""
        cq = self.consume_queues.get(msg.topic, msg.queue_id)
        if msg.queue_offset < cq.max_offset:
            log.warning(
                "record at %d has queue offset %d but %s/%d is at %d; not dispatched",
                offset,
                msg.queue_offset,
                msg.topic,
                msg.queue_id,
                cq.max_offset,
            )
            return
        cq.skip_to(msg.queue_offset)
        if not publish:
            taken = cq.take_pending()  # earlier entries of this queue were published: write them first
            if taken:
                cq.write(*taken)
        cq.add(offset, size, tags_code(tags_of(msg.properties)))
        if not publish:
            added = cq.take_pending()
            assert added is not None  # the entry just added
            self._parked.append((offset + size, [(cq, *added)]))

    async def start(self) -> RecoveryReport:
        loop = asyncio.get_running_loop()
        report = await loop.run_in_executor(self._io, self.recover)
        self.flushed_offset = self.max_offset  # what recovery read back is on disk
        self._queue = asyncio.Queue(self.config.max_pending)
        self._write_slots = asyncio.Semaphore(WRITE_JOBS_IN_FLIGHT)
        self._acks = asyncio.Queue()
        self._write_error = None
        self._written = asyncio.Event()
        self._published = asyncio.Event()
        self._tasks = [
            loop.create_task(self._writer(), name="store-writer"),
            loop.create_task(self._acker(), name="store-acker"),
            loop.create_task(self._checkpointer(), name="store-checkpoint"),
        ]
        if self.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self._tasks.append(loop.create_task(self._flusher(), name="store-flusher"))
        self.running = True
        return report

    async def shutdown(self) -> None:
        self.running = False
        await cancel_and_wait(*self._tasks)
        loop = asyncio.get_running_loop()
        self._reads.shutdown(wait=True)
        self._flushes.shutdown(wait=True)
        await loop.run_in_executor(self._io, self._close)
        self._io.shutdown(wait=True)

    def _close(self) -> None:
        self.commit_log.flush()
        self.consume_queues.flush()
        self._write_checkpoint(self.confirm_offset)
        if self.index is not None:
            self.index.close()
        self.commit_log.close()
        self.consume_queues.close()

    # --- offsets ----------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_offset(self) -> int:
        """The end of the written log (what replicas can copy and water levels report)."""
        return self.commit_log.written_offset

    @property
    def valid_end(self) -> int:
        """The end of the last whole record (a slave's copy may end inside one)."""
        return self._reput_offset

    def set_follow_max(self, follow: bool) -> None:
        """A master's confirm offset follows its max offset (§2.6: SyncStateSet of one, or
        allAckInSyncStateSet off); switching it on publishes everything parked (promotion)."""
        self.follow_max = follow
        if follow:
            self.set_confirm_offset(self.max_offset)

    def set_confirm_offset(self, offset: int) -> None:
        """Publish the consume-queue entries of every record that ends at or before ``offset``
        (clamped into the written log). The confirm offset never moves back here; ``truncate`` does."""
        offset = max(self.min_offset, min(offset, self.max_offset))
        if offset <= self.confirm_offset:
            return
        self.confirm_offset = offset
        released = self._release()
        if released:
            job = asyncio.get_running_loop().run_in_executor(self._io, self._write_entries, released)
            job.add_done_callback(lambda _: self._notify_published())

    def _release(self) -> Entries:
        out: Entries = []
        while self._parked and self._parked[0][0] <= self.confirm_offset:
            out.extend(self._parked.popleft()[1])
        return out

    @staticmethod
    def _write_entries(entries: Entries) -> None:
        for cq, first, data in entries:
            cq.write(first, data)

    # --- writing ----------------------------------------------------------------------------------

    async def put_message(self, msg: Message) -> PutResult:
        return (await self.put_messages([msg]))[0]

    async def put_messages(self, messages: list[Message], min_acks: int = 0) -> list[PutResult]:
        """Store several messages (a batch send); one result each, in order. Illegal messages are
        refused one by one; the others are written together. ``min_acks``: on at least this many
        replicas (this one counted) besides what the replication settings ask (the lock quorum)."""
        if not self.running or self._queue is None:
            return [PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail="the store is not running")] * len(messages)
        refusal = self._refusal()
        if refusal is not None:
            return [PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail=refusal)] * len(messages)
        need_acks = 0
        gate = self.replicas
        if gate is not None:  # §4.2: checked, and needAckNums computed, before appending
            refusal, need_acks = gate.precheck()
            if refusal is not None:
                return [PutResult(refusal, detail="in-sync replicas not enough")] * len(messages)
        limit = self.config.mapped_file_size_commit_log - END_FILE_MIN_BLANK_LENGTH
        records, rejects = codec.prepare(messages, limit)  # validated, each with its record's size
        if rejects:
            results: list[PutResult | None] = [None] * len(messages)
            for i, status, detail in rejects:
                results[i] = PutResult(PutMessageStatus(status), detail=detail)
            accepted = [i for i, r in enumerate(results) if r is None]
        if not records:
            return results if rejects else []  # type: ignore[return-value]
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((records, fut))
        stored = await fut
        if gate is not None and (need_acks > 1 or need_acks < 0 or min_acks > 1) and stored[-1].status is PutMessageStatus.PUT_OK:
            # §4.3: wait for replicas (needAckNums > 1, or -1: every SyncStateSet member); each send
            # waits for its own end offset, and one ack releases
            # every send it covers (pipelined, never a round trip per message).
            last = stored[-1]
            status = await gate.wait(last.physical_offset + last.size, need_acks)
            if status is PutMessageStatus.PUT_OK and min_acks > 1:
                status = await gate.wait(last.physical_offset + last.size, min_acks)
            if status is not PutMessageStatus.PUT_OK:
                stored = [r._replace(status=status) if r.status is PutMessageStatus.PUT_OK else r for r in stored]
        if not rejects:
            return stored
        for i, result in zip(accepted, stored, strict=True):
            results[i] = result
        return results  # type: ignore[return-value]

    async def _writer(self) -> None:
        """Takes what is queued (a batch), places and encodes it on the loop, and hands its writes to
        the I/O thread without waiting for them: while the thread writes one batch the loop encodes
        the next (at most WRITE_JOBS_IN_FLIGHT jobs queued). ``_acker`` answers the sends in order."""
        loop = asyncio.get_running_loop()
        sync = self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        queue, slots, acks = self._queue, self._write_slots, self._acks
        assert queue is not None and slots is not None and acks is not None  # set by start()
        while True:
            await slots.acquire()
            batch = [await queue.get()]
            count = len(batch[0][0])
            while count < self.config.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
                count += len(batch[-1][0])
            records = list(chain.from_iterable(rs for rs, _ in batch))
            job: asyncio.Future | None = None
            try:
                refusal = self._refusal() if self.running else "the store is not running"
                if refusal is not None:  # demoted (or failed) while these waited
                    raise _NotWritable(refusal)
                # Placing and encoding is CPU work: here, on the loop (a second Python thread would
                # only contend for the GIL). The writes and the fsync release the GIL: I/O thread.
                flat, writes, entries = self._place(records)
                end = flat[-1].physical_offset + flat[-1].size
                self._parked.append((end, entries))
                self._reput_offset = end
                if self.follow_max:
                    self.confirm_offset = end  # written by the job below, before its entries
                job = loop.run_in_executor(self._io, self._write, writes, self._release(), sync)
            except _NotWritable as exc:
                flat = [PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, detail=str(exc))] * len(records)
            except Exception as exc:
                flat = self._failed(exc, len(records))
            acks.put_nowait((job, batch, flat))

    async def _acker(self) -> None:
        """Answers each batch's sends once its write job is done (in the order they were written: a
        send is acknowledged only when everything before it is on disk too)."""
        acks, slots = self._acks, self._write_slots
        assert acks is not None and slots is not None  # set by start()
        while True:
            job, batch, flat = await acks.get()
            try:
                if job is not None:
                    await job
                    self._notify_written()
            except Exception as exc:
                flat = self._failed(exc, len(flat))
            finally:
                slots.release()
            self.stats["messages"] += len(flat)
            self.stats["batches"] += 1
            at = 0
            for rs, fut in batch:
                if not fut.done():
                    fut.set_result(flat[at : at + len(rs)])
                at += len(rs)

    def _failed(self, exc: BaseException, count: int) -> list[PutResult]:
        # An I/O error mid-batch: stop taking writes (fenced) rather than risk consume-queue entries
        # that point past the log; a restart's recovery rebuilds a consistent store.
        if self.running:
            log.error("commit-log write failed; the store stops taking writes", exc_info=exc)
        self.running = False
        self.failed.set()
        return [PutResult(PutMessageStatus.UNKNOWN_ERROR, detail=str(exc))] * count

    def _notify_written(self) -> None:
        if self._written is not None:
            self._written.set()
        for listener in list(self.write_listeners):
            listener()
        self._notify_published()

    def _notify_published(self) -> None:
        published, self._published = self._published, asyncio.Event()
        if published is not None:
            published.set()

    async def wait_published(self, timeout: float) -> None:
        """Returns when consume-queue entries were published (of any queue: a long poll looks again)
        or after ``timeout``."""
        published = self._published
        if published is None:
            await asyncio.sleep(timeout)
            return
        try:
            await asyncio.wait_for(published.wait(), timeout)
        except TimeoutError:
            pass

    def _place(self, records: list[Record]) -> tuple[list[PutResult], Writes, Entries]:
        """Give a batch of prepared records (``codec.prepare``) their physical and queue offsets and
        encode them, a run per segment; no I/O. Returns the results and what ``_write`` must write."""
        now = int(time.time() * 1000)
        results: list[PutResult] = []
        entries = self.consume_queues.take_pending()
        queues, get_queue = self.consume_queues.queues, self.consume_queues.get

        def encode(start: int, stop: int, physical: int) -> bytes:
            buf, placed, run_entries = codec.encode_run(records, start, stop, physical, now, queues, get_queue)
            results.extend(placed)
            entries.extend(run_entries)
            return buf

        writes = self.commit_log.place_batch(list(map(_SIZE, records)), encode)
        return results, writes, entries

    def _write(self, writes: Writes, entries: Entries, sync: bool) -> None:
        """Blocking (I/O thread): the commit-log writes, then (SYNC_FLUSH) one fsync for the whole
        batch, then the consume-queue entries, so an entry never points at bytes not yet written.
        After a failed job the jobs queued behind it write nothing: their bytes would follow a hole."""
        if self._write_error is not None:
            raise OSError(f"an earlier commit-log write failed: {self._write_error}")
        try:
            self.commit_log.write(writes)
        except BaseException as exc:
            self._write_error = exc
            raise
        if sync:
            self.commit_log.flush()  # one fsync acknowledges the whole batch (group commit)
            self.stats["fsyncs"] += 1
            self.flushed_offset = self.commit_log.written_offset
        self._write_entries(entries)
        if self.index is not None:  # after the write: its C walk runs without the GIL (index.py)
            self.index.add_writes(writes)

    async def _flusher(self) -> None:
        """ASYNC_FLUSH, as RocketMQ's FlushRealTimeService: woken after every write (or after
        flushIntervalCommitLog), it flushes once flushCommitLogLeastPages pages are unflushed, and
        everything every flushCommitLogThoroughInterval. It has its own thread, so the disk's
        write-back runs alongside the writes instead of stalling them."""
        loop = asyncio.get_running_loop()
        config = self.config
        least = config.flush_commit_log_least_pages * PAGE_SIZE
        flushed, thorough_at = self.max_offset, time.monotonic()
        written = self._written
        assert written is not None  # set by start()
        while True:
            try:
                await asyncio.wait_for(written.wait(), config.flush_interval_commit_log / 1000)
            except TimeoutError:
                pass
            written.clear()
            end, now = self.max_offset, time.monotonic()
            thorough = now - thorough_at >= config.flush_commit_log_thorough_interval / 1000
            if end - flushed < least and not (thorough and end != flushed):
                continue
            await loop.run_in_executor(self._flushes, self._flush_all)
            self.stats["flushes"] += 1
            flushed = self.flushed_offset = end
            if thorough:
                thorough_at = now

    def _flush_all(self) -> None:
        self.commit_log.flush()
        self.consume_queues.flush()
        if self.index is not None:
            self.index.flush()

    async def _checkpointer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            if self.confirm_offset != self._checkpointed_confirm:
                try:
                    await loop.run_in_executor(self._io, self._write_checkpoint, self.confirm_offset)
                except OSError as exc:  # a full disk: the next tick tries again (the task must live on)
                    log.warning("writing the checkpoint failed: %s", exc)

    def _write_checkpoint(self, confirm: int) -> None:
        # Written after the log it covers is on disk: a checkpoint never claims bytes a crash loses.
        self.commit_log.flush()
        write_json_atomically(self.checkpoint_path, {"confirmPhyOffset": confirm})
        self._checkpointed_confirm = confirm

    # --- retention (brokers/retention.py) -------------------------------------------------------------

    def _segment_started(self) -> None:
        for listener in list(self.segment_listeners):
            listener()

    def log_files(self, limit: int = 2) -> list[LogFile]:
        """The oldest ``limit`` commit-log files as retention's rules see them."""
        cl = self.commit_log
        return [LogFile(seg.start, seg.start + seg.length, cl.modified_ms(seg)) for seg in cl.segments[:limit]]

    async def delete_oldest_file(self) -> int:
        """Delete the oldest commit-log file (never the one being written): the consume queues' min
        offsets move past its records in the same I/O job, so no read finds an entry of a deleted
        record; its descriptor is closed on the read thread, after any read of it in flight (the
        master's shipping). Returns the bytes deleted."""

        def delete():
            seg = self.commit_log.remove_first()
            for cq in self.consume_queues.queues.values():
                cq.advance_min(self.commit_log.min_offset)
            if self.index is not None:  # the index files whose every entry is below the log now
                self.index.delete_expired(self.commit_log.min_offset)
            return seg

        seg = await self._in_io(delete)
        self.deletions += 1
        await asyncio.get_running_loop().run_in_executor(self._reads, self.commit_log.close_removed, seg)
        return seg.length

    async def oldest_store_timestamp(self, topic: str | None = None, queue_id: int = 0) -> int | None:
        """When the oldest message kept was stored (ms): of the whole log, or of one queue."""
        if topic is None:
            raw = await self.read_record(self.min_offset)
            return decode(raw).store_timestamp if raw else None  # type: ignore[union-attr]
        msgs = await self.get_messages(topic, queue_id, self.min_queue_offset(topic, queue_id), 1)
        return msgs[0].store_timestamp if msgs else None

    # --- replication (slave side) -----------------------------------------------------------------

    async def append_replicated(self, chunks: list[tuple[int, bytes]], flush: bool = False) -> None:
        """Append byte ranges copied from the master, ``(offset, bytes)`` each, contiguous from the
        end of this log, in one write job; the whole records among them get consume-queue entries,
        published up to the confirm offset."""
        if self._rebuild_owed:  # a failed cut's rebuild: the next session's drop_unwritten does it
            raise OSError("the consume queues were not rebuilt after the last cut")
        writes: Writes = []
        for offset, data in chunks:
            if data:
                writes += self.commit_log.place_raw(offset, data)
                self._reput(data)
        if not writes:
            return
        released = self._release()  # entries confirmed earlier (their bytes are written already)
        await self._in_io(self._write_replicated, writes, released, flush)
        if self.follow_max:
            self.set_confirm_offset(self.max_offset)
        self._notify_written()

    def _write_replicated(self, writes: Writes, released: Entries, flush: bool) -> None:
        self.commit_log.write(writes)
        if flush:
            self.commit_log.flush()
            self.flushed_offset = self.commit_log.written_offset
        self._write_entries(released)
        if self.index is not None:
            self.index.follow_log()  # whole records only: a record split between transfers waits

    def _reput(self, data: bytes) -> None:
        """Turn the whole records in carried-over + new bytes into parked consume-queue entries."""
        buf = self._reput_carry + data if self._reput_carry else data
        pos, base = 0, self._reput_offset
        while pos < len(buf):
            try:
                record = decode(buf, pos, check_crc=False)
            except CorruptRecord as exc:
                if len(buf) - pos >= self.config.mapped_file_size_commit_log:
                    raise
                head = bytes(buf[pos : pos + END_FILE_MIN_BLANK_LENGTH])
                # Fewer bytes than a header (its first bytes are often zeros: a size's high bytes) come
                # whole with the next transfer; a whole header must begin a record that needs more.
                if len(head) == END_FILE_MIN_BLANK_LENGTH and tail_shape(head, len(buf) - pos) is not TailShape.TORN:
                    self._undecodable(base + pos, exc)
                break  # the rest of a record comes with the next transfer
            if isinstance(record, Blank):
                size = record.size
            else:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                self._dispatch_record(base + pos, size, record, publish=False)
            pos += size
        self._reput_carry = buf[pos:]
        self._reput_offset = base + pos

    def _undecodable(self, offset: int, exc: CorruptRecord) -> None:
        """Replicated bytes that are no record: the master's log has a hole or garbage there. The copy
        stays byte-identical, but nothing from here on is readable, and a takeover will not cut it."""
        if self._undecodable_at != offset:
            self._undecodable_at = offset
            log.error("%s replicated bytes at %d are no record (%s): nothing after them can be read here", MARKER, offset, exc)

    async def _in_io(self, fn, *args):
        """Run a log write or cut on the I/O thread to its end: a caller cancelled meanwhile (a role
        change stopping replication) must not leave bytes placed but never written, or a cut half
        made (a cancelled executor job that had not started would never run)."""
        job = asyncio.get_running_loop().run_in_executor(self._io, fn, *args)
        job.add_done_callback(_retrieve_failure)
        return await asyncio.shield(job)

    def _allow(self, cut: Cut) -> None:
        """The acknowledged-data guard (cuts.py): log the cut as one line; raise CutRefused, with the
        refusal logged at ERROR, unless its cause is proven."""
        verdict = judge(cut)
        if cut.bytes == 0:
            return
        if not verdict.allowed:
            error = CutRefused(cut, verdict)
            log.error("%s", error)
            raise error
        log.warning("%s", describe_cut(cut, verdict))

    async def truncate(self, cut: Cut, first: Callable[[], object] | None = None) -> RecoveryReport:
        """Cut the log at ``cut.at`` (a record boundary; nothing happens at or beyond the end) and
        rebuild the consume queues, if the guard allows ``cut`` (else CutRefused, nothing cut);
        ``first`` runs once it is allowed, before the cut (a slave cuts its epoch file first). A
        slave does this at its handshake to cut a fork (seed 004); the cut is physical and fsynced, so
        it cannot come back after a crash."""
        self._allow(cut)
        if first is not None:
            first()
        offset = cut.at

        def cut_log() -> RecoveryReport:
            if offset < self.commit_log.max_offset:
                self.commit_log.truncate(max(offset, self.commit_log.min_offset))
            return self._rebuild_after_cut()

        try:
            return await self._in_io(cut_log)
        finally:
            self.truncations += 1

    def cut_evidence(self, cause: CutCause, at: int, detail: str = "", **evidence) -> Cut:
        """A cut of this log at ``at`` to its end now, with ``evidence`` (cuts.Cut's fields)."""
        return Cut(cause, at, self.commit_log.max_offset, self.confirm_offset, detail, **evidence)

    async def drop_unwritten(self) -> int:
        """Give up bytes placed for a write that never completed (a replicated append whose write job
        failed after its HA session had ended, so nobody saw the error; a failed master write): the
        log ends where its written bytes end, or the next session's first transfer could never be
        placed. Such bytes were never acknowledged (a slave reports its written offset; a master
        answers a send after its write). Waits for the writes queued first; returns the bytes
        dropped. A new HA session, a takeover and a repair call this first; each also finishes a
        rebuild an earlier cut owes."""
        await self.settled()
        if self._rebuild_owed:
            log.warning("rebuilding the consume queues that the last cut could not rebuild")
            await self._in_io(self._rebuild_after_cut)
        placed, written = self.commit_log.max_offset, self.max_offset
        if placed <= written:
            return 0
        log.warning("%d bytes placed at %d were never written; the log ends there again", placed - written, written)
        await self.truncate(self.cut_evidence(CutCause.UNWRITTEN, written, "placed, never written"))
        return placed - written

    async def cut_partial_record(self) -> int:
        """Before taking over as master: a copy may end inside a record (the master shipped part of
        it); cut that part. Judged on the log as it is now, after every queued write: the bytes after
        the last record dispatched must be one torn record, else (whole records a stale position
        would throw away) nothing is cut and the refusal is logged. Returns the bytes cut."""
        await self.drop_unwritten()
        valid, end = self.valid_end, self.max_offset
        if valid >= end:
            return 0
        shape = await self._in_io(self.commit_log.tail_shape, valid)
        try:
            await self.truncate(self.cut_evidence(CutCause.PARTIAL_RECORD, valid, "before taking over", tail=shape))
        except CutRefused:
            return 0
        return end - valid

    async def restart_at(self, offset: int, cut: Cut | None = None, first: Callable[[], object] | None = None) -> RecoveryReport:
        """Delete the whole log; it starts again, empty, at ``offset`` (rounded down to a segment
        start), if the guard allows ``cut`` (a cut at the log's min; None: the log must be empty);
        ``first`` as for ``truncate``. A replica whose log is all older than its master's (seed 004
        case 1-1) is copied again from there."""
        self._allow(cut or self.cut_evidence(CutCause.RESTART_FROM_MASTER, self.min_offset, "an empty log"))
        if first is not None:
            first()

        def clear() -> RecoveryReport:
            self.commit_log.clear(offset - offset % self.config.mapped_file_size_commit_log)
            return self._rebuild_after_cut(self.commit_log.max_offset)

        try:
            return await self._in_io(clear)
        finally:
            self.truncations += 1

    async def repair(self) -> int:
        """After a failed write stopped the store: once the disk takes a probe write (OSError while it
        does not), drop what was placed but never written and take writes again. Returns the bytes
        dropped."""
        await self.settled()
        await self._in_io(self._probe_write)
        dropped = await self.drop_unwritten()
        self._write_error = None
        self.failed.clear()
        self.running = True
        log.warning("the store takes writes again (%d unwritten bytes dropped)", dropped)
        return dropped

    async def repair_when_possible(self, retry_s: float = 1.0) -> int:
        """``repair``, retried every ``retry_s`` while the disk refuses the probe write."""
        while True:
            try:
                return await self.repair()
            except OSError as exc:
                log.warning("the store cannot take writes yet (%s); trying again in %.1f s", exc, retry_s)
                await asyncio.sleep(retry_s)

    def _probe_write(self) -> None:
        probe = Path(self.config.store_path_root_dir) / ".write-probe"
        try:
            with open(probe, "wb") as f:
                f.write(bytes(PROBE_BYTES))
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)

    async def settled(self) -> None:
        """Returns once every consume-queue write queued so far is done (they are readable)."""
        await asyncio.get_running_loop().run_in_executor(self._io, _nothing)

    async def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Written log bytes from ``offset`` within one segment (what a master ships)."""
        # Its own thread: shipping to slaves must not queue behind this store's writes and fsyncs
        # (pread of written bytes needs no ordering with them).
        return await asyncio.get_running_loop().run_in_executor(self._reads, self.commit_log.read_raw, offset, max_bytes)

    # --- reading ----------------------------------------------------------------------------------

    async def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32) -> list[Message]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._get, topic, queue_id, queue_offset, max_count)

    def _get(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> list[Message]:
        cq = self.consume_queues.queues.get((topic, queue_id))
        if cq is None:
            return []
        return [
            self.commit_log.read_message(phys, size) for _, phys, size, _ in cq.entries(queue_offset, max_count) if size > 0
        ]  # size 0: a hole

    async def store_timestamps(self, wanted: list[tuple[str, int, int]]) -> list[int | None]:
        """When the message at each (topic, queueId, queue offset) was stored (None: none there), read
        in one job (the metrics' oldest unconsumed messages)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._store_timestamps, wanted)

    def _store_timestamps(self, wanted: list[tuple[str, int, int]]) -> list[int | None]:
        out: list[int | None] = []
        for topic, queue_id, queue_offset in wanted:
            msgs = self._get(topic, queue_id, queue_offset, 1)
            out.append(msgs[0].store_timestamp if msgs else None)
        return out

    async def read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> list[tuple[int, int, bytes]]:
        """The records of the queue from ``queue_offset`` as stored (what a remoting pull answers):
        (queue offset, tags hash, record bytes) each, holes left out, at most ``max_count`` entries read."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._read_queue, topic, queue_id, queue_offset, max_count)

    def _read_queue(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> list[tuple[int, int, bytes]]:
        cq = self.consume_queues.queues.get((topic, queue_id))
        if cq is None:
            return []
        read = self.commit_log.read
        return [(offset, tags, read(phys, size)) for offset, phys, size, tags in cq.entries(queue_offset, max_count) if size > 0]

    async def read_record(self, physical_offset: int) -> bytes | None:
        """The record stored at ``physical_offset`` (a remoting client's offset message id), or None
        when no record starts there."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._read_record, physical_offset)

    def _read_record(self, physical_offset: int) -> bytes | None:
        if not self.commit_log.min_offset <= physical_offset < self.commit_log.written_offset:
            return None
        try:
            size = record_length(self.commit_log.read(physical_offset, 4))
            raw = self.commit_log.read(physical_offset, size) if size > 4 else b""
            record = decode(raw)
        except (CorruptRecord, struct.error, ValueError):
            return None
        return raw if isinstance(record, Message) and record.physical_offset == physical_offset else None

    async def query_index(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """The commit-log offsets of the records of ``topic`` whose UNIQ_KEY or one of whose KEYS is
        ``key``, stored in [begin_ms, end_ms]: newest first, each verified against its record, at most
        ``max_num`` (docs/messages.md §1). IndexDisabled under messageIndexEnable=false."""
        if self.index is None:
            raise IndexDisabled()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self.index.query, topic, key, begin_ms, end_ms, max_num)

    async def query_index_messages(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[Message]:
        """``query_index``'s hits as messages, read and decoded on the read thread in one go."""
        if self.index is None:
            raise IndexDisabled()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self._index_messages, topic, key, begin_ms, end_ms, max_num)

    def _index_messages(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[Message]:
        assert self.index is not None
        out = []
        for _, raw in self.index.query_records(topic, key, begin_ms, end_ms, max_num):
            found = decode(raw)
            if isinstance(found, Message):
                out.append(found)
        return out

    def query_index_sync(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """``query_index`` in the calling thread (tools and benchmarks)."""
        if self.index is None:
            raise IndexDisabled()
        return self.index.query(topic, key, begin_ms, end_ms, max_num)

    async def first_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue's min offset: its first message's (holes are skipped), its max offset when it has
        none."""
        msgs = await self.get_messages(topic, queue_id, self.min_queue_offset(topic, queue_id), 1)
        return msgs[0].queue_offset if msgs else self.max_queue_offset(topic, queue_id)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset whose record is still kept (retention moves it; 0 for a queue
        that never had one)."""
        cq = self.consume_queues.queues.get((topic, queue_id))
        return min(cq.min_offset, cq.count) if cq else 0

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min_queue_offset, max_queue_offset) in one lookup (the metrics read every queue's)."""
        cq = self.consume_queues.queues.get((topic, queue_id))
        return (min(cq.min_offset, cq.count), cq.count) if cq else (0, 0)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset consumers can read (published entries)."""
        cq = self.consume_queues.queues.get((topic, queue_id))
        return cq.count if cq else 0


def _nothing() -> None:
    pass


def _retrieve_failure(job: asyncio.Future) -> None:
    """A shielded job's failure is its caller's to handle; one whose caller went away is mended by the
    next drop_unwritten. Retrieved here so that asyncio does not report it as never retrieved."""
    if not job.cancelled():
        job.exception()


class _NotWritable(Exception):
    pass
