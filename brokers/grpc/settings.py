"""The settings a broker answers a client's Telemetry settings command with, filled as RocketMQ's
proxy fills them (``GrpcClientSettingsManager``, ProxyConfig defaults), so that every official client
finishes its settings sync: the Node.js producer crashes without a backoff policy, the Java producer
never adopts a route without an exponential one, a push consumer polls with batch size 0 and no long
polling without the subscription fields. Pure."""

from __future__ import annotations

from collections.abc import Collection

from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb

from ..core.admission import MAX_BODY_SIZE
from ..core.delay_levels import DEFAULT_DELAY_LEVELS, parse_delay_levels

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF = (0.010, 1.0, 2.0)  # initial s, max s, multiplier
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
# The default group retry policy (CustomizedRetryPolicy): the default delay levels.
CONSUMER_BACKOFF_S = tuple(ms / 1000 for ms in parse_delay_levels(DEFAULT_DELAY_LEVELS))
CONSUMERS = (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PULL_CONSUMER)


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def client_settings(asked: pb.Settings, retry_max_times: int, fifo_topics: Collection[str] = ()) -> pb.Settings:
    """The client's settings with what the server decides filled in (``asked`` is not changed).
    ``fifo_topics``: the topics whose receives are orderly (brokers/core/fifo.py ``is_orderly``)."""
    settings = pb.Settings()
    settings.CopyFrom(asked)
    if settings.client_type == pb.ClientType.PRODUCER or settings.HasField("publishing"):
        initial, maximum, multiplier = PRODUCER_BACKOFF
        settings.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=_duration(initial), max=_duration(maximum), multiplier=multiplier
                ),
            )
        )
        settings.publishing.max_body_size = MAX_BODY_SIZE
        settings.publishing.validate_message_type = True
    elif settings.client_type in CONSUMERS or settings.HasField("subscription"):
        settings.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        settings.subscription.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT_S))
        settings.subscription.fifo = subscribes_fifo(settings, fifo_topics)
        settings.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=retry_max_times + 1,
                customized_backoff=pb.CustomizedBackoff(next=[_duration(s) for s in CONSUMER_BACKOFF_S]),
            )
        )
    settings.metric.on = False
    return settings


def subscribes_fifo(settings: pb.Settings, fifo_topics: Collection[str]) -> bool:
    """``subscription.fifo``: RocketMQ answers the group's consumeMessageOrderly; here receives from a
    FIFO topic are orderly (brokers/core/fifo.py), so a SimpleConsumer subscribed to one is told so. A push
    consumer is not: told fifo, the Python one forwards a failed message to the DLQ itself
    (ForwardMessageToDeadLetterQueue, which this broker does not serve) instead of letting it come
    again; it still receives each queue in order."""
    if settings.client_type != pb.ClientType.SIMPLE_CONSUMER:
        return False
    return any(entry.topic.name in fifo_topics for entry in settings.subscription.subscriptions)
