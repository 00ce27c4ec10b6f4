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

The C file holds no rule of its own: at import, ``configure`` hands it ``native_rules()`` (message.py's
limits and refusal texts, the status names, the magic code) along with the types it builds, and it
checks that the record layout it writes agrees with message.py's sizes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from types import ModuleType

from . import message as m
from .consumequeue import ENTRY, ConsumeQueue, tags_code
from .message import HEAD_BODY_SIZE, IllegalMessage, Message, body_crc, encode_head, record_tail, tags_of, validate
from .results import PutMessageStatus, PutResult

log = logging.getLogger(__name__)

NATIVE_ABI = 2  # _codec.c's CODEC_ABI this module is written against

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
