"""The nameserver's remoting endpoint (issue 36): RocketMQ's classic TCP protocol, so a 4.x client (or
mqadmin) with ``namesrvAddr`` pointing here gets routes from the same registry, the same rules and the
same cache the REST routes use. Read-only: a remoting client cannot send our API tokens (docs/remoting.md).

Two parts: ``answer`` turns one request into its reply (synchronous, Django: it runs on a worker
thread), and ``RemotingEndpoint`` is the asyncio TCP server that cuts frames, hands each request to a
worker and writes the reply. Its caller may add handlers for codes the nameserver does not own:
``manage.py serve_remoting`` (controlplane/operations) adds the embedded controller's reads, 1005 and
1006, so this app never imports the controller (the siblings contract). Several processes can share
one port (``reuse_port``: SO_REUSEPORT), as the web tier's workers do.

Bad input never gets further than its own connection: bytes that are no frame, or a frame longer than
the limit, close that connection (as Java's ``NettyDecoder`` does); a header without a required field
gets SYSTEM_ERROR naming it; an unknown code REQUEST_CODE_NOT_SUPPORTED; a write NO_PERMISSION
(``core/remoting.py``). Nothing here stores anything.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.db import close_old_connections

from mqrules import validation
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.decoder import MAX_FRAME_LENGTH, FrameDecoder
from mqrules.remoting.frame import FrameError, RemotingCommand, encode_frame
from mqrules.remoting.headers import GET_KV_CONFIG_REQUEST, GET_ROUTE_INFO_REQUEST, HeaderFieldError, parse_header

from . import selectors
from .core.remoting import Disposition, decide

log = logging.getLogger(__name__)

DEFAULT_PORT = 9876  # RocketMQ's namesrv listenPort
IDLE_TIMEOUT_S = 120.0  # NettyServerConfig.serverChannelMaxIdleTimeSeconds: an idle channel is closed
WRITE_TIMEOUT_S = 30.0  # a client that stops reading its replies loses its connection
READ_CHUNK = 64 * 1024
_ECHO = 255  # at most this much of a client's text is echoed in a remark


# --- one request, one reply --------------------------------------------------------------------------


# A request handler the endpoint's caller adds (synchronous: it runs on a worker thread, like ``answer``).
Handler = Callable[[RemotingCommand], RemotingCommand]


def answer(request: RemotingCommand, handlers: Mapping[int, Handler] | None = None) -> RemotingCommand:
    """The reply to one request. Never raises: a failure inside becomes SYSTEM_ERROR with a remark, as
    Java's ``NettyRemotingAbstract`` answers an exception. Database connections are handled as Django
    handles them around an HTTP request. ``handlers``: codes the caller serves besides the nameserver's
    own (the embedded controller's reads, handed in by ``manage.py serve_remoting``; this app never
    imports the controller)."""
    close_old_connections()
    try:
        handler = (handlers or {}).get(request.code)
        if handler is not None:
            return handler(request)
        return _answer(request, frozenset(handlers or ()))
    except HeaderFieldError as exc:  # Java: "the custom field <topic> is null", SYSTEM_ERROR
        return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
    except Exception as exc:
        log.exception("remoting request %s failed", request.code)
        return request.response(ResponseCode.SYSTEM_ERROR, f"internal error: {type(exc).__name__}")
    finally:
        close_old_connections()


def _answer(request: RemotingCommand, served_by_caller: frozenset[int]) -> RemotingCommand:
    verdict = decide(request.code, served_by_caller)
    if verdict.disposition is not Disposition.SERVE:
        assert verdict.code is not None
        return request.response(verdict.code, verdict.remark)
    if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        topic = str(parse_header(GET_ROUTE_INFO_REQUEST, request.ext_fields)["topic"])
        if (problem := validation.name(topic)) is not None:  # the name rule the REST route applies (there: 400)
            return request.response(ResponseCode.INVALID_PARAMETER, f"topic {topic!r:.140}: {problem}")
        body = selectors.topic_route_json(topic)
        if body is None:  # the REST view's answer, ClientRequestProcessor's remark (without its FAQ link)
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")
        return request.response(ResponseCode.SUCCESS, body=body)
    if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
        return request.response(ResponseCode.SUCCESS, body=selectors.cluster_info_json())
    if request.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
        return request.response(ResponseCode.SUCCESS, body=selectors.topic_list_json())
    # GET_KV_CONFIG: no KV config is kept here (orderTopicConf is always null), so nothing is ever found.
    header = parse_header(GET_KV_CONFIG_REQUEST, request.ext_fields)
    return request.response(
        ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header['namespace']:.{_ECHO}} Key: {header['key']:.{_ECHO}}"
    )


# --- the TCP server --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port (tests)
    reuse_port: bool = False  # SO_REUSEPORT: several processes behind one address
    max_frame_length: int = MAX_FRAME_LENGTH
    idle_timeout_s: float = IDLE_TIMEOUT_S
    workers: int = 4  # threads answering requests (the ORM and Redis calls are blocking)


class RemotingEndpoint:
    """One listening socket, one worker pool. ``start`` binds, ``stop`` closes the socket, every open
    connection and the pool. Each connection reads, decodes and answers its requests in order."""

    def __init__(self, config: EndpointConfig, handlers: Mapping[int, Handler] | None = None):
        """``handlers``: request codes the caller serves besides the nameserver's (see ``answer``)."""
        self.config = config
        self.handlers = dict(handlers or {})
        self._server: asyncio.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._connections: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(self.config.workers, thread_name_prefix="ns-remoting")
        self._server = await asyncio.start_server(
            self._connection,
            self.config.host,
            self.config.port,
            reuse_address=True,
            reuse_port=self.config.reuse_port or None,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve_connection(reader, writer)
        except FrameError as exc:
            log.info("remoting client %s sent no frame (%s): closing its connection", peer, exc)
        except (TimeoutError, ConnectionError):
            pass  # idle, or a client that went away or stopped reading
        except Exception:  # a bug here costs this connection, never the server
            log.exception("remoting connection from %s failed: closing it", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        decoder = FrameDecoder(self.config.max_frame_length)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = await asyncio.wait_for(reader.read(READ_CHUNK), self.config.idle_timeout_s)
            if not data:
                return
            decoder.feed(data)
            for request in decoder.commands():  # a FrameError ends the connection
                if request.is_response:
                    continue  # the nameserver asks its clients nothing
                if request.is_oneway:
                    continue  # reads only: a oneway read changes nothing and wants no reply
                reply = await loop.run_in_executor(self._executor, answer, request, self.handlers)
                writer.write(encode_frame(reply))
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


async def serve_until(config: EndpointConfig, stop: asyncio.Event, handlers: Mapping[int, Handler] | None = None) -> None:
    """Serve until ``stop`` is set (the management command's signal handlers set it)."""
    endpoint = RemotingEndpoint(config, handlers)
    await endpoint.start()
    log.info("nameserver remoting endpoint on %s:%s", config.host, endpoint.port)
    try:
        await stop.wait()
    finally:
        await endpoint.stop()
