"""``message_trace`` (docs/messages.md §3): what each consumer group did with one message, from the
consumer-metadata records of its position and of its copies' positions (found through the store's index
by their trace keys, brokers/core/trace.py), the copies in the group's retry topic and DLQ (found by the
message's unique key), and the group's committed offsets. The verdict is core/trace.py's ``decide``.
"""

from __future__ import annotations

import json

from .core.pop import RETRY_PREFIX, dlq_topic, retry_topic
from .core.trace import Delivery, Noted, Position, decide, deliveries_at, trace_key
from .core.views import UNIQ_KEY
from .messages import IndexedStore, MessageQueries, check_int, check_name, invalid
from .meta import MAX_NAME, META_TOPIC, ConsumerMeta
from .pop import now_ms
from .store.message import Message
from .store.store import MessageStore

MAX_GROUPS = 256
MAX_RECORDS = 256  # the records of one position (its pops, invisible-time changes and finish)
MAX_COPIES = 64  # a message's copies in one retry topic or DLQ
CLOCK_SLACK_MS = 60_000  # records written by another replica (a failover) may carry an earlier clock


def parse_trace(payload: dict) -> tuple[str, int, int, str | None, int, list[str]]:
    """(topic, queueId, queueOffset, uniqKey, storeTimestamp, groups) of a ``message_trace`` request."""
    fields: dict[str, list[str]] = {}
    topic = check_name(payload, "topic", fields)
    queue_id = check_int(payload, "queueId", 0, 65535, None, fields)
    queue_offset = check_int(payload, "queueOffset", 0, 2**63 - 1, None, fields)
    stored = check_int(payload, "storeTimestamp", 0, 2**63 - 1, 0, fields)
    uniq = payload.get("uniqKey")
    if uniq is not None and (not isinstance(uniq, str) or not 0 < len(uniq) <= MAX_NAME):
        fields["uniqKey"] = [f"must be null or 1-{MAX_NAME} characters"]
    groups = payload.get("groups")
    if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
        fields["groups"] = [f"must be a list of at most {MAX_GROUPS} group names"]
    elif not all(isinstance(g, str) and 0 < len(g) <= MAX_NAME and "\x00" not in g for g in groups):
        fields["groups"] = [f"each must be a name of 1-{MAX_NAME} characters"]
    if fields:
        raise invalid(fields)
    return topic, queue_id, queue_offset, uniq, stored, list(dict.fromkeys(groups))  # type: ignore[arg-type]


class MessageTracer:
    def __init__(self, store: MessageStore, meta: ConsumerMeta, queries: MessageQueries):
        self.store, self.meta, self.queries = store, meta, queries
        self.index: IndexedStore = store  # type: ignore[assignment]

    async def message_trace(self, payload: dict) -> dict:
        """``{"topic", "queueId", "queueOffset", "uniqKey", "storeTimestamp", "groups"}`` ->
        ``{"groups": {group: trace}}``."""
        topic, queue_id, queue_offset, uniq, stored, groups = parse_trace(payload)
        gone = await self._records_gone(stored)
        noted = await self._noted(topic, queue_id, queue_offset, stored)
        out = {}
        for group in groups:
            out[group] = await self._group_trace(group, Position(topic, queue_id, queue_offset), uniq, stored, noted, gone)
        return {"groups": out}

    async def _records_gone(self, stored: int) -> bool:
        """Retention deleted records written after the message was stored."""
        if self.store.min_offset <= 0:
            return False
        oldest = await self.store.oldest_store_timestamp()
        return oldest is not None and oldest > stored

    async def _noted(self, topic: str, queue_id: int, queue_offset: int, since: int) -> list[Noted]:
        """The consumer-metadata records that name the position (its trace key in their KEYS)."""
        key = trace_key(topic, queue_id, queue_offset)
        records = await self.index.query_index_messages(
            META_TOPIC, key, max(0, since - CLOCK_SLACK_MS), now_ms() + CLOCK_SLACK_MS, MAX_RECORDS
        )
        out = []
        for m in records:
            try:
                body = json.loads(m.body)
            except ValueError:
                continue
            if isinstance(body, dict):
                out.append(Noted(body, m.store_timestamp, m.physical_offset))
        return out

    async def _copies(self, topic: str, uniq: str | None, since: int) -> list[Message]:
        """The message's copies in ``topic`` (a retry topic or a DLQ), oldest first."""
        if uniq is None:
            return []
        found = await self.index.query_index_messages(
            topic, uniq, max(0, since - CLOCK_SLACK_MS), now_ms() + CLOCK_SLACK_MS, MAX_COPIES
        )
        return sorted((m for m in found if m.properties.get(UNIQ_KEY) == uniq), key=lambda m: m.physical_offset)

    def _position(self, group: str, topic: str, queue_id: int, queue_offset: int) -> Position:
        return Position(topic, queue_id, queue_offset, self.meta.consumed_below(group, topic, queue_id))

    async def _group_trace(
        self, group: str, origin: Position, uniq: str | None, stored: int, noted: list[Noted], gone: bool
    ) -> dict:
        base = self._position(group, origin.topic, origin.queue_id, origin.queue_offset)
        positions = [base]
        deliveries: list[Delivery] = deliveries_at(base, group, noted)
        retries = []
        # a pop consumer's retry topic, and a remoting consumer's (its send-backs)
        for topic in dict.fromkeys((retry_topic(group, origin.topic), RETRY_PREFIX + group)):
            retries += await self._copies(topic, uniq, stored)
        retries.sort(key=lambda m: m.physical_offset)
        for copy in retries:
            p = self._position(group, copy.topic, copy.queue_id, copy.queue_offset)
            positions.append(p)
            deliveries += deliveries_at(p, group, await self._noted(p.topic, p.queue_id, p.queue_offset, copy.store_timestamp))
        dead = await self._copies(dlq_topic(group), uniq, stored)
        return {
            "consumed": decide(positions, deliveries, bool(dead), gone).value,
            "deliveries": [d.wire() for d in deliveries],
            "retry": [self.queries.view(m) for m in retries],
            "dlq": self.queries.view(dead[-1]) if dead else None,
            "committedOffset": base.committed,
            "recordsGone": gone,
        }
