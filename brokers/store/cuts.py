"""The acknowledged-data guard: every cut of a commit log names its cause, and the cause is checked.

A replica acknowledges the bytes it writes (an HA ack reports its written offset), so any byte a
replica cuts may be part of a message a producer was told is stored. A cut is therefore allowed only
for a cause that proves the bytes are not such a message:

  FORK                 seed 004's epoch comparison: this log and the master's were written by
                       different epochs from the cut on (their epoch entries covering the cut offset
                       differ), or the master has no byte there. Includes the forks an unclean
                       election, when an operator enables it, leaves behind.
  TORN_TAIL            recovery after a crash: what follows the last whole record holds no whole
                       record (a record cut short by the crash, or zeros): it was never acknowledged.
  PARTIAL_RECORD       a takeover: a copy that ends inside a record (the master shipped part of it);
                       the same shape check as TORN_TAIL, on the log as it is now.
  UNWRITTEN            bytes placed for a write that never completed: never written, never acked.
  RESTART_FROM_MASTER  a replica whose whole log lies below its master's first file (retention,
                       seed 004 case 1-1) starts again at the master's.

Any other cut is refused: nothing is cut, and the refusal is logged at ERROR with ``MARKER`` (the
test kit fails every test and chaos run whose broker logs carry it). Every cut, allowed or not, is
logged as one line (``describe``) that the soak reads back to attribute a loss to the cut behind it.

Pure: values in, verdicts out; the store reads the bytes and does the cutting.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import StrEnum

from .message import BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, FIXED_SIZE, MESSAGE_MAGIC_CODE

MARKER = "[acked-data-guard]"
_HEADER = struct.Struct(">ii")  # totalSize, magicCode


class CutCause(StrEnum):
    FORK = "FORK"
    TORN_TAIL = "TORN_TAIL"
    PARTIAL_RECORD = "PARTIAL_RECORD"
    UNWRITTEN = "UNWRITTEN"
    RESTART_FROM_MASTER = "RESTART_FROM_MASTER"
    NO_EPOCHS = "NO_EPOCHS"  # a replica with bytes but no epoch entries: nothing proves them wrong


class TailShape(StrEnum):
    """What the bytes after a cut point are."""

    EMPTY = "EMPTY"
    ZEROS = "ZEROS"  # nothing but zero bytes (never written)
    TORN = "TORN"  # the beginning of one record, cut short (nothing after it but zeros)
    RECORDS = "RECORDS"  # a whole record, or bytes that are no record at all: data, not a torn tail


def tail_shape(head: bytes, length: int, rest_zero: bool = True) -> TailShape:
    """The shape of ``length`` bytes after a cut point, from their first bytes ``head`` (all of them,
    or at least one record's worth) and whether the bytes past ``head`` are all zeros."""
    if length == 0:
        return TailShape.EMPTY
    if not head.strip(b"\0") and rest_zero:
        return TailShape.ZEROS
    if len(head) < END_FILE_MIN_BLANK_LENGTH:
        return TailShape.TORN if len(head) == length else TailShape.RECORDS
    size, magic = _HEADER.unpack_from(head)
    minimum = FIXED_SIZE if magic == MESSAGE_MAGIC_CODE else END_FILE_MIN_BLANK_LENGTH
    if magic in (MESSAGE_MAGIC_CODE, BLANK_MAGIC_CODE) and size >= minimum and size > length:
        return TailShape.TORN  # a record that needs more bytes than there are
    return TailShape.RECORDS


@dataclass(frozen=True)
class Cut:
    """A cut of the log at ``at`` (it ended at ``end``), for ``cause``, with the evidence it offers."""

    cause: CutCause
    at: int
    end: int
    confirm: int  # this replica's confirm offset when it cut
    detail: str = ""
    tail: TailShape | None = None  # TORN_TAIL, PARTIAL_RECORD: what the cut bytes are
    own_epoch: tuple[int, int] | None = None  # FORK: (epoch, start) of this log's entry at ``at``
    master_epoch: tuple[int, int] | None = None  # FORK: the master's entry there; None: it has no byte there
    master_min: int | None = None  # RESTART_FROM_MASTER: where the master's log starts

    @property
    def bytes(self) -> int:
        return max(0, self.end - self.at)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    why: str


def judge(cut: Cut) -> Verdict:
    """Whether ``cut`` may discard its bytes: only for a cause its evidence proves."""
    if cut.bytes == 0:
        return Verdict(True, "nothing to cut")
    cause = cut.cause
    if cause is CutCause.UNWRITTEN:
        return Verdict(True, "the bytes were never written")
    if cause in (CutCause.TORN_TAIL, CutCause.PARTIAL_RECORD):
        if cut.tail in (TailShape.EMPTY, TailShape.ZEROS, TailShape.TORN):
            return Verdict(True, f"the bytes after {cut.at} hold no whole record ({cut.tail})")
        return Verdict(False, f"the bytes after {cut.at} are not a torn record ({cut.tail}): whole records would be lost")
    if cause is CutCause.FORK:
        if cut.master_epoch is None:
            return Verdict(True, f"the master has no byte at {cut.at}")
        if cut.own_epoch != cut.master_epoch:
            return Verdict(True, f"epoch {cut.own_epoch} here, {cut.master_epoch} on the master at {cut.at}")
        return Verdict(False, f"both logs are in epoch {cut.own_epoch} at {cut.at}: no fork there")
    if cause is CutCause.RESTART_FROM_MASTER:
        if cut.master_min is not None and cut.end <= cut.master_min:
            return Verdict(True, f"the whole log is below the master's first offset {cut.master_min}")
        return Verdict(False, f"the log ends at {cut.end}, inside the master's log (from {cut.master_min})")
    if cause is CutCause.NO_EPOCHS:
        return Verdict(False, "a log with bytes but no epoch entries cannot be matched with its master's")
    return Verdict(False, f"unknown cause {cause}")


def describe(cut: Cut, verdict: Verdict) -> str:
    """The one log line of a cut (chaos/checks.py parses it): ``log cut: cause=... allowed=yes``, or
    ``MARKER log cut refused: ...``."""
    head = "log cut:" if verdict.allowed else f"{MARKER} log cut refused:"
    detail = " ".join(f"{cut.detail} {verdict.why}".split()).replace('"', "'")
    return (
        f"{head} cause={cut.cause} at={cut.at} end={cut.end} bytes={cut.bytes} confirm={cut.confirm} "
        f'allowed={"yes" if verdict.allowed else "no"} detail="{detail}"'
    )


class CutRefused(RuntimeError):
    """A cut the guard refused: nothing was cut."""

    def __init__(self, cut: Cut, verdict: Verdict):
        super().__init__(describe(cut, verdict))
        self.cut, self.verdict = cut, verdict
