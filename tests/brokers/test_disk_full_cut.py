"""A slave whose disk fills up must keep its consume queues true to its commit log (soak seed 31337).

The soak's chain: the slave's replicated append failed (ENOSPC); the next HA session dropped the
bytes placed but never written (``drop_unwritten``). The cut itself went through, but the checkpoint
written after it failed on the full disk, so the rebuild of the consume queues and of the dispatch
position never ran: the store went on dispatching the master's next bytes as if they lay after the
dropped ones ("record at 12439 has queue offset 26 but rmq_sys_CONSUMER_META/0 is at 27; not
dispatched"), a second cut while the disk was still full moved it further off, and every entry after
that pointed at other bytes (``bad magic code``) while the dispatch position stalled, so the slave,
elected later, refused its own takeover cut.

Real stores on real files; the full disk is a window in which every write into a file fails with
ENOSPC (cutting still works: it frees space).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os

import pytest

from brokers.store import files
from brokers.store.message import Message, encode

from .test_cuts import copy_store, guard_lines

pytestmark = pytest.mark.unit


def master_log(count: int) -> list[tuple[int, bytes]]:
    """The master's records, (offset, bytes) each: one queue, queue offsets 0..count-1."""
    out, at = [], 0
    for i in range(count):
        data = encode(Message("T", 0, f"m{i}".encode() * 20), queue_offset=i, physical_offset=at, store_timestamp=1)
        out.append((at, data))
        at += len(data)
    return out


@contextlib.contextmanager
def disk_full(monkeypatch: pytest.MonkeyPatch, consume_queues_too: bool):
    """Writes into the commit log and the checkpoint fail with ENOSPC, and into the consume queues
    too unless the cut freed enough for their rebuild (``consume_queues_too`` False: the soak's case)."""

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_open = open

    def open_no_space(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            no_space()
        return real_open(file, mode, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "pwritev", no_space)
        if consume_queues_too:
            m.setattr(os, "pwrite", no_space)
        m.setattr(files, "open", open_no_space, raising=False)
        yield


@pytest.mark.parametrize(
    "consume_queues_too",
    [
        pytest.param(False, id="the-checkpoint-after-the-cut-fails"),
        pytest.param(True, id="the-rebuild-after-the-cut-fails-too"),
    ],
)
def test_a_slave_whose_disk_fills_up_keeps_every_consume_queue_entry_on_its_record(
    tmp_path, monkeypatch, caplog, consume_queues_too
):
    caplog.set_level(logging.WARNING)
    records = master_log(30)

    async def scenario():
        s = await copy_store(tmp_path)
        try:
            await s.append_replicated(records[:10])
            s.set_confirm_offset(s.max_offset)
            await s.settled()  # (the published entries are written before the disk fills up)
            with disk_full(monkeypatch, consume_queues_too):
                # The session's append fails; the next session drops what was placed, twice: the
                # disk is still full when the second session's first append is placed.
                with pytest.raises(OSError):
                    await s.append_replicated(records[10:13])
                with contextlib.suppress(OSError):
                    await s.drop_unwritten()
                with pytest.raises(OSError):
                    await s.append_replicated(records[10:20])
                with contextlib.suppress(OSError):
                    await s.drop_unwritten()
            # The disk has room again: a new session drops nothing more and copies the rest.
            await s.drop_unwritten()
            await s.append_replicated(records[10:])
            s.set_confirm_offset(s.max_offset)
            await s.settled()
            bodies = [m.body for m in await s.get_messages("T", 0, 0, 100)]
            return bodies, s.valid_end, s.max_offset
        finally:
            await s.shutdown()

    bodies, valid_end, max_offset = asyncio.run(scenario())
    undispatched = [r.getMessage() for r in caplog.records if "not dispatched" in r.getMessage()]
    assert not undispatched, undispatched
    assert valid_end == max_offset == records[-1][0] + len(records[-1][1]), "the dispatch position must reach the log's end"
    assert bodies == [f"m{i}".encode() * 20 for i in range(30)]
    assert not guard_lines(caplog)
