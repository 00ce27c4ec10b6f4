"""Transactional messages (issue 17; RocketMQ's TransactionalMessageServiceImpl, reference §7): half
messages, EndTransaction, op records and the check of orphaned transactions, all kept in the commit
log so that they replicate over the HA link like any message.

- **A half message** (message type TRANSACTION) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with
  its real topic and queue (``REAL_TOPIC`` / ``REAL_QID``), ``TRAN_MSG``, its producer group
  (``PGROUP``: in gRPC, the topic) and its transaction id (``__transactionId__``: the client's message
  id, which the send answers as ``transaction_id``). Consumers cannot see it.
- **EndTransaction** (the serving master, ``Transactions.end``): COMMIT writes the message to its topic
  and an op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0) **in one write**; ROLLBACK writes the op
  record only. An op record names the transaction and its resolution. A second EndTransaction with
  the same resolution (a retry whose first answer was lost, a forward given up for a new master) is
  answered OK and changes nothing; an unknown transaction, or one of another topic, is refused
  (INVALID_TRANSACTION_ID), nothing written.
- **The check** (``Transactions.check_once``, every ``transactionCheckInterval`` on the broker serving
  the set, brokers/transaction_check.py): a half message unresolved for ``transactionTimeOut`` is
  put back (a copy with ``TRANSACTION_CHECK_TIMES`` + 1) and handed to the caller, which has exactly
  one broker of the set ask a producer of the group; after ``transactionCheckMax`` checks it is
  discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` (with a DISCARD op record). The producer's answer
  (EndTransaction, source SERVER_CHECK) reaches the serving broker through any replica.
- **A new master** rebuilds the index from its own copy of the log: every half message, less those
  an op record resolved (``Transactions.load``).
- **An acting master** (RIP-32) cannot write its log: it counts its checks in memory and discards
  nothing, and keeps the resolutions it is sent (a commit goes to another master at once with
  escape, ``enableRemoteEscape``; without, the returning master stores it). The returning master
  takes them back at pre-online and records them before it checks anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from .core.timer import REAL_QID, REAL_TOPIC
from .core.transaction import (
    CHECK_TIMES,
    PGROUP,
    TRAN_MSG,
    TRANSACTION_ID,
    TXN_KEYS,
    CheckAction,
    Half,
    Resolution,
    TxnRefused,
    check_action,
    resolution_allowed,
)
from .store.message import Message
from .store.store import MessageStore, PutMessageStatus

log = logging.getLogger("brokers.transaction")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
READ_BATCH = 1024
RESOLVED_KEPT = 100_000  # resolved transactions remembered for idempotent answers
CHECK_BATCH = 256  # put-back copies written together by a check run
RESOLVE_BATCH = 256  # EndTransactions carried out together (one read of the log, one write)
RESOLVE_IN_FLIGHT = 4  # batches being written at once
KEPT_MAX = 100_000  # unresolved half messages kept in memory as read (a commit reads nothing back)
UNKNOWN_WAIT_S = 1.0  # an EndTransaction for a half message not readable yet waits this long for it
# Statuses of a write that is in this broker's log although it was not acknowledged (replicas or the
# disk did not answer in time): written again, a commit would be stored twice.
WRITTEN_UNCONFIRMED = frozenset(
    {PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE, PutMessageStatus.FLUSH_DISK_TIMEOUT}
)


class TxnNotStored(RuntimeError):
    """The resolution could not be written (not the master any more, no in-sync replica)."""

    def __init__(self, status: PutMessageStatus, detail: str):
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- the messages a transaction writes (its rules: brokers/core/transaction.py) ---------------------


def into_half(msg: Message, transaction_id: str) -> Message:
    """The half message kept until its transaction is resolved."""
    props = dict(msg.properties)
    props[REAL_TOPIC], props[REAL_QID] = msg.topic, str(msg.queue_id)
    # A remoting producer names its group (PGROUP), which its checks go to; a gRPC one has none: its
    # topic stands for it (brokers/grpc/producers.py keeps its streams by topic).
    props[TRAN_MSG], props[PGROUP], props[TRANSACTION_ID] = "true", props.get(PGROUP) or msg.topic, transaction_id
    return Message(HALF_TOPIC, 0, msg.body, props, flag=msg.flag, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp)


def committed(half: Message) -> Message:
    """The message a COMMIT writes to its topic (its id, body, properties and born time kept)."""
    props = {k: v for k, v in half.properties.items() if k not in TXN_KEYS}
    topic, qid = half.properties[REAL_TOPIC], int(half.properties[REAL_QID])
    return Message(topic, qid, half.body, props, flag=half.flag, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp)


def escaped_commit(half: Message) -> Message:
    """A committed message an acting master sends to another master (brokers/grpc/escape.py): it keeps
    ``__transactionId__``, which only brokers set, so the master it goes to stores it at once."""
    msg = committed(half)
    msg.properties = {**msg.properties, TRANSACTION_ID: half.properties[TRANSACTION_ID]}
    return msg


def discarded(half: Message) -> Message:
    return Message(
        DISCARD_TOPIC,
        0,
        half.body,
        dict(half.properties),
        flag=half.flag,
        sys_flag=half.sys_flag,
        born_timestamp=half.born_timestamp,
    )


def checked_copy(half: Message, times: int | None = None) -> Message:
    """The copy a check puts back, counting this check: ``TRANSACTION_CHECK_TIMES`` = ``times``
    (by default the half message's count + 1)."""
    props = dict(half.properties)
    props[CHECK_TIMES] = str(check_times(half) + 1 if times is None else times)
    return Message(HALF_TOPIC, 0, half.body, props, flag=half.flag, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp)


def check_times(half: Message) -> int:
    try:
        return int(half.properties.get(CHECK_TIMES, "0"))
    except ValueError:
        return 0


def op_record(transaction_id: str, resolution: Resolution, half_offset: int) -> Message:
    body = json.dumps({"txn": transaction_id, "r": resolution.value, "half": half_offset}, separators=(",", ":")).encode()
    return Message(OP_TOPIC, 0, body, {"TAGS": "d"})


def parse_op(m: Message) -> tuple[str, Resolution] | None:
    try:
        raw = json.loads(m.body)
        return str(raw["txn"]), Resolution(raw["r"])
    except (ValueError, KeyError, TypeError):
        return None


def half_of(m: Message) -> tuple[str, Half] | None:
    props = m.properties
    txn = props.get(TRANSACTION_ID)
    if not txn or REAL_TOPIC not in props:
        return None
    return txn, Half(m.queue_offset, props[REAL_TOPIC], m.store_timestamp, check_times(m))


@dataclass(frozen=True)
class CheckRun:
    """What one check run did: the half messages to ask their producers about (each once, carrying
    its ``TRANSACTION_CHECK_TIMES``), and how many transactions it discarded."""

    asked: tuple[Message, ...]
    discarded: int


# --- the serving master -----------------------------------------------------------------------------


Escape = Callable[[list[Message]], Awaitable[list[str | None]]]


@dataclass
class _Asked:
    transaction_id: str
    topic: str
    resolution: Resolution
    done: asyncio.Future


class Transactions:
    """The index of unresolved transactions and their resolution; used while this broker is the
    serving master (``load`` on each takeover), or acts for a dead one (``act``): then nothing is
    written here. Its resolutions stay here (``acting_ops``; a commit goes to another master with
    escape, else it waits in ``acting_unsent``) until the returning master takes them back
    (``adopt``) and records them in its log; its checks are counted in memory (``acting_checks``)."""

    def __init__(self, store: MessageStore, timeout_ms: int, check_max: int):
        self.store = store
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.pending: dict[str, Half] = {}
        self.resolved: OrderedDict[str, Resolution] = OrderedDict()
        self._half_cursor = 0
        self._op_cursor = 0
        self._busy: dict[str, asyncio.Future] = {}  # transactions being resolved: the outcome of each
        self._asked: list[_Asked] = []  # the next batch
        self._resolver: asyncio.Future | None = None
        self._in_flight = asyncio.Semaphore(RESOLVE_IN_FLIGHT)
        self._reading = asyncio.Lock()  # one reader of the log at a time (the index is shared)
        self._kept: dict[int, Message] = {}  # half-queue offset -> the half message, while unresolved
        # resolutions written to this log but not acknowledged: never written again here; resolved
        # once their op record is readable (replicated), or forgotten when the index is rebuilt
        self.unconfirmed: dict[str, Resolution] = {}
        self.loaded = False
        self.acting = False
        self.escape: Escape | None = None
        self.acting_ops: dict[str, Resolution] = {}  # resolved while acting (not in any log yet)
        self.acting_unsent: set[str] = set()  # of those, commits not escaped: the returning master stores them
        self.acting_checks: dict[str, Half] = {}  # checked while acting: the latest count and time
        self.adopted: dict[str, Resolution] = {}  # an acting master's, taken back at pre-online
        self.adopted_unsent: set[str] = set()  # of those, the commits this master stores the message of

    def act(self, acting: bool, escape: Escape | None = None) -> None:
        """This broker starts (or stops) acting for its set's dead master: resolutions are kept here
        (a commit sent with ``escape`` when given), checks counted in memory. The index is rebuilt from
        this log at its next use."""
        self.acting, self.escape, self.loaded = acting, escape if acting else None, False
        self.acting_checks.clear()

    def reload(self) -> None:
        """Rebuild the index from this broker's log at its next use (a takeover, serving again: the
        log may hold what another broker wrote meanwhile)."""
        self.loaded = False

    def adopt(self, resolutions: dict[str, Resolution], unsent: set[str]) -> None:
        """Pre-online: what the acting master resolved (``unsent``: commits it sent nowhere), recorded
        at this master's next load, before anything is checked."""
        self.adopted.update(resolutions)
        self.adopted_unsent |= unsent & resolutions.keys()

    def handed_back(self) -> tuple[dict[str, Resolution], set[str]]:
        """What this broker resolved while acting, for its returning master (request 10060)."""
        return dict(self.acting_ops), self.acting_unsent & self.acting_ops.keys()

    async def load(self) -> None:
        """Rebuild from this broker's log: every half message, less those an op record resolved
        (once, however many calls wait for it); then record what an acting master resolved while
        this broker was away (taken back at pre-online) before anything is checked."""
        async with self._reading:
            if self.loaded:
                return
            self.pending.clear()
            self.resolved.clear()
            self._kept.clear()
            self.unconfirmed.clear()
            self._half_cursor = self._op_cursor = 0
            await self.store.settled()
            await self._read_new()
            if self.acting:  # what it resolved is in no log, and stays resolved
                for txn, r in self.acting_ops.items():
                    self._remember(txn, r)
            else:
                await self._record_adopted()
            self.loaded = True
        log.info("transactions: %d unresolved, %d resolved in the log", len(self.pending), len(self.resolved))

    async def _record_adopted(self) -> None:
        """Write what the acting master resolved and this log does not have yet: an op record each,
        with the message of a commit it sent nowhere."""
        taken = [(txn, r) for txn, r in self.adopted.items() if txn not in self.resolved]
        writes: list[Message] = []
        recorded: list[tuple[str, Resolution]] = []
        for txn, r in taken:
            half = self.pending.get(txn)
            if r is Resolution.COMMIT and txn in self.adopted_unsent:
                stored = await self._stored_half(half.offset) if half is not None else None
                if stored is None:
                    log.warning("transaction %s committed by the acting master: its half message is not in this log", txn)
                    continue
                writes.append(committed(stored))
            writes.append(op_record(txn, r, half.offset if half is not None else -1))
            recorded.append((txn, r))
        if writes:
            await self._write(writes)
        for txn, r in recorded:
            self._remember(txn, r)
        if recorded:
            log.info("transactions: %d resolved by the acting master recorded", len(recorded))
        self.adopted.clear()
        self.adopted_unsent.clear()

    async def _stored_half(self, offset: int) -> Message | None:
        """The half message (or its latest copy) at ``offset`` of the half queue."""
        kept = self._kept.get(offset)
        stored = [kept] if kept is not None else await self.store.get_messages(HALF_TOPIC, 0, offset, 1)
        return stored[0] if stored and stored[0].queue_offset == offset else None

    async def _catch_up(self) -> None:
        """Read what the log got since the last read (one reader at a time: the others find it read)."""
        if not self.loaded:
            await self.load()
        async with self._reading:
            await self._read_new()

    async def _read_new(self) -> None:
        self._half_cursor = await self._read(HALF_TOPIC, self._half_cursor, self._take_half)
        self._op_cursor = await self._read(OP_TOPIC, self._op_cursor, self._take_op)

    async def _read(self, topic: str, cursor: int, take: Callable[[Message], None]) -> int:
        while True:
            end = self.store.max_queue_offset(topic, 0)
            if cursor >= end:
                return cursor
            batch = await self.store.get_messages(topic, 0, cursor, READ_BATCH)
            if not batch:
                cursor = min(end, cursor + READ_BATCH)
                continue
            for m in batch:
                take(m)
            cursor = batch[-1].queue_offset + 1

    def _take_half(self, m: Message) -> None:
        found = half_of(m)
        if found is not None and found[0] not in self.resolved:
            before = self.pending.get(found[0])
            if before is not None:  # a check's copy replaces it
                self._kept.pop(before.offset, None)
            self.pending[found[0]] = found[1]
            if len(self._kept) < KEPT_MAX:
                self._kept[found[1].offset] = m

    def _take_op(self, m: Message) -> None:
        op = parse_op(m)
        if op is not None:
            self._remember(*op)

    def _remember(self, txn: str, resolution: Resolution) -> None:
        self.unconfirmed.pop(txn, None)
        self.acting_checks.pop(txn, None)
        half = self.pending.pop(txn, None)
        if half is not None:
            self._kept.pop(half.offset, None)
        self.resolved[txn] = resolution
        self.resolved.move_to_end(txn)
        while len(self.resolved) > RESOLVED_KEPT:
            self.resolved.popitem(last=False)

    async def end(self, transaction_id: str, topic: str, resolution: Resolution) -> None:
        """Carry out an EndTransaction. TxnRefused (nothing written) or TxnNotStored. One at a time
        per transaction (a client's, a forwarded copy's, a producer's answer to a check and its retry),
        and carried through even when its caller goes away (a forward given up, a client's deadline):
        a write cut off half way could not tell whether it was stored. Those asked while a batch is
        being written are carried out together, as the next batch (one read of the log, one write)."""
        while (busy := self._busy.get(transaction_id)) is not None:  # the same one under way: its outcome first
            try:
                await asyncio.shield(busy)
            except (TxnRefused, TxnNotStored):
                pass  # answered to its own caller; this one looks again
        if self.loaded and transaction_id in self.resolved:  # known here: answered without a write
            resolution_allowed(None, self.resolved[transaction_id], topic, resolution)
            return
        done = asyncio.get_running_loop().create_future()
        self._busy[transaction_id] = done
        done.add_done_callback(lambda fut: self._finished(transaction_id, fut))
        self._asked.append(_Asked(transaction_id, topic, resolution, done))
        if self._resolver is None or self._resolver.done():
            self._resolver = asyncio.ensure_future(self._resolve_asked())
        await asyncio.shield(done)

    def _finished(self, transaction_id: str, done: asyncio.Future) -> None:
        if self._busy.get(transaction_id) is done:
            del self._busy[transaction_id]
        if not done.cancelled():
            done.exception()  # read, also when its caller went away

    async def _resolve_asked(self) -> None:
        """Takes what was asked in batches, up to RESOLVE_IN_FLIGHT of them written at once (the
        store writes them in order; a transaction is in one batch at a time)."""
        while self._asked:
            await self._in_flight.acquire()
            batch, self._asked = self._asked[:RESOLVE_BATCH], self._asked[RESOLVE_BATCH:]
            task = asyncio.ensure_future(self._resolve_batch(batch))
            task.add_done_callback(lambda _: self._in_flight.release())

    async def _resolve_batch(self, batch: list[_Asked], waited: bool = False) -> None:
        try:
            await self._resolve(batch, waited)
        except BaseException as exc:  # every caller gets an answer, whatever went wrong
            for asked in batch:
                if not asked.done.done():
                    asked.done.set_exception(TxnNotStored(PutMessageStatus.UNKNOWN_ERROR, f"not resolved: {exc!r}"))
            if not isinstance(exc, Exception):
                raise

    async def _resolve(self, batch: list[_Asked], waited: bool = False) -> None:
        """Carry out ``batch`` (distinct transactions): each asked of a transaction not readable yet
        (its send may be answered before its queue entry is readable) waits for it on its own."""
        await self._catch_up()
        todo: list[tuple[_Asked, Message]] = []
        for asked in batch:
            txn = asked.transaction_id
            if not waited and txn not in self.pending and txn not in self.resolved:
                asyncio.ensure_future(self._resolve_unknown(asked))
                continue
            try:
                half = await self._half_to_resolve(asked)
            except (TxnRefused, TxnNotStored) as exc:
                asked.done.set_exception(exc)
                continue
            if half is None:
                asked.done.set_result(None)
            else:
                todo.append((asked, half))
        if not todo:
            return
        if self.acting:  # for a dead master: kept here, nothing written
            for asked, half in todo:
                try:
                    await self._keep(asked, half)
                except TxnNotStored as exc:
                    asked.done.set_exception(exc)
                else:
                    asked.done.set_result(None)
            return
        writes: list[Message] = []
        for asked, half in todo:
            if asked.resolution is Resolution.COMMIT:
                writes.append(committed(half))
            writes.append(op_record(asked.transaction_id, asked.resolution, half.queue_offset))
        results = iter(await self.store.put_messages(writes))
        for asked, _ in todo:
            mine = [next(results)] + ([next(results)] if asked.resolution is Resolution.COMMIT else [])
            bad = next((r for r in mine if r.status is not PutMessageStatus.PUT_OK), None)
            if bad is None:
                self._remember(asked.transaction_id, asked.resolution)
                asked.done.set_result(None)
                continue
            if bad.status in WRITTEN_UNCONFIRMED:
                self.unconfirmed[asked.transaction_id] = asked.resolution
            asked.done.set_exception(TxnNotStored(bad.status, bad.detail))

    async def _resolve_unknown(self, asked: _Asked) -> None:
        deadline = time.monotonic() + UNKNOWN_WAIT_S
        txn = asked.transaction_id
        with contextlib.suppress(Exception):  # a read that fails here fails again, answered, below
            while txn not in self.pending and txn not in self.resolved and time.monotonic() < deadline:
                await self.store.wait_published(0.05)
                await self._catch_up()
        await self._resolve_batch([asked], waited=True)

    async def _half_to_resolve(self, asked: _Asked) -> Message | None:
        """The half message ``asked`` resolves, or None when it was resolved alike before (nothing to
        do); TxnRefused or TxnNotStored."""
        txn, resolution = asked.transaction_id, asked.resolution
        written = self.unconfirmed.get(txn)
        if written is not None and txn not in self.resolved:
            if written is not resolution:
                raise TxnRefused(f"the transaction was resolved before ({written.value}), not {resolution.value}")
            raise TxnNotStored(PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "written, not yet on the replicas: ask again")
        if not resolution_allowed(self.pending.get(txn), self.resolved.get(txn), asked.topic, resolution):
            return None
        offset = self.pending[txn].offset
        stored = await self._stored_half(offset)
        if stored is None:
            raise TxnNotStored(PutMessageStatus.UNKNOWN_ERROR, f"half message {offset} is not in the log")
        return stored

    async def _keep(self, asked: _Asked, half: Message) -> None:
        """An acting master's resolution: a commit goes to another master with escape, or waits for
        the returning master (``acting_unsent``); either is handed back at pre-online."""
        txn = asked.transaction_id
        if asked.resolution is Resolution.COMMIT:
            if self.escape is not None:
                why = (await self.escape([escaped_commit(half)]))[0]
                if why is not None:
                    raise TxnNotStored(PutMessageStatus.UNKNOWN_ERROR, why)
            else:
                self.acting_unsent.add(txn)
        self.acting_ops[txn] = asked.resolution
        self._remember(txn, asked.resolution)

    async def _write(self, messages: list[Message]) -> None:
        results = await self.store.put_messages(messages)
        bad = next((r for r in results if r.status is not PutMessageStatus.PUT_OK), None)
        if bad is not None:
            raise TxnNotStored(bad.status, bad.detail)

    async def check_once(self) -> CheckRun:
        """One check run: every transaction unresolved for ``timeout_ms`` is to be asked about once
        more, and those checked ``check_max`` times are discarded. The master puts a copy of each back
        (written in batches of CHECK_BATCH); an acting master writes nothing and counts its checks in
        memory (it discards nothing: its master will)."""
        await self._catch_up()
        now = now_ms()
        due = []
        for txn, half in list(self.pending.items()):
            seen = self.acting_checks.get(txn) if self.acting else None
            if seen is not None and seen.checks > half.checks:  # asked here since the log's last copy
                half = seen
            action = check_action(half, now, self.timeout_ms, self.check_max, acting=self.acting)
            if action is not None:
                due.append((txn, half, action))
        asked: list[Message] = []
        discarded_n = 0
        for start in range(0, len(due), CHECK_BATCH):
            writes: list[Message] = []
            dropped: list[str] = []
            batch_asked: list[Message] = []
            for txn, half, action in due[start : start + CHECK_BATCH]:
                if txn in self._busy or txn not in self.pending or txn in self.unconfirmed:
                    continue  # being resolved right now, or resolved and not replicated yet
                stored = await self._stored_half(self.pending[txn].offset)
                if stored is None:
                    continue
                if action is CheckAction.DISCARD:
                    writes += [discarded(stored), op_record(txn, Resolution.DISCARD, half.offset)]
                    dropped.append(txn)
                    continue
                copy = checked_copy(stored, half.checks + 1)
                batch_asked.append(replace(stored, properties=copy.properties))  # as stored, counting this check
                if self.acting:
                    self.acting_checks[txn] = Half(half.offset, half.topic, now, half.checks + 1)
                else:
                    writes.append(copy)
            if writes:
                await self._write(writes)
            asked += batch_asked
            for txn in dropped:
                self._remember(txn, Resolution.DISCARD)
            discarded_n += len(dropped)
        await self._catch_up()  # the copies just written are the ones now waiting
        if discarded_n:
            log.warning("%d transactions discarded to %s after %d checks", discarded_n, DISCARD_TOPIC, self.check_max)
        return CheckRun(tuple(asked), discarded_n)
