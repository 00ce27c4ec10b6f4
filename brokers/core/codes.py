"""The answers a decision carries: RocketMQ 5's ``Code`` (apache/rocketmq-apis ``definition.proto``),
by the same names and numbers, so an edge passes ``int(code)`` to the wire as it is
(tests/brokers/core/test_codes.py holds them to the protocol's)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Code(IntEnum):
    OK = 20000
    BAD_REQUEST = 40000
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    FORBIDDEN = 40300
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    INTERNAL_SERVER_ERROR = 50001
    NOT_IMPLEMENTED = 50100


@dataclass(frozen=True, slots=True)
class Status:
    """A code and what it says; without a detail, the code's name (as RocketMQ's proxy answers)."""

    code: Code
    detail: str = ""

    @property
    def message(self) -> str:
        return self.detail or self.code.name
