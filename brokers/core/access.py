"""What each client request asks of access control (issue 39; docs/acl.md): the resources it touches
and the actions it needs on each, as RocketMQ's ``DefaultAuthorizationContextBuilder`` builds them
(apache/rocketmq auth/.../authorization/builder/). Pure: the protocol edges read the names out of a
request, these tables say what is asked, and brokers/acl.py judges it against the snapshot
(mqrules/acl.py). An empty answer asks nothing but who the caller is (authentication only).

Several actions on one resource mean any of them will do (RocketMQ's ``Arrays.asList(PUB, SUB)``;
``PolicyEntry.matches``). A retry topic (``%RETRY%group``) stands for its group: remoting asks Sub on
the group instead of the topic, as RocketMQ does.

Where this differs from RocketMQ: a gRPC send asks Pub on each topic of the batch (RocketMQ looks at the
first message only); QueryOffset asks Sub on its topic (RocketMQ asks nothing); Telemetry is
authenticated only (RocketMQ also authorizes the topics and group a settings command names, which every
later call is authorized for anyway).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from mqrules.acl import Action, Resource
from mqrules.remoting.codes import RequestCode

RETRY_PREFIX = "%RETRY%"
PUB, SUB, GET, UPDATE = (Action.PUB,), (Action.SUB,), (Action.GET,), (Action.UPDATE,)
PUB_OR_SUB = (Action.PUB, Action.SUB)


@dataclass(frozen=True, slots=True)
class Ask:
    """One resource and the actions on it a request needs (any one of them)."""

    resource: Resource
    actions: tuple[Action, ...]


def _topic(name: str, actions: tuple[Action, ...]) -> Ask:
    return Ask(Resource.topic(name), actions)


def _group(name: str, actions: tuple[Action, ...]) -> Ask:
    return Ask(Resource.group(name), actions)


# --- gRPC (RocketMQ 5's MessagingService) ---------------------------------------------------------------


class GrpcCall(Enum):
    """The RPCs this broker serves, by their names in service.proto."""

    QUERY_ROUTE = "QueryRoute"
    QUERY_ASSIGNMENT = "QueryAssignment"
    HEARTBEAT = "Heartbeat"
    TELEMETRY = "Telemetry"
    NOTIFY_CLIENT_TERMINATION = "NotifyClientTermination"
    SEND_MESSAGE = "SendMessage"
    RECEIVE_MESSAGE = "ReceiveMessage"
    ACK_MESSAGE = "AckMessage"
    CHANGE_INVISIBLE_DURATION = "ChangeInvisibleDuration"
    FORWARD_MESSAGE_TO_DLQ = "ForwardMessageToDeadLetterQueue"
    QUERY_OFFSET = "QueryOffset"
    END_TRANSACTION = "EndTransaction"


@dataclass(frozen=True, slots=True)
class GrpcNames:
    """What the edge reads out of a gRPC request: its topics (a send's, one per message), its group, and
    whether a heartbeat comes from a consumer (its ClientType)."""

    topics: tuple[str, ...] = ()
    group: str = ""
    consumer: bool = False


def _topics(names: GrpcNames, actions: tuple[Action, ...]) -> tuple[Ask, ...]:
    return tuple(_topic(t, actions) for t in dict.fromkeys(names.topics) if t)


def _group_if_named(names: GrpcNames) -> tuple[Ask, ...]:
    return (_group(names.group, SUB),) if names.group else ()


def _sub(names: GrpcNames) -> tuple[Ask, ...]:
    """A consumer's request: Sub on its group and its topic (``newSubContexts``)."""
    return _group_if_named(names) + _topics(names, SUB)


_GRPC: dict[GrpcCall, Callable[[GrpcNames], tuple[Ask, ...]]] = {
    GrpcCall.SEND_MESSAGE: lambda n: _topics(n, PUB),
    GrpcCall.END_TRANSACTION: lambda n: _topics(n, PUB),
    GrpcCall.QUERY_ROUTE: lambda n: _topics(n, PUB_OR_SUB),
    GrpcCall.RECEIVE_MESSAGE: _sub,
    GrpcCall.ACK_MESSAGE: _sub,
    GrpcCall.FORWARD_MESSAGE_TO_DLQ: _sub,
    GrpcCall.QUERY_ASSIGNMENT: _sub,
    GrpcCall.CHANGE_INVISIBLE_DURATION: _group_if_named,
    GrpcCall.NOTIFY_CLIENT_TERMINATION: _group_if_named,
    GrpcCall.HEARTBEAT: lambda n: _group_if_named(n) if n.consumer else (),
    GrpcCall.QUERY_OFFSET: lambda n: _topics(n, SUB),
    GrpcCall.TELEMETRY: lambda n: (),
}


def grpc_asks(call: GrpcCall, names: GrpcNames) -> tuple[Ask, ...]:
    """What a gRPC request asks, by its RPC and the names it carries."""
    return _GRPC[call](names)


# --- remoting (RocketMQ's classic protocol) ----------------------------------------------------------------


def _topic_or_retry_group(topic: str, group: str, actions: tuple[Action, ...]) -> tuple[Ask, ...]:
    """A send to a retry topic is a consumer's (Sub on its group); any other, Pub on the topic."""
    if topic.startswith(RETRY_PREFIX):
        return (_group(group or topic, SUB),)
    return (_topic(topic, actions),)


def _consumer(topic: str | None, group: str | None, actions: tuple[Action, ...]) -> tuple[Ask, ...]:
    """Sub (and ``actions``) on a consumer's topic (unless a retry topic: its group stands for it) and group."""
    asks: list[Ask] = []
    if topic and not topic.startswith(RETRY_PREFIX):
        asks.append(_topic(topic, actions))
    if group:
        asks.append(_group(group, actions))
    return tuple(asks)


def _body(body: bytes | None) -> dict:
    try:
        doc = json.loads(body.decode()) if body else {}
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the request's body is not JSON") from None
    if not isinstance(doc, dict):
        raise ValueError("the request's body is not a JSON object")
    return doc


def _heartbeat(body: bytes | None) -> tuple[Ask, ...]:
    """HEART_BEAT: Sub on each consumer group of the body, and on each topic it subscribes to."""
    asks: list[Ask] = []
    for consumer in _items(_body(body).get("consumerDataSet")):
        asks.append(_group(_text(consumer.get("groupName")), SUB))
        for sub in _items(consumer.get("subscriptionDataSet")):
            asks.extend(_consumer(_text(sub.get("topic")), None, SUB))
    return tuple(asks)


def _locks(body: bytes | None) -> tuple[Ask, ...]:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: Sub on the group and on each queue's topic."""
    doc = _body(body)
    asks = [_group(_text(doc.get("consumerGroup")), SUB)]
    for mq in _items(doc.get("mqSet")):
        asks.extend(_consumer(_text(mq.get("topic")), None, SUB))
    return tuple(dict.fromkeys(asks))


def _items(raw: object) -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise ValueError("the request's body is not what its code carries")
    return raw


def _text(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("the request's body names no group or topic")
    return raw


Fields = Mapping[str, str]
_REMOTING: dict[int, Callable[[Fields, bytes | None], tuple[Ask, ...]]] = {
    RequestCode.SEND_MESSAGE: lambda f, b: _topic_or_retry_group(f.get("topic", ""), "", PUB),
    RequestCode.SEND_MESSAGE_V2: lambda f, b: _topic_or_retry_group(f.get("b", ""), f.get("a", ""), PUB),
    RequestCode.SEND_BATCH_MESSAGE: lambda f, b: _topic_or_retry_group(f.get("b", ""), f.get("a", ""), PUB),
    RequestCode.END_TRANSACTION: lambda f, b: (_topic(f["topic"], PUB),) if f.get("topic") else (),
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda f, b: (_group(f.get("group", ""), SUB),),
    RequestCode.PULL_MESSAGE: lambda f, b: _consumer(f.get("topic"), f.get("consumerGroup"), SUB),
    RequestCode.QUERY_MESSAGE: lambda f, b: (_topic(f.get("topic", ""), (Action.SUB, Action.GET)),),
    RequestCode.QUERY_CONSUMER_OFFSET: lambda f, b: _consumer(f.get("topic"), f.get("consumerGroup"), (Action.SUB, Action.GET)),
    RequestCode.UPDATE_CONSUMER_OFFSET: lambda f, b: _consumer(
        f.get("topic"), f.get("consumerGroup"), (Action.SUB, Action.UPDATE)
    ),
    RequestCode.HEART_BEAT: lambda f, b: _heartbeat(b),
    RequestCode.UNREGISTER_CLIENT: lambda f, b: _consumer(None, f.get("consumerGroup"), PUB_OR_SUB),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda f, b: _consumer(None, f.get("consumerGroup"), (Action.SUB, Action.GET)),
    RequestCode.LOCK_BATCH_MQ: lambda f, b: _locks(b),
    RequestCode.UNLOCK_BATCH_MQ: lambda f, b: _locks(b),
    # mqadmin's and the dashboard's reads (their headers' @RocketMQAction / @RocketMQResource)
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.GET_MAX_OFFSET: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.GET_MIN_OFFSET: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.GET_EARLIEST_MSG_STORETIME: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.VIEW_MESSAGE_BY_ID: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.GET_TOPIC_STATS_INFO: lambda f, b: _named(f, "topic", None, GET),
    RequestCode.GET_CONSUME_STATS: lambda f, b: _named(f, "topic", "consumerGroup", GET),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: lambda f, b: _named(f, None, "consumerGroup", GET),
}


def _named(fields: Fields, topic_field: str | None, group_field: str | None, actions: tuple[Action, ...]) -> tuple[Ask, ...]:
    """An annotated header's resources: each named field's value (a retry topic as its group)."""
    asks: list[Ask] = []
    if group_field and fields.get(group_field):
        asks.append(_group(fields[group_field], actions))
    topic = fields.get(topic_field or "")
    if topic:
        asks.append(_group(topic, actions) if topic.startswith(RETRY_PREFIX) else _topic(topic, actions))
    return tuple(asks)


def remoting_asks(code: int, fields: Fields, body: bytes | None) -> tuple[Ask, ...]:
    """What a remoting request asks, by its code, its header fields and (heartbeats, locks) its body;
    ValueError when the body cannot be read (the request is then refused, as RocketMQ's "parse
    authorization context error"). A code not listed asks nothing but authentication."""
    decide = _REMOTING.get(int(code))
    return decide(fields, body) if decide is not None else ()
