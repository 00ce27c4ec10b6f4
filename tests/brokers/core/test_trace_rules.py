"""A message's trace for one group (brokers/core/trace.py, docs/messages.md §2-3): the trace keys a
consumer-metadata record carries, the deliveries the records of a position tell, and the verdict."""

from __future__ import annotations

import pytest

from brokers.core.trace import (
    TRACE_KEYS_MAX_BYTES,
    Consumed,
    Delivery,
    Noted,
    Position,
    decide,
    deliveries_at,
    record_trace_keys,
    trace_key,
)

pytestmark = pytest.mark.unit

G, T, RETRY, DLQ = "billing", "Orders", "%RETRY%billing_Orders", "%DLQ%billing"


@pytest.mark.parametrize(
    ("topic", "queue_id", "offset", "key"),
    [
        pytest.param("Orders", 0, 0, "Orders@0@0", id="first-message"),
        pytest.param("%RETRY%g_Orders", 0, 17, "%RETRY%g_Orders@0@17", id="retry-copy"),
        pytest.param("T", 65535, 2**62, f"T@65535@{2**62}", id="largest-queue"),
    ],
)
def test_a_positions_trace_key_is_topic_queue_and_offset(topic, queue_id, offset, key):
    assert trace_key(topic, queue_id, offset) == key


def rec(kind: str, **fields) -> dict:
    return {"kind": kind, "dataVersion": {}, "group": G, "topic": T, "queueId": 1, **fields}


@pytest.mark.parametrize(
    ("record", "keys"),
    [
        pytest.param(
            rec("pop", entries=[[5, 9, 1, "n"], [6, 9, 1, "m"]], skipped=[7]),
            ["Orders@1@5", "Orders@1@6"],
            id="pop-names-what-it-hands-out",
        ),
        pytest.param(rec("finish", offsets=[3]), ["Orders@1@3"], id="finish"),
        pytest.param(rec("finish", offsets=[3], movedTo=RETRY), ["Orders@1@3"], id="finish-by-a-move"),
        pytest.param(rec("invisible", offset=4, deadlineMs=1, nonce="n"), ["Orders@1@4"], id="invisible"),
        pytest.param(rec("reset", offset=4), [], id="reset-names-no-message"),
        pytest.param({"kind": "group", "group": G}, [], id="group"),
        pytest.param({"kind": "snapshot"}, [], id="snapshot"),
    ],
)
def test_a_record_carries_one_trace_key_per_message_it_names(record, keys):
    assert record_trace_keys(record) == keys


def test_a_record_naming_thousands_of_messages_keeps_its_keys_within_the_budget():
    keys = record_trace_keys(rec("finish", offsets=list(range(10_000))))
    assert 0 < len(keys) < 10_000 and len(" ".join(keys).encode()) <= TRACE_KEYS_MAX_BYTES
    assert keys[0] == "Orders@1@0"


P = Position(T, 1, 5)


def noted(at: int, kind: str, **fields) -> Noted:
    return Noted(rec(kind, **fields), stored_ms=at * 1000, log_offset=at)


def pop(at: int, attempt: int, client: str = "c1", offset: int = 5) -> Noted:
    return noted(at, "pop", entries=[[offset, at * 1000 + 500, attempt, "n"]], clientId=client, popTimeMs=at * 1000)


def summary(ds: list[Delivery]) -> list[tuple]:
    return [(d.attempt, d.client_id, d.ack_time_ms, d.moved_to, d.invisible_until_ms) for d in ds]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param([], [], id="never-delivered"),
        pytest.param([pop(1, 1)], [(1, "c1", None, None, 1500)], id="in-flight"),
        pytest.param([pop(1, 1), noted(2, "finish", offsets=[5])], [(1, "c1", 2000, None, 1500)], id="acked"),
        pytest.param(
            [noted(2, "finish", offsets=[5]), pop(1, 1)],
            [(1, "c1", 2000, None, 1500)],
            id="records-in-log-order-not-answer-order",
        ),
        pytest.param(
            [pop(1, 1), noted(2, "finish", offsets=[5], movedTo=RETRY)], [(1, "c1", None, RETRY, 1500)], id="moved-to-retry"
        ),
        pytest.param(
            [pop(1, 1), noted(2, "invisible", offset=5, deadlineMs=9000, nonce="x")],
            [(1, "c1", None, None, 9000)],
            id="invisible-time-changed",
        ),
        pytest.param(
            [pop(1, 1, "a"), pop(3, 2, "b"), noted(4, "finish", offsets=[5])],
            [(1, "a", None, None, 1500), (2, "b", 4000, None, 3500)],
            id="fifo-redelivered-in-place-then-acked",
        ),
        pytest.param([pop(1, 1, offset=6)], [], id="another-offset"),
        pytest.param([Noted({**pop(1, 1).body, "group": "other"}, 1000, 1)], [], id="another-group"),
        pytest.param([Noted({**pop(1, 1).body, "queueId": 2}, 1000, 1)], [], id="another-queue"),
        pytest.param([noted(1, "finish", offsets=[5])], [], id="a-finish-without-a-delivery"),
        pytest.param(
            [Noted({k: v for k, v in pop(1, 1).body.items() if k not in ("clientId", "popTimeMs")}, 1000, 1)],
            [(1, "", None, None, 1500)],
            id="an-older-brokers-pop-record",
        ),
    ],
)
def test_the_deliveries_of_a_position_come_from_its_records(records, expected):
    assert summary(deliveries_at(P, G, records)) == expected


def d(attempt: int, *, acked: bool = False, moved: str | None = None, at: Position = P) -> Delivery:
    return Delivery(attempt, 0, "c", 0, at.topic, at.queue_id, at.queue_offset, 1 if acked else None, moved)


COPY = Position(RETRY, 0, 0)


@pytest.mark.parametrize(
    ("positions", "deliveries", "dead", "gone", "verdict"),
    [
        pytest.param([P], [], False, False, Consumed.NOT_YET, id="not-yet"),
        pytest.param([P], [], False, True, Consumed.UNKNOWN, id="records-gone"),
        pytest.param([P], [d(1)], False, False, Consumed.IN_FLIGHT, id="in-flight"),
        pytest.param([P], [d(1, acked=True)], False, False, Consumed.CONSUMED, id="acked"),
        pytest.param([P, COPY], [d(1, moved=RETRY)], False, False, Consumed.DELIVERED, id="waiting-in-retry"),
        pytest.param(
            [P, COPY, Position(RETRY, 0, 1)],
            [d(1, moved=RETRY), d(2, moved=RETRY, at=COPY), d(3, acked=True, at=Position(RETRY, 0, 1))],
            False,
            False,
            Consumed.CONSUMED,
            id="redelivered-twice-then-acked",
        ),
        pytest.param([P, COPY], [d(1, moved=RETRY), d(2, moved=DLQ, at=COPY)], True, False, Consumed.DEAD, id="dead"),
        pytest.param([Position(T, 1, 5, committed=6)], [], False, True, Consumed.CONSUMED, id="pull-consumer-passed-it"),
        pytest.param([Position(T, 1, 5, committed=5)], [], False, False, Consumed.NOT_YET, id="committed-at-it-is-not-past"),
        pytest.param(
            [Position(T, 1, 5, committed=6)],
            [d(1, moved=RETRY)],
            False,
            False,
            Consumed.DELIVERED,
            id="passed-by-a-move-is-not-consumed",
        ),
        pytest.param([Position(T, 1, 5, committed=9)], [d(1)], False, False, Consumed.CONSUMED, id="reset-past-an-in-flight"),
        pytest.param(
            [P, Position(RETRY, 0, 0, committed=1)], [], False, False, Consumed.CONSUMED, id="remoting-send-back-consumed"
        ),
    ],
)
def test_a_groups_verdict(positions, deliveries, dead, gone, verdict):
    assert decide(positions, deliveries, dead, gone) is verdict


def test_a_delivery_on_the_wire_names_its_position_and_times():
    wire = Delivery(2, 10, "c9", 20, RETRY, 0, 7, ack_time_ms=15).wire()
    assert wire == {
        "attempt": 2,
        "popTimeMs": 10,
        "clientId": "c9",
        "invisibleUntilMs": 20,
        "ackTimeMs": 15,
        "topic": RETRY,
        "queueId": 0,
        "queueOffset": 7,
    }
