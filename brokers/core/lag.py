"""A consumer group's backlog on one topic, as RocketMQ's ConsumerLagCalculator counts it for the
metrics ``rocketmq_consumer_lag_messages``, ``_inflight_messages`` and ``_ready_messages`` (docs/metrics.md).

Per queue: ``committed`` is the group's committed offset (what the broker_status report and mqadmin's
diff count lag from, so the metric and the REST API agree), ``pulled`` the next offset never handed
out (a pop consumer's pop offset; a pull consumer's is not known to the broker, so its committed
offset stands for it). Lag is what is stored and not committed, in flight what was handed out and not
committed, ready what was never handed out.
"""

from __future__ import annotations


def queue_backlog(max_offset: int, min_offset: int, committed: int, pulled: int) -> tuple[int, int, int, int, int]:
    """(lag, in flight, ready, first unconsumed offset, first offset never handed out) of one queue.

    Lag counts from the committed offset as mqadmin's diff does (deleted messages included, as the
    REST API's lag); in flight and ready count only what is still kept (retention moved the queue's
    first offset past a group's commit: those messages are skipped, never handed out). A tuple of
    ints: it runs once per (group, topic, queue) on every scrape."""
    consumed = committed if committed > min_offset else min_offset
    handed_out = pulled if pulled > consumed else consumed
    lag = max_offset - committed if max_offset > committed else 0
    in_flight = (handed_out if handed_out < max_offset else max_offset) - consumed
    ready = max_offset - handed_out if max_offset > handed_out else 0
    return lag, in_flight if in_flight > 0 else 0, ready, consumed, handed_out


def is_retry_topic(topic: str) -> bool:
    return topic.startswith("%RETRY%")


def is_system(topic: str, group: str | None = None) -> bool:
    """RocketMQ's TopicValidator.isSystemTopic / MixAll.isSysConsumerGroup, by their prefixes."""
    return topic.startswith(("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX", "TBW102", "%DLQ%rmq_sys")) or (
        group is not None and group.startswith("CID_RMQ_SYS_")
    )
