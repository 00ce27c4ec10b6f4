"""Requests to one broker that wait for its answer (docs/websocket.md, "Requests to a broker").

Pushes (``controlplane.push``) go one way. An operator's change that a broker carries out (a dynamic
config key, an offset reset) needs the broker's answer, and the web process that asks may not be the
one holding the broker's socket: the request travels as a push to the socket's channel, carrying a
random ``requestId``; the broker answers with an ``rpc_reply`` frame on its socket, whichever process
reads it puts the answer on a Redis list named by the id, and the asking process pops it (BLPOP).

Only the socket the request went to may answer it: the channel is written next to the id before the
push, and a reply from any other socket is refused (a broker cannot answer for another).
"""

from __future__ import annotations

import json
import time
import uuid

from mqrules.codes import ResponseCode
from mqrules.validation import Invalid

from . import ws
from .push import send_frames
from .redis import async_client, key, sync_client

REPLY_TTL_MILLIS = 60_000  # an answer nobody collects (its asker timed out) is gone after this
BLPOP_SLICE_S = 2  # under the sync client's socket timeout (5 s): a long wait is several pops


class BrokerUnreachable(RuntimeError):
    """No socket for the broker, or no answer in time: whether it acted is unknown."""


class BrokerRefused(Exception):
    """The broker answered with a refusal: it changed nothing."""

    def __init__(self, code: int, name: str, detail: str, fields: dict | None = None):
        super().__init__(f"{code} {name}: {detail}")
        self.code, self.name, self.detail, self.fields = code, name, detail, fields


def _reply_key(request_id: str) -> str:
    return key("rpc", "reply", request_id)


def _channel_key(request_id: str) -> str:
    return key("rpc", "channel", request_id)


def call(channel_name: str | None, kind: str, payload: dict, timeout_s: float = 10.0) -> dict:
    """Send request ``kind`` to the broker socket ``channel_name`` and return its result."""
    if not channel_name:
        raise BrokerUnreachable("the broker has no websocket to this control plane")
    request_id = uuid.uuid4().hex
    client = sync_client()
    client.set(_channel_key(request_id), channel_name, px=REPLY_TTL_MILLIS)
    try:
        if not send_frames([channel_name], kind, {**payload, "requestId": request_id}):
            raise BrokerUnreachable("the broker's websocket is gone")
        reply = _wait(client, request_id, timeout_s)
    finally:
        client.delete(_channel_key(request_id))
    if reply.get("ok") is True:
        result = reply.get("result")
        return result if isinstance(result, dict) else {}
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    code = error.get("code") if isinstance(error.get("code"), int) else int(ResponseCode.SYSTEM_ERROR)
    fields = error.get("fields") if isinstance(error.get("fields"), dict) else None
    return _refused(code, str(error.get("name", "")), str(error.get("detail", "refused")), fields)


def _refused(code: int, name: str, detail: str, fields: dict | None) -> dict:
    raise BrokerRefused(code, name, detail, fields)


def _wait(client, request_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        popped = client.blpop([_reply_key(request_id)], timeout=max(0.01, min(BLPOP_SLICE_S, left)))
        if popped is not None:
            return json.loads(popped[1])
    raise BrokerUnreachable(f"no answer from the broker within {timeout_s:g} s")


# KEYS: channel key, reply key. ARGV: the answering socket's channel, reply JSON, ttl ms.
# The answer is kept only when it comes from the socket the request went to.
_ANSWER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]))
return 1
"""


def _parse_reply(payload: dict) -> str:
    request_id = payload.get("requestId")
    errors = {}
    if not (isinstance(request_id, str) and len(request_id) == 32 and all(c in "0123456789abcdef" for c in request_id)):
        errors["requestId"] = ["required: the requestId of the request answered (32 hex digits)"]
    if not isinstance(payload.get("ok"), bool):
        errors["ok"] = ["required: true or false"]
    if errors:
        raise Invalid(errors)
    return request_id


async def rpc_reply(connection: ws.BrokerConsumer, payload: dict) -> dict:
    """A broker's answer to a request (above)."""
    request_id = _parse_reply(payload)
    answer = json.dumps(payload, separators=(",", ":"))
    kept = await async_client().eval(
        _ANSWER, 2, _channel_key(request_id), _reply_key(request_id), connection.channel_name, answer, REPLY_TTL_MILLIS
    )
    if not kept:
        raise ws.FrameError(ResponseCode.NO_PERMISSION, "no request with this requestId is waiting for this socket's answer")
    return {}


def register_frames() -> None:
    ws.register("rpc_reply", rpc_reply)
