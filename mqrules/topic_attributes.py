"""Topic attributes and the message types they give a topic: RocketMQ 5's ``TopicAttributes`` (only
``message.type`` here), the ``attributes`` field of a topic update (``AttributeUtil``), and which
message types a topic's queues accept (the proxy's ``RouteActivity.parseTopicMessageType`` and
``DefaultTopicMessageTypeValidator``).

One place for the control plane (REST and registration validation) and the brokers (routes and the
send check): pure, standard library only (floor 0), so brokers may import it as they import
``mqrules.validation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from mqrules.validation import Invalid

MESSAGE_TYPE = "message.type"
ADD_PREFIX = "+"  # RocketMQ's form of "add or change this attribute" (AttributeParser.ATTR_ADD_PLUS_SIGN)


class TopicMessageType(StrEnum):
    """``TopicMessageType``. RocketMQ's UNSPECIFIED is left out: a topic of that type accepts no message."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


DEFAULT_MESSAGE_TYPE = TopicMessageType.NORMAL  # a topic without message.type (TopicConfig.getTopicMessageType)
TOPIC_MESSAGE_TYPES = tuple(t.value for t in TopicMessageType)
# The message types (apache.rocketmq.v2.MessageType names) a MIXED topic accepts: all four.
MIXED_ACCEPTS = (TopicMessageType.NORMAL, TopicMessageType.FIFO, TopicMessageType.DELAY, TopicMessageType.TRANSACTION)

# The attributes a topic may carry, with their values. RocketMQ also knows queue.type, cleanup.policy
# and reserve.time; nothing here implements them, so they are refused rather than kept unheeded.
# message.type is changeable on an existing topic (EnumAttribute("message.type", changeable=true, ...)).
ATTRIBUTE_VALUES: Mapping[str, tuple[str, ...]] = {MESSAGE_TYPE: TOPIC_MESSAGE_TYPES}
UNKNOWN_KEY_MESSAGE = "unsupported attribute; supported: " + ", ".join(ATTRIBUTE_VALUES)


def _problem(key: str, value: object) -> str | None:
    allowed = ATTRIBUTE_VALUES.get(key)
    if allowed is None:
        return UNKNOWN_KEY_MESSAGE
    if not isinstance(value, str) or value not in allowed:
        return "must be one of " + ", ".join(allowed)
    return None


def parse_attributes(raw: object) -> dict[str, str]:
    """A topic config's attributes as brokers store, replicate, push and register them: plain keys,
    each a supported attribute with a valid value. Raises ``Invalid`` (errors by key)."""
    if not isinstance(raw, dict):
        raise Invalid(["must be a JSON object"])
    errors: dict[str, object] = {str(k): [p] for k, v in raw.items() if (p := _problem(k, v)) is not None}
    if errors:
        raise Invalid(errors)
    return dict(raw)


def parse_update(raw: object) -> dict[str, str]:
    """The ``attributes`` of a topic create-or-update request: ``{"message.type": "DELAY"}`` or
    RocketMQ's ``{"+message.type": "DELAY"}`` (the same key twice, in both forms, is refused as
    AttributeUtil refuses a duplicate). The attributes to set, by their plain keys. Raises ``Invalid``."""
    if not isinstance(raw, dict):
        raise Invalid(["must be a JSON object"])
    out: dict[str, str] = {}
    errors: dict[str, object] = {}
    for key, value in raw.items():
        plain = key.removeprefix(ADD_PREFIX)
        if (problem := _problem(plain, value)) is not None:
            errors[key] = [problem]
        elif plain in out:
            errors[key] = [f"{plain} is given twice"]
        else:
            out[plain] = value
    if errors:
        raise Invalid(errors)
    return out


def updated(current: Mapping[str, str] | None, update: Mapping[str, str]) -> dict[str, str]:
    """A topic's attributes after an update (``AttributeUtil.alterCurrentAttributes``): what the update
    names replaces the current value, the rest is kept; ``current`` None: a new topic."""
    return {**(current or {}), **update}


def message_type_of(attributes: Mapping[str, str]) -> TopicMessageType:
    """The topic's message type; NORMAL without the attribute. ``attributes`` passed ``parse_attributes``."""
    value = attributes.get(MESSAGE_TYPE)
    return DEFAULT_MESSAGE_TYPE if value is None else TopicMessageType(value)


def accepted_message_types(topic_type: TopicMessageType) -> tuple[TopicMessageType, ...]:
    """The message types a queue of the topic accepts: its own type; all four for MIXED."""
    return MIXED_ACCEPTS if topic_type is TopicMessageType.MIXED else (topic_type,)


UNSPECIFIED_MESSAGE_TYPE = "MESSAGE_TYPE_UNSPECIFIED"  # a message that names no type: a NORMAL one


def accepted_send_types(topic_type: TopicMessageType) -> frozenset[str]:
    """The ``MessageType`` names a message sent to the topic may carry: the accepted types, and no type
    at all where NORMAL is accepted. Brokers check each message against this set (SendMessage)."""
    accepted = {t.value for t in accepted_message_types(topic_type)}
    if TopicMessageType.NORMAL in accepted:
        accepted.add(UNSPECIFIED_MESSAGE_TYPE)
    return frozenset(accepted)


def type_conflict(topic: str, topic_type: TopicMessageType, message_type: str) -> str:
    """The refusal of a message whose type the topic does not accept (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)."""
    accepted = ", ".join(accepted_message_types(topic_type))
    sent = "names no type (NORMAL)" if message_type == UNSPECIFIED_MESSAGE_TYPE else f"is {message_type}"
    return f"topic {topic} is a {topic_type} topic (message.type) and accepts {accepted} messages; this message {sent}"
