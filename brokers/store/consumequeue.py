"""Consume queues: per (topic, queueId), 20-byte entries (physical offset 8, size 4, tags hash 8),
as RocketMQ's ``ConsumeQueue``. Entry n is the message at queue offset n.

They are derived data: recovery rebuilds them from the commit log, so they never point past it.

Retention (brokers/retention.py) deletes the commit log's oldest files; each queue's ``min_offset``
then moves to its first entry still in the log (RocketMQ's ``correctMinOffset``), reads start there,
and the file's bytes below it are given back to the filesystem (a hole punched: queue offsets keep
their place in the file, so nothing is rewritten). A queue rebuilt by recovery starts at its first
record's queue offset the same way, the file sparse below it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import struct
import threading
from pathlib import Path

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = ENTRY.size  # 20
_PAGE = 4096
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02

log = logging.getLogger(__name__)


def _fallocate():
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):  # not Linux: the bytes below a queue's min stay on disk
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


_fallocate_fn = _fallocate()


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Give bytes [offset, offset + length) of a file back to the filesystem (they read as zeros, the
    file keeps its size). False where the system or filesystem cannot."""
    if _fallocate_fn is None or length <= 0:
        return False
    if _fallocate_fn(fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, offset, length) != 0:
        global _punch_warned
        if not _punch_warned:
            _punch_warned = True
            err = os.strerror(ctypes.get_errno())
            log.warning("cannot punch holes in consume queues (%s): the bytes below their min offsets stay on disk", err)
        return False
    return True


_punch_warned = False


@functools.lru_cache(maxsize=65536)
def tags_code(tags: str | None) -> int:
    """RocketMQ stores the tag's String.hashCode(); any stable 64-bit hash serves the same filtering."""
    if not tags:
        return 0
    h = 0
    for ch in tags:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


class ConsumeQueue:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        self.count = size // ENTRY_SIZE  # entries written
        self.max_offset = self.count  # the next queue offset (entries written or pending)
        self.min_offset = 0  # the first entry whose record is still in the commit log
        self._punched = 0  # bytes from the file's start given back to the filesystem
        self._pending = bytearray()
        self.dirty = False

    def skip_to(self, queue_offset: int) -> None:
        """The next entry added gets ``queue_offset`` (a record read back from a log that starts above
        this queue's end): the entries in between are holes (size 0) that readers skip. With nothing
        pending the file just stays sparse there; a queue with no entry from its min on starts there."""
        if queue_offset <= self.max_offset:
            return
        if self._pending:  # pending entries are one contiguous run
            self._pending += bytes(ENTRY_SIZE * (queue_offset - self.max_offset))
        if self.min_offset >= self.max_offset:
            self.min_offset = queue_offset
        self.max_offset = queue_offset

    def advance_min(self, log_min: int) -> int:
        """The commit log now starts at ``log_min``: the min offset moves to the first written entry
        whose record is at or above it (entries are in log order: a binary search), and the bytes
        below are punched out. Returns the new min offset."""
        lo, hi = self.min_offset, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            phys, size, _ = ENTRY.unpack(os.pread(self.fd, ENTRY_SIZE, mid * ENTRY_SIZE))
            if size > 0 and phys >= log_min:
                hi = mid
            else:
                lo = mid + 1
        self.min_offset = lo
        upto = lo * ENTRY_SIZE - lo * ENTRY_SIZE % _PAGE
        if upto > self._punched:
            punch_hole(self.fd, self._punched, upto - self._punched)
            self._punched = upto
        return lo

    def add(self, physical_offset: int, size: int, tags_hash: int) -> int:
        queue_offset = self.max_offset
        self.max_offset = queue_offset + 1
        self._pending += ENTRY.pack(physical_offset, size, tags_hash)
        return queue_offset

    def take_pending(self) -> tuple[int, bytes] | None:
        """The entries added since the last call, as (first queue offset, bytes) for ``write``; the
        store takes them on its event loop and writes them from its I/O thread."""
        if not self._pending:
            return None
        data = bytes(self._pending)
        self._pending.clear()
        return self.max_offset - len(data) // ENTRY_SIZE, data

    def write(self, first: int, data: bytes) -> None:
        """Blocking: write entries from queue offset ``first``; readers see them from now on."""
        os.pwrite(self.fd, data, first * ENTRY_SIZE)
        self.count = max(self.count, first + len(data) // ENTRY_SIZE)
        self.dirty = True

    def write_pending(self) -> None:
        """take_pending + write, for single-threaded use (recovery)."""
        taken = self.take_pending()
        if taken:
            self.write(*taken)

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False  # (before the fsync: a write after this sets it again)
            os.fsync(self.fd)

    def entries(self, start: int, max_count: int) -> list[tuple[int, int, int, int]]:
        """(queue offset, physical offset, size, tags hash) from ``start``, at most ``max_count``,
        among the entries written (none below the min offset: their records are deleted)."""
        start = max(self.min_offset, start)
        n = max(0, min(max_count, self.count - start))
        if n == 0:
            return []
        raw = os.pread(self.fd, n * ENTRY_SIZE, start * ENTRY_SIZE)
        return [(start + i, *ENTRY.unpack_from(raw, i * ENTRY_SIZE)) for i in range(n)]

    def close(self) -> None:
        os.close(self.fd)


class ConsumeQueues:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.files_lock = threading.Lock()  # as CommitLog.files_lock: flushes run in their own thread
        if self.root.is_dir():
            for topic_dir in self.root.iterdir():
                for q in topic_dir.iterdir():
                    if q.name.isdigit():
                        self.queues[(topic_dir.name, int(q.name))] = ConsumeQueue(q)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(self.root / topic / str(queue_id))
        return cq

    def flush(self) -> None:
        with self.files_lock:
            for cq in list(self.queues.values()):
                cq.flush()

    def take_pending(self) -> list[tuple[ConsumeQueue, int, bytes]]:
        return [(cq, *taken) for cq in self.queues.values() if (taken := cq.take_pending())]

    def reset(self) -> None:
        """Drop every queue (before a rebuild from the commit log)."""
        with self.files_lock:
            self._close()
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        with self.files_lock:
            self._close()

    def _close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues = {}
