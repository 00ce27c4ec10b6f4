"""The core's codes and message types are RocketMQ 5's (brokers/core/codes.py,
brokers/core/admission.py): same names, same numbers as the protocol the edges speak, so an edge
passes them to the wire as they are."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from brokers.core.admission import MessageType, type_name
from brokers.core.codes import Code, Status

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("code", list(Code), ids=lambda c: c.name)
def test_each_code_is_the_protocols(code):
    assert pb.Code.Value(code.name) == code


@pytest.mark.parametrize("message_type", list(MessageType), ids=lambda t: t.name)
def test_each_message_type_is_the_protocols(message_type):
    assert pb.MessageType.Value(message_type.name) == message_type


@pytest.mark.parametrize(
    "number, name",
    [(1, "NORMAL"), (4, "TRANSACTION"), (0, "MESSAGE_TYPE_UNSPECIFIED"), (99, "99")],
)
def test_a_message_type_is_named_as_a_refusal_names_it(number, name):
    assert type_name(number) == name


@pytest.mark.parametrize(
    "status, message",
    [
        (Status(Code.MESSAGE_BODY_EMPTY), "MESSAGE_BODY_EMPTY"),
        (Status(Code.TOPIC_NOT_FOUND, "topic T not found"), "topic T not found"),
    ],
)
def test_a_status_without_a_detail_says_its_codes_name(status, message):
    assert status.message == message
