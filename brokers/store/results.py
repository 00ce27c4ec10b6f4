"""What a send to the store gets back: a PutMessageStatus (reference §4.4) and, when stored, where."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class PutMessageStatus(StrEnum):
    """Reference §4.4 (the ones this store produces)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored; replicas did not ack in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored; no replica to wait for
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # refused before writing
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class PutResult(NamedTuple):  # a tuple: one is built per message stored, and tuples are cheapest
    status: PutMessageStatus
    physical_offset: int = -1
    queue_offset: int = -1
    size: int = 0
    store_timestamp: int = 0
    detail: str = ""
