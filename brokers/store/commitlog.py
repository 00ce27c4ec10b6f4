"""The commit log: fixed-size segment files named by their start offset (20 digits), as RocketMQ's.

The store places and encodes a batch of records on its event loop (``place_batch``, no I/O: the
records that fit a segment are encoded as one run, one buffer) and writes them from one I/O thread
(``write``: ``pwritev`` of the runs' buffers);
``flush`` fsyncs what was written since the last flush. A record never spans two segments: when
it does not fit, the segment's tail gets a blank record and the next segment starts at
``start + segment_size``.
"""

from __future__ import annotations

import mmap
import os
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

from .cuts import TailShape, tail_shape
from .message import END_FILE_MIN_BLANK_LENGTH, Blank, CorruptRecord, Message, blank, decode, record_length

_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 1024
TAIL_HEAD = 8 << 20  # bytes of a tail read whole to judge its shape (more than the largest record)
_ZERO_CHUNK = 4 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Segment:
    start: int
    path: Path
    fd: int  # -1: placed, its file not created yet
    length: int  # bytes placed (written, or handed to the I/O thread to write)
    dirty: bool = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


Writes = list[tuple[Segment, int, list[bytes]]]  # (segment, position in its file, buffers)


@dataclass
class RecoveryReport:
    max_offset: int
    truncated_at: int | None  # where a torn or corrupt tail was cut, if any
    removed_bytes: int
    messages: int
    segments_removed: list[str] = field(default_factory=list)


class CommitLog:
    def __init__(self, root: Path, segment_size: int, on_new_segment: Callable[[], None] | None = None):
        """``on_new_segment()``: told when a segment is placed (retention looks at the disk then)."""
        if segment_size < 4096:
            raise ValueError("mappedFileSizeCommitLog must be at least 4096 bytes")
        self.root = Path(root)
        self.segment_size = segment_size
        self.root.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = []
        for p in sorted(self.root.iterdir()):
            if p.name.isdigit() and len(p.name) == 20:
                fd = os.open(p, os.O_RDWR)
                self.segments.append(Segment(int(p.name), p, fd, os.fstat(fd).st_size))
        # Held while fsyncing and while closing or deleting segments: the store flushes from its own
        # thread, and an fd must not be closed (and its number reused) under a running fsync.
        self.files_lock = threading.Lock()
        self.base_offset = 0  # where an empty log starts (a replica's log may start at its master's min)
        # The end of what the I/O thread has written (max_offset is the end of what was placed): the
        # HA master ships, and water levels report, only written bytes.
        self.written_offset = self.max_offset
        self.on_new_segment = on_new_segment

    # --- offsets ----------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else self.base_offset

    @property
    def max_offset(self) -> int:
        if not self.segments:
            return self.base_offset
        last = self.segments[-1]
        return last.start + last.length

    # --- writing ----------------------------------------------------------------------------------

    def _new_segment(self, start: int) -> Segment:
        """A segment placed but not created yet: ``write`` creates its file (fd -1 until then)."""
        seg = Segment(start, self.root / f"{start:020d}", -1, 0)
        self.segments.append(seg)
        if self.on_new_segment is not None:
            self.on_new_segment()
        return seg

    def _create(self, seg: Segment) -> None:
        seg.fd = os.open(seg.path, os.O_RDWR | os.O_CREAT, 0o644)
        _fsync_dir(self.root)

    def place_batch(self, sizes: list[int], encode: Callable[[int, int, int], bytes]) -> Writes:
        """Place records of the given sizes one after another: ``encode(start, stop, physical)``
        returns records [start, stop) laid out from offset ``physical``, one buffer (a run: as many
        records as fit the current segment). Returns the writes that put them on disk (``write``).

        Placing is pure computation (no I/O), so the store does it on its event loop, and only the
        writes go to its I/O thread; a record's offset is final once placed."""
        writes: Writes = []
        seg = self.segments[-1] if self.segments else self._new_segment(self.base_offset)
        ends = list(accumulate(sizes))  # ends[j] - placed: bytes that records [i, j] take from here
        i, placed = 0, 0
        while i < len(sizes):
            room = self.segment_size - END_FILE_MIN_BLANK_LENGTH - seg.length
            stop = bisect_right(ends, placed + room, i)  # records [i, stop) fit before the segment's end
            if stop == i:  # the next record needs a new segment; this one's tail gets a blank record
                if sizes[i] + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
                    raise ValueError(f"a record of {sizes[i]} bytes does not fit a {self.segment_size}-byte segment")
                if seg.length < self.segment_size:  # (== when full already: its blank was written before a crash)
                    writes.append((seg, seg.length, [blank(self.segment_size - seg.length)]))
                    seg.length = self.segment_size
                seg = self._new_segment(seg.start + self.segment_size)
                continue
            writes.append((seg, seg.length, [encode(i, stop, seg.start + seg.length)]))
            seg.length += ends[stop - 1] - placed
            placed = ends[stop - 1]
            i = stop
        return writes

    def write(self, writes: Writes) -> None:
        """Blocking: carry out ``place_batch``'s writes, in order (one ``pwritev`` of each write's
        buffers; the rest of a short write is retried)."""
        for seg, at, chunks in writes:
            if seg.fd < 0:
                self._create(seg)
            for first in range(0, len(chunks), _IOV_MAX):
                part = chunks[first : first + _IOV_MAX]
                want = sum(map(len, part))
                written = os.pwritev(seg.fd, part, at)
                if written != want:  # a short write (disk full): write the rest, or fail
                    rest = b"".join(part)[written:]
                    while rest:
                        n = os.pwrite(seg.fd, rest, at + written)
                        if n <= 0:
                            raise OSError(f"short write to {seg.path}")
                        written += n
                        rest = rest[n:]
                at += written
            seg.dirty = True
            self.written_offset = seg.start + at

    def place_raw(self, offset: int, data: bytes) -> Writes:
        """Place bytes copied from a master (a slave's replication): they go at the end of the log,
        ``offset`` must be that end, and they never cross a segment (a master ships from one
        segment at a time); a full segment is followed by a new one."""
        if offset != self.max_offset:
            raise ValueError(f"replicated bytes at {offset}, but the log ends at {self.max_offset}")
        if not self.segments:
            if offset % self.segment_size:
                raise ValueError(f"a replica's first segment must start at a multiple of {self.segment_size}")
            self._new_segment(offset)
        seg = self.segments[-1]
        if seg.length == self.segment_size:
            seg = self._new_segment(seg.start + self.segment_size)
        if seg.length + len(data) > self.segment_size:
            raise ValueError(f"{len(data)} replicated bytes at {offset} cross the end of segment {seg.start}")
        at = seg.length
        seg.length += len(data)
        return [(seg, at, [data])]

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Written bytes from ``offset``, at most ``max_bytes``, never past the end of its segment
        (what a master ships in one transfer)."""
        if offset >= self.written_offset:
            return b""
        seg = self._segment_for(offset)
        if seg is None:
            raise CorruptRecord(f"offset {offset} is not in the log [{self.min_offset}, {self.written_offset})")
        end = min(seg.start + seg.length, self.written_offset, offset + max_bytes)
        return os.pread(seg.fd, end - offset, offset - seg.start)

    def append_batch(self, sizes: list[int], encode: Callable[[int, int, int], bytes]) -> None:
        """``place_batch`` and ``write`` in one go (single-threaded use)."""
        self.write(self.place_batch(sizes, encode))

    def flush(self) -> None:
        """fsync every segment written since the last flush (group commit: once per batch). Safe from
        any thread: a write that ends after the flag is cleared sets it again for the next flush, and
        a flush that finds nothing dirty returns only after a flush running in another thread is done."""
        with self.files_lock:
            for seg in list(self.segments):
                if seg.dirty:
                    seg.dirty = False
                    os.fdatasync(seg.fd)

    # --- reading ----------------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> Segment | None:
        index = (offset - self.min_offset) // self.segment_size if self.segments else -1
        if 0 <= index < len(self.segments) and self.segments[index].start <= offset:
            return self.segments[index]
        return None

    def read(self, offset: int, size: int) -> bytes:
        seg = self._segment_for(offset)
        if seg is None or offset + size > seg.start + seg.length:
            raise CorruptRecord(f"no record of {size} bytes at {offset}")
        return os.pread(seg.fd, size, offset - seg.start)

    def read_message(self, offset: int, size: int) -> Message:
        record = decode(self.read(offset, size))
        if isinstance(record, Blank):
            raise CorruptRecord(f"blank record at {offset}")
        return record

    # --- recovery ---------------------------------------------------------------------------------

    def iter_records(self, check_crc: bool = True) -> Iterator[tuple[int, Message | Blank | CorruptRecord, int]]:
        """(offset, record, size) for every record in order; the walk ends with a CorruptRecord at
        the offset where the valid log ends, or quietly at the end of the last segment."""
        for n, seg in enumerate(self.segments):
            last = n == len(self.segments) - 1
            with mmap.mmap(seg.fd, seg.length, access=mmap.ACCESS_READ) if seg.length else nullcontext(b"") as view:
                pos = 0
                while True:
                    if pos == seg.length:
                        if not last:
                            yield seg.start + pos, CorruptRecord("segment ends without its blank record"), 0
                        return
                    try:
                        record = decode(view, pos, check_crc=check_crc)
                    except CorruptRecord as exc:
                        yield seg.start + pos, exc, 0
                        return
                    size = record.size if isinstance(record, Blank) else record_length(view, pos)
                    yield seg.start + pos, record, size
                    pos += size
                    if isinstance(record, Blank):
                        if pos != self.segment_size:
                            yield seg.start + pos, CorruptRecord("blank record does not end the segment"), 0
                            return
                        break

    def tail_shape(self, offset: int) -> TailShape:
        """What the placed bytes from ``offset`` to the end of the log are (cuts.tail_shape): read
        from the files as they are now, never from a position remembered earlier."""
        end = self.max_offset
        if offset >= end:
            return TailShape.EMPTY
        head = self._read_span(offset, min(end, offset + TAIL_HEAD))
        rest_zero = all(not chunk.strip(b"\0") for chunk in self._chunks(offset + len(head), end))
        return tail_shape(head, end - offset, rest_zero)

    def _chunks(self, lo: int, hi: int) -> Iterator[bytes]:
        while lo < hi:
            chunk = self._read_span(lo, min(hi, lo + _ZERO_CHUNK))
            if not chunk:
                return
            yield chunk
            lo += len(chunk)

    def _read_span(self, lo: int, hi: int) -> bytes:
        """Bytes [lo, hi) across segments, as the files hold them (short where a file is)."""
        out = []
        for seg in self.segments:
            a, b = max(lo, seg.start), min(hi, seg.start + seg.length)
            if a < b and seg.fd >= 0:
                out.append(os.pread(seg.fd, b - a, a - seg.start))
        return b"".join(out)

    def recover(
        self,
        on_message: Callable[[int, int, Message], None] | None = None,
        before_cut: Callable[[int, int], None] | None = None,
    ) -> RecoveryReport:
        """Find the end of the valid log and cut everything after it, physically and durably, so a
        torn tail can never reappear. ``on_message(offset, size, message)`` sees every valid message;
        ``before_cut(valid_end, log_end)`` is asked before anything is cut and may refuse by raising."""
        end, messages = self.min_offset, 0
        for offset, record, size in self.iter_records():
            if isinstance(record, CorruptRecord):
                end = offset
                break
            if isinstance(record, Message):
                if on_message is not None:
                    on_message(offset, size, record)
                messages += 1
            end = offset + size
        before = self.max_offset
        if end < before and before_cut is not None:
            before_cut(end, before)
        removed = self.truncate(end)
        return RecoveryReport(self.max_offset, end if before > end else None, before - end, messages, removed)

    def truncate(self, offset: int) -> list[str]:
        """Cut the log at ``offset`` (a record boundary): later segments are deleted, the segment
        holding it is shortened; both are fsynced. Returns the names of deleted segments."""
        with self.files_lock:
            return self._truncate(offset)

    def _truncate(self, offset: int) -> list[str]:
        removed = []
        while self.segments and self.segments[-1].start > offset:
            seg = self.segments.pop()
            seg.close()
            seg.path.unlink()
            removed.append(seg.path.name)
        if self.segments:
            seg = self.segments[-1]
            keep = offset - seg.start
            if keep < seg.length:
                os.ftruncate(seg.fd, keep)
                os.fsync(seg.fd)
                seg.length = keep
                if keep == 0 and len(self.segments) > 1:
                    self.segments.pop()
                    seg.close()
                    seg.path.unlink()
                    removed.append(seg.path.name)
        if removed:
            _fsync_dir(self.root)
        self.written_offset = self.max_offset
        return removed

    def remove_first(self) -> Segment:
        """Take the oldest segment out of the log (retention; never the last one, which is being
        written): its file is unlinked at once, its descriptor stays open for the caller to close once
        no read in flight can use it (the disk space comes back then)."""
        with self.files_lock:
            if len(self.segments) < 2:
                raise ValueError("the segment being written is never deleted")
            seg = self.segments.pop(0)
            seg.path.unlink(missing_ok=True)
            _fsync_dir(self.root)
        return seg

    def modified_ms(self, seg: Segment) -> int:
        """When ``seg`` was last written (its file's mtime), as RocketMQ's ``getLastModifiedTimestamp``."""
        return os.fstat(seg.fd).st_mtime_ns // 1_000_000 if seg.fd >= 0 else 0

    def close_removed(self, seg: Segment) -> None:
        with self.files_lock:
            seg.close()

    def clear(self, base_offset: int = 0) -> list[str]:
        """Delete every segment; the empty log then starts at ``base_offset`` (a multiple of the
        segment size). A replica whose whole log is older than its master's (seed 004 case 1-1)
        starts again at the master's min offset."""
        if base_offset % self.segment_size:
            raise ValueError(f"a log must start at a multiple of {self.segment_size}")
        with self.files_lock:
            return self._clear(base_offset)

    def _clear(self, base_offset: int) -> list[str]:
        self.base_offset = base_offset
        removed = []
        while self.segments:
            seg = self.segments.pop()
            seg.close()
            if seg.path.exists():
                seg.path.unlink()
            removed.append(seg.path.name)
        _fsync_dir(self.root)
        self.written_offset = base_offset
        return removed

    def close(self) -> None:
        with self.files_lock:
            for seg in self.segments:
                seg.close()
            self.segments = []
