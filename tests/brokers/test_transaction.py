"""Transactional messages (brokers/transaction.py; its rules in brokers/core/transaction.py): the rules
table-tested (half message in and out, op records, which EndTransaction is carried out, refused or
answered with nothing to do, when a check puts a copy back or discards), then the index on a real
store: commit and rollback are one write each and idempotent, a new master rebuilds what is
unresolved from the log, the check puts copies back, asks about each transaction once per run and
discards after transactionCheckMax; an acting master checks without writing and keeps its
resolutions, which the returning master records."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from brokers.core.transaction import (
    CHECK_TIMES,
    PGROUP,
    TRANSACTION_ID,
    Half,
    Resolution,
    TxnRefused,
    check_action,
    resolution_allowed,
)
from brokers.store.message import Message
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig
from brokers.transaction import (
    DISCARD_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    CheckRun,
    Transactions,
    TxnNotStored,
    check_times,
    checked_copy,
    committed,
    half_of,
    into_half,
    op_record,
    parse_op,
)

pytestmark = pytest.mark.unit

HALF = Half(offset=3, topic="Pay", stored_ms=1_000, checks=0)


def test_a_half_message_keeps_its_topic_and_queue_and_commits_back_to_them():
    msg = Message("Pay", 2, b"body", {"UNIQ_KEY": "m1", "TAGS": "t", "k": "v"}, born_timestamp=5)
    half = into_half(msg, "m1")
    assert (half.topic, half.queue_id) == (HALF_TOPIC, 0)
    assert half.properties[TRANSACTION_ID] == "m1" and half.properties[PGROUP] == "Pay"
    back = committed(half)
    assert (back.topic, back.queue_id, back.body, back.born_timestamp) == ("Pay", 2, b"body", 5)
    assert dict(back.properties) == {"UNIQ_KEY": "m1", "TAGS": "t", "k": "v"}
    copy = checked_copy(checked_copy(half))
    assert check_times(copy) == 2 and copy.properties[CHECK_TIMES] == "2" and copy.topic == HALF_TOPIC
    assert half_of(msg) is None  # not a half message


def test_an_op_record_names_its_transaction_and_resolution():
    assert parse_op(op_record("m1", Resolution.COMMIT, 3)) == ("m1", Resolution.COMMIT)
    assert parse_op(Message(OP_TOPIC, 0, b"not json", {})) is None
    assert parse_op(Message(OP_TOPIC, 0, b'{"txn":"m1","r":"MAYBE"}', {})) is None


@pytest.mark.parametrize(
    "known, done, topic, asked, want",
    [
        (HALF, None, "Pay", Resolution.COMMIT, True),
        (HALF, None, "Pay", Resolution.ROLLBACK, True),
        (None, Resolution.COMMIT, "Pay", Resolution.COMMIT, False),  # a retry: OK, nothing to do
        (None, Resolution.COMMIT, "Pay", Resolution.ROLLBACK, "resolved before"),
        (None, None, "Pay", Resolution.COMMIT, "no such transaction"),
        (HALF, None, "Other", Resolution.COMMIT, "belongs to topic Pay"),
    ],
)
def test_which_end_transaction_is_carried_out(known, done, topic, asked, want):
    if isinstance(want, str):
        with pytest.raises(TxnRefused, match=want):
            resolution_allowed(known, done, topic, asked)
    else:
        assert resolution_allowed(known, done, topic, asked) is want


@pytest.mark.parametrize(
    "checks, now, acting, want",
    [
        (0, 1_500, False, None),
        (0, 7_000, False, "check"),
        (14, 7_000, False, "check"),
        (15, 7_000, False, "discard"),
        (14, 7_000, True, "check"),
        (15, 7_000, True, None),  # an acting master cannot write the discard: its master will
    ],
)
def test_a_check_waits_for_the_timeout_and_discards_after_the_maximum(checks, now, acting, want):
    half = Half(offset=3, topic="Pay", stored_ms=1_000, checks=checks)
    assert check_action(half, now, timeout_ms=6_000, check_max=15, acting=acting) == want


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def messages(store: MessageStore, topic: str) -> list[Message]:
    return await store.get_messages(topic, 0, 0, 1000)


def half_message(i: int) -> Message:
    return into_half(Message("Pay", i % 2, f"b{i}".encode(), {"UNIQ_KEY": f"m{i}"}), f"m{i}")


def test_commit_and_rollback_are_written_once_and_a_new_master_sees_what_is_left(tmp_path):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            assert all(r.status is PutMessageStatus.PUT_OK for r in await store.put_messages([half_message(i) for i in range(4)]))
            master = Transactions(store, timeout_ms=6_000, check_max=15)
            await master.end("m0", "Pay", Resolution.COMMIT)
            await master.end("m0", "Pay", Resolution.COMMIT)  # a retry: nothing more written
            await master.end("m1", "Pay", Resolution.ROLLBACK)
            with pytest.raises(TxnRefused):
                await master.end("m1", "Pay", Resolution.COMMIT)
            with pytest.raises(TxnRefused):
                await master.end("m2", "Other", Resolution.COMMIT)  # another topic's
            with pytest.raises(TxnRefused):
                await master.end("nope", "Pay", Resolution.COMMIT)
            assert [m.body for m in await store.get_messages("Pay", 0, 0, 10)] == [b"b0"]
            assert await store.get_messages("Pay", 1, 0, 10) == []
            assert [parse_op(m) for m in await messages(store, OP_TOPIC)] == [
                ("m0", Resolution.COMMIT),
                ("m1", Resolution.ROLLBACK),
            ]

            again = Transactions(store, timeout_ms=6_000, check_max=15)  # a new master, same log
            await again.load()
            assert set(again.pending) == {"m2", "m3"} and again.resolved == {"m0": Resolution.COMMIT, "m1": Resolution.ROLLBACK}
            await again.end("m0", "Pay", Resolution.COMMIT)  # forwarded twice across the takeover: still once
            assert len(await store.get_messages("Pay", 0, 0, 10)) == 1
        finally:
            await store.shutdown()

    run(scenario())


def test_a_check_puts_copies_back_for_the_producers_and_discards_after_the_maximum(tmp_path):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            await store.put_messages([half_message(i) for i in range(2)])
            master = Transactions(store, timeout_ms=0, check_max=2)
            run = await master.check_once()
            assert run.discarded == 0
            assert sorted((h.properties[PGROUP], h.properties[TRANSACTION_ID], check_times(h)) for h in run.asked) == [
                ("Pay", "m0", 1),
                ("Pay", "m1", 1),
            ]
            copies = (await messages(store, HALF_TOPIC))[2:]
            assert sorted((m.properties[TRANSACTION_ID], check_times(m)) for m in copies) == [("m0", 1), ("m1", 1)]
            await master.end("m0", "Pay", Resolution.COMMIT)  # the producer answered for m0
            run = await master.check_once()
            assert [(h.properties[TRANSACTION_ID], check_times(h)) for h in run.asked] == [("m1", 2)]
            run = await master.check_once()
            assert (run.asked, run.discarded) == ((), 1)  # m1: asked twice, no answer
            discarded = await messages(store, DISCARD_TOPIC)
            assert [m.properties[TRANSACTION_ID] for m in discarded] == ["m1"]
            assert master.pending == {} and master.resolved["m1"] is Resolution.DISCARD
            assert len(await store.get_messages("Pay", 0, 0, 10)) == 1  # m0 committed once; m1 never
            assert await store.get_messages("Pay", 1, 0, 10) == []
        finally:
            await store.shutdown()

    run(scenario())


def test_an_acting_master_s_resolutions_survive_a_rebuild_of_its_index_and_escape_once(tmp_path):
    """An acting slave's index is rebuilt from its log whenever it is marked stale (when it starts or
    stops acting, brokers/broker.py): what it resolved by escape is in no log, and a retried commit
    must not be sent to another master again."""

    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            await store.put_messages([half_message(i) for i in range(3)])
            escaped: list[str] = []

            async def escape(out: list[Message]) -> list[str | None]:
                escaped.extend(m.properties[TRANSACTION_ID] for m in out)
                return [None] * len(out)

            acting = Transactions(store, timeout_ms=6_000, check_max=15)
            acting.act(True, escape)
            await acting.end("m0", "Pay", Resolution.COMMIT)
            await acting.end("m1", "Pay", Resolution.ROLLBACK)
            acting.loaded = False  # marked stale: rebuilt at its next use
            await acting.end("m0", "Pay", Resolution.COMMIT)  # the client's retry
            with pytest.raises(TxnRefused):
                await acting.end("m1", "Pay", Resolution.COMMIT)
            assert escaped == ["m0"] and set(acting.pending) == {"m2"}
            assert acting.acting_ops == {"m0": Resolution.COMMIT, "m1": Resolution.ROLLBACK}
            assert await messages(store, OP_TOPIC) == []  # nothing written to the acting slave's log
        finally:
            await store.shutdown()

    run(scenario())


@contextlib.asynccontextmanager
async def serving_master(tmp_path, halves: int):
    """A store holding ``halves`` half messages (m0, m1, ...) and a master's index of them."""
    store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
    await store.start()
    try:
        await store.put_messages([half_message(i) for i in range(halves)])
        master = Transactions(store, timeout_ms=6_000, check_max=15)
        await master.load()
        yield store, master
    finally:
        await store.shutdown()


def test_end_transactions_asked_together_are_one_write_and_each_gets_its_own_answer(tmp_path):
    async def scenario():
        async with serving_master(tmp_path, halves=30) as (store, master):
            batches = store.stats["batches"]
            asked = [("m0", "Pay", Resolution.COMMIT)]  # asked twice at once: carried out once
            asked += [(f"m{i}", "Pay", Resolution.COMMIT) for i in range(20)]
            asked += [(f"m{i}", "Pay", Resolution.ROLLBACK) for i in range(20, 29)]
            asked += [("m29", "Other", Resolution.COMMIT), ("nope", "Pay", Resolution.ROLLBACK)]
            answers = await asyncio.gather(*(master.end(*a) for a in asked), return_exceptions=True)
            refused = [a[0] for a, answer in zip(asked, answers, strict=True) if isinstance(answer, TxnRefused)]
            assert refused == ["m29", "nope"] and all(answer is None for answer in answers[:-2])
            assert store.stats["batches"] == batches + 1  # 20 commits and 29 op records: one write
            ops = [parse_op(m) for m in await messages(store, OP_TOPIC)]
            assert sorted(ops) == sorted(
                [(f"m{i}", Resolution.COMMIT) for i in range(20)] + [(f"m{i}", Resolution.ROLLBACK) for i in range(20, 29)]
            )
            stored = [m.body for q in (0, 1) for m in await store.get_messages("Pay", q, 0, 100)]
            assert sorted(stored) == sorted(f"b{i}".encode() for i in range(20))  # each commit once; no rollback
            assert set(master.pending) == {"m29"}

    run(scenario())


class _NoReplicaAnswers:
    """A ReplicaGate whose replicas never ack in time (the store's quorum protocol, with no HA link)."""

    def precheck(self):
        return None, 2

    async def wait(self, next_offset, need_acks):
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT


def test_a_resolution_written_but_not_acknowledged_is_never_written_again_by_this_master(tmp_path):
    async def scenario():
        async with serving_master(tmp_path, halves=3) as (store, master):
            store.replicas = _NoReplicaAnswers()
            store.set_follow_max(False)  # entries readable only once the replicas confirm them
            answers = await asyncio.gather(
                *(master.end(f"m{i}", "Pay", r) for i, r in enumerate([Resolution.COMMIT, Resolution.ROLLBACK])),
                return_exceptions=True,
            )
            assert [a.status for a in answers] == [PutMessageStatus.FLUSH_SLAVE_TIMEOUT] * 2  # written, not acked
            store.replicas = None
            with pytest.raises(TxnNotStored):
                await master.end("m0", "Pay", Resolution.COMMIT)  # asked again: not written twice
            with pytest.raises(TxnRefused):
                await master.end("m1", "Pay", Resolution.COMMIT)  # the other resolution: refused
            await master.end("m2", "Pay", Resolution.COMMIT)  # the batch after is not held back
            store.set_follow_max(True)  # the replicas caught up: what was written is readable
            await store.wait_published(1.0)
            await master.end("m0", "Pay", Resolution.COMMIT)  # now answered OK, nothing written
            assert sorted([m.body for q in (0, 1) for m in await store.get_messages("Pay", q, 0, 10)]) == [b"b0", b"b2"]
            again = Transactions(store, timeout_ms=6_000, check_max=15)  # a new master reads what was written
            await again.load()
            assert again.resolved == {"m0": Resolution.COMMIT, "m1": Resolution.ROLLBACK, "m2": Resolution.COMMIT}

    run(scenario())


def test_an_acting_master_asks_once_per_run_writes_nothing_and_leaves_the_discard_to_its_master(tmp_path):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            await store.put_messages([half_message(i) for i in range(2)])
            before = store.max_offset
            acting = Transactions(store, timeout_ms=0, check_max=2)
            acting.act(True)
            for times in (1, 2):
                run = await acting.check_once()
                assert sorted((h.properties[TRANSACTION_ID], check_times(h)) for h in run.asked) == [("m0", times), ("m1", times)]
                acting.loaded = False  # a rebuild of the index keeps the count
            await acting.end("m0", "Pay", Resolution.ROLLBACK)
            assert await acting.check_once() == CheckRun((), 0)  # m1 asked twice: its master discards it
            assert store.max_offset == before  # nothing written to the acting slave's log
        finally:
            await store.shutdown()

    run(scenario())


def test_an_acting_master_keeps_its_resolutions_and_the_returning_master_stores_them_before_it_checks(tmp_path):
    """Without escape: the acting slave answers EndTransaction and keeps the resolution; its master,
    back, takes them (request 10060) and writes each commit's message and op record once."""

    async def scenario():
        master_store = MessageStore(StoreConfig(tmp_path / "master", mapped_file_size_commit_log=1 << 20))
        slave_store = MessageStore(StoreConfig(tmp_path / "slave", mapped_file_size_commit_log=1 << 20))
        await master_store.start()
        await slave_store.start()
        try:
            for store in (master_store, slave_store):  # the half messages replicated
                await store.put_messages([half_message(i) for i in range(4)])
            acting = Transactions(slave_store, timeout_ms=0, check_max=15)
            acting.act(True)
            await acting.end("m0", "Pay", Resolution.COMMIT)
            await acting.end("m1", "Pay", Resolution.ROLLBACK)
            await acting.end("m0", "Pay", Resolution.COMMIT)  # a retry: kept once
            run = await acting.check_once()
            assert sorted(h.properties[TRANSACTION_ID] for h in run.asked) == ["m2", "m3"]  # never a resolved one
            assert await messages(slave_store, OP_TOPIC) == [] and await messages(slave_store, "Pay") == []
            acting.act(False)  # handing back at pre-online stops it acting
            resolutions, unsent = acting.handed_back()
            assert resolutions == {"m0": Resolution.COMMIT, "m1": Resolution.ROLLBACK} and unsent == {"m0"}

            master = Transactions(master_store, timeout_ms=0, check_max=15)
            master.adopt(resolutions, unsent)
            run = await master.check_once()  # loads first: what was handed back is recorded
            assert sorted(h.properties[TRANSACTION_ID] for h in run.asked) == ["m2", "m3"]
            assert [m.body for m in await master_store.get_messages("Pay", 0, 0, 10)] == [b"b0"]  # m0, once
            assert await master_store.get_messages("Pay", 1, 0, 10) == []  # m1 rolled back
            assert sorted(parse_op(m) for m in await messages(master_store, OP_TOPIC)) == [
                ("m0", Resolution.COMMIT),
                ("m1", Resolution.ROLLBACK),
            ]
            again = Transactions(master_store, timeout_ms=0, check_max=15)  # a later takeover reads it back
            await again.load()
            assert set(again.pending) == {"m2", "m3"}
        finally:
            await master_store.shutdown()
            await slave_store.shutdown()

    run(scenario())
