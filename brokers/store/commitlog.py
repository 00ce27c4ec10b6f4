"""The commit log: fixed-size segment files named by their start offset (20 digits), as RocketMQ's.

Blocking I/O: the asyncio store calls it from one writer thread. A batch of records is written
with one ``pwrite`` per segment; ``flush`` fsyncs what was written since the last flush. A record
never spans two segments: when it does not fit, the segment's tail gets a blank record and the
next segment starts at ``start + segment_size``.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from .message import END_FILE_MIN_BLANK_LENGTH, Blank, CorruptRecord, Message, blank, decode, record_length


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
    fd: int
    length: int  # bytes written
    dirty: bool = False

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class RecoveryReport:
    max_offset: int
    truncated_at: int | None  # where a torn or corrupt tail was cut, if any
    removed_bytes: int
    messages: int
    segments_removed: list[str] = field(default_factory=list)


class CommitLog:
    def __init__(self, root: Path, segment_size: int):
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

    # --- offsets ----------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def max_offset(self) -> int:
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.start + last.length

    # --- writing ----------------------------------------------------------------------------------

    def _new_segment(self, start: int) -> Segment:
        path = self.root / f"{start:020d}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        seg = Segment(start, path, fd, 0, dirty=True)
        self.segments.append(seg)
        _fsync_dir(self.root)
        return seg

    def append_batch(self, sizes: list[int], make: Callable[[int, int], bytes]) -> list[int]:
        """Place records of the given sizes one after another; ``make(i, physical_offset)`` encodes
        record i once its offset is known. Returns each record's physical offset."""
        offsets: list[int] = []
        pending: dict[int, list[bytes]] = {}  # segment index -> chunks
        seg = self.segments[-1] if self.segments else self._new_segment(0)
        pos = seg.length
        for i, size in enumerate(sizes):
            if size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
                raise ValueError(f"a record of {size} bytes does not fit a {self.segment_size}-byte segment")
            if pos == self.segment_size:  # full already (its blank was written before a crash)
                seg = self._new_segment(seg.start + self.segment_size)
                pos = 0
            if pos + size + END_FILE_MIN_BLANK_LENGTH > self.segment_size:
                pending.setdefault(len(self.segments) - 1, []).append(blank(self.segment_size - pos))
                self._write(len(self.segments) - 1, pending.pop(len(self.segments) - 1))
                seg = self._new_segment(seg.start + self.segment_size)
                pos = 0
            physical = seg.start + pos
            offsets.append(physical)
            pending.setdefault(len(self.segments) - 1, []).append(make(i, physical))
            pos += size
        for index, chunks in pending.items():
            self._write(index, chunks)
        return offsets

    def _write(self, index: int, chunks: list[bytes]) -> None:
        seg = self.segments[index]
        data = b"".join(chunks)
        written = os.pwrite(seg.fd, data, seg.length)
        if written != len(data):
            raise OSError(f"short write to {seg.path}: {written} of {len(data)} bytes")
        seg.length += written
        seg.dirty = True

    def flush(self) -> None:
        """fsync every segment written since the last flush (group commit: once per batch)."""
        for seg in self.segments:
            if seg.dirty:
                os.fsync(seg.fd)
                seg.dirty = False

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
            with (mmap.mmap(seg.fd, seg.length, access=mmap.ACCESS_READ) if seg.length else nullcontext(b"")) as view:
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

    def recover(self, on_message: Callable[[int, int, Message], None] | None = None) -> RecoveryReport:
        """Find the end of the valid log and cut everything after it, physically and durably, so a
        torn tail can never reappear. ``on_message(offset, size, message)`` sees every valid message."""
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
        removed = self.truncate(end)
        return RecoveryReport(self.max_offset, end if before > end else None, before - end, messages, removed)

    def truncate(self, offset: int) -> list[str]:
        """Cut the log at ``offset`` (a record boundary): later segments are deleted, the segment
        holding it is shortened; both are fsynced. Returns the names of deleted segments."""
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
        return removed

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []
