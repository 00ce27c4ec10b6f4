"""The commit-log message record, laid out as RocketMQ's (``CommitLog``/``MessageDecoder``, v1).

    4 totalSize | 4 magicCode | 4 bodyCRC | 4 queueId | 4 flag | 8 queueOffset | 8 physicalOffset
    4 sysFlag | 8 bornTimestamp | 8 bornHost (IPv4 + port) | 8 storeTimestamp | 8 storeHost
    4 reconsumeTimes | 8 preparedTransactionOffset | 4+n body | 1+n topic | 2+n properties

All integers big-endian. A segment's unused tail starts with a blank record: totalSize = the bytes
left, magicCode = BLANK_MAGIC_CODE. Properties are ``name \\x01 value \\x02`` pairs.
"""

from __future__ import annotations

import functools
import mmap
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from isal.isal_zlib import crc32  # zlib's CRC-32, 4x faster than the zlib module's on 1 KB bodies

from mqrules.remoting.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from mqrules.remoting.properties import decode_properties as read_properties

from .results import PutMessageStatus

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # totalSize + magicCode
MIN_TOPIC_LENGTH = 1
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

# What a refused message's detail says: validate() raises these, and codec.native_rules() hands them
# (with the limits above) to the native codec, which has no text of its own.
TOPIC_TYPE = "topic must be a string"
TOPIC_UTF8 = "topic must be valid UTF-8"
TOPIC_LENGTH = "topic length must be {min}..{max} bytes"
PROPERTIES_TYPE = "properties must be a mapping"
PROPERTIES_UTF8 = "properties must be valid UTF-8"
PROPERTIES_SIZE = "properties exceed {max} bytes"
BODY_TYPE = "body must be bytes"
INT_FIELD = "{name} must be an integer from {lo} to {hi}"
HOST_FIELD = "{name} must be a (host, port) pair"
RECORD_SIZE = "a {size}-byte record does not fit a commit-log segment"

_HEAD = struct.Struct(">iiiiiqqiq4siq4siiq")  # up to and including preparedTransactionOffset
HEAD_SIZE = _HEAD.size  # 4+4+4+4+4+8+8+4+8+(4+4)+8+(4+4)+4+8 = 84
FIXED_SIZE = HEAD_SIZE + 4 + 1 + 2  # 91 + body + topic + properties
_HEAD_BODY_LEN = struct.Struct(">iiiiiqqiq4siq4siiqi")  # the head and the body length: what precedes the body
HEAD_BODY_SIZE = _HEAD_BODY_LEN.size  # 88: a record is HEAD_BODY_SIZE + body + record_tail(...)
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_BLANK = struct.Struct(">ii")


class CorruptRecord(ValueError):
    """Bytes that are not a whole, valid record (torn tail, CRC mismatch, bad magic)."""


def body_crc(body: bytes) -> int:
    return crc32(body) & 0x7FFFFFFF  # RocketMQ's UtilAll.crc32 keeps it a positive int


def encode_properties(props: Mapping[str, str]) -> bytes:
    """The record's properties as written (the native codec writes the same): no check of the
    separators here, admission refuses a property that holds one (brokers/core/admission.py)."""
    if not props:
        return b""
    return "".join([f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()]).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    """The record's properties as Java reads them (mqrules/remoting/properties.py): a pair without a
    name or a value is left out."""
    return read_properties(raw.decode())


@functools.lru_cache(maxsize=4096)
def _ip(host: str) -> bytes:
    """The IPv4 address in a host string (dotted quad, as inet_pton reads it), or zeros."""
    try:
        return socket.inet_pton(socket.AF_INET, host)
    except (OSError, ValueError):
        return b"\0\0\0\0"


def _unhost(raw: bytes) -> tuple[str, int]:
    return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:])[0]


@dataclass(slots=True)
class Message:
    """A message as stored. ``queue_offset`` and ``physical_offset`` are assigned by the store.
    (Not frozen: a frozen dataclass's constructor costs several times more, and the broker builds
    one per message sent; nothing mutates a Message after it is handed to the store.)"""

    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0


def record_size(topic: bytes, body: bytes, properties: bytes) -> int:
    return FIXED_SIZE + len(body) + len(topic) + len(properties)


class IllegalMessage(ValueError):
    """A message the store refuses; ``status`` is its PutMessageStatus name."""

    def __init__(self, detail: str, status: str = PutMessageStatus.MESSAGE_ILLEGAL):
        super().__init__(detail)
        self.status = status


@functools.lru_cache(maxsize=4096)
def _topic_bytes(topic: str) -> bytes:
    try:
        raw = topic.encode()
    except UnicodeEncodeError:
        raise IllegalMessage(TOPIC_UTF8) from None
    if not MIN_TOPIC_LENGTH <= len(raw) <= MAX_TOPIC_LENGTH:
        raise IllegalMessage(TOPIC_LENGTH.format(min=MIN_TOPIC_LENGTH, max=MAX_TOPIC_LENGTH))
    return raw


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
# The integer fields of a record and their ranges, in the order they are checked.
INT_FIELDS = (
    ("queue_id", 0, _INT32[1]),
    ("flag", *_INT32),
    ("sys_flag", *_INT32),
    ("born_timestamp", *_INT64),
    ("reconsume_times", *_INT32),
    ("prepared_transaction_offset", *_INT64),
)
# The (host, port) fields and the range of their ports, in the order they are checked.
HOST_FIELDS = ("born_host", "store_host")
PORT_RANGE = _INT32


def validate(msg: Message) -> tuple[bytes, bytes]:
    """The encoded topic and properties, or IllegalMessage: every field must fit its place in the
    record (a refusal answers one send; a field that does not fit must never reach the writer)."""
    if not isinstance(msg.topic, str):
        raise IllegalMessage(TOPIC_TYPE)
    topic = _topic_bytes(msg.topic)
    try:
        props = encode_properties(msg.properties)
    except UnicodeEncodeError:
        raise IllegalMessage(PROPERTIES_UTF8) from None
    except (AttributeError, TypeError, ValueError):
        raise IllegalMessage(PROPERTIES_TYPE) from None
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise IllegalMessage(PROPERTIES_SIZE.format(max=MAX_PROPERTIES_LENGTH), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    if not isinstance(msg.body, bytes | bytearray):
        raise IllegalMessage(BODY_TYPE)
    for name, lo, hi in INT_FIELDS:
        value = getattr(msg, name)
        if not isinstance(value, int) or not lo <= value <= hi:
            raise IllegalMessage(INT_FIELD.format(name=name, lo=lo, hi=hi))
    for name in HOST_FIELDS:
        host = getattr(msg, name)
        if not (
            isinstance(host, tuple)
            and len(host) == 2
            and isinstance(host[0], str)
            and isinstance(host[1], int)
            and PORT_RANGE[0] <= host[1] <= PORT_RANGE[1]
        ):
            raise IllegalMessage(HOST_FIELD.format(name=name))
    return topic, props


def tags_of(properties: Mapping[str, str]) -> str | None:
    """The TAGS property as the consume queue hashes it (a non-string value by its str())."""
    tags = properties.get("TAGS")
    if not tags:
        return None
    return tags if isinstance(tags, str) else format(tags)


def record_tail(topic: bytes, props: bytes) -> bytes:
    """What follows the body in a record: topic length, topic, properties length, properties."""
    return b"%c%b%b%b" % (len(topic), topic, _SHORT.pack(len(props)), props)


def encode_head(msg: Message, size: int, crc: int, queue_offset: int, physical_offset: int, store_timestamp: int) -> bytes:
    """The record's bytes before the body (the fixed fields and the body length)."""
    born, stored = msg.born_host, msg.store_host
    return _HEAD_BODY_LEN.pack(
        size,
        MESSAGE_MAGIC_CODE,
        crc,
        msg.queue_id,
        msg.flag,
        queue_offset,
        physical_offset,
        msg.sys_flag,
        msg.born_timestamp,
        _ip(born[0]),
        born[1],
        store_timestamp,
        _ip(stored[0]),
        stored[1],
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(msg.body),
    )


def encode(
    msg: Message,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    topic: bytes | None = None,
    props: bytes | None = None,
) -> bytes:
    """The record of ``msg``; pass ``topic``/``props`` from ``validate`` to skip validating twice."""
    if topic is None or props is None:
        topic, props = validate(msg)
    body = bytes(msg.body)
    tail = record_tail(topic, props)
    size = _HEAD_BODY_LEN.size + len(body) + len(tail)
    return b"".join((encode_head(msg, size, body_crc(body), queue_offset, physical_offset, store_timestamp), body, tail))


def blank(size: int) -> bytes:
    """The end-of-segment filler: a blank record header followed by zeros."""
    return _BLANK.pack(size, BLANK_MAGIC_CODE) + bytes(size - END_FILE_MIN_BLANK_LENGTH)


@dataclass(frozen=True)
class Blank:
    size: int


Readable = bytes | bytearray | memoryview | mmap.mmap  # what records are decoded from (a segment maps as mmap)


def decode(buf: Readable, pos: int = 0, *, check_crc: bool = True) -> Message | Blank:
    """The record at ``pos``; ``CorruptRecord`` if the bytes there are not a whole valid record."""
    # A context-managed view: an exception's traceback must not keep an mmap exported.
    with memoryview(buf) as view:
        if len(view) - pos < END_FILE_MIN_BLANK_LENGTH:
            raise CorruptRecord("not enough bytes for a record header")
        size, magic = _BLANK.unpack_from(view, pos)
        if magic == BLANK_MAGIC_CODE:
            if size < END_FILE_MIN_BLANK_LENGTH or pos + size > len(view):
                raise CorruptRecord("torn blank record")
            return Blank(size)
        if magic != MESSAGE_MAGIC_CODE:
            raise CorruptRecord(f"bad magic code {magic}")
        if size < FIXED_SIZE or pos + size > len(view):
            raise CorruptRecord("torn record")
        (
            size,
            _,
            crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_ts,
            born_ip,
            born_port,
            store_ts,
            store_ip,
            store_port,
            reconsume,
            prepared,
        ) = _HEAD.unpack_from(view, pos)
        p = pos + HEAD_SIZE
        body_len = _INT.unpack_from(view, p)[0]
        p += 4
        if body_len < 0 or p + body_len + 3 > pos + size:
            raise CorruptRecord("body length beyond the record")
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        p += 1
        topic = bytes(view[p : p + topic_len]).decode(errors="replace")
        p += topic_len
        if p + 2 > pos + size:
            raise CorruptRecord("topic beyond the record")
        props_len = _SHORT.unpack_from(view, p)[0]
        p += 2
        if props_len < 0 or p + props_len != pos + size:
            raise CorruptRecord("record length does not add up")
        props = decode_properties(bytes(view[p : p + props_len]))
        if check_crc and body_crc(body) != crc:
            raise CorruptRecord("body CRC mismatch")
        return Message(
            topic=topic,
            queue_id=queue_id,
            body=body,
            properties=props,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_ts,
            born_host=_unhost(born_ip + born_port.to_bytes(4, "big", signed=True)),
            store_timestamp=store_ts,
            store_host=_unhost(store_ip + store_port.to_bytes(4, "big", signed=True)),
            reconsume_times=reconsume,
            prepared_transaction_offset=prepared,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
        )


def record_length(buf: Readable, pos: int = 0) -> int:
    """totalSize of the record at ``pos`` (no validation)."""
    return _INT.unpack_from(buf, pos)[0]
