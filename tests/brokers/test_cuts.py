"""The acknowledged-data guard (brokers/store/cuts.py): every cut of a log names a cause its evidence
proves, or nothing is cut and the refusal is logged with the marker. Tables of the causes, then the
store's cuts on real files: a takeover, a recovery, a cancelled replicated write, a repair."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

import pytest

from brokers.store.cuts import MARKER, Cut, CutCause, CutRefused, TailShape, describe, judge, tail_shape
from brokers.store.message import Message, encode
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def record(body: bytes = b"x" * 100, at: int = 0) -> bytes:
    return encode(Message("T", 0, body), queue_offset=0, physical_offset=at, store_timestamp=1)


REC = record()


@pytest.mark.parametrize(
    "head, length, rest_zero, shape",
    [
        pytest.param(b"", 0, True, TailShape.EMPTY, id="nothing-after-the-cut"),
        pytest.param(bytes(300), 300, True, TailShape.ZEROS, id="never-written-zeros"),
        pytest.param(REC[:50], 50, True, TailShape.TORN, id="a-record-cut-short"),
        pytest.param(REC[:5], 5, True, TailShape.TORN, id="a-few-bytes-of-a-header"),
        pytest.param(REC, len(REC), True, TailShape.RECORDS, id="a-whole-record"),
        pytest.param(REC + REC[:30], len(REC) + 30, True, TailShape.RECORDS, id="a-whole-record-then-a-torn-one"),
        pytest.param(bytes(300) + REC, 300 + len(REC), True, TailShape.RECORDS, id="a-hole-then-records"),
        pytest.param(bytes(64), 64 + len(REC), False, TailShape.RECORDS, id="zeros-then-data-beyond-the-head"),
        pytest.param(b"\xde\xad\xbe\xef" * 5, 20, True, TailShape.RECORDS, id="garbage-is-not-a-torn-record"),
    ],
)
def test_the_shape_of_the_bytes_after_a_cut(head, length, rest_zero, shape):
    assert tail_shape(head, length, rest_zero) is shape


def cut(cause: CutCause, **evidence) -> Cut:
    return Cut(cause, 1000, 5000, 900, **evidence)


@pytest.mark.parametrize(
    "the_cut, allowed",
    [
        pytest.param(cut(CutCause.FORK, own_epoch=(28, 0), master_epoch=(29, 1000)), True, id="fork-epochs-differ"),
        pytest.param(cut(CutCause.FORK, own_epoch=(29, 900), master_epoch=(29, 1000)), True, id="fork-same-epoch-other-start"),
        pytest.param(cut(CutCause.FORK, own_epoch=(28, 0), master_epoch=None), True, id="fork-master-has-no-byte-there"),
        pytest.param(cut(CutCause.FORK, own_epoch=(28, 0), master_epoch=(28, 0)), False, id="fork-where-both-agree-refused"),
        pytest.param(cut(CutCause.TORN_TAIL, tail=TailShape.TORN), True, id="torn-tail-after-a-crash"),
        pytest.param(cut(CutCause.TORN_TAIL, tail=TailShape.ZEROS), True, id="zeros-after-a-crash"),
        pytest.param(cut(CutCause.TORN_TAIL, tail=TailShape.RECORDS), False, id="records-after-a-hole-refused"),
        pytest.param(cut(CutCause.PARTIAL_RECORD, tail=TailShape.TORN), True, id="takeover-partial-record"),
        pytest.param(cut(CutCause.PARTIAL_RECORD, tail=TailShape.RECORDS), False, id="takeover-stale-position-refused"),
        pytest.param(cut(CutCause.UNWRITTEN), True, id="placed-never-written"),
        pytest.param(cut(CutCause.RESTART_FROM_MASTER, master_min=5000), True, id="retention-case-1-1"),
        pytest.param(cut(CutCause.RESTART_FROM_MASTER, master_min=4000), False, id="restart-inside-masters-log-refused"),
        pytest.param(Cut(CutCause.NO_EPOCHS, 4096, 4096, 0), True, id="an-empty-log-has-nothing-to-cut"),
        pytest.param(cut(CutCause.NO_EPOCHS), False, id="bytes-without-epochs-refused"),
    ],
)
def test_a_cut_is_allowed_only_for_a_cause_its_evidence_proves(the_cut, allowed):
    verdict = judge(the_cut)
    assert verdict.allowed is allowed, verdict.why
    line = describe(the_cut, verdict)
    assert (MARKER in line) is (not allowed)
    c = the_cut
    assert (
        f"cause={c.cause} at={c.at} end={c.end} bytes={c.bytes} confirm={c.confirm} allowed={'yes' if allowed else 'no'}" in line
    )


def store(root, segment: int = SEG) -> MessageStore:
    return MessageStore(StoreConfig(root, mapped_file_size_commit_log=segment))


async def copy_store(root) -> MessageStore:
    """A started store that takes replicated bytes as a slave's does (entries parked until confirmed)."""
    s = store(root)
    await s.start()
    s.set_follow_max(False)
    return s


def guard_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]


@pytest.mark.log_guard_expected
def test_a_takeover_never_cuts_whole_records_behind_a_stale_position(tmp_path, caplog):
    """A copy holding a hole (zeros shipped by a master that had one) and then whole records: the
    position where records stopped being readable is not a partial record. Nothing is cut, and the
    refusal is logged with the marker."""
    caplog.set_level(logging.WARNING)

    async def scenario():
        s = await copy_store(tmp_path)
        first = record(b"a" * 100, 0)
        hole = bytes(500)
        after = b"".join(record(b"b" * 100, len(first) + len(hole) + i * len(REC)) for i in range(5))
        await s.append_replicated([(0, first), (len(first), hole), (len(first) + len(hole), after)])
        end = s.max_offset
        cut = await s.cut_partial_record()
        return cut, end, s.max_offset, s.valid_end

    cut, before, after, valid = asyncio.run(scenario())
    assert cut == 0 and after == before and valid < before
    lines = guard_lines(caplog)
    assert any("replicated bytes at" in line for line in lines)
    assert any("cause=PARTIAL_RECORD" in line and "allowed=no" in line for line in lines)


def test_a_takeover_cuts_a_copy_that_ends_inside_a_record(tmp_path, caplog):
    caplog.set_level(logging.WARNING)

    async def scenario():
        s = await copy_store(tmp_path)
        whole = record(b"a" * 100, 0)
        torn = record(b"b" * 100, len(whole))[:60]
        await s.append_replicated([(0, whole + torn)])
        cut = await s.cut_partial_record()
        return cut, s.max_offset, len(whole)

    cut, end, whole = asyncio.run(scenario())
    assert cut == 60 and end == whole
    assert any("log cut: cause=PARTIAL_RECORD" in r.getMessage() for r in caplog.records)
    assert not guard_lines(caplog)


@pytest.mark.log_guard_expected
def test_recovery_refuses_to_cut_records_behind_a_hole(tmp_path, caplog):
    """A crash leaves a torn tail; a hole followed by whole records is no crash's doing: the store
    does not start (an operator must look) rather than throw the records away."""
    caplog.set_level(logging.WARNING)
    (tmp_path / "commitlog").mkdir()
    first = record(b"a" * 100, 0)
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(first + bytes(300) + record(b"b" * 100, len(first) + 300))

    async def scenario():
        s = store(tmp_path)
        with pytest.raises(CutRefused):
            await s.start()

    asyncio.run(scenario())
    assert os.path.getsize(tmp_path / "commitlog" / f"{0:020d}") == len(first) + 300 + len(REC)  # untouched
    assert any("cause=TORN_TAIL" in line for line in guard_lines(caplog))


def test_recovery_cuts_a_torn_tail(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    (tmp_path / "commitlog").mkdir()
    first = record(b"a" * 100, 0)
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(first + record(b"b" * 100, len(first))[:70])

    async def scenario():
        s = store(tmp_path)
        report = await s.start()
        await s.shutdown()
        return report

    report = asyncio.run(scenario())
    assert report.max_offset == len(first) and report.removed_bytes == 70
    assert any("log cut: cause=TORN_TAIL" in r.getMessage() for r in caplog.records)


def test_a_replicated_write_still_lands_when_its_caller_is_cancelled(tmp_path):
    """A role change cancels the copy while its write waits for the I/O thread: the write must still
    happen (an executor job cancelled before it starts never runs, which left bytes placed, never
    written, and the next master's records after a hole of zeros)."""

    async def scenario():
        s = await copy_store(tmp_path)
        busy = threading.Event()
        blocker = asyncio.get_running_loop().run_in_executor(s._io, busy.wait, 30)
        data = b"".join(record(b"c" * 100, i * len(REC)) for i in range(10))
        append = asyncio.ensure_future(s.append_replicated([(0, data)]))
        await asyncio.sleep(0.05)
        append.cancel()
        busy.set()
        await blocker
        await s.settled()
        placed, written = s.commit_log.max_offset, s.max_offset
        await s.shutdown()
        return placed, written, len(data)

    placed, written, size = asyncio.run(scenario())
    assert placed == written == size
    assert (tmp_path / "commitlog" / f"{0:020d}").read_bytes()[:4] != bytes(4)


def test_a_store_stopped_by_a_failed_write_takes_writes_again_after_repair(tmp_path, caplog):
    caplog.set_level(logging.WARNING)

    async def scenario():
        s = store(tmp_path, 1 << 20)
        await s.start()
        ok = await s.put_messages([Message("T", 0, f"ok{i}".encode()) for i in range(10)])
        seg = s.commit_log.segments[-1]
        writable = os.dup(seg.fd)
        read_only = os.open(seg.path, os.O_RDONLY)
        os.dup2(read_only, seg.fd)  # the next pwritev fails with EBADF
        os.close(read_only)
        failed = await s.put_messages([Message("T", 0, b"lost")])
        stopped = s.failed.is_set() and not s.running
        os.dup2(writable, seg.fd)  # the disk works again
        os.close(writable)
        dropped = await s.repair()
        again = await s.put_messages([Message("T", 0, f"again{i}".encode()) for i in range(5)])
        bodies = [m.body for m in await s.get_messages("T", 0, 0, 100)]
        await s.shutdown()
        return ok, failed, stopped, dropped, again, bodies, s.failed.is_set()

    ok, failed, stopped, dropped, again, bodies, still_failed = asyncio.run(scenario())
    assert {r.status for r in ok} == {r.status for r in again} == {PutMessageStatus.PUT_OK}
    assert failed[0].status is PutMessageStatus.UNKNOWN_ERROR and stopped and not still_failed
    assert dropped > 0
    assert bodies == [f"ok{i}".encode() for i in range(10)] + [f"again{i}".encode() for i in range(5)]
    assert any("log cut: cause=UNWRITTEN" in r.getMessage() for r in caplog.records)


def test_a_transfer_ending_inside_a_record_header_is_no_alarm(tmp_path, caplog):
    """A record's size field starts with zero bytes: a transfer that ends one or two bytes into a
    header must wait for the rest, not be taken for a hole (the first soak with the guard logged four
    such false alarms)."""
    caplog.set_level(logging.WARNING)

    async def scenario():
        data = b"".join(record(b"d" * 100, i * len(REC)) for i in range(3))
        for split in (len(REC) + 1, len(REC) + 2, len(REC) + 7):
            s = await copy_store(tmp_path / str(split))
            await s.append_replicated([(0, data[:split])])
            await s.append_replicated([(split, data[split:])])
            await s.shutdown()
            assert s.valid_end == s.max_offset == len(data)

    asyncio.run(scenario())
    assert not guard_lines(caplog)
