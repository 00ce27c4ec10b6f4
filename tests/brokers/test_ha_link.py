"""The HA link between stores in one event loop over real TCP sockets (reference §2.4-2.6, seed 004,
seed 002): byte-identical copies, confirm-offset gated reads, the handshake's fork handling, quorum
waits. The same code runs in broker processes (tests/e2e/test_replication.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from brokers.config import BrokerConfig
from brokers.core.roles import BrokerRole
from brokers.ha.epoch import EPOCH_FILE_NAME, EpochEntry, EpochFile
from brokers.ha.gate import WritePermission
from brokers.ha.service import HAService
from brokers.store.message import Message
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig
from testkit.ports import free_port

pytestmark = pytest.mark.unit

SEG = 64 * 1024
BODY = b"m" * 300


def config(root: Path, role: str, broker_id: int, ha_port: int, master_port: int | None = None, **extra) -> BrokerConfig:
    return BrokerConfig(
        brokerName="g",
        brokerId=broker_id,
        brokerRole=role,
        haListenPort=ha_port,
        storePathRootDir=str(root),
        controlPlaneUrl="http://127.0.0.1:9",
        controlPlaneToken="unused",
        mappedFileSizeCommitLog=SEG,
        haMasterAddress=f"127.0.0.1:{master_port}" if master_port else "",
        haSendHeartbeatInterval=100,
        haHousekeepingInterval=3000,
        **extra,
    )


class Node:
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.permission = WritePermission(BrokerRole(cfg.brokerRole))
        self.store = MessageStore(StoreConfig(Path(cfg.storePathRootDir), mapped_file_size_commit_log=SEG), self.permission)
        self.store.follow_max = cfg.brokerRole != "SLAVE"
        self.ha = HAService(cfg, self.store, self.permission)

    async def start(self, before_ha=None) -> Node:
        await self.store.start()
        if before_ha is not None:
            await before_ha(self)
        await self.ha.start()
        return self

    async def stop(self) -> None:
        await self.ha.stop()
        await self.store.shutdown()

    async def put(self, n: int, tag: str = "t") -> list:
        return await self.store.put_messages([Message("Orders", i % 3, BODY, {"TAGS": tag}) for i in range(n)])


def log_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "commitlog").iterdir())}


def run(scenario):
    """Run a scenario; one that hangs fails with the stack of where it waited."""

    async def bounded():
        task = asyncio.ensure_future(scenario)
        done, _ = await asyncio.wait({task}, timeout=60)
        if not done:
            stacks = "\n".join(f"{t.get_name()}: {t.get_stack()}" for t in asyncio.all_tasks() if not t.done())
            task.cancel()
            raise AssertionError(f"the scenario hung; tasks:\n{stacks}")
        return task.result()

    return asyncio.run(bounded())


async def until(predicate, what: str, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.01)


def test_a_slave_copies_the_master_byte_for_byte_serves_reads_and_refuses_sends(tmp_path):
    async def scenario():
        port = free_port()
        master = await Node(config(tmp_path / "m", "ASYNC_MASTER", 0, port)).start()
        slave = await Node(config(tmp_path / "s", "SLAVE", 1, free_port(), port)).start()
        try:
            results = await master.put(600)  # 600 x 395 bytes: four 64 KiB segments
            assert {r.status for r in results} == {PutMessageStatus.PUT_OK}
            await until(lambda: slave.store.max_offset == master.store.max_offset, "the slave catching up")
            await until(lambda: slave.store.max_queue_offset("Orders", 0) == 200, "the slave's consume queue")
            on_slave = await slave.store.get_messages("Orders", 0, 0, 500)
            on_master = await master.store.get_messages("Orders", 0, 0, 500)
            assert [(m.physical_offset, m.queue_offset, m.body) for m in on_slave] == [
                (m.physical_offset, m.queue_offset, m.body) for m in on_master
            ]
            refused = await slave.put(1)
            assert refused[0].status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in refused[0].detail
            level = master.ha.water_levels()
            assert level["maxOffset"] == master.store.max_offset and level["role"] == "ASYNC_MASTER"
            await until(lambda: master.ha.water_levels()["slaves"][0]["lagBytes"] == 0, "the ack of the last byte")
            (s,) = master.ha.water_levels()["slaves"]
            assert s["brokerId"] == 1 and s["ackOffset"] == master.store.max_offset and s["lastCaughtUpMs"] > 0
            assert slave.ha.epochs.entries == master.ha.epochs.entries == (EpochEntry(1, 0),)
        finally:
            await slave.stop()
            await master.stop()
        assert log_files(tmp_path / "s") == log_files(tmp_path / "m")
        assert len(log_files(tmp_path / "m")) == 4

    run(scenario())


def test_consumers_of_a_slave_never_see_past_the_confirm_offset_also_after_a_restart(tmp_path):
    async def scenario():
        port = free_port()
        master = await Node(config(tmp_path / "m", "ASYNC_MASTER", 0, port)).start()
        master.store.set_follow_max(False)  # as a master waiting for its whole SyncStateSet (§2.6)
        slave_cfg = config(tmp_path / "s", "SLAVE", 1, free_port(), port)
        slave = await Node(slave_cfg).start()
        try:
            results = await master.put(10)
            await until(lambda: slave.store.max_offset == master.store.max_offset, "the copy")
            await asyncio.sleep(0.3)  # several heartbeats carry the master's confirm offset (still 0)
            assert await slave.store.get_messages("Orders", 0, 0, 32) == []
            fifth = results[4]
            master.store.set_confirm_offset(fifth.physical_offset + fifth.size)
            await until(lambda: slave.store.confirm_offset == fifth.physical_offset + fifth.size, "the confirm offset")
            await until(lambda: slave.store.max_queue_offset("Orders", 0) == 2, "the published entries")
            assert [m.queue_offset for m in await slave.store.get_messages("Orders", 0, 0, 32)] == [0, 1]  # messages 0, 3
            await asyncio.sleep(CHECKPOINT_WAIT)
        finally:
            await slave.stop()
        restarted = await Node(slave_cfg).start()  # the master keeps its confirm offset where it was
        try:
            assert restarted.store.confirm_offset == fifth.physical_offset + fifth.size
            assert [m.queue_offset for m in await restarted.store.get_messages("Orders", 0, 0, 32)] == [0, 1]
            master.store.set_confirm_offset(master.store.max_offset)
            await until(lambda: restarted.store.max_queue_offset("Orders", 0) == 4, "everything, once confirmed")
        finally:
            await restarted.stop()
            await master.stop()

    run(scenario())


CHECKPOINT_WAIT = 0.7  # > the store's checkpoint interval


@pytest.mark.parametrize("new_master_writes, case", [(5, "1-3"), (15, "1-2")])
def test_the_handshake_cuts_a_forked_tail_where_the_epochs_part(tmp_path, new_master_writes, case):
    """Seed 004: A (master, epoch 1) replicates 10 messages to B, then writes 10 that B never gets;
    B becomes master at epoch 2 and writes more; A rejoins as B's slave and must cut its 10 extra
    messages at the fork (the start of epoch 2), then copy epoch 2."""

    async def scenario():
        a_port, b_port = free_port(), free_port()
        a = await Node(config(tmp_path / "a", "ASYNC_MASTER", 0, a_port)).start()
        b = await Node(config(tmp_path / "b", "SLAVE", 1, b_port, a_port)).start()
        await a.put(10, "shared")
        await until(lambda: b.store.max_offset == a.store.max_offset, "the shared prefix")
        fork = a.store.max_offset
        await b.stop()
        await a.put(10, "only-on-a")
        assert a.store.max_offset > fork
        await a.stop()

        async def epoch_2(node: Node) -> None:  # what the controller would do when electing B
            node.ha.epochs.append(EpochEntry(2, node.store.max_offset))

        b = await Node(config(tmp_path / "b", "ASYNC_MASTER", 0, b_port)).start(before_ha=epoch_2)
        await b.put(new_master_writes, "epoch-2")
        a = await Node(config(tmp_path / "a", "SLAVE", 1, a_port, b_port)).start()
        try:
            await until(lambda: a.store.max_offset == b.store.max_offset, "A following B")
            assert a.ha.client.last_truncation == (case, fork)
            assert a.ha.epochs.entries == b.ha.epochs.entries == (EpochEntry(1, 0), EpochEntry(2, fork))
            tags = {m.properties["TAGS"] for q in range(3) for m in await a.store.get_messages("Orders", q, 0, 100)}
            assert tags == {"shared", "epoch-2"}
        finally:
            await a.stop()
            await b.stop()
        assert log_files(tmp_path / "a") == log_files(tmp_path / "b")

    run(scenario())


@pytest.mark.parametrize("deleted", ["below the fork", "past the replica's end"])
def test_a_forked_replica_rejoins_a_master_that_deleted_its_oldest_files(tmp_path, deleted):
    """Seed 004's truncation with retention on the master's side: A (master, epoch 1) replicates to
    B, writes a tail B never gets; B becomes master at epoch 2, writes, and deletes its oldest files
    (its epoch entries still start at 0). A rejoins: its forked tail is cut at the fork; when B kept
    the fork, A follows from there, else B ships from its first file and A starts again at it. Either
    way the two logs are then identical over what both hold, and no forked message is readable."""

    async def scenario():
        a_port, b_port = free_port(), free_port()
        a = await Node(config(tmp_path / "a", "ASYNC_MASTER", 0, a_port)).start()
        b = await Node(config(tmp_path / "b", "SLAVE", 1, b_port, a_port)).start()
        await a.put(400, "shared")
        await until(lambda: b.store.max_offset == a.store.max_offset, "the shared prefix")
        fork = a.store.max_offset
        await b.stop()
        await a.put(50, "only-on-a")
        a_end = a.store.max_offset
        await a.stop()

        async def epoch_2(node: Node) -> None:
            node.ha.epochs.append(EpochEntry(2, node.store.max_offset))

        b = await Node(config(tmp_path / "b", "ASYNC_MASTER", 0, b_port)).start(before_ha=epoch_2)
        await b.put(600, "epoch-2")

        def more() -> bool:  # below the fork: the files wholly below it; past: up to A's end and beyond
            first = b.store.log_files()[0]
            return first.end <= fork if deleted == "below the fork" else first.start <= a_end

        while len(b.store.log_files()) > 1 and more():
            await b.store.delete_oldest_file()
            b.ha.epochs.truncate_prefix_by_offset(b.store.min_offset)
        assert (b.store.min_offset < fork) == (deleted == "below the fork") and b.store.min_offset > 0
        a = await Node(config(tmp_path / "a", "SLAVE", 1, a_port, b_port)).start()
        try:
            await until(lambda: a.store.max_offset == b.store.max_offset, "A following B")
            if deleted == "below the fork":  # B still holds epoch 1: the fork is found as without retention
                assert a.ha.client.last_truncation == ("1-2", fork)
                assert a.store.min_offset == 0  # A kept its own copy of what B deleted
            else:  # B holds no epoch of A's any more: A's tail is cut at B's first entry, A starts again
                assert a.ha.client.last_truncation == ("1-1", fork)
                assert a.store.min_offset == b.store.min_offset
            tags = {m.properties["TAGS"] for q in range(3) for m in await a.store.get_messages("Orders", q, 0, 1000)}
            assert "only-on-a" not in tags and "epoch-2" in tags
            lo, hi = b.store.min_offset, b.store.max_offset
            assert await same_bytes(a, b, lo, hi)
        finally:
            await a.stop()
            await b.stop()

    run(scenario())


async def same_bytes(a: Node, b: Node, lo: int, hi: int) -> bool:
    """Bytes [lo, hi) of both logs are equal (read segment by segment: read_raw stops at a segment's end)."""
    while lo < hi:
        x, y = await a.store.read_raw(lo, hi - lo), await b.store.read_raw(lo, hi - lo)
        if x != y or not x:
            return False
        lo += len(x)
    return True


def test_a_replica_older_than_the_masters_whole_log_starts_again_at_its_min(tmp_path):
    """Seed 004 case 1-1: the slave's log ends before the master's min offset."""

    async def scenario():
        old = await Node(config(tmp_path / "s", "ASYNC_MASTER", 0, free_port())).start()
        await old.put(20)
        await old.stop()
        port = free_port()

        async def trimmed(node: Node) -> None:  # the master's first three segments are gone
            await node.store.restart_at(3 * SEG)

        master = await Node(config(tmp_path / "m", "ASYNC_MASTER", 0, port)).start(before_ha=trimmed)
        await master.put(30)
        assert master.store.min_offset == 3 * SEG
        slave = await Node(config(tmp_path / "s", "SLAVE", 1, free_port(), port)).start()
        try:
            await until(lambda: slave.store.max_offset == master.store.max_offset, "the copy from the master's min")
            assert slave.ha.client.last_truncation[0] == "1-1"
            assert slave.store.min_offset == 3 * SEG
            await until(lambda: slave.store.max_queue_offset("Orders", 0) == 10, "the consume queue")
            got = await slave.store.get_messages("Orders", 0, 0, 100)
            assert [m.queue_offset for m in got] == list(range(10))
        finally:
            await slave.stop()
            await master.stop()
        assert log_files(tmp_path / "s") == log_files(tmp_path / "m")

    run(scenario())


def test_a_replica_entirely_ahead_of_the_master_is_refused_and_left_untouched(tmp_path):
    """Seed 004 case 3-3: the slave's min is beyond the master's max: manual intervention."""

    async def scenario():
        async def far(node: Node) -> None:
            await node.store.restart_at(10 * SEG)

        ahead = await Node(config(tmp_path / "s", "ASYNC_MASTER", 0, free_port())).start(before_ha=far)
        await ahead.put(5)
        await ahead.stop()
        before = log_files(tmp_path / "s")
        port = free_port()
        master = await Node(config(tmp_path / "m", "ASYNC_MASTER", 0, port)).start()
        await master.put(5)
        slave = await Node(config(tmp_path / "s", "SLAVE", 1, free_port(), port)).start()
        try:
            await until(lambda: slave.ha.client.refused is not None, "the refusal")
            assert "3-3" in slave.ha.client.refused
        finally:
            await slave.stop()
            await master.stop()
        assert log_files(tmp_path / "s") == before
        assert EpochFile(tmp_path / "s" / EPOCH_FILE_NAME).entries == (EpochEntry(1, 10 * SEG),)

    run(scenario())


def test_sync_master_waits_for_its_slave_and_times_out_without_it(tmp_path):
    async def scenario():
        port = free_port()
        master = await Node(
            config(tmp_path / "m", "SYNC_MASTER", 0, port, inSyncReplicas=2, totalReplicas=2, slaveTimeout=500)
        ).start()
        slave = await Node(config(tmp_path / "s", "SLAVE", 1, free_port(), port)).start()
        try:
            await until(
                lambda: master.ha.server.connections and all(c.ack_offset >= 0 for c in master.ha.server.connections),
                "the slave's first ack",
            )
            sends = await asyncio.gather(*(master.put(4) for _ in range(100)))  # 100 sends in flight, pipelined
            assert {r.status for rs in sends for r in rs} == {PutMessageStatus.PUT_OK}
            assert slave.store.max_offset >= max(r.physical_offset + r.size for rs in sends for r in rs)
        finally:
            await slave.stop()
        try:
            before = master.store.max_offset
            (late,) = await master.put(1)
            assert late.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # stored, but no replica acked in time
            assert master.store.max_offset > before
        finally:
            await master.stop()

    run(scenario())


def test_the_water_level_report_says_which_slaves_are_in_sync_by_the_quorum_rule(tmp_path):
    """Each slave entry carries inSync (quorum.slave_in_sync: gap under haMaxGapNotInSync) and the
    report carries the broker's haMaxGapNotInSync, so readers never re-implement the rule."""

    async def scenario():
        port = free_port()
        master = await Node(config(tmp_path / "m", "ASYNC_MASTER", 0, port, haMaxGapNotInSync=4096)).start()
        slave = await Node(config(tmp_path / "s", "SLAVE", 1, free_port(), port)).start()
        try:
            await master.put(30)  # 30 x ~390 bytes: more than haMaxGapNotInSync
            await until(
                lambda: (
                    master.ha.server.connections
                    and all(c.ack_offset == master.store.max_offset for c in master.ha.server.connections)
                ),
                "the slave's catch-up",
            )
            report = master.ha.water_levels()
            assert report["haMaxGapNotInSync"] == 4096 and report["maxOffset"] > 4096
            (entry,) = report["slaves"]
            assert (entry["brokerId"], entry["lagBytes"], entry["inSync"]) == (1, 0, True)

            (conn,) = master.ha.server.connections
            conn.ack_offset = master.store.max_offset - 4096  # as a slave exactly haMaxGapNotInSync behind
            (entry,) = master.ha.water_levels()["slaves"]
            assert (entry["lagBytes"], entry["inSync"]) == (4096, False)
            conn.ack_offset += 1
            assert master.ha.water_levels()["slaves"][0]["inSync"] is True
        finally:
            await slave.stop()
            await master.stop()

    run(scenario())


def test_auto_in_sync_replicas_downgrades_when_the_slave_dies_and_upgrades_when_it_returns(tmp_path):
    """Seed 002 (slave-acting-master mode): needAckNums = max(minInSyncReplicas, min(inSyncReplicas,
    replicas in sync)); with minInSyncReplicas=2 a lone master refuses instead."""

    async def scenario():
        port = free_port()
        quorum = dict(
            inSyncReplicas=2, totalReplicas=2, enableSlaveActingMaster=True, enableAutoInSyncReplicas=True, slaveTimeout=60_000
        )  # a wait that should not happen would hang, not pass
        master = await Node(config(tmp_path / "m", "SYNC_MASTER", 0, port, minInSyncReplicas=1, **quorum)).start()
        slave_cfg = config(tmp_path / "s", "SLAVE", 1, free_port(), port)
        slave = await Node(slave_cfg).start()
        try:
            await until(lambda: master.ha.precheck() == (None, 2), "two replicas in sync")
            (r,) = await master.put(1)
            assert r.status is PutMessageStatus.PUT_OK and slave.store.max_offset >= r.physical_offset + r.size
            await slave.stop()
            await until(lambda: master.ha.precheck() == (None, 1), "the downgrade")
            (alone,) = await asyncio.wait_for(master.put(1), 10)
            assert alone.status is PutMessageStatus.PUT_OK
            slave = await Node(slave_cfg).start()
            await until(lambda: master.ha.precheck() == (None, 2), "the upgrade")
            (back,) = await master.put(1)
            assert back.status is PutMessageStatus.PUT_OK and slave.store.max_offset >= back.physical_offset + back.size
        finally:
            await slave.stop()
            await master.stop()
        strict = await Node(config(tmp_path / "m", "SYNC_MASTER", 0, free_port(), minInSyncReplicas=2, **quorum)).start()
        try:
            before = strict.store.max_offset
            (refused,) = await strict.put(1)
            assert refused.status is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH and strict.store.max_offset == before
        finally:
            await strict.stop()

    run(scenario())
