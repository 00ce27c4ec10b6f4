"""ACL 2.0 users and policies of a cluster (issue 39; docs/acl.md): mqadmin's createUser, updateUser,
deleteUser, createAcl, updateAcl, deleteAcl. The one way in: REST, rmqha (over REST) and the dashboard
call these.

Each change is load → decide → store → tell: the cluster's version row is locked first
(``SELECT ... FOR UPDATE``, so one cluster's changes take turns), its users and policies are read, the
change is made on the pure snapshot (mqrules/acl.py) and previewed (``lockouts``: what users could do on
the cluster's known topics and groups before and cannot after), then the rows, the raised version and
the audit record are written in that transaction; after commit the whole snapshot is pushed to the
cluster's brokers (``acl_update``; every registration answer repeats it, so a lost push only delays).
``dry_run``: the same decision and preview, nothing written. Secret keys: encrypted at rest
(controlplane/secretbox.py), answered once by createUser, never in an audit record or a log line.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from django.db import transaction

from controlplane import audit, secretbox
from mqrules import acl as rules
from mqrules.codes import ResponseCode as C

from . import acl_selectors as selectors
from . import notify
from .models import AclPolicy, AclUser, AclVersion

log = logging.getLogger(__name__)

FRAME = "acl_update"  # the push: the cluster's whole snapshot (mqrules.acl.snapshot_wire)


class AclRefused(Exception):
    """Nothing was changed: the code, why, the HTTP status, and field errors for a 400."""

    def __init__(self, code: C, detail: str, http_status: int, fields: dict | None = None):
        super().__init__(detail)
        self.code, self.detail, self.http_status, self.fields = code, detail, http_status, fields


@dataclass(frozen=True)
class AclChange:
    applied: bool
    version: int  # the cluster's version after the change (a dry run: as it is)
    lockouts: list[rules.Lockout]
    user: dict | None = None  # selectors.user_dict of the user changed (no secret)
    policy: dict | None = None  # selectors.policy_dict of the policy after the change (None: gone)
    password: str | None = None  # createUser, applied: the secret key, shown this once

    def answer(self, shows: tuple[str, ...] = ("user", "policy")) -> dict:
        """As REST and the dashboard answer it: applied, the version, the lockouts; once applied, what
        ``shows`` names as it is now, and createUser's secret key this once. A dry run names nothing
        that does not exist (what was asked is what it would be)."""
        body: dict = {"applied": self.applied, "version": self.version, "lockouts": selectors.lockout_dicts(self.lockouts)}
        if self.applied:
            body |= {name: getattr(self, name) for name in shows}
            if self.password is not None:
                body["password"] = self.password
        return body


# --- the flow every change shares ----------------------------------------------------------------------


def _change(
    cluster: str,
    action: str,
    actor: str,
    dry_run: bool,
    decide: Callable[[selectors.ClusterAcl], rules.AclSnapshot],
    store: Callable[[selectors.ClusterAcl], None],
    params: dict,
) -> tuple[selectors.ClusterAcl, int, list[rules.Lockout]]:
    """Lock, load, ``decide`` (the snapshot after; raises AclRefused), preview; unless ``dry_run``:
    ``store``, raise the version, audit, push on commit. Returns what was loaded, the version, the lockouts."""
    with transaction.atomic():
        row = None if dry_run else _locked_version(cluster)
        state = selectors.cluster_acl(cluster)
        after = decide(state)
        found = rules.lockouts(state.snapshot, after, selectors.known_resources(cluster))
        if dry_run:
            return state, state.version, found
        store(state)
        row.version += 1
        row.save(update_fields=["version", "updated_at"])
        audit.record(
            actor,
            action,
            cluster_name=cluster,
            params=params,
            after={"version": row.version, "lockouts": [selectors.lockout_dict(lo) for lo in found]},
        )
        transaction.on_commit(partial(push, cluster))
    return state, row.version, found


def _locked_version(cluster: str) -> AclVersion:
    AclVersion.objects.bulk_create([AclVersion(cluster_name=cluster)], ignore_conflicts=True)
    return AclVersion.objects.select_for_update().get(cluster_name=cluster)


def push(cluster: str) -> int:
    """Send the cluster's snapshot to each of its brokers with a websocket open (best effort)."""
    wire = selectors.snapshot_for(cluster)
    if wire is None:
        return 0
    return notify.push(cluster, selectors.broker_addrs(cluster), FRAME, wire)


def _keys_needed() -> None:
    """Refuse before anything changes when there is no key to encrypt a secret key with."""
    try:
        secretbox.check()
    except secretbox.SecretsUnavailable as exc:
        raise AclRefused(C.SYSTEM_ERROR, str(exc), 503) from None


def _user_of(state: selectors.ClusterAcl, username: str) -> AclUser:
    row = state.rows.get(username)
    if row is None:
        raise AclRefused(C.USER_NOT_EXIST, f"user {username} does not exist in cluster {state.cluster}", 404)
    return row


def _with_user(snapshot: rules.AclSnapshot, user: rules.User | None, username: str) -> rules.AclSnapshot:
    users = {k: v for k, v in snapshot.users.items() if k != username}
    policies = dict(snapshot.policies)
    if user is None:
        policies.pop(username, None)
    else:
        users[username] = user
    return replace(snapshot, users=users, policies=policies)


def _with_policy(snapshot: rules.AclSnapshot, username: str, entries: Sequence[rules.PolicyEntry]) -> rules.AclSnapshot:
    policies = {k: v for k, v in snapshot.policies.items() if k != username}
    if entries:
        policies[username] = tuple(entries)
    return replace(snapshot, policies=policies)


# --- users ---------------------------------------------------------------------------------------------


def create_user(
    cluster: str,
    username: str,
    password: str | None,
    user_type: rules.UserType = rules.UserType.NORMAL,
    user_status: rules.UserStatus = rules.UserStatus.ENABLE,
    *,
    actor: str,
    dry_run: bool = False,
) -> AclChange:
    """mqadmin createUser: a new user; its secret key is ``password``, or one generated when None."""
    _keys_needed()
    secret = password if password is not None else secrets.token_urlsafe(24)
    user = rules.User(username, "", user_type, user_status)

    def decide(state: selectors.ClusterAcl) -> rules.AclSnapshot:
        if username in state.rows:
            raise AclRefused(C.INVALID_PARAMETER, f"user {username} already exists in cluster {cluster}", 409)
        return _with_user(state.snapshot, user, username)

    def store(state: selectors.ClusterAcl) -> None:
        AclUser.objects.create(
            cluster_name=cluster,
            username=username,
            secret_key_encrypted=secretbox.encrypt(secret),
            user_type=user_type.value,
            user_status=user_status.value,
        )

    params = {
        "username": username,
        "userType": user_type.value,
        "userStatus": user_status.value,
        "passwordGiven": password is not None,
    }
    _, version, found = _change(cluster, "createUser", actor, dry_run, decide, store, params)
    shown = {"username": username, "userType": user_type.value, "userStatus": user_status.value}
    if dry_run:
        return AclChange(False, version, found, user=shown)
    return AclChange(True, version, found, user=selectors.user_dict(selectors.user_row(cluster, username)), password=secret)


def update_user(
    cluster: str,
    username: str,
    *,
    password: str | None = None,
    user_type: rules.UserType | None = None,
    user_status: rules.UserStatus | None = None,
    actor: str,
    dry_run: bool = False,
) -> AclChange:
    """mqadmin updateUser: a new secret key, type or status (what is not given stays)."""
    if password is not None:
        _keys_needed()

    def decide(state: selectors.ClusterAcl) -> rules.AclSnapshot:
        _user_of(state, username)
        now = state.snapshot.users[username]
        return _with_user(state.snapshot, rules.User(username, "", user_type or now.type, user_status or now.status), username)

    def store(state: selectors.ClusterAcl) -> None:
        row = state.rows[username]
        if password is not None:
            row.secret_key_encrypted = secretbox.encrypt(password)
        if user_type is not None:
            row.user_type = user_type.value
        if user_status is not None:
            row.user_status = user_status.value
        row.save()

    params = {
        "username": username,
        **({"userType": user_type.value} if user_type else {}),
        **({"userStatus": user_status.value} if user_status else {}),
        "passwordChanged": password is not None,
    }
    state, version, found = _change(cluster, "updateUser", actor, dry_run, decide, store, params)
    if dry_run:
        row = state.rows[username]
        shown = selectors.user_dict(row) | {
            k: v.value for k, v in (("userType", user_type), ("userStatus", user_status)) if v is not None
        }
        return AclChange(False, version, found, user=shown)
    return AclChange(True, version, found, user=selectors.user_dict(selectors.user_row(cluster, username)))


def delete_user(cluster: str, username: str, *, actor: str, dry_run: bool = False) -> AclChange:
    """mqadmin deleteUser: the user and its policy."""

    def decide(state: selectors.ClusterAcl) -> rules.AclSnapshot:
        _user_of(state, username)
        return _with_user(state.snapshot, None, username)

    def store(state: selectors.ClusterAcl) -> None:
        state.rows[username].delete()

    state, version, found = _change(cluster, "deleteUser", actor, dry_run, decide, store, {"username": username})
    return AclChange(not dry_run, version, found, user=selectors.user_dict(state.rows[username]))


# --- policies ------------------------------------------------------------------------------------------


def subject_username(subject: str) -> str:
    """``User:alice`` or ``alice`` → ``alice`` (RocketMQ's subject key; users are the only subjects)."""
    return subject[len("User:") :] if subject.startswith("User:") else subject


def _merged(old: Iterable[rules.PolicyEntry], new: Iterable[rules.PolicyEntry]) -> list[rules.PolicyEntry]:
    """RocketMQ's ``Acl.updatePolicy``: an entry of ``new`` replaces the one for the same resource."""
    by_resource = {e.resource.key: e for e in old}
    by_resource.update({e.resource.key: e for e in new})
    if len(by_resource) > rules.MAX_ENTRIES:
        raise AclRefused(
            C.INVALID_PARAMETER,
            f"a policy holds at most {rules.MAX_ENTRIES} entries (one per resource)",
            400,
            {"entries": [f"at most {rules.MAX_ENTRIES} entries, one per resource, with those the policy has"]},
        )
    return list(by_resource.values())


def _policy_change(
    cluster: str, username: str, action: str, actor: str, dry_run: bool, params: dict, entries_after: Callable
) -> AclChange:
    """A change of one user's policy: ``entries_after(state, entries_now)`` decides its entries after."""
    decided: list[list[rules.PolicyEntry]] = []

    def decide(state: selectors.ClusterAcl) -> rules.AclSnapshot:
        _user_of(state, username)
        entries = entries_after(state, list(state.snapshot.policies.get(username, ())))
        decided.append(entries)
        return _with_policy(state.snapshot, username, entries)

    def store(state: selectors.ClusterAcl) -> None:
        row = state.rows[username]
        if decided[0]:
            AclPolicy.objects.update_or_create(user=row, defaults={"entries": [rules.entry_as_dict(e) for e in decided[0]]})
        else:
            AclPolicy.objects.filter(user=row).delete()

    _, version, found = _change(cluster, action, actor, dry_run, decide, store, params)
    policy = selectors.policy_dict(username, decided[0]) if decided[0] else None
    return AclChange(not dry_run, version, found, policy=policy)


def create_acl(
    cluster: str, subject: str, entries: Sequence[rules.PolicyEntry], *, actor: str, dry_run: bool = False
) -> AclChange:
    """mqadmin createAcl: the subject's policy, made or (as RocketMQ does) merged into, one entry per resource."""
    username = subject_username(subject)
    params = {"subject": f"User:{username}", "entries": [rules.entry_as_dict(e) for e in entries]}
    return _policy_change(cluster, username, "createAcl", actor, dry_run, params, lambda state, now: _merged(now, entries))


def update_acl(
    cluster: str, subject: str, entries: Sequence[rules.PolicyEntry], *, actor: str, dry_run: bool = False
) -> AclChange:
    """mqadmin updateAcl: entries of an existing policy replaced (same resource) or added."""
    username = subject_username(subject)

    def after(state: selectors.ClusterAcl, now: list[rules.PolicyEntry]) -> list[rules.PolicyEntry]:
        if not now:
            raise AclRefused(C.POLICY_NOT_EXIST, f"{username} has no policy in cluster {cluster}: createAcl first", 404)
        return _merged(now, entries)

    params = {"subject": f"User:{username}", "entries": [rules.entry_as_dict(e) for e in entries]}
    return _policy_change(cluster, username, "updateAcl", actor, dry_run, params, after)


def delete_acl(
    cluster: str, subject: str, resources: Sequence[rules.Resource] = (), *, actor: str, dry_run: bool = False
) -> AclChange:
    """mqadmin deleteAcl: the subject's whole policy, or its entries for ``resources``."""
    username = subject_username(subject)
    keys = {r.key for r in resources}

    def after(state: selectors.ClusterAcl, now: list[rules.PolicyEntry]) -> list[rules.PolicyEntry]:
        if not now:
            raise AclRefused(C.POLICY_NOT_EXIST, f"{username} has no policy in cluster {cluster}", 404)
        missing = sorted(keys - {e.resource.key for e in now})
        if missing:
            raise AclRefused(C.POLICY_NOT_EXIST, f"{username}'s policy has no entry for {', '.join(missing)}", 404)
        return [e for e in now if keys and e.resource.key not in keys]

    params = {"subject": f"User:{username}", "resources": sorted(keys)}
    return _policy_change(cluster, username, "deleteAcl", actor, dry_run, params, after)


# --- keys ----------------------------------------------------------------------------------------------


def rotate_keys(batch: int = 500) -> int:
    """Every stored secret key encrypted again with the first key of ``ACL_SECRET_KEYS`` (manage.py
    rotate_acl_keys); the secrets and the snapshots do not change. Returns how many were rewritten."""
    done = 0
    ids = list(AclUser.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), batch):
        with transaction.atomic():
            for row in AclUser.objects.select_for_update().filter(pk__in=ids[start : start + batch]):
                AclUser.objects.filter(pk=row.pk).update(secret_key_encrypted=secretbox.rotate(row.secret_key_encrypted))
                done += 1
    return done
