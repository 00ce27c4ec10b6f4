"""Reads of ACL 2.0 users and policies (nameserver/acl.py changes them): listUser, listAcl, the pure
snapshot a change is decided on, the cluster's known topics and groups a change is previewed over, and
the snapshot brokers get (``snapshot_for``: with the secret keys decrypted, cached per cluster and
version, as every registration answer carries it)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from threading import Lock

from controlplane import secretbox
from mqrules import acl as rules

from . import broker_status
from .models import AclUser, AclVersion, BrokerMember, TopicQueue

log = logging.getLogger(__name__)

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


@dataclass(frozen=True)
class ClusterAcl:
    """A cluster's users (rows, by username) and its snapshot without secrets (what changes decide on)."""

    cluster: str
    version: int
    rows: dict[str, AclUser]
    snapshot: rules.AclSnapshot


def _entries(raw: object, where: str) -> tuple[rules.PolicyEntry, ...]:
    entries, problems = rules.parse_entries(raw)
    if problems:  # only nameserver/acl.py writes them, from parse_entries' own entries
        raise ValueError(f"the stored policy of {where} is not one: {problems}")
    return tuple(entries)


def cluster_acl(cluster: str) -> ClusterAcl:
    version = AclVersion.objects.filter(cluster_name=cluster).values_list("version", flat=True).first() or 0
    rows = {u.username: u for u in AclUser.objects.filter(cluster_name=cluster).select_related("policy")}
    users = {name: _user(row, "") for name, row in rows.items()}
    policies = {name: _entries(row.policy.entries, name) for name, row in rows.items() if _has_policy(row)}
    return ClusterAcl(cluster, version, rows, rules.AclSnapshot(version, users, policies))


def _has_policy(row: AclUser) -> bool:
    try:
        row.policy  # noqa: B018 - the reverse one-to-one raises when there is none
    except AclUser.policy.RelatedObjectDoesNotExist:
        return False
    return True


def _user(row: AclUser, secret: str) -> rules.User:
    return rules.User(row.username, secret, rules.UserType(row.user_type), rules.UserStatus(row.user_status))


def user_row(cluster: str, username: str) -> AclUser | None:
    return AclUser.objects.filter(cluster_name=cluster, username=username).first()


def users(cluster: str, contains: str = "") -> list[AclUser]:
    """listUser: the cluster's users whose name contains ``contains``."""
    return list(AclUser.objects.filter(cluster_name=cluster, username__contains=contains))


def policies(cluster: str, subject: str = "", resource: str = "") -> list[dict]:
    """listAcl: the policies whose subject contains ``subject``, each with its entries whose resource
    contains ``resource`` (a policy with none of them is left out), as RocketMQ's filters."""
    found = []
    rows = AclUser.objects.filter(cluster_name=cluster, policy__isnull=False, username__contains=subject).select_related("policy")
    for row in rows:
        entries = [e for e in _entries(row.policy.entries, row.username) if resource in e.resource.key]
        if entries:
            found.append(policy_dict(row.username, entries))
    return found


def version(cluster: str) -> int:
    return AclVersion.objects.filter(cluster_name=cluster).values_list("version", flat=True).first() or 0


def _stamp(cluster: str) -> tuple:
    """What tells a cached snapshot from a newer one: the version, and when it was raised (a database
    made anew counts from 1 again)."""
    return AclVersion.objects.filter(cluster_name=cluster).values_list("version", "updated_at").first() or (0, None)


def known_resources(cluster: str) -> list[rules.Resource]:
    """The cluster's topics (its brokers' registrations) and consumer groups (their retry topics, and
    the groups its brokers report offsets of), for a change's preview."""
    names = set(TopicQueue.objects.filter(group__cluster_name=cluster).values_list("topic", flat=True).distinct())
    groups = {n for n in names if n.startswith(RETRY_PREFIX)}
    groups |= {g["group"] for g in broker_status.consumer_groups(cluster)}
    topics = {n for n in names if not n.startswith((RETRY_PREFIX, DLQ_PREFIX))}
    return [*(rules.Resource.topic(t) for t in sorted(topics)), *{rules.Resource.group(g) for g in sorted(groups)}]


def broker_addrs(cluster: str) -> list[str]:
    return list(BrokerMember.objects.filter(group__cluster_name=cluster).values_list("broker_addr", flat=True))


# --- the snapshot brokers get ------------------------------------------------------------------------

_cache: dict[str, tuple[tuple, dict]] = {}
_cache_lock = Lock()


def snapshot_for(cluster: str) -> dict | None:
    """The cluster's snapshot as ``rules.snapshot_wire`` gives it (secret keys in clear: brokers sign with
    them), or None when a stored secret cannot be decrypted (its key left RMQHA_ACL_KEYS: the brokers keep
    what they have, the log says so). One query when nothing changed since this process last built it."""
    stamp = _stamp(cluster)
    with _cache_lock:
        hit = _cache.get(cluster)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    state = cluster_acl(cluster)
    try:
        wire = rules.snapshot_wire(
            state.version,
            [_user(row, secretbox.decrypt(row.secret_key_encrypted)) for row in state.rows.values()],
            state.snapshot.policies,
        )
    except secretbox.SecretsUnavailable as exc:
        log.error("the ACL snapshot of cluster %s cannot be built: %s", cluster, exc)
        return None
    with _cache_lock:
        if len(_cache) > 1000:
            _cache.clear()
        if state.version == stamp[0]:  # else it changed meanwhile: the next call builds it again
            _cache[cluster] = (stamp, wire)
    return wire


def forget_cached_snapshots() -> None:
    with _cache_lock:
        _cache.clear()


# --- as the API answers -------------------------------------------------------------------------------


def user_dict(row: AclUser) -> dict:
    """A user as listUser answers it: never its secret key."""
    return {
        "username": row.username,
        "userType": row.user_type,
        "userStatus": row.user_status,
        "createdAt": row.created_at.isoformat(),
        "updatedAt": row.updated_at.isoformat(),
    }


def policy_dict(username: str, entries: Iterable[rules.PolicyEntry]) -> dict:
    return {"subject": f"User:{username}", "username": username, "entries": [rules.entry_as_dict(e) for e in entries]}


def lockout_dict(lo: rules.Lockout) -> dict:
    return {"username": lo.username, "resource": lo.resource, "action": lo.action, "reason": lo.reason}


def lockout_dicts(found: Sequence[rules.Lockout]) -> list[dict]:
    return [lockout_dict(lo) for lo in found]
