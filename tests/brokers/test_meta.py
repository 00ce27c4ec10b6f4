"""Consumer metadata records (brokers/meta.py, brokers/metalog.py): a replica that applies a
master's records holds the master's state; a record with a bad or older DataVersion, for an unknown
group, or malformed, is refused with a log line and changes nothing; pre-online adopts a peer's
state only when it is not older; a follower whose log was cut waits for a snapshot."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from types import SimpleNamespace

import pytest

from brokers.consuming import ConsumeService, NotStored
from brokers.core.roles import BrokerRole
from brokers.ha.gate import WritePermission
from brokers.meta import META_TOPIC, ConsumerMeta, MetaRejected
from brokers.metalog import MetaLog, MetaMode
from brokers.static import StaticQueues
from brokers.store.message import Message
from brokers.store.offsets import DataVersion
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig
from brokers.topics import TopicConfig, TopicConfigManager

pytestmark = pytest.mark.unit


def meta_at(root) -> ConsumerMeta:
    return ConsumerMeta(root / "consumerOffset.json", TopicConfigManager(root / "topics.json"))


def state(meta: ConsumerMeta) -> dict:
    return {"pop": meta.pop.to_wire(), "groups": sorted(meta.groups), "dv": meta.data_version}


def master_changes(meta: ConsumerMeta) -> list[dict]:
    """What a master does while serving, as the records it writes."""
    records = [meta.record("group", group="g")]
    meta.groups.add("g")
    handles = meta.pop.pop("g", "T", 0, [0, 1, 2, 3], [1, 1, 1, 1], 30_000)
    q = meta.pop.queue("g", "T", 0)
    records.append(
        meta.record(
            "pop",
            group="g",
            topic="T",
            queueId=0,
            entries=[[h.offset, q.in_flight[h.offset].deadline_ms, 1, h.nonce] for h in handles],
            skipped=[4],
        )
    )
    meta.pop.finish("g", "T", 0, [4])
    meta.pop.ack(handles[0])
    meta.pop.ack(handles[2])
    records.append(meta.record("finish", group="g", topic="T", queueId=0, offsets=[0, 2]))
    new = meta.pop.change_invisible(handles[1], 60_000)
    records.append(
        meta.record(
            "invisible", group="g", topic="T", queueId=0, offset=1, deadlineMs=q.in_flight[1].deadline_ms, nonce=new.nonce
        )
    )
    meta.bump(3)
    records.append(meta.record("reset", group="g", topic="T", queueId=1, offset=7))
    meta.pop.queue("g", "T", 1).reset(7)
    records.append(meta.record("topic", topicConfig={"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}))
    meta.topics.update(TopicConfig("T", 2, 2, 6))
    return records


def test_a_replica_applying_the_records_holds_the_masters_state(tmp_path):
    (tmp_path / "m").mkdir(), (tmp_path / "r").mkdir()
    master, replica = meta_at(tmp_path / "m"), meta_at(tmp_path / "r")
    records = master_changes(master)
    for r in records:
        replica.apply(json.loads(json.dumps(r)))
    assert state(replica) == state(master)
    assert replica.topics.topics["T"] == TopicConfig("T", 2, 2, 6)
    q = replica.pop.queue("g", "T", 0)
    assert (q.acked_below, q.pop_offset, sorted(q.in_flight)) == (1, 5, [1, 3])


@pytest.mark.parametrize(
    "mutate, why",
    [
        (lambda r: r.update(dataVersion={"stateVersion": -1, "counter": 0, "timestamp": 0}), "bad DataVersion"),
        (lambda r: r.update(dataVersion="1.2.3"), "bad DataVersion"),
        (lambda r: r["dataVersion"].update(counter=True), "bad DataVersion"),
        (lambda r: r.update(dataVersion={"stateVersion": 0, "counter": 0, "timestamp": 0}), "stale"),
        (lambda r: r.update(group="nobody"), "unknown consumer group"),
        (lambda r: r.update(queueId=70000), "queueId"),
        (lambda r: r.update(kind="drop_table"), "unknown record kind"),
        (lambda r: r.update(offsets=[5, "six"]), "bad finish record"),
        (lambda r: r.update(offsets=[5, -6]), "bad finish record"),
    ],
)
def test_a_bad_record_is_refused_and_changes_nothing(tmp_path, mutate, why):
    (tmp_path / "m").mkdir(), (tmp_path / "r").mkdir()
    master, replica = meta_at(tmp_path / "m"), meta_at(tmp_path / "r")
    records = master_changes(master)
    for r in records[:5]:  # the last at DataVersion (3, 1, ...)
        replica.apply(r)
    before = copy.deepcopy(state(replica))
    bad = copy.deepcopy(records[2])  # a finish record at the master's DataVersion
    bad["dataVersion"] = {"stateVersion": 3, "counter": 9, "timestamp": 1}
    bad["offsets"] = [1]
    mutate(bad)
    with pytest.raises(MetaRejected, match=why):
        replica.apply(bad)
    assert state(replica) == before


def test_pre_online_adopts_a_peer_state_only_when_it_is_not_older(tmp_path):
    (tmp_path / "m").mkdir(), (tmp_path / "r").mkdir()
    master, peer = meta_at(tmp_path / "m"), meta_at(tmp_path / "r")
    master_changes(master)  # DataVersion (3, 1, ...)
    newer = master.snapshot()
    newer["dataVersion"] = {"stateVersion": 3, "counter": 2, "timestamp": 0}
    assert peer.adopt_if_newer(newer) and state(peer)["pop"] == state(master)["pop"]
    older = peer.snapshot()
    older["dataVersion"] = {"stateVersion": 3, "counter": 1, "timestamp": 0}
    older["popTable"] = {}
    assert not peer.adopt_if_newer(older) and state(peer)["pop"] == state(master)["pop"]
    with pytest.raises(MetaRejected):
        peer.adopt_if_newer({"kind": "snapshot", "dataVersion": {"stateVersion": 9, "counter": 0, "timestamp": 0}})
    assert state(peer)["pop"] == state(master)["pop"]


def test_state_survives_a_restart(tmp_path):
    meta = meta_at(tmp_path)
    master_changes(meta)
    meta.cursor = 6
    meta.persist()
    again = meta_at(tmp_path)
    assert state(again) == state(meta) and again.cursor == 6


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_a_follower_applies_records_from_the_log_and_logs_the_ones_it_refuses(tmp_path, caplog):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            (tmp_path / "m").mkdir(), (tmp_path / "f").mkdir()
            master = meta_at(tmp_path / "m")
            writer = MetaLog(store, master)
            await writer.become_writer(state_version=1)
            writer.want_snapshot()
            await writer._store_snapshot()
            records = master_changes(master)
            for r in records[:3]:
                assert (await writer.write(r)).status is PutMessageStatus.PUT_OK
            hostile = dict(records[3], group="intruder")
            body = json.dumps(hostile).encode()
            assert (
                await store.put_message(Message(META_TOPIC, 0, body, {"META": "invisible"}))
            ).status is PutMessageStatus.PUT_OK
            garbage = Message(META_TOPIC, 0, b"\xff not json", {"META": "x"})
            assert (await store.put_message(garbage)).status is PutMessageStatus.PUT_OK
            for r in records[3:]:
                await writer.write(r)
            follower_meta = meta_at(tmp_path / "f")
            follower = MetaLog(store, follower_meta)
            assert not follower.based  # a fresh replica starts from a snapshot record
            with caplog.at_level(logging.WARNING, logger="brokers.meta"):
                await follower.catch_up()
            assert follower.mode is MetaMode.FOLLOWER and follower.rejected == 2
            assert state(follower_meta)["pop"] == state(master)["pop"]
            assert follower_meta.data_version == master.data_version >= DataVersion(3)
            assert "unknown consumer group 'intruder'" in caplog.text and "nothing changed" in caplog.text
            assert follower.cursor == store.max_queue_offset(META_TOPIC, 0)
        finally:
            await store.shutdown()

    run(scenario())


def test_a_deposed_writer_without_a_base_asks_its_master_for_a_snapshot(tmp_path):
    async def scenario():
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20))
        await store.start()
        try:
            (tmp_path / "m").mkdir()
            asked: list[int] = []

            async def ask() -> None:
                asked.append(1)

            metalog = MetaLog(store, meta_at(tmp_path / "m"), request_snapshot=ask)
            await metalog.become_writer(state_version=1)
            metalog.want_snapshot()
            await metalog._store_snapshot()  # storing its own snapshot keeps the way to ask for one
            metalog.become_follower()
            metalog.based = False  # its log was cut at a handshake with the new master
            await metalog._ask_for_snapshot()
            assert asked == [1]
        finally:
            await store.shutdown()

    run(scenario())


def test_a_snapshot_older_than_the_replica_never_replaces_its_state(tmp_path):
    (tmp_path / "m").mkdir(), (tmp_path / "r").mkdir()
    master, replica = meta_at(tmp_path / "m"), meta_at(tmp_path / "r")
    records = master_changes(master)
    for r in records:
        replica.apply(r)
    before = copy.deepcopy(state(replica))
    stale = master.snapshot()
    stale["dataVersion"] = {"stateVersion": 3, "counter": 0, "timestamp": 0}  # older than (3, 1, ...)
    stale["popTable"] = {}
    with pytest.raises(MetaRejected, match="stale snapshot record"):
        replica.apply(stale)
    assert state(replica) == before
    # A change record of an older epoch (a deposed master's) is refused too; one of this epoch applies
    # even with an older counter (changes within an epoch commute).
    old_epoch = dict(records[2], dataVersion={"stateVersion": 2, "counter": 99, "timestamp": 0})
    with pytest.raises(MetaRejected, match="stale finish record"):
        replica.apply(old_epoch)
    same_epoch = dict(records[2], offsets=[1], dataVersion={"stateVersion": 3, "counter": 0, "timestamp": 0})
    replica.apply(same_epoch)
    assert replica.pop.queue("g", "T", 0).acked_below == 3 and replica.data_version == before["dv"]


def test_a_pop_whose_record_is_not_stored_hands_nothing_out_and_the_replicas_agree(tmp_path):
    """A master pops, but its store refuses the pop's record (a full disk, a fence). The messages stay
    unpopped: the next pop hands them out, and a replica following the records holds the same state.
    (Kept in flight unrecorded, they were skipped everywhere else: the next pop's record moved every
    replica's pop offset past them, and the new master of soak seed 2 never delivered them.)"""

    async def scenario():
        gate = WritePermission(BrokerRole.ASYNC_MASTER)
        store = MessageStore(StoreConfig(tmp_path / "store", mapped_file_size_commit_log=1 << 20), gate)
        await store.start()
        try:
            (tmp_path / "m").mkdir(), (tmp_path / "f").mkdir()
            meta = meta_at(tmp_path / "m")
            meta.topics.update(TopicConfig("T", 1, 1))
            writer = MetaLog(store, meta)
            await writer.become_writer(state_version=1)
            writer.want_snapshot()
            await writer._store_snapshot()
            await store.put_messages([Message("T", 0, b"m%d" % i) for i in range(6)])
            config = SimpleNamespace(retryMaxTimes=16, lockInStrictMode=False, totalReplicas=1)
            consuming = ConsumeService(config, store, meta.topics, meta, writer, StaticQueues("broker-a", store.max_queue_offset))
            every = lambda tags: True  # noqa: E731
            await consuming.ensure_group("g")
            first = await consuming.pop_from("g", "T", 0, 2, 30_000, every)
            gate.update(fenced=True)
            with pytest.raises(NotStored):
                await consuming.pop_from("g", "T", 0, 2, 30_000, every)
            q = meta.pop.queue("g", "T", 0)
            assert (q.pop_offset, sorted(q.in_flight)) == (2, [0, 1])
            gate.update(fenced=False)
            again = await consuming.pop_from("g", "T", 0, 4, 30_000, every)
            assert [m.queue_offset for m, _, _ in first + again] == [0, 1, 2, 3, 4, 5]

            follower_meta = meta_at(tmp_path / "f")
            await MetaLog(store, follower_meta).catch_up()
            assert state(follower_meta)["pop"] == state(meta)["pop"]
        finally:
            await store.shutdown()

    run(scenario())
