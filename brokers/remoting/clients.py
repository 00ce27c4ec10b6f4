"""The remoting clients of this broker, as their heartbeats describe them (HEART_BEAT 34,
UNREGISTER_CLIENT 35): which producer and consumer groups each client is in, its subscriptions, and the
connection to reach it by. From it: GET_CONSUMER_LIST_BY_GROUP (38, what a consumer rebalances over),
GET_CONSUMER_CONNECTION_LIST (203, mqadmin's consumerConnection), NOTIFY_CONSUMER_IDS_CHANGED (40, told
to a group's consumers when one joins or leaves, so they rebalance at once), the registration of a
consumer group (autoCreateSubscriptionGroup) and its retry topic ``%RETRY%<group>`` at its first
heartbeat, and the producers a transaction check can reach (``LocalProducers`` of
brokers/transaction_check.py: CHECK_TRANSACTION_STATE, 39).

A client is forgotten when its connection closes, when it unregisters, or when it has sent no heartbeat
for CLIENT_EXPIRY_S (Java's ``channelExpiredTimeout``, 120 s). Nothing here is replicated: like Java's
ConsumerManager it is rebuilt from the heartbeats each broker gets (clients heartbeat every broker of
their routes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import (
    GET_CONSUMER_CONNECTION_LIST_REQUEST,
    GET_CONSUMER_LIST_BY_GROUP_REQUEST,
    UNREGISTER_CLIENT_REQUEST,
    encode_header,
    parse_header,
)

from ..clients_report import HELD_S, wall_ms
from ..core.pop import tag_matcher
from ..core.timer import REAL_QID, REAL_TOPIC
from ..core.transaction import TRANSACTION_ID
from ..store.message import Message, encode
from .server import Connection

log = logging.getLogger("brokers.remoting")

CLIENT_EXPIRY_S = 120.0
RETRY_PREFIX = "%RETRY%"


# The C++ client writes these enums as their ordinals, Java and ali-ons by name.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


class BadHeartbeat(ValueError):
    pass


def enum_name(value: object, names: tuple[str, ...], default: str) -> str:
    """An enum field of a heartbeat, by name (an ordinal, as the C++ client sends it, named)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return names[value] if 0 <= value < len(names) else default
    return value if isinstance(value, str) and value else default


@dataclass(frozen=True)
class Subscription:
    """One topic a consumer subscribes to: its expression (TAG: ``*`` or ``a || b``; SQL92 is not
    served) and its version."""

    topic: str
    expression: str
    expression_type: str
    version: int
    raw: dict

    def matcher(self) -> Callable[[str | None], bool] | None:
        return tag_matcher(self.expression, self.expression_type.upper() == "SQL92")


@dataclass
class Consumer:
    client_id: str
    connection: Connection
    subscriptions: dict[str, Subscription]
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    seen: float = field(default_factory=time.monotonic)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadHeartbeat(f"{what} must be a non-empty string")
    return value


def parse_subscriptions(raw: object) -> dict[str, Subscription]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise BadHeartbeat("subscriptionDataSet must be a list")
    out = {}
    for item in raw:
        if not isinstance(item, dict):
            raise BadHeartbeat("a subscription must be an object")
        topic = _text(item.get("topic"), "a subscription's topic")
        version = item.get("subVersion", 0)  # a number (Java, ali-ons) or its text (the C++ client)
        if isinstance(version, str) and version.lstrip("-").isdigit():
            version = int(version)
        out[topic] = Subscription(
            topic,
            str(item.get("subString") or "*"),
            str(item.get("expressionType") or "TAG"),
            version if isinstance(version, int) and not isinstance(version, bool) else 0,
            item,
        )
    return out


class ClientRegistry:
    """``group_added(group)``: a consumer group first heard of here (the composition of the edge
    registers it and creates its retry topic)."""

    def __init__(self, group_added: Callable[[str], None] | None = None):
        self.consumers: dict[str, dict[str, Consumer]] = {}  # group -> client id -> consumer
        self.producers: dict[str, dict[str, Connection]] = {}  # group -> client id -> connection
        self._producer_seen: dict[tuple[str, str], float] = {}
        self._sending: set[asyncio.Task] = set()  # oneway requests being written to clients
        self._held: dict[tuple[str, str], dict[tuple[str, int], float]] = {}  # (client, group) -> queue -> last pull
        self.group_added = group_added

    def handlers(self) -> dict[int, Callable]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.connection_list,
        }

    # --- requests ---------------------------------------------------------------------------------

    async def heartbeat(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        try:
            data = json.loads(request.body.decode()) if request.body else None
            if not isinstance(data, dict):
                raise BadHeartbeat("the body must be a JSON object (HeartbeatData)")
            client_id = _text(data.get("clientID"), "clientID")
            producers = [_text(p.get("groupName"), "a producer's groupName") for p in _objects(data.get("producerDataSet"))]
            consumers = [
                (_text(c.get("groupName"), "a consumer's groupName"), c, parse_subscriptions(c.get("subscriptionDataSet")))
                for c in _objects(data.get("consumerDataSet"))
            ]
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"heartbeat refused: {exc}")
        connection.client_id, connection.language, connection.version = client_id, request.language, request.version
        now = time.monotonic()
        for group in producers:
            self.producers.setdefault(group, {})[client_id] = connection
            self._producer_seen[(group, client_id)] = now
        changed = []
        for group, raw, subscriptions in consumers:
            members = self.consumers.get(group)
            if members is None:
                members = self.consumers[group] = {}
                if self.group_added is not None:
                    self.group_added(group)
            known = members.get(client_id)
            if known is None or known.connection is not connection:
                changed.append(group)
            members[client_id] = Consumer(
                client_id,
                connection,
                subscriptions,
                enum_name(raw.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                enum_name(raw.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                enum_name(raw.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
                now,
            )
        for group in changed:
            await self.notify_changed(group, but=client_id)
        return request.response(ResponseCode.SUCCESS)

    async def unregister(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(UNREGISTER_CLIENT_REQUEST, request.ext_fields)
        client_id = str(h["clientID"])
        if h["producerGroup"]:
            self.producers.get(str(h["producerGroup"]), {}).pop(client_id, None)
        group = h["consumerGroup"]
        if group and self.consumers.get(str(group), {}).pop(client_id, None) is not None:
            await self.notify_changed(str(group))
        return request.response(ResponseCode.SUCCESS)

    async def consumer_list(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        group = str(parse_header(GET_CONSUMER_LIST_BY_GROUP_REQUEST, request.ext_fields)["consumerGroup"])
        ids = self.consumer_ids(group)
        if not ids:  # Java's answer, which clients log and rebalance without
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return request.response(ResponseCode.SUCCESS, body=json.dumps({"consumerIdList": ids}).encode())

    async def connection_list(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """ConsumerConnection: every connection of the group's consumers, and their subscriptions."""
        group = str(parse_header(GET_CONSUMER_CONNECTION_LIST_REQUEST, request.ext_fields)["consumerGroup"])
        members = self.live(group)
        if not members:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        first = members[0]
        body = {
            "connectionSet": [
                {
                    "clientId": c.client_id,
                    "clientAddr": c.connection.remote,
                    "language": c.connection.language.name,
                    "version": c.connection.version,
                }
                for c in members
            ],
            "subscriptionTable": {t: s.raw for c in members for t, s in c.subscriptions.items()},
            "consumeType": first.consume_type,
            "messageModel": first.message_model,
            "consumeFromWhere": first.consume_from_where,
        }
        return request.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    # --- what the other parts ask -----------------------------------------------------------------

    def live(self, group: str) -> list[Consumer]:
        members = self.consumers.get(group, {})
        expired = [cid for cid, c in members.items() if c.connection.closed or time.monotonic() - c.seen > CLIENT_EXPIRY_S]
        for cid in expired:
            members.pop(cid, None)
        return sorted(members.values(), key=lambda c: c.client_id)

    def consumer_ids(self, group: str) -> list[str]:
        return [c.client_id for c in self.live(group)]

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic``, as its newest heartbeat said (any live member's)."""
        best = None
        for c in self.live(group):
            s = c.subscriptions.get(topic)
            if s is not None and (best is None or s.version > best.version):
                best = s
        return best

    def groups(self) -> list[str]:
        return sorted(self.consumers)

    def pulled(self, connection: Connection, group: str, topic: str, queue_id: int) -> None:
        """A pull of the queue by the client on ``connection``: it holds the queue (the report's queues)."""
        if connection.client_id is not None:
            self._held.setdefault((connection.client_id, group), {})[(topic, queue_id)] = time.monotonic()

    def report(self) -> list[dict]:
        """The clients connected now, one entry each (the broker_status report's ``clients``,
        brokers/clients_report.py; docs/messages.md §4)."""
        out: dict[str, dict] = {}
        now = time.monotonic()
        for group in list(self.consumers):
            for c in self.live(group):
                entry = _entry(out, c.client_id, c.connection, c.seen)
                entry["consumerGroups"].append(group)
                entry["subscriptions"][group] = [
                    {"topic": s.topic, "expression": s.expression, "type": s.expression_type.upper()}
                    for s in c.subscriptions.values()
                ]
                entry["topics"] += [t for t in c.subscriptions if t not in entry["topics"]]
                held = self._held.get((c.client_id, group), {})
                entry["queues"][group] = [[t, q] for (t, q), at in sorted(held.items()) if now - at <= HELD_S]
        for group in list(self.producers):
            for cid, connection in self._producers(group):
                entry = _entry(out, cid, connection, self._producer_seen.get((group, cid), now))
                entry["producerGroups"].append(group)
        live = {(cid, g) for cid, e in out.items() for g in e["consumerGroups"]}
        self._held = {k: v for k, v in self._held.items() if k in live}
        return [out[cid] for cid in sorted(out)]

    async def notify_changed(self, group: str, but: str | None = None) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every other consumer of the group."""
        header = encode_header({"consumerGroup": group})
        for c in self.live(group):
            if c.client_id != but:
                await c.connection.request_oneway(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header)

    def connection_closed(self, connection: Connection) -> None:
        """The server's closed-connection callback: its clients leave their groups, whose other
        consumers are told."""
        for group, members in list(self.consumers.items()):
            gone = [cid for cid, c in members.items() if c.connection is connection]
            for cid in gone:
                members.pop(cid, None)
            if gone:
                self._in_background(self.notify_changed(group))
        for producers in self.producers.values():
            for cid in [cid for cid, conn in producers.items() if conn is connection]:
                producers.pop(cid, None)

    def _in_background(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    # --- transaction checks (LocalProducers, brokers/transaction_check.py) ------------------------

    def _producers(self, group: str) -> list[tuple[str, Connection]]:
        members = self.producers.get(group, {})
        now = time.monotonic()
        for cid in [
            cid
            for cid, conn in members.items()
            if conn.closed or now - self._producer_seen.get((group, cid), 0) > CLIENT_EXPIRY_S
        ]:
            members.pop(cid, None)
        return sorted(members.items())

    def producers_of(self, group: str) -> int:
        return len(self._producers(group))

    def relay_check(self, group: str, half: Message) -> bool:
        """CHECK_TRANSACTION_STATE (oneway) to one producer of ``group`` connected here, with the half
        message as its body (its real topic and queue); False when none is."""
        producers = self._producers(group)
        if not producers:
            return False
        _, connection = producers[int(time.monotonic() * 1000) % len(producers)]
        props = half.properties
        shown = Message(
            props.get(REAL_TOPIC, half.topic),
            int(props.get(REAL_QID, "0") or 0),
            half.body,
            props,
            half.flag,
            half.sys_flag,
            half.born_timestamp,
            half.born_host,
            half.store_timestamp,
            half.store_host,
            half.reconsume_times,
            half.physical_offset,
        )
        body = encode(
            shown, queue_offset=half.queue_offset, physical_offset=half.physical_offset, store_timestamp=half.store_timestamp
        )
        txn = props.get(TRANSACTION_ID) or props.get("UNIQ_KEY", "")
        header = encode_header(
            {
                "topic": shown.topic,
                "tranStateTableOffset": half.queue_offset,
                "commitLogOffset": half.physical_offset,
                "msgId": props.get("UNIQ_KEY", txn),
                "transactionId": txn,
            }
        )
        task = asyncio.get_running_loop().create_task(
            connection.request_oneway(RequestCode.CHECK_TRANSACTION_STATE, header, body)
        )
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        return True


def _entry(out: dict[str, dict], client_id: str, connection: Connection, seen: float) -> dict:
    """The report's entry of one client (made at its first group), last seen at its newest heartbeat."""
    entry = out.get(client_id)
    if entry is None:
        entry = out[client_id] = {
            "clientId": client_id,
            "language": connection.language.name,
            "version": str(connection.version),
            "address": connection.remote,
            "protocol": "remoting",
            "lastSeenMs": 0,
            "producerGroups": [],
            "consumerGroups": [],
            "topics": [],
            "subscriptions": {},
            "queues": {},
        }
    entry["lastSeenMs"] = max(entry["lastSeenMs"], wall_ms(seen))
    return entry


def _objects(raw: object) -> Iterable[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise BadHeartbeat("producerDataSet and consumerDataSet must be lists of objects")
    return raw
