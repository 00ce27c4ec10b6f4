"""Hostile peers (issue 19, item 5): a broker or a page that sends what no well-behaved peer sends,
sends too much, or reads nothing is answered with a clear code and costs a bounded amount, and no
other peer notices. docs/websocket.md ("Limits") and docs/dashboard.md say what is promised.

Against a real uvicorn, over real sockets, some written by hand (frames no client library sends, a
page that never reads):

* malformed frames: binary, not UTF-8, over the app's size limit, over the server's, a megabyte in a
  field, as the type or as the seq, no seq, JSON that is not an object, an unknown type;
* out of order: a heartbeat before registering, a registration for another cluster's broker set with
  a bound token, an unregister of a broker nobody registered, a reused seq;
* floods: heartbeats and registrations as fast as one socket sends them, while another broker beats;
* a dashboard page that never reads, while another page reads.

"Nothing else affected" is checked the same way each time: a bystander broker on a socket of its own
stays registered and heard (its heartbeats answer ``registered: true``, Redis's last heartbeat for it
moves on), and the registry holds what it held.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from websockets.sync.client import ClientConnection, connect

from controlplane.models import ApiToken
from controlplane.redis import sync_client
from dashboards.live import ALL, publish
from nameserver import liveness
from nameserver.models import BrokerMember
from testkit.procs import wait_until
from tests.dashboards.test_live_e2e import session_cookie
from tests.nameserver.helpers import register_body
from tests.procs import ARTIFACTS, uvicorn_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STALL_S = 2.0  # DASHBOARD_WS_STALL_SECONDS of this module's server (10 s by default)
RATE, BURST = settings.BROKER_WS_FRAMES_PER_SECOND, settings.BROKER_WS_FRAME_BURST  # the defaults, as served
BYSTANDER = register_body(0, "127.0.0.1:10911", name="bystander", topics={})


@pytest.fixture(scope="module")
def server(django_db_setup) -> Iterator[str]:
    with uvicorn_server(DASHBOARD_WS_STALL_SECONDS=str(STALL_S)) as base:
        yield base


def server_log(base: str) -> str:
    port = base.rsplit(":", 1)[1]
    return "".join(p.read_text() for p in ARTIFACTS.glob(f"uvicorn-{port}-*.log"))


# --- peers ------------------------------------------------------------------------------------------


class Broker:
    """A broker's socket (the websockets library): replies of any size, none dropped while unread."""

    def __init__(self, stack: ExitStack, base: str, token: str):
        self.ws: ClientConnection = stack.enter_context(
            connect(
                base.replace("http://", "ws://") + "/ws/broker/",
                additional_headers={"Authorization": f"Bearer {token}", "Origin": base},
                open_timeout=10,
                max_size=None,
                max_queue=None,
            )
        )

    def send(self, kind: str, payload: dict, seq: int) -> None:
        self.ws.send(json.dumps({"type": kind, "seq": seq, "payload": payload}))

    def reply(self) -> tuple[dict, int]:
        """The next frame, and its length on the wire."""
        raw = self.ws.recv(timeout=30)
        return json.loads(raw), len(raw)

    def call(self, kind: str, payload: dict, seq: int = 1) -> dict:
        self.send(kind, payload, seq)
        return self.reply()[0]

    def ping_until_answered(self) -> dict:
        """A ping, again while the socket's frame budget refills."""
        for seq in range(1000, 1010):
            reply = self.call("ping", {}, seq)
            if reply["type"] != "error" or reply["payload"]["code"] != 2:
                return reply
            time.sleep(1 / RATE)
        return reply


class RawSocket:
    """A websocket client written by hand (RFC 6455): frames a library refuses to send, and a peer
    that stops reading with a small receive buffer."""

    def __init__(self, base: str, path: str, headers: dict[str, str], *, receive_buffer: int | None = None):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.socket()
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(30)
        self.sock.connect((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade"]
        lines += [f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers.items())]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        response, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        assert response.startswith(b"HTTP/1.1 101"), response

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed without a close frame")
        return data

    def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self.buffer += self._recv()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def send_frame(self, opcode: int, payload: bytes, *, claimed_length: int | None = None) -> None:
        """A masked frame; ``claimed_length``: the header announces that many bytes (a frame that would
        not fit the server)."""
        n = len(payload) if claimed_length is None else claimed_length
        if n < 126:
            header = bytes([0x80 | opcode, 0x80 | n])
        elif n < 65536:
            header = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def frame(self) -> tuple[int, bytes]:
        """The server's next frame (unmasked, never fragmented here): opcode and payload."""
        first, second = self._take(2)
        n = second & 0x7F
        if n == 126:
            n = int.from_bytes(self._take(2), "big")
        elif n == 127:
            n = int.from_bytes(self._take(8), "big")
        return first & 0x0F, self._take(n)

    def close_code(self) -> tuple[int, int]:
        """Reads up to the close frame: its code, and how many text frames came before it."""
        texts = 0
        while True:
            opcode, payload = self.frame()
            if opcode == 0x8:
                return int.from_bytes(payload[:2], "big"), texts
            texts += opcode == 0x1

    def close(self) -> None:
        self.sock.close()


TEXT, BINARY = 0x1, 0x2


# --- what "nothing else affected" means -------------------------------------------------------------


@pytest.fixture
def token() -> str:
    return ApiToken.issue("hostile-peer", "broker")[1]


@pytest.fixture
def bystander(server, token) -> Iterator[Broker]:
    """A registered broker on a socket of its own. Afterwards, every broker of the test is gone with
    its socket (and the server is done writing before the database is emptied)."""
    with ExitStack() as stack:
        peer = Broker(stack, server, token)
        assert peer.call("register", BYSTANDER)["payload"]["code"] == 0
        yield peer
    wait_until(lambda: not registry(), 15, "every broker unregistered with its socket")


def registry() -> list[tuple]:
    return sorted(BrokerMember.objects.values_list("group__cluster_name", "group__broker_name", "broker_id", "broker_addr"))


def redis_ms() -> int:
    seconds, micros = sync_client().time()
    return seconds * 1000 + micros // 1000


def assert_heard(bystander: Broker, since_ms: int) -> None:
    """The bystander is registered and heard now, and Redis recorded a heartbeat of it after ``since_ms``."""
    beat = {"clusterName": "c1", "brokerAddr": BYSTANDER["brokerAddr"]}
    assert bystander.call("heartbeat", beat, 77) == {"type": "heartbeat_result", "seq": 77, "payload": {"registered": True}}
    member = liveness.member("c1", BYSTANDER["brokerAddr"])
    last = liveness.last_heartbeats([member])[member]
    assert last is not None and last[0] >= since_ms, (last, since_ms)
    assert ("c1", "bystander", 0, BYSTANDER["brokerAddr"]) in registry()


# --- malformed frames -------------------------------------------------------------------------------

MEGABYTE = 1 << 20
OVER_FRAME_LIMIT = json.dumps(
    {"type": "register", "seq": 3, "payload": {**register_body(0, "127.0.0.1:10941", name="big"), "pad": "x" * 3_000_000}}
)
SEQ_RULE = f"required: an integer from 0 to {2**63 - 1}"

MALFORMED = {
    # id: (frame, opcode, the error's code, its seq, its fields, words of its detail)
    "binary frame of valid JSON": (json.dumps({"type": "ping", "seq": 1}).encode(), BINARY, 29, None, None, "binary frame"),
    "binary frame, not UTF-8": (b"\xff\xfe{}", BINARY, 29, None, None, "binary frame"),
    "3 MB frame": (OVER_FRAME_LIMIT, TEXT, 29, None, None, "over 2621440 bytes (BROKER_WS_MAX_FRAME_BYTES)"),
    "a megabyte in a field": (
        json.dumps({"type": "heartbeat", "seq": 4, "payload": {"clusterName": "c1", "brokerAddr": "a" * MEGABYTE}}),
        TEXT,
        29,
        4,
        {"brokerAddr": ["at most 255 characters"]},
        "",
    ),
    "a megabyte as the type": (json.dumps({"type": "t" * MEGABYTE, "seq": 5}), TEXT, 3, 5, None, "unknown frame type"),
    "a megabyte as the seq": (json.dumps({"type": "ping", "seq": "s" * MEGABYTE}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "no seq": (json.dumps({"type": "ping"}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "seq as text": (json.dumps({"type": "ping", "seq": "7"}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "seq as 7.0": (json.dumps({"type": "ping", "seq": 7.0}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "seq beyond a long": (json.dumps({"type": "ping", "seq": 2**63}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "negative seq": (json.dumps({"type": "ping", "seq": -1}), TEXT, 29, None, {"seq": [SEQ_RULE]}, ""),
    "JSON that is not an object": ("[1, 2]", TEXT, 29, None, None, "JSON object"),
    "a payload that is not an object": (json.dumps({"type": "ping", "seq": 8, "payload": [1]}), TEXT, 29, 8, None, "JSON object"),
    "an unknown type": (json.dumps({"type": "teleport", "seq": 9}), TEXT, 3, 9, None, "unknown frame type 'teleport'"),
}


def test_malformed_frames_get_a_short_error_frame_and_change_nothing(server, token, bystander):
    since, before = redis_ms(), registry()
    with ExitStack() as stack:
        peer = Broker(stack, server, token)
        for label, (frame, opcode, code, seq, fields, words) in MALFORMED.items():
            peer.ws.send(frame if opcode == TEXT else bytes(frame))
            reply, length = peer.reply()
            assert reply["type"] == "error" and reply["seq"] == seq, (label, reply)
            assert reply["payload"]["code"] == code and words in reply["payload"]["detail"], (label, reply)
            if fields is not None:
                assert reply["payload"]["fields"] == fields, (label, reply)
            assert length < 1024, (label, length)  # an error never repeats the peer's megabyte
            assert peer.call("ping", {}, 99)["type"] == "ping_result", label  # the socket stays open
    assert registry() == before
    assert_heard(bystander, since)


@pytest.mark.parametrize(
    "send, code",
    [
        (lambda raw: raw.send_frame(TEXT, b'{"type": "ping", "seq": 1, "x": "\xff\xfe"}'), 1007),
        (lambda raw: raw.send_frame(TEXT, b"{" * 1024, claimed_length=20 * MEGABYTE), 1009),
    ],
    ids=["text that is not UTF-8: 1007", "a 20 MiB frame (over uvicorn's --ws-max-size): 1009"],
)
def test_frames_the_server_cannot_take_close_the_socket_with_their_code(server, token, bystander, send, code):
    since, before = redis_ms(), registry()
    raw = RawSocket(server, "/ws/broker/", {"Authorization": f"Bearer {token}", "Origin": server})
    try:
        send(raw)
        assert raw.close_code() == (code, 0)
    finally:
        raw.close()
    assert registry() == before
    assert_heard(bystander, since)


# --- out of order ------------------------------------------------------------------------------------


def test_frames_out_of_order_are_answered_by_the_rules_and_change_nothing_else(server, token, bystander):
    since, before = redis_ms(), registry()
    other = ("c1", "late", 0, "127.0.0.1:10951")
    member = liveness.member("c1", other[3])
    with ExitStack() as stack:
        peer = Broker(stack, server, token)
        # A heartbeat before any registration: "register first", and no liveness entry is made.
        beat = {"clusterName": "c1", "brokerAddr": other[3]}
        assert peer.call("heartbeat", beat, 1)["payload"] == {"registered": False}
        assert liveness.last_heartbeats([member])[member] is None
        # An unregister of a broker nobody registered: nothing to do.
        assert peer.call("unregister", {**beat, "brokerName": "late"}, 2)["payload"] == {"unregistered": False}
        assert registry() == before
        # A reused seq: the server keeps no record of seqs; each frame gets its own answer, in order.
        for kind in ("ping", "heartbeat", "teleport"):
            peer.send(kind, beat if kind == "heartbeat" else {}, 5)
        answers = [peer.reply()[0] for _ in range(3)]
        assert [(a["type"], a["seq"]) for a in answers] == [("ping_result", 5), ("heartbeat_result", 5), ("error", 5)]
        # Then the registration, and the heartbeat counts.
        assert peer.call("register", register_body(0, other[3], name="late", topics={}), 6)["payload"]["code"] == 0
        assert peer.call("heartbeat", beat, 7)["payload"] == {"registered": True}
        assert sorted([*before, other]) == registry()

        # A token bound to cluster cA registering the bystander's set (kept in c1), under either name.
        bound = Broker(stack, server, ApiToken.issue("hostile-bound", "broker", "cA")[1])
        for cluster in ("cA", "c1"):
            reply = bound.call("register", {**BYSTANDER, "clusterName": cluster, "brokerAddr": "127.0.0.1:10961"}, 8)
            assert reply["type"] == "error" and reply["payload"]["code"] == 16, reply
            reply = bound.call(
                "unregister", {"clusterName": cluster, "brokerAddr": BYSTANDER["brokerAddr"], "brokerName": "bystander"}, 9
            )
            assert reply["type"] == "error" and reply["payload"]["code"] == 16, reply
    assert ("c1", "bystander", 0, BYSTANDER["brokerAddr"]) in registry()
    assert_heard(bystander, since)


# --- floods ------------------------------------------------------------------------------------------


class Flood(threading.Thread):
    """``frames`` frames as fast as the socket takes them, then their answers, counted as they come."""

    def __init__(self, peer: Broker, kind: str, payload: dict, frames: int):
        super().__init__(daemon=True)
        self.peer, self.kind, self.payload, self.frames = peer, kind, payload, frames
        self.answers: list[dict] = []
        self.seconds = 0.0

    def run(self) -> None:
        started = time.monotonic()
        for seq in range(self.frames):
            self.peer.send(self.kind, self.payload, seq)
        for _ in range(self.frames):
            self.answers.append(self.peer.reply()[0])
        self.seconds = time.monotonic() - started

    def handled(self) -> int:
        """Every frame answered once, in order: handled, or refused with 2 SYSTEM_BUSY."""
        assert [a["seq"] for a in self.answers] == list(range(self.frames))
        busy = [a for a in self.answers if a["type"] == "error"]
        assert all(a["payload"]["code"] == 2 and a["payload"]["name"] == "SYSTEM_BUSY" for a in busy), busy[:3]
        return self.frames - len(busy)


def flooders(stack: ExitStack, server: str, token: str, n: int) -> list[tuple[Broker, dict]]:
    """``n`` registered brokers, each on a socket of its own, with its registration."""
    out = []
    for i in range(n):
        peer, body = Broker(stack, server, token), register_body(0, f"127.0.0.1:{11011 + 10 * i}", name=f"flood{i}", topics={})
        assert peer.call("register", body, 1)["payload"]["code"] == 0
        out.append((peer, body))
    return out


def beat_while(bystander: Broker, floods: list[Flood]) -> list[dict]:
    """The bystander's heartbeats, as a broker sends them, while any flood runs."""
    beats = []
    while any(f.is_alive() for f in floods):
        beats.append(bystander.call("heartbeat", {"clusterName": "c1", "brokerAddr": BYSTANDER["brokerAddr"]}, 50))
        time.sleep(0.1)
    return beats


def test_heartbeats_beyond_a_sockets_frame_budget_get_2_while_other_brokers_are_heard(server, token, bystander):
    since = redis_ms()
    with ExitStack() as stack:
        peers = flooders(stack, server, token, 3)
        before = registry()
        floods = [Flood(peer, "heartbeat", {"clusterName": "c1", "brokerAddr": body["brokerAddr"]}, 400) for peer, body in peers]
        for f in floods:
            f.start()
        beats = beat_while(bystander, floods)
        for f in floods:
            f.join(60)
            handled = f.handled()
            assert handled < f.frames and handled <= BURST + RATE * (f.seconds + 1), (handled, f.seconds)
        assert beats and all(b["payload"] == {"registered": True} for b in beats), beats
        assert registry() == before
        for peer, _ in peers:
            assert peer.ping_until_answered()["type"] == "ping_result"  # held back, not cut off
    assert_heard(bystander, since)


def test_a_registration_flood_takes_its_turn_with_every_other_socket(server, token, bystander):
    """Registrations (a Postgres transaction each) are slower than the frame budget: one socket has
    one frame in hand at a time, and the database calls of a process take turns, so the bystander's
    own registration is answered while the flood is still going, not after it."""
    since = redis_ms()
    with ExitStack() as stack:
        ((peer, body),) = flooders(stack, server, token, 1)
        before = registry()
        flood = Flood(peer, "register", body, 100)
        flood.start()
        while not flood.answers:
            time.sleep(0.01)
        assert bystander.call("register", BYSTANDER, 60)["payload"]["code"] == 0
        assert len(flood.answers) < flood.frames  # the flood is not over: the bystander did not wait for it
        beats = beat_while(bystander, [flood])
        flood.join(60)
        assert flood.handled() <= BURST + RATE * (flood.seconds + 1)
        assert all(a["payload"]["code"] in (0, 2) for a in flood.answers)
        assert all(b["payload"] == {"registered": True} for b in beats), beats
        assert registry() == before  # a registration again and again is still one broker
    assert_heard(bystander, since)


# --- a dashboard page that never reads ----------------------------------------------------------------

GROUPS, BLOB = 4, "x" * 256_000


def group_members(group: str) -> int:
    return sync_client().zcard(f"{settings.REDIS_KEY_PREFIX}asgi:group:{group}")


def test_a_page_that_never_reads_is_closed_with_1013_while_other_pages_keep_up(server):
    viewer = User.objects.create_user("hostile-viewer", password="a-long-viewer-password")
    headers = {"Origin": server, "Cookie": f"sessionid={session_cookie(viewer)}"}
    with ExitStack() as stack:
        slow = RawSocket(server, "/ws/dashboard/", headers, receive_buffer=4096)
        stack.callback(slow.close)
        slow.send_frame(TEXT, json.dumps({"subscribe": "*"}).encode())
        assert slow.frame() == (TEXT, json.dumps({"type": "subscribed", "to": "*"}).encode())
        url = server.replace("http://", "ws://") + "/ws/dashboard/"
        # max_queue=None: this page's library reads its socket all the time, whatever the test thread does
        fast = stack.enter_context(connect(url, additional_headers=headers, open_timeout=10, max_queue=None))
        fast.send(json.dumps({"subscribe": "*"}))
        assert json.loads(fast.recv(timeout=10)) == {"type": "subscribed", "to": "*"}
        assert group_members(ALL) == 2
        latest: dict[str, int] = {}

        def keep_up() -> None:
            while len(latest) < GROUPS or set(latest.values()) != {-1}:
                update = json.loads(fast.recv(timeout=30))
                latest[update["brokerName"]] = update["data"]["round"]

        reader = threading.Thread(target=keep_up, daemon=True)
        reader.start()
        published, deadline = 0, time.monotonic() + 60
        while group_members(ALL) == 2:  # until the server gives the page that reads nothing up
            assert time.monotonic() < deadline, "the page that reads nothing was never given up"
            for g in range(GROUPS):
                publish("state", f"g{g}", {"round": published // GROUPS, "blob": BLOB})
                published += 1
        for g in range(GROUPS):  # a last round: the page that reads gets every group's latest
            publish("state", f"g{g}", {"round": -1, "blob": ""})
        reader.join(30)
        assert latest == {f"g{g}": -1 for g in range(GROUPS)}
        # The slow page, reading at last: what the socket buffers held, then 1013. Nothing more
        # was queued for it, though it was sent far more.
        code, texts = slow.close_code()
        assert code == 1013
        assert texts < published / 2, (texts, published)
    # What the server held for the slow page when it gave up: its outbox, at most the latest update
    # per group (and the one being sent), however much was published.
    (dropped,) = re.findall(r"a dashboard socket took nothing for 2 s: (\d+) pending updates dropped", server_log(server))
    assert int(dropped) <= GROUPS + 1
