"""The AutoSwitch HA wire format (reference §2.4): sizes, byte layouts, round trips, malformed input."""

import pytest

from brokers.ha.packets import (
    EPOCH_ENTRY_SIZE,
    MASTER_HANDSHAKE_HEADER_SIZE,
    MAX_BODY_SIZE,
    SLAVE_ACK_SIZE,
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    HAState,
    MasterHandshake,
    PacketError,
    SlaveAck,
    SlaveHandshake,
    TransferHeader,
    master_header_size,
    read_state,
    slave_packet_size,
)

pytestmark = pytest.mark.unit


def test_states_are_the_ha_connection_state_ordinals():
    assert [(s.name, s.value) for s in HAState] == [
        ("READY", 0),
        ("HANDSHAKE", 1),
        ("TRANSFER", 2),
        ("SUSPEND", 3),
        ("SHUTDOWN", 4),
    ]


def test_sizes_match_the_reference():
    assert (SLAVE_HANDSHAKE_SIZE, SLAVE_ACK_SIZE) == (16, 12)
    assert (MASTER_HANDSHAKE_HEADER_SIZE, EPOCH_ENTRY_SIZE, TRANSFER_HEADER_SIZE) == (20, 12, 36)


def test_slave_handshake_bytes_are_state_two_shorts_and_a_long_big_endian():
    raw = SlaveHandshake(sync_from_last_file=True, async_learner=False, slave_broker_id=3).encode()
    assert raw == bytes.fromhex("00000001000100000000000000000003")
    assert SlaveHandshake.decode(raw) == SlaveHandshake(True, False, 3)


@pytest.mark.parametrize("handshake", [SlaveHandshake(False, False, 1), SlaveHandshake(True, True, 2**63 - 1)])
def test_slave_handshake_round_trips(handshake):
    raw = handshake.encode()
    assert len(raw) == SLAVE_HANDSHAKE_SIZE
    assert SlaveHandshake.decode(raw) == handshake


def test_slave_ack_bytes_and_round_trip():
    ack = SlaveAck(HAState.TRANSFER, 0x0102030405)
    raw = ack.encode()
    assert raw == bytes.fromhex("000000020000000102030405")
    decoded = SlaveAck.decode(raw)
    assert decoded == ack and decoded.state is HAState.TRANSFER


def test_slave_ack_carries_the_state_the_slave_is_in():
    assert SlaveAck.decode(SlaveAck(HAState.SUSPEND, 7).encode()).state is HAState.SUSPEND


def test_master_reads_the_slave_stream_by_the_first_int():
    stream = SlaveHandshake(False, False, 5).encode() + SlaveAck(HAState.TRANSFER, 100).encode()
    first = slave_packet_size(stream[:4])
    second = slave_packet_size(stream[first : first + 4])
    assert (first, second) == (16, 12)
    assert SlaveHandshake.decode(stream[:first]).slave_broker_id == 5
    assert SlaveAck.decode(stream[first : first + second]).max_offset == 100


def test_master_handshake_bytes_header_then_epoch_entries():
    handshake = MasterHandshake(max_offset=2500, last_epoch=8, entries=((6, 200), (7, 1200), (8, 2500)))
    raw = handshake.encode()
    assert len(raw) == MASTER_HANDSHAKE_HEADER_SIZE + 3 * EPOCH_ENTRY_SIZE
    assert raw[:20] == bytes.fromhex("000000010000002400000000000009c400000008")
    assert raw[20:32] == bytes.fromhex("0000000600000000000000c8")
    assert MasterHandshake.decode_header(raw[:20]) == (36, 2500, 8)
    assert MasterHandshake.decode_body(raw[20:]) == ((6, 200), (7, 1200), (8, 2500))
    assert MasterHandshake.decode(raw) == handshake


def test_master_handshake_of_an_empty_epoch_list_is_a_bare_header():
    raw = MasterHandshake(0, -1, ()).encode()
    assert len(raw) == 20
    assert MasterHandshake.decode(raw) == MasterHandshake(0, -1, ())


def test_transfer_header_bytes_and_round_trip():
    header = TransferHeader(body_size=5, offset=0x0102, epoch=7, epoch_start_offset=0x0100, confirm_offset=0xFF)
    raw = header.encode()
    assert raw == bytes.fromhex("0000000200000005000000000000010200000007000000000000010000000000000000ff")
    assert TransferHeader.decode(raw) == header


def test_an_empty_transfer_is_a_heartbeat():
    header = TransferHeader(0, 4096, 3, 1024, 4000)
    assert TransferHeader.decode(header.encode()).body_size == 0


def test_master_packet_header_size_follows_the_state():
    assert master_header_size(HAState.HANDSHAKE) == 20
    assert master_header_size(2) == 36
    for state in (0, 3, 4, 99):
        with pytest.raises(ValueError, match="HANDSHAKE or TRANSFER"):
            master_header_size(state)


def test_read_state_of_any_packet():
    assert read_state(TransferHeader(0, 0, 1, 0, 0).encode()) is HAState.TRANSFER


@pytest.mark.parametrize(
    ("decode", "raw", "message"),
    [
        pytest.param(SlaveHandshake.decode, b"\x00" * 15, "must be 16 bytes", id="handshake-short"),
        pytest.param(
            SlaveHandshake.decode,
            SlaveAck(HAState.TRANSFER, 1).encode() + b"\0" * 4,
            "must be HANDSHAKE",
            id="handshake-wrong-state",
        ),
        pytest.param(
            SlaveHandshake.decode,
            bytes.fromhex("00000001000200000000000000000001"),
            "isSyncFromLastFile must be 0 or 1",
            id="handshake-bad-flag",
        ),
        pytest.param(
            SlaveHandshake.decode,
            bytes.fromhex("00000009000000000000000000000001"),
            "unknown HA state 9",
            id="handshake-unknown-state",
        ),
        pytest.param(SlaveAck.decode, b"\x00" * 13, "must be 12 bytes", id="ack-long"),
        pytest.param(SlaveAck.decode, bytes.fromhex("0000000a0000000000000000"), "unknown HA state 10", id="ack-unknown-state"),
        pytest.param(
            SlaveAck.decode, bytes.fromhex("000000010000000000000000"), "16-byte slave handshake", id="ack-says-handshake"
        ),
        pytest.param(MasterHandshake.decode_header, b"\x00" * 19, "must be 20 bytes", id="master-handshake-short"),
        pytest.param(
            MasterHandshake.decode_header,
            bytes.fromhex("0000000200000000000000000000000000000000"),
            "must be HANDSHAKE",
            id="master-handshake-wrong-state",
        ),
        pytest.param(
            MasterHandshake.decode_header,
            bytes.fromhex("00000001ffffffff000000000000000000000000"),
            "body size -1",
            id="master-handshake-negative-body",
        ),
        pytest.param(
            MasterHandshake.decode_header,
            bytes.fromhex("000000010000000d000000000000000000000000"),
            "not a multiple of 12",
            id="master-handshake-ragged-body",
        ),
        pytest.param(MasterHandshake.decode_body, b"\x00" * 13, "not a multiple of 12", id="master-handshake-body"),
        pytest.param(
            MasterHandshake.decode,
            MasterHandshake(0, 1, ((1, 0),)).encode()[:-1],
            "must be 32 bytes",
            id="master-handshake-truncated",
        ),
        pytest.param(TransferHeader.decode, b"\x00" * 35, "must be 36 bytes", id="transfer-short"),
        pytest.param(
            TransferHeader.decode, bytes.fromhex("0000000100000000") + b"\0" * 28, "must be TRANSFER", id="transfer-wrong-state"
        ),
        pytest.param(
            TransferHeader.decode,
            bytes.fromhex("0000000280000000") + b"\0" * 28,
            "body size -2147483648",
            id="transfer-negative-body",
        ),
        pytest.param(
            TransferHeader.decode, bytes.fromhex("0000000204000001") + b"\0" * 28, "body size 67108865", id="transfer-insane-body"
        ),
        pytest.param(slave_packet_size, b"\x00\x00\x00", "at least 4 bytes", id="stream-too-short"),
        pytest.param(slave_packet_size, bytes.fromhex("00000005"), "unknown HA state 5", id="stream-unknown-state"),
    ],
)
def test_malformed_input_is_a_packet_error(decode, raw, message):
    with pytest.raises(PacketError, match=message):
        decode(raw)


def test_packet_error_is_a_value_error():
    assert issubclass(PacketError, ValueError)


@pytest.mark.parametrize(
    ("packet", "message"),
    [
        pytest.param(SlaveHandshake(False, False, 2**63), "cannot encode", id="broker-id-beyond-long"),
        pytest.param(SlaveAck(HAState.HANDSHAKE, 0), "16-byte SlaveHandshake", id="ack-in-handshake-state"),
        pytest.param(TransferHeader(MAX_BODY_SIZE + 1, 0, 1, 0, 0), "body size", id="transfer-body-too-big"),
        pytest.param(TransferHeader(-1, 0, 1, 0, 0), "body size", id="transfer-negative-body"),
        pytest.param(MasterHandshake(0, 2**31, ()), "cannot encode", id="epoch-beyond-int"),
        pytest.param(MasterHandshake(0, 1, ((2**31, 0),)), "cannot encode", id="entry-epoch-beyond-int"),
    ],
)
def test_unencodable_values_are_packet_errors(packet, message):
    with pytest.raises(PacketError, match=message):
        packet.encode()
