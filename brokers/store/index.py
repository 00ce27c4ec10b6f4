"""The message index: RocketMQ's ``IndexService`` and ``IndexFile`` (docs/messages.md §1).

Under ``<storePathRootDir>/index/``, files named by their creation time (``yyyyMMddHHmmssSSS``), each
a 40-byte header, ``maxHashSlotNum`` hash slots and ``maxIndexNum`` 20-byte entries (codec.py has the
layout). An entry is put for ``topic#UNIQ_KEY`` and ``topic#k`` for each key of ``KEYS``; its slot holds
the newest entry of the keys hashed there, and each entry the one before it (a chain, newest first).
A file that is full is followed by a new one.

Who writes it: the store's I/O thread, after each commit-log write (``add_writes``: the records just
written, in memory), after a replicated write (``follow_log``: whole records only, read back from the
log, so a record split between transfers is indexed once it is whole) and at recovery (``recover``:
from the newest file's ``endPhyOffset``, clamped to the log after a cut). The per-record work is
``codec.index_records`` (C, without the GIL). Nothing here decides what a key matches: ``query``
verifies every hit against its record, so an entry left by a cut, or another key's in the same slot,
is never answered.

The files are mapped; their header and slots are allocated on disk when a file is made, the entries in
steps as they fill, so a full disk is an OSError here (the index falls behind and catches up from the
log later), never a fault on a page of the mapping.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import codec
from .codec import INDEX_CORRUPT, INDEX_DONE, INDEX_ENTRY, INDEX_FULL, INDEX_HEADER, INDEX_SLOT, INDEX_TORN
from .commitlog import CommitLog, Writes
from .message import FIXED_SIZE, CorruptRecord, record_length

log = logging.getLogger(__name__)

ALLOCATE_ENTRIES = 1 << 16  # entries allocated on disk at a time (1.25 MiB)
READ_CHUNK = 8 << 20  # bytes of the log read at a time when indexing from the log (more than a record)
FLUSH_INTERVAL_S = 10.0  # the index files are fsynced at most this often (and when rolled, and at close)
RETRY_BEHIND_S = 1.0  # an index that fell behind (a full disk) tries to catch up at most this often
NAME_LENGTH = 17  # yyyyMMddHHmmssSSS


class IndexDisabled(RuntimeError):
    """The broker runs with messageIndexEnable=false: there is no index to query."""

    def __init__(self) -> None:
        super().__init__("the message index is off on this broker (messageIndexEnable=false)")


@dataclass(frozen=True)
class IndexLayout:
    slots: int  # maxHashSlotNum
    max_index: int  # maxIndexNum (entry 0 is never used: a file takes maxIndexNum - 1 keys)

    @property
    def entries_at(self) -> int:
        return INDEX_HEADER.size + self.slots * INDEX_SLOT.size

    @property
    def file_size(self) -> int:
        return self.entries_at + self.max_index * INDEX_ENTRY.size


def file_name(now_ms: int, after: str | None = None) -> str:
    """RocketMQ's ``timeMillisToHumanString`` (local time), made later than ``after`` (the newest
    file's name) when the clock gives an earlier or equal one: the names keep the files' order."""
    name = time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms // 1000)) + f"{now_ms % 1000:03d}"
    if after is not None and name <= after:
        name = str(int(after) + 1).zfill(NAME_LENGTH)
    return name


class IndexFile:
    def __init__(self, path: Path, fd: int, layout: IndexLayout):
        self.path, self.fd, self.layout = path, fd, layout
        self.map = mmap.mmap(fd, layout.file_size)
        # Lookups touch a slot and a few entries anywhere in the file: a page that is not in memory is
        # read alone (no read-around of neighbours nobody asked for), and the slot table, which every
        # lookup starts from, is asked for ahead (a cold lookup costs its entries' pages, not the slot's).
        self.map.madvise(mmap.MADV_RANDOM)
        self.map.madvise(mmap.MADV_WILLNEED, 0, layout.entries_at)
        self.allocated = self.count  # entries [0, allocated) have their blocks on disk
        self.dirty = False

    @classmethod
    def create(cls, path: Path, layout: IndexLayout, end_phy: int, end_ts: int) -> IndexFile:
        """A new file (IndexFile's constructor: it starts where the previous one ended)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, layout.file_size)
            os.posix_fallocate(fd, 0, layout.entries_at)
            f = cls(path, fd, layout)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        f.map[: INDEX_HEADER.size] = INDEX_HEADER.pack(max(end_ts, 0), max(end_ts, 0), max(end_phy, 0), max(end_phy, 0), 0, 0)
        return f

    @classmethod
    def open(cls, path: Path, layout: IndexLayout) -> IndexFile | None:
        """The file at ``path``, or None when its size is not the configured layout's."""
        fd = os.open(path, os.O_RDWR)
        if os.fstat(fd).st_size != layout.file_size:
            os.close(fd)
            return None
        return cls(path, fd, layout)

    def header(self) -> tuple[int, int, int, int, int, int]:
        return INDEX_HEADER.unpack_from(self.map, 0)

    @property
    def count(self) -> int:
        """The next entry's number (IndexHeader's indexCount: 1 in a file without entries)."""
        return max(INDEX_SLOT.unpack_from(self.map, 36)[0], 1)

    @property
    def end_phy(self) -> int:
        return self.header()[3]

    @property
    def full(self) -> bool:
        return self.count >= self.layout.max_index

    def allocate_more(self) -> None:
        """Blocks on disk for the next ALLOCATE_ENTRIES entries (OSError: the disk is full)."""
        upto = min(self.layout.max_index, max(self.allocated, self.count) + ALLOCATE_ENTRIES)
        at = self.layout.entries_at + self.allocated * INDEX_ENTRY.size
        os.posix_fallocate(self.fd, at, (upto - self.allocated) * INDEX_ENTRY.size)
        self.allocated = upto

    def clamp(self, end: int) -> None:
        """After a cut at ``end``: the file ends there (its entries past it are stale, found by none)."""
        INDEX_HEADER.pack_into(self.map, 0, *self.header()[:3], end, *self.header()[4:])
        self.dirty = True

    def candidates(self, key_hash: int, begin_ms: int, end_ms: int) -> Iterator[int]:
        """IndexFile.selectPhyOffset: the physical offsets of the slot's chain with ``key_hash``, newest
        first. An entry's time is its file's beginTimestamp plus whole seconds, so it is up to a second
        earlier than the record's (the first entry's is measured from the previous file's end, so any):
        the range is widened by that, and the caller checks the record's own time."""
        m, layout = self.map, self.layout
        n = INDEX_SLOT.unpack_from(m, INDEX_HEADER.size + key_hash % layout.slots * INDEX_SLOT.size)[0]
        begin_ts, count = INDEX_HEADER.unpack_from(m, 0)[0], self.count
        if n <= 0 or n >= count:
            return
        low = begin_ms - 1000
        while True:
            key, phy, diff, prev = INDEX_ENTRY.unpack_from(m, layout.entries_at + n * INDEX_ENTRY.size)
            if diff < 0:
                return
            at = begin_ts + diff * 1000
            first = n == 1
            if key == key_hash and (first or low < at <= end_ms):
                yield phy
            if prev <= 0 or prev >= n or (not first and at <= low):
                return
            n = prev

    def flush_handle(self) -> int | None:
        """A descriptor to fsync the file through (a duplicate: the file may be closed meanwhile), when
        it was written since the last flush."""
        if not self.dirty:
            return None
        self.dirty = False
        return os.dup(self.fd)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class MessageIndex:
    """IndexService: the files in creation order, the newest written. Every method but ``query`` and
    ``flush`` runs on the store's I/O thread (the one that writes the log); ``query`` runs on its read
    thread and ``flush`` on its flush thread, under ``_lock`` with the changes to the list of files."""

    def __init__(self, root: Path, commit_log: CommitLog, layout: IndexLayout):
        self.root, self.commit_log, self.layout = Path(root), commit_log, layout
        self.files: list[IndexFile] = []
        self.position = 0  # the log offset of the next record to index
        self._lock = threading.Lock()
        self._loaded = False
        self._behind_since: float | None = None  # a write into the index failed then (a full disk)
        self._stalled_at: int | None = None  # bytes there are no record: nothing past them until recovery
        self._flushed_at = time.monotonic()

    # --- life cycle ---------------------------------------------------------------------------------

    def recover(self) -> int:
        """After the log's recovery or a cut: drop what lies past the log's end, then index the log from
        the newest file's endPhyOffset (as RocketMQ's buildIndex, the record there again: a query
        answers an offset once). Returns the bytes of the log walked."""
        cl = self.commit_log
        self._stalled_at, self._behind_since = None, None
        try:
            with self._lock:
                if not self._loaded:
                    self._load()
                self._clamp(cl.max_offset)
            self.delete_expired(cl.min_offset)
            self.position = start = max(self.files[-1].end_phy if self.files else 0, cl.min_offset)
            self._from_log()
        except OSError as exc:
            self._fell_behind(exc)
            return 0
        except Exception as exc:  # the store recovers without its index rather than not at all
            self._broken(exc)
            return 0
        if self.position > start:
            log.info("message index: %d bytes of the log indexed from offset %d", self.position - start, start)
        return self.position - start

    def _load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        paths = sorted(p for p in self.root.iterdir() if p.name.isdigit() and len(p.name) == NAME_LENGTH)
        for path in paths:
            f = IndexFile.open(path, self.layout)
            if f is None:
                log.warning(
                    "index file %s is not %d bytes (maxHashSlotNum, maxIndexNum changed?): the index is rebuilt from the log",
                    path.name,
                    self.layout.file_size,
                )
                for g in self.files:
                    g.close()
                for p in paths:
                    p.unlink(missing_ok=True)
                self.files = []
                break
            self.files.append(f)
        self._loaded = True

    def _clamp(self, end: int) -> None:
        """The log ends at ``end`` (after a cut): files that begin there or later go, the newest ends
        there at most (every record before it was indexed: records are indexed in log order)."""
        while self.files and self.files[-1].header()[2] >= end:
            self.files.pop().delete()
        if self.files and self.files[-1].end_phy >= end:
            self.files[-1].clamp(end)

    def delete_expired(self, min_offset: int) -> list[str]:
        """IndexService.deleteExpiredFile: the oldest files whose endPhyOffset is below the log's min
        offset, never the newest. Returns their names."""
        gone = []
        with self._lock:
            while len(self.files) > 1 and self.files[0].end_phy < min_offset:
                f = self.files.pop(0)
                try:
                    f.delete()
                except OSError as exc:
                    log.warning("message index: deleting %s failed: %s", f.path.name, exc)
                gone.append(f.path.name)
        return gone

    def flush(self, force: bool = False) -> None:
        """fsync the files written since the last flush, at most every FLUSH_INTERVAL_S unless ``force``
        (a crash of the process loses nothing: the mapped pages are the kernel's)."""
        now = time.monotonic()
        if not force and now - self._flushed_at < FLUSH_INTERVAL_S:
            return
        self._flushed_at = now
        with self._lock:
            handles = [fd for f in self.files if (fd := f.flush_handle()) is not None]
        for fd in handles:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        self.flush(force=True)
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []
            self._loaded = False

    # --- writing ------------------------------------------------------------------------------------

    def add_writes(self, writes: Writes) -> None:
        """After a commit-log write: index the records just written (whole records, from memory). It
        never fails the write: an index that cannot follow says so and falls behind or stops."""
        try:
            for seg, at, chunks in writes:
                offset = seg.start + at
                for data in chunks:
                    self._add(offset, data)
                    offset += len(data)
        except Exception as exc:
            self._broken(exc)

    def _add(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        if self._stalled_at is not None or end <= self.position:
            return
        if self._behind_since is not None or offset > self.position:
            self.follow_log()  # what the index missed is in the log, these bytes too
            return
        try:
            _, status = self._walk(data, offset, self.position - offset)
        except OSError as exc:
            self._fell_behind(exc)
            return
        if status == INDEX_CORRUPT:
            self._stall()
        elif status == INDEX_TORN:  # not whole records: take them from the log
            self.follow_log()

    def follow_log(self) -> None:
        """Index the whole records written to the log since the last call (a replica's writes: a record
        split between two transfers is indexed once it is whole)."""
        if self._stalled_at is not None:
            return
        if self._behind_since is not None and time.monotonic() - self._behind_since < RETRY_BEHIND_S:
            return
        try:
            self._from_log()
        except OSError as exc:
            self._fell_behind(exc)
            return
        except Exception as exc:
            self._broken(exc)
            return
        self._behind_since = None

    def _from_log(self) -> None:
        cl = self.commit_log
        while self.position < cl.written_offset:
            self.position = max(self.position, cl.min_offset)
            start = self.position
            try:
                data = cl.read_raw(start, READ_CHUNK)
            except CorruptRecord:  # in no file of the log
                self._stall()
                return
            if not data:
                return
            _, status = self._walk(data, start, 0)
            if status == INDEX_CORRUPT or (status == INDEX_TORN and self.position == start):
                if status == INDEX_TORN and start + len(data) >= cl.written_offset:
                    return  # the last record is not whole yet (a replica's copy)
                self._stall()
                return

    def _walk(self, data: bytes | mmap.mmap, base: int, start: int) -> tuple[int, int]:
        """codec.index_records over ``data`` (at log offset ``base``) from ``start``, into as many files
        as it takes; the position follows it. Returns where it stopped and why."""
        skip = 0
        while True:
            f = self._current()
            after, status, done = codec.index_records(f.map, self.layout.slots, f.allocated, data, base, start, skip)
            f.dirty = True
            self.position = after
            if status != INDEX_FULL:
                return after, status
            if f.full:
                self._roll(f)
            else:
                f.allocate_more()
            start, skip = after - base, done

    def _current(self) -> IndexFile:
        f = self.files[-1] if self.files else None
        if f is None or f.full:
            return self._roll(f)
        if f.allocated <= f.count:
            f.allocate_more()
        return f

    def _roll(self, prev: IndexFile | None) -> IndexFile:
        """A new file, after ``prev`` (the full one): IndexService.getAndCreateLastIndexFile."""
        self.root.mkdir(parents=True, exist_ok=True)
        name = file_name(int(time.time() * 1000), prev.path.name if prev else None)
        end_ts, end_phy = prev.header()[1:4:2] if prev else (0, 0)
        f = IndexFile.create(self.root / name, self.layout, end_phy, end_ts)
        try:
            f.allocate_more()
        except OSError:
            f.delete()
            raise
        with self._lock:
            self.files.append(f)
        return f

    def _fell_behind(self, exc: OSError) -> None:
        if self._behind_since is None:
            log.error("message index: writing at log offset %d failed (%s); it catches up from the log later", self.position, exc)
        self._behind_since = time.monotonic()

    def _broken(self, exc: Exception) -> None:
        self._stalled_at = self.position
        log.error("message index: stopped at log offset %d until a restart", self.position, exc_info=exc)

    def _stall(self) -> None:
        self._stalled_at = self.position
        log.error("message index: the log's bytes at %d are no record; nothing past them is indexed", self.position)

    # --- reading ------------------------------------------------------------------------------------

    def query(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """IndexService.queryOffset, verified: the offsets of records of ``topic`` whose UNIQ_KEY or one
        of whose KEYS is ``key``, stored in [begin_ms, end_ms], newest first, each once, at most
        ``max_num``. Blocking (pread of each hit's record)."""
        return [phy for phy, _ in self.query_records(topic, key, begin_ms, end_ms, max_num)]

    def query_records(self, topic: str, key: str, begin_ms: int, end_ms: int, max_num: int) -> list[tuple[int, bytes]]:
        """``query``'s hits with the records they were verified against, ``(offset, record bytes)``: a
        caller that wants the messages reads nothing again."""
        found: list[tuple[int, bytes]] = []
        if max_num <= 0:
            return found
        key_hash, seen = codec.index_hash(f"{topic}#{key}"), set()
        with self._lock:
            for f in reversed(self.files):
                begin_ts, end_ts, _, _, _, count = f.header()
                if count <= 1:
                    continue
                if begin_ts <= end_ms and end_ts >= begin_ms:
                    for phy in f.candidates(key_hash, begin_ms, end_ms):
                        raw = None if phy in seen else self._matching(phy, topic, key, begin_ms, end_ms)
                        if raw is not None:
                            found.append((phy, raw))
                            if len(found) >= max_num:
                                return found
                        seen.add(phy)
                if begin_ts < begin_ms:
                    break
        return found

    def _matching(self, phy: int, topic: str, key: str, begin_ms: int, end_ms: int) -> bytes | None:
        """The whole record of ``topic`` with ``key`` stored in the range that starts at ``phy``, or None."""
        cl = self.commit_log
        if not cl.min_offset <= phy < cl.written_offset:
            return None
        try:
            size = record_length(cl.read(phy, 4))
            raw = cl.read(phy, size) if size >= FIXED_SIZE else b""
        except (CorruptRecord, OSError, ValueError):
            return None
        view = memoryview(raw)
        if codec.record_shape(view, 0) != (INDEX_DONE, size) or int.from_bytes(raw[28:36], "big", signed=True) != phy:
            return None
        found = codec.record_keys(view, 0, size)
        matches = found is not None and found[0] == topic and begin_ms <= found[1] <= end_ms and key in found[2]
        return bytes(raw) if matches else None
