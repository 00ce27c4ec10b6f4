"""What an operator's view of a stored message says beyond its record (docs/messages.md §3): its
message type, delivery time and transaction state from its properties, a dead letter's origin, reason
and attempts, and the properties a resend from the DLQ keeps. Pure.

Property names are RocketMQ's (MessageConst): a retried or dead message keeps its topic in
``RETRY_TOPIC`` (and, dead, ``DLQ_ORIGIN_TOPIC``), its first id in ``ORIGIN_MESSAGE_ID`` (and
``DLQ_ORIGIN_MESSAGE_ID``), how often it was consumed in ``RECONSUME_TIME``; a pop consumer's copy
also carries ``ORIGIN_TOPIC`` (brokers/consuming.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from .admission import MessageType
from .delay_levels import DELAY
from .fifo import SHARDING_KEY
from .timer import TIMER_DELIVER_MS, TIMER_KEYS, TIMER_OUT_MS
from .transaction import TRAN_MSG, TXN_KEYS

UNIQ_KEY, KEYS = "UNIQ_KEY", "KEYS"
RETRY_TOPIC, ORIGIN_TOPIC, ORIGIN_MESSAGE_ID = "RETRY_TOPIC", "ORIGIN_TOPIC", "ORIGIN_MESSAGE_ID"
DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID"
DLQ_REASON = "DLQ_REASON"  # this broker's: why the message is dead
RESEND_ID = "RESEND_ID"  # this broker's: the operator's resend request that wrote this copy
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_EXCEEDED = "max reconsume times exceeded"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
# what a copy sent back to its topic does not keep: where the dead one came from and how it travelled
RESEND_DROPS = frozenset(
    {
        UNIQ_KEY,
        RETRY_TOPIC,
        ORIGIN_TOPIC,
        "ORIGIN_QUEUE_ID",
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        DLQ_REASON,
        RECONSUME_TIME,
        DELAY,
        "WAIT",
        *TIMER_KEYS,
        *TXN_KEYS,
    }
)


def message_type_of(props: Mapping[str, str]) -> str:
    """NORMAL, FIFO, DELAY or TRANSACTION, as the properties the broker stored tell."""
    if props.get(TRAN_MSG) == "true":
        return "TRANSACTION"
    if props.get(SHARDING_KEY):
        return "FIFO"
    if TIMER_DELIVER_MS in props or TIMER_OUT_MS in props or props.get(DELAY, "0") not in ("", "0"):
        return "DELAY"
    return "NORMAL"


def delivery_time_of(props: Mapping[str, str]) -> int | None:
    """A timer message's delivery time (ms): the time it asked for, else the wheel's due time."""
    for key in (TIMER_DELIVER_MS, TIMER_OUT_MS):
        raw = props.get(key, "")
        if raw.lstrip("-").isdigit():
            return int(raw)
    return None


def transaction_state_of(topic: str, props: Mapping[str, str]) -> str | None:
    """A transactional message's state: a half message waits (UNKNOWN); one in its topic is committed."""
    if topic == HALF_TOPIC:
        return "UNKNOWN"
    return "COMMIT" if props.get(TRAN_MSG) == "true" else None


def keys_of(props: Mapping[str, str]) -> list[str]:
    return [k for k in props.get(KEYS, "").split(" ") if k]


def origin_topic_of(props: Mapping[str, str]) -> str | None:
    """The topic a retried or dead message was first sent to (None: it does not say)."""
    return props.get(DLQ_ORIGIN_TOPIC) or props.get(RETRY_TOPIC) or props.get(ORIGIN_TOPIC) or None


def dead_letter_facts(props: Mapping[str, str], reconsume_times: int) -> dict:
    """A DLQ message's ``originTopic``, ``originMsgId``, ``reason`` and ``attempts`` (deliveries)."""
    raw = props.get(RECONSUME_TIME, "")
    attempts = int(raw) if raw.isdigit() else reconsume_times
    origin_id = props.get(DLQ_ORIGIN_MESSAGE_ID) or props.get(ORIGIN_MESSAGE_ID) or props.get(UNIQ_KEY)
    return {
        "originTopic": origin_topic_of(props),
        "originMsgId": origin_id or None,
        "reason": props.get(DLQ_REASON) or MAX_RECONSUME_EXCEEDED,
        "attempts": attempts,
    }


def moved_properties(props: Mapping[str, str], topic: str, attempt: int, dead: bool) -> dict[str, str]:
    """The properties of a pop consumer's copy of a message (from ``topic``, delivered ``attempt``
    times) in its retry topic or (``dead``) its DLQ: RocketMQ's RETRY_TOPIC and ORIGIN_MESSAGE_ID (and
    DLQ_ORIGIN_*), the reconsume count, and why it is dead."""
    origin = props.get(ORIGIN_TOPIC) or props.get(RETRY_TOPIC) or topic
    out = {**props, RECONSUME_TIME: str(attempt), ORIGIN_TOPIC: origin, RETRY_TOPIC: props.get(RETRY_TOPIC) or origin}
    first = props.get(ORIGIN_MESSAGE_ID) or props.get(UNIQ_KEY)
    if first:
        out[ORIGIN_MESSAGE_ID] = first
    if dead:
        out[DLQ_ORIGIN_TOPIC] = origin
        if first:
            out[DLQ_ORIGIN_MESSAGE_ID] = first
        out[DLQ_REASON] = MAX_RECONSUME_EXCEEDED
    return out


def resend_key(resend_id: str, dlq_offset: int) -> str:
    """The key a resend's copy carries: a second resend with the same id finds it (docs/messages.md §3)."""
    return f"{resend_id}:{dlq_offset}"


def resent_properties(props: Mapping[str, str], new_id: str, resend_id: str, dlq_offset: int) -> dict[str, str]:
    """The properties of a dead message's copy sent back to its topic: a new id, the dead one's first
    id (its UNIQ_KEY) kept in ORIGIN_MESSAGE_ID, the resend's id in RESEND_ID and its key added to KEYS."""
    out = {k: v for k, v in props.items() if k not in RESEND_DROPS}
    first = props.get(UNIQ_KEY) or props.get(DLQ_ORIGIN_MESSAGE_ID) or props.get(ORIGIN_MESSAGE_ID) or ""
    out[UNIQ_KEY] = new_id
    if first:
        out[ORIGIN_MESSAGE_ID] = first
    out[RESEND_ID] = resend_id
    out[KEYS] = " ".join([*keys_of(props), resend_key(resend_id, dlq_offset)])
    return out


# A resend goes to its topic as the topic's own type takes it, due at once; a TRANSACTION topic takes
# only half messages, which a resend has no producer to commit: none (refused).
_RESEND_TYPES = {"NORMAL": MessageType.NORMAL, "MIXED": MessageType.NORMAL, "FIFO": MessageType.FIFO, "DELAY": MessageType.DELAY}


def resend_message_type(topic_type: str) -> MessageType | None:
    """The message type a resend to a topic of ``topic_type`` (message.type) is sent as; None: refused."""
    return _RESEND_TYPES.get(topic_type)
