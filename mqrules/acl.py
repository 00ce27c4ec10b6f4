"""RocketMQ's access control (ACL 2.0, apache/rocketmq's ``auth`` module): users, policies, and the two
checks a broker makes of every request (issue 39; docs/acl.md). Pure: the control plane validates and
previews policies with it, the brokers authenticate and authorize with it.

- **Authentication** (``DefaultAuthenticationHandler``): the request names a user (its access key) and
  carries an HMAC-SHA1 of its content keyed by the user's secret key. gRPC signs the
  ``x-mq-date-time`` header (``authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time,
  Signature=<hex>``); remoting signs its header fields' values sorted by name, then the body
  (``AclUtils.combineRequestContent``; ``AccessKey`` / ``Signature`` fields, Base64). An unknown or
  disabled user, or a wrong signature: UNAUTHORIZED. Beyond RocketMQ: a gRPC date outside
  ``skew_ms`` of the broker's clock is refused too, so a captured header cannot be replayed later.
- **Authorization** (``UserAuthorizationHandler``, ``AclAuthorizationHandler``): a Super user may do
  anything; a Normal user's policy entries that match the resource, one of the actions and the source
  IP are ordered most specific first (a resource type before Any; LITERAL, then PREFIXED by longer
  prefix, then ANY) and the first decides; among equally specific entries Deny wins (RocketMQ's
  comparator says so in its comment). No entry matched: denied.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

MAX_NAME = 255  # a resource's or a user's name (the REST rule for topic and group names)
MAX_SECRET = 255
DEFAULT_SKEW_MS = 15 * 60 * 1000  # a signed gRPC date further than this from the broker's clock is refused
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"  # x-mq-date-time
GRPC_SCHEME = "MQv2-HMAC-SHA1"


class Action(Enum):
    """``org.apache.rocketmq.common.action.Action`` (Unknown aside)."""

    # Members are singletons compared by identity: hashed as objects (C), not by name (Enum's Python
    # __hash__), since every broker call hashes them in its judgement's cache key.
    __hash__ = object.__hash__

    ALL = "All"
    ANY = "Any"  # asked by a request that any action allows (a route query)
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"

    @classmethod
    def named(cls, name: str) -> Action:
        """By RocketMQ's name, any case; ValueError otherwise."""
        for a in cls:
            if a.value.lower() == name.strip().lower():
                return a
        raise ValueError(f"unknown action {name!r} (one of {', '.join(a.value for a in cls if a is not cls.ANY)})")


class ResourceType(Enum):
    __hash__ = object.__hash__  # as Action's

    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(Enum):
    __hash__ = object.__hash__  # as Action's

    ANY = "ANY"
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Decision(Enum):
    ALLOW = "Allow"
    DENY = "Deny"


class UserType(Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(Enum):
    ENABLE = "enable"
    DISABLE = "disable"


@dataclass(frozen=True)
class Resource:
    """``Topic:Orders`` (LITERAL), ``Topic:Ord*`` (PREFIXED), ``Topic:*`` (ANY), ``*`` (any resource)."""

    type: ResourceType
    name: str | None = None
    pattern: ResourcePattern = ResourcePattern.LITERAL

    @classmethod
    def parse(cls, key: str) -> Resource:
        """RocketMQ's ``Resource.of(resourceKey)``; ValueError naming what is wrong."""
        if not isinstance(key, str) or not key.strip():
            raise ValueError("a resource is Type:name, Type:prefix*, Type:* or *")
        key = key.strip()
        if key == "*":
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        kind, sep, name = key.partition(":")
        types = {t.value.lower(): t for t in ResourceType if t is not ResourceType.ANY}
        if not sep or kind.lower() not in types:
            raise ValueError(f"{key!r}: a resource is Cluster:, Namespace:, Topic: or Group: and a name, or *")
        if not name or len(name) > MAX_NAME or any(c.isspace() or c == ":" for c in name):
            raise ValueError(f"{key!r}: the name must be 1-{MAX_NAME} characters without spaces or ':'")
        if name == "*":
            return cls(types[kind.lower()], None, ResourcePattern.ANY)
        if name.endswith("*"):
            prefix = name[:-1]
            if not prefix or "*" in prefix:
                raise ValueError(f"{key!r}: '*' may only end a prefix")
            return cls(types[kind.lower()], prefix, ResourcePattern.PREFIXED)
        if "*" in name:
            raise ValueError(f"{key!r}: '*' may only end a prefix")
        return cls(types[kind.lower()], name, ResourcePattern.LITERAL)

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        """A group, named without a retry or dead-letter topic's prefix (``Resource.ofGroup``)."""
        for prefix in ("%RETRY%", "%DLQ%"):
            if name.startswith(prefix):
                name = name[len(prefix) :]
        return cls(ResourceType.GROUP, name)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        return f"{self.type.value}:{self.name}{'*' if self.pattern is ResourcePattern.PREFIXED else ''}"

    def matches(self, asked: Resource) -> bool:
        """Whether this (a policy's) resource covers ``asked`` (a request's, always LITERAL)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not asked.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.LITERAL:
            return asked.name == self.name
        return asked.name is not None and self.name is not None and asked.name.startswith(self.name)

    def specificity(self) -> tuple[int, int]:
        """Higher first: a resource type before Any; LITERAL, then PREFIXED (longer first), then ANY."""
        if self.type is ResourceType.ANY:
            return (0, 0)
        if self.pattern is ResourcePattern.LITERAL:
            return (3, 0)
        if self.pattern is ResourcePattern.PREFIXED:
            return (2, len(self.name or ""))
        return (1, 0)


def in_range(ip: str, allowed: str) -> bool:
    """``IPAddressUtils.isIPInRange``: ``allowed`` is one address or a CIDR range."""
    try:
        address = ipaddress.ip_address(ip)
        if "/" not in allowed:
            return address == ipaddress.ip_address(allowed)
        return address in ipaddress.ip_network(allowed, strict=False)
    except ValueError:
        return False


def check_source_ip(value: str) -> str:
    """A policy's source IP (one address or a CIDR range), normalised; ValueError otherwise."""
    try:
        if "/" in value:
            return str(ipaddress.ip_network(value.strip(), strict=False))
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ValueError(f"{value!r}: a source IP is an address or a CIDR range (10.0.0.0/8)") from None


@dataclass(frozen=True)
class PolicyEntry:
    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[str, ...] = ()  # empty: from anywhere

    def matches(self, resource: Resource, actions: Iterable[Action], source_ip: str | None) -> bool:
        if not self.resource.matches(resource) or not self.actions:
            return False
        asked = set(actions)
        if Action.ANY not in asked and not (Action.ALL in self.actions or asked & self.actions):
            return False
        if not self.source_ips:
            return True
        return source_ip is not None and any(in_range(source_ip, allowed) for allowed in self.source_ips)


@dataclass(frozen=True)
class User:
    username: str  # the access key clients sign with
    secret_key: str = field(repr=False)
    type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLE


class Verdict(Enum):
    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"  # UNAUTHORIZED (40100): unknown or disabled user, bad signature
    FORBIDDEN = "forbidden"  # FORBIDDEN (40300): no policy allows it, or one denies it


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    detail: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOWED


def authorize(
    user: User | None, entries: Sequence[PolicyEntry], resource: Resource, actions: Iterable[Action], source_ip: str | None
) -> Judgement:
    """May ``user`` do ``actions`` on ``resource`` from ``source_ip``, by its policy ``entries``?"""
    if user is None:
        return Judgement(Verdict.UNAUTHENTICATED, "user not found")
    if user.status is UserStatus.DISABLE:
        return Judgement(Verdict.UNAUTHENTICATED, f"user {user.username} is disabled")
    if user.type is UserType.SUPER:
        return Judgement(Verdict.ALLOWED)
    actions = tuple(actions)
    matched = [e for e in entries if e.matches(resource, actions, source_ip)]
    who = f"{user.username} has no permission to access {resource.key} from {source_ip or 'an unknown address'}"
    if not matched:
        return Judgement(Verdict.FORBIDDEN, f"{who}: no matched policies")
    first = max(matched, key=lambda e: (e.resource.specificity(), e.decision is Decision.DENY))
    if first.decision is Decision.DENY:
        return Judgement(Verdict.FORBIDDEN, f"{who}: the decision is deny ({first.resource.key})")
    return Judgement(Verdict.ALLOWED)


# --- authentication -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credential:
    access_key: str
    signature: str  # as the request carries it: hex (gRPC) or Base64 (remoting)


def parse_grpc_authorization(header: str) -> Credential:
    """``MQv2-HMAC-SHA1 Credential=<AK>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>``;
    ValueError naming what is wrong (the request is then UNAUTHORIZED)."""
    scheme, sep, rest = header.strip().partition(" ")
    if not sep or scheme != GRPC_SCHEME:
        raise ValueError(f"the authorization header must start with {GRPC_SCHEME}")
    items: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq:
            raise ValueError("the authorization header's items are key=value")
        items[key] = value
    access_key = items.get("Credential", "").split("/", 1)[0]
    signature = items.get("Signature", "")
    if not access_key or not signature:
        raise ValueError("the authorization header names no Credential or no Signature")
    return Credential(access_key, signature)


def grpc_signature(secret_key: str, date_time: str) -> str:
    """What the official clients send: hex HMAC-SHA1 of the x-mq-date-time value."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def remoting_content(fields: Mapping[str, str], body: bytes | None) -> bytes:
    """What a remoting client signs: its header fields' values but the Signature, sorted by field name,
    then the body (``AclUtils.combineRequestContent``)."""
    values = "".join(v for k, v in sorted(fields.items()) if k != "Signature")
    return values.encode() + (body or b"")


def remoting_signature(secret_key: str, content: bytes) -> str:
    """``AclSigner.calSignature``: Base64 HMAC-SHA1."""
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


def signed_at_ms(date_time: str) -> int:
    """The x-mq-date-time value as ms since the epoch; ValueError when it is not one."""
    return int(datetime.strptime(date_time, DATE_TIME_FORMAT).replace(tzinfo=UTC).timestamp() * 1000)


def authenticate_grpc(
    users: Mapping[str, User], header: str | None, date_time: str | None, now_ms: int, skew_ms: int = DEFAULT_SKEW_MS
) -> tuple[Judgement, User | None]:
    """A gRPC call's credentials against the ``users`` (by access key): the judgement, and the user."""
    if not header:
        return Judgement(Verdict.UNAUTHENTICATED, "the call carries no authorization header"), None
    try:
        credential = parse_grpc_authorization(header)
        if not date_time:
            raise ValueError("the call carries no x-mq-date-time")
        signed = signed_at_ms(date_time)
    except ValueError as exc:
        return Judgement(Verdict.UNAUTHENTICATED, str(exc)), None
    user = users.get(credential.access_key)
    return _signed(
        user, credential.access_key, grpc_signature, date_time, credential.signature.lower(), signed, now_ms, skew_ms
    ), user


def _signed(
    user: User | None,
    access_key: str,
    sign: Callable[[str, Any], str],
    content: str | bytes,
    signature: str,
    signed: int | None,
    now_ms: int,
    skew_ms: int,
) -> Judgement:
    """The signature ``sign(secret, content)`` of ``user`` against the one carried (and, for a dated
    one, the date within ``skew_ms``)."""
    if user is None:
        return Judgement(Verdict.UNAUTHENTICATED, f"user {access_key} is not found")
    if user.status is UserStatus.DISABLE:
        return Judgement(Verdict.UNAUTHENTICATED, f"user {user.username} is disabled")
    if not hmac.compare_digest(sign(user.secret_key, content), signature):
        return Judgement(Verdict.UNAUTHENTICATED, "check signature failed")
    if signed is not None:
        return dated(signed, now_ms, skew_ms)
    return Judgement(Verdict.ALLOWED)


def dated(signed_ms: int, now_ms: int, skew_ms: int) -> Judgement:
    """A signature dated ``signed_ms``, judged at ``now_ms``: refused beyond ``skew_ms`` either way (a
    replayed header is refused once its date is out of the window)."""
    if abs(now_ms - signed_ms) > skew_ms:
        return Judgement(Verdict.UNAUTHENTICATED, f"the signed date is more than {skew_ms // 1000} s from the broker's clock")
    return Judgement(Verdict.ALLOWED)


def authenticate_remoting(
    users: Mapping[str, User], fields: Mapping[str, str], body: bytes | None
) -> tuple[Judgement, User | None]:
    """A remoting request's AccessKey / Signature fields against the ``users``: the judgement, and the user.
    (Remoting signs no date: RocketMQ's remoting requests carry none to bound.)"""
    access_key, signature = fields.get("AccessKey"), fields.get("Signature")
    if not access_key or not signature:
        return Judgement(Verdict.UNAUTHENTICATED, "the request carries no AccessKey or no Signature"), None
    user = users.get(access_key)
    content = remoting_content(fields, body)
    return _signed(user, access_key, remoting_signature, content, signature, None, 0, 0), user


# --- policies as the REST API and rmqha give them ------------------------------------------------------

MAX_ENTRIES = 256
MAX_ITEMS = 64  # resources, actions or source IPs of one entry


def _list_of(raw: object, what: str) -> list:
    if isinstance(raw, str):
        raw = [part for part in raw.split(",") if part.strip()]  # mqadmin's comma-separated form
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"give one or more {what}")
    if len(raw) > MAX_ITEMS:
        raise ValueError(f"at most {MAX_ITEMS} {what}")
    if not all(isinstance(x, str) for x in raw):
        raise ValueError(f"{what} are strings")
    return raw


def parse_entries(raw: object) -> tuple[list[PolicyEntry], dict[str, list[str]]]:
    """``[{"resources" | "resource", "actions", "decision", "sourceIps"}, ...]`` (mqadmin createAcl's -r,
    -a, -d, -i) as policy entries, one per resource: (entries, problems by field). Entries are kept only
    when there is no problem at all, so a policy is taken whole or not at all."""
    if not isinstance(raw, list) or not raw:
        return [], {"entries": ["give one or more policy entries"]}
    if len(raw) > MAX_ENTRIES:
        return [], {"entries": [f"at most {MAX_ENTRIES} entries"]}
    entries: list[PolicyEntry] = []
    problems: dict[str, list[str]] = {}
    for i, item in enumerate(raw):
        where = f"entries[{i}]"
        if not isinstance(item, dict):
            problems.setdefault(where, []).append("an entry is an object")
            continue
        parsed = _parse_entry(item, where, problems)
        entries.extend(parsed)
    return (entries, {}) if not problems else ([], problems)


def _parse_entry(item: dict, where: str, problems: dict[str, list[str]]) -> list[PolicyEntry]:
    def attempt(field_name: str, parse):
        try:
            return parse()
        except ValueError as exc:
            problems.setdefault(f"{where}.{field_name}", []).append(str(exc))
            return None

    raw_resources = item.get("resources", item.get("resource"))
    resources = attempt("resources", lambda: [Resource.parse(r) for r in _list_of(raw_resources, "resources")])
    actions = attempt("actions", lambda: frozenset(Action.named(a) for a in _list_of(item.get("actions"), "actions")))
    if actions is not None and Action.ANY in actions:
        problems.setdefault(f"{where}.actions", []).append("Any is what a request asks, not what a policy grants: use All")
    decision = attempt("decision", lambda: _decision(item.get("decision", "Allow")))
    raw_ips = item.get("sourceIps")
    ips = attempt("sourceIps", lambda: tuple(check_source_ip(ip) for ip in _list_of(raw_ips, "source IPs")) if raw_ips else ())
    if resources is None or actions is None or decision is None or ips is None:
        return []
    return [PolicyEntry(r, actions, decision, ips) for r in resources]


def _decision(raw: object) -> Decision:
    for d in Decision:
        if isinstance(raw, str) and raw.strip().lower() == d.value.lower():
            return d
    raise ValueError("the decision is Allow or Deny")


def entry_as_dict(e: PolicyEntry) -> dict:
    """An entry as the REST API answers it (and ``parse_entries`` takes it back)."""
    return {
        "resource": e.resource.key,
        "actions": sorted(a.value for a in e.actions),
        "decision": e.decision.value,
        "sourceIps": list(e.source_ips),
    }


# --- what the control plane hands the brokers -----------------------------------------------------------
#
# One snapshot per cluster, whole (users with their secret keys, and every user's policy entries), with a
# version the control plane raises in the transaction of each change. Pushed as the ``acl_update`` frame
# and repeated in every registration answer (``acl``), so a lost push only delays; a broker keeps the
# highest version it has seen, in memory only.


@dataclass(frozen=True)
class AclSnapshot:
    version: int = 0
    users: Mapping[str, User] = field(default_factory=dict)  # by username (the access key)
    policies: Mapping[str, tuple[PolicyEntry, ...]] = field(default_factory=dict)  # by username

    def authorize(self, user: User | None, resource: Resource, actions: Iterable[Action], source_ip: str | None) -> Judgement:
        return authorize(user, self.policies.get(user.username, ()) if user else (), resource, actions, source_ip)


def snapshot_wire(version: int, users: Iterable[User], policies: Mapping[str, Iterable[PolicyEntry]]) -> dict:
    """The snapshot as the control plane sends it (``snapshot_from_wire`` takes it back)."""
    return {
        "version": version,
        "users": [
            {"username": u.username, "secretKey": u.secret_key, "userType": u.type.value, "userStatus": u.status.value}
            for u in users
        ],
        "policies": [{"username": name, "entries": [entry_as_dict(e) for e in entries]} for name, entries in policies.items()],
    }


def snapshot_from_wire(raw: Mapping[str, Any]) -> AclSnapshot:
    """A snapshot from its wire form; ValueError when it is not one (the broker then keeps what it has)."""
    try:
        version = raw["version"]
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError("the version is a count")
        users = {
            u["username"]: User(u["username"], u["secretKey"], UserType(u["userType"]), UserStatus(u["userStatus"]))
            for u in raw["users"]
        }
        policies: dict[str, tuple[PolicyEntry, ...]] = {}
        for p in raw["policies"]:
            entries, problems = parse_entries(p["entries"]) if p["entries"] else ([], {})
            if problems:
                raise ValueError(f"the policy of {p['username']}: {problems}")
            policies[p["username"]] = tuple(entries)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an ACL snapshot: {exc!r}") from None
    return AclSnapshot(version, users, policies)


# --- what a change would lock out --------------------------------------------------------------------------

# What a client of a topic or group asks (the brokers' checks, docs/acl.md): previewed for every known one.
PREVIEWED_ACTIONS = {ResourceType.TOPIC: (Action.PUB, Action.SUB), ResourceType.GROUP: (Action.SUB,)}


@dataclass(frozen=True)
class Lockout:
    username: str
    resource: str  # its key: Topic:Orders
    action: str  # Pub, Sub
    reason: str  # why it would be refused after the change


def lockouts(before: AclSnapshot, after: AclSnapshot, resources: Iterable[Resource]) -> list[Lockout]:
    """What users may do before the change and may not after it, for each of the cluster's known
    ``resources`` (topics and groups) and what their clients ask of them, from any address (a policy with
    source IPs is previewed as if the client came from one of them). Sorted, for a stable answer."""
    found: list[Lockout] = []
    resources = list(resources)
    for name, user in before.users.items():
        for resource in resources:
            for action in PREVIEWED_ACTIONS.get(resource.type, ()):
                if not _may(before, user, resource, action):
                    continue
                now = after.users.get(name)
                if now is None:
                    found.append(Lockout(name, resource.key, action.value, "the user is deleted"))
                    continue
                if not _may(after, now, resource, action):
                    judgement = _judge_any_ip(after, now, resource, action)
                    found.append(Lockout(name, resource.key, action.value, judgement.detail))
    return sorted(found, key=lambda lo: (lo.username, lo.resource, lo.action))


def _judge_any_ip(snapshot: AclSnapshot, user: User, resource: Resource, action: Action) -> Judgement:
    """The judgement for the most permissive address the user's entries name (any address when none)."""
    candidates: list[str | None] = [None]
    for e in snapshot.policies.get(user.username, ()):
        for ip in e.source_ips:
            candidates.append(str(ipaddress.ip_network(ip, strict=False).network_address))
    judgements = [snapshot.authorize(user, resource, (action,), ip) for ip in candidates]
    return next((j for j in judgements if j.allowed), judgements[0])


def _may(snapshot: AclSnapshot, user: User, resource: Resource, action: Action) -> bool:
    return _judge_any_ip(snapshot, user, resource, action).allowed
