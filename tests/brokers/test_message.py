"""The commit-log record (RocketMQ's layout): round trip, corruption detection."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.store import message as m

pytestmark = pytest.mark.unit

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|", min_size=1, max_size=40)


@given(
    topic=names,
    queue_id=st.integers(0, 2**31 - 1),
    body=st.binary(max_size=4096),
    props=st.dictionaries(
        names,
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20),
        max_size=5,
    ),
    queue_offset=st.integers(0, 2**62),
    physical_offset=st.integers(0, 2**62),
    flag=st.integers(-(2**31), 2**31 - 1),
    reconsume=st.integers(0, 100),
)
def test_encode_decode_round_trip(topic, queue_id, body, props, queue_offset, physical_offset, flag, reconsume):
    msg = m.Message(
        topic,
        queue_id,
        body,
        props,
        flag=flag,
        born_timestamp=1700000000000,
        born_host=("10.1.2.3", 4567),
        store_host=("127.0.0.1", 10911),
        reconsume_times=reconsume,
    )
    raw = m.encode(msg, queue_offset=queue_offset, physical_offset=physical_offset, store_timestamp=1700000000123)
    assert len(raw) == m.FIXED_SIZE + len(body) + len(topic.encode()) + len(m.encode_properties(props))
    assert m.record_length(raw) == len(raw)
    back = m.decode(raw)
    read = {k: v for k, v in props.items() if v}  # Java's reading drops a property without a value
    assert (back.topic, back.queue_id, back.body, dict(back.properties), back.flag) == (topic, queue_id, body, read, flag)
    assert (back.queue_offset, back.physical_offset, back.store_timestamp) == (queue_offset, physical_offset, 1700000000123)
    assert (back.born_host, back.store_host, back.reconsume_times) == (("10.1.2.3", 4567), ("127.0.0.1", 10911), reconsume)


def test_layout_matches_rocketmq():
    raw = m.encode(m.Message("T", 1, b"xyz"), queue_offset=0, physical_offset=0, store_timestamp=0)
    assert m.FIXED_SIZE == 91  # CommitLog.calMsgLength without body, topic and properties
    assert int.from_bytes(raw[4:8], "big", signed=True) == m.MESSAGE_MAGIC_CODE == -626843481
    assert int.from_bytes(raw[8:12], "big") == m.body_crc(b"xyz")


def test_a_flipped_body_byte_is_a_crc_mismatch():
    raw = bytearray(m.encode(m.Message("T", 0, b"payload"), queue_offset=0, physical_offset=0, store_timestamp=0))
    raw[m.HEAD_SIZE + 4] ^= 0xFF
    with pytest.raises(m.CorruptRecord, match="CRC"):
        m.decode(bytes(raw))


@pytest.mark.parametrize("cut", [0, 4, 8, 50, 90])
def test_a_torn_record_is_corrupt(cut):
    raw = m.encode(m.Message("T", 0, b"payload"), queue_offset=0, physical_offset=0, store_timestamp=0)
    with pytest.raises(m.CorruptRecord):
        m.decode(raw[:cut])


def test_blank_record_fills_a_segment_tail():
    b = m.blank(100)
    assert len(b) == 100 and m.decode(b) == m.Blank(100)


def test_oversized_topic_and_properties_are_illegal():
    with pytest.raises(ValueError, match="topic"):
        m.validate(m.Message("x" * 128, 0, b""))
    with pytest.raises(ValueError, match="properties"):
        m.validate(m.Message("T", 0, b"", {"k": "v" * 40000}))


def test_properties_that_are_not_utf8_are_refused_not_stored():
    msg = m.Message("t", 0, b"x", {"k": "\ud800"}, born_timestamp=1700000000000, born_host=("10.1.2.3", 4567))
    with pytest.raises(m.IllegalMessage, match=m.PROPERTIES_UTF8):
        m.encode(msg, queue_offset=0, physical_offset=0, store_timestamp=1700000000123)
