"""The offset message id: where a message sits, written as hex. RocketMQ's ``offsetMsgId`` (the
``msgId`` of a send's reply header, ``VIEW_MESSAGE_BY_ID``'s key) is the storing broker's address and
the message's commit-log offset (apache/rocketmq common/.../message/MessageDecoder.java
``createMessageId``/``decodeMessageId``, hex by ``UtilAll.bytes2string``)::

    IPv4: 4-byte address | int32 port | int64 offset   = 16 bytes, 32 hex digits
    IPv6: 16-byte address | int32 port | int64 offset  = 28 bytes, 56 hex digits

Written in upper case; read in either.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

_TAIL = struct.Struct(">iq")  # port, commit-log offset
_IPV4_HEX = 2 * (4 + _TAIL.size)
_IPV6_HEX = 2 * (16 + _TAIL.size)
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class OffsetMessageId:
    host: str  # an IP address, as ipaddress writes it
    port: int
    commit_log_offset: int


def encode_offset_message_id(host: str, port: int, commit_log_offset: int) -> str:
    """Raises ``ValueError`` for a host that is no IP address, a port beyond 0..65535 or an offset
    beyond a Java long."""
    address = ipaddress.ip_address(host).packed
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port {port} is not 0..65535")
    try:
        tail = _TAIL.pack(port, commit_log_offset)
    except struct.error:
        raise ValueError(f"commit-log offset {commit_log_offset} does not fit a Java long") from None
    return (address + tail).hex().upper()


def decode_offset_message_id(msg_id: str) -> OffsetMessageId:
    """Raises ``ValueError`` for anything but 32 or 56 hex digits, or a port beyond 0..65535 (Java's
    ``InetSocketAddress`` refuses it too)."""
    if len(msg_id) not in (_IPV4_HEX, _IPV6_HEX) or not _HEX_DIGITS.issuperset(msg_id):
        raise ValueError(f"an offset message id is {_IPV4_HEX} or {_IPV6_HEX} hex digits, not {msg_id!r:.70}")
    raw = bytes.fromhex(msg_id)
    address, tail = raw[: -_TAIL.size], raw[-_TAIL.size :]
    port, offset = _TAIL.unpack(tail)
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"offset message id {msg_id}: port {port} is not 0..65535")
    return OffsetMessageId(str(ipaddress.ip_address(address)), port, offset)
