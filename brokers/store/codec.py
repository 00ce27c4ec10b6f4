"""The per-message work of storing a send, in two implementations with one behaviour.

``prepare(messages, limit)`` validates a send's messages (``message.validate``'s rules, and the
record must fit ``limit`` bytes) and returns ``(records, rejects)``: a record per legal message,
``(message, codec data, record size, tags hash)``, and ``(index, PutMessageStatus name, detail)`` per
refused one. ``encode_run(records, start, stop, physical, now, queues, get_queue)`` lays records
[start, stop) out one after another from ``physical`` and returns ``(buffer, results, entries)``:
the whole records in one buffer, a PUT_OK ``PutResult`` each, and the consume-queue entries as
``(queue, first queue offset, bytes)``, each queue's ``max_offset`` advanced past the offsets given.

The pure-Python functions here are the reference. ``_codec.c`` does the same in C (built by the
editable install when a C compiler is there; tests/brokers/test_codec.py checks that both give the
same bytes, results, entries and refusals): a 1 KB message costs about 0.3 µs there against 5-6 µs
here, which is what lets the store keep up with the disk (bench/produce.py). Set
RMQ_STORE_CODEC=python to use the reference.

``index_records(index_map, slots, max_index, data, base, start, skip)`` is the message index's hot
loop (brokers/store/index.py, docs/messages.md §1): it walks the whole records of ``data[start:]``
(``data[0]`` being log offset ``base``; blank records skipped by their size) and puts each record's
keys into the RocketMQ index file mapped at ``index_map`` — ``topic#UNIQ_KEY``, then ``topic#k`` for
each non-empty ``k`` of ``KEYS`` split on spaces; a rolled-back transaction's record (sysFlag) and a
record whose topic or properties are not UTF-8 are not indexed. Returns ``(next, status, done)``: the
log offset where it stopped and why (``INDEX_DONE``, ``INDEX_TORN``: a record cut short there,
``INDEX_CORRUPT``: bytes that are no record, ``INDEX_FULL``: the file is full and ``done`` keys of the
record at ``next`` are in it; pass them as ``skip`` when going on in the next file). The C version
releases the GIL while it walks.

The C file holds no rule of its own: at import, ``configure`` hands it ``native_rules()`` (message.py's
limits and refusal texts, the status names, the magic code) along with the types it builds, and it
checks that the record layout it writes agrees with message.py's sizes.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from types import ModuleType

from . import message as m
from .consumequeue import ENTRY, ConsumeQueue, tags_code
from .message import HEAD_BODY_SIZE, IllegalMessage, Message, body_crc, encode_head, record_tail, tags_of, validate
from .results import PutMessageStatus, PutResult

log = logging.getLogger(__name__)

NATIVE_ABI = 3  # _codec.c's CODEC_ABI this module is written against

# What the message index reads from a record (RocketMQ's MessageConst and MessageSysFlag).
UNIQ_KEY = "UNIQ_KEY"  # PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: the client's message id
KEYS = "KEYS"
KEY_SEPARATOR = " "
TRANSACTION_TYPE_MASK = 0xC  # sysFlag bits of the transaction type
TRANSACTION_ROLLBACK_TYPE = 0xC  # a rolled-back half message's record is not indexed
# index_records' statuses (_codec.c's IX_*)
INDEX_DONE, INDEX_TORN, INDEX_FULL, INDEX_CORRUPT = range(4)
# RocketMQ's index file (IndexHeader, IndexFile): header, hash slot and entry sizes.
INDEX_HEADER = struct.Struct(">qqqqii")  # beginTimestamp endTimestamp beginPhyOffset endPhyOffset hashSlotCount indexCount
INDEX_SLOT = struct.Struct(">i")
INDEX_ENTRY = struct.Struct(">iqii")  # keyHash phyOffset timeDiff(s) previous entry
INT32_MAX = (1 << 31) - 1

Record = tuple[Message, bytes, int, int]
Reject = tuple[int, str, str]
Entries = list[tuple[ConsumeQueue, int, bytes]]
_OK = PutMessageStatus.PUT_OK


def py_prepare(messages: Sequence[Message], limit: int) -> tuple[list[Record], list[Reject]]:
    records: list[Record] = []
    rejects: list[Reject] = []
    for i, msg in enumerate(messages):
        try:
            topic, props = validate(msg)
        except IllegalMessage as exc:
            rejects.append((i, exc.status, str(exc)))
            continue
        tail = record_tail(topic, props)
        size = HEAD_BODY_SIZE + len(msg.body) + len(tail)
        if size > limit:
            rejects.append((i, PutMessageStatus.MESSAGE_ILLEGAL, m.RECORD_SIZE.format(size=size)))
            continue
        records.append((msg, tail, size, tags_code(tags_of(msg.properties))))
    return records, rejects


def py_encode_run(
    records: list[Record],
    start: int,
    stop: int,
    physical: int,
    now: int,
    queues: dict[tuple[str, int], ConsumeQueue],
    get_queue: Callable[[str, int], ConsumeQueue],
) -> tuple[bytes, list[PutResult], Entries]:
    chunks: list[bytes] = []
    results: list[PutResult] = []
    runs: dict[tuple[str, int], list] = {}  # (topic, queue id) -> [queue, first, next, entries]
    for i in range(start, stop):
        msg, tail, size, tags = records[i]
        key = (msg.topic, msg.queue_id)
        run = runs.get(key)
        if run is None:
            cq = queues.get(key) or get_queue(*key)
            run = runs[key] = [cq, cq.max_offset, cq.max_offset, bytearray()]
        qo = run[2]
        run[2] = qo + 1
        run[3] += ENTRY.pack(physical, size, tags)
        body = bytes(msg.body)
        chunks += (encode_head(msg, size, body_crc(body), qo, physical, now), body, tail)
        results.append(PutResult(_OK, physical, qo, size, now))
        physical += size
    entries: Entries = []
    for cq, first, end, data in runs.values():
        cq.max_offset = end
        entries.append((cq, first, bytes(data)))
    return b"".join(chunks), results, entries


def java_hash(text: str, h: int = 0) -> int:
    """Java's ``String.hashCode`` of ``text`` (over its UTF-16 code units), continued from ``h``; signed."""
    units = text.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h > INT32_MAX else h


def index_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: the hash made non-negative (``Math.abs``; 0 for Integer.MIN_VALUE)."""
    h = abs(java_hash(key))
    return 0 if h > INT32_MAX else h


def record_keys(view: memoryview, pos: int, size: int) -> tuple[str, int, list[str]] | None:
    """(topic, store timestamp, keys to index) of the whole record at ``pos``, or None when it is not
    indexed (a rolled-back transaction's, or one whose topic or properties are not UTF-8). The
    record's bounds are checked by the caller."""
    sys_flag, store_ts = struct.unpack_from(">i", view, pos + 36)[0], struct.unpack_from(">q", view, pos + 56)[0]
    if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
        return None
    p = pos + HEAD_BODY_SIZE + struct.unpack_from(">i", view, pos + 84)[0]
    try:
        topic = bytes(view[p + 1 : p + 1 + view[p]]).decode()
        props = m.decode_properties(bytes(view[p + 3 + view[p] : pos + size]))
    except UnicodeDecodeError:
        return None
    keys = [props[UNIQ_KEY]] if props.get(UNIQ_KEY) else []
    keys += [k for k in props.get(KEYS, "").split(KEY_SEPARATOR) if k]
    return topic, store_ts, keys


def _long(x: int) -> int:
    """``x`` wrapped to a Java long."""
    return (x + (1 << 63)) % (1 << 64) - (1 << 63)


def py_put_key(index, slots: int, max_index: int, key_hash: int, phy: int, ts: int) -> bool:
    """IndexFile.putKey into the file mapped at ``index``; False when it is full."""
    begin, _, _, _, slot_count, count = INDEX_HEADER.unpack_from(index, 0)
    count = max(count, 1)
    if count >= max_index:
        return False
    slot_at = INDEX_HEADER.size + key_hash % slots * INDEX_SLOT.size
    prev = INDEX_SLOT.unpack_from(index, slot_at)[0]
    if prev <= 0 or prev > count:
        prev = 0
    diff = 0 if begin <= 0 else max(0, min(INT32_MAX, _long(ts - begin) // 1000))  # negative: 0 either way
    at = INDEX_HEADER.size + slots * INDEX_SLOT.size + count * INDEX_ENTRY.size
    INDEX_ENTRY.pack_into(index, at, key_hash, phy, diff, prev)
    begin_phy = struct.unpack_from(">q", index, 16)[0]
    if count <= 1:
        begin, begin_phy = ts, phy
    INDEX_HEADER.pack_into(index, 0, begin, ts, begin_phy, phy, slot_count + (prev == 0), count + 1)
    INDEX_SLOT.pack_into(index, slot_at, count)
    return True


def _walk_record(index, slots: int, max_index: int, view: memoryview, pos: int, size: int, base: int, skip: int) -> int:
    """The record's keys from the ``skip``-th into the index: -1 when all are in, else how many are
    (the file is full)."""
    found = record_keys(view, pos, size)
    if found is None:
        return -1
    topic, ts, keys = found
    for done, key in enumerate(keys):
        if done >= skip and not py_put_key(index, slots, max_index, index_hash(f"{topic}#{key}"), base + pos, ts):
            return done
    return -1


def record_shape(view: memoryview, pos: int) -> tuple[int, int]:
    """(status, size) of the bytes at ``pos``: INDEX_DONE and the size of a whole record (a blank's
    size, maybe past the data, with status -1), INDEX_TORN or INDEX_CORRUPT; message.decode's checks."""
    left = len(view) - pos
    if left < m.END_FILE_MIN_BLANK_LENGTH:
        return INDEX_TORN, 0
    size, magic = struct.unpack_from(">ii", view, pos)
    if magic == m.BLANK_MAGIC_CODE:
        return (-1, size) if size >= m.END_FILE_MIN_BLANK_LENGTH else (INDEX_CORRUPT, 0)
    if magic != m.MESSAGE_MAGIC_CODE or size < m.FIXED_SIZE:
        return INDEX_CORRUPT, 0
    if size > left:
        return INDEX_TORN, 0
    body = struct.unpack_from(">i", view, pos + 84)[0]
    if body < 0 or HEAD_BODY_SIZE + body + 3 > size:
        return INDEX_CORRUPT, 0
    topic_end = HEAD_BODY_SIZE + body + 1 + view[pos + HEAD_BODY_SIZE + body]
    if topic_end + 2 > size:
        return INDEX_CORRUPT, 0
    props = struct.unpack_from(">h", view, pos + topic_end)[0]
    return (INDEX_DONE, size) if props >= 0 and topic_end + 2 + props == size else (INDEX_CORRUPT, 0)


def py_index_records(index, slots: int, max_index: int, data, base: int, start: int, skip: int) -> tuple[int, int, int]:
    if slots < 1 or max_index < 2 or len(index) < INDEX_HEADER.size + slots * INDEX_SLOT.size + max_index * INDEX_ENTRY.size:
        raise ValueError("the index file is smaller than its slots and entries")
    if start < 0 or skip < 0:
        raise ValueError("start and skip must be >= 0")
    with memoryview(data) as view:
        pos = start
        while pos < len(view):
            status, size = record_shape(view, pos)
            if status == -1:  # a blank record: the segment's end
                pos += size
                continue
            if status != INDEX_DONE:
                return base + pos, status, 0
            done = _walk_record(index, slots, max_index, view, pos, size, base, skip)
            if done >= 0:
                return base + pos, INDEX_FULL, done
            skip = 0
            pos += size
        return base + pos, INDEX_DONE, 0


def native_rules(
    *, max_topic_length: int = m.MAX_TOPIC_LENGTH, max_properties_length: int = m.MAX_PROPERTIES_LENGTH
) -> dict[str, object]:
    """Every limit the native codec enforces and every refusal it gives, rendered from message.py
    (the keyword arguments exist for tests that prove the C code reads them from here)."""
    return {
        "head_body_size": HEAD_BODY_SIZE,
        "entry_size": ENTRY.size,
        "magic": m.MESSAGE_MAGIC_CODE & 0xFFFFFFFF,
        "min_topic_length": m.MIN_TOPIC_LENGTH,
        "max_topic_length": max_topic_length,
        "max_properties_length": max_properties_length,
        "illegal": PutMessageStatus.MESSAGE_ILLEGAL.value,
        "exceeded": PutMessageStatus.PROPERTIES_SIZE_EXCEEDED.value,
        "topic_type": m.TOPIC_TYPE,
        "topic_utf8": m.TOPIC_UTF8,
        "topic_length": m.TOPIC_LENGTH.format(min=m.MIN_TOPIC_LENGTH, max=max_topic_length),
        "properties_type": m.PROPERTIES_TYPE,
        "properties_utf8": m.PROPERTIES_UTF8,
        "properties_size": m.PROPERTIES_SIZE.format(max=max_properties_length),
        "body_type": m.BODY_TYPE,
        "record_size": m.RECORD_SIZE,  # formatted by the C code with the record's size
        "ints": tuple((name, lo, hi, m.INT_FIELD.format(name=name, lo=lo, hi=hi)) for name, lo, hi in m.INT_FIELDS),
        "hosts": tuple((name, *m.PORT_RANGE, m.HOST_FIELD.format(name=name)) for name in m.HOST_FIELDS),
        "index": {
            "blank_magic": m.BLANK_MAGIC_CODE & 0xFFFFFFFF,
            "transaction_mask": TRANSACTION_TYPE_MASK,
            "transaction_skip": TRANSACTION_ROLLBACK_TYPE,
            "uniq_key": UNIQ_KEY,
            "keys": KEYS,
            "separator": KEY_SEPARATOR,
        },
    }


def configure(native: ModuleType, rules: dict[str, object] | None = None) -> bool:
    """Hand the native module the types it builds, the CRC-32 to use and the rules (``native_rules()``
    unless given). True when it computes CRCs with ISA-L's C function, without the GIL."""
    from isal import isal_zlib

    # isal's extension exports ISA-L's C function: with it the CRCs run without the GIL.
    return bool(
        native.configure(
            PutResult,
            _OK,
            isal_zlib.crc32,
            Message,
            isal_zlib.__file__,
            "crc32_gzip_refl",
            native_rules() if rules is None else rules,
        )
    )


def _native() -> ModuleType | None:
    """The C module when it is built, current and not switched off; else None."""
    global NATIVE_CRC
    if os.environ.get("RMQ_STORE_CODEC", "native") == "python":
        return None
    try:
        from . import _codec  # type: ignore[attr-defined]  # built by the editable install, maybe not
    except ImportError:
        log.warning(
            "the store's native codec is not built (no C compiler at install?): using the Python one, "
            "about 10x slower per message; `make venv` builds it"
        )
        return None
    if getattr(_codec, "ABI", None) != NATIVE_ABI:
        log.warning(
            "the store's native codec is stale (ABI %s, want %s): using the Python one; rebuild with `pip install -e .`",
            getattr(_codec, "ABI", None),
            NATIVE_ABI,
        )
        return None
    try:
        NATIVE_CRC = configure(_codec)
    except (TypeError, ValueError) as exc:  # its record layout disagrees with message.py's
        log.warning("the store's native codec refused its rules (%s): using the Python one", exc)
        return None
    if not NATIVE_CRC:
        log.info("the store's native codec computes CRCs through isal's Python function (holding the GIL)")
    return _codec


NATIVE_CRC = False  # the native codec calls ISA-L's CRC-32 directly, without the GIL
_module = _native()
IMPLEMENTATION = "native" if _module else "python"
prepare: Callable[..., tuple[list[Record], list[Reject]]] = _module.prepare if _module else py_prepare
encode_run: Callable[..., tuple[bytes, list[PutResult], Entries]] = _module.encode_run if _module else py_encode_run
index_records: Callable[..., tuple[int, int, int]] = _module.index_records if _module else py_index_records
