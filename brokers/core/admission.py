"""Admitting a send: whether the messages of one SendMessage are stored here, handed on, or refused,
and how each is stored (RocketMQ's proxy checks and its broker's put hooks, in their order). Pure: the
edge that received the send turns each message into an ``Outgoing``, the sending service
(brokers/sending.py) stores what an ``Admission`` says, and the edge answers it.

The checks, in the order a refusal is decided (a batch is refused whole on its first bad message, as
the proxy does):

1. the write gate: a slave (or a broker without a role yet) hands the send to its master, unless it
   acts for a dead one (``forwards_sends``);
2. a send of no message: BAD_REQUEST;
3. per message: its topic exists here (TOPIC_NOT_FOUND) and takes writes (FORBIDDEN); its body is
   neither empty nor over MAX_BODY_SIZE; no property's name or value holds a separator of the
   record's properties (ILLEGAL_MESSAGE_PROPERTY_KEY: read back, it would be split into properties
   of the sender's choosing); its message type is one its topic's type takes (the proxy's
   DefaultTopicMessageTypeValidator, MESSAGE_PROPERTY_CONFLICT_WITH_TYPE); its message group is one
   the proxy accepts (ILLEGAL_MESSAGE_GROUP, brokers/core/fifo.py), and picks its queue (or takes the
   one a remoting client chose); the type check is the proxy's ``enableTopicMessageTypeCheck``, never
   made for retry and DLQ topics;
4. a static topic's message goes to its logical queue's writable segment: here, or to the broker set
   that owns it (the whole send is handed on), or it waits once for a move's decision
   (brokers/core/static.py);
5. what a message type carries: a static topic takes no transactional or timed message; a
   transactional one has no group, no delivery time and no delay level; a FIFO one has no delay
   level; a delivery time or a delay level goes through the timer wheel (``timed``);
6. a batch with a static topic's messages takes no other topic's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import NamedTuple, Protocol

from mqrules.logical_queues import TopicMapping
from mqrules.remoting.properties import properties_problem
from mqrules.topic_attributes import TopicMessageType, accepted_send_types, type_conflict

from .codes import Code, Status
from .delay_levels import DELAY, level_delay_ms, level_for, level_of
from .fifo import IllegalGroup, check_group, queue_of_group
from .roles import WriteReason
from .static import write_target
from .timer import TIMER_DELIVER_MS, TIMER_OUT_MS, TimerRefused, delivery_due
from .transaction import TRANSACTION_ID

MAX_BODY_SIZE = 4 * 1024 * 1024  # as RocketMQ's maxMessageSize
PERM_WRITE = 2  # RocketMQ's PermName bit
# The write gate's reasons for which a send goes to the group's master instead.
FORWARDING_REASONS = frozenset({WriteReason.SLAVE, WriteReason.FENCED})
UNTYPED_PREFIXES = ("%RETRY%", "%DLQ%")  # retry and DLQ topics take a message of any type


class MessageType(IntEnum):
    """RocketMQ 5's ``MessageType`` (definition.proto), by the same names and numbers."""

    MESSAGE_TYPE_UNSPECIFIED = 0
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6


_METRICS_TYPES = {MessageType.FIFO: "fifo", MessageType.DELAY: "delay", MessageType.TRANSACTION: "transaction"}


def metrics_type(message_type: int) -> str:
    """The ``message_type`` label of rocketmq_messages_in_total (RocketMQ's TopicMessageType metrics
    values): normal, fifo, delay or transaction."""
    return _METRICS_TYPES.get(message_type, "normal")  # type: ignore[call-overload]


# Per topic message type, the message types a sent message may carry (one set lookup per message).
SEND_ACCEPTS = {t: frozenset(MessageType[a] for a in accepted_send_types(t)) for t in TopicMessageType}


class TopicView(Protocol):
    """What admission reads of a topic's config (brokers/topics.py ``TopicConfig``)."""

    @property
    def topicName(self) -> str: ...
    @property
    def writeQueueNums(self) -> int: ...
    @property
    def perm(self) -> int: ...
    @property
    def message_type(self) -> TopicMessageType: ...


class TimerSettings(Protocol):
    """The broker settings a timed message is admitted by (brokers/config.py ``BrokerConfig``), read at
    each send (``useDelayLevel`` changes at run time)."""

    @property
    def timerWheelEnable(self) -> bool: ...
    @property
    def timerMaxDelaySec(self) -> int: ...
    @property
    def useDelayLevel(self) -> bool: ...
    @property
    def enableTopicMessageTypeCheck(self) -> bool: ...


class Outgoing(NamedTuple):
    """One message of a send, as its edge read it: its properties hold its system properties under
    RocketMQ's names (UNIQ_KEY, TAGS, KEYS, BORN_HOST, ``__SHARDINGKEY`` for its group, ...)."""

    topic: str
    body: bytes
    message_type: int  # a MessageType number (any other is refused for its topic's type)
    group: str  # its message group ("" for none)
    delivery_ms: int | None  # its delivery time, when it has one
    properties: dict[str, str]
    born_ms: int
    # What a remoting client's send header carries besides (brokers/remoting/sending.py): the queue
    # the client chose (None: the broker picks, as for gRPC sends), the message's flag, how many times
    # it was consumed before (a retry's), and its sysFlag bits that describe the body (compressed).
    queue_id: int | None = None
    flag: int = 0
    reconsume_times: int = 0
    sys_flag: int = 0


class Admitted(NamedTuple):
    """How one message is stored: on ``topic``'s physical queue ``queue_id`` with ``properties``; held
    as a half message until its EndTransaction (``half``) or in the timer wheel until ``due_ms``; a
    static topic's offsets shift by ``logical_base`` (its segment's logical less physical start)."""

    topic: str
    queue_id: int
    properties: dict[str, str]
    due_ms: int | None = None
    half: bool = False
    logical_base: int | None = None


class Verdict(Enum):
    STORE = "store"  # every message is stored here, as ``messages`` say
    REFUSE = "refuse"  # nothing is stored: the send is answered ``status``
    TO_MASTER = "to_master"  # the whole send goes to the group's master (forwarded by the edge)
    TO_OWNER = "to_owner"  # the whole send goes to the broker set ``owner`` (a static topic's queue moved)
    AWAIT_DECISION = "await_decision"  # ask again once ``topic``'s logical queue has a decided start


class Admission(NamedTuple):
    """A send's admission (one per send: a tuple, the cheapest immutable value)."""

    verdict: Verdict
    messages: tuple[Admitted, ...] = ()
    status: Status | None = None
    owner: str = ""
    topic: str = ""
    logical_queue: int = -1

    @classmethod
    def refused(cls, code: Code, detail: str = "") -> Admission:
        return cls(Verdict.REFUSE, status=Status(code, detail))


TO_MASTER = Admission(Verdict.TO_MASTER)


@dataclass(frozen=True)
class SendRules:
    """What admission needs of the broker, fixed at its start: its broker set's name, its settings, its
    delay levels, and the turns (round robin) of a message without a group over a plain topic's write
    queues and over a static topic's owned logical queues (``next`` is taken of each as today's rule
    needs: the only state admission touches)."""

    broker_name: str
    settings: TimerSettings
    delay_levels: tuple[int, ...]
    queue_turns: Iterator[int]
    static_turns: Iterator[int]
    max_body_size: int = MAX_BODY_SIZE


def type_checked(topic: str, settings: TimerSettings) -> bool:
    """Whether a message's type must be one its topic takes: as RocketMQ's proxy checks it, unless
    ``enableTopicMessageTypeCheck`` is off, and never for a retry or DLQ topic (a consumer's retry of
    a timed or transactional message keeps its properties)."""
    return settings.enableTopicMessageTypeCheck and not topic.startswith(UNTYPED_PREFIXES)


def forwards_sends(write_reason: WriteReason, acting: bool) -> bool:
    """A slave (or a broker the controller has not given a role yet) hands sends to its master; an
    acting master does not (its group takes no writes while the master is down), nor does an isolated
    or pre-online master (an operator's or the broker's own decision)."""
    return write_reason in FORWARDING_REASONS and not acting


def admit_send(
    messages: Sequence[Outgoing],
    topics: Mapping[str, TopicView],
    statics: Mapping[str, TopicMapping],
    rules: SendRules,
    now_ms: int,
    forwards: bool = False,
    waited: bool = False,
) -> Admission:
    """The send's admission (see the module docstring for the order). ``forwards``: the write gate's
    answer (``forwards_sends``); ``waited``: the send waited for a static queue's decision already,
    which is then refused if still undecided. A batch's topic is looked up once."""
    if forwards:
        return TO_MASTER
    if not messages:
        return Admission.refused(Code.BAD_REQUEST, "no message")
    admitted: list[Admitted] = []
    static_count = 0
    checked_name: str | None = None
    topic: TopicView | None = None
    static: TopicMapping | None = None
    accepts: frozenset[MessageType] = frozenset()
    for out in messages:
        name = out.topic
        if name != checked_name:
            topic = topics.get(name)
            if topic is None:
                return Admission.refused(Code.TOPIC_NOT_FOUND, f"topic {name} not found")
            if topic.writeQueueNums < 1 or not topic.perm & PERM_WRITE:
                return Admission.refused(Code.FORBIDDEN, f"topic {name} is not writeable")
            checked_name, accepts, static = name, SEND_ACCEPTS[topic.message_type], statics.get(name)
        assert topic is not None
        one = _admit_message(out, topic, static, accepts, rules, now_ms, waited)
        if isinstance(one, Admission):
            return one
        admitted.append(one)
        static_count += static is not None
    if static_count and static_count != len(admitted):
        return Admission.refused(Code.BAD_REQUEST, "a batch with a static topic's messages takes no other topic's")
    return Admission(Verdict.STORE, tuple(admitted))


def _admit_message(
    out: Outgoing,
    topic: TopicView,
    static: TopicMapping | None,
    accepts: frozenset[MessageType],
    rules: SendRules,
    now_ms: int,
    waited: bool,
) -> Admitted | Admission:
    """One message of a send to ``topic`` (found, writeable): how it is stored, or the Admission of
    the whole send (refused, handed on, waiting for a decision)."""
    size = len(out.body)
    if not size:
        return Admission.refused(Code.MESSAGE_BODY_EMPTY)
    if size > rules.max_body_size:
        return Admission.refused(Code.MESSAGE_BODY_TOO_LARGE)
    if (problem := properties_problem(out.properties)) is not None:
        return Admission.refused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, problem)
    message_type, group, name = out.message_type, out.group, topic.topicName
    if message_type not in accepts and type_checked(name, rules.settings):
        return Admission.refused(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, type_conflict(out.topic, topic.message_type, type_name(message_type))
        )
    chosen = out.queue_id is not None
    if group:  # FIFO: every message of its group to one queue
        try:
            check_group(group)
        except IllegalGroup as exc:
            return Admission.refused(Code.ILLEGAL_MESSAGE_GROUP, str(exc))
        queue_id = queue_of_group(group, topic.writeQueueNums if static is None else len(static.queues))
    elif out.queue_id is not None:  # the client chose it (a remoting send): one of the topic's write queues
        queues = topic.writeQueueNums if static is None else len(static.queues)
        if not 0 <= out.queue_id < queues:
            return Admission.refused(Code.BAD_REQUEST, f"queue {out.queue_id} of {name} is not one of its {queues} write queues")
        queue_id = out.queue_id
    else:
        queue_id = next(rules.queue_turns) % topic.writeQueueNums
    base = None
    if static is not None:
        fixed = bool(group) or chosen
        target = write_target(static, rules.broker_name, queue_id if fixed else None, rules.static_turns)
        if target is None:  # another broker set takes this logical queue's writes
            lid = queue_id if fixed else queue_id % len(static.queues)
            return Admission(Verdict.TO_OWNER, owner=static.queues[lid].writable.broker_name)
        lid, segment = target
        if segment.logic_start is None:  # the old segment's end is being reported
            if waited:
                return Admission.refused(Code.INTERNAL_SERVER_ERROR, "the logical queue's move is not decided yet; retry")
            return Admission(Verdict.AWAIT_DECISION, topic=out.topic, logical_queue=lid)
        queue_id, base = segment.queue_id, segment.logic_start - segment.phys_start
    props = out.properties
    timed = out.delivery_ms is not None or DELAY in props
    if static is not None and (message_type == MessageType.TRANSACTION or timed):
        detail = f"{out.topic} is a static topic: it takes normal and FIFO messages (timer and transactional ones not yet)"
        return Admission.refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, detail)
    if message_type == MessageType.TRANSACTION:  # a half message until EndTransaction
        if group or timed:
            detail = "a transactional message has no message group, no delivery time and no delay level"
            return Admission.refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, detail)
        # (with a transaction id: committed at an acting master, escaped here: stored at once)
        return Admitted(name, queue_id, props, None, TRANSACTION_ID not in props, base)
    if timed:
        if group and DELAY in props:
            detail = "a FIFO message has no delay level: it would leave its group's order"
            return Admission.refused(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, detail)
        return _timed_message(Admitted(name, queue_id, props, None, False, base), out.delivery_ms, rules, now_ms)
    return Admitted(name, queue_id, props, None, False, base)


def _timed_message(msg: Admitted, asked: int | None, rules: SendRules, now: int) -> Admitted | Admission:
    """A message with a delivery time (``asked``, ms) or a 4.x delay level (brokers/core/timer.py,
    brokers/core/delay_levels.py): kept in the timer wheel until due, or stored at once when due now,
    or when it went through a timer wheel already (``TIMER_OUT_MS``: escaped by another broker set's
    acting master). A delay level wins over a delivery time (RocketMQ's rule); with useDelayLevel a
    delivery time is rounded up to a level. A time in the past is due now. Refused: timers off
    (NOT_IMPLEMENTED), a time beyond timerMaxDelaySec (ILLEGAL_DELIVERY_TIME), a level that is not a
    whole number (ILLEGAL_MESSAGE_PROPERTY_KEY)."""
    props, settings, levels = msg.properties, rules.settings, rules.delay_levels
    if TIMER_OUT_MS in props:
        return msg if asked is None else msg._replace(properties={**props, TIMER_DELIVER_MS: str(asked)})
    if not settings.timerWheelEnable:
        return Admission.refused(Code.NOT_IMPLEMENTED, "timer messages are off on this broker (timerWheelEnable=false)")
    due: int | None
    try:
        if DELAY in props:  # that long after now, whatever the delivery time says
            wait = level_delay_ms(level_of(props[DELAY]), levels)
            if wait is None:
                return msg  # level 0 or less: no delay
            deliver_ms = due = now + wait
        else:
            assert asked is not None
            deliver_ms, due = asked, delivery_due(asked, now, settings.timerMaxDelaySec * 1000)
            if due is not None and settings.useDelayLevel:
                level = level_for(due - now, levels)
                props = {**props, DELAY: str(level)}
                deliver_ms = due = now + (level_delay_ms(level, levels) or 0)
    except TimerRefused as exc:
        return Admission.refused(Code.ILLEGAL_DELIVERY_TIME, str(exc))
    except ValueError as exc:  # the DELAY property
        return Admission.refused(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, str(exc))
    return msg._replace(properties={**props, TIMER_DELIVER_MS: str(deliver_ms)}, due_ms=due)


def type_name(message_type: int) -> str:
    """A message type's name as a refusal names it (its number when it is none of RocketMQ's)."""
    return MessageType(message_type).name if message_type in MessageType._value2member_map_ else str(message_type)
