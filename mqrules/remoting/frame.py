"""RocketMQ's remoting frame (the TCP protocol of 4.x clients, mqadmin and the dashboard) as a value,
and its two header serializations. Pure: bytes in, values out; no sockets.

A frame, all integers big-endian (``RemotingCommand.encode``/``decode``)::

    int32 length            everything after this field
    int32 mark              (serializeType << 24) | headerLength
    header                  headerLength bytes: JSON (0) or RocketMQ's binary layout (1)
    body                    the rest

The binary header (``RocketMQSerializable``)::

    int16 code | int8 language | int16 version | int32 opaque | int32 flag
    int32 remarkLength | remark | int32 extFieldsLength | (int16 keyLength | key | int32 valueLength | value)*

A zero length there is Java's null: an empty remark decodes as ``None`` and an extFields entry with an
empty key or value is left out (as the Java reader's map lookup would find nothing). The JSON header is
fastjson's rendering of ``RemotingCommand``: ``code``, ``language`` (a ``LanguageCode`` name),
``version``, ``opaque``, ``flag``, ``remark``, ``extFields`` (strings; clients also send numbers and
booleans, read as their text) and ``serializeTypeCurrentRPC`` (written, never trusted: the mark says).

Layouts from apache/rocketmq remoting/src/main/java/org/apache/rocketmq/remoting/protocol/:
``RemotingCommand.java``, ``RocketMQSerializable.java``, ``LanguageCode.java``, ``SerializeType.java``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

RESPONSE_FLAG = 1 << 0  # RemotingCommand.RPC_TYPE: set on responses
ONEWAY_FLAG = 1 << 1  # RemotingCommand.RPC_ONEWAY: the sender wants no response
MAX_HEADER_LENGTH = 0xFFFFFF  # the 24 bits the mark leaves beside the serialize type

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_MARK = struct.Struct(">I")
_PREFIX = struct.Struct(">iI")  # length, mark
_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_INT32 = (-(2**31), 2**31 - 1)


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """The sender's language: its number in the binary header, its name in the JSON one. A code or name
    this table lacks reads as ``OTHER`` (Java reads it as null and carries on)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class FrameErrorReason(StrEnum):
    TOO_LONG = "too long"  # the length field says more than the decoder's maximum
    BAD_LENGTH = "bad length"  # negative, or too short to hold the header mark
    HEADER_UNPARSABLE = "header unparsable"
    UNKNOWN_SERIALIZE_TYPE = "unknown serialize type"


class FrameError(ValueError):
    """Bytes that are not a frame. ``resumable``: the frame's end was known and the decoder skipped it
    whole, so the next frame can still be read; otherwise the stream is lost and the connection must
    close (Java's ``NettyDecoder`` closes it for every reason)."""

    def __init__(self, reason: FrameErrorReason, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    @property
    def resumable(self) -> bool:
        return self.reason not in (FrameErrorReason.TOO_LONG, FrameErrorReason.BAD_LENGTH)


def _unparsable(detail: str) -> FrameError:
    return FrameError(FrameErrorReason.HEADER_UNPARSABLE, detail)


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` are the custom header's fields, always strings
    (``mqrules.remoting.headers`` types them); ``serialize_type`` is how its header travels."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(
        self,
        code: int,
        remark: str | None = None,
        *,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes = b"",
        language: LanguageCode = LanguageCode.JAVA,
        version: int = 0,
    ) -> RemotingCommand:
        """The answer to this request: its opaque, the response flag alone, its serialization (Java
        answers in the server's configured one, JSON by default; clients read whatever the mark says,
        so answering in the request's own is safe for all). A oneway request is answered by nobody:
        the endpoint checks ``is_oneway`` before it sends. ``version``: the answering server's own
        (Java stamps ``rocketmq.remoting.version``; clients keep the broker's from its heartbeat reply)."""
        return RemotingCommand(
            code=code,
            language=language,
            version=version,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=dict(ext_fields or {}),
            body=body,
            serialize_type=self.serialize_type,
        )


# --- whole frames ----------------------------------------------------------------------------------


def encode_frame(command: RemotingCommand) -> bytes:
    """The frame, length field included. Raises ``ValueError``/``TypeError`` for a command no peer could
    read (a header over 16 MiB, a number beyond its Java type, a non-string extFields value)."""
    if command.serialize_type is SerializeType.ROCKETMQ:
        header = _encode_binary_header(command)
    else:
        header = _encode_json_header(command)
    if len(header) > MAX_HEADER_LENGTH:
        raise ValueError(f"a {len(header)}-byte header does not fit the frame's 24-bit header length")
    mark = (int(command.serialize_type) << 24) | len(header)
    return _PREFIX.pack(4 + len(header) + len(command.body), mark) + header + command.body


def decode_frame(frame: bytes) -> RemotingCommand:
    """A command from one frame's bytes after the length field (what ``FrameDecoder`` cut out).
    Raises ``FrameError`` and nothing else."""
    if len(frame) < _MARK.size:
        raise FrameError(FrameErrorReason.BAD_LENGTH, f"a {len(frame)}-byte frame has no room for the header mark")
    (mark,) = _MARK.unpack_from(frame)
    try:
        serialize_type = SerializeType(mark >> 24)
    except ValueError:
        raise FrameError(FrameErrorReason.UNKNOWN_SERIALIZE_TYPE, f"serialize type {mark >> 24}") from None
    header_end = _MARK.size + (mark & MAX_HEADER_LENGTH)
    if header_end > len(frame):
        raise _unparsable(f"header length {header_end - _MARK.size} exceeds the frame's {len(frame) - _MARK.size} bytes")
    header, body = bytes(frame[_MARK.size : header_end]), bytes(frame[header_end:])
    if serialize_type is SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    return _decode_json_header(header, body)


# --- the JSON header -------------------------------------------------------------------------------


def _encode_json_header(command: RemotingCommand) -> bytes:
    """fastjson's field order (alphabetical); null fields left out, as fastjson does. ASCII with
    escapes, so a lone surrogate in a remark still makes valid UTF-8."""
    for name in ("code", "version", "opaque", "flag"):
        if not _INT32[0] <= getattr(command, name) <= _INT32[1]:
            raise ValueError(f"{name} {getattr(command, name)} is beyond a Java int")
    doc: dict[str, object] = {"code": command.code}
    if command.ext_fields:
        doc["extFields"] = _checked_ext_fields(command.ext_fields)
    doc["flag"] = command.flag
    doc["language"] = command.language.name
    doc["opaque"] = command.opaque
    if command.remark is not None:
        doc["remark"] = command.remark
    doc["serializeTypeCurrentRPC"] = SerializeType.JSON.name
    doc["version"] = command.version
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    try:
        # parse_float=str: a decimal in extFields keeps the text the client wrote ("1.50", "1e3")
        doc = json.loads(raw.decode("utf-8"), parse_float=str, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _unparsable(f"JSON header: {exc}") from None
    if not isinstance(doc, dict):
        raise _unparsable(f"JSON header is a {type(doc).__name__}, not an object")
    return RemotingCommand(
        code=_json_int(doc, "code"),
        language=_json_language(doc.get("language")),
        version=_json_int(doc, "version"),
        opaque=_json_int(doc, "opaque"),
        flag=_json_int(doc, "flag"),
        remark=None if doc.get("remark") is None else _json_text("remark", doc["remark"]),
        ext_fields=_json_ext_fields(doc.get("extFields")),
        body=body,
        serialize_type=SerializeType.JSON,
    )


def _json_int(doc: dict, name: str) -> int:
    """A Java int field; absent or null is Java's default, 0."""
    value = doc.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
        raise _unparsable(f"JSON header: {name} must be a 32-bit integer, got {value!r:.40}")
    return value


def _json_language(value: object) -> LanguageCode:
    if value is None:
        return LanguageCode.JAVA  # RemotingCommand's default
    if isinstance(value, str):
        return LanguageCode.__members__.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):  # fastjson also reads an enum's ordinal
        return _language(value)
    raise _unparsable(f"JSON header: language must be a name, got {value!r:.40}")


def _json_text(name: str, value: object) -> str:
    """A string field's value; a number or boolean as Java's ``toString`` writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise _unparsable(f"JSON header: {name} must be a string, number or boolean, got {type(value).__name__}")


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _unparsable(f"JSON header: extFields must be an object, got {type(value).__name__}")
    return {key: _json_text(f"extFields.{key}", v) for key, v in value.items() if v is not None}


# --- the binary header -----------------------------------------------------------------------------


def _language(code: int) -> LanguageCode:
    try:
        return LanguageCode(code)
    except ValueError:
        return LanguageCode.OTHER


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")  # a lone surrogate becomes '?', as Java's encoder writes it


def _checked_ext_fields(ext_fields: Mapping[str, str]) -> dict[str, str]:
    for key, value in ext_fields.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"extFields are strings (mqrules.remoting.headers.encode_header): {key!r}={value!r:.40}")
    return dict(ext_fields)


def _encode_binary_header(command: RemotingCommand) -> bytes:
    try:
        fixed = _FIXED.pack(command.code, command.language, command.version, command.opaque, command.flag)
    except struct.error as exc:
        raise ValueError(f"the binary header holds an int16 code and version, int32 opaque and flag: {exc}") from None
    remark = _utf8(command.remark or "")
    entries = []
    for key, value in _checked_ext_fields(command.ext_fields).items():
        k, v = _utf8(key), _utf8(value)
        if len(k) > 0x7FFF:
            raise ValueError(f"an extFields key of {len(k)} bytes does not fit its int16 length")
        entries += [_SHORT.pack(len(k)), k, _INT.pack(len(v)), v]
    ext = b"".join(entries)
    return b"".join([fixed, _INT.pack(len(remark)), remark, _INT.pack(len(ext)), ext])


class _Reader:
    """A cursor over a binary header; running past the end is a ``FrameError``."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.at = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.at + n > len(self.raw):
            raise _unparsable(f"binary header: {what} of {n} bytes at byte {self.at} runs past its {len(self.raw)} bytes")
        self.at += n
        return self.raw[self.at - n : self.at]

    def unpack(self, layout: struct.Struct, what: str) -> tuple:
        return layout.unpack(self.take(layout.size, what))

    def text(self, length: int, what: str) -> str:
        try:
            return self.take(length, what).decode("utf-8")
        except UnicodeDecodeError:
            raise _unparsable(f"binary header: {what} is not UTF-8") from None


def _decode_binary_header(raw: bytes, body: bytes) -> RemotingCommand:
    reader = _Reader(raw)
    code, language, version, opaque, flag = reader.unpack(_FIXED, "the fixed fields")
    (remark_length,) = reader.unpack(_INT, "the remark length")
    remark = reader.text(remark_length, "the remark") or None
    (ext_length,) = reader.unpack(_INT, "the extFields length")
    ext_fields = _decode_binary_map(_Reader(reader.take(ext_length, "extFields")))
    if reader.at != len(raw):
        raise _unparsable(f"binary header: {len(raw) - reader.at} bytes after extFields")
    return RemotingCommand(
        code=code,
        language=_language(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_binary_map(reader: _Reader) -> dict[str, str]:
    fields = {}
    while reader.at < len(reader.raw):
        (key_length,) = reader.unpack(_SHORT, "an extFields key length")
        key = reader.text(key_length, "an extFields key")
        (value_length,) = reader.unpack(_INT, "an extFields value length")
        value = reader.text(value_length, f"extFields[{key!r:.40}]")
        if key and value:  # a zero length is Java's null
            fields[key] = value
    return fields
