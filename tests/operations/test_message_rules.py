"""The rules of finding messages (controlplane/operations/message_rules.py; docs/messages.md §5) and of
the connected clients' rows (nameserver/core/clients.py; §4-5), as tables: which lookup a query is, its
range and cap, offset ids that do and do not decode, the brokers' answers merged, a body shown as JSON,
text or hex, the groups a trace asks about, a report's clients checked and merged per (group, client)."""

from __future__ import annotations

import json

import pytest

from controlplane.operations import message_rules as rules
from mqrules import validation as v
from mqrules.remoting.message_id import encode_offset_message_id
from nameserver.core import clients

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000


@pytest.mark.parametrize(
    "key, unique, begin, end, max_num, want",
    [
        ("order-1", None, None, None, None, (rules.By.KEY, "order-1", NOW - 7 * DAY, NOW, 64)),
        (None, "7F0000010001", None, None, None, (rules.By.UNIQUE_KEY, "7F0000010001", 0, v.LONG_MAX, 64)),
        (None, "U1", NOW - 9 * DAY, NOW, 5, (rules.By.UNIQUE_KEY, "U1", NOW - 9 * DAY, NOW, 5)),
        (None, None, None, None, None, (rules.By.TIME, None, NOW - 7 * DAY, NOW, 64)),
        (None, None, 1000, None, 1000, (rules.By.TIME, None, 1000, 1000 + 7 * DAY, 1000)),
        ("k", None, None, 8 * DAY, None, (rules.By.KEY, "k", DAY, 8 * DAY, 64)),
        ("k", None, 0, 7 * DAY, 1, (rules.By.KEY, "k", 0, 7 * DAY, 1)),
    ],
    ids=[
        "key: the last 7 days",
        "unique key: any time",
        "unique key: a range past 7 days",
        "printMsg: the last 7 days",
        "begin only: 7 days from it",
        "end only: 7 days up to it",
        "exactly 7 days",
    ],
)
def test_plan_query_picks_the_lookup_its_range_and_cap(key, unique, begin, end, max_num, want):
    q = rules.plan_query("Orders", key, unique, begin, end, max_num, NOW)
    assert (q.by, q.key, q.begin_ms, q.end_ms, q.max_num) == want
    assert q.kind == ("print_messages" if q.by is rules.By.TIME else "query_message")
    assert ("by" in q.payload()) == (q.by is not rules.By.TIME)


@pytest.mark.parametrize(
    "topic, key, unique, begin, end, max_num, field",
    [
        ("Orders", "k" * 256, None, None, None, None, "key"),
        ("Orders", "a b", None, None, None, None, "key"),
        ("Orders", "", None, None, None, None, "key"),
        ("Orders", None, "u" * 256, None, None, None, "uniqueKey"),
        ("Orders", "k", "u", None, None, None, "uniqueKey"),
        ("Orders", "k", None, 0, 7 * DAY + 1, None, "end"),
        ("Orders", None, None, 0, 8 * DAY, None, "end"),
        ("Orders", "k", None, 10, 5, None, "end"),
        ("Orders", "k", None, None, None, 1001, "max"),
        ("Orders", "k", None, None, None, 0, "max"),
        ("Orders", "k", None, -1, None, None, "begin"),
        ("Or/ders", "k", None, None, None, None, "topic"),
    ],
    ids=[
        "key over 255",
        "key with a space",
        "empty key",
        "unique key over 255",
        "key and unique key",
        "key range over 7 days",
        "printMsg range over 7 days",
        "end before begin",
        "max over the cap",
        "max 0",
        "negative begin",
        "topic not a name",
    ],
)
def test_plan_query_refuses_bad_input_at_its_field(topic, key, unique, begin, end, max_num, field):
    with pytest.raises(v.Invalid) as refused:
        rules.plan_query(topic, key, unique, begin, end, max_num, NOW)
    assert field in refused.value.fields


@pytest.mark.parametrize(
    "msg_id, host, port, offset",
    [
        (encode_offset_message_id("127.0.0.1", 10911, 4096), "127.0.0.1", 10911, 4096),
        (encode_offset_message_id("10.1.2.3", 30911, 0).lower(), "10.1.2.3", 30911, 0),
        (encode_offset_message_id("::1", 10911, 77), "::1", 10911, 77),
    ],
    ids=["IPv4", "lower case", "IPv6"],
)
def test_offset_ids_decode_to_their_store_host_and_offset(msg_id, host, port, offset):
    decoded = rules.decode_msg_id(msg_id)
    assert (decoded.host, decoded.port, decoded.commit_log_offset) == (host, port, offset)
    assert rules.store_addr(decoded) == (f"[{host}]:{port}" if ":" in host else f"{host}:{port}")


@pytest.mark.parametrize(
    "msg_id",
    ["not-an-id", "7F000001" * 3, "Z" * 32, "7F000001" + "FFFFFFFF" + "0" * 16, "7F000001" + "00002A9F" + "F" * 16, 42],
    ids=["words", "24 digits", "not hex", "port beyond 65535", "negative offset", "a number"],
)
def test_ids_that_do_not_decode_are_refused_at_msg_id(msg_id):
    with pytest.raises(v.Invalid) as refused:
        rules.decode_msg_id(msg_id)
    assert list(refused.value.fields) == ["msgId"]


def _view(broker: str, offset: int, stored: int) -> dict:
    return {"brokerName": broker, "commitLogOffset": offset, "storeTimestamp": stored}


@pytest.mark.parametrize(
    "answers, max_num, newest_first, want, cut",
    [
        ([[_view("a", 1, 10), _view("a", 2, 30)], [_view("b", 1, 20)]], 10, True, [("a", 2), ("b", 1), ("a", 1)], False),
        ([[_view("a", 1, 10), _view("a", 2, 30)], [_view("b", 1, 20)]], 2, True, [("a", 2), ("b", 1)], True),
        ([[_view("a", 1, 10), _view("a", 2, 30)], [_view("b", 1, 20)]], 10, False, [("a", 1), ("b", 1), ("a", 2)], False),
        ([[_view("a", 1, 10)], [_view("a", 1, 10)]], 10, True, [("a", 1)], False),
        ([], 10, True, [], False),
    ],
    ids=["newest first across sets", "cut at max", "printMsg: oldest first", "the same record once", "nothing"],
)
def test_merge_orders_dedupes_and_cuts(answers, max_num, newest_first, want, cut):
    merged, truncated = rules.merge(answers, max_num, newest_first=newest_first)
    assert [(m["brokerName"], m["commitLogOffset"]) for m in merged] == want and truncated is cut


@pytest.mark.parametrize(
    "raw, size, truncated, fmt, text, shown_cut",
    [
        (b'{"order": 42, "paid": true}', 27, False, "json", json.dumps({"order": 42, "paid": True}, indent=2), False),
        (b"[1, 2]", 6, False, "json", "[\n  1,\n  2\n]", False),
        (b"order 42 paid", 13, False, "text", "order 42 paid", False),
        ("café crème".encode(), 12, False, "text", "café crème", False),
        (b"42", 2, False, "text", "42", False),
        (b'{"cut": "in the mi', 9000, True, "text", '{"cut": "in the mi', True),
        ("é".encode() * 2048 + "é".encode()[:1], 8000, True, "text", "é" * 2048, True),
        (b"\x00\x01\xff", 3, False, "hex", "0001ff", False),
        (b"a\x00b", 3, False, "hex", "610062", False),
        (b"x" * 5000, 5000, False, "text", "x" * rules.PREVIEW_BYTES, True),
        (b"\xff" * 5000, 5000, False, "hex", "ff" * rules.PREVIEW_BYTES, True),
        (b"", 0, False, "text", "", False),
    ],
    ids=[
        "JSON object pretty",
        "JSON array",
        "text",
        "UTF-8 text",
        "a JSON number stays text",
        "truncated JSON is text",
        "a character cut at the preview's end",
        "binary as hex",
        "NUL as hex",
        "long text cut at 4 KiB",
        "long binary cut at 4 KiB",
        "empty",
    ],
)
def test_a_body_is_previewed_as_json_text_or_hex(raw, size, truncated, fmt, text, shown_cut):
    preview = rules.body_preview(raw, size, truncated)
    assert preview == {"format": fmt, "text": text, "size": size, "truncated": shown_cut}


@pytest.mark.parametrize(
    "name, topic, group",
    [
        ("%RETRY%billing_Orders", "Orders", "billing"),
        ("%RETRY%my_group_Orders", "Orders", "my_group"),
        ("%RETRY%billing_Orders", "Audit", None),
        ("%RETRY%billing", "Orders", None),
        ("%RETRY%_Orders", "Orders", None),
        ("Orders", "Orders", None),
    ],
    ids=["pop retry topic", "a group with _", "another topic's", "a remoting retry topic", "no group", "not a retry topic"],
)
def test_retry_topics_name_their_group(name, topic, group):
    assert rules.retry_group(name, topic) == group


def test_trace_groups_join_readers_retry_topics_and_subscribers():
    names = ["Orders", "%RETRY%billing_Orders", "%RETRY%audit_Orders", "%RETRY%x_Other", "%DLQ%audit"]
    got = rules.trace_groups("Orders", ["shipping", "billing"], names, ["live-group", "bad/name"])
    assert got == ["audit", "billing", "live-group", "shipping"]


# --- connected clients (nameserver/core/clients.py) ----------------------------------------------------


def client(cid: str, **kw) -> dict:
    base = {
        "clientId": cid,
        "language": "PYTHON",
        "version": "5.0.1",
        "address": "127.0.0.1:50000",
        "protocol": "grpc",
        "lastSeenMs": 1000,
        "producerGroups": [],
        "consumerGroups": [],
        "topics": [],
        "subscriptions": {},
        "queues": {},
    }
    return {**base, **kw}


@pytest.mark.parametrize(
    "raw, where",
    [
        ({"clients": "x"}, None),
        ([client("c", protocol="mqtt")], ("0", "protocol")),
        ([client("c", lastSeenMs=-1)], ("0", "lastSeenMs")),
        ([client("")], None),
        ([client("c", consumerGroups="g")], ("0", "consumerGroups")),
        ([client("c", subscriptions={"g": [{"topic": "T"}]})], ("0", "subscriptions")),
        ([client("c", queues={"g": [["T", -1]]})], ("0", "queues")),
        ([client("c", address="x" * 300)], ("0", "address")),
        ([client("c", clientId="a\x00b")], ("0", "clientId")),
        ([7], ("0", None)),
    ],
    ids=[
        "not a list",
        "unknown protocol",
        "negative last seen",
        "empty id",
        "groups not a list",
        "subscription without expression",
        "negative queue id",
        "address too long",
        "NUL in the id",
        "not an object",
    ],
)
def test_a_report_s_clients_are_checked(raw, where):
    with pytest.raises(v.Invalid) as refused:
        clients.parse_clients(raw)
    if where is not None:
        entry, field = where
        assert entry in refused.value.fields
        assert field is None or field in refused.value.fields[entry]


def test_a_report_s_clients_keep_their_known_fields():
    entry = {**client("c1", consumerGroups=["g"]), "extra": "dropped"}
    assert clients.parse_clients([entry]) == [client("c1", consumerGroups=["g"])]


SUB = {"topic": "Orders", "expression": "paid", "type": "TAG"}
A = clients.BrokerClients(
    "broker-a",
    [
        client("p1", producerGroups=["Orders"], topics=["Orders"], lastSeenMs=500),
        client("c1", consumerGroups=["g"], topics=["Orders"], subscriptions={"g": [SUB]}, queues={"g": [["Orders", 1]]}),
        client("r1", protocol="remoting", consumerGroups=["h"], subscriptions={"h": [{**SUB, "topic": "Audit"}]}),
    ],
)
B = clients.BrokerClients(
    "broker-b",
    [
        client("p1", producerGroups=["Orders"], topics=["Orders"], lastSeenMs=900, address="127.0.0.1:50001"),
        client("c1", consumerGroups=["g"], topics=["Orders"], subscriptions={"g": [SUB]}, queues={"g": [["Orders", 0]]}),
    ],
)


@pytest.mark.parametrize(
    "group, topic, producers, consumers",
    [
        (
            None,
            None,
            [("Orders", "p1", ["broker-a", "broker-b"], 900)],
            [("g", "c1", ["broker-a", "broker-b"], 1000), ("h", "r1", ["broker-a"], 1000)],
        ),
        ("g", None, [], [("g", "c1", ["broker-a", "broker-b"], 1000)]),
        (None, "Audit", [], [("h", "r1", ["broker-a"], 1000)]),
        (None, "Orders", [("Orders", "p1", ["broker-a", "broker-b"], 900)], [("g", "c1", ["broker-a", "broker-b"], 1000)]),
        ("nobody", None, [], []),
    ],
    ids=["everyone, merged over brokers", "one group", "one topic", "a topic both publish and read", "no such group"],
)
def test_connections_are_one_row_per_group_and_client(group, topic, producers, consumers):
    got = clients.connections([A, B], group, topic)
    assert [(r["group"], r["clientId"], r["brokerNames"], r["lastSeenMs"]) for r in got["producers"]] == producers
    assert [(r["group"], r["clientId"], r["brokerNames"], r["lastSeenMs"]) for r in got["consumers"]] == consumers


def test_a_consumer_row_holds_its_subscriptions_once_and_its_queues_per_broker():
    (row,) = clients.connections([A, B], "g")["consumers"]
    assert row["subscriptions"] == [SUB]
    assert row["queues"] == [["broker-a", "Orders", 1], ["broker-b", "Orders", 0]]
    (producer,) = clients.connections([A, B])["producers"]
    assert producer["address"] == "127.0.0.1:50001"  # the latest seen
