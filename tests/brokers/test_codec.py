"""The store's codec: the native module (brokers/store/_codec.c) against the pure-Python reference.

Both must give the same refusals, the same record bytes, the same results and the same consume-queue
entries for any send; and the records must decode back to the messages sent. The native module is
optional (a machine without a C compiler runs the Python one): every check of a codec's behaviour
runs against each implementation present, and the native one must be present wherever a C compiler is.
The C code has no limit or message of its own: it enforces what codec.configure() hands it.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import shutil
import sys
import sysconfig
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.store import codec
from brokers.store import message as m
from brokers.store.consumequeue import ENTRY, ConsumeQueues, tags_code
from brokers.store.results import PutMessageStatus

pytestmark = pytest.mark.unit

LIMIT = 64 * 1024


def c_compiler() -> str | None:
    """The compiler the editable install builds extensions with, if this machine has it."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return shutil.which(cc[0]) if cc else None


def native():
    from brokers.store import _codec  # not built: `make venv` (pip install -e .) compiles it

    assert _codec.ABI == codec.NATIVE_ABI
    return _codec


class Impl:
    """One codec implementation under test."""

    def __init__(self, name: str):
        self.name = name
        module = native() if name == "native" else None
        self.prepare = module.prepare if module else codec.py_prepare
        self.encode_run = module.encode_run if module else codec.py_encode_run


IMPLEMENTATIONS = ["python", "native"] if codec.IMPLEMENTATION == "native" else ["python"]


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request) -> Impl:
    return Impl(request.param)


def test_the_native_codec_is_in_use_wherever_a_c_compiler_is():
    if c_compiler() is None:  # the optional part: the store runs on the Python codec, and says so
        assert codec.IMPLEMENTATION == "python" and codec.prepare is codec.py_prepare
        return
    assert native() is not None, "a C compiler is here but brokers/store/_codec.c is not built: `make venv`"
    assert codec.IMPLEMENTATION == "native" and codec.prepare is native().prepare
    assert codec.NATIVE_CRC, "isal's crc32_gzip_refl was not found: CRCs would be computed holding the GIL"


def test_without_the_native_module_the_codec_falls_back_to_python_and_says_so(monkeypatch, caplog):
    """What a machine without a C compiler runs: the module cannot be imported, so codec.py (loaded
    afresh here) picks the Python functions and warns; test_store.py runs a store on them."""
    import brokers.store

    monkeypatch.delenv("RMQ_STORE_CODEC", raising=False)
    monkeypatch.setitem(sys.modules, "brokers.store._codec", None)  # as if never built
    if hasattr(brokers.store, "_codec"):
        monkeypatch.delattr(brokers.store, "_codec")
    spec = importlib.util.spec_from_file_location("brokers.store.codec_without_c", codec.__file__)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    with caplog.at_level(logging.WARNING, logger="brokers.store.codec_without_c"):
        spec.loader.exec_module(fresh)
    assert fresh.IMPLEMENTATION == "python" and not fresh.NATIVE_CRC
    assert fresh.prepare is fresh.py_prepare and fresh.encode_run is fresh.py_encode_run
    assert "native codec is not built" in caplog.text  # the operator is told why it is slower
    records, rejects = fresh.prepare([m.Message("T", 0, b"one"), m.Message("", 0, b"bad")], LIMIT)
    assert [r[0].body for r in records] == [b"one"] and rejects == [(1, "MESSAGE_ILLEGAL", "topic length must be 1..127 bytes")]


class Subclassed(m.Message):  # read through getattr, not the slot offsets of an exact Message
    __slots__ = ()


texts = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)  # not the separators
hosts = st.tuples(
    st.sampled_from(["127.0.0.1", "10.1.2.3", "255.255.255.255", "host.example", "1.2.3", ""]), st.integers(-(2**31), 2**31 - 1)
)
int32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def messages(draw):
    props = draw(
        st.dictionaries(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "ü"]), st.one_of(texts, st.integers(-5, 5)), max_size=3)
    )
    cls = draw(st.sampled_from([m.Message, m.Message, Subclassed]))
    return cls(
        topic=draw(st.sampled_from(["T", "Topic-ä", "x" * 127])),
        queue_id=draw(st.integers(0, 3)),
        body=draw(st.one_of(st.binary(max_size=300), st.binary(max_size=50).map(bytearray))),
        properties=props,
        flag=draw(int32),
        sys_flag=draw(int32),
        born_timestamp=draw(st.integers(-(2**63), 2**63 - 1)),
        born_host=draw(hosts),
        store_host=draw(hosts),
        reconsume_times=draw(int32),
        prepared_transaction_offset=draw(st.integers(0, 2**63 - 1)),
    )


def illegal():
    """Messages every codec must refuse, with the refusal expected."""
    ok = dict(topic="T", queue_id=0, body=b"x")
    cases = [
        (dict(ok, topic=""), "MESSAGE_ILLEGAL", "topic length"),
        (dict(ok, topic="x" * 128), "MESSAGE_ILLEGAL", "topic length"),
        (dict(ok, topic=5), "MESSAGE_ILLEGAL", "topic must be a string"),
        (dict(ok, topic="bad\udc80"), "MESSAGE_ILLEGAL", "valid UTF-8"),
        (dict(ok, properties={"k": "v" * 40000}), "PROPERTIES_SIZE_EXCEEDED", "properties exceed"),
        (dict(ok, properties={"k": "\udc80"}), "MESSAGE_ILLEGAL", "properties must be valid UTF-8"),
        (dict(ok, properties=[("k", "v")]), "MESSAGE_ILLEGAL", "properties must be a mapping"),
        (dict(ok, body="text"), "MESSAGE_ILLEGAL", "body must be bytes"),
        (dict(ok, body=memoryview(b"x")), "MESSAGE_ILLEGAL", "body must be bytes"),
        (dict(ok, queue_id=-1), "MESSAGE_ILLEGAL", "queue_id must be an integer from 0"),
        (dict(ok, queue_id=2**31), "MESSAGE_ILLEGAL", "queue_id"),
        (dict(ok, flag="1"), "MESSAGE_ILLEGAL", "flag must be an integer"),
        (dict(ok, sys_flag=2**31), "MESSAGE_ILLEGAL", "sys_flag"),
        (dict(ok, born_timestamp=2**63), "MESSAGE_ILLEGAL", "born_timestamp"),
        (dict(ok, reconsume_times=-(2**31) - 1), "MESSAGE_ILLEGAL", "reconsume_times"),
        (dict(ok, prepared_transaction_offset=1.5), "MESSAGE_ILLEGAL", "prepared_transaction_offset"),
        (dict(ok, born_host="127.0.0.1:9"), "MESSAGE_ILLEGAL", "born_host must be a (host, port) pair"),
        (dict(ok, store_host=("127.0.0.1", 2**31)), "MESSAGE_ILLEGAL", "store_host"),
        (dict(ok, body=b"x" * LIMIT), "MESSAGE_ILLEGAL", "does not fit a commit-log segment"),
    ]
    return [(m.Message(**kwargs), status, text) for kwargs, status, text in cases]


def test_each_codec_refuses_illegal_messages_with_the_reference_detail(impl):
    cases = illegal()
    send = [m.Message("T", 0, b"fine")] + [msg for msg, _, _ in cases]
    want_records, want_rejects = codec.py_prepare(send, LIMIT)
    records, rejects = impl.prepare(send, LIMIT)
    assert rejects == want_rejects
    assert [(r[0], r[2], r[3]) for r in records] == [(r[0], r[2], r[3]) for r in want_records]  # (r[1] is private)
    assert [r[0] for r in records] == send[:1]
    assert [i for i, _, _ in rejects] == list(range(1, len(send)))
    for (_, status, detail), (_, want_status, text) in zip(rejects, cases, strict=True):
        assert status == want_status and text in detail
        assert PutMessageStatus(status)  # a status the store can answer with


def run_codec(prepare, encode_run, send, root: Path, physical: int):
    records, rejects = prepare(send, LIMIT)
    queues = ConsumeQueues(root)
    queues.get("T", 1).max_offset = 7  # a queue that already has entries: offsets continue from there
    try:
        half = len(records) // 2  # two runs, as a segment roll makes them
        buf1, results1, entries1 = encode_run(records, 0, half, physical, 1_700_000_000_123, queues.queues, queues.get)
        after = physical + len(buf1)
        buf2, results2, entries2 = encode_run(records, half, len(records), after, 1_700_000_000_123, queues.queues, queues.get)
        entries = [(cq.path.relative_to(root).as_posix(), first, data) for cq, first, data in entries1 + entries2]
        offsets = {key: cq.max_offset for key, cq in queues.queues.items()}
        return records, rejects, buf1 + buf2, results1 + results2, entries, offsets
    finally:
        queues.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(send=st.lists(messages(), max_size=24), physical=st.integers(0, 2**40))
def test_each_codec_encodes_as_the_reference_and_records_decode_back(impl, tmp_path_factory, send, physical):
    py = run_codec(codec.py_prepare, codec.py_encode_run, send, tmp_path_factory.mktemp("py"), physical)
    c = run_codec(impl.prepare, impl.encode_run, send, tmp_path_factory.mktemp("c"), physical)
    (py_records, py_rejects, py_buf, py_results, py_entries, py_offsets) = py
    (c_records, c_rejects, c_buf, c_results, c_entries, c_offsets) = c
    assert c_rejects == py_rejects
    assert [(r[0], r[2], r[3]) for r in c_records] == [(r[0], r[2], r[3]) for r in py_records]
    assert c_buf == py_buf
    assert c_results == py_results and all(type(r) is type(p) for r, p in zip(c_results, py_results, strict=True))
    assert c_entries == py_entries and c_offsets == py_offsets

    # The bytes are records of the messages sent, at the offsets the results give.
    pos, queue_next = 0, {}
    for (msg, _, size, tags), result in zip(c_records, c_results, strict=True):
        assert result.status is PutMessageStatus.PUT_OK and result.physical_offset == physical + pos
        assert result.size == size == m.record_length(c_buf, pos)
        record = m.decode(c_buf, pos)
        assert (record.topic, record.queue_id, record.body) == (msg.topic, msg.queue_id, bytes(msg.body))
        assert record.properties == {k: format(v) for k, v in msg.properties.items() if format(v)}  # Java drops empty values
        assert (
            record.flag,
            record.sys_flag,
            record.born_timestamp,
            record.reconsume_times,
            record.prepared_transaction_offset,
        ) == (msg.flag, msg.sys_flag, msg.born_timestamp, msg.reconsume_times, msg.prepared_transaction_offset)
        assert record.born_host[1] == msg.born_host[1] and record.store_host[1] == msg.store_host[1]
        assert record.store_timestamp == result.store_timestamp == 1_700_000_000_123
        assert record.physical_offset == result.physical_offset
        key = (msg.topic, msg.queue_id)
        expected_qo = queue_next.get(key, 7 if key == ("T", 1) else 0)
        assert record.queue_offset == result.queue_offset == expected_qo
        queue_next[key] = expected_qo + 1
        assert tags == tags_code(m.tags_of(msg.properties))
        assert m.body_crc(bytes(msg.body)) == zlib.crc32(bytes(msg.body)) & 0x7FFFFFFF
        pos += size
    assert pos == len(c_buf)
    # Each queue's entries point at its records, in order.
    for _, first, data in c_entries:
        for n in range(len(data) // ENTRY.size):
            phys, size, _ = ENTRY.unpack_from(data, n * ENTRY.size)
            assert m.decode(c_buf, phys - physical).queue_offset == first + n
