"""FIFO messages (issue 17): a message group's messages go to one queue of their topic, chosen by the
broker (RocketMQ's proxy does it: SendMessageRequest names no queue), so that a FIFO consumer group
receives them in order: an orderly pop hands a queue's messages out one batch at a time, the next
only once the last is acked or given up (the consuming rules below; brokers/consuming.py runs
them under the queue's lock).

The queue is a consistent hash of the group over the topic's write queues (jump consistent hash of
the group's CRC-32; RocketMQ uses Guava's consistentHash of the Java hash code: both move only the
groups they must when queues are added). Message groups are checked as the proxy checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from zlib import crc32

from mqrules.topic_attributes import TopicMessageType

from .pop import QueueState

SHARDING_KEY = "__SHARDINGKEY"  # RocketMQ's property for a message's group (MessageConst.PROPERTY_SHARDING_KEY)
MAX_GROUP_LENGTH = 64  # the proxy's maxMessageGroupSize


class IllegalGroup(ValueError):
    """A message group the broker refuses (ILLEGAL_MESSAGE_GROUP)."""


def check_group(group: str) -> None:
    if not group.strip():
        raise IllegalGroup("the message group is blank")
    if len(group) > MAX_GROUP_LENGTH:
        raise IllegalGroup(f"the message group is {len(group)} characters long; at most {MAX_GROUP_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in group):
        raise IllegalGroup("the message group holds a control character")


def queue_of_group(group: str, queues: int) -> int:
    """The write queue that every message of ``group`` goes to (jump consistent hash)."""
    key = crc32(group.encode()) & 0xFFFFFFFF
    b, j = -1, 0
    while j < queues:
        b = j
        key = (key * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


# --- consuming: orderly pop ------------------------------------------------------------------------
#
# RocketMQ marks a consumer group orderly (SubscriptionGroupConfig.consumeMessageOrderly); this
# project has no per-group subscription configs, so a group's receives from a FIFO topic
# (message.type FIFO) are orderly, and no other receive is. Per queue, as the broker's orderly pop
# (PopMessageProcessor with order=true, ConsumerOrderInfoManager) does:
#
# - nothing is handed out while a delivery of the queue is still invisible (``checkBlock``);
# - once none is, the deliveries not acked are handed out again in place, in offset order, before
#   anything new (the broker re-reads from the committed offset; no retry topic);
# - a message whose attempts are spent (RocketMQ's proxy: reconsumeTimes >= maxAttempts, where
#   maxAttempts = retryMaxTimes + 1 is the group's backoff policy) goes to the group's DLQ instead,
#   and the queue moves on.


def is_orderly(topic_type: TopicMessageType) -> bool:
    """Whether a group's receives from a topic of this type are orderly (the deviation above)."""
    return topic_type is TopicMessageType.FIFO


def max_attempts(retry_max_times: int) -> int:
    """Deliveries a message gets before it is dead, orderly or not: the backoff policy's maxAttempts
    (a message whose next delivery would be past it goes to the DLQ, ``attempts_spent``)."""
    return retry_max_times + 1


def still_invisible(queue: QueueState, now_ms: int) -> bool:
    """Whether a delivery of the queue is neither acked nor past its invisible time: the queue is
    blocked (an expired one blocks nothing: it is due again)."""
    return any(flight.deadline_ms > now_ms for flight in queue.in_flight.values())


def due_again(queue: QueueState, now_ms: int) -> list[tuple[int, int]]:
    """(offset, attempt) of every delivery to hand out again in place, in offset order: the expired
    ones (their next attempt), and those an acting master already revived in place (pop.py
    ``redeliver``, which holds the next attempt)."""
    due = dict(queue.redeliver)
    due.update((o, f.attempt + 1) for o, f in queue.in_flight.items() if f.deadline_ms <= now_ms)
    return sorted(due.items())


def attempts_spent(attempt: int, attempts: int | None) -> bool:
    """Whether a message would be delivered for the ``attempt``-th time past its ``attempts``
    (None: no limit): it goes to the DLQ instead (the proxy's reconsumeTimes >= maxAttempts)."""
    return attempts is not None and attempt > attempts


@dataclass(frozen=True)
class OrderlyPop:
    """What an orderly pop of one queue does, in this order: ``dead`` to the DLQ, ``again`` handed
    out again, then up to ``new`` messages from the queue's pop offset."""

    blocked: bool = False
    dead: tuple[tuple[int, int], ...] = ()  # (offset, last attempt delivered)
    again: tuple[tuple[int, int], ...] = ()  # (offset, attempt)
    new: int = 0

    @property
    def idle(self) -> bool:
        return not (self.dead or self.again or self.new)


BLOCKED = OrderlyPop(blocked=True)


def plan_orderly_pop(queue: QueueState, now_ms: int, count: int, attempts: int | None) -> OrderlyPop:
    """The orderly pop of up to ``count`` messages from ``queue``. ``attempts``: the deliveries a
    message gets (``max_attempts``), or None where nothing can be written to a DLQ (an acting
    master): then every message is handed out again, however often."""
    if still_invisible(queue, now_ms):
        return BLOCKED
    due = due_again(queue, now_ms)
    dead = tuple((offset, attempt - 1) for offset, attempt in due if attempts_spent(attempt, attempts))
    live = [(offset, attempt) for offset, attempt in due if not attempts_spent(attempt, attempts)]
    again = tuple(live[:count])
    # New messages come after every redelivery (all of them are below the pop offset).
    return OrderlyPop(dead=dead, again=again, new=count - len(live) if len(live) < count else 0)
