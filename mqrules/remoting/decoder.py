"""Cutting a byte stream into remoting commands: feed what the socket gave, take whole commands.

The length field is checked the moment it arrives, as Netty's ``LengthFieldBasedFrameDecoder`` (fail
fast) does under RocketMQ's ``NettyDecoder``: a frame longer than ``max_frame_length`` (the length field
included) is refused before its body is waited for. The default is RocketMQ's, the system property
``com.rocketmq.remoting.frameMaxLength`` = 16777216 (remoting/.../netty/NettyDecoder.java).
"""

from __future__ import annotations

from collections.abc import Iterator

from .frame import FrameError, FrameErrorReason, RemotingCommand, decode_frame

MAX_FRAME_LENGTH = 16 * 1024 * 1024
LENGTH_FIELD = 4
_COMPACT_AT = 64 * 1024  # bytes consumed before the buffer is shifted down


class FrameDecoder:
    """An incremental decoder for one connection. ``next_command`` answers a command, ``None`` while a
    frame is incomplete, or raises ``FrameError``: after a resumable one (``FrameError.resumable``) the
    bad frame is gone and decoding goes on; after any other, every call raises it again."""

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH):
        if max_frame_length < LENGTH_FIELD + 4:
            raise ValueError(f"max_frame_length {max_frame_length} cannot hold a length field and a header mark")
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._start = 0  # where the next frame begins in _buffer
        self._lost: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded."""
        return len(self._buffer) - self._start

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_command(self) -> RemotingCommand | None:
        if self._lost is not None:
            raise self._lost
        if self.buffered < LENGTH_FIELD:
            return None
        length = int.from_bytes(self._buffer[self._start : self._start + LENGTH_FIELD], "big", signed=True)
        if length < 4 or length > self.max_frame_length - LENGTH_FIELD:
            self._lost = _length_error(length, self.max_frame_length)
            raise self._lost
        if self.buffered < LENGTH_FIELD + length:
            return None
        begin = self._start + LENGTH_FIELD
        frame = bytes(self._buffer[begin : begin + length])
        self._consume(LENGTH_FIELD + length)
        return decode_frame(frame)

    def commands(self) -> Iterator[RemotingCommand]:
        """Every whole command buffered now, in order; raises as ``next_command`` does."""
        while (command := self.next_command()) is not None:
            yield command

    def _consume(self, n: int) -> None:
        self._start += n
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start >= _COMPACT_AT:
            del self._buffer[: self._start]
            self._start = 0


def _length_error(length: int, max_frame_length: int) -> FrameError:
    if length > max_frame_length - LENGTH_FIELD:
        detail = f"a {length + LENGTH_FIELD}-byte frame exceeds the maximum of {max_frame_length}"
        return FrameError(FrameErrorReason.TOO_LONG, detail)
    return FrameError(FrameErrorReason.BAD_LENGTH, f"length field {length} (a frame holds at least a 4-byte header mark)")
