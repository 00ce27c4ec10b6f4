"""The epoch file: which master epoch wrote which stretch of the commit log (reference §2.5), and the
decisions a slave takes from it at handshake (reference §2.4, seed 004 "Calculate the Fork Point of a Log").

An entry ``(epoch, startOffset)`` says that the master of ``epoch`` wrote the log from ``startOffset``
on; its end is the next entry's start, and the last entry's end is the log's max offset (open-ended,
``OPEN_END``, when no max offset is given). Everything here is pure except ``EpochFile``, which
persists every change before it returns.
"""

from __future__ import annotations

import bisect
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

OPEN_END = (1 << 63) - 1  # Long.MAX_VALUE: upstream's end of the last entry
EPOCH_FILE_NAME = "epochFileCheckpoint"  # MessageStoreConfig.storePathEpochFile = {storePathRootDir}/epochFileCheckpoint


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.start_offset < 0:
            raise ValueError(f"epoch and start offset must not be negative: {self}")


def _may_follow(previous: EpochEntry, entry: EpochEntry) -> bool:
    # §2.5 appendEntry: rejected unless BOTH the epoch and the start offset are strictly greater than
    # the last entry's (upstream's EpochFileCache agrees: it refuses a start offset >= the last one's).
    return entry.epoch > previous.epoch and entry.start_offset > previous.start_offset


class EpochCache:
    """Entries ordered by epoch (and so by start offset). Mutations go through ``_replace``."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        checked: list[EpochEntry] = []
        for entry in entries:
            if checked and not _may_follow(checked[-1], entry):
                raise ValueError(f"epoch entries out of order: {entry} after {checked[-1]}")
            checked.append(entry)
        self._entries = checked

    def _replace(self, entries: list[EpochEntry]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._entries!r})"

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def first_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else -1

    def _index_of_epoch(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._entries, epoch, key=lambda e: e.epoch)
        return i if i < len(self._entries) and self._entries[i].epoch == epoch else None

    def find_entry_by_epoch(self, epoch: int) -> EpochEntry | None:
        i = self._index_of_epoch(epoch)
        return None if i is None else self._entries[i]

    def end_of(self, entry: EpochEntry, last_end: int = OPEN_END) -> int:
        """Where ``entry`` ends: the next entry's start, or ``last_end`` (the log's max offset) for the last one."""
        i = self._index_of_epoch(entry.epoch)
        if i is None or self._entries[i] != entry:
            raise ValueError(f"{entry} is not in this epoch cache")
        return self._entries[i + 1].start_offset if i + 1 < len(self._entries) else last_end

    def find_entry_by_offset(self, offset: int, last_end: int = OPEN_END) -> EpochEntry | None:
        """The entry with ``start <= offset < end``, if any."""
        i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset) - 1
        if i < 0:
            return None
        entry = self._entries[i]
        return entry if offset < self.end_of(entry, last_end) else None

    def find_consistent_point(self, local_last_end: int, other: Sequence[EpochEntry] | EpochCache, other_last_end: int) -> int:
        """The offset up to which this log and the ``other`` log are the same history, or -1.

        §2.5: walk the local entries from the highest epoch down; the first epoch that ``other`` also
        has *with the same start offset* gives ``min(local end, other end)`` of that epoch. An epoch
        present on both sides with different start offsets is not a match: keep walking down. The
        last entries end at the given log ends (each log's max offset).
        """
        others = other if isinstance(other, EpochCache) else EpochCache(other)
        for local in reversed(self._entries):
            theirs = others.find_entry_by_epoch(local.epoch)
            if theirs is not None and theirs.start_offset == local.start_offset:
                return min(self.end_of(local, local_last_end), others.end_of(theirs, other_last_end))
        return -1

    def append(self, entry: EpochEntry) -> bool:
        """Add ``entry`` after the last one; False (nothing changes) unless it strictly follows it (§2.5)."""
        if self._entries and not _may_follow(self._entries[-1], entry):
            return False
        self._replace([*self._entries, entry])
        return True

    def _keep(self, kept: list[EpochEntry]) -> int:
        dropped = len(self._entries) - len(kept)
        if dropped:
            self._replace(kept)
        return dropped

    def truncate_suffix_by_epoch(self, epoch: int) -> int:
        """Drop the entries with ``epoch >= epoch``; returns how many were dropped."""
        return self._keep([e for e in self._entries if e.epoch < epoch])

    def truncate_suffix_by_offset(self, offset: int) -> int:
        """Drop the entries starting at or after ``offset`` (the log was truncated there)."""
        return self._keep([e for e in self._entries if e.start_offset < offset])

    def truncate_prefix_by_offset(self, offset: int) -> int:
        """Drop the entries ending at or before ``offset`` (old commit-log files were deleted up to it).

        The last entry is open-ended (§2.5), so it is always kept. The first kept entry keeps its start
        offset even when the log now begins later: a start offset is an epoch's identity in
        ``find_consistent_point``, and the other replicas still know the epoch by its original start.
        """
        entries = self._entries
        return self._keep([e for i, e in enumerate(entries) if i + 1 == len(entries) or entries[i + 1].start_offset > offset])

    def clear(self) -> None:
        self._keep([])


# --- the six log-fork cases of seed 004 and what a slave does in each ---------------------------------


class ForkCase(StrEnum):
    """Where a slave's log lies against the master's (seed 004, "Log Replication or Message Replication").

    The master's min and max offsets cut the offset line into three intervals:
    1 = ``[.., master min]``, 2 = ``(master min, master max]``, 3 = ``(master max, ..)``.
    A case is "<interval of slave min>-<interval of slave max>"; since slave min <= slave max, the
    first digit never exceeds the second, which leaves exactly six cases.
    """

    CASE_1_1 = "1-1"  # slave max <= master min: the slave is far behind (or offline for long)
    CASE_1_2 = "1-2"  # master min < slave max <= master max: the slave lags, it can follow
    CASE_2_2 = "2-2"
    CASE_1_3 = "1-3"  # slave max > master max: the new master lags the slave (async flush, unclean election)
    CASE_2_3 = "2-3"
    CASE_3_3 = "3-3"  # slave min > master max: "in theory will not appear"; manual intervention


def classify_fork(slave_min: int, slave_max: int, master_min: int, master_max: int) -> ForkCase:
    """Seed 004's case for the slave log ``[slave_min, slave_max)`` against the master's ``[master_min, master_max)``.

    The seed's bounds: 1-1 is ``slave max <= master min``; 1-2 and 2-2 are ``master min < slave max
    <= master max``; 1-3 and 2-3 are ``slave max > master max``; 3-3 has both ends beyond the master's
    max. A slave min equal to the master min is in interval 1, one equal to the master max in interval 2.
    """
    if not (0 <= slave_min <= slave_max and 0 <= master_min <= master_max):
        raise ValueError(f"not two logs: slave [{slave_min}, {slave_max}), master [{master_min}, {master_max})")

    def interval(offset: int) -> int:
        return 1 if offset <= master_min else 2 if offset <= master_max else 3

    return ForkCase(f"{interval(slave_min)}-{interval(slave_max)}")


class CatchUpAction(StrEnum):
    START_FROM_MASTER_MIN = "START_FROM_MASTER_MIN"  # discard the whole slave log; replicate from the master's min
    FOLLOW = "FOLLOW"  # nothing to cut; replicate from the slave's max
    TRUNCATE = "TRUNCATE"  # cut the slave log (and its epoch entries) at ``offset``; replicate from there
    REFUSE = "REFUSE"  # no safe point: leave the slave untouched for an operator


@dataclass(frozen=True)
class CatchUp:
    case: ForkCase
    action: CatchUpAction
    offset: int  # where replication resumes (what the slave truncates to); -1 for REFUSE


def plan_catch_up(slave_min: int, slave_max: int, master_min: int, master_max: int, consistent_point: int | None) -> CatchUp:
    """What a slave does with its log after the handshake, per seed 004's six cases.

    ``consistent_point`` is ``find_consistent_point`` of the slave's epochs against the master's (-1:
    no common epoch), or None when the slave has no epoch entries at all (§2.4: such a replica is
    taken as brand-new and is not truncated).

    * 1-1: the slave's whole log is before the master's min: discard it, start at the master's min.
    * 1-2, 2-2: follow; if the consistent point is below the slave's max, the logs forked inside the
      shared range: truncate there first.
    * 1-3, 2-3: the slave is ahead of the master: truncate the fork at the consistent point.
    * 3-3: refuse (the seed: "manual intervention is required").
    * No common epoch (-1) outside 1-1: refuse, nothing proves any byte of the slave right. The same
      for a slave with bytes but no epoch entries; one with an empty log just follows.
    * A consistent point below the master's min: the shared history is gone from the master, so after
      cutting there the slave would be in case 1-1: start from the master's min.
    """
    case = classify_fork(slave_min, slave_max, master_min, master_max)
    if case is ForkCase.CASE_1_1:
        return CatchUp(case, CatchUpAction.START_FROM_MASTER_MIN, master_min)
    refuse = CatchUp(case, CatchUpAction.REFUSE, -1)
    if case is ForkCase.CASE_3_3:
        return refuse
    if consistent_point is None:
        return CatchUp(case, CatchUpAction.FOLLOW, slave_max) if slave_min == slave_max else refuse
    if consistent_point < 0:
        return refuse
    if consistent_point > min(slave_max, master_max):
        raise ValueError(f"consistent point {consistent_point} is beyond a log end (slave {slave_max}, master {master_max})")
    if consistent_point < master_min:
        return CatchUp(case, CatchUpAction.START_FROM_MASTER_MIN, master_min)
    if consistent_point == slave_max:
        return CatchUp(case, CatchUpAction.FOLLOW, slave_max)
    return CatchUp(case, CatchUpAction.TRUNCATE, consistent_point)


# --- persistence --------------------------------------------------------------------------------------


class EpochFileCorrupt(ValueError):
    """Neither the epoch file nor its .bak copy holds a valid checkpoint."""


def _crc(body: str) -> int:
    return zlib.crc32(body.encode()) & 0x7FFFFFFF  # UtilAll.crc32: Java's CRC32 kept a positive int


def format_checkpoint(entries: Sequence[EpochEntry]) -> str:
    """CheckpointFile's layout (§2.5): entry count, CRC-32 of the entry lines as written, one line per entry."""
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{_crc(body)}\n{body}"


def _number(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise EpochFileCorrupt(f"not a number: {text!r}")
    return int(text)


def parse_checkpoint(text: str) -> list[EpochEntry]:
    """The entries of a checkpoint; ``EpochFileCorrupt`` unless count, CRC (0 = unchecked) and order hold."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "":
        raise EpochFileCorrupt("torn checkpoint: no count and CRC lines, or no final newline")
    count, crc, entry_lines = _number(lines[0]), _number(lines[1]), lines[2:-1]
    if count != len(entry_lines):
        raise EpochFileCorrupt(f"expected {count} entries, found {len(entry_lines)}")
    body = "".join(line + "\n" for line in entry_lines)
    if crc and crc != _crc(body) and crc != zlib.crc32(body.encode()):  # also accept an unmasked CRC
        raise EpochFileCorrupt(f"CRC mismatch: stored {crc}, computed {_crc(body)}")
    entries = []
    for line in entry_lines:
        epoch, sep, start = line.partition("-")
        if not sep:
            raise EpochFileCorrupt(f"not an '<epoch>-<startOffset>' line: {line!r}")
        entries.append(EpochEntry(_number(epoch), _number(start)))
    try:
        EpochCache(entries)
    except ValueError as exc:
        raise EpochFileCorrupt(str(exc)) from None
    return entries


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, content: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class EpochFile(EpochCache):
    """An ``EpochCache`` kept in ``path`` and ``path.bak``; each change is on disk before the method returns.

    Each copy is replaced atomically (temporary file, fsync, rename, fsync of the folder), the primary
    first, so a crash leaves every copy holding either the old or the new entries. Loading prefers the
    primary and falls back to the .bak when the primary is missing or corrupt.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".bak")
        super().__init__(self._load())

    @classmethod
    def in_store(cls, store_root: str | os.PathLike[str]) -> EpochFile:
        return cls(Path(store_root) / EPOCH_FILE_NAME)

    def _load(self) -> list[EpochEntry]:
        problems = []
        for candidate in (self.path, self.backup_path):
            try:
                return parse_checkpoint(candidate.read_bytes().decode())
            except FileNotFoundError:
                continue
            except UnicodeDecodeError:
                problems.append(f"{candidate}: not UTF-8 text")
            except EpochFileCorrupt as exc:
                problems.append(f"{candidate}: {exc}")
        if problems:
            raise EpochFileCorrupt("no usable epoch checkpoint: " + "; ".join(problems))
        return []  # neither copy exists: a new store

    def _replace(self, entries: list[EpochEntry]) -> None:
        content = format_checkpoint(entries).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(self.path, content)
        _write_atomically(self.backup_path, content)
        super()._replace(entries)
