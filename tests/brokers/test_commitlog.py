"""Commit-log segments, roll, and crash recovery (a torn tail cut physically)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.store import message as m
from brokers.store.commitlog import CommitLog

pytestmark = pytest.mark.unit

SEGMENT = 4096


def write(log: CommitLog, bodies: list[bytes], topic: str = "T") -> list[int]:
    """Append records of these bodies; their physical offsets."""
    msgs = [m.Message(topic, 0, b) for b in bodies]
    sizes = [m.record_size(topic.encode(), b, b"") for b in bodies]
    offsets: list[int] = []

    def encode(start: int, stop: int, physical: int) -> bytes:  # a run: records [start, stop) from physical
        run = []
        for i in range(start, stop):
            offsets.append(physical)
            run.append(m.encode(msgs[i], queue_offset=i, physical_offset=physical, store_timestamp=1))
            physical += sizes[i]
        return b"".join(run)

    log.append_batch(sizes, encode)
    return offsets


def test_records_roll_into_a_new_segment_with_a_blank_tail(tmp_path):
    log = CommitLog(tmp_path, SEGMENT)
    size = m.record_size(b"T", b"x" * 1000, b"")  # 1,092 bytes: 3 fit in a 4,096-byte segment
    offsets = write(log, [b"x" * 1000] * 9)
    log.flush()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{i * SEGMENT:020d}" for i in range(3)]
    assert offsets[3] == SEGMENT and offsets[6] == 2 * SEGMENT
    first = (tmp_path / names[0]).read_bytes()
    assert len(first) == SEGMENT and m.decode(first, 3 * size) == m.Blank(SEGMENT - 3 * size)
    for off in offsets:
        assert log.read_message(off, size).body == b"x" * 1000
    report = CommitLog(tmp_path, SEGMENT).recover()
    assert report.messages == 9 and report.truncated_at is None and report.max_offset == log.max_offset


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(st.binary(min_size=0, max_size=700), min_size=1, max_size=12), data=st.data())
def test_recovery_after_a_cut_at_any_byte_keeps_exactly_the_whole_records(tmp_path_factory, bodies, data):
    root = tmp_path_factory.mktemp("log")
    log = CommitLog(root, SEGMENT)
    offsets = write(log, bodies)
    log.flush()
    ends = [off + m.record_size(b"T", b, b"") for off, b in zip(offsets, bodies, strict=True)]
    total = log.max_offset
    log.close()
    cut = data.draw(st.integers(0, total), label="cut")
    # Simulate a crash that tore the log at `cut`: drop later segments, shorten the one holding it.
    for p in sorted(root.iterdir()):
        start = int(p.name)
        if start >= cut:
            p.unlink() if start > 0 else os.truncate(p, 0)
        elif cut < start + SEGMENT:
            os.truncate(p, cut - start)
    recovered = CommitLog(root, SEGMENT)
    seen = []
    report = recovered.recover(lambda off, size, msg: seen.append((off, msg.body)))
    whole = [(off, b) for off, b, end in zip(offsets, bodies, ends, strict=True) if end <= cut]
    assert seen == whole
    expected_end = whole[-1][0] + m.record_size(b"T", whole[-1][1], b"") if whole else 0
    # The end may sit after a blank that still fits before the cut; it never cuts into a whole record.
    assert expected_end <= report.max_offset <= cut
    # The cut is physical: reopening finds nothing beyond it, and appends continue cleanly.
    recovered.close()
    again = CommitLog(root, SEGMENT)
    assert again.max_offset == report.max_offset
    more = write(again, [b"after"])
    assert again.read_message(more[0], m.record_size(b"T", b"after", b"")).body == b"after"
    assert CommitLog(root, SEGMENT).recover().messages == len(whole) + 1


def test_garbage_after_the_last_record_is_cut_and_fsynced(tmp_path):
    log = CommitLog(tmp_path, SEGMENT)
    write(log, [b"a", b"b"])
    log.flush()
    end = log.max_offset
    with open(tmp_path / f"{0:020d}", "ab") as f:
        f.write(b"\xde\xad\xbe\xef" * 5)
    log.close()
    report = CommitLog(tmp_path, SEGMENT).recover()
    assert report.max_offset == end and report.truncated_at == end and report.removed_bytes == 20
    assert os.path.getsize(tmp_path / f"{0:020d}") == end


def test_cutting_the_last_record_at_every_byte_recovers_the_records_before_it(tmp_path):
    import shutil

    src = tmp_path / "src"
    log = CommitLog(src, SEGMENT)
    bodies = [b"first", b"second" * 20, b"last-record-" * 30]
    offsets = write(log, bodies)
    log.flush()
    last_start, last_end = offsets[-1], log.max_offset
    log.close()
    for cut in range(last_start, last_end + 1):
        root = tmp_path / f"cut{cut}"
        shutil.copytree(src, root)
        os.truncate(root / f"{0:020d}", cut)
        seen = []
        report = CommitLog(root, SEGMENT).recover(lambda off, size, msg, seen=seen: seen.append(msg.body))
        if cut == last_end:
            assert seen == bodies and report.truncated_at is None
        else:
            assert seen == bodies[:-1] and report.max_offset == last_start
            assert os.path.getsize(root / f"{0:020d}") == last_start  # cut physically
        shutil.rmtree(root)
