"""The peer channel: brokers of one replica group talking to each other on their remoting port
(``brokerIP1:listenPort``, RocketMQ's 10911), for ``EXCHANGE_BROKER_HA_INFO`` (906), the metadata
pulls of pre-online (reference §5.1, §5.3) and the relay of transaction checks.

Not RocketMQ's remoting codec: a small request/response protocol of our own, with RocketMQ's request
and response codes. A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON:

* request ``{"code": int, "token": str, "seq": int, "body": {...}}``
* response ``{"code": int, "remark": str, "seq": int | null, "body": {...}}`` (0 SUCCESS; ``seq`` is
  the request's, null when it could not be read)

A request is answered iff its token equals the broker's peer token (``peerToken``, else the
control-plane token); otherwise 16 NO_PERMISSION. Handlers are registered by request code; an unknown
code is answered 3 REQUEST_CODE_NOT_SUPPORTED, a handler's ``PeerRefused`` with its code, any other
handler failure 1 SYSTEM_ERROR. A malformed frame is answered 29 INVALID_PARAMETER and the connection
stays usable; a frame over ``MAX_FRAME_BYTES`` is answered and the connection closed (its body is never
read). Every socket operation has a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from mqrules import validation

from ..config import BrokerConfig
from ..tasks import cancel_and_wait

log = logging.getLogger("brokers.peers")

MAX_FRAME_BYTES = 64 * 1024 * 1024
HEADER = 4
CONNECT_TIMEOUT_S = 3.0
CALL_TIMEOUT_S = 3.0  # RocketMQ's broker-to-broker calls wait 3000 ms
IDLE_TIMEOUT_S = 120.0  # the server closes a connection silent this long (RocketMQ's serverChannelMaxIdleTimeSeconds)
BODY_TIMEOUT_S = 10.0  # for the rest of a frame once its length arrived
WRITE_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0


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


class ResponseCode(IntEnum):
    """``ResponseCode`` numbers (reference §1.12) a peer answers with."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    INVALID_PARAMETER = 29


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


class FrameError(ValueError):
    """A frame this side cannot use; ``seq`` when the request's could be read."""

    def __init__(self, message: str, seq: int | None = None):
        super().__init__(message)
        self.seq = seq


class FrameTooLarge(FrameError):
    pass


Handler = Callable[[dict], Awaitable[dict]]


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


# --- frames (pure) -----------------------------------------------------------------------------------


def encode(message: Mapping) -> bytes:
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    return len(data).to_bytes(HEADER, "big") + data


def frame_length(header: bytes, max_bytes: int = MAX_FRAME_BYTES) -> int:
    length = int.from_bytes(header, "big")
    if length > max_bytes:
        raise FrameTooLarge(f"frame of {length} bytes is over the limit of {max_bytes}")
    return length


@dataclass(frozen=True)
class Request:
    code: int
    token: str
    seq: int
    body: dict


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_object(data: bytes) -> dict:
    try:
        message = json.loads(data.decode(), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"not UTF-8 JSON ({exc})") from None
    if not isinstance(message, dict):
        raise FrameError("a frame must be a JSON object")
    return message


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def decode_request(data: bytes) -> Request:
    message = _json_object(data)
    seq = message.get("seq")
    seq = seq if _is_int(seq) else None
    problems = []
    if seq is None:
        problems.append("seq must be an integer")
    if not _is_int(message.get("code")):
        problems.append("code must be an integer")
    if not isinstance(message.get("token"), str):
        problems.append("token must be a string")
    body = message.get("body", {})
    body = {} if body is None else body
    if not isinstance(body, dict):
        problems.append("body must be a JSON object")
    if problems:
        raise FrameError("; ".join(problems), seq)
    return Request(message["code"], message["token"], seq, body)  # type: ignore[arg-type]


def response(seq: int | None, code: int = ResponseCode.SUCCESS, remark: str = "", body: dict | None = None) -> dict:
    return {"code": int(code), "remark": remark, "seq": seq, "body": body or {}}


# --- server ------------------------------------------------------------------------------------------


class PeerServer:
    """Listens on the broker's remoting address and answers its peers; owns every connection.
    ``handlers``: request code -> ``await handler(body)`` (the SUCCESS body)."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        handlers: Mapping[int, Handler] | None = None,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ):
        self.host, self.port = host, port
        self._token = token.encode()
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = IDLE_TIMEOUT_S
        self.body_timeout_s = BODY_TIMEOUT_S
        self._handlers: dict[int, Handler] = {int(code): handler for code, handler in (handlers or {}).items()}
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}

    @classmethod
    def for_broker(cls, config: BrokerConfig, handlers: Mapping[int, Handler] | None = None) -> PeerServer:
        return cls(config.brokerIP1, config.listenPort, config.peer_token, handlers)

    def handle(self, code: int, handler: Handler) -> None:
        """Answer requests of ``code`` with ``await handler(body)`` too: for a part built after the
        server that brings its own requests (the transaction checks, built with the gRPC service)."""
        current = self._handlers.get(int(code))
        if current is not None and current is not handler:
            raise ValueError(f"request code {int(code)} is already handled by {current.__qualname__}")
        self._handlers[int(code)] = handler

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("peer channel listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._connections.values():
            writer.close()
        await cancel_and_wait(*self._connections)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, peer)
        except asyncio.CancelledError:
            pass  # stopping; ending normally keeps asyncio's stream callback from logging it
        except Exception:
            log.exception("peer connection from %s failed; closing", peer)
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer) -> None:
        while True:
            try:
                header = await asyncio.wait_for(reader.readexactly(HEADER), self.idle_timeout_s)
                length = frame_length(header, self.max_frame_bytes)
                data = await asyncio.wait_for(reader.readexactly(length), self.body_timeout_s)
            except FrameTooLarge as exc:
                log.warning("peer %s sent a frame over the limit (%s); closing", peer, exc)
                await self._send(writer, response(None, ResponseCode.INVALID_PARAMETER, str(exc)), peer)
                return
            except asyncio.IncompleteReadError:
                return  # the peer closed (between frames, or inside one)
            except TimeoutError:
                log.info("peer %s silent (or a frame stalled) past its timeout; closing", peer)
                return
            except ConnectionError:
                return
            if not await self._send(writer, await self.answer(data, peer), peer):
                return

    async def answer(self, data: bytes, peer: object = None) -> dict:
        """The response to one request frame's bytes."""
        try:
            request = decode_request(data)
        except FrameError as exc:
            log.info("peer %s sent a malformed frame: %s", peer, exc)
            return response(exc.seq, ResponseCode.INVALID_PARAMETER, f"malformed frame: {exc}")
        if not hmac.compare_digest(request.token.encode(), self._token):
            log.warning("peer %s: request code %d refused: wrong peer token", peer, request.code)
            return response(request.seq, ResponseCode.NO_PERMISSION, "wrong peer token")
        handler = self._handlers.get(request.code)
        if handler is None:
            return response(request.seq, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {request.code} not supported")
        try:
            body = await handler(request.body)
        except PeerRefused as exc:
            return response(request.seq, exc.code, exc.remark)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("peer %s: request code %d failed", peer, request.code)
            return response(request.seq, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if not isinstance(body, dict):
            log.error("peer request code %d: the handler answered %s, not a dict", request.code, type(body).__name__)
            return response(request.seq, ResponseCode.SYSTEM_ERROR, "the handler answered no JSON object")
        return response(request.seq, body=body)

    async def _send(self, writer: asyncio.StreamWriter, message: dict, peer) -> bool:
        """Whether the answer went out (else the connection is done for)."""
        try:
            data = encode(message)
        except (TypeError, ValueError) as exc:  # a handler's body that is no JSON
            log.error("peer answer not encodable (%s)", exc)
            data = encode(response(message.get("seq"), ResponseCode.SYSTEM_ERROR, f"answer not encodable: {exc}"))
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError) as exc:
            log.info("peer %s does not take its answer (%s); closing", peer, type(exc).__name__)
            return False
        return True


# --- client ------------------------------------------------------------------------------------------


def split_addr(addr: str) -> tuple[str, int]:
    if validation.addr(addr) is not None:
        raise ValueError(f"peer address {addr!r}: {validation.addr(addr)}")
    host, port = addr.rsplit(":", 1)
    return host.strip("[]"), int(port)


class PeerClient:
    """Calls other brokers' peer channels, one connection per call (calls are rare: pre-online,
    min-broker changes, a transaction check run)."""

    def __init__(self, token: str, *, connect_timeout_s: float = CONNECT_TIMEOUT_S, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.token = token
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
        request = encode({"code": int(code), "token": self.token, "seq": seq, "body": body or {}})
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), self.connect_timeout_s)
        except TimeoutError:
            raise PeerTimeout(addr, f"no connection within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise PeerError(addr, f"cannot connect ({exc.strerror or exc})") from None
        try:
            answer = await asyncio.wait_for(self._exchange(reader, writer, request), timeout)
        except TimeoutError:
            raise PeerTimeout(addr, f"request code {int(code)}: no answer within {timeout:g} s") from None
        except asyncio.IncompleteReadError:
            raise PeerError(addr, f"request code {int(code)}: the connection closed before the answer") from None
        except FrameError as exc:
            raise PeerError(addr, f"request code {int(code)}: {exc}") from None
        except OSError as exc:
            raise PeerError(addr, f"request code {int(code)}: {exc.strerror or exc}") from None
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)
        return _success_body(addr, seq, answer)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> dict:
        writer.write(request)
        await writer.drain()
        length = frame_length(await reader.readexactly(HEADER), self.max_frame_bytes)
        return _json_object(await reader.readexactly(length))


def _success_body(addr: str, seq: int, answer: dict) -> dict:
    code, remark, body = answer.get("code"), answer.get("remark"), answer.get("body")
    if not _is_int(code) or answer.get("seq") not in (seq, None):
        raise PeerError(addr, f"a garbled answer: {str(answer)[:200]}")
    if code != ResponseCode.SUCCESS:
        raise PeerError(addr, remark if isinstance(remark, str) else "", code)
    if answer.get("seq") != seq or not isinstance(body, dict):
        raise PeerError(addr, f"a garbled answer: {str(answer)[:200]}")
    return body


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
