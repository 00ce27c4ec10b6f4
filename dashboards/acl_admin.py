"""The Access control page's administration (issue 39; docs/acl.md): a cluster's ACL 2.0 users and
policies changed by an operator. Each action is the REST API's: its body checked by the same
serializers (nameserver/acl_serializers.py: a problem per field, ``entries[0].actions``), carried out by
the same service (nameserver/acl.py), which locks the cluster's version, records the audit row (never a
secret) in the change's transaction and pushes the snapshot to the brokers. ``preview`` is the
service's dry run: the same checks and the lockouts (what users could do on the cluster's known topics
and groups before and could not after), nothing written and nothing recorded."""

from __future__ import annotations

from collections.abc import Callable

from mqrules import acl as rules
from mqrules import validation as v
from nameserver import acl
from nameserver.acl_serializers import (
    AclCreateSerializer,
    AclDeleteSerializer,
    UserCreateSerializer,
    UserUpdateSerializer,
)

from .actions import ActionError


def _checked(serializer_class, data: dict, preview: bool) -> dict:
    """``data`` (without ``preview``) as the REST serializer takes it, with ``dryRun`` from ``preview``."""
    body = {k: val for k, val in data.items() if k not in ("preview", "dryRun")}
    checked = serializer_class(data={**body, "dryRun": preview})
    if not checked.is_valid():
        raise ActionError("invalid input", checked.errors)
    return dict(checked.validated_data)


def _username(data: dict) -> str:
    name = data.get("username")
    if (problem := v.name(name)) is not None:
        raise ActionError("invalid input", {"username": [problem]})
    return name


def _answer(run: Callable[[], acl.AclChange]) -> dict:
    """The change's answer as REST words it (applied, version, lockouts; once applied, the user or the
    policy as it is now, and createUser's secret key this once); a refusal as the dashboard's."""
    try:
        change = run()
    except acl.AclRefused as exc:
        raise ActionError(f"{exc.code.value} {exc.code.name}: {exc.detail}", exc.fields, exc.http_status) from exc
    return {"ok": True, "result": "ok" if change.applied else "preview", **change.answer()}


def create_user(actor: str, cluster: str, data: dict, preview: bool) -> dict:
    """createUser: ``username``, ``password`` (absent: one is generated), ``userType``, ``userStatus``."""
    d = _checked(UserCreateSerializer, data, preview)
    return _answer(
        lambda: acl.create_user(
            cluster,
            d["username"],
            d.get("password"),
            rules.UserType(d["userType"]),
            rules.UserStatus(d["userStatus"]),
            actor=actor,
            dry_run=preview,
        )
    )


def update_user(actor: str, cluster: str, data: dict, preview: bool) -> dict:
    """updateUser: ``username`` and at least one of ``password``, ``userType``, ``userStatus``."""
    username = _username(data)
    d = _checked(UserUpdateSerializer, {k: val for k, val in data.items() if k != "username"}, preview)
    return _answer(
        lambda: acl.update_user(
            cluster,
            username,
            password=d.get("password"),
            user_type=rules.UserType(d["userType"]) if "userType" in d else None,
            user_status=rules.UserStatus(d["userStatus"]) if "userStatus" in d else None,
            actor=actor,
            dry_run=preview,
        )
    )


def delete_user(actor: str, cluster: str, data: dict, preview: bool) -> dict:
    """deleteUser: ``username``, with its policy."""
    username = _username(data)
    return _answer(lambda: acl.delete_user(cluster, username, actor=actor, dry_run=preview))


def put_policy(actor: str, cluster: str, data: dict, preview: bool) -> dict:
    """createAcl: ``subject``'s policy made, or merged into (an entry replaces the one of the same
    resource: so an entry is created or updated), from ``entries`` (resources, actions, decision, sourceIps)."""
    d = _checked(AclCreateSerializer, data, preview)
    return _answer(lambda: acl.create_acl(cluster, d["subject"], d["entries"], actor=actor, dry_run=preview))


def delete_policy(actor: str, cluster: str, data: dict, preview: bool) -> dict:
    """deleteAcl: ``username``'s whole policy, or (``resources``) those resources' entries."""
    username = _username(data)
    d = _checked(AclDeleteSerializer, {k: val for k, val in data.items() if k != "username"}, preview)
    resources = [rules.Resource.parse(r) for r in d.get("resources", [])]
    return _answer(lambda: acl.delete_acl(cluster, username, resources, actor=actor, dry_run=preview))
