"""The AutoSwitch HA wire format (reference §2.4). All integers are big-endian, as Java's ByteBuffer.

Slave -> master (a stream of 16- and 12-byte packets; the first int tells which):
    handshake, 16 bytes:  4 state(=HANDSHAKE) | 2 isSyncFromLastFile | 2 isAsyncLearner | 8 slaveBrokerId
    ack,       12 bytes:  4 state             | 8 slaveMaxOffset

Master -> slave (both kinds start with ``4 state | 4 bodySize``):
    handshake, 20 + n*12: 4 state(=HANDSHAKE) | 4 bodySize | 8 masterMaxPhyOffset | 4 lastEpoch
                          then bodySize/12 x (4 epoch | 8 startOffset)
    transfer,  36 + n:    4 state(=TRANSFER) | 4 bodySize | 8 offset | 4 epoch | 8 epochStartOffset
                          | 8 confirmOffset, then bodySize bytes of commit log (empty = heartbeat)

Encoders and decoders raise ``PacketError`` on anything malformed; they never return a partial value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum


class HAState(IntEnum):
    """``HAConnectionState`` ordinals, as they travel in every packet's first int."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class PacketError(ValueError):
    """Bytes (or values) that are not a valid HA packet."""


MAX_BODY_SIZE = 64 * 1024 * 1024  # sanity bound: a batch is <= haTransferBatchSize (32 KiB) upstream

_STATE = struct.Struct(">i")
_SLAVE_HANDSHAKE = struct.Struct(">ihhq")
_SLAVE_ACK = struct.Struct(">iq")
_MASTER_HANDSHAKE_HEADER = struct.Struct(">iiqi")
_EPOCH_ENTRY = struct.Struct(">iq")
_TRANSFER_HEADER = struct.Struct(">iiqiqq")

SLAVE_HANDSHAKE_SIZE = _SLAVE_HANDSHAKE.size  # 4+2+2+8 = 16
SLAVE_ACK_SIZE = _SLAVE_ACK.size  # 4+8 = 12
MASTER_HANDSHAKE_HEADER_SIZE = _MASTER_HANDSHAKE_HEADER.size  # 4+4+8+4 = 20
EPOCH_ENTRY_SIZE = _EPOCH_ENTRY.size  # 4+8 = 12
TRANSFER_HEADER_SIZE = _TRANSFER_HEADER.size  # 4+4+8+4+8+8 = 36


def _pack(layout: struct.Struct, what: str, *values: int) -> bytes:
    try:
        return layout.pack(*values)
    except struct.error as exc:  # a value out of its Java type's range
        raise PacketError(f"cannot encode {what} {values}: {exc}") from None


def _check_length(raw: bytes, expected: int, what: str) -> None:
    if len(raw) != expected:
        raise PacketError(f"{what} must be {expected} bytes, got {len(raw)}")


def _known_state(value: int, what: str) -> HAState:
    try:
        return HAState(value)
    except ValueError:
        raise PacketError(f"{what}: unknown HA state {value}") from None


def _expect_state(value: int, expected: HAState, what: str) -> None:
    if _known_state(value, what) is not expected:
        raise PacketError(f"{what}: state must be {expected.name}, got {HAState(value).name}")


def _check_body_size(body_size: int, what: str) -> None:
    if not 0 <= body_size <= MAX_BODY_SIZE:
        raise PacketError(f"{what}: body size {body_size} is outside [0, {MAX_BODY_SIZE}]")


def _flag(value: int, name: str) -> bool:
    if value not in (0, 1):
        raise PacketError(f"slave handshake: {name} must be 0 or 1, got {value}")
    return value == 1


def read_state(raw: bytes) -> HAState:
    """The state in a packet's first int (any packet, either direction)."""
    if len(raw) < _STATE.size:
        raise PacketError(f"need at least {_STATE.size} bytes to read a state, got {len(raw)}")
    return _known_state(_STATE.unpack_from(raw)[0], "packet")


def slave_packet_size(first4: bytes) -> int:
    """How long the slave packet starting with ``first4`` is: a handshake is 16 bytes, anything else 12."""
    return SLAVE_HANDSHAKE_SIZE if read_state(first4) is HAState.HANDSHAKE else SLAVE_ACK_SIZE


def master_header_size(state: int) -> int:
    """How long the header of a master packet in ``state`` is (its body size follows the state)."""
    if state == HAState.HANDSHAKE:
        return MASTER_HANDSHAKE_HEADER_SIZE
    if state == HAState.TRANSFER:
        return TRANSFER_HEADER_SIZE
    raise PacketError(f"master packets are HANDSHAKE or TRANSFER, got state {state}")


@dataclass(frozen=True)
class SlaveHandshake:
    sync_from_last_file: bool
    async_learner: bool
    slave_broker_id: int

    def encode(self) -> bytes:
        return _pack(
            _SLAVE_HANDSHAKE,
            "slave handshake",
            HAState.HANDSHAKE,
            int(self.sync_from_last_file),
            int(self.async_learner),
            self.slave_broker_id,
        )

    @classmethod
    def decode(cls, raw: bytes) -> SlaveHandshake:
        _check_length(raw, SLAVE_HANDSHAKE_SIZE, "slave handshake")
        state, sync_from_last_file, async_learner, slave_broker_id = _SLAVE_HANDSHAKE.unpack(raw)
        _expect_state(state, HAState.HANDSHAKE, "slave handshake")
        return cls(_flag(sync_from_last_file, "isSyncFromLastFile"), _flag(async_learner, "isAsyncLearner"), slave_broker_id)


@dataclass(frozen=True)
class SlaveAck:
    """The slave's report of its max offset; it stamps the state it is actually in (#6306)."""

    state: HAState
    max_offset: int

    def encode(self) -> bytes:
        if _known_state(self.state, "slave ack") is HAState.HANDSHAKE:
            raise PacketError("slave ack: a HANDSHAKE packet is a 16-byte SlaveHandshake")
        return _pack(_SLAVE_ACK, "slave ack", self.state, self.max_offset)

    @classmethod
    def decode(cls, raw: bytes) -> SlaveAck:
        _check_length(raw, SLAVE_ACK_SIZE, "slave ack")
        state, max_offset = _SLAVE_ACK.unpack(raw)
        if _known_state(state, "slave ack") is HAState.HANDSHAKE:
            raise PacketError("slave ack: state HANDSHAKE announces a 16-byte slave handshake, not a 12-byte ack")
        return cls(HAState(state), max_offset)


@dataclass(frozen=True)
class MasterHandshake:
    """The master's answer to a slave handshake: its max offset and its whole epoch list."""

    max_offset: int
    last_epoch: int
    entries: tuple[tuple[int, int], ...]  # (epoch, startOffset), oldest first

    def encode(self) -> bytes:
        body_size = len(self.entries) * EPOCH_ENTRY_SIZE
        _check_body_size(body_size, "master handshake")
        parts = [
            _pack(
                _MASTER_HANDSHAKE_HEADER,
                "master handshake header",
                HAState.HANDSHAKE,
                body_size,
                self.max_offset,
                self.last_epoch,
            )
        ]
        parts += [_pack(_EPOCH_ENTRY, "epoch entry", epoch, start) for epoch, start in self.entries]
        return b"".join(parts)

    @staticmethod
    def decode_header(raw: bytes) -> tuple[int, int, int]:
        """``(body_size, max_offset, last_epoch)`` from the 20-byte header."""
        _check_length(raw, MASTER_HANDSHAKE_HEADER_SIZE, "master handshake header")
        state, body_size, max_offset, last_epoch = _MASTER_HANDSHAKE_HEADER.unpack(raw)
        _expect_state(state, HAState.HANDSHAKE, "master handshake header")
        _check_body_size(body_size, "master handshake header")
        if body_size % EPOCH_ENTRY_SIZE:
            raise PacketError(f"master handshake header: body size {body_size} is not a multiple of {EPOCH_ENTRY_SIZE}")
        return body_size, max_offset, last_epoch

    @staticmethod
    def decode_body(raw: bytes) -> tuple[tuple[int, int], ...]:
        """The ``(epoch, startOffset)`` entries of a handshake body."""
        if len(raw) % EPOCH_ENTRY_SIZE:
            raise PacketError(f"master handshake body: {len(raw)} bytes is not a multiple of {EPOCH_ENTRY_SIZE}")
        return tuple(_EPOCH_ENTRY.iter_unpack(raw))

    @classmethod
    def decode(cls, raw: bytes) -> MasterHandshake:
        """A whole packet, header and body."""
        header = raw[:MASTER_HANDSHAKE_HEADER_SIZE]
        body_size, max_offset, last_epoch = cls.decode_header(header)
        _check_length(raw, MASTER_HANDSHAKE_HEADER_SIZE + body_size, "master handshake")
        return cls(max_offset, last_epoch, cls.decode_body(raw[MASTER_HANDSHAKE_HEADER_SIZE:]))


@dataclass(frozen=True)
class TransferHeader:
    """Precedes ``body_size`` bytes of commit log starting at ``offset``; a batch never crosses an epoch's end."""

    body_size: int
    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int

    def encode(self) -> bytes:
        _check_body_size(self.body_size, "transfer header")
        return _pack(
            _TRANSFER_HEADER,
            "transfer header",
            HAState.TRANSFER,
            self.body_size,
            self.offset,
            self.epoch,
            self.epoch_start_offset,
            self.confirm_offset,
        )

    @classmethod
    def decode(cls, raw: bytes) -> TransferHeader:
        _check_length(raw, TRANSFER_HEADER_SIZE, "transfer header")
        state, body_size, offset, epoch, epoch_start_offset, confirm_offset = _TRANSFER_HEADER.unpack(raw)
        _expect_state(state, HAState.TRANSFER, "transfer header")
        _check_body_size(body_size, "transfer header")
        return cls(body_size, offset, epoch, epoch_start_offset, confirm_offset)
