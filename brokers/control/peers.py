"""The peer channel: brokers of one replica group talking to each other on their remoting port
(``brokerIP1:listenPort``, RocketMQ's 10911), for ``EXCHANGE_BROKER_HA_INFO`` (906), the metadata
pulls of pre-online (reference §5.1, §5.3) and the relay of transaction checks.

Real remoting frames (mqrules/remoting/), on the same listener as the clients' requests
(brokers/remoting/server.py): a peer request is a RemotingCommand whose code is the request code, whose
``extFields`` carry the peer token (``peerToken``) and whose body is a UTF-8 JSON object; the answer is
a response command with RocketMQ's response code, a remark, and a JSON object body (SUCCESS, 0). Our
bodies are JSON where RocketMQ puts some of these fields in headers (906's ``ExchangeHAInfo*Header``):
each side of this channel is ours, and one body form serves every request.

Who may ask (``PeerGuard``): with ``tlsReplicationEnable`` a request is answered iff it came over
TLS with a certificate the cluster CA signed that names a broker of this replica group
(``CertificateGuard``, brokers/tls.py; the client then presents its own broker certificate and sends
no token); without it (development mode) iff its token equals the broker's peer token
(``peerToken``, else the control-plane token: ``TokenGuard``). Otherwise 16 NO_PERMISSION. A
handler's ``PeerRefused`` answers its code, any other handler failure 1 SYSTEM_ERROR, a body that is
no JSON object 29 INVALID_PARAMETER. What the listener does with bad frames, unknown codes and slow
peers is brokers/remoting/server.py's. Every call has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from mqrules import validation
from mqrules.remoting.codes import ResponseCode
from mqrules.remoting.decoder import FrameDecoder
from mqrules.remoting.frame import FrameError, RemotingCommand, encode_frame

from ..tls import HANDSHAKE_TIMEOUT_S, identity_of

log = logging.getLogger("brokers.peers")

MAX_FRAME_BYTES = 64 * 1024 * 1024  # an answer (pre-online's consumer metadata) may exceed a request's 16 MiB
TOKEN_FIELD = "peerToken"
CONNECT_TIMEOUT_S = 3.0
CALL_TIMEOUT_S = 3.0  # RocketMQ's broker-to-broker calls wait 3000 ms
CLOSE_TIMEOUT_S = 2.0
READ_CHUNK = 64 * 1024


class RequestCode(IntEnum):
    """``RequestCode`` numbers (reference §1.11) spoken on the peer channel."""

    GET_CONSUMER_META = 43  # RocketMQ's GET_ALL_CONSUMER_OFFSET: pre-online's reverse metadata sync
    GET_TIMER_CHECK_POINT = 60  # pre-online takes an acting master's timer checkpoint back
    # The serving broker asks which producer groups hold a Telemetry stream here (by group names; the
    # answer counts them), to pick the one replica that relays a transaction check
    # (brokers/transaction_check.py).
    GET_PRODUCER_CONNECTION_LIST = 204
    EXCHANGE_BROKER_HA_INFO = 906
    # Ours: a replica without a base for the consumer-metadata records asks its master for a snapshot
    # record (brokers/metalog.py).
    WANT_CONSUMER_META_SNAPSHOT = 10043
    # Ours: pre-online takes back the transactions an acting master resolved (brokers/transaction.py).
    GET_TRANSACTION_RESOLUTIONS = 10060
    # Ours: the serving broker hands a replica the transaction checks it is to relay to its producers
    # (RocketMQ's CHECK_TRANSACTION_STATE, 39, goes to the producer itself).
    RELAY_TRANSACTION_CHECKS = 10039


class PeerError(RuntimeError):
    """A call that got no SUCCESS answer: ``code`` is the peer's response code, or None when there was
    no answer at all (refused connection, timeout, closed, garbled)."""

    def __init__(self, addr: str, remark: str, code: int | None = None):
        super().__init__(f"peer {addr}: {remark}" if code is None else f"peer {addr}: {code} {_code_name(code)}: {remark}")
        self.addr, self.remark, self.code = addr, remark, code


class PeerTimeout(PeerError):
    """No answer within the call's timeout (or no connection within the connect timeout)."""


class PeerRefused(Exception):
    """Raised by a handler to answer with ``code`` and ``remark`` instead of a body."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code, self.remark = int(code), remark


Handler = Callable[[dict], Awaitable[dict]]
RemotingHandler = Callable[[RemotingCommand, object], Awaitable[RemotingCommand]]  # the listener's (brokers/remoting)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


# --- serving: a peer request's answer -----------------------------------------------------------


class PeerGuard(Protocol):
    def refusal(self, request: RemotingCommand, connection: object) -> str | None:
        """Why ``request`` is no request of a peer of this group (None: it is)."""


class TokenGuard:
    """Development mode: the shared peer token in the request's ``peerToken`` field."""

    def __init__(self, token: str):
        self._expected = token.encode()

    def refusal(self, request: RemotingCommand, connection: object) -> str | None:
        given = request.ext_fields.get(TOKEN_FIELD, "")
        return None if hmac.compare_digest(given.encode(), self._expected) else "wrong peer token"


class CertificateGuard:
    """tlsReplicationEnable: the connection's client certificate (verified against the cluster CA by
    the TLS handshake) names a broker ``<cluster>/<broker_name>/<id>`` of this group."""

    def __init__(self, cluster: str, broker_name: str):
        self.cluster, self.broker_name = cluster, broker_name

    def refusal(self, request: RemotingCommand, connection: object) -> str | None:
        peer = identity_of(getattr(connection, "peer_certificate", None))
        if peer is None:
            return "a peer request needs TLS with a broker certificate of the cluster CA"
        if (peer.cluster, peer.broker_name) != (self.cluster, self.broker_name):
            return f"broker {peer} is not of {self.cluster}/{self.broker_name}"
        return None


def peer_guard(cluster: str, broker_name: str, tls_replication: bool, token: str) -> PeerGuard:
    return CertificateGuard(cluster, broker_name) if tls_replication else TokenGuard(token)


def peer_handler(guard: PeerGuard | str, handler: Handler) -> RemotingHandler:
    """The remoting listener's handler (brokers/remoting/server.py) for a peer request served by
    ``await handler(body)``: the caller checked (``guard``; a string: the peer token), the JSON body
    read, the answer or refusal written."""
    if isinstance(guard, str):
        guard = TokenGuard(guard)

    async def answer(request: RemotingCommand, connection: object) -> RemotingCommand:
        if (refusal := guard.refusal(request, connection)) is not None:
            log.warning("peer request code %d refused: %s", request.code, refusal)
            return request.response(ResponseCode.NO_PERMISSION, refusal)
        try:
            body = _json_object(request.body) if request.body else {}
        except ValueError as exc:
            return request.response(ResponseCode.INVALID_PARAMETER, f"malformed body: {exc}")
        try:
            result = await handler(body)
        except PeerRefused as exc:
            return request.response(exc.code, exc.remark)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("peer request code %d failed", request.code)
            return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        try:
            data = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            log.error("peer request code %d: the handler's answer is no JSON (%s)", request.code, exc)
            return request.response(ResponseCode.SYSTEM_ERROR, f"answer not encodable: {exc}")
        if not isinstance(result, dict):
            log.error("peer request code %d: the handler answered %s, not a dict", request.code, type(result).__name__)
            return request.response(ResponseCode.SYSTEM_ERROR, "the handler answered no JSON object")
        return request.response(ResponseCode.SUCCESS, body=data)

    return answer


def peer_handlers(
    guard: PeerGuard | str, handlers: Mapping[int, Handler]
) -> dict[int, Callable[[RemotingCommand, object], Awaitable[RemotingCommand]]]:
    return {int(code): peer_handler(guard, handler) for code, handler in handlers.items()}


def _json_object(data: bytes) -> dict:
    try:
        message = json.loads(data.decode(), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not UTF-8 JSON ({exc})") from None
    if not isinstance(message, dict):
        raise ValueError("a body must be a JSON object")
    return message


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


# --- client ------------------------------------------------------------------------------------------


def split_addr(addr: str) -> tuple[str, int]:
    if validation.addr(addr) is not None:
        raise ValueError(f"peer address {addr!r}: {validation.addr(addr)}")
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


class PeerClient:
    """Calls other brokers' peer channels, one connection per call (calls are rare: pre-online,
    min-broker changes, a transaction check run). ``tls``: mutual TLS with this broker's certificate
    (tlsReplicationEnable), and then no token is sent."""

    def __init__(
        self,
        token: str,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        tls: ssl.SSLContext | None = None,
    ):
        self.token = token
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._seq = itertools.count(1)

    async def call(self, addr: str, code: int, body: dict | None = None, timeout: float = CALL_TIMEOUT_S) -> dict:
        """The body of the peer's SUCCESS answer; PeerError (PeerTimeout) otherwise."""
        try:
            host, port = split_addr(addr)
        except ValueError as exc:
            raise PeerError(addr, str(exc)) from None
        seq = next(self._seq)
        data = json.dumps(body or {}, separators=(",", ":"), allow_nan=False).encode()
        fields = {} if self.tls is not None else {TOKEN_FIELD: self.token}
        request = encode_frame(RemotingCommand(code=int(code), opaque=seq, ext_fields=fields, body=data))
        tls = {"ssl": self.tls, "server_hostname": host, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT_S} if self.tls else {}
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, **tls), self.connect_timeout_s)
        except TimeoutError:
            raise PeerTimeout(addr, f"no connection within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise PeerError(addr, f"cannot connect ({exc.strerror or exc})") from None
        try:
            answer = await asyncio.wait_for(self._exchange(reader, writer, request, seq), timeout)
        except TimeoutError:
            raise PeerTimeout(addr, f"request code {int(code)}: no answer within {timeout:g} s") from None
        except (asyncio.IncompleteReadError, EOFError):
            raise PeerError(addr, f"request code {int(code)}: the connection closed before the answer") from None
        except FrameError as exc:
            raise PeerError(addr, f"request code {int(code)}: {exc}") from None
        except OSError as exc:
            raise PeerError(addr, f"request code {int(code)}: {exc.strerror or exc}") from None
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)
        return _success_body(addr, answer)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, seq: int
    ) -> RemotingCommand:
        writer.write(request)
        await writer.drain()
        decoder = FrameDecoder(self.max_frame_bytes)
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                raise EOFError
            decoder.feed(data)
            for command in decoder.commands():
                if command.is_response and command.opaque == seq:
                    return command


def _success_body(addr: str, answer: RemotingCommand) -> dict:
    if answer.code != ResponseCode.SUCCESS:
        raise PeerError(addr, answer.remark or "", answer.code)
    try:
        return _json_object(answer.body) if answer.body else {}
    except ValueError as exc:
        raise PeerError(addr, f"a garbled answer: {exc}") from None


# --- EXCHANGE_BROKER_HA_INFO (906) body (pure) --------------------------------------------------------


@dataclass(frozen=True)
class HaInfo:
    """``ExchangeHAInfoRequestHeader`` / ``...ResponseHeader``: the master's HA address (None: it has
    none, the slave starts without waiting for a handshake, reference §5.3 step 4), its flush offset,
    and its remoting address."""

    master_ha_addr: str | None
    master_flush_offset: int
    master_addr: str | None


def ha_info(ha_server_addr: str | None, master_flush_offset: int, master_addr: str | None) -> dict:
    """The body of 906; refuses what :func:`parse_ha_info` would refuse."""
    body = {"masterHaAddress": ha_server_addr, "masterFlushOffset": master_flush_offset, "masterAddress": master_addr}
    parse_ha_info(body)
    return body


_OFFSET = validation.integer(0, validation.MAX_ID)


def parse_ha_info(body: Mapping) -> HaInfo:
    """906's body; ValueError naming each bad field. Absent or null addresses are None; an absent
    offset is 0."""
    problems = []
    for key in ("masterHaAddress", "masterAddress"):
        value = body.get(key)
        if value is not None and (message := validation.addr(value)) is not None:
            problems.append(f"{key}: {message}")
    offset = body.get("masterFlushOffset", 0)
    offset = 0 if offset is None else offset
    if (message := _OFFSET(offset)) is not None:
        problems.append(f"masterFlushOffset: {message}")
    if problems:
        raise ValueError("; ".join(problems))
    return HaInfo(body.get("masterHaAddress"), offset, body.get("masterAddress"))
