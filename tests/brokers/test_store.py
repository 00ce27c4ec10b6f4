"""The asyncio message store: ordering, group commit, consume-queue rebuild, kill -9 recovery."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokers.store import codec
from brokers.store.message import Message
from brokers.store.store import FlushDiskType, MessageStore, PutMessageStatus, StoreConfig
from tests.brokers.test_codec import IMPLEMENTATIONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def store(root: Path, flush=FlushDiskType.ASYNC_FLUSH, segment=64 * 1024) -> MessageStore:
    return MessageStore(StoreConfig(root, mapped_file_size_commit_log=segment, flush_disk_type=flush))


@pytest.fixture(params=IMPLEMENTATIONS)
def codec_impl(request, monkeypatch):
    """Run a test with each codec present: the native one (the default where it is built; test_codec.py
    requires it wherever a C compiler is) and the pure-Python reference."""
    if request.param == "python":
        monkeypatch.setattr(codec, "prepare", codec.py_prepare)
        monkeypatch.setattr(codec, "encode_run", codec.py_encode_run)
    else:
        assert codec.IMPLEMENTATION == "native"
    return request.param


def test_messages_come_back_in_queue_order_across_segments_and_restarts(tmp_path, codec_impl):
    def body(i: int) -> bytes:
        return f"{i:06d}".encode() + b"x" * 300

    async def scenario():
        s = store(tmp_path)
        await s.start()
        # Sent one after another, so message i lands in queue i % 3 at queue offset i // 3.
        for i in range(600):
            result = await s.put_message(Message("T", i % 3, body(i), {"TAGS": "a"}))
            assert result.status is PutMessageStatus.PUT_OK and result.queue_offset == i // 3
        assert len(list((tmp_path / "commitlog").iterdir())) > 1  # rolled over several segments
        for q in range(3):
            got = await s.get_messages("T", q, 0, 1000)
            assert [int(g.body[:6]) for g in got] == list(range(q, 600, 3))
            assert [g.queue_offset for g in got] == list(range(200))
        await s.shutdown()
        again = store(tmp_path)
        report = await again.start()
        assert report.messages == 600 and report.truncated_at is None
        assert again.max_queue_offset("T", 0) == 200
        (last,) = await again.get_messages("T", 1, 199, 5)
        assert last.body == body(598) and last.properties == {"TAGS": "a"}
        await again.shutdown()

    asyncio.run(scenario())


def test_sync_flush_acknowledges_many_sends_with_one_fsync(tmp_path):
    async def scenario():
        s = store(tmp_path, FlushDiskType.SYNC_FLUSH)
        await s.start()
        results = await asyncio.gather(*(s.put_message(Message("T", 0, b"x" * 1024)) for _ in range(2000)))
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        stats = dict(s.stats)
        await s.shutdown()
        return stats

    stats = asyncio.run(scenario())
    assert stats["messages"] == 2000 and stats["fsyncs"] == stats["batches"] < 2000 / 10


def test_async_flush_flushes_once_enough_pages_are_written_without_waiting_for_the_interval(tmp_path):
    async def scenario():
        # An interval and a thorough interval far beyond the test: only the wake-up after a write
        # (flushCommitLogLeastPages = 4 pages) can make the flush thread flush.
        s = MessageStore(
            StoreConfig(
                tmp_path,
                mapped_file_size_commit_log=1 << 20,
                flush_interval_commit_log=600_000,
                flush_commit_log_thorough_interval=600_000,
            )
        )
        await s.start()
        await s.put_message(Message("T", 0, b"x" * 1000))  # less than 4 pages: not flushed yet
        await asyncio.sleep(0.3)
        before = s.stats["flushes"]
        await asyncio.gather(*(s.put_message(Message("T", 0, b"x" * 4096)) for _ in range(5)))
        deadline = time.monotonic() + 30
        while s.stats["flushes"] == before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        after = s.stats["flushes"]
        dirty = [seg.dirty for seg in s.commit_log.segments]
        await s.shutdown()
        return before, after, dirty

    before, after, dirty = asyncio.run(scenario())
    assert before == 0 and after >= 1 and dirty == [False]


def test_async_flush_flushes_a_small_tail_after_the_thorough_interval(tmp_path):
    async def scenario():
        s = MessageStore(
            StoreConfig(
                tmp_path,
                mapped_file_size_commit_log=1 << 20,
                flush_interval_commit_log=50,
                flush_commit_log_thorough_interval=200,
            )
        )
        await s.start()
        await s.put_message(Message("T", 0, b"small"))
        deadline = time.monotonic() + 30
        while s.stats["flushes"] == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        flushes = s.stats["flushes"]
        await s.shutdown()
        return flushes

    assert asyncio.run(scenario()) >= 1


def test_after_a_failed_write_nothing_more_is_acknowledged_and_a_restart_keeps_every_acknowledged_message(tmp_path):
    async def scenario():
        # Small batches: many write jobs, two of them in flight at the I/O thread at a time.
        s = MessageStore(StoreConfig(tmp_path, mapped_file_size_commit_log=1 << 20, max_batch=50))
        await s.start()
        first = await asyncio.gather(*(s.put_message(Message("T", 0, f"ok{i}".encode())) for i in range(100)))
        assert all(r.status is PutMessageStatus.PUT_OK for r in first)
        # A real I/O error: the segment's descriptor now refers to the file opened read-only, so the
        # next pwritev fails with EBADF, while sends keep arriving (several batches in the pipeline).
        seg = s.commit_log.segments[-1]
        read_only = os.open(seg.path, os.O_RDONLY)
        os.dup2(read_only, seg.fd)
        os.close(read_only)
        later = await asyncio.gather(*(s.put_message(Message("T", 0, f"late{i}".encode())) for i in range(2000)))
        running, stats = s.running, dict(s.stats)
        await s.shutdown()
        again = store(tmp_path, segment=1 << 20)
        await again.start()
        bodies = [g.body for g in await again.get_messages("T", 0, 0, 10_000)]
        await again.shutdown()
        return later, running, stats, bodies

    later, running, stats, bodies = asyncio.run(scenario())
    statuses = {r.status for r in later}
    assert PutMessageStatus.PUT_OK not in statuses and PutMessageStatus.UNKNOWN_ERROR in statuses
    assert statuses <= {PutMessageStatus.UNKNOWN_ERROR, PutMessageStatus.SERVICE_NOT_AVAILABLE}
    assert not running  # fenced: the store takes no more writes until a restart recovers it
    assert stats["batches"] == 2 + 2000 // 50  # the later sends went through many jobs, not one
    assert bodies == [f"ok{i}".encode() for i in range(100)]


def test_illegal_messages_are_refused_without_writing(tmp_path):
    async def scenario():
        s = store(tmp_path, segment=4096)
        await s.start()
        too_big = await s.put_message(Message("T", 0, b"x" * 5000))
        bad_topic = await s.put_message(Message("", 0, b"x"))
        big_props = await s.put_message(Message("T", 0, b"x", {"k": "v" * 40000}))
        stopped = store(tmp_path / "other")
        not_running = await stopped.put_message(Message("T", 0, b"x"))
        assert s.commit_log.max_offset == 0
        await s.shutdown()
        return too_big, bad_topic, big_props, not_running

    too_big, bad_topic, big_props, not_running = asyncio.run(scenario())
    assert too_big.status is PutMessageStatus.MESSAGE_ILLEGAL and bad_topic.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert big_props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert not_running.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_consume_queues_are_rebuilt_from_the_commit_log(tmp_path):
    async def scenario():
        s = store(tmp_path)
        await s.start()
        await asyncio.gather(*(s.put_message(Message("T", 0, f"{i}".encode())) for i in range(50)))
        await s.shutdown()
        # Lose the consume queues entirely (and leave a stale one of a topic that never existed).
        for p in (tmp_path / "consumequeue" / "T").iterdir():
            p.write_bytes(b"\x00" * 7)
        (tmp_path / "consumequeue" / "Ghost").mkdir()
        (tmp_path / "consumequeue" / "Ghost" / "0").write_bytes(b"\x00" * 40)
        again = store(tmp_path)
        await again.start()
        got = await again.get_messages("T", 0, 0, 100)
        ghost = again.max_queue_offset("Ghost", 0)
        await again.shutdown()
        return got, ghost

    got, ghost = asyncio.run(scenario())
    assert sorted(int(g.body) for g in got) == list(range(50)) and ghost == 0


def test_kill_9_during_sync_flush_sends_loses_no_acknowledged_message(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.brokers.store_writer", str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    acked = []
    try:
        assert proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 60
        while len(acked) < 3000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ACK "):
                acked.append(line.split()[1])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert len(acked) >= 3000

    async def recovered_ids():
        s = store(tmp_path, FlushDiskType.SYNC_FLUSH)
        report = await s.start()
        ids = set()
        for q in range(4):
            for msg in await s.get_messages("Crash", q, 0, 10**6):
                ids.add(msg.properties["KEYS"])
        await s.shutdown()
        return ids, report

    ids, report = asyncio.run(recovered_ids())
    missing = set(acked) - ids
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    print(f"{len(acked)} acked before kill -9, {len(ids)} recovered, tail cut: {report.removed_bytes} bytes")


def test_replicated_bytes_whose_write_failed_are_dropped_before_the_next_session(tmp_path):
    """A slave's append whose write job failed after its HA session had ended left the bytes placed
    but never written: every later session's first transfer was refused ("replicated bytes at X, but
    the log ends at Y") until the broker restarted (the soak found a slave stuck so for minutes).
    drop_unwritten, which each session calls before its handshake, gives them up."""

    async def scenario():
        master = store(tmp_path / "master")
        await master.start()
        put = [await master.put_message(Message("T", 0, f"r{i}".encode())) for i in range(8)]
        five = put[5].physical_offset
        head, tail = await master.read_raw(0, five), await master.read_raw(five, 1 << 20)
        await master.shutdown()
        s = store(tmp_path / "slave")
        await s.start()
        await s.append_replicated([(0, head)])
        end = s.max_offset
        seg = s.commit_log.segments[-1]
        writable = os.dup(seg.fd)
        read_only = os.open(seg.path, os.O_RDONLY)
        os.dup2(read_only, seg.fd)  # the next pwritev fails with EBADF
        os.close(read_only)
        with pytest.raises(OSError):
            await s.append_replicated([(end, tail)])
        os.dup2(writable, seg.fd)  # the disk works again
        os.close(writable)
        stuck = s.commit_log.max_offset > s.max_offset
        dropped = await s.drop_unwritten()
        await s.append_replicated([(s.max_offset, tail)])
        s.set_confirm_offset(s.max_offset)
        bodies = [m.body for m in await s.get_messages("T", 0, 0, 100)]
        await s.shutdown()
        return stuck, dropped, len(tail), bodies

    stuck, dropped, tail_bytes, bodies = asyncio.run(scenario())
    assert stuck and dropped == tail_bytes
    assert bodies == [f"r{i}".encode() for i in range(8)]
