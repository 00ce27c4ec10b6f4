"""Sending, whatever the client protocol: admit → route → append. A protocol edge
(brokers/grpc/sending.py) turns a request's messages into ``Outgoing`` values, asks ``admit``
(brokers/core/admission.py decides), carries out what the Admission says (stores with ``append``,
hands the send on, refuses it) and answers.

``append`` stores a send's messages in one call: a half message (brokers/transaction.py) or a timer
message (brokers/timer.py) as the admission says. A static topic's messages are counted as on their
way to the store while they are (``StaticQueues.writing``: a seal waits for them; nothing awaits
between the admission's check of the mapping and this count), and their offsets are answered
logical.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Protocol

from .config import BrokerConfig
from .core.admission import Admission, Admitted, Outgoing, SendRules, admit_send, forwards_sends, metrics_type
from .core.delay_levels import parse_delay_levels
from .core.roles import WriteReason
from .metrics import Traffic
from .static import StaticQueues
from .store.message import Message
from .store.results import PutMessageStatus, PutResult
from .store.store import MessageStore
from .timer import into_wheel, now_ms
from .topics import TopicConfigManager
from .transaction import into_half

# RocketMQ's PutMessageResult.isOk(): stored, whatever the flush or the replicas said
STORED = frozenset(
    (
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    )
)


class WriteGate(Protocol):
    """The broker's write gate (brokers/ha/gate.py ``WritePermission``): why it takes sends or not."""

    @property
    def reason(self) -> WriteReason: ...


class SendService:
    """``gate`` and ``acting()``: whether a send goes to the group's master (a slave's, unless it acts
    for a dead one)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        static: StaticQueues,
        gate: WriteGate,
        acting: Callable[[], bool],
        traffic: Traffic,
    ):
        self.store, self.topics, self.static = store, topics, static
        self.traffic = traffic
        self.gate, self.acting = gate, acting
        levels = parse_delay_levels(config.messageDelayLevel)
        self.rules = SendRules(config.brokerName, config, levels, itertools.count(), static.turns)
        # the record's store host: with its commit-log offset, the message's offset id (a remoting
        # client's msgId, and what VIEW_MESSAGE_BY_ID finds it by)
        self.store_host = (config.brokerIP1, config.listenPort)

    def forwards(self) -> bool:
        """Whether sends (and EndTransactions) go to the group's master now."""
        return forwards_sends(self.gate.reason, self.acting())

    def admit(self, messages: Sequence[Outgoing], *, may_forward: bool = True, waited: bool = False) -> Admission:
        """The send's Admission (``may_forward``: false once the edge found it serves the send itself;
        ``waited``: once for a static queue's decision already)."""
        forwards = may_forward and forwards_sends(self.gate.reason, self.acting())
        return admit_send(messages, self.topics.topics, self.static.mappings, self.rules, now_ms(), forwards, waited)

    async def append(self, admission: Admission, messages: Sequence[Outgoing]) -> list[PutResult]:
        """Store the messages an Admission (verdict STORE) took of ``messages``: one result each, a
        static topic's offsets logical."""
        admitted = admission.messages
        stored = []
        for a, out in zip(admitted, messages, strict=True):
            msg = Message(
                a.topic,
                a.queue_id,
                out.body,
                a.properties,
                out.flag,
                out.sys_flag,
                born_timestamp=out.born_ms,
                store_host=self.store_host,
                reconsume_times=out.reconsume_times,
            )
            if a.half:  # the transaction id is the message id (RocketMQ's UNIQ_KEY)
                msg = into_half(msg, a.properties["UNIQ_KEY"])
            elif a.due_ms is not None:
                msg = into_wheel(msg, a.due_ms)
            stored.append(msg)
        if admitted[0].logical_base is None:  # (a send is all of static topics, or none: admission's rule)
            results = await self.store.put_messages(stored)
            self._count(admitted, messages, results)
            return results
        writing = self.static.writing
        queues = [(msg.topic, msg.queue_id) for msg in stored]
        writing.update(queues)
        try:
            results = await self.store.put_messages(stored)
        finally:
            writing.subtract(queues)
        self._count(admitted, messages, results)
        return [r._replace(queue_offset=r.queue_offset + (a.logical_base or 0)) for r, a in zip(results, admitted, strict=True)]

    def _count(self, admitted: Sequence[Admitted], messages: Sequence[Outgoing], results: list[PutResult]) -> None:
        """rocketmq_messages_in_total and its kin: the messages stored, by topic and RocketMQ's
        message type (a send is of one topic and type: the admission's rule)."""
        sizes = [len(out.body) for out, r in zip(messages, results, strict=True) if r.status in STORED]
        if sizes:
            self.traffic.messages_stored(admitted[0].topic, metrics_type(messages[0].message_type), sizes)
