"""Admitting a send (brokers/core/admission.py), table-tested: each row a send and what the broker
answers today (the same codes and messages the gRPC edge returned before the rules moved out of it),
in the order the checks are made; then how an admitted message is stored (its queue, half message,
timer), static topics, and the write gate's rule."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from brokers.core.admission import (
    MAX_BODY_SIZE,
    Admission,
    Admitted,
    Outgoing,
    SendRules,
    Verdict,
    admit_send,
    forwards_sends,
)
from brokers.core.codes import Code
from brokers.core.delay_levels import DEFAULT_DELAY_LEVELS, DELAY, parse_delay_levels
from brokers.core.fifo import SHARDING_KEY, queue_of_group
from brokers.core.timer import TIMER_DELIVER_MS, TIMER_OUT_MS
from brokers.core.transaction import TRANSACTION_ID
from brokers.topics import TopicConfig
from mqrules.logical_queues import decide, initial, plan_moves

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
NORMAL, FIFO, DELAY_TYPE, TRANSACTION = 1, 2, 3, 4
A, B = "broker-a", "broker-b"
TOPICS = {
    "Plain": TopicConfig("Plain", 4, 4),
    "Orders": TopicConfig("Orders", 4, 4, attributes={"message.type": "FIFO"}),
    "Later": TopicConfig("Later", 4, 4, attributes={"message.type": "DELAY"}),
    "Pay": TopicConfig("Pay", 4, 4, attributes={"message.type": "TRANSACTION"}),
    "Any": TopicConfig("Any", 4, 4, attributes={"message.type": "MIXED"}),
    "ReadOnly": TopicConfig("ReadOnly", 4, 4, perm=4),
    "NoQueues": TopicConfig("NoQueues", 4, 0),
    "Static": TopicConfig("Static", 2, 2),
    "%RETRY%g": TopicConfig("%RETRY%g", 1, 1),
    "%DLQ%g": TopicConfig("%DLQ%g", 1, 1),
}


def settings(wheel: bool = True, use_levels: bool = False, max_delay_s: int = 86_400, type_check: bool = True) -> SimpleNamespace:
    return SimpleNamespace(
        timerWheelEnable=wheel, timerMaxDelaySec=max_delay_s, useDelayLevel=use_levels, enableTopicMessageTypeCheck=type_check
    )


def rules(broker: str = A, **kw) -> SendRules:
    return SendRules(broker, settings(**kw), parse_delay_levels(DEFAULT_DELAY_LEVELS), itertools.count(), itertools.count())


def msg(topic="Plain", body=b"x", mtype=NORMAL, group="", at=None, **props) -> Outgoing:
    properties = {"UNIQ_KEY": "id-1", **props}
    if group:
        properties[SHARDING_KEY] = group
    return Outgoing(topic, body, mtype, group, at, properties, NOW - 5)


def admit(*messages, statics=None, forwards=False, waited=False, **kw) -> Admission:
    return admit_send(list(messages), TOPICS, statics or {}, rules(**kw), NOW, forwards, waited)


CONFLICT = Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


@pytest.mark.parametrize(
    "send, code, detail",
    [
        pytest.param(lambda: admit(), Code.BAD_REQUEST, "no message", id="no-message"),
        pytest.param(lambda: admit(msg("Nope")), Code.TOPIC_NOT_FOUND, "topic Nope not found", id="unknown-topic"),
        pytest.param(lambda: admit(msg("ReadOnly")), Code.FORBIDDEN, "topic ReadOnly is not writeable", id="no-write-perm"),
        pytest.param(lambda: admit(msg("NoQueues")), Code.FORBIDDEN, "topic NoQueues is not writeable", id="no-write-queue"),
        pytest.param(lambda: admit(msg(body=b"")), Code.MESSAGE_BODY_EMPTY, "MESSAGE_BODY_EMPTY", id="empty-body"),
        pytest.param(
            lambda: admit(msg(body=b"x" * (MAX_BODY_SIZE + 1))),
            Code.MESSAGE_BODY_TOO_LARGE,
            "MESSAGE_BODY_TOO_LARGE",
            id="too-large",
        ),
        pytest.param(
            lambda: admit(msg(note="x\x02DELAY\x013")),
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            "property 'note': names are non-empty and neither names nor values hold \\x01 or \\x02",
            id="a-value-that-would-read-back-as-another-property",
        ),
        pytest.param(
            lambda: admit(msg(**{"a\x01b": "v"})),
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            "property 'a\\x01b': names are non-empty and neither names nor values hold \\x01 or \\x02",
            id="a-separator-in-a-name",
        ),
        pytest.param(
            lambda: admit(msg(**{"": "v"})),
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            "property '': names are non-empty and neither names nor values hold \\x01 or \\x02",
            id="an-empty-name",
        ),
        pytest.param(
            lambda: admit(msg("Orders", mtype=NORMAL)),
            CONFLICT,
            "topic Orders is a FIFO topic (message.type) and accepts FIFO messages; this message is NORMAL",
            id="normal-to-fifo-topic",
        ),
        pytest.param(
            lambda: admit(msg("Plain", mtype=99)),
            CONFLICT,
            "topic Plain is a NORMAL topic (message.type) and accepts NORMAL messages; this message is 99",
            id="unknown-type-number",
        ),
        pytest.param(
            lambda: admit(chosen(msg(), 4)),
            Code.BAD_REQUEST,
            "queue 4 of Plain is not one of its 4 write queues",
            id="a-client-chosen-queue-beyond-the-topics",
        ),
        pytest.param(
            lambda: admit(msg("Orders", mtype=FIFO, group="   ")),
            Code.ILLEGAL_MESSAGE_GROUP,
            "the message group is blank",
            id="blank-group",
        ),
        pytest.param(
            lambda: admit(msg("Any", mtype=TRANSACTION, group="g")),
            CONFLICT,
            "a transactional message has no message group, no delivery time and no delay level",
            id="txn-with-group",
        ),
        pytest.param(
            lambda: admit(msg("Any", mtype=TRANSACTION, at=NOW + 1000)),
            CONFLICT,
            "a transactional message has no message group, no delivery time and no delay level",
            id="txn-with-delivery-time",
        ),
        pytest.param(
            lambda: admit(msg("Any", mtype=FIFO, group="g", **{DELAY: "3"})),
            CONFLICT,
            "a FIFO message has no delay level: it would leave its group's order",
            id="fifo-with-delay-level",
        ),
        pytest.param(
            lambda: admit(msg("Later", mtype=DELAY_TYPE, at=NOW + 1000), wheel=False),
            Code.NOT_IMPLEMENTED,
            "timer messages are off on this broker (timerWheelEnable=false)",
            id="timers-off",
        ),
        pytest.param(
            lambda: admit(msg("Later", mtype=DELAY_TYPE, at=NOW + 2 * 86_400_000)),
            Code.ILLEGAL_DELIVERY_TIME,
            "delivery time 1700172800000 ms is 172800 s ahead, beyond the maximum 86400 s (timerMaxDelaySec); "
            "delivery_timestamp is in seconds and nanos",
            id="too-far-ahead",
        ),
        pytest.param(
            lambda: admit(msg("Later", mtype=DELAY_TYPE, **{DELAY: "soon"})),
            Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
            "DELAY must be a whole number (a delay level), got 'soon'",
            id="bad-delay-level",
        ),
        pytest.param(
            lambda: admit(msg(), msg("Nope")),
            Code.TOPIC_NOT_FOUND,
            "topic Nope not found",
            id="batch-refused-whole-on-a-later-message",
        ),
    ],
)
def test_a_send_the_broker_refuses_gets_todays_code_and_message(send, code, detail):
    admission = send()
    assert admission.verdict is Verdict.REFUSE and admission.messages == ()
    assert (admission.status.code, admission.status.message) == (code, detail)


@pytest.mark.parametrize(
    "message, want",
    [
        pytest.param(msg(), Admitted("Plain", 0, {"UNIQ_KEY": "id-1"}), id="normal-first-queue-in-turn"),
        pytest.param(msg(mtype=0), Admitted("Plain", 0, {"UNIQ_KEY": "id-1"}), id="no-type-is-normal"),
        pytest.param(
            msg("Orders", mtype=FIFO, group="order-17"),
            Admitted("Orders", queue_of_group("order-17", 4), {"UNIQ_KEY": "id-1", SHARDING_KEY: "order-17"}),
            id="fifo-by-its-group",
        ),
        pytest.param(msg("Pay", mtype=TRANSACTION), Admitted("Pay", 0, {"UNIQ_KEY": "id-1"}, half=True), id="txn-half-message"),
        pytest.param(
            msg("Any", mtype=TRANSACTION, **{TRANSACTION_ID: "t"}),
            Admitted("Any", 0, {"UNIQ_KEY": "id-1", TRANSACTION_ID: "t"}),
            id="escaped-commit-stored-at-once",
        ),
        pytest.param(
            msg("Later", mtype=DELAY_TYPE, at=NOW + 60_000),
            Admitted("Later", 0, {"UNIQ_KEY": "id-1", TIMER_DELIVER_MS: str(NOW + 60_000)}, due_ms=NOW + 60_000),
            id="delivery-time-into-the-wheel",
        ),
        pytest.param(
            msg("Later", mtype=DELAY_TYPE, at=NOW - 60_000),
            Admitted("Later", 0, {"UNIQ_KEY": "id-1", TIMER_DELIVER_MS: str(NOW - 60_000)}),
            id="past-delivery-time-stored-at-once",
        ),
        pytest.param(
            msg("Later", mtype=DELAY_TYPE, **{DELAY: "2"}),
            Admitted("Later", 0, {"UNIQ_KEY": "id-1", DELAY: "2", TIMER_DELIVER_MS: str(NOW + 5000)}, due_ms=NOW + 5000),
            id="delay-level-2-is-5s",
        ),
        pytest.param(
            msg("Later", mtype=DELAY_TYPE, **{DELAY: "0"}),
            Admitted("Later", 0, {"UNIQ_KEY": "id-1", DELAY: "0"}),
            id="level-0-no-delay",
        ),
        pytest.param(
            msg("Later", mtype=DELAY_TYPE, at=NOW + 60_000, **{TIMER_OUT_MS: "5"}),
            Admitted("Later", 0, {"UNIQ_KEY": "id-1", TIMER_OUT_MS: "5", TIMER_DELIVER_MS: str(NOW + 60_000)}),
            id="escaped-timer-stored-at-once",
        ),
    ],
)
def test_an_admitted_message_is_stored_as_its_type_says(message, want):
    admission = admit(message)
    assert admission.verdict is Verdict.STORE and admission.messages == (want,)


def chosen(message: Outgoing, queue_id: int) -> Outgoing:
    return message._replace(queue_id=queue_id)


@pytest.mark.parametrize(
    "message, kw, want",
    [
        pytest.param(chosen(msg(), 3), {}, Admitted("Plain", 3, {"UNIQ_KEY": "id-1"}), id="the-queue-a-remoting-client-chose"),
        pytest.param(
            msg("Plain", mtype=TRANSACTION),
            {"type_check": False},
            Admitted("Plain", 0, {"UNIQ_KEY": "id-1"}, half=True),
            id="type-check-off",
        ),
        pytest.param(
            msg("%RETRY%g", mtype=DELAY_TYPE, **{DELAY: "0"}),
            {},
            Admitted("%RETRY%g", 0, {"UNIQ_KEY": "id-1", DELAY: "0"}),
            id="a-retry-topic-takes-any-type",
        ),
        pytest.param(
            msg("%DLQ%g", mtype=TRANSACTION, **{TRANSACTION_ID: "t"}),
            {},
            Admitted("%DLQ%g", 0, {"UNIQ_KEY": "id-1", TRANSACTION_ID: "t"}),
            id="a-dlq-takes-any-type",
        ),
    ],
)
def test_a_remoting_send_takes_its_queue_and_is_type_checked_as_the_proxy_does(message, kw, want):
    admission = admit(message, **kw)
    assert admission.verdict is Verdict.STORE and admission.messages == (want,)


def test_use_delay_level_rounds_a_delivery_time_up_to_a_level():
    (got,) = admit(msg("Later", mtype=DELAY_TYPE, at=NOW + 7_000), use_levels=True).messages
    assert (got.properties[DELAY], got.due_ms, got.properties[TIMER_DELIVER_MS]) == ("3", NOW + 10_000, str(NOW + 10_000))


def test_messages_without_a_group_take_the_write_queues_in_turn():
    admission = admit(*[msg() for _ in range(6)])
    assert [a.queue_id for a in admission.messages] == [0, 1, 2, 3, 0, 1]


STATIC = initial("Static", 2, [A, B])  # A owns logical queue 0, B owns 1
MOVING = plan_moves(STATIC, {0: B})  # 0's new segment on B, undecided
MOVED = decide(MOVING, 0, 40)


@pytest.mark.parametrize(
    "broker, statics, message, waited, want",
    [
        pytest.param(A, STATIC, msg("Static"), False, (Verdict.STORE, 0, 0), id="owned-queue-stored-here"),
        pytest.param("broker-c", STATIC, msg("Static"), False, (Verdict.TO_OWNER, A), id="owns-nothing-handed-on"),
        pytest.param(
            A, STATIC, msg("Static", group="g-1"), False, (Verdict.TO_OWNER, B), id="fifo-queue-owned-elsewhere-handed-on"
        ),
        pytest.param(B, MOVING, msg("Static", group="g-0"), False, (Verdict.AWAIT_DECISION, "Static", 0), id="undecided-waits"),
        pytest.param(
            B, MOVING, msg("Static", group="g-0"), True, (Verdict.REFUSE, Code.INTERNAL_SERVER_ERROR), id="undecided-twice"
        ),
        pytest.param(B, MOVED, msg("Static", group="g-0"), False, (Verdict.STORE, 1, 40), id="moved-queue-logical-base"),
        pytest.param(
            A, STATIC, msg("Static", at=NOW + 1000), False, (Verdict.REFUSE, CONFLICT), id="static-takes-no-timer-message"
        ),
    ],
)
def test_a_static_topics_message_goes_to_its_logical_queues_writable_segment(broker, statics, message, waited, want):
    group = message.group
    if group:  # pick a group of the logical queue the row names
        lid = int(group[-1])
        group = next(f"o{i}" for i in range(100) if queue_of_group(f"o{i}", 2) == lid)
        message = message._replace(group=group, properties={**message.properties, SHARDING_KEY: group})
    admission = admit(message, statics={"Static": statics}, waited=waited, broker=broker)
    verdict = admission.verdict
    if verdict is Verdict.STORE:
        (a,) = admission.messages
        got = (verdict, a.queue_id, a.logical_base)
    elif verdict is Verdict.TO_OWNER:
        got = (verdict, admission.owner)
    elif verdict is Verdict.AWAIT_DECISION:
        got = (verdict, admission.topic, admission.logical_queue)
    else:
        got = (verdict, admission.status.code)
    assert got == want


def test_a_batch_with_a_static_topics_messages_takes_no_other_topics():
    admission = admit(msg("Static"), msg("Plain"), statics={"Static": STATIC})
    assert (admission.status.code, admission.status.message) == (
        Code.BAD_REQUEST,
        "a batch with a static topic's messages takes no other topic's",
    )


@pytest.mark.parametrize(
    "reason, acting, forwards",
    [
        ("SLAVE", False, True),
        ("FENCED", False, True),
        ("SLAVE", True, False),  # an acting master takes no writes and forwards nothing
        ("WRITABLE", False, False),
        ("ISOLATED", False, False),
        ("PRE_ONLINE", False, False),
    ],
)
def test_the_write_gate_sends_a_slaves_sends_to_its_master(reason, acting, forwards):
    assert forwards_sends(reason, acting) is forwards
    admission = admit(msg(), forwards=forwards_sends(reason, acting))
    assert (admission.verdict is Verdict.TO_MASTER) is forwards
