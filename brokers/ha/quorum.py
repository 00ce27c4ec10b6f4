"""Quorum write (seed 002, reference §4): whether a send waits for replicas, for how many, and the
pipelined wait itself. ``need_ack_nums`` is pure; ``AckWaiters`` only keeps futures."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass

from ..core.roles import BrokerRole
from ..store.store import PutMessageStatus

ALL_ACK_IN_SYNC_STATE_SET = -1


@dataclass(frozen=True)
class QuorumConfig:
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    total_replicas: int = 1
    enable_auto_in_sync_replicas: bool = False
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    all_ack_in_sync_state_set: bool = False
    slave_timeout_ms: int = 3000


def slave_in_sync(master_offset: int, ack_offset: int, max_gap: int) -> bool:
    """§4.2: a slave is in sync while it has acked and its gap to the master is under haMaxGapNotInSync.
    The quorum count below and the water-level report (and the dashboard, through it) use this one rule."""
    return ack_offset >= 0 and master_offset - ack_offset < max_gap


def ha_in_sync_count(master_offset: int, slave_ack_offsets: list[int], max_gap: int) -> int:
    """§4.2, slave-acting-master: 1 (the master) + connections in sync (``slave_in_sync``)."""
    return 1 + sum(1 for ack in slave_ack_offsets if slave_in_sync(master_offset, ack, max_gap))


def need_ack_nums(
    config: QuorumConfig,
    role: BrokerRole,
    *,
    controller_mode: bool,
    acting_master_mode: bool,
    in_sync: int,
    alive_in_group: int | None = None,
) -> tuple[PutMessageStatus | None, int]:
    """(refusal, needAckNums) computed before appending (§4.1-4.2). ``in_sync``: in controller mode
    the SyncStateSet size (widened while a change is in flight), otherwise the HA in-sync count.
    needAckNums 0 or 1 means "do not wait"; -1 means every SyncStateSet member."""
    if role is not BrokerRole.SYNC_MASTER and not controller_mode:
        return None, 1  # ASYNC_MASTER (and a slave) never wait (§4.1)
    need = config.in_sync_replicas
    if controller_mode:
        if in_sync < config.min_in_sync_replicas:
            return PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, 0
        if config.all_ack_in_sync_state_set:
            return None, ALL_ACK_IN_SYNC_STATE_SET
        return None, need
    if acting_master_mode:
        alive = in_sync if alive_in_group is None else alive_in_group
        count = min(alive, in_sync)
        if config.enable_auto_in_sync_replicas:
            need = max(config.min_in_sync_replicas, min(config.in_sync_replicas, count))
        if need > count:
            return PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, 0
        return None, need
    return None, need  # plain master/slave: inSyncReplicas only


def acked_replicas(next_offset: int, ack_offsets: list[int]) -> int:
    """Count mode of §4.3: the master plus every slave whose ack offset reached ``next_offset``."""
    return 1 + sum(1 for ack in ack_offsets if ack >= next_offset)


class AckWaiters:
    """Sends waiting for replica acks, ordered by the offset they need. ``release`` is called on
    every ack with the slaves' current ack offsets and completes every waiter it satisfies; a waiter
    whose deadline passes completes with FLUSH_SLAVE_TIMEOUT. One ack can release thousands of sends."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def wait(self, next_offset: int, need: int, timeout_s: float, satisfied_now: bool) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if satisfied_now:
            fut.set_result(PutMessageStatus.PUT_OK)
            return fut
        heapq.heappush(self._heap, (next_offset, next(self._seq), need, fut))
        handle = loop.call_later(timeout_s, _expire, fut)
        fut.add_done_callback(lambda _f: handle.cancel())
        return fut

    def release(self, ack_offsets: list[int], all_members: list[int] | None = None) -> int:
        """Complete the waiters now satisfied. ``all_members``: for -1 (all-ack) waiters, the ack
        offsets of every SyncStateSet member other than the master (a member without a connection
        counts as 0). Returns how many were released."""
        ranked = sorted(ack_offsets, reverse=True)
        released = 0
        while self._heap:
            offset, _, need, fut = self._heap[0]
            if fut.done():
                heapq.heappop(self._heap)
                continue
            if need == ALL_ACK_IN_SYNC_STATE_SET:
                members = all_members if all_members is not None else ranked
                ok = all(ack >= offset for ack in members)
            else:
                ok = need <= 1 or (len(ranked) >= need - 1 and ranked[need - 2] >= offset)
            if not ok:  # later offsets need at least as much (needAckNums rarely changes; then timeouts)
                break
            heapq.heappop(self._heap)
            fut.set_result(PutMessageStatus.PUT_OK)
            released += 1
        return released

    def fail_all(self, status: PutMessageStatus) -> None:
        for *_, fut in self._heap:
            if not fut.done():
                fut.set_result(status)
        self._heap.clear()


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
