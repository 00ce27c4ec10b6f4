"""Access control at the gRPC edge (issue 39; docs/acl.md): each RPC of the servicer wrapped so that a
refused call is answered its own response type with ``status`` UNAUTHORIZED (40100: no or a bad
signature, an unknown or disabled user, a date out of the window) or FORBIDDEN (40300: no policy allows
it) before its handler runs, so nothing is changed and nothing stored. A refused ReceiveMessage answers
one response with the status; a refused Telemetry stream one command with the status, then ends.

This module reads the names out of each request (``GrpcNames``); what they ask is brokers/core/access.py's
table, the judgement brokers/acl.py's. Whether it checks at all is read at every call, so that an operator
can switch access control on and off on a running broker (docs/acl.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import unquote

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from mqrules.acl import Judgement, Verdict

from ..core.access import Ask, GrpcCall, GrpcNames, grpc_asks
from ..tls_front import client_address

log = logging.getLogger("brokers.grpc.acl")


class AccessCheck(Protocol):
    @property
    def enabled(self) -> bool: ...

    def check_grpc(self, metadata: Iterable[tuple[str, str]], peer_ip: str | None, asks: tuple[Ask, ...]) -> Judgement: ...


_CONSUMERS = frozenset(
    pb.ClientType.Value(name)
    for name in ("PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER", "LITE_PUSH_CONSUMER", "LITE_SIMPLE_CONSUMER")
    if name in pb.ClientType.keys()
)


def _topic_and_group(r: Any) -> GrpcNames:
    return GrpcNames((r.topic.name,), r.group.name)


_NAMES: dict[GrpcCall, Callable[[Any], GrpcNames]] = {
    GrpcCall.SEND_MESSAGE: lambda r: GrpcNames(tuple(m.topic.name for m in r.messages)),
    GrpcCall.END_TRANSACTION: lambda r: GrpcNames((r.topic.name,)),
    GrpcCall.QUERY_ROUTE: lambda r: GrpcNames((r.topic.name,)),
    GrpcCall.RECEIVE_MESSAGE: lambda r: GrpcNames((r.message_queue.topic.name,), r.group.name),
    GrpcCall.ACK_MESSAGE: _topic_and_group,
    GrpcCall.CHANGE_INVISIBLE_DURATION: _topic_and_group,
    GrpcCall.FORWARD_MESSAGE_TO_DLQ: _topic_and_group,
    GrpcCall.QUERY_ASSIGNMENT: _topic_and_group,
    GrpcCall.NOTIFY_CLIENT_TERMINATION: lambda r: GrpcNames((), r.group.name),
    GrpcCall.HEARTBEAT: lambda r: GrpcNames((), r.group.name, r.client_type in _CONSUMERS),
    GrpcCall.QUERY_OFFSET: lambda r: GrpcNames((r.message_queue.topic.name,)),
}

# A client asks the same of the same names call after call: one tuple of asks each (the judgement cache's
# key), built once.
_asks = functools.lru_cache(maxsize=8192)(grpc_asks)

_CODES = {Verdict.UNAUTHENTICATED: pb.Code.UNAUTHORIZED, Verdict.FORBIDDEN: pb.Code.FORBIDDEN}


@functools.lru_cache(maxsize=4096)  # a client's connections share one peer string: parsed once
def peer_ip(peer: str) -> str | None:
    """gRPC's ``context.peer()`` (``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678`` or its %-escaped form) as
    an address; None for any other (a unix socket)."""
    scheme, _, rest = unquote(peer).partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host = rest.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def status_of(judgement: Judgement) -> pb.Status:
    return pb.Status(code=_CODES.get(judgement.verdict, pb.Code.FORBIDDEN), message=judgement.detail)


def _judge(access: AccessCheck, call: GrpcCall, request: Any, context) -> Judgement:
    names = _NAMES[call](request) if request is not None else GrpcNames()
    # Through a permissive mode's front the peer is the front's connection: the client's address is the front's.
    address = peer_ip(client_address(context.peer()))
    judgement = access.check_grpc(context.invocation_metadata() or (), address, _asks(call, names))
    if not judgement.allowed:
        log.debug("refused %s from %s: %s", call.value, context.peer(), judgement.detail)
    return judgement


def guarded(access: AccessCheck | None, method):
    """``method`` (a handler's RPC, named as service.proto names it) refused as this module says, or
    ``method`` itself when access control is off."""
    if access is None:
        return method
    call = GrpcCall(method.__name__)
    if call is GrpcCall.TELEMETRY:
        return _stream_stream(access, method)
    if call is GrpcCall.RECEIVE_MESSAGE:
        return _server_stream(access, call, method)
    response_type = getattr(spb, f"{call.value}Response")

    async def unary(request, context):
        if not access.enabled:  # switched off (updateBrokerConfig): one attribute read
            return await method(request, context)
        judgement = _judge(access, call, request, context)
        if not judgement.allowed:
            return response_type(status=status_of(judgement))
        return await method(request, context)

    return unary


def _server_stream(access: AccessCheck, call: GrpcCall, method):
    async def stream(request, context):
        judgement = _judge(access, call, request, context) if access.enabled else None
        if judgement is not None and not judgement.allowed:
            yield spb.ReceiveMessageResponse(status=status_of(judgement))
            return
        async for response in method(request, context):
            yield response

    return stream


def _stream_stream(access: AccessCheck, method):
    """Telemetry: the caller is authenticated when the stream opens (it asks nothing more)."""

    async def stream(request_iterator, context):
        judgement = _judge(access, GrpcCall.TELEMETRY, None, context) if access.enabled else None
        if judgement is not None and not judgement.allowed:
            yield spb.TelemetryCommand(status=status_of(judgement))
            return
        async for command in method(request_iterator, context):
            yield command

    return stream
