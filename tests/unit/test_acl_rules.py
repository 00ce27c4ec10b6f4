"""RocketMQ's ACL 2.0 rules (mqrules/acl.py): resources and their patterns, which policy entry decides,
and the signatures the official clients send, checked with those clients' own signing code."""

from __future__ import annotations

import pytest
from rocketmq.v5.util.signature import Signature

from mqrules.acl import (
    AclSnapshot,
    Action,
    Decision,
    PolicyEntry,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
    UserType,
    Verdict,
    authenticate_grpc,
    authenticate_remoting,
    authorize,
    dated,
    entry_as_dict,
    lockouts,
    parse_entries,
    remoting_content,
    remoting_signature,
    signed_at_ms,
    snapshot_from_wire,
    snapshot_wire,
)

pytestmark = pytest.mark.unit

A = Action
T = ResourceType
P = ResourcePattern


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("Topic:Orders", (T.TOPIC, "Orders", P.LITERAL)),
        ("topic:Orders", (T.TOPIC, "Orders", P.LITERAL)),
        ("Group:Ord*", (T.GROUP, "Ord", P.PREFIXED)),
        ("Cluster:*", (T.CLUSTER, None, P.ANY)),
        ("*", (T.ANY, None, P.ANY)),
    ],
)
def test_a_resource_key(key, expected):
    r = Resource.parse(key)
    assert (r.type, r.name, r.pattern) == expected
    assert Resource.parse(r.key) == r  # the key round-trips


@pytest.mark.parametrize(
    "key", ["", "Topic", "Topic:", "Queue:x", "Topic:a*b", "Topic:*x", "Topic:a b", "Topic:" + "x" * 256, "Topic:a:b"]
)
def test_a_malformed_resource_key_is_refused(key):
    with pytest.raises(ValueError):
        Resource.parse(key)


@pytest.mark.parametrize(
    ("policy", "asked", "matches"),
    [
        ("Topic:Orders", "Topic:Orders", True),
        ("Topic:Orders", "Topic:Orders2", False),
        ("Topic:Ord*", "Topic:Orders", True),
        ("Topic:Ord*", "Group:Orders", False),
        ("Topic:*", "Topic:anything", True),
        ("*", "Group:anything", True),
    ],
)
def test_a_policy_resource_covers(policy, asked, matches):
    assert Resource.parse(policy).matches(Resource.parse(asked)) is matches


def test_a_groups_retry_topic_is_authorized_as_the_group():
    assert Resource.group("%RETRY%G1") == Resource.group("G1") == Resource(T.GROUP, "G1")


ALICE = User("alice", "alice-secret")


def entry(key: str, actions: str, decision: Decision = Decision.ALLOW, ips: tuple[str, ...] = ()) -> PolicyEntry:
    return PolicyEntry(Resource.parse(key), frozenset(Action.named(a) for a in actions.split(",")), decision, ips)


@pytest.mark.parametrize(
    ("entries", "resource", "actions", "ip", "verdict"),
    [
        pytest.param([], "Topic:Orders", "Pub", "10.0.0.1", Verdict.FORBIDDEN, id="no policy: denied"),
        pytest.param([entry("Topic:Orders", "Pub")], "Topic:Orders", "Pub", "10.0.0.1", Verdict.ALLOWED, id="allowed"),
        pytest.param([entry("Topic:Orders", "Pub")], "Topic:Orders", "Sub", "10.0.0.1", Verdict.FORBIDDEN, id="another action"),
        pytest.param(
            [entry("Topic:Orders", "All")], "Topic:Orders", "Sub", "10.0.0.1", Verdict.ALLOWED, id="All covers every action"
        ),
        pytest.param(
            [entry("Topic:Orders", "Sub")], "Topic:Orders", "Any", "10.0.0.1", Verdict.ALLOWED, id="a route query: any action"
        ),
        pytest.param(
            [entry("Topic:*", "Pub", Decision.DENY), entry("Topic:Orders", "Pub")],
            "Topic:Orders",
            "Pub",
            None,
            Verdict.ALLOWED,
            id="the literal entry is more specific than the deny of every topic",
        ),
        pytest.param(
            [entry("Topic:Ord*", "Pub"), entry("Topic:Orders", "Pub", Decision.DENY)],
            "Topic:Orders",
            "Pub",
            None,
            Verdict.FORBIDDEN,
            id="a literal deny over a prefixed allow",
        ),
        pytest.param(
            [entry("Topic:O*", "Pub", Decision.DENY), entry("Topic:Ord*", "Pub")],
            "Topic:Orders",
            "Pub",
            None,
            Verdict.ALLOWED,
            id="the longer prefix decides",
        ),
        pytest.param(
            [entry("Topic:Orders", "Pub"), entry("Topic:Orders", "Pub", Decision.DENY)],
            "Topic:Orders",
            "Pub",
            None,
            Verdict.FORBIDDEN,
            id="equally specific: deny wins",
        ),
        pytest.param([entry("*", "Pub")], "Topic:Orders", "Pub", None, Verdict.ALLOWED, id="any resource"),
        pytest.param(
            [entry("Topic:Orders", "Pub", ips=("10.0.0.0/8",))],
            "Topic:Orders",
            "Pub",
            "10.1.2.3",
            Verdict.ALLOWED,
            id="from the range",
        ),
        pytest.param(
            [entry("Topic:Orders", "Pub", ips=("10.0.0.0/8",))],
            "Topic:Orders",
            "Pub",
            "192.168.0.1",
            Verdict.FORBIDDEN,
            id="from outside the range",
        ),
        pytest.param(
            [entry("Topic:Orders", "Pub", ips=("10.0.0.7",))],
            "Topic:Orders",
            "Pub",
            None,
            Verdict.FORBIDDEN,
            id="no source address",
        ),
    ],
)
def test_authorize(entries, resource, actions, ip, verdict):
    judged = authorize(ALICE, entries, Resource.parse(resource), [Action.named(a) for a in actions.split(",")], ip)
    assert judged.verdict is verdict, judged.detail


def test_a_super_user_may_do_anything_and_a_disabled_user_nothing():
    root = User("root", "s", UserType.SUPER)
    assert authorize(root, [], Resource.topic("T"), [A.PUB], None).allowed
    off = User("off", "s", UserType.SUPER, UserStatus.DISABLE)
    assert authorize(off, [entry("*", "All")], Resource.topic("T"), [A.PUB], None).verdict is Verdict.UNAUTHENTICATED
    assert authorize(None, [], Resource.topic("T"), [A.PUB], None).verdict is Verdict.UNAUTHENTICATED


class Credentials:
    def __init__(self, ak: str, sk: str):
        self.ak, self.sk = ak, sk


class Config:
    def __init__(self, ak: str, sk: str):
        self.credentials, self.namespace = Credentials(ak, sk), ""


def signed_by_the_official_client(ak: str, sk: str) -> tuple[str, str]:
    """(authorization, x-mq-date-time) as rocketmq-python-client signs a call."""
    metadata = dict(Signature.metadata(Config(ak, sk), "client-1"))
    return metadata["authorization"], metadata["x-mq-date-time"]


USERS = {"alice": ALICE, "bob": User("bob", "bob-secret", status=UserStatus.DISABLE)}


@pytest.mark.parametrize(
    ("ak", "sk", "skew_s", "verdict"),
    [
        pytest.param("alice", "alice-secret", 0, Verdict.ALLOWED, id="signed by the official client"),
        pytest.param("alice", "wrong", 0, Verdict.UNAUTHENTICATED, id="a wrong secret"),
        pytest.param("mallory", "x", 0, Verdict.UNAUTHENTICATED, id="an unknown access key"),
        pytest.param("bob", "bob-secret", 0, Verdict.UNAUTHENTICATED, id="a disabled user"),
        pytest.param("alice", "alice-secret", 3600, Verdict.UNAUTHENTICATED, id="replayed an hour later"),
    ],
)
def test_grpc_authentication(ak, sk, skew_s, verdict):
    header, date_time = signed_by_the_official_client(ak, sk)
    now = signed_at_ms(date_time) + skew_s * 1000
    judged, _ = authenticate_grpc(USERS, header, date_time, now)
    assert judged.verdict is verdict, judged.detail


@pytest.mark.parametrize(
    ("header", "date_time"),
    [
        (None, "20261129T000000Z"),
        ("Basic abc", "20261129T000000Z"),
        ("MQv2-HMAC-SHA1 Credential=alice", "20261129T000000Z"),
        ("MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature=00", None),
        ("MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, Signature=00", "yesterday"),
    ],
)
def test_a_malformed_grpc_credential_is_unauthenticated(header, date_time):
    judged, user = authenticate_grpc(USERS, header, date_time, 0)
    assert judged.verdict is Verdict.UNAUTHENTICATED and user is None


def test_remoting_signatures_cover_every_field_and_the_body():
    fields = {"AccessKey": "alice", "topic": "Orders", "queueId": "1"}
    fields["Signature"] = remoting_signature("alice-secret", remoting_content(fields, b"body"))
    assert authenticate_remoting(USERS, fields, b"body")[0].allowed
    assert not authenticate_remoting(USERS, fields, b"other body")[0].allowed
    assert not authenticate_remoting(USERS, {**fields, "topic": "Other"}, b"body")[0].allowed
    assert not authenticate_remoting(USERS, {"topic": "Orders"}, b"body")[0].allowed


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        pytest.param([], ["entries"], id="no entry"),
        pytest.param("Topic:x", ["entries"], id="not a list"),
        pytest.param([{"resource": "Queue:x", "actions": ["Pub"]}], ["entries[0].resources"], id="a bad resource"),
        pytest.param([{"resource": "Topic:x", "actions": ["Publish"]}], ["entries[0].actions"], id="a bad action"),
        pytest.param([{"resource": "Topic:x", "actions": ["Any"]}], ["entries[0].actions"], id="Any is not granted"),
        pytest.param(
            [{"resource": "Topic:x", "actions": "Pub", "decision": "Maybe"}], ["entries[0].decision"], id="a bad decision"
        ),
        pytest.param(
            [{"resource": "Topic:x", "actions": "Pub", "sourceIps": ["10.0.0.300"]}], ["entries[0].sourceIps"], id="a bad IP"
        ),
        pytest.param([{"resource": "Topic:x", "actions": ["Pub"] * 65}], ["entries[0].actions"], id="too many actions"),
        pytest.param([{"resource": "Topic:x", "actions": "Pub"}] * 257, ["entries"], id="too many entries"),
        pytest.param(
            [{"resource": "Topic:" + "x" * 10_000, "actions": "Pub"}], ["entries[0].resources"], id="an oversized resource"
        ),
        pytest.param([7], ["entries[0]"], id="not an object"),
    ],
)
def test_a_malformed_policy_is_refused_whole_with_its_fields(raw, fields):
    entries, problems = parse_entries(raw)
    assert entries == [] and sorted(problems) == fields


def test_a_policy_in_mqadmins_form_round_trips():
    raw = [{"resources": "Topic:Orders,Group:G*", "actions": "Pub,Sub", "decision": "deny", "sourceIps": ["10.1.0.0/16"]}]
    entries, problems = parse_entries(raw)
    assert problems == {} and [e.resource.key for e in entries] == ["Topic:Orders", "Group:G*"]
    assert all(e.decision is Decision.DENY and e.actions == {A.PUB, A.SUB} and e.source_ips == ("10.1.0.0/16",) for e in entries)
    again, _ = parse_entries([entry_as_dict(e) for e in entries])
    assert again == entries


# --- the snapshot brokers get, and the preview of a change -----------------------------------------------

ALICE = User("alice", "alice-secret")
BOB = User("bob", "bob-secret", UserType.SUPER)
PUB_ORDERS = PolicyEntry(Resource.parse("Topic:Orders"), frozenset({A.PUB}))
SUB_ALL = PolicyEntry(Resource.parse("Topic:*"), frozenset({A.SUB}))
GROUP_G = PolicyEntry(Resource.parse("Group:G"), frozenset({A.SUB}))
DENY_ORDERS = PolicyEntry(Resource.parse("Topic:Orders"), frozenset({A.ALL}), Decision.DENY)
FROM_10 = PolicyEntry(Resource.parse("Topic:Orders"), frozenset({A.PUB}), source_ips=("10.0.0.0/8",))


@pytest.mark.parametrize(
    ("version", "users", "policies"),
    [
        pytest.param(0, [], {}, id="empty"),
        pytest.param(3, [ALICE], {}, id="a-user-without-a-policy"),
        pytest.param(7, [ALICE, BOB], {"alice": [PUB_ORDERS, SUB_ALL, GROUP_G]}, id="users-and-a-policy"),
        pytest.param(
            9,
            [User("carol", "s", UserType.NORMAL, UserStatus.DISABLE)],
            {"carol": [FROM_10, DENY_ORDERS]},
            id="disabled-ips-deny",
        ),
    ],
)
def test_a_snapshot_round_trips_through_its_wire_form(version, users, policies):
    wire = snapshot_wire(version, users, policies)
    back = snapshot_from_wire(wire)
    assert back.version == version
    assert dict(back.users) == {u.username: u for u in users}
    assert {k: set(v) for k, v in back.policies.items()} == {k: set(v) for k, v in policies.items()}
    assert all(u["secretKey"] == next(x.secret_key for x in users if x.username == u["username"]) for u in wire["users"])


GOOD = snapshot_wire(1, [ALICE], {"alice": [PUB_ORDERS]})


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param({**GOOD, "version": -1}, id="negative-version"),
        pytest.param({**GOOD, "version": True}, id="boolean-version"),
        pytest.param({**GOOD, "version": "1"}, id="text-version"),
        pytest.param({k: v for k, v in GOOD.items() if k != "users"}, id="no-users"),
        pytest.param({**GOOD, "users": [{"username": "x"}]}, id="user-without-secret"),
        pytest.param({**GOOD, "users": [{**GOOD["users"][0], "userType": "Root"}]}, id="unknown-user-type"),
        pytest.param(
            {**GOOD, "policies": [{"username": "alice", "entries": [{"resource": "Topic:", "actions": ["Pub"]}]}]}, id="bad-entry"
        ),
        pytest.param({**GOOD, "policies": None}, id="policies-not-a-list"),
    ],
)
def test_a_malformed_snapshot_is_refused(wire):
    with pytest.raises(ValueError):
        snapshot_from_wire(wire)


def _snap(users, policies) -> AclSnapshot:
    return AclSnapshot(1, {u.username: u for u in users}, {k: tuple(v) for k, v in policies.items()})


ORDERS, OTHER, G = Resource.topic("Orders"), Resource.topic("Other"), Resource.group("%RETRY%G")
KNOWN = [ORDERS, OTHER, G]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS]}),
            _snap([ALICE], {"alice": [PUB_ORDERS, SUB_ALL]}),
            [],
            id="granting-locks-nobody-out",
        ),
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS, SUB_ALL]}),
            _snap([ALICE], {"alice": [PUB_ORDERS]}),
            [("alice", "Topic:Orders", "Sub"), ("alice", "Topic:Other", "Sub")],
            id="a-revoked-wildcard",
        ),
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS, GROUP_G]}),
            _snap([], {}),
            [("alice", "Group:G", "Sub"), ("alice", "Topic:Orders", "Pub")],
            id="a-deleted-user",
        ),
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS, SUB_ALL]}),
            _snap([ALICE], {"alice": [PUB_ORDERS, SUB_ALL, DENY_ORDERS]}),
            [("alice", "Topic:Orders", "Pub"), ("alice", "Topic:Orders", "Sub")],
            id="a-deny-wins",
        ),
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS]}),
            _snap([User("alice", "", status=UserStatus.DISABLE)], {"alice": [PUB_ORDERS]}),
            [("alice", "Topic:Orders", "Pub")],
            id="a-disabled-user",
        ),
        pytest.param(
            _snap([BOB], {}),
            _snap([User("bob", "", UserType.NORMAL)], {}),
            [
                ("bob", r.key, a)
                for r, a in sorted(
                    [(ORDERS, "Pub"), (ORDERS, "Sub"), (OTHER, "Pub"), (OTHER, "Sub"), (G, "Sub")], key=lambda x: (x[0].key, x[1])
                )
            ],
            id="a-super-user-made-normal",
        ),
        pytest.param(
            _snap([ALICE], {"alice": [PUB_ORDERS]}),
            _snap([ALICE], {"alice": [FROM_10]}),
            [],
            id="narrowed-to-source-ips-is-still-allowed-from-them",
        ),
        pytest.param(_snap([], {}), _snap([ALICE], {"alice": [PUB_ORDERS]}), [], id="a-new-user"),
    ],
)
def test_lockouts_name_what_a_change_takes_away(before, after, expected):
    found = lockouts(before, after, KNOWN)
    assert [(lo.username, lo.resource, lo.action) for lo in found] == expected
    assert all(lo.reason for lo in found)


@pytest.mark.unit
@pytest.mark.parametrize(
    "signed, now, allowed",
    [(0, 0, True), (0, 60_000, True), (0, 60_001, False), (60_001, 0, False), (1_000, 0, True)],
    ids=["same instant", "at the window's edge", "past it", "dated ahead past it", "dated ahead within it"],
)
def test_a_signature_is_judged_by_its_date_against_the_window(signed, now, allowed):
    assert dated(signed, now, 60_000).allowed is allowed
