"""The remoting frame (mqrules/remoting/frame.py): golden bytes written by hand from the layout of
RemotingCommand.java and RocketMQSerializable.java, so the layout is pinned and not only
self-consistent; round trips of both serializations; the JSON header as clients really send it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqrules.remoting.frame import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    FrameError,
    FrameErrorReason,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode_frame,
)

pytestmark = pytest.mark.unit

ROUTE_REQUEST = RemotingCommand(code=105, version=399, opaque=42, ext_fields={"topic": "T"})

# GET_ROUTEINFO_BY_TOPIC {topic: T}, opaque 42, version 399 (0x018F), binary header
BINARY_ROUTE_REQUEST = bytes.fromhex(
    "00000025"  # length: 4 (mark) + 33 (header) + 0 (body)
    "01000021"  # mark: ROCKETMQ (1) << 24 | header length 33
    "0069"  # code 105
    "00"  # language JAVA
    "018F"  # version 399
    "0000002A"  # opaque 42
    "00000000"  # flag: a request
    "00000000"  # remark: none
    "0000000C"  # extFields: 12 bytes
    "0005" + b"topic".hex() + "00000001" + b"T".hex()
)

# TOPIC_NOT_EXIST answering opaque 42 with a remark and a body, binary header, from a PYTHON server
BINARY_REPLY = bytes.fromhex(
    "0000001F"  # length: 4 + 24 + 3
    "01000018"  # mark: ROCKETMQ, header length 24
    "0011"  # code 17
    "03"  # language PYTHON
    "0000"  # version 0
    "0000002A"  # opaque 42
    "00000001"  # flag: a response
    "00000003" + b"n/a".hex() + "00000000"  # remark "n/a", no extFields
    "010203"  # body
)

JSON_ROUTE_HEADER = (
    b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":42,'
    b'"serializeTypeCurrentRPC":"JSON","version":399}'
)
JSON_ROUTE_REQUEST = bytes.fromhex("000000800000007C") + JSON_ROUTE_HEADER  # 4 + 124; JSON (0) << 24 | 124


@pytest.mark.parametrize(
    "command, wire",
    [
        pytest.param(
            dataclasses.replace(ROUTE_REQUEST, serialize_type=SerializeType.ROCKETMQ), BINARY_ROUTE_REQUEST, id="binary-request"
        ),
        pytest.param(
            RemotingCommand(
                code=17,
                language=LanguageCode.PYTHON,
                opaque=42,
                flag=RESPONSE_FLAG,
                remark="n/a",
                body=b"\x01\x02\x03",
                serialize_type=SerializeType.ROCKETMQ,
            ),
            BINARY_REPLY,
            id="binary-reply-with-remark-and-body",
        ),
        pytest.param(ROUTE_REQUEST, JSON_ROUTE_REQUEST, id="json-request-in-fastjson-order"),
    ],
)
def test_a_frame_is_laid_out_as_rocketmq_lays_it_out(command, wire):
    assert encode_frame(command) == wire
    assert decode_frame(wire[4:]) == command


def test_a_java_clients_json_request_decodes():
    # What a 4.9 Java client sends for GET_ROUTEINFO_BY_TOPIC (field order is fastjson's, any order reads).
    header = (
        b'{"version":395,"code":105,"opaque":7,"flag":0,"language":"JAVA",'
        b'"serializeTypeCurrentRPC":"JSON","extFields":{"topic":"TopicTest"}}'
    )
    command = decode_frame(len(header).to_bytes(4, "big") + header)
    assert command == RemotingCommand(code=105, version=395, opaque=7, ext_fields={"topic": "TopicTest"})
    assert not command.is_response and not command.is_oneway


def test_numbers_and_booleans_in_json_ext_fields_are_read_as_their_text():
    header = (
        b'{"code":310,"language":"CPP","extFields":{"e":3,"k":true,"m":false,"ratio":1.50,'
        b'"big":12345678901234567890,"gone":null,"tiny":-1e-3,"a":"group"}}'
    )
    command = decode_frame(len(header).to_bytes(4, "big") + header)
    assert command.language is LanguageCode.CPP
    assert command.ext_fields == {
        "e": "3",
        "k": "true",
        "m": "false",
        "ratio": "1.50",
        "big": "12345678901234567890",
        "tiny": "-1e-3",
        "a": "group",
    }


@pytest.mark.parametrize(
    "language, read_as",
    [
        ('"GO"', LanguageCode.GO),
        ('"NODE_JS"', LanguageCode.NODE_JS),
        ('"RUST"', LanguageCode.RUST),
        ("3", LanguageCode.PYTHON),  # fastjson also reads an enum by its ordinal
        ('"COBOL"', LanguageCode.OTHER),
        ("99", LanguageCode.OTHER),
        ("null", LanguageCode.JAVA),
    ],
)
def test_a_json_headers_language(language, read_as):
    header = f'{{"code":34,"language":{language}}}'.encode()
    assert decode_frame(len(header).to_bytes(4, "big") + header).language is read_as


def test_an_unknown_binary_language_code_reads_as_other():
    wire = bytearray(BINARY_ROUTE_REQUEST)
    wire[4 + 4 + 2] = 0x7F
    assert decode_frame(bytes(wire[4:])).language is LanguageCode.OTHER


def test_a_json_header_without_fields_takes_javas_defaults():
    command = decode_frame(b"\x00\x00\x00\x02{}")
    assert command == RemotingCommand(code=0)


def test_binary_zero_lengths_are_javas_null():
    # remark length 0 -> None; an entry with an empty value or an empty key is left out
    header = bytes.fromhex("0022 00 0000 00000001 00000000 00000000 00000016") + (
        b"\x00\x01k\x00\x00\x00\x00" + b"\x00\x00\x00\x00\x00\x01v" + b"\x00\x01a\x00\x00\x00\x01b"
    )
    command = decode_frame(_binary(header))
    assert command.remark is None and command.ext_fields == {"a": "b"}
    assert command.code == 34 and command.opaque == 1


def test_a_response_answers_its_request():
    request = RemotingCommand(code=11, opaque=99, flag=ONEWAY_FLAG, serialize_type=SerializeType.ROCKETMQ)
    assert request.is_oneway and not request.is_response
    reply = request.response(19, "no new message", ext_fields={"nextBeginOffset": "5"})
    assert (reply.opaque, reply.flag, reply.serialize_type) == (99, RESPONSE_FLAG, SerializeType.ROCKETMQ)
    assert reply.is_response and not reply.is_oneway
    assert (reply.code, reply.remark, reply.ext_fields, reply.language) == (
        19,
        "no new message",
        {"nextBeginOffset": "5"},
        LanguageCode.JAVA,
    )


def _command(binary: bool):
    """Commands either header carries exactly (binary: no empty strings, int16 code and version)."""
    short = st.integers(-(2**15), 2**15 - 1)
    wide = st.integers(-(2**31), 2**31 - 1)
    text = st.text(min_size=1 if binary else 0, max_size=30)
    return st.builds(
        RemotingCommand,
        code=short if binary else wide,
        language=st.sampled_from(LanguageCode),
        version=short if binary else wide,
        opaque=wide,
        flag=wide,
        remark=st.none() | text,
        ext_fields=st.dictionaries(st.text(min_size=1, max_size=20), text, max_size=6),
        body=st.binary(max_size=64),
        serialize_type=st.just(SerializeType.ROCKETMQ if binary else SerializeType.JSON),
    )


@settings(max_examples=200, deadline=None)
@given(st.booleans().flatmap(_command))
def test_every_command_survives_a_round_trip(command):
    wire = encode_frame(command)
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4
    assert wire[4] == command.serialize_type
    assert decode_frame(wire[4:]) == command


@pytest.mark.parametrize(
    "command, error",
    [
        pytest.param(RemotingCommand(code=40000, serialize_type=SerializeType.ROCKETMQ), ValueError, id="code-beyond-int16"),
        pytest.param(RemotingCommand(code=1, opaque=2**31), ValueError, id="json-opaque-beyond-int32"),
        pytest.param(RemotingCommand(code=1, ext_fields={"queueId": 3}), TypeError, id="an-int-ext-field"),
        pytest.param(
            RemotingCommand(code=1, ext_fields={"k" * 40000: "v"}, serialize_type=SerializeType.ROCKETMQ),
            ValueError,
            id="a-key-beyond-int16",
        ),
        pytest.param(
            RemotingCommand(code=1, remark="r" * 0xFFFFFF, serialize_type=SerializeType.ROCKETMQ),
            ValueError,
            id="a-header-beyond-24-bits",
        ),
    ],
)
def test_a_command_no_peer_could_read_is_not_encoded(command, error):
    with pytest.raises(error):
        encode_frame(command)


def _json(text: bytes) -> bytes:
    return len(text).to_bytes(4, "big") + text


def _binary(header: bytes) -> bytes:
    return (0x01000000 | len(header)).to_bytes(4, "big") + header


FIXED = bytes.fromhex("0022 00 0000 00000001 00000000")  # code 34, JAVA, version 0, opaque 1, flag 0
UNPARSABLE = FrameErrorReason.HEADER_UNPARSABLE


@pytest.mark.parametrize(
    "frame, reason, says",
    [
        pytest.param(b"\x00\x00", FrameErrorReason.BAD_LENGTH, "no room", id="shorter-than-the-mark"),
        pytest.param(b"\x02\x00\x00\x00", FrameErrorReason.UNKNOWN_SERIALIZE_TYPE, "type 2", id="serialize-type-2"),
        pytest.param(b"\x7b\x22\x63\x6f", FrameErrorReason.UNKNOWN_SERIALIZE_TYPE, "type 123", id="our-peer-channels-json"),
        pytest.param(b"\x00\x00\x00\x05{}", UNPARSABLE, "exceeds", id="header-longer-than-the-frame"),
        pytest.param(_json(b"\xff{}"), UNPARSABLE, "JSON header", id="json-not-utf8"),
        pytest.param(_json(b"[1]"), UNPARSABLE, "not an object", id="json-array"),
        pytest.param(_json(b'{"code":"105"}'), UNPARSABLE, "code", id="json-code-as-text"),
        pytest.param(_json(b'{"code":2147483648}'), UNPARSABLE, "32-bit", id="json-code-beyond-int32"),
        pytest.param(_json(b'{"code":1.5}'), UNPARSABLE, "code", id="json-code-decimal"),
        pytest.param(_json(b'{"code":true}'), UNPARSABLE, "code", id="json-code-boolean"),
        pytest.param(_json(b'{"code":1,"opaque":NaN}'), UNPARSABLE, "NaN", id="json-nan"),
        pytest.param(_json(b'{"code":1,"extFields":{"a":{"b":"c"}}}'), UNPARSABLE, "extFields.a", id="json-nested-ext-field"),
        pytest.param(_json(b'{"code":1,"extFields":["a"]}'), UNPARSABLE, "extFields", id="json-ext-fields-array"),
        pytest.param(_json(b'{"code":1,"language":{}}'), UNPARSABLE, "language", id="json-language-object"),
        pytest.param(_json(b'{"code":1,"remark":[1]}'), UNPARSABLE, "remark", id="json-remark-array"),
        pytest.param(_json(b"[" * 100_000), UNPARSABLE, "JSON header", id="json-nested-too-deep"),
        pytest.param(_json(b'{"code":1' + b"0" * 5000 + b"}"), UNPARSABLE, "JSON header", id="json-int-of-5000-digits"),
        pytest.param(_binary(FIXED[:10]), UNPARSABLE, "fixed fields", id="binary-fixed-fields-cut"),
        pytest.param(_binary(FIXED + b"\xff\xff\xff\xff"), UNPARSABLE, "remark", id="binary-remark-length-negative"),
        pytest.param(_binary(FIXED + b"\x00\x00\x00\x09ab"), UNPARSABLE, "remark", id="binary-remark-past-the-header"),
        pytest.param(_binary(FIXED + b"\x00\x00\x00\x01\xff"), UNPARSABLE, "not UTF-8", id="binary-remark-not-utf8"),
        pytest.param(_binary(FIXED + bytes(4)), UNPARSABLE, "extFields length", id="binary-no-ext-fields-length"),
        pytest.param(
            _binary(FIXED + bytes(4) + b"\x00\x00\x00\x08ab"), UNPARSABLE, "extFields", id="binary-ext-fields-past-the-header"
        ),
        pytest.param(
            _binary(FIXED + bytes(4) + b"\x00\x00\x00\x05\x00\x01a\x00\x00"),
            UNPARSABLE,
            "value length",
            id="binary-entry-past-the-map",
        ),
        pytest.param(
            _binary(FIXED + bytes(4) + b"\x00\x00\x00\x03\xff\xffa"),
            UNPARSABLE,
            "key",
            id="binary-key-length-negative",
        ),
        pytest.param(_binary(FIXED + bytes(8) + b"zz"), UNPARSABLE, "2 bytes after extFields", id="binary-trailing-bytes"),
    ],
)
def test_a_bad_frame_says_why(frame, reason, says):
    with pytest.raises(FrameError) as caught:
        decode_frame(frame)
    assert caught.value.reason is reason
    assert says in str(caught.value)
    assert caught.value.resumable is (reason is not FrameErrorReason.BAD_LENGTH)
