"""Topic attributes and message types (mqrules/topic_attributes.py), as RocketMQ 5 has them:
TopicAttributes / AttributeUtil for what a topic may carry, RouteActivity.parseTopicMessageType for
what its queues accept, DefaultTopicMessageTypeValidator for the sends it refuses."""

from __future__ import annotations

import pytest

from mqrules.topic_attributes import (
    TopicMessageType,
    accepted_message_types,
    accepted_send_types,
    message_type_of,
    parse_attributes,
    parse_update,
    type_conflict,
    updated,
)
from mqrules.validation import Invalid

pytestmark = pytest.mark.unit

T = TopicMessageType
SENDABLE = ("MESSAGE_TYPE_UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "LITE", "PRIORITY")


@pytest.mark.parametrize(
    "attributes, expected",
    [
        pytest.param({}, T.NORMAL, id="no-attribute-is-NORMAL"),
        pytest.param({"message.type": "NORMAL"}, T.NORMAL, id="NORMAL"),
        pytest.param({"message.type": "FIFO"}, T.FIFO, id="FIFO"),
        pytest.param({"message.type": "DELAY"}, T.DELAY, id="DELAY"),
        pytest.param({"message.type": "TRANSACTION"}, T.TRANSACTION, id="TRANSACTION"),
        pytest.param({"message.type": "MIXED"}, T.MIXED, id="MIXED"),
    ],
)
def test_a_topics_message_type_comes_from_its_attribute(attributes, expected):
    assert message_type_of(attributes) is expected


@pytest.mark.parametrize(
    "topic_type, route_accepts, sends_accepted",
    [
        pytest.param(T.NORMAL, ["NORMAL"], {"NORMAL", "MESSAGE_TYPE_UNSPECIFIED"}, id="NORMAL-takes-untyped-messages"),
        pytest.param(T.FIFO, ["FIFO"], {"FIFO"}, id="FIFO"),
        pytest.param(T.DELAY, ["DELAY"], {"DELAY"}, id="DELAY"),
        pytest.param(T.TRANSACTION, ["TRANSACTION"], {"TRANSACTION"}, id="TRANSACTION"),
        pytest.param(
            T.MIXED,
            ["NORMAL", "FIFO", "DELAY", "TRANSACTION"],
            {"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MESSAGE_TYPE_UNSPECIFIED"},
            id="MIXED-takes-the-four",
        ),
    ],
)
def test_what_a_topic_accepts(topic_type, route_accepts, sends_accepted):
    assert list(accepted_message_types(topic_type)) == route_accepts
    assert {m for m in SENDABLE if m in accepted_send_types(topic_type)} == sends_accepted  # never LITE, PRIORITY


def test_a_refusal_names_the_topic_its_type_and_the_messages():
    assert type_conflict("Delayed", T.DELAY, "NORMAL") == (
        "topic Delayed is a DELAY topic (message.type) and accepts DELAY messages; this message is NORMAL"
    )
    assert "names no type (NORMAL)" in type_conflict("Delayed", T.DELAY, "MESSAGE_TYPE_UNSPECIFIED")


@pytest.mark.parametrize(
    "raw, expected",
    [
        pytest.param({}, {}, id="nothing"),
        pytest.param({"message.type": "DELAY"}, {"message.type": "DELAY"}, id="plain-key"),
        pytest.param({"+message.type": "FIFO"}, {"message.type": "FIFO"}, id="rocketmq-add-form"),
    ],
)
def test_an_update_names_attributes_to_set(raw, expected):
    assert parse_update(raw) == expected


@pytest.mark.parametrize(
    "raw, errors",
    [
        pytest.param(["message.type"], ["must be a JSON object"], id="not-an-object"),
        pytest.param(
            {"message.type": "delay"},
            {"message.type": ["must be one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"]},
            id="values-are-case-sensitive",
        ),
        pytest.param(
            {"message.type": "UNSPECIFIED"},
            {"message.type": ["must be one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"]},
            id="UNSPECIFIED-accepts-nothing-so-is-refused",
        ),
        pytest.param(
            {"message.type": 3}, {"message.type": ["must be one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"]}, id="not-a-string"
        ),
        pytest.param(
            {"queue.type": "BatchCQ"},
            {"queue.type": ["unsupported attribute; supported: message.type"]},
            id="not-implemented-here",
        ),
        pytest.param(
            {"-message.type": ""}, {"-message.type": ["unsupported attribute; supported: message.type"]}, id="no-delete"
        ),
        pytest.param(
            {"++message.type": "FIFO"}, {"++message.type": ["unsupported attribute; supported: message.type"]}, id="one-plus"
        ),
        pytest.param(
            {"message.type": "FIFO", "+message.type": "DELAY"},
            {"+message.type": ["message.type is given twice"]},
            id="duplicate-as-AttributeUtil",
        ),
    ],
)
def test_a_bad_update_is_refused_with_errors_by_key(raw, errors):
    with pytest.raises(Invalid) as e:
        parse_update(raw)
    assert e.value.fields == errors


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"+message.type": "FIFO"}, id="no-add-form"),
        pytest.param({"message.type": "fifo"}, id="bad-value"),
        pytest.param({"cleanup.policy": "DELETE"}, id="unknown-key"),
        pytest.param(None, id="not-an-object"),
    ],
)
def test_stored_attributes_take_plain_keys_and_valid_values_only(raw):
    with pytest.raises(Invalid):
        parse_attributes(raw)


def test_stored_attributes_pass_as_they_are():
    assert parse_attributes({"message.type": "MIXED"}) == {"message.type": "MIXED"}
    assert parse_attributes({}) == {}


@pytest.mark.parametrize(
    "current, update, expected",
    [
        pytest.param(None, {}, {}, id="new-topic-without-attributes"),
        pytest.param(None, {"message.type": "DELAY"}, {"message.type": "DELAY"}, id="new-topic"),
        pytest.param({"message.type": "DELAY"}, {}, {"message.type": "DELAY"}, id="update-naming-none-keeps-the-type"),
        pytest.param({"message.type": "DELAY"}, {"message.type": "MIXED"}, {"message.type": "MIXED"}, id="type-is-changeable"),
    ],
)
def test_an_update_changes_what_it_names_and_keeps_the_rest(current, update, expected):
    assert updated(current, update) == expected
