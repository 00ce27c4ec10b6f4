"""The commit log's retention and the disk's guard (RocketMQ's ``CleanCommitLogService``): it looks every
cleanResourceInterval and whenever a commit-log file is started, measures the disk, tells the write gate
whether the disk is full, and deletes the oldest file while brokers/core/retention.py says it may go, one
per deleteCommitLogFilesInterval, measuring again after each. What follows the log moves with it: the
consume queues' min offsets and the message index's files whose endPhyOffset is below the log's new min
offset (in the store's deletion, RocketMQ's ``IndexService.deleteExpiredFile``), the epoch file
(``truncatePrefixByOffset``).

Every key is read at each look, so an operator's updateBrokerConfig takes effect at the next one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import BrokerConfig
from .core.retention import disk_state, next_deletion, seconds_until_full
from .ha.epoch import EpochCache
from .store.store import MessageStore

log = logging.getLogger("brokers.retention")

RATE_WINDOW_S = 60.0  # the write rate is measured over (at most) the last minute
HOUR_S = 3600.0
FULL_LOOK_S = 0.5  # how often the disk is looked at while it is full


@dataclass(frozen=True)
class DiskUsage:
    total: int
    used: int

    @property
    def ratio(self) -> float:
        """Percent in use, as RocketMQ's ``getDiskPartitionSpaceUsedPercent`` (free = blocks free)."""
        return 100.0 * self.used / self.total if self.total else 100.0


def disk_usage(path: str | os.PathLike[str]) -> DiskUsage:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    return DiskUsage(total, total - st.f_bfree * st.f_frsize)


class Retention:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        epochs: EpochCache,
        on_disk_full: Callable[[bool], None],
    ):
        """``on_disk_full(full)``: the disk became full (sends are to be refused) or not any more."""
        self.config, self.store, self.epochs = config, store, epochs
        self.on_disk_full = on_disk_full
        self.path = Path(config.storePathRootDir)
        self.disk_full = False
        self.files_deleted = 0
        self.bytes_deleted = 0
        self._deleted: deque[tuple[float, int]] = deque()  # (monotonic time, bytes) of the last hour
        self._written: deque[tuple[float, int]] = deque()  # (monotonic time, max offset) samples
        self._wake = asyncio.Event()
        self._oldest: tuple[int, int | None] | None = None  # (min offset, its store time)
        store.segment_listeners.add(self._wake.set)

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval_s())
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # never let retention stop: the next look tries again
                log.exception("retention check failed")

    def _interval_s(self) -> float:
        """cleanResourceInterval; every FULL_LOOK_S at most while the disk is full, so writes come back
        soon after room is made (no file starts while sends are refused)."""
        interval = self.config.cleanResourceInterval / 1000
        return min(interval, FULL_LOOK_S) if self.disk_full else interval

    async def check(self) -> int:
        """One look: the disk measured, the gate told, the files that may go deleted one by one.
        Returns how many were deleted."""
        deleted = 0
        while True:
            policy = self.config.retention_policy
            usage = disk_usage(self.path)
            self._sample()
            state = disk_state(usage.ratio, self.disk_full, policy)
            self._set_full(state.full, usage)
            now_ms = int(time.time() * 1000)
            deletion = next_deletion(
                self.store.log_files(),
                now_ms=now_ms,
                hour=time.localtime(now_ms / 1000).tm_hour,
                pressure=state.pressure,
                protect_offset=self.store.confirm_offset,
                policy=policy,
            )
            if deletion is None:
                return deleted
            size = await self.store.delete_oldest_file()
            deleted += 1
            self.files_deleted += 1
            self.bytes_deleted += size
            self._deleted.append((time.monotonic(), size))
            self.epochs.truncate_prefix_by_offset(self.store.min_offset)
            log.info(
                "deleted commit-log file %020d (%d bytes, %s; disk %.1f%%): the log starts at %d",
                deletion.file.start,
                size,
                deletion.reason.value,
                usage.ratio,
                self.store.min_offset,
            )
            await asyncio.sleep(self.config.deleteCommitLogFilesInterval / 1000)

    def _set_full(self, full: bool, usage: DiskUsage) -> None:
        if full == self.disk_full:
            return
        self.disk_full = full
        if full:
            log.error(
                "disk %.1f%% used (diskSpaceWarningLevelRatio %d%%): sends are refused until it is back at %d%%",
                usage.ratio,
                self.config.diskSpaceWarningLevelRatio,
                self.config.diskSpaceCleanForciblyRatio,
            )
        else:
            log.warning("disk %.1f%% used: sends are taken again", usage.ratio)
        self.on_disk_full(full)

    # --- figures (the broker_status report) -------------------------------------------------------------

    def _sample(self) -> None:
        now = time.monotonic()
        self._written.append((now, self.store.max_offset))
        while len(self._written) > 2 and now - self._written[1][0] >= RATE_WINDOW_S:
            self._written.popleft()
        while self._deleted and now - self._deleted[0][0] > HOUR_S:
            self._deleted.popleft()

    def write_rate(self) -> float:
        """Bytes written per second over the last minute (0 before two samples a second apart)."""
        (t0, o0), (t1, o1) = self._written[0], self._written[-1]
        return (o1 - o0) / (t1 - t0) if t1 - t0 >= 1.0 and o1 > o0 else 0.0

    async def oldest_message_ms(self) -> int | None:
        """The retention horizon: when the oldest message kept was stored."""
        low = self.store.min_offset
        if self._oldest is None or self._oldest[0] != low:
            self._oldest = (low, await self.store.oldest_store_timestamp())
        return self._oldest[1]

    async def report(self) -> dict:
        """``status.store`` of the broker_status report (docs/websocket.md)."""
        c, store = self.config, self.store
        usage = disk_usage(self.path)
        self._sample()
        rate = self.write_rate()
        return {
            "diskPath": str(self.path),
            "diskTotalBytes": usage.total,
            "diskUsedBytes": usage.used,
            "diskUsedRatio": round(usage.ratio, 2),
            "diskMaxUsedSpaceRatio": c.diskMaxUsedSpaceRatio,
            "diskSpaceCleanForciblyRatio": c.diskSpaceCleanForciblyRatio,
            "diskSpaceWarningLevelRatio": c.diskSpaceWarningLevelRatio,
            "diskFull": self.disk_full,
            "retentionMs": c.retention_policy.reserved_ms,
            "oldestMessageMs": await self.oldest_message_ms(),
            "commitLogBytes": store.max_offset - store.min_offset,
            "bytesDeletedLastHour": sum(size for _, size in self._deleted),
            "filesDeletedTotal": self.files_deleted,
            "bytesDeletedTotal": self.bytes_deleted,
            "writeBytesPerS": round(rate, 1),
            "secondsUntilFull": seconds_until_full(usage.total, usage.used, rate, c.diskSpaceWarningLevelRatio),
        }
