"""The peer channel between brokers of one replica group (brokers/control/peers.py) over real TCP
sockets on 127.0.0.1, on the broker's remoting listener (brokers/remoting/server.py): round trips as
real remoting frames, the peer token, RocketMQ's response codes for refusals, bad frames and slow peers
that never take the server down, and 906's body (reference §5.3)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from brokers.config import BrokerConfig
from brokers.control.peers import (
    TOKEN_FIELD,
    HaInfo,
    PeerClient,
    PeerError,
    PeerRefused,
    PeerTimeout,
    RequestCode,
    ResponseCode,
    ha_info,
    parse_ha_info,
    peer_handlers,
)
from brokers.remoting.server import RemotingServer
from mqrules.remoting.decoder import FrameDecoder
from mqrules.remoting.frame import RemotingCommand, SerializeType, encode_frame
from testkit.ports import free_port

pytestmark = pytest.mark.unit

# RocketMQ codes this broker does not serve on its peer channel: requests that must be refused.
GET_BROKER_MEMBER_GROUP, NOTIFY_MIN_BROKER_ID_CHANGE = 901, 905

TOKEN = "rmq_group_token"
HA = RequestCode.EXCHANGE_BROKER_HA_INFO


def run(scenario) -> None:
    """Run a scenario; one that hangs fails instead of waiting for pytest's timeout."""

    async def bounded():
        await asyncio.wait_for(scenario, 30)

    asyncio.run(bounded())


class Peer:
    """A listener with a few peer handlers, and a record of the calls they got."""

    def __init__(self, **server_kw):
        self.server = RemotingServer("127.0.0.1", free_port(), **server_kw)
        self.calls: list[tuple[str, dict]] = []
        handlers = {
            HA: self.exchange,
            RequestCode.GET_CONSUMER_META: self.fail,
            NOTIFY_MIN_BROKER_ID_CHANGE: self.refuse,
            1: self.slow,
        }
        self.server.handle_all(peer_handlers(TOKEN, handlers))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def exchange(self, body: dict) -> dict:
        self.calls.append(("exchange", body))
        return ha_info("127.0.0.1:10912", 4096, "127.0.0.1:10911")

    async def fail(self, body: dict) -> dict:
        self.calls.append(("fail", body))
        raise RuntimeError("the offset table is not loaded")

    async def refuse(self, body: dict) -> dict:
        self.calls.append(("refuse", body))
        raise PeerRefused(ResponseCode.SYSTEM_BUSY, "pre-online in progress")

    async def slow(self, body: dict) -> dict:
        await asyncio.sleep(body.get("sleep", 0))
        return {"slept": body.get("sleep", 0)}

    async def __aenter__(self) -> Peer:
        await self.server.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.stop()


class Raw:
    """A hand-driven connection: frames as bytes, answers as commands (or None once the server closed)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()

    @classmethod
    async def connect(cls, addr: str) -> Raw:
        host, port = addr.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, command: RemotingCommand) -> RemotingCommand | None:
        await self.send(encode_frame(command))
        return await self.answer()

    async def answer(self) -> RemotingCommand | None:
        while (command := self.decoder.next_command()) is None:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), 10)
            except ConnectionError:
                return None
            if not data:
                return None
            self.decoder.feed(data)
        return command

    async def closed_by_server(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 10) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


def request(code: int = HA, token: str = TOKEN, opaque: int = 7, body: bytes = b"{}", **kw) -> RemotingCommand:
    return RemotingCommand(code=int(code), opaque=opaque, ext_fields={TOKEN_FIELD: token}, body=body, **kw)


def body_of(command: RemotingCommand) -> dict:
    return json.loads(command.body)


# --- round trips and refusals ------------------------------------------------------------------------


def test_a_round_trip_returns_the_handlers_body():
    async def scenario():
        async with Peer() as peer:
            body = await PeerClient(TOKEN).call(peer.addr, HA, {"asking": "ha info"})
            assert parse_ha_info(body) == HaInfo("127.0.0.1:10912", 4096, "127.0.0.1:10911")
            assert peer.calls == [("exchange", {"asking": "ha info"})]

    run(scenario())


@pytest.mark.parametrize("serialization", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_request_is_a_remoting_frame_and_is_answered_in_its_serialization(serialization):
    async def scenario():
        async with Peer() as peer:
            raw = await Raw.connect(peer.addr)
            answer = await raw.request(request(opaque=41, serialize_type=serialization))
            assert (answer.code, answer.opaque, answer.is_response, answer.serialize_type) == (0, 41, True, serialization)
            assert body_of(answer)["masterFlushOffset"] == 4096
            raw.close()

    run(scenario())


def test_the_token_comes_from_the_broker_config():
    config = BrokerConfig(brokerIP1="127.0.0.1", listenPort=free_port(), controlPlaneToken="rmq_cp", peerToken="")

    async def ok(body):
        return {"ok": True}

    async def scenario():
        server = RemotingServer(config.brokerIP1, config.listenPort)
        server.handle_all(peer_handlers(config.peer_token, {HA: ok}))
        await server.start()
        try:
            assert await PeerClient("rmq_cp").call(config.broker_addr, HA) == {"ok": True}
        finally:
            await server.stop()

    run(scenario())


@pytest.mark.parametrize(
    "code, token, answer, remark, handled",
    [
        pytest.param(
            HA, "rmq_wrong", ResponseCode.NO_PERMISSION, "wrong peer token", [], id="wrong token: 16, handler not called"
        ),
        pytest.param(HA, "", ResponseCode.NO_PERMISSION, "wrong peer token", [], id="empty token: 16"),
        pytest.param(GET_BROKER_MEMBER_GROUP, TOKEN, 3, "request type 901 not supported", [], id="unknown code: 3"),
        pytest.param(
            RequestCode.GET_CONSUMER_META,
            TOKEN,
            ResponseCode.SYSTEM_ERROR,
            "RuntimeError: the offset table is not loaded",
            ["fail"],
            id="handler exception: 1 with its message",
        ),
        pytest.param(
            NOTIFY_MIN_BROKER_ID_CHANGE,
            TOKEN,
            ResponseCode.SYSTEM_BUSY,
            "pre-online in progress",
            ["refuse"],
            id="PeerRefused: its code and remark",
        ),
    ],
)
def test_refusals_answer_rocketmq_codes(code, token, answer, remark, handled, caplog):
    async def scenario():
        async with Peer() as peer:
            with pytest.raises(PeerError) as e:
                await PeerClient(token).call(peer.addr, code, {"x": 1})
            assert (e.value.code, e.value.remark) == (answer, remark)
            assert [name for name, _ in peer.calls] == handled

    with caplog.at_level(logging.INFO, logger="brokers.peers"):
        run(scenario())
    if answer == ResponseCode.NO_PERMISSION:
        refusals = [r for r in caplog.records if "refused" in r.getMessage()]
        assert len(refusals) == 1 and "wrong peer token" in refusals[0].getMessage()
        assert TOKEN not in caplog.text and (not token or token not in caplog.text)  # no token is logged


def test_after_a_handler_exception_the_connection_still_answers():
    async def scenario():
        async with Peer() as peer:
            raw = await Raw.connect(peer.addr)
            failed = await raw.request(request(RequestCode.GET_CONSUMER_META, opaque=1))
            assert (failed.code, failed.opaque) == (ResponseCode.SYSTEM_ERROR, 1)
            ok = await raw.request(request(HA, opaque=2))
            assert (ok.code, ok.opaque, body_of(ok)["masterFlushOffset"]) == (0, 2, 4096)
            raw.close()

    run(scenario())


# --- bad frames and slow peers -----------------------------------------------------------------------

BAD_BODIES = [
    pytest.param(b"{not json", id="not JSON"),
    pytest.param(b"\xff\xfe", id="not UTF-8"),
    pytest.param(b"[1, 2]", id="not an object"),
    pytest.param(b'{"x": NaN}', id="NaN"),
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_malformed_body_is_answered_29_and_the_connection_stays_usable(body):
    async def scenario():
        async with Peer() as peer:
            raw = await Raw.connect(peer.addr)
            bad = await raw.request(request(opaque=5, body=body))
            assert (bad.code, bad.opaque) == (ResponseCode.INVALID_PARAMETER, 5)
            assert bad.remark.startswith("malformed body")
            ok = await raw.request(request(opaque=8, body=b""))  # no body: an empty object
            assert (ok.code, ok.opaque) == (0, 8)
            assert peer.calls == [("exchange", {})]
            raw.close()

    run(scenario())


@pytest.mark.parametrize(
    "data",
    [
        pytest.param((2**31 - 1).to_bytes(4, "big") + b"x" * 100, id="a length over the limit"),
        pytest.param((20).to_bytes(4, "big") + b'{"code":906,"seq":1}', id="the old JSON peer frame"),
        pytest.param((8).to_bytes(4, "big") + b"\x00\x00\x00\x09{}{}", id="a header longer than its frame"),
    ],
)
def test_bytes_that_are_no_frame_close_that_connection_while_others_are_served(data):
    async def scenario():
        async with Peer(max_frame_length=1024) as peer:
            other = await Raw.connect(peer.addr)
            raw = await Raw.connect(peer.addr)
            await raw.send(data)
            assert await raw.closed_by_server()
            answer = await other.request(request(opaque=3))
            assert (answer.code, answer.opaque) == (0, 3)
            assert await PeerClient(TOKEN).call(peer.addr, HA) == ha_info("127.0.0.1:10912", 4096, "127.0.0.1:10911")
            other.close()

    run(scenario())


def test_the_client_times_out_and_the_server_keeps_serving():
    async def scenario():
        async with Peer() as peer:
            client = PeerClient(TOKEN)
            with pytest.raises(PeerTimeout, match="no answer within 0.2 s"):
                await client.call(peer.addr, 1, {"sleep": 2}, timeout=0.2)
            assert await client.call(peer.addr, 1, {"sleep": 0}, timeout=2) == {"slept": 0}

    run(scenario())


def test_a_slow_request_holds_up_no_other_request_of_its_connection():
    async def scenario():
        async with Peer() as peer:
            raw = await Raw.connect(peer.addr)
            await raw.send(encode_frame(request(1, opaque=1, body=b'{"sleep": 1}')))
            fast = await raw.request(request(HA, opaque=2))
            assert fast.opaque == 2  # answered first
            slow = await raw.answer()
            assert (slow.opaque, body_of(slow)) == (1, {"slept": 1})
            raw.close()

    run(scenario())


def test_the_client_names_a_peer_nobody_listens_on_and_a_bad_address():
    async def scenario():
        with pytest.raises(PeerError, match="cannot connect") as e:
            await PeerClient(TOKEN).call(f"127.0.0.1:{free_port()}", HA)
        assert e.value.code is None
        with pytest.raises(PeerError, match="must be host:port") as e:
            await PeerClient(TOKEN).call("nohost", HA)

    run(scenario())


def test_the_server_closes_idle_and_stalled_connections():
    async def scenario():
        async with Peer(idle_timeout_s=0.2) as peer:
            idle = await Raw.connect(peer.addr)
            stalled = await Raw.connect(peer.addr)
            await stalled.send(encode_frame(request())[:9])  # part of a frame, then nothing
            assert await idle.closed_by_server() and await stalled.closed_by_server()
            assert await PeerClient(TOKEN).call(peer.addr, HA)

    run(scenario())


def test_stop_closes_every_connection():
    async def scenario():
        peer = await Peer().__aenter__()
        raws = [await Raw.connect(peer.addr) for _ in range(3)]
        assert (await raws[0].request(request())).code == 0
        await asyncio.sleep(0.05)
        assert peer.server.connections == 3
        await peer.server.stop()
        assert peer.server.connections == 0
        for raw in raws:
            assert await raw.closed_by_server()
        with pytest.raises(PeerError, match="cannot connect"):
            await PeerClient(TOKEN).call(peer.addr, HA)

    run(scenario())


def test_a_code_has_one_handler():
    server = RemotingServer("127.0.0.1", 0)

    async def one(request, connection):
        return None

    async def other(request, connection):
        return None

    server.handle(HA, one)
    server.handle(HA, one)  # the same again: harmless
    with pytest.raises(ValueError, match="already handled"):
        server.handle(HA, other)


# --- EXCHANGE_BROKER_HA_INFO's body ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, parsed",
    [
        pytest.param(
            {"masterHaAddress": "10.0.0.1:10912", "masterFlushOffset": 1 << 40, "masterAddress": "10.0.0.1:10911"},
            HaInfo("10.0.0.1:10912", 1 << 40, "10.0.0.1:10911"),
            id="all fields",
        ),
        pytest.param({"masterHaAddress": None, "masterFlushOffset": 0}, HaInfo(None, 0, None), id="a master without HA address"),
        pytest.param({}, HaInfo(None, 0, None), id="a retrieve request: empty"),
    ],
)
def test_ha_info_parses(body, parsed):
    assert parse_ha_info(body) == parsed


@pytest.mark.parametrize(
    "body, problem",
    [
        pytest.param({"masterHaAddress": "10.0.0.1"}, "masterHaAddress: must be host:port", id="HA address without port"),
        pytest.param({"masterHaAddress": "h:70000"}, "masterHaAddress: must be host:port", id="port out of range"),
        pytest.param({"masterHaAddress": 10912}, "masterHaAddress: must be host:port", id="HA address a number"),
        pytest.param({"masterAddress": "x"}, "masterAddress: must be host:port", id="master address"),
        pytest.param({"masterFlushOffset": -1}, "masterFlushOffset: must be an integer from 0", id="negative offset"),
        pytest.param({"masterFlushOffset": "12"}, "masterFlushOffset: must be an integer", id="offset as text"),
        pytest.param({"masterFlushOffset": True}, "masterFlushOffset: must be an integer", id="offset a boolean"),
        pytest.param({"masterFlushOffset": 2**63}, "masterFlushOffset: must be an integer", id="offset over a Java long"),
    ],
)
def test_ha_info_refuses_with_the_field_named(body, problem):
    with pytest.raises(ValueError, match=problem):
        parse_ha_info(body)


def test_ha_info_builds_what_it_parses_and_refuses_the_same():
    body = ha_info("10.0.0.1:10912", 99, "10.0.0.1:10911")
    assert body == {"masterHaAddress": "10.0.0.1:10912", "masterFlushOffset": 99, "masterAddress": "10.0.0.1:10911"}
    assert parse_ha_info(json.loads(json.dumps(body))) == HaInfo("10.0.0.1:10912", 99, "10.0.0.1:10911")
    with pytest.raises(ValueError, match="masterFlushOffset"):
        ha_info("10.0.0.1:10912", -5, None)
