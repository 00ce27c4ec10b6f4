"""The commit log's retention and disk policy, as pure rules (RocketMQ's ``CleanCommitLogService``,
``DefaultMessageStore``; keys and defaults of ``MessageStoreConfig``). brokers/retention.py carries
the decisions out: it measures the disk, deletes the file this module names, and tells the write gate.

- ``disk_state``: where disk use stands against the three ratios. Past ``diskSpaceWarningLevelRatio``
  the disk is full and sends are refused; it stays full until use is back at or below
  ``diskSpaceCleanForciblyRatio`` (RocketMQ's ``getAndMakeDiskFull`` / ``getAndMakeDiskOK``: between
  the two ratios the flag keeps what it was, so writes do not flap at the mark).
- ``next_deletion``: the oldest commit-log file, if it may go now. Never the file being written, never
  one holding bytes beyond ``protect_offset`` (the confirm offset: what is not confirmed yet is never
  deleted, so a promotion never finds a hole). An expired file (older than the retention) goes at a
  ``deleteWhen`` hour, or at once when use is past ``diskMaxUsedSpaceRatio``; past
  ``diskSpaceCleanForciblyRatio`` (with ``cleanFileForciblyEnable``) the oldest file goes, expired or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

HOUR_MS = 3_600_000
RATIO_RANGE = (10, 95)  # RocketMQ clamps diskMaxUsedSpaceRatio into it (getDiskMaxUsedSpaceRatio)


def parse_delete_when(text: str) -> frozenset[int]:
    """``deleteWhen``: hours of the day, ``;``-separated (``"04"``, ``"01;13"``), as RocketMQ's
    ``UtilAll.isItTimeToDo`` reads them. ValueError, naming the item, for anything else."""
    hours = set()
    for item in text.split(";"):
        item = item.strip()
        if not item.isdecimal() or not 0 <= int(item) <= 23:
            raise ValueError(f"{item!r} is not an hour: give hours 0-23 separated by ';', e.g. 04 or 01;13")
        hours.add(int(item))
    return frozenset(hours)


@dataclass(frozen=True)
class RetentionPolicy:
    reserved_ms: int  # fileReservedTime (hours) in ms, or fileReservedTimeMillis when set
    delete_hours: frozenset[int]  # deleteWhen
    max_used_ratio: int  # diskMaxUsedSpaceRatio: expired files go at once past it
    clean_forcibly_ratio: int  # diskSpaceCleanForciblyRatio: unexpired files go too past it
    warning_ratio: int  # diskSpaceWarningLevelRatio: writes are refused past it
    clean_forcibly: bool  # cleanFileForciblyEnable


def ratio_problems(max_used: int, clean_forcibly: int, warning: int) -> list[str]:
    """What is wrong with the three ratios (``key: message`` each): each within RATIO_RANGE, and
    diskMaxUsedSpaceRatio <= diskSpaceCleanForciblyRatio <= diskSpaceWarningLevelRatio."""
    lo, hi = RATIO_RANGE
    named = {
        "diskMaxUsedSpaceRatio": max_used,
        "diskSpaceCleanForciblyRatio": clean_forcibly,
        "diskSpaceWarningLevelRatio": warning,
    }
    problems = [f"{key}: must be between {lo} and {hi} (percent)" for key, value in named.items() if not lo <= value <= hi]
    if not problems and not max_used <= clean_forcibly <= warning:
        problems.append(
            "diskSpaceCleanForciblyRatio: the ratios must be in order: "
            f"diskMaxUsedSpaceRatio ({max_used}) <= diskSpaceCleanForciblyRatio ({clean_forcibly}) "
            f"<= diskSpaceWarningLevelRatio ({warning})"
        )
    return problems


class Pressure(StrEnum):
    """Disk use against the ratios, lowest first."""

    OK = "OK"
    CLEAN = "CLEAN"  # past diskMaxUsedSpaceRatio: expired files go at once, whatever the hour
    FORCE = "FORCE"  # past diskSpaceCleanForciblyRatio: the oldest files go, expired or not
    FULL = "FULL"  # past diskSpaceWarningLevelRatio: sends are refused


@dataclass(frozen=True)
class DiskState:
    pressure: Pressure
    full: bool  # sends refused (FULL, and held until use is back at or below the forced-clean ratio)


def disk_state(used_ratio: float, was_full: bool, policy: RetentionPolicy) -> DiskState:
    """``used_ratio``: percent of the store's filesystem in use."""
    if used_ratio > policy.warning_ratio:
        return DiskState(Pressure.FULL, True)
    if used_ratio > policy.clean_forcibly_ratio:
        return DiskState(Pressure.FORCE, was_full)
    pressure = Pressure.CLEAN if used_ratio > policy.max_used_ratio else Pressure.OK
    return DiskState(pressure, False)


@dataclass(frozen=True)
class LogFile:
    start: int
    end: int  # bytes written up to here
    modified_ms: int  # when it was last written (the file's mtime, as RocketMQ's lastModified)


class DeleteReason(StrEnum):
    EXPIRED = "expired"  # older than the retention, at a deleteWhen hour or under disk pressure
    FORCED = "forced"  # not expired, but disk use is past diskSpaceCleanForciblyRatio


@dataclass(frozen=True)
class Deletion:
    file: LogFile
    reason: DeleteReason


def next_deletion(
    files: Sequence[LogFile],
    *,
    now_ms: int,
    hour: int,
    pressure: Pressure,
    protect_offset: int,
    policy: RetentionPolicy,
) -> Deletion | None:
    """The oldest file if it may be deleted now (files oldest first; ``hour``: the local hour of
    ``now_ms``, as deleteWhen means local hours), else None. One file per call: the caller deletes
    it, waits deleteCommitLogFilesInterval, measures again and asks again."""
    if len(files) < 2:  # the last file is the one being written
        return None
    oldest = files[0]
    if oldest.end > protect_offset:
        return None
    if now_ms >= oldest.modified_ms + policy.reserved_ms and (hour in policy.delete_hours or pressure is not Pressure.OK):
        return Deletion(oldest, DeleteReason.EXPIRED)
    if policy.clean_forcibly and pressure in (Pressure.FORCE, Pressure.FULL):
        return Deletion(oldest, DeleteReason.FORCED)
    return None


def seconds_until_full(total_bytes: int, used_bytes: int, write_bytes_per_s: float, warning_ratio: int) -> float | None:
    """How long until use passes ``warning_ratio`` at ``write_bytes_per_s`` (None: not writing)."""
    if write_bytes_per_s <= 0:
        return None
    return max(0.0, (total_bytes * warning_ratio / 100 - used_bytes) / write_bytes_per_s)
