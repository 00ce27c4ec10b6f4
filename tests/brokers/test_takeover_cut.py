"""Issue 33: a new master cut 604 KB of fully replicated, acknowledged data as "a partial record".

The soak's chain (seed 77), replayed deterministically with real stores over real HA sockets in one
event loop, driving the role changes as the controller's pushes would (brokers/control/replicas.py):

1. A is master at epoch 1; B and C copy it. B's I/O thread is busy when A's last transfer reaches it,
   so B's append of those bytes is placed and queued, not yet written.
2. B is elected (epoch 2) while that write waits. Its takeover stops the copy; the cancelled append
   took its queued write with it (an executor job cancelled before it starts never runs), so B's
   epoch 2 started at its *written* end, and B's first writes went *after* the placed bytes: a hole
   of zeros sat in B's log between its epoch 2 start and its own records.
3. A rejoins as B's slave: a correct fork cut at epoch 2's start, then A copies B's log, hole
   included. A's dispatch position stops at the hole (zeros are no record) while the copy goes on,
   and A acknowledges every byte.
4. B is killed; A is elected (epoch 3) and "cuts a partial record" at its dispatch position: every
   message B acknowledged after the hole is thrown away, and C, rejoining A, cuts the same.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from brokers.core.roles import BrokerRole
from brokers.store.cuts import MARKER
from brokers.store.message import Message
from brokers.store.store import PutMessageStatus
from testkit.ports import free_port

from .test_ha_link import Node, config, log_files, run, until

pytestmark = pytest.mark.unit


def controller_node(root, broker_id: int) -> Node:
    return Node(config(root, "SLAVE", broker_id, free_port(), enableControllerMode=True))


def ha_addr(node: Node) -> str:
    return f"127.0.0.1:{node.cfg.haListenPort}"


async def follow(slave: Node, master: Node) -> None:
    await slave.ha.change_to_slave()
    slave.ha.on_master_ha_addr(ha_addr(master))


async def readable(node: Node) -> set[bytes]:
    return {m.body for q in range(3) for m in await node.store.get_messages("Orders", q, 0, 10_000)}


async def put(node: Node, prefix: str, n: int) -> set[bytes]:
    messages = [Message("Orders", i % 3, f"{prefix}-{i}".encode()) for i in range(n)]
    results = await node.store.put_messages(messages)
    assert {r.status for r in results} == {PutMessageStatus.PUT_OK}, [r.detail for r in results]
    return {m.body for m in messages}


def test_a_takeover_keeps_every_acknowledged_message_its_copy_holds_after_an_earlier_fork_cut(tmp_path, caplog):
    caplog.set_level(logging.WARNING)

    async def scenario():
        a, b, c = [await controller_node(tmp_path / n, i).start() for n, i in (("a", 1), ("b", 2), ("c", 3))]
        try:
            await a.ha.change_to_master(1, {1})
            await follow(b, a)
            await follow(c, a)
            acked = await put(a, "epoch1", 60)
            await until(lambda: b.store.max_offset == c.store.max_offset == a.store.max_offset, "B and C copying A")

            # 1. B's I/O thread is busy while A's next transfer arrives: B places it and queues its write.
            busy = threading.Event()
            blocker = asyncio.get_running_loop().run_in_executor(b.store._io, busy.wait, 30)
            in_flight = await put(a, "in-flight", 20)
            await until(lambda: b.store.commit_log.max_offset == a.store.max_offset, "B placing A's last bytes")
            assert b.store.max_offset < b.store.commit_log.max_offset  # placed, not yet written
            acked |= in_flight
            a_end_of_epoch_1 = a.store.max_offset

            # 2. B is elected while that write waits (the disk frees a moment later).
            asyncio.get_running_loop().call_later(0.3, busy.set)
            await b.ha.change_to_master(2, {2})
            await blocker
            epoch_2_start = b.ha.epochs.last_entry().start_offset
            await follow(c, b)
            acked |= await put(b, "epoch2-early", 30)

            # 3. A rejoins as B's slave (the old master's fork is cut), and copies B under all-ack.
            await follow(a, b)
            acked |= await put(b, "epoch2", 200)
            await until(lambda: a.store.max_offset == c.store.max_offset == b.store.max_offset, "A and C copying B")
            b_end = b.store.max_offset

            # 4. B dies; A is elected and must keep everything it copied.
            await b.stop()
            await a.ha.change_to_master(3, {1})
            a_end_after_takeover = a.store.max_offset
            await follow(c, a)
            acked |= await put(a, "epoch3", 10)
            await until(lambda: c.store.max_offset == a.store.max_offset, "C following A")
            c.store.set_confirm_offset(c.store.max_offset)
            await c.store.settled()
            lost_on_a = acked - await readable(a)
            lost_on_c = acked - await readable(c)
            assert a.ha.role is BrokerRole.SYNC_MASTER
            return epoch_2_start, a_end_of_epoch_1, b_end, a_end_after_takeover, lost_on_a, lost_on_c
        finally:
            for node in (a, c):
                await node.stop()
            if b.store.running:
                await b.stop()

    epoch_2_start, a_end_of_epoch_1, b_end, a_end_after_takeover, lost_on_a, lost_on_c = run(scenario())
    assert a_end_after_takeover == b_end, f"the new master cut {b_end - a_end_after_takeover} bytes of acknowledged data"
    assert not lost_on_a, f"{len(lost_on_a)} acknowledged messages not readable on the new master"
    assert not lost_on_c, f"{len(lost_on_c)} acknowledged messages not readable on the other replica"
    assert log_files(tmp_path / "a") == log_files(tmp_path / "c")
    assert epoch_2_start == a_end_of_epoch_1, "B's epoch 2 must start after every byte it holds of epoch 1"
    guard = [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]
    assert not guard, guard
