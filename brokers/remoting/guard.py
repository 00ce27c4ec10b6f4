"""Access control at the remoting edge (issue 39; docs/acl.md): each client request's ``AccessKey`` /
``Signature`` fields checked, and what it asks (brokers/core/access.py) authorized, before its handler
runs; a refused request is answered NO_PERMISSION (16) with the reason as its remark, as RocketMQ's
broker answers both an authentication and an authorization failure (``AuthenticationPipeline``,
``AuthorizationPipeline``), and nothing changes. Only the client handlers are wrapped: the peer
channel's requests (brokers/control/peers.py) carry the peer token and stay as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from mqrules.acl import Judgement, Verdict
from mqrules.remoting.codes import ResponseCode
from mqrules.remoting.frame import RemotingCommand

from ..core.access import Ask, remoting_asks
from .server import Connection, Handler

log = logging.getLogger("brokers.remoting.acl")


class AccessCheck(Protocol):
    @property
    def enabled(self) -> bool: ...

    def check_remoting(
        self, fields: Mapping[str, str], body: bytes | None, peer_ip: str | None, asks: tuple[Ask, ...]
    ) -> Judgement: ...


def guarded(access: AccessCheck | None, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
    """``handlers`` (by request code), each refused as this module says while access control is on (read
    at every request: it can be switched on a running broker)."""
    if access is None:
        return dict(handlers)
    return {code: _guard(access, code, handler) for code, handler in handlers.items()}


def _guard(access: AccessCheck, code: int, handler: Handler) -> Handler:
    async def call(request: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        if not access.enabled:  # switched off (updateBrokerConfig): one attribute read
            return await handler(request, connection)
        ip = connection.remote.rsplit(":", 1)[0] if connection is not None else None
        fields = request.ext_fields or {}
        refusal: Judgement | None = None
        try:
            asks = remoting_asks(code, fields, request.body)
        except ValueError as exc:
            asks, refusal = (), Judgement(Verdict.FORBIDDEN, f"parse authorization context error: {exc}")
        judgement = access.check_remoting(fields, request.body, ip, asks)
        if judgement.allowed and refusal is not None:
            judgement = refusal
        if not judgement.allowed:
            log.debug("refused request %d from %s: %s", code, ip, judgement.detail)
            return request.response(ResponseCode.NO_PERMISSION, judgement.detail)
        return await handler(request, connection)

    return call
