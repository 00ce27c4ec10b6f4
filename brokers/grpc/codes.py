"""Statuses as RocketMQ 5 clients expect them: the one way the gRPC edge builds a ``Status``, and send
results (reference §4.4; the proxy's mapping): the four "stored" statuses keep their meaning,
anything else is an error code. Pure."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from ..core.codes import Status
from ..store.store import PutMessageStatus

SEND_STATUS_CODES = {
    PutMessageStatus.PUT_OK: pb.Code.OK,
    "FLUSH_DISK_TIMEOUT": pb.Code.MASTER_PERSISTENCE_TIMEOUT,  # stored, not yet durable on disk
    "FLUSH_SLAVE_TIMEOUT": pb.Code.SLAVE_PERSISTENCE_TIMEOUT,  # stored, replicas did not ack in time
    "SLAVE_NOT_AVAILABLE": pb.Code.HA_NOT_AVAILABLE,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutMessageStatus.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
}


def send_code(status: str) -> int:
    """The gRPC ``Code`` for a ``PutMessageStatus``; the proxy answers INTERNAL_SERVER_ERROR for the rest
    (SERVICE_NOT_AVAILABLE, IN_SYNC_REPLICAS_NOT_ENOUGH, UNKNOWN_ERROR, ...)."""
    return SEND_STATUS_CODES.get(status, pb.Code.INTERNAL_SERVER_ERROR)


def permission(perm: int) -> int:
    """Topic perm bits (reference §3.2) to the route's ``Permission``."""
    readable, writeable = bool(perm & 4), bool(perm & 2)
    if readable and writeable:
        return pb.Permission.READ_WRITE
    if readable:
        return pb.Permission.READ
    if writeable:
        return pb.Permission.WRITE
    return pb.Permission.NONE


def status(code: int, message: str = "") -> pb.Status:
    """A ``Status`` as the proxy answers it: without a message, the code's name."""
    return pb.Status(code=code, message=message or pb.Code.Name(code))


def status_of(decided: Status) -> pb.Status:
    """A core decision's status (brokers/core/codes.py: the same codes, by number)."""
    return pb.Status(code=decided.code, message=decided.message)


OK = status(pb.Code.OK)  # copied into each message that carries it (protobuf messages are never shared)
