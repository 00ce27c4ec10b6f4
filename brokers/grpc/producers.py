"""The producers connected to this broker: their Telemetry streams, kept under each topic they publish
to (its producer group in gRPC), so that a transaction check can reach one (RocketMQ's check through
the proxy: a Telemetry RecoverOrphanedTransactionCommand; which broker of the set relays it:
brokers/transaction_check.py, whose ``LocalProducers`` this is)."""

from __future__ import annotations

import asyncio

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..core.timer import REAL_QID, REAL_TOPIC
from ..core.transaction import TRANSACTION_ID, TXN_KEYS
from ..store.message import Message
from .messages import client_message

_HIDDEN = frozenset({"UNIQ_KEY", "TAGS", "KEYS", "BORN_HOST", *TXN_KEYS})

Stream = asyncio.Queue  # the commands a Telemetry stream sends its client


def check_message(half: Message) -> pb.Message:
    """A half message as a transaction check shows it to its producer (its real topic and queue, as
    the proxy converts it)."""
    props = half.properties
    out = client_message(half, props.get(REAL_TOPIC, ""), int(props.get(REAL_QID, "0")), _HIDDEN)
    out.system_properties.message_type = pb.MessageType.TRANSACTION
    return out


class ProducerStreams:
    def __init__(self) -> None:
        self._streams: dict[str, list[Stream]] = {}  # producer group -> Telemetry streams

    def add(self, group: str, stream: Stream) -> None:
        self._streams.setdefault(group, []).append(stream)

    def remove(self, group: str, stream: Stream) -> None:
        streams = self._streams.get(group, [])
        if stream in streams:
            streams.remove(stream)
        if not streams:
            self._streams.pop(group, None)

    def producers_of(self, group: str) -> int:
        """How many Telemetry streams of producers of ``group`` this broker holds."""
        return len(self._streams.get(group, ()))

    def relay_check(self, group: str, half: Message) -> bool:
        """Ask a producer of ``group`` connected here about a transaction; False when none is
        connected here."""
        streams = self._streams.get(group)
        if not streams:
            return False
        streams.append(streams.pop(0))  # in turn
        txn = half.properties.get(TRANSACTION_ID, "")
        command = spb.RecoverOrphanedTransactionCommand(message=check_message(half), transaction_id=txn)
        streams[-1].put_nowait(spb.TelemetryCommand(recover_orphaned_transaction_command=command))
        return True
