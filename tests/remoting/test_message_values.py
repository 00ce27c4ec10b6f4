"""Offset message ids (mqrules/remoting/message_id.py) and the properties string
(mqrules/remoting/properties.py), as MessageDecoder.java writes and reads them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqrules.remoting.message_id import OffsetMessageId, decode_offset_message_id, encode_offset_message_id
from mqrules.remoting.properties import decode_properties, encode_properties

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "host, port, offset, msg_id",
    [
        ("10.0.0.1", 10911, 0x1234, "0A00000100002A9F0000000000001234"),
        ("192.168.0.1", 10911, 0, "C0A8000100002A9F0000000000000000"),
        ("255.255.255.255", 65535, 2**63 - 1, "FFFFFFFF0000FFFF7FFFFFFFFFFFFFFF"),
        ("::1", 10911, 5, "0000000000000000000000000000000100002A9F0000000000000005"),
        ("fe80::ab", 1, 256, "FE8000000000000000000000000000AB000000010000000000000100"),
    ],
)
def test_an_offset_message_id_is_address_port_offset_in_upper_hex(host, port, offset, msg_id):
    assert encode_offset_message_id(host, port, offset) == msg_id
    assert decode_offset_message_id(msg_id) == OffsetMessageId(host, port, offset)
    assert decode_offset_message_id(msg_id.lower()) == OffsetMessageId(host, port, offset)


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "0A00000100002A9F00000000000012",  # 30 digits
        "0A00000100002A9F000000000000123G",
        "0A000001 00002A9F 0000000000001234"[:32],  # bytes.fromhex would skip the spaces
        "0A000001FFFFFFFF0000000000001234",  # port -1
        "0A000001000100000000000000001234",  # port 65536
        "٣" * 32,
        "7F0000010000A2F90000000000000000AB",  # 34 digits
    ],
)
def test_a_malformed_offset_message_id_is_a_value_error(msg_id):
    with pytest.raises(ValueError):
        decode_offset_message_id(msg_id)


@pytest.mark.parametrize(
    "host, port, offset",
    [("localhost", 1, 0), ("10.0.0.1", 65536, 0), ("10.0.0.1", -1, 0), ("10.0.0.1", 1, 2**63)],
)
def test_an_offset_message_id_needs_an_ip_a_port_and_a_long(host, port, offset):
    with pytest.raises(ValueError):
        encode_offset_message_id(host, port, offset)


def test_properties_are_name_value_pairs_with_separators():
    assert encode_properties({"KEYS": "k1 k2", "UNIQ_KEY": "7F00", "TAGS": None}) == "KEYS\x01k1 k2\x02UNIQ_KEY\x017F00\x02"


@pytest.mark.parametrize(
    "text, read",
    [
        ("a\x01b\x02", {"a": "b"}),
        ("a\x01b", {"a": "b"}),  # no closing separator
        ("a\x01b\x02c\x01d\x02", {"a": "b", "c": "d"}),
        ("\x01b\x02", {}),  # no name
        ("a\x01\x02", {}),  # no value
        ("ab\x02", {}),  # no name-value separator
        ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # the value runs to the next \x02
        ("a\x011\x02a\x012\x02", {"a": "2"}),
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("", {}),
    ],
)
def test_properties_are_read_as_java_reads_them(text, read):
    assert decode_properties(text) == read


@pytest.mark.parametrize("properties", [{"": "v"}, {"a\x01": "v"}, {"a": "v\x02"}, {"a\x02b": "v"}])
def test_a_property_the_reader_would_split_wrong_is_refused(properties):
    with pytest.raises(ValueError):
        encode_properties(properties)


_PROPERTY_TEXT = st.text(st.characters(blacklist_characters="\x01\x02"), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_PROPERTY_TEXT, _PROPERTY_TEXT, max_size=8))
def test_properties_survive_a_round_trip(properties):
    assert decode_properties(encode_properties(properties)) == properties
