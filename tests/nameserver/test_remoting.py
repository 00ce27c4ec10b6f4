"""The nameserver's remoting endpoint over a real socket, against real Postgres and Redis: the four reads
answered from the registry the REST routes read (the same bytes), writes refused, bad input closing
only its own connection (issue 36, items 1 and 6)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.decoder import FrameDecoder
from mqrules.remoting.frame import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand, SerializeType, encode_frame
from nameserver.models import BrokerGroup, BrokerMember, TopicQueue
from nameserver.remoting import EndpointConfig, Handler, RemotingEndpoint
from testkit.controlplane import remoting_argv
from testkit.fuzz import remoting_frames
from testkit.ports import free_port

from .helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1, S2 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"
MAX_FRAME = 64 * 1024  # small, so a too-long frame is cheap to announce


class Served:
    """A ``RemotingEndpoint`` on its own event loop thread, on a free 127.0.0.1 port (``handlers``: the
    caller's, as ``serve_remoting`` hands it the controller's)."""

    def __init__(self, handlers: Mapping[int, Handler] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="ns-remoting-test", daemon=True)
        self.thread.start()
        self.endpoint = RemotingEndpoint(EndpointConfig(port=0, max_frame_length=MAX_FRAME, workers=2), handlers)
        asyncio.run_coroutine_threadsafe(self.endpoint.start(), self.loop).result(10)
        self.port = self.endpoint.port

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.endpoint.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    try:
        yield s
    finally:
        s.stop()


def receive(sock: socket.socket, timeout: float = 5.0) -> RemotingCommand | None:
    """The next reply, or None when the server closed the connection."""
    decoder = FrameDecoder()
    sock.settimeout(timeout)
    while (command := decoder.next_command()) is None:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not data:
            return None
        decoder.feed(data)
    return command


def call(sock: socket.socket, command: RemotingCommand) -> RemotingCommand:
    sock.sendall(encode_frame(command))
    reply = receive(sock)
    assert reply is not None, "the server closed the connection"
    assert reply.is_response and reply.opaque == command.opaque
    assert reply.serialize_type is command.serialize_type
    assert all(isinstance(v, str) for v in reply.ext_fields.values())
    return reply


def ask(served: Served, code: int, opaque: int = 7, serialize_type=SerializeType.JSON, **fields: str) -> RemotingCommand:
    with served.connect() as sock:
        return call(sock, RemotingCommand(code, opaque=opaque, ext_fields=fields, serialize_type=serialize_type))


def register(api, *args, **kw) -> None:
    r = api.post(f"{NS}/brokers/register", register_body(*args, **kw), format="json")
    assert r.status_code == 200, r.content


# --- the reads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", list(SerializeType), ids=lambda t: t.name)
def test_route_of_a_registered_topic_is_the_rest_route(api, served, serialize_type):
    register(api, 0, M)
    register(api, 1, S1)
    reply = ask(served, RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=41, serialize_type=serialize_type, topic="TopicA")
    assert (reply.code, reply.remark, reply.flag) == (ResponseCode.SUCCESS, None, RESPONSE_FLAG)
    rest = api.get(f"{NS}/routes/TopicA")
    assert reply.body == rest.content
    route = json.loads(reply.body)
    assert route["queueDatas"] == [
        {"brokerName": "b1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0, "attributes": {}}
    ]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": M, "1": S1}  # standard JSON: quoted ids


def test_route_shows_the_acting_master_as_rest_does(api, served):
    register(api, 0, M)
    register(api, 1, S1)
    register(api, 2, S2)
    assert api.patch(f"{NS}/config", {"supportActingMaster": True}, format="json").status_code == 200
    api.post(f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": M}, format="json")
    reply = ask(served, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="TopicA")
    assert reply.body == api.get(f"{NS}/routes/TopicA").content
    route = json.loads(reply.body)
    assert route["queueDatas"][0]["perm"] == 4
    (bd,) = route["brokerDatas"]
    assert bd["brokerAddrs"] == {"0": S1, "2": S2} and bd["actingMaster"] is True


def test_route_of_an_unknown_topic_is_topic_not_exist(served):
    reply = ask(served, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="NoSuchTopic")
    assert reply.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in reply.remark and reply.body == b""


@pytest.mark.parametrize("topic", ["a b", "x" * 128, "nul\x00"], ids=["space", "too-long", "nul"])
def test_a_topic_breaking_the_name_rule_is_an_invalid_parameter(served, topic):
    reply = ask(served, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
    assert reply.code == ResponseCode.INVALID_PARAMETER and reply.remark.startswith("topic ")


def test_cluster_info_is_rocketmq_cluster_info(api, served):
    register(api, 0, M)
    register(api, 1, S1)
    before = ask(served, RequestCode.GET_BROKER_CLUSTER_INFO)  # cached per registry version
    assert json.loads(before.body)["clusterAddrTable"] == {"c1": ["b1"]}
    register(api, 0, S2, name="b2", cluster="c2", topics={})
    reply = ask(served, RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=SerializeType.ROCKETMQ)
    assert reply.code == ResponseCode.SUCCESS
    assert json.loads(reply.body) == {
        "brokerAddrTable": {
            "b1": {
                "cluster": "c1",
                "brokerName": "b1",
                "brokerAddrs": {"0": M, "1": S1},
                "zoneName": "",
                "enableActingMaster": True,
            },
            "b2": {"cluster": "c2", "brokerName": "b2", "brokerAddrs": {"0": S2}, "zoneName": "", "enableActingMaster": True},
        },
        "clusterAddrTable": {"c1": ["b1"], "c2": ["b2"]},
    }


def test_topic_list_names_every_topic(api, served):
    register(api, 0, M)
    reply = ask(served, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert reply.code == ResponseCode.SUCCESS and json.loads(reply.body) == {"topicList": ["TopicA", "TopicB"]}


def test_kv_config_is_never_found(served):
    reply = ask(served, RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="TopicA")
    assert reply.code == ResponseCode.QUERY_NOT_FOUND
    assert reply.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: TopicA"


# --- what is refused -----------------------------------------------------------------------------------


def test_an_unknown_code_is_not_supported(served):
    reply = ask(served, 4242)
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in reply.remark


@pytest.mark.parametrize(
    "code, fields, named",
    [(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"), (RequestCode.GET_KV_CONFIG, {"namespace": "N"}, "key")],
    ids=["route-without-topic", "kv-without-key"],
)
def test_a_missing_required_field_is_a_system_error_naming_it(served, code, fields, named):
    reply = ask(served, code, **fields)
    assert reply.code == ResponseCode.SYSTEM_ERROR and f"{named} is missing" in reply.remark


@pytest.mark.parametrize(
    "code, endpoint",
    [(103, "/brokers/register"), (17, "/topics"), (216, "DELETE /api/v1/nameserver/topics/"), (100, "no KV config")],
    ids=["REGISTER_BROKER", "UPDATE_AND_CREATE_TOPIC", "DELETE_TOPIC_IN_NAMESRV", "PUT_KV_CONFIG"],
)
def test_a_write_is_refused_naming_the_rest_endpoint_and_stores_nothing(served, code, endpoint):
    reply = ask(served, code, topic="T", clusterName="c1", brokerName="b1", brokerAddr=M, brokerId="0")
    assert reply.code == ResponseCode.NO_PERMISSION and endpoint in reply.remark and "read-only" in reply.remark
    assert not (BrokerGroup.objects.exists() or BrokerMember.objects.exists() or TopicQueue.objects.exists())


def test_a_oneway_request_gets_no_reply(served):
    with served.connect() as sock:
        oneway = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1, flag=ONEWAY_FLAG)
        sock.sendall(encode_frame(oneway))
        # the next request's reply is the first thing to come back
        assert call(sock, RemotingCommand(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, opaque=2)).opaque == 2


def test_requests_on_one_connection_are_answered_in_turn(served):
    with served.connect() as sock:
        for opaque in range(3):
            assert call(
                sock, RemotingCommand(RequestCode.GET_KV_CONFIG, opaque=opaque, ext_fields={"namespace": "n", "key": "k"})
            )


# --- bad bytes -------------------------------------------------------------------------------------


def assert_closed(sock: socket.socket) -> None:
    assert receive(sock) is None


def test_a_too_long_frame_closes_its_connection_and_others_are_served(api, served):
    register(api, 0, M)
    with served.connect() as other, served.connect() as bad:
        bad.sendall((MAX_FRAME + 1).to_bytes(4, "big") + b"\x00" * 16)
        assert_closed(bad)
        reply = call(other, RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=3, ext_fields={"topic": "TopicA"}))
        assert reply.code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    "garbage",
    [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00\x00\x00\x08\x00\x00\x00\x04{no}", b"\x00\x00\x00\x08\x07\x00\x00\x00abcd"],
    ids=["http", "unparsable-json-header", "unknown-serialize-type"],
)
def test_garbage_closes_the_connection(served, garbage):
    with served.connect() as sock:
        sock.sendall(garbage)
        assert_closed(sock)
    assert ask(served, RequestCode.GET_KV_CONFIG, namespace="n", key="k").code == ResponseCode.QUERY_NOT_FOUND


_frames = remoting_frames(
    [101, 105, 106, 206, 103, 0, 9999], ["topic", "namespace", "key", "x"], st.text(max_size=20), st.binary(max_size=32), 3
)


def test_fuzzed_frames_never_break_the_server(served):
    deadline = time.monotonic() + 4.0

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_frames, min_size=1, max_size=3))
    def one_connection(frames):
        if time.monotonic() > deadline:
            return
        with served.connect() as sock:
            sock.sendall(b"".join(frames))
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(3)
            while sock.recv(65536):  # replies, then the server's close
                pass

    one_connection()
    assert ask(served, RequestCode.GET_KV_CONFIG, namespace="n", key="k").code == ResponseCode.QUERY_NOT_FOUND


# --- the process ---------------------------------------------------------------------------------------


def test_two_endpoints_share_one_port_with_reuse_port(served):
    """SO_REUSEPORT, as several ``serve_remoting --reuse-port`` processes use it: a second endpoint
    binds the first one's port, and each closing leaves the other serving."""
    second = RemotingEndpoint(EndpointConfig(port=served.port, reuse_port=True, workers=1))
    with pytest.raises(OSError):  # the first did not ask for reuse_port: no one may share it
        asyncio.run_coroutine_threadsafe(second.start(), served.loop).result(10)
    asyncio.run_coroutine_threadsafe(second.stop(), served.loop).result(10)
    shared = [RemotingEndpoint(EndpointConfig(port=0, reuse_port=True, workers=1))]
    asyncio.run_coroutine_threadsafe(shared[0].start(), served.loop).result(10)
    shared.append(RemotingEndpoint(EndpointConfig(port=shared[0].port, reuse_port=True, workers=1)))
    asyncio.run_coroutine_threadsafe(shared[1].start(), served.loop).result(10)
    for endpoint in shared:
        with socket.create_connection(("127.0.0.1", shared[1].port), timeout=5) as sock:
            request = RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "n", "key": "k"})
            assert call(sock, request).code == ResponseCode.QUERY_NOT_FOUND
        asyncio.run_coroutine_threadsafe(endpoint.stop(), served.loop).result(10)


def test_the_command_serves_and_stops_on_sigterm():
    """``manage.py serve_remoting`` as the launcher starts it: it listens, answers, and SIGTERM ends it
    cleanly (exit 0)."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(remoting_argv(port, reuse_port=True), env=env, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None  # it logs this line once it listens (and handles SIGTERM)
        assert any(b"remoting endpoint on" in line for line in proc.stderr), "the command did not start"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            request = RemotingCommand(RequestCode.GET_KV_CONFIG, ext_fields={"namespace": "n", "key": "k"})
            assert call(sock, request).code == ResponseCode.QUERY_NOT_FOUND
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    assert code == 0
