"""A stored message as the official clients receive it (RocketMQ's proxy, ``GrpcConverter``): its id,
keys, tag, body digest, born and store times, and its type from what the broker keeps with it (a
delivery time: DELAY, a message group: FIFO). The callers add what their answer carries: a receive
its receipt handle and invisible time, a transaction check the TRANSACTION type."""

from __future__ import annotations

from collections.abc import Container

from google.protobuf.timestamp_pb2 import Timestamp
from isal.isal_zlib import crc32
from rocketmq.grpc_protocol import definition_pb2 as pb

from ..core.fifo import SHARDING_KEY
from ..core.timer import TIMER_DELIVER_MS
from ..store.message import Message


def client_message(m: Message, topic: str, queue_id: int, hidden: Container[str]) -> pb.Message:
    """``m`` as a client sees it, on ``topic`` and ``queue_id``, with the properties not in
    ``hidden`` as its user properties."""
    props = m.properties
    born, stored = Timestamp(), Timestamp()
    born.FromMilliseconds(m.born_timestamp)
    stored.FromMilliseconds(m.store_timestamp)
    sp = pb.SystemProperties(
        keys=[k for k in props.get("KEYS", "").split(" ") if k],
        message_id=props.get("UNIQ_KEY", ""),
        body_digest=pb.Digest(type=pb.DigestType.CRC32, checksum=f"{crc32(m.body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.Encoding.IDENTITY,
        message_type=pb.MessageType.NORMAL,
        born_timestamp=born,
        born_host=props.get("BORN_HOST", ""),
        store_timestamp=stored,
        queue_id=queue_id,
        queue_offset=m.queue_offset,
    )
    if "TAGS" in props:
        sp.tag = props["TAGS"]
    deliver_ms = props.get(TIMER_DELIVER_MS, "")
    if deliver_ms.isdigit():  # a timer message: its type and delivery time
        sp.message_type = pb.MessageType.DELAY
        sp.delivery_timestamp.FromMilliseconds(int(deliver_ms))
    message_group = props.get(SHARDING_KEY)
    if message_group:  # a FIFO message: its type and group
        sp.message_type = pb.MessageType.FIFO
        sp.message_group = message_group
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties={k: v for k, v in props.items() if k not in hidden},
        system_properties=sp,
        body=m.body,
    )
