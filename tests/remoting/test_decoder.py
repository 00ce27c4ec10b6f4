"""The incremental decoder (mqrules/remoting/decoder.py): frames cut at every byte still come out whole,
the length field is judged the moment it arrives (Netty's fail-fast under NettyDecoder), and random or
truncated bytes give a clean wait or a FrameError, never anything else."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqrules.remoting.decoder import MAX_FRAME_LENGTH, FrameDecoder
from mqrules.remoting.frame import (
    FrameError,
    FrameErrorReason,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    encode_frame,
)

pytestmark = pytest.mark.unit

SEND = RemotingCommand(
    code=310,
    language=LanguageCode.GO,
    opaque=3,
    ext_fields={"a": "group", "b": "T", "e": "0"},
    body=b"hello",
    serialize_type=SerializeType.ROCKETMQ,
)
HEARTBEAT = RemotingCommand(code=34, opaque=4, body=b'{"clientID":"c1"}')
STREAM = encode_frame(SEND) + encode_frame(HEARTBEAT)


def _drain(decoder: FrameDecoder) -> list[RemotingCommand]:
    return list(decoder.commands())


def test_the_default_maximum_is_rocketmqs_frame_max_length():
    assert MAX_FRAME_LENGTH == 16777216 == FrameDecoder().max_frame_length


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_a_stream_cut_anywhere_gives_both_commands(cut):
    decoder = FrameDecoder()
    decoder.feed(STREAM[:cut])
    got = _drain(decoder)
    decoder.feed(STREAM[cut:])
    assert got + _drain(decoder) == [SEND, HEARTBEAT]
    assert decoder.buffered == 0


def test_a_stream_fed_a_byte_at_a_time_gives_each_command_when_its_last_byte_arrives():
    decoder = FrameDecoder()
    seen = []
    for i in range(len(STREAM)):
        decoder.feed(STREAM[i : i + 1])
        seen += [(i + 1, c) for c in _drain(decoder)]
    assert seen == [(len(encode_frame(SEND)), SEND), (len(STREAM), HEARTBEAT)]


def test_many_frames_in_one_feed_come_out_in_order():
    commands = [RemotingCommand(code=34, opaque=n, body=bytes(n % 50)) for n in range(3000)]
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame(c) for c in commands))
    assert _drain(decoder) == commands and decoder.buffered == 0


@pytest.mark.parametrize(
    "length, waits",
    [
        pytest.param(MAX_FRAME_LENGTH - 4, True, id="exactly-the-maximum-waits-for-its-bytes"),
        pytest.param(MAX_FRAME_LENGTH - 3, False, id="one-byte-over-is-refused-at-once"),
        pytest.param(2**31 - 1, False, id="int32-max"),
    ],
)
def test_a_frame_over_the_maximum_is_refused_before_its_body_arrives(length, waits):
    decoder = FrameDecoder()
    decoder.feed(length.to_bytes(4, "big"))
    if waits:
        assert decoder.next_command() is None
        return
    with pytest.raises(FrameError) as caught:
        decoder.next_command()
    assert caught.value.reason is FrameErrorReason.TOO_LONG and not caught.value.resumable


def test_a_smaller_maximum_is_kept():
    decoder = FrameDecoder(max_frame_length=64)
    decoder.feed(encode_frame(RemotingCommand(code=34, body=bytes(100))))
    with pytest.raises(FrameError, match="exceeds the maximum of 64"):
        decoder.next_command()


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 1, 3])
def test_a_length_that_cannot_hold_a_header_mark_loses_the_stream(length):
    decoder = FrameDecoder()
    decoder.feed(length.to_bytes(4, "big", signed=True) + encode_frame(HEARTBEAT))
    for _ in range(2):  # and stays lost: nothing after it can be found
        with pytest.raises(FrameError) as caught:
            decoder.next_command()
        assert caught.value.reason is FrameErrorReason.BAD_LENGTH and not caught.value.resumable


def test_after_an_unreadable_header_the_next_frame_is_read():
    bad = (4 + 2).to_bytes(4, "big") + b"\x02\x00\x00\x00" + b"{}"  # serialize type 2
    decoder = FrameDecoder()
    decoder.feed(bad + encode_frame(HEARTBEAT))
    with pytest.raises(FrameError) as caught:
        decoder.next_command()
    assert caught.value.reason is FrameErrorReason.UNKNOWN_SERIALIZE_TYPE and caught.value.resumable
    assert _drain(decoder) == [HEARTBEAT]


def _feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> None:
    """Feeds and drains; asserts that only FrameError escapes, and that a lost stream stays lost."""
    for chunk in chunks:
        decoder.feed(chunk)
        while True:
            try:
                if decoder.next_command() is None:
                    break
            except FrameError as exc:
                if not exc.resumable:
                    with pytest.raises(FrameError):
                        decoder.next_command()
                    return


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8))
def test_random_bytes_give_frame_errors_or_waits(data, cuts):
    _feed_all(FrameDecoder(max_frame_length=1024), _chunks(data, cuts))


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 1), st.integers(0, 2))
def test_random_bytes_behind_a_plausible_prefix_give_frame_errors_or_waits(header, serialize_type, extra):
    """A length and mark that fit, so the header parsers see the random bytes."""
    body = header[len(header) // 2 :]
    header = header[: len(header) // 2]
    mark = (serialize_type << 24) | (len(header) + extra)
    frame = (4 + len(header) + len(body)).to_bytes(4, "big") + mark.to_bytes(4, "big") + header + body
    _feed_all(FrameDecoder(), [frame])


@FUZZ
@given(st.sampled_from([SEND, HEARTBEAT]), st.data())
def test_a_truncated_frame_waits(command, data):
    wire = encode_frame(command)
    cut = data.draw(st.integers(0, len(wire) - 1))
    decoder = FrameDecoder()
    decoder.feed(wire[:cut])
    assert decoder.next_command() is None


@FUZZ
@given(
    st.sampled_from([SEND, HEARTBEAT]), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6)
)
def test_a_frame_with_bytes_changed_decodes_or_says_why(command, changes):
    wire = bytearray(encode_frame(command) + encode_frame(HEARTBEAT))
    for at, value in changes:
        wire[at % len(wire)] = value
    _feed_all(FrameDecoder(max_frame_length=4096), [bytes(wire)])
