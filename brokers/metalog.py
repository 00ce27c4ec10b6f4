"""The broker's side of brokers/meta.py: a master writes consumer-metadata records to its commit log,
every other replica follows them from its copy of the log.

Modes: FOLLOWER (a slave, or a broker not yet told its role: applies its log's records as they are
published), WRITER (the serving master: changes its state and writes one record per change, through
the same quorum write as a send), ACTING (a slave acting as master while no master is alive,
reference §5.1: serves pops and acks from its followed state; it cannot write its log, so its
changes stay local, with a DataVersion that moves, until pre-online pulls them back).

A follower without a base (a fresh replica, or one whose log was cut at a handshake) skips records
until the next snapshot record, which it asks its master for (peer channel) every second until one
arrives.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum

from .core.trace import record_trace_keys
from .meta import META_TOPIC, SNAPSHOT, ConsumerMeta, MetaRejected
from .pop import now_ms
from .store.message import Message
from .store.results import PutResult
from .store.store import MessageStore, PutMessageStatus

log = logging.getLogger("brokers.meta")

FOLLOW_INTERVAL_S = 0.02  # how often a follower looks for newly published records
READ_BATCH = 512
SNAPSHOT_RETRY_S = 0.5
SNAPSHOT_REQUEST_S = 1.0  # how often a replica without a base asks its master for a snapshot record


class MetaMode(StrEnum):
    FOLLOWER = "FOLLOWER"
    WRITER = "WRITER"
    ACTING = "ACTING"


class MetaLog:
    def __init__(
        self,
        store: MessageStore,
        meta: ConsumerMeta,
        revive_after_takeover_ms: int = 0,
        *,
        on_topics_changed: Callable[[], None] | None = None,
        request_snapshot: Callable[[], Awaitable[None]] | None = None,
    ):
        """``on_topics_changed()``: a followed record changed the topic configs (the broker registers
        them again). ``request_snapshot()``: a replica without a base asks its master for a snapshot
        record (the broker sends the request on the peer channel)."""
        self.store = store
        self.meta = meta
        # popReviveAfterTakeoverMillis: what the old master handed out is due again this soon (0: never sooner)
        self.revive_after_takeover_ms = revive_after_takeover_ms
        self.mode = MetaMode.FOLLOWER
        self.cursor = meta.cursor or 0  # the next record's queue offset
        self.based = meta.cursor is not None  # else: wait for a snapshot record
        self._truncations = store.truncations
        self.applied = 0
        self.rejected = 0
        self._on_topics_changed = on_topics_changed
        self._lock = asyncio.Lock()  # one catch-up at a time (the follow loop, a promotion)
        self._snapshot_wanted = False
        self._wake = asyncio.Event()  # a snapshot became due (a replica asked for one): do not wait
        self._request_snapshot = request_snapshot
        self._requested_at = -SNAPSHOT_REQUEST_S

    # --- writing (WRITER) -------------------------------------------------------------------------

    async def write(self, record: dict, min_acks: int = 0) -> PutResult:
        """Store one record in this broker's log; PUT_OK once it is where sends are (quorum), and on
        at least ``min_acks`` replicas (a FIFO queue's lock under lockInStrictMode)."""
        body = json.dumps(record, separators=(",", ":")).encode()
        props = {"META": record["kind"]}
        if keys := record_trace_keys(record):  # a message's trace finds the records of its position (core/trace.py)
            props["KEYS"] = " ".join(keys)
        result = (await self.store.put_messages([Message(META_TOPIC, 0, body, props)], min_acks))[0]
        if result.status is PutMessageStatus.PUT_OK and result.queue_offset >= self.cursor:
            self.cursor = self.meta.cursor = result.queue_offset + 1
        return result

    # --- following (FOLLOWER, ACTING) -------------------------------------------------------------

    async def follow_forever(self) -> None:
        """Follow the records while not the writer; as the writer, store the snapshot record wanted
        (retried until stored: a SYNC_MASTER may lack in-sync replicas for a while)."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), FOLLOW_INTERVAL_S)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                if self.mode is not MetaMode.WRITER:
                    await self.catch_up()
                    await self._ask_for_snapshot()
                elif self._snapshot_wanted:
                    await self._store_snapshot()
            except Exception:  # never let the follower die
                log.exception("consumer-metadata upkeep failed; retrying")
                await asyncio.sleep(1)

    async def _ask_for_snapshot(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.based or self.mode is not MetaMode.FOLLOWER or self._request_snapshot is None:
            return
        if now - self._requested_at < SNAPSHOT_REQUEST_S:
            return
        self._requested_at = now
        try:
            await self._request_snapshot()
        except Exception as exc:  # no master yet, or it is unreachable: asked again in a second
            log.debug("asking the master for a consumer-metadata snapshot failed: %s", exc)

    async def catch_up(self) -> int:
        """Apply every published record from the cursor on; the number applied."""
        async with self._lock:
            if self.store.truncations != self._truncations:
                self._truncations = self.store.truncations
                end = self.store.max_queue_offset(META_TOPIC, 0)
                if self.cursor > end:
                    log.info("the log was cut below consumer-metadata record %d: waiting for a snapshot record", self.cursor)
                    self.cursor, self.based = end, False
            low = self.store.min_queue_offset(META_TOPIC, 0)
            if self.cursor < low:
                if self.based:  # retention deleted records this replica had not applied yet
                    log.warning("consumer-metadata records below %d were deleted unapplied: waiting for a snapshot record", low)
                    self.based = False
                self.cursor = low
            applied = 0
            while True:
                end = self.store.max_queue_offset(META_TOPIC, 0)
                if self.cursor >= end:
                    return applied
                batch = await self.store.get_messages(META_TOPIC, 0, self.cursor, READ_BATCH)
                if not batch:  # holes only (a replica that started above them)
                    self.cursor = min(end, self.cursor + READ_BATCH)
                    continue
                for m in batch:
                    applied += self._apply(m)
                    self.cursor = self.meta.cursor = m.queue_offset + 1

    def _apply(self, m: Message) -> int:
        try:
            record = json.loads(m.body)
        except ValueError:
            record = None
        kind = record.get("kind") if isinstance(record, dict) else None
        if not self.based and kind != SNAPSHOT:
            return 0
        try:
            topics_changed = self.meta.apply(record)
        except MetaRejected as exc:
            self.rejected += 1
            log.warning("refused consumer-metadata record %d (%s): %s; nothing changed", m.queue_offset, kind, exc)
            return 0
        if kind == SNAPSHOT and not self.based:
            log.info("consumer metadata rebuilt from the snapshot record at %d", m.queue_offset)
            self.based = True
        if topics_changed and self._on_topics_changed is not None:
            self._on_topics_changed()
        self.applied += 1
        return 1

    # --- role changes -----------------------------------------------------------------------------

    async def become_writer(self, state_version: int | None = None) -> None:
        """Take over: apply everything this replica has and move to a new DataVersion
        (stateVersion = ``state_version``, the master epoch in controller mode). The caller then
        lets writes in; ``want_snapshot`` records the state for the slaves."""
        await self.store.settled()  # the entries the promotion just published are readable
        await self.catch_up()
        if not self.based:
            if self.cursor:  # records were there, but none was a snapshot this replica could start from
                log.warning("taking over without a consumer-metadata snapshot: serving from the local state")
            self.based = True
        if self.mode is not MetaMode.WRITER:
            log.info("consumer metadata: %s -> WRITER (%d records applied, %d refused)", self.mode, self.applied, self.rejected)
            self._revive_soon()
        self.mode = MetaMode.WRITER
        if state_version is not None:
            self.meta.offsets.state_version = state_version
        self.meta.bump(state_version)

    def _revive_soon(self) -> None:
        """Taking over: a receive the old master recorded may have lost its answer on the way to the
        client, so nothing it handed out stays invisible longer than popReviveAfterTakeoverMillis (a
        writer's next snapshot record carries the new deadlines to its slaves)."""
        if self.revive_after_takeover_ms > 0:
            moved = self.meta.pop.cap_deadlines(now_ms() + self.revive_after_takeover_ms)
            if moved:
                log.info("%d messages in flight at the takeover are due again within %d ms", moved, self.revive_after_takeover_ms)

    def want_snapshot(self) -> None:
        """A snapshot record is due: after a takeover, and when a replica without a base asks for
        one. The writer stores one as soon as it can (``follow_forever``)."""
        self._snapshot_wanted = True
        self._wake.set()

    async def _store_snapshot(self) -> None:
        self._snapshot_wanted = False
        result = await self.write(self.meta.snapshot())
        if result.status is not PutMessageStatus.PUT_OK:
            self._snapshot_wanted = self.mode is MetaMode.WRITER
            log.info("a consumer-metadata snapshot record was not stored (%s %s); retrying", result.status, result.detail)
            try:  # again after a while, or at once when a slave's link starts
                await asyncio.wait_for(self._wake.wait(), SNAPSHOT_RETRY_S)
            except TimeoutError:
                pass

    def become_follower(self) -> None:
        if self.mode is not MetaMode.FOLLOWER:
            log.info("consumer metadata: %s -> FOLLOWER", self.mode)
        self.mode = MetaMode.FOLLOWER

    async def become_acting(self) -> None:
        """A slave acting for its dead master: serve from what it followed; every change moves the
        DataVersion so that the returning master's pre-online takes it back (§5.3)."""
        await self.store.settled()  # the entries just published (set_follow_max) are readable
        await self.catch_up()
        if self.mode is not MetaMode.ACTING:
            log.info("consumer metadata: %s -> ACTING (serving pops while no master is alive)", self.mode)
            self._revive_soon()
        self.mode = MetaMode.ACTING
        self.meta.bump()
