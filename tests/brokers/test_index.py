"""The message index (brokers/store/index.py, docs/messages.md §1): RocketMQ's index file byte for byte,
Java's String.hashCode, the native walk against the Python reference, and the store's queries on real
files — by unique key and by key over several files, by time, through collisions, after a restart, a
cut, a replica's split transfers and retention, and with the index off."""

from __future__ import annotations

import asyncio
import struct
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.broker import store_config
from brokers.config import ConfigInvalid, from_mapping
from brokers.store import codec
from brokers.store.commitlog import CommitLog
from brokers.store.cuts import CutCause
from brokers.store.index import IndexDisabled, IndexLayout, MessageIndex, file_name
from brokers.store.message import Message, blank, encode
from brokers.store.store import MessageStore, StoreConfig
from tests.brokers.test_codec import IMPLEMENTATIONS

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000  # a store timestamp (ms)
SEG = 64 * 1024
FOREVER = (0, 2**62)


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request, monkeypatch):
    """Each index walk present: the native one (where the codec is built) and the Python reference."""
    if request.param == "python":
        monkeypatch.setattr(codec, "index_records", codec.py_index_records)
    return request.param


def record(at: int, ts: int, props: dict[str, str], topic: str = "T", queue_offset: int = 0, sys_flag: int = 0) -> bytes:
    msg = Message(topic, 0, b"body", props, sys_flag=sys_flag)
    return encode(msg, queue_offset=queue_offset, physical_offset=at, store_timestamp=ts)


def log_of(specs: list[tuple[int, dict[str, str]]], start: int = 0, topic: str = "T") -> list[bytes]:
    """Records one after another from ``start``: (store timestamp, properties) each."""
    out, at = [], start
    for n, (ts, props) in enumerate(specs):
        out.append(record(at, ts, props, topic, queue_offset=n))
        at += len(out[-1])
    return out


def write_log(root: Path, data: bytes, segment: int = SEG) -> CommitLog:
    cl = CommitLog(root / "commitlog", segment)
    cl.write(cl.place_raw(0, data))
    return cl


def index_files(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


# --- the file, byte for byte ----------------------------------------------------------------------


def test_index_files_are_rocketmqs_layout_byte_for_byte(tmp_path, impl):
    """Hand-computed: Java's "T#a".hashCode() = 84*31^2 + 35*31 + 97 = 81906 (slot 81906 % 4 = 2), and
    "T#b", "T#c", "T#d" the next three (slots 3, 0, 1). Four slots, six entries: entry 0 is never used,
    so the first file takes five keys and the third record's goes to a second file, which starts at the
    first's end (its first time difference is measured from there: RocketMQ's IndexFile does so)."""
    r1, r2, r3 = log_of(
        [(T0, {"UNIQ_KEY": "a", "KEYS": "b c"}), (T0 + 2500, {"UNIQ_KEY": "d", "KEYS": "a"}), (T0 + 6700, {"UNIQ_KEY": "a"})]
    )
    p2, p3 = len(r1), len(r1) + len(r2)
    cl = write_log(tmp_path, r1 + r2 + r3)
    MessageIndex(tmp_path / "index", cl, IndexLayout(4, 6)).recover()

    head = struct.Struct(">qqqqii")
    entry = struct.Struct(">iqii")
    first = head.pack(T0, T0 + 2500, 0, p2, 4, 6)
    first += struct.pack(">4i", 3, 4, 5, 2)  # slots 0..3: the newest entry of T#c, T#d, T#a, T#b
    first += bytes(20)  # entry 0
    first += entry.pack(81906, 0, 0, 0) + entry.pack(81907, 0, 0, 0) + entry.pack(81908, 0, 0, 0)
    first += entry.pack(81909, p2, 2, 0) + entry.pack(81906, p2, 2, 1)  # T#a's second entry points at its first
    second = head.pack(T0 + 6700, T0 + 6700, p3, p3, 1, 2) + struct.pack(">4i", 0, 0, 1, 0) + bytes(20)
    second += entry.pack(81906, p3, 4, 0) + bytes(4 * 20)
    assert index_files(tmp_path) == [first, second]


@pytest.mark.parametrize(
    "text, java",
    [
        pytest.param("", 0, id="empty"),
        pytest.param("a", 97, id="one-char"),
        pytest.param("hello", 99162322, id="hello"),
        pytest.param("hello world", 1794106052, id="overflows-int"),
        pytest.param("Aa", 2112, id="Aa"),
        pytest.param("BB", 2112, id="BB-collides-with-Aa"),
        pytest.param("T#a", 81906, id="topic-hash-key"),
        pytest.param("é", 0xE9, id="latin-1-char"),
        pytest.param("日本", 26085 * 31 + 26412, id="cjk-chars"),
        pytest.param("😀", 0xD83D * 31 + 0xDE00, id="astral-char-as-its-surrogate-pair"),
        pytest.param("polygenelubricants", -(2**31), id="integer-min-value"),
    ],
)
def test_keys_hash_as_javas_string_hashcode(text, java):
    assert codec.java_hash(text) == java
    assert codec.index_hash(text) == (0 if java == -(2**31) else abs(java))


@pytest.mark.parametrize("key", ["plain", "ünï", "日本語", "😀x", "a" * 300])
def test_the_native_walk_hashes_keys_as_java_does(tmp_path, impl, key):
    cl = write_log(tmp_path, record(0, T0, {"KEYS": key}, topic="Tø"))
    MessageIndex(tmp_path / "index", cl, IndexLayout(1, 4)).recover()
    (data,) = index_files(tmp_path)
    assert struct.unpack_from(">i", data, 44 + 20)[0] == codec.index_hash(f"Tø#{key}")


# --- the native walk against the Python reference -----------------------------------------------------

keys = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=6)


@st.composite
def logs(draw) -> bytes:
    """Records with unique keys, keys (spaces, empty parts, any text), rolled-back transactions,
    clocks going back, and blank records ending a segment."""
    out, at = [], 0
    for n in range(draw(st.integers(1, 12))):
        props = {}
        if draw(st.booleans()):
            props["UNIQ_KEY"] = draw(keys)
        if draw(st.booleans()):
            props["KEYS"] = " ".join(draw(st.lists(keys, max_size=4)))
        ts = T0 + draw(st.integers(-3000, 10**7))
        sys_flag = draw(st.sampled_from([0, 0, 4, 8, 12]))
        topic = draw(st.sampled_from(["T", "Tö", "%RETRY%g_T"]))
        out.append(record(at, ts, props, topic, n, sys_flag))
        at += len(out[-1])
        if draw(st.integers(0, 5)) == 0:
            out.append(blank(64))
            at += 64
    return b"".join(out)


@settings(max_examples=60, deadline=None)
@given(data=logs(), slots=st.integers(1, 5), max_index=st.integers(2, 7))
def test_the_native_walk_writes_the_same_files_as_the_python_reference(data, slots, max_index):
    written = {}
    for name in IMPLEMENTATIONS:
        fn = codec.py_index_records if name == "python" else codec.index_records
        with tempfile.TemporaryDirectory() as tmp, mock.patch.object(codec, "index_records", fn):
            root = Path(tmp)
            index = MessageIndex(root / "index", write_log(root, data), IndexLayout(slots, max_index))
            index.recover()
            written[name] = (index_files(root), index.position)
            index.close()
    assert written["python"][1] == len(data)
    assert len(set(map(repr, written.values()))) == 1


@settings(max_examples=60, deadline=None)
@given(data=logs(), cut=st.integers(0, 400), skip=st.integers(0, 2), garbage=st.booleans())
def test_the_native_walk_stops_where_the_reference_does(data, cut, skip, garbage):
    """A record cut short (a replica's transfer), bytes that are no record, a resumed record."""
    data = data[: max(0, len(data) - cut)] + (b"\x00\x00\x01\x00garbage!" if garbage else b"")
    layout = IndexLayout(3, 5)
    answers = set()
    for name in IMPLEMENTATIONS:
        fn = codec.py_index_records if name == "python" else codec.index_records
        file = bytearray(layout.file_size)
        answers.add((fn(file, layout.slots, layout.max_index, data, 1000, 0, skip), bytes(file)))
    assert len(answers) == 1


# --- the store's queries ------------------------------------------------------------------------------


def store(root: Path, slots: int = 64, max_index: int = 16, *, index: bool = True, segment: int = SEG) -> MessageStore:
    config = StoreConfig(
        root, mapped_file_size_commit_log=segment, max_hash_slot_num=slots, max_index_num=max_index, message_index_enable=index
    )
    return MessageStore(config)


async def replica(root: Path, **kw) -> MessageStore:
    """A started store that takes replicated bytes, as a slave's: the records' times are the test's."""
    s = store(root, **kw)
    await s.start()
    s.set_follow_max(False)
    return s


def message(n: int, keys: str | None = None, topic: str = "T") -> Message:
    props = {"UNIQ_KEY": f"U{n:04d}"} | ({"KEYS": keys} if keys else {})
    return Message(topic, n % 2, f"m{n}".encode(), props)


def test_messages_are_found_by_unique_key_and_by_key_across_several_index_files(tmp_path, impl):
    async def scenario():
        s = store(tmp_path, max_index=16)  # 15 keys a file
        await s.start()
        results = await s.put_messages([message(n, f"order-{n % 5} all") for n in range(60)])
        offsets = [r.physical_offset for r in results]
        assert len(list((tmp_path / "index").iterdir())) >= 180 // 15
        assert await s.query_index("T", "U0007", *FOREVER, 32) == [offsets[7]]
        assert await s.query_index("T", "order-3", *FOREVER, 64) == offsets[3::5][::-1]  # newest first
        assert await s.query_index("T", "all", *FOREVER, 64) == offsets[::-1]
        assert await s.query_index("T", "all", *FOREVER, 10) == offsets[::-1][:10]
        assert await s.query_index("Other", "U0007", *FOREVER, 32) == []  # the topic is part of the key
        assert await s.query_index("T", "order", *FOREVER, 32) == []
        await s.shutdown()

    asyncio.run(scenario())


def test_a_query_answers_only_records_stored_within_its_time_range(tmp_path, impl):
    specs = [(T0 + 500 * n, {"KEYS": "k"}) for n in range(20)]  # one every half second
    records = log_of(specs)
    offsets = [sum(map(len, records[:n])) for n in range(20)]

    async def scenario():
        s = await replica(tmp_path)
        await s.append_replicated([(0, b"".join(records))])
        assert await s.query_index("T", "k", T0 + 1200, T0 + 3000, 64) == offsets[3:7][::-1]  # 1500..3000 ms
        assert await s.query_index("T", "k", T0 + 1000, T0 + 1000, 64) == [offsets[2]]
        assert await s.query_index("T", "k", T0 + 1001, T0 + 1499, 64) == []
        assert await s.query_index("T", "k", T0 - 5000, T0 - 1, 64) == []
        await s.shutdown()

    asyncio.run(scenario())


def test_colliding_keys_and_slots_are_told_apart_by_reading_the_records(tmp_path, impl):
    """One slot: every key in one chain; "Aa" and "BB" have the same Java hash."""

    async def scenario():
        s = store(tmp_path, slots=1)
        await s.start()
        results = await s.put_messages([message(0, "Aa"), message(1, "BB"), message(2, "Aa x"), message(3, "BB", topic="U")])
        aa, bb, aa2, other = (r.physical_offset for r in results)
        assert await s.query_index("T", "Aa", *FOREVER, 32) == [aa2, aa]
        assert await s.query_index("T", "BB", *FOREVER, 32) == [bb]
        assert await s.query_index("U", "BB", *FOREVER, 32) == [other]
        assert await s.query_index("T", "x", *FOREVER, 32) == [aa2]
        await s.shutdown()

    asyncio.run(scenario())


def test_a_restart_indexes_the_tail_the_index_had_not_taken(tmp_path, impl):
    """Records written while the index was off are indexed from the newest file's endPhyOffset at the
    next start; a record indexed twice (RocketMQ re-indexes the one at endPhyOffset) is answered once."""

    async def scenario():
        s = store(tmp_path)
        await s.start()
        before = await s.put_messages([message(n, "k") for n in range(10)])
        await s.shutdown()
        s = store(tmp_path, index=False)
        await s.start()
        after = await s.put_messages([message(n, "k") for n in range(10, 25)])
        await s.shutdown()
        s = store(tmp_path)
        await s.start()
        want = [r.physical_offset for r in before + after][::-1]
        assert await s.query_index("T", "k", *FOREVER, 64) == want
        assert await s.query_index("T", "U0024", *FOREVER, 64) == [after[-1].physical_offset]
        await s.shutdown()

    asyncio.run(scenario())


def test_a_cut_leaves_no_answer_from_the_bytes_it_cut(tmp_path, impl):
    """A replica's forked tail is cut and copied again with other records at the same offsets: the old
    keys find nothing, the new ones their records (the index files past the cut are gone)."""
    head = log_of([(T0, {"KEYS": "kept"})] * 3)
    at = sum(map(len, head))
    forked = log_of([(T0 + 1000, {"KEYS": f"old{n} gone"}) for n in range(40)], start=at)
    again = log_of([(T0 + 2000, {"KEYS": f"new{n}"}) for n in range(40)], start=at)

    async def scenario():
        s = await replica(tmp_path, max_index=8)
        await s.append_replicated([(0, b"".join(head + forked))])
        assert len(await s.query_index("T", "gone", *FOREVER, 64)) == 40
        cut = s.cut_evidence(CutCause.FORK, at, "test", own_epoch=(1, 0), master_epoch=(2, at))
        await s.truncate(cut)
        assert await s.query_index("T", "gone", *FOREVER, 64) == []
        await s.append_replicated([(at, b"".join(again))])
        for n in (0, 17, 39):
            assert await s.query_index("T", f"old{n}", *FOREVER, 64) == []
            assert await s.query_index("T", f"new{n}", *FOREVER, 64) == [at + sum(map(len, again[:n]))]
        assert len(await s.query_index("T", "kept", *FOREVER, 64)) == 3
        await s.shutdown()

    asyncio.run(scenario())


def test_a_replica_copied_again_from_its_masters_first_file_keeps_no_old_answer(tmp_path, impl):
    old = log_of([(T0, {"KEYS": "old"})] * 30)
    new = log_of([(T0 + 1000, {"KEYS": "new"})] * 5, start=SEG * 3)

    async def scenario():
        s = await replica(tmp_path, max_index=8)
        await s.append_replicated([(0, b"".join(old))])
        cut = s.cut_evidence(CutCause.RESTART_FROM_MASTER, s.min_offset, "test", master_min=SEG * 3)
        await s.restart_at(SEG * 3, cut)
        assert len(list((tmp_path / "index").iterdir())) == 1  # all below the log but the newest (RocketMQ's rule)
        await s.append_replicated([(SEG * 3, b"".join(new))])
        assert await s.query_index("T", "old", *FOREVER, 64) == []
        assert len(await s.query_index("T", "new", *FOREVER, 64)) == 5
        await s.shutdown()

    asyncio.run(scenario())


def test_a_full_disk_holds_the_index_back_never_the_sends(tmp_path, monkeypatch):
    """The index's blocks are allocated before they are written (a full disk is an OSError, not a fault
    on a mapped page): sends go on, and the index catches up from the log once the disk has room."""
    import errno

    from brokers.store import index as index_module

    real = index_module.os.posix_fallocate
    full = True

    def fallocate(fd, offset, length):
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, length)

    monkeypatch.setattr(index_module.os, "posix_fallocate", fallocate)
    monkeypatch.setattr(index_module, "RETRY_BEHIND_S", 0.0)

    async def scenario():
        nonlocal full
        s = store(tmp_path)
        await s.start()
        results = await s.put_messages([message(n, "k") for n in range(10)])
        assert {r.status.name for r in results} == {"PUT_OK"}
        assert await s.query_index("T", "k", *FOREVER, 64) == []
        full = False
        await s.put_messages([message(10, "k")])
        assert len(await s.query_index("T", "k", *FOREVER, 64)) == 11
        await s.shutdown()

    asyncio.run(scenario())


def test_a_replica_indexes_a_record_split_between_transfers_once_it_is_whole(tmp_path, impl):
    records = log_of([(T0, {"UNIQ_KEY": f"U{n}", "KEYS": "k"}) for n in range(5)])
    data = b"".join(records)
    split = len(records[0]) + len(records[1]) + 30  # inside the third record

    async def scenario():
        s = await replica(tmp_path)
        await s.append_replicated([(0, data[:split])])
        assert await s.query_index("T", "k", *FOREVER, 64) == [len(records[0]), 0]
        assert await s.query_index("T", "U2", *FOREVER, 64) == []
        await s.append_replicated([(split, data[split:])])
        assert await s.query_index("T", "U2", *FOREVER, 64) == [split - 30]
        assert len(await s.query_index("T", "k", *FOREVER, 64)) == 5
        await s.shutdown()

    asyncio.run(scenario())


def test_retention_deletes_the_index_files_below_the_log(tmp_path, impl):
    async def scenario():
        s = store(tmp_path, max_index=8, segment=4096)
        await s.start()
        for n in range(120):
            await s.put_messages([message(n, "k")])
        files = sorted(p.name for p in (tmp_path / "index").iterdir())
        while len(s.commit_log.segments) > 2:
            await s.delete_oldest_file()
        kept = sorted(p.name for p in (tmp_path / "index").iterdir())
        assert kept == files[len(files) - len(kept) :] and len(kept) < len(files) / 2
        answers = await s.query_index("T", "k", *FOREVER, 200)
        assert answers and min(answers) >= s.min_offset
        assert await s.query_index("T", "U0119", *FOREVER, 2) != []
        await s.shutdown()

    asyncio.run(scenario())


def test_an_index_file_of_another_layout_is_rebuilt_from_the_log(tmp_path):
    async def scenario():
        s = store(tmp_path, slots=64)
        await s.start()
        await s.put_messages([message(n, "k") for n in range(10)])
        await s.shutdown()
        s = store(tmp_path, slots=32)
        await s.start()
        assert len(await s.query_index("T", "k", *FOREVER, 64)) == 10
        await s.shutdown()

    asyncio.run(scenario())


def test_with_the_index_off_nothing_is_written_and_a_query_says_why(tmp_path):
    async def scenario():
        s = store(tmp_path, index=False)
        await s.start()
        await s.put_messages([message(0, "k")])
        with pytest.raises(IndexDisabled, match="messageIndexEnable=false"):
            await s.query_index("T", "k", *FOREVER, 1)
        await s.shutdown()

    asyncio.run(scenario())
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(
    "now, after, name",
    [
        pytest.param(0, None, None, id="creation-time"),
        pytest.param(0, "99991231235959998", "99991231235959999", id="never-before-the-newest-file"),
    ],
)
def test_index_files_are_named_by_creation_time(now, after, name):
    import time

    got = file_name(now, after)
    assert got == (name or time.strftime("%Y%m%d%H%M%S", time.localtime(0)) + "000")


# --- broker.conf ------------------------------------------------------------------------------------

BASE = {"brokerName": "b", "storePathRootDir": "/tmp/x", "controlPlaneUrl": "http://cp", "controlPlaneToken": "t"}


def test_the_index_keys_default_as_rocketmqs_and_reach_the_store():
    c = from_mapping(dict(BASE))
    assert (c.messageIndexEnable, c.maxHashSlotNum, c.maxIndexNum) == (True, 5_000_000, 20_000_000)
    s = store_config(from_mapping(BASE | {"messageIndexEnable": "false", "maxHashSlotNum": "7", "maxIndexNum": "9"}))
    assert (s.message_index_enable, s.max_hash_slot_num, s.max_index_num) == (False, 7, 9)


@pytest.mark.parametrize(
    "key, value, problem",
    [
        pytest.param("maxHashSlotNum", "0", "maxHashSlotNum: must be between 1 and 2147483647", id="no-slots"),
        pytest.param("maxIndexNum", "1", "maxIndexNum: must be between 2", id="no-entry-besides-entry-0"),
        pytest.param("maxIndexNum", str(2**31), "maxIndexNum: must be between 2", id="over-javas-int"),
    ],
)
def test_bad_index_keys_are_refused(key, value, problem):
    with pytest.raises(ConfigInvalid) as refused:
        from_mapping(BASE | {key: value})
    assert any(p.startswith(problem) for p in refused.value.problems)
