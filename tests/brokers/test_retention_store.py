"""Retention in the store: the oldest commit-log file deleted, the consume queues' min offsets follow,
reads never reach a deleted record, the space below a queue's min is given back, and a restart
rebuilds the queues at their offsets from what is left."""

from __future__ import annotations

import asyncio
import os

import pytest

from brokers.store.message import Message
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig

pytestmark = pytest.mark.unit

SEGMENT = 64 * 1024


def store(root) -> MessageStore:
    return MessageStore(StoreConfig(root, mapped_file_size_commit_log=SEGMENT))


async def fill(s: MessageStore, n: int, queues: int = 2) -> None:
    for i in range(n):
        result = await s.put_message(Message("T", i % queues, f"{i:06d}".encode() + b"x" * 500, {}))
        assert result.status is PutMessageStatus.PUT_OK


def test_deleting_the_oldest_file_moves_every_queue_min_offset_past_its_records(tmp_path):
    async def scenario():
        s = store(tmp_path)
        await s.start()
        await fill(s, 1000)
        await s.settled()
        files = s.log_files(limit=100)
        assert len(files) > 4
        first_end = files[0].end
        assert await s.delete_oldest_file() == first_end - files[0].start
        assert s.min_offset == files[1].start and s.deletions == 1
        for q in range(2):
            low = s.min_queue_offset("T", q)
            got = await s.get_messages("T", q, 0, 5)  # asked from 0: the reading starts at the min
            assert got[0].queue_offset == low > 0
            assert got[0].physical_offset >= s.min_offset
            assert await s.first_queue_offset("T", q) == low
            # the entry just below the min pointed into the deleted file
            assert low == sum(1 for i in range(1000) if i % 2 == q and offsets[i] < first_end)
        # the horizon: the first message kept, which starts the file now first
        heads = [(await s.get_messages("T", q, 0, 1))[0] for q in range(2)]
        head = min(heads, key=lambda m: m.physical_offset)
        assert head.physical_offset == s.min_offset
        assert await s.oldest_store_timestamp() == head.store_timestamp
        assert await s.oldest_store_timestamp("T", 1) == heads[1].store_timestamp
        with pytest.raises(ValueError):
            for _ in range(100):
                await s.delete_oldest_file()  # down to the file being written, never that one
        assert len(s.log_files(limit=100)) == 1
        for q in range(2):  # everything but the last file's records gone
            assert s.min_queue_offset("T", q) <= s.max_queue_offset("T", q)
        await s.shutdown()

    offsets: list[int] = []

    async def record_offsets():
        probe = store(tmp_path / "probe")
        await probe.start()
        for i in range(1000):
            r = await probe.put_message(Message("T", i % 2, f"{i:06d}".encode() + b"x" * 500, {}))
            offsets.append(r.physical_offset)
        await probe.shutdown()

    asyncio.run(record_offsets())
    asyncio.run(scenario())


def test_a_restart_after_deletion_keeps_queue_offsets_and_the_files_stay_sparse(tmp_path):
    async def scenario():
        s = store(tmp_path)
        await s.start()
        await fill(s, 3000, queues=1)
        await s.settled()
        for _ in range(6):
            await s.delete_oldest_file()
        low, high = s.min_queue_offset("T", 0), s.max_queue_offset("T", 0)
        first = (await s.get_messages("T", 0, low, 1))[0]
        await s.shutdown()

        again = store(tmp_path)
        await again.start()
        assert again.min_queue_offset("T", 0) == low and again.max_queue_offset("T", 0) == high
        (same,) = await again.get_messages("T", 0, 0, 1)
        assert (same.queue_offset, same.body) == (first.queue_offset, first.body)
        put = await again.put_message(Message("T", 0, b"next", {}))
        assert put.queue_offset == high  # the queue goes on where it was
        await again.settled()
        cq_file = tmp_path / "consumequeue" / "T" / "0"
        st = os.stat(cq_file)
        assert st.st_size == (high + 1) * 20
        assert st.st_blocks * 512 < st.st_size  # the rebuilt file is sparse below the min
        await again.shutdown()

    asyncio.run(scenario())


def test_a_queue_whose_records_are_all_deleted_is_empty_at_its_max_offset(tmp_path):
    async def scenario():
        s = store(tmp_path)
        await s.start()
        for _i in range(200):
            await s.put_message(Message("OLD", 0, b"y" * 500, {}))
        for _i in range(400):
            await s.put_message(Message("NEW", 0, b"z" * 500, {}))
        await s.settled()
        while s.log_files()[0].end <= s.max_offset and len(s.log_files()) > 1:
            await s.delete_oldest_file()
        assert s.min_queue_offset("OLD", 0) == s.max_queue_offset("OLD", 0) == 200
        assert await s.get_messages("OLD", 0, 0, 10) == []
        assert await s.first_queue_offset("OLD", 0) == 200
        await s.shutdown()

    asyncio.run(scenario())
