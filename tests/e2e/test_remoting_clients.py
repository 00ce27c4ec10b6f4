"""The two remoting test clients (issue 36 item 4), installed by ``make doctor``, against our nameserver's
remoting endpoint (``manage.py serve_remoting``), before any broker speaks remoting: each client takes
its routes from our nameserver and goes to the broker they name, and a topic without a route ends in a
clear failure event, never a hang.

The broker here is a :class:`RecordingBroker`: it records every frame it is sent, accepts heartbeats
and unregistrations, names no consumer of any group, and refuses everything else (sends included)
with 3 REQUEST_CODE_NOT_SUPPORTED, so what each client sends first is seen (the codes, serialization
and language that docs/remoting-clients.md lists). The produce / consume tests against real brokers
are in test_remoting_e2e.py. A client that is not installed fails these tests (RemotingClientMissing:
"run make doctor").
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from chaos.remoting_clients import remoting_client
from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.decoder import FrameDecoder
from mqrules.remoting.frame import LanguageCode, RemotingCommand, SerializeType, encode_frame
from testkit.controlplane import remoting_nameserver as served_remoting_nameserver
from testkit.procs import Process
from tests.e2e.test_broker_membership import wait_for
from tests.nameserver.helpers import NS, register_body
from tests.procs import ARTIFACTS, child_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

ROUTED = "RemotingRouted"  # 4 queues on the recording broker
UNROUTED = "RemotingNowhere"  # no broker serves it
CLIENTS = ("cpp", "node")
SEND_CODE = {"cpp": RequestCode.SEND_MESSAGE, "node": RequestCode.SEND_MESSAGE_V2}
LANGUAGE = {"cpp": LanguageCode.CPP, "node": LanguageCode.JAVA}  # ali-ons says JAVA
NOT_A_BROKER = "a test's recording listener, not a broker"
HEARTBEAT_GROUPS = {kind: f"{kind}-heartbeat" for kind in CLIENTS}


class RecordingBroker:
    """A TCP listener on 127.0.0.1 that decodes every frame it is sent and answers each request in its
    serialization: what lets a client start and shut down (a listener that answered nothing would hold
    both on the client's timeouts; ali-ons' consumer does not start when 38 fails), else refused."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self.commands: list[RemotingCommand] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="recording-broker", daemon=True)]
        self._threads[0].start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            reader = threading.Thread(target=self._serve, args=(conn,), name="recording-broker-conn", daemon=True)
            self._threads.append(reader)
            reader.start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        conn.settimeout(0.2)
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                decoder.feed(data)
                commands = list(decoder.commands())
                with self._lock:
                    self.commands.extend(commands)
                for c in commands:
                    if not (c.is_response or c.is_oneway):
                        conn.sendall(encode_frame(self.answer(c)))

    @staticmethod
    def answer(request: RemotingCommand) -> RemotingCommand:
        if request.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return request.response(ResponseCode.SUCCESS)
        if request.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            return request.response(ResponseCode.SUCCESS, body=b'{"consumerIdList":[]}')
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, NOT_A_BROKER)

    def received(self, code: int) -> list[RemotingCommand]:
        with self._lock:
            return [c for c in self.commands if c.code == code and not c.is_response]

    def stop(self) -> None:
        self._stop.set()
        self._server.close()
        for t in self._threads:
            t.join(5)


def remoting_nameserver() -> AbstractContextManager[str]:
    """``manage.py serve_remoting`` on the test database (what clients call namesrvAddr); yields its address."""
    return served_remoting_nameserver(child_env(), ARTIFACTS)


@pytest.fixture
def routes(api) -> Iterator[tuple[str, RecordingBroker]]:
    """Our nameserver's remoting address, with ROUTED on a recording broker: (namesrv, broker)."""
    broker = RecordingBroker()
    try:
        # With the consumer groups' retry topics, which a broker creates at a group's first heartbeat
        # (Java's ClientManageProcessor) and both clients ask a route for.
        names = (ROUTED, *(f"%RETRY%{group}" for group in HEARTBEAT_GROUPS.values()))
        topics = {t: {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for t in names}
        r = api.post(f"{NS}/brokers/register", register_body(0, broker.addr, topics=topics, timeout=300_000), format="json")
        assert r.status_code == 200, r.content
        with remoting_nameserver() as namesrv:
            yield namesrv, broker
    finally:
        broker.stop()


def client(kind: str, role: str, tmp_path: Path, namesrv: str, topic: str, *options: str):
    """One driver process of ``kind`` (cpp: PyPI rocketmq, node: ali-ons), stopped on the way out."""
    return remoting_client(kind, role, f"{kind}-{role}-{topic}", tmp_path, namesrv, topic, *options)


def alive_and(process: Process, predicate) -> bool:
    return process.check_alive() and predicate()


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_producer_sends_to_the_broker_our_nameserver_routes_it_to(routes, tmp_path, kind):
    """The route comes from our endpoint (code 105 answered with standard JSON both clients read); the
    first request on the broker named in it is the client's send, in JSON, to the routed topic."""
    namesrv, broker = routes
    options = ("--count", "1", "--timeout-ms", "1000", "--group", f"{kind}-routed")
    with client(kind, "produce", tmp_path, namesrv, ROUTED, *options) as (proc, events):
        wait_for(lambda: alive_and(proc, lambda: broker.received(SEND_CODE[kind])), 30, "a send on the routed broker")
        wait_for(lambda: alive_and(proc, lambda: events.of("ack", "fail")), 30, "the send's outcome")
    send = broker.received(SEND_CODE[kind])[0]
    assert (send.serialize_type, send.language) == (SerializeType.JSON, LANGUAGE[kind])
    topic_field = "topic" if kind == "cpp" else "b"
    assert send.ext_fields[topic_field] == ROUTED
    assert {"AccessKey", "OnsChannel", "Signature"} <= send.ext_fields.keys()  # always signed (issue 36)
    assert events.of("ack") == []  # refused
    assert [e["kind"] for e in events.of("started", "stopped")] == ["started", "stopped"]


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_producer_fails_at_once_on_a_topic_without_route(routes, tmp_path, kind):
    namesrv, broker = routes
    with client(kind, "produce", tmp_path, namesrv, UNROUTED, "--count", "3", "--interval-ms", "50") as (proc, events):
        wait_for(lambda: alive_and(proc, lambda: len(events.of("fail")) == 3), 30, "three failed sends")
    fails = events.of("fail")
    if kind == "cpp":
        assert all("No route info of this topic" in f["error"] for f in fails), fails[0]
    else:
        assert {f["code"] for f in fails} == {17}, fails[0]  # TOPIC_NOT_EXIST from our nameserver
    assert all(f["t"] - f["sent"] < 5 for f in fails), "a send without route waited"
    assert events.of("ack") == [] and broker.commands == []
    assert [e["kind"] for e in events.of("started", "stopped")] == ["started", "stopped"]


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_push_consumer_reports_a_topic_without_route(routes, tmp_path, kind):
    """The C++ push consumer itself says nothing (its driver asks the library's route lookup, see
    clients/remoting-py/client.py ``wait_for_route``); ali-ons reports code 17 from its route poll."""
    namesrv, _ = routes
    with client(kind, "consume", tmp_path, namesrv, UNROUTED, "--group", f"{kind}-nowhere") as (proc, events):
        wait_for(lambda: alive_and(proc, lambda: events.of("route_fail")), 30, "a route failure")
    assert events.of("delivery", "route_ok") == []
    if kind == "node":
        assert {e["code"] for e in events.of("route_fail")} == {17}
    assert [e["kind"] for e in events.of("started", "stopped")] == ["started", "stopped"]


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_push_consumer_heartbeats_to_the_routed_broker(routes, tmp_path, kind):
    """With a route, each push consumer finds the broker and sends it HEART_BEAT (34) first, naming its
    group in the body's consumerDataSet (C++: enums as ordinals; ali-ons: as names)."""
    namesrv, broker = routes
    group = HEARTBEAT_GROUPS[kind]

    def heartbeat_of_group() -> bool:
        return any(group in c.body.decode(errors="replace") for c in broker.received(RequestCode.HEART_BEAT))

    def heard_and_routed() -> bool:  # (the C++ driver's route check may answer after the heartbeat)
        return heartbeat_of_group() and (kind != "cpp" or bool(events.of("route_ok", "route_fail")))

    with client(kind, "consume", tmp_path, namesrv, ROUTED, "--group", group) as (proc, events):
        wait_for(lambda: alive_and(proc, heard_and_routed), 30, "the consumer's heartbeat on the routed broker")
    assert events.of("route_fail") == []
    if kind == "cpp":
        assert [e["queues"] for e in events.of("route_ok")] == [4]
    assert [e["kind"] for e in events.of("started", "stopped")] == ["started", "stopped"]
