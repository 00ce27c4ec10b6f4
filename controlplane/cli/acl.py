"""ACL 2.0 users and policies (docs/acl.md): createUser, updateUser, deleteUser, listUser, createAcl,
updateAcl, deleteAcl, listAcl, with mqadmin's option letters. Every change is first sent as a dry run;
what it would lock out (a user's Pub or Sub on a known topic or group, allowed now and not after) is
shown, and then it is applied after a confirmation, or at once with --yes. Without a terminal to ask
at, a change that locks someone out is refused unless --yes; one that locks nobody out is applied."""

from __future__ import annotations

import sys

import click

from controlplane.cli.client import Api, seg
from controlplane.cli.output import table
from controlplane.cli.root import command, emit, names

CLUSTERS = "/api/v1/clusters"


def _users(cluster: str, username: str | None = None) -> str:
    return f"{CLUSTERS}/{seg(cluster)}/acl/users" + (f"/{seg(username)}" if username is not None else "")


def _policies(cluster: str, username: str | None = None) -> str:
    return f"{CLUSTERS}/{seg(cluster)}/acl/policies" + (f"/{seg(username)}" if username is not None else "")


def _interactive() -> bool:
    return sys.stdin.isatty()


def _show_lockouts(lockouts: list[dict], done: bool = False) -> None:
    click.echo(f"this change {'locked' if done else 'would lock'} out {len(lockouts)} permission(s) users had:")
    click.echo(
        table(
            ["user", "resource", "action", "why"],
            [[lo["username"], lo["resource"], lo["action"], lo["reason"]] for lo in lockouts],
        )
    )


def changed(api: Api, method: str, path: str, body: dict, *, yes: bool, dry_run: bool, show) -> None:
    """The dry run, its lockouts shown, a confirmation when it locks someone out, then the change."""

    def send(dry: bool):
        return api.call(method, path, {**body, "dryRun": dry})

    if not yes or dry_run:
        preview = send(True)
        lockouts = preview.get("lockouts") or []
        if dry_run:
            emit(
                api, preview, lambda a: _show_lockouts(lockouts) if lockouts else click.echo("locks nobody out (nothing changed)")
            )
            return
        if lockouts:
            if not api.as_json:
                _show_lockouts(lockouts)
            if api.as_json or not _interactive():
                raise click.ClickException(
                    "refused: this change locks users out; nothing changed (give --yes to apply it anyway)"
                )
            if not click.confirm("Apply?", default=False):
                click.echo("nothing changed")
                return

    def shown(answer: dict) -> None:
        show(answer)
        if answer.get("lockouts"):
            _show_lockouts(answer["lockouts"], done=True)

    emit(api, send(False), shown)


def change_options(f):
    f = click.option("-y", "--yes", is_flag=True, help="apply even if it locks users out, without asking")(f)
    return click.option("--dry-run", is_flag=True, help="show what it would lock out, change nothing")(f)


def _show_user(answer: dict) -> None:
    u = answer["user"]
    click.echo(f"user {u['username']}  type {u['userType']}  status {u['userStatus']}  (ACL version {answer['version']})")
    if "password" in answer:
        click.echo(f"secret key (shown this once, store it now): {answer['password']}")


def _show_policy(answer: dict) -> None:
    p = answer.get("policy")
    click.echo(f"ACL version {answer['version']}")
    if p is None:
        click.echo("no policy left for this user")
    else:
        _show_entries([p])


def _show_entries(policies: list[dict]) -> None:
    rows = [
        [p["subject"], e["resource"], ",".join(e["actions"]), e["decision"], ",".join(e["sourceIps"]) or "*"]
        for p in policies
        for e in p["entries"]
    ]
    click.echo(table(["subject", "resource", "actions", "decision", "source IPs"], rows))


# --- users ------------------------------------------------------------------------------------------------

_USER_TYPE = click.Choice(["Super", "Normal"], case_sensitive=False)
_USER_STATUS = click.Choice(["enable", "disable"], case_sensitive=False)


def _canonical(value: str | None, choices: list[str]) -> str | None:
    return None if value is None else next(c for c in choices if c.lower() == value.lower())


@command("createUser")
@click.option("-c", "--cluster", required=True)
@click.option("-u", "--username", required=True, help="the access key")
@click.option("-p", "--password", help="the secret key (absent: one is generated and shown once)")
@click.option("-t", "--user-type", type=_USER_TYPE, default="Normal", show_default=True)
@click.option("-s", "--user-status", type=_USER_STATUS, default="enable", show_default=True)
@change_options
def create_user(api: Api, cluster, username, password, user_type, user_status, yes, dry_run) -> None:
    """Create a user of the cluster (mqadmin createUser)."""
    body = {
        "username": username,
        "userType": _canonical(user_type, ["Super", "Normal"]),
        "userStatus": _canonical(user_status, ["enable", "disable"]),
        **({"password": password} if password is not None else {}),
    }
    changed(api, "POST", _users(cluster), body, yes=yes, dry_run=dry_run, show=_show_user)


@command("updateUser")
@click.option("-c", "--cluster", required=True)
@click.option("-u", "--username", required=True)
@click.option("-p", "--password", help="a new secret key")
@click.option("-t", "--user-type", type=_USER_TYPE)
@click.option("-s", "--user-status", type=_USER_STATUS)
@change_options
def update_user(api: Api, cluster, username, password, user_type, user_status, yes, dry_run) -> None:
    """Change a user's secret key, type or status (mqadmin updateUser)."""
    body = {
        k: v
        for k, v in (
            ("password", password),
            ("userType", _canonical(user_type, ["Super", "Normal"])),
            ("userStatus", _canonical(user_status, ["enable", "disable"])),
        )
        if v is not None
    }
    if not body:
        raise click.UsageError("give -p/--password, -t/--user-type or -s/--user-status")
    changed(api, "PATCH", _users(cluster, username), body, yes=yes, dry_run=dry_run, show=_show_user)


@command("deleteUser")
@click.option("-c", "--cluster", required=True)
@click.option("-u", "--username", required=True)
@change_options
def delete_user(api: Api, cluster, username, yes, dry_run) -> None:
    """Delete a user and its policy (mqadmin deleteUser)."""
    changed(
        api,
        "POST",
        _users(cluster, username) + "/delete",
        {},
        yes=yes,
        dry_run=dry_run,
        show=lambda a: click.echo(f"user {username} deleted (ACL version {a['version']})"),
    )


@command("listUser")
@click.option("-c", "--cluster", required=True)
@click.option("-f", "--filter", "contains", default="", help="usernames containing this")
def list_user(api: Api, cluster, contains) -> None:
    """The cluster's users (mqadmin listUser); never their secret keys."""

    def show(answer: dict) -> None:
        click.echo(
            table(
                ["username", "type", "status", "created"],
                [[u["username"], u["userType"], u["userStatus"], u["createdAt"]] for u in answer["users"]],
            )
        )

    emit(api, api.call("GET", _users(cluster), params={"filter": contains} if contains else None), show)


# --- policies ---------------------------------------------------------------------------------------------


def _entry(resources: str, actions: str, decision: str, source_ips: str | None) -> dict:
    entry = {"resources": names([resources]), "actions": names([actions]), "decision": decision}
    if source_ips:
        entry["sourceIps"] = names([source_ips])
    return entry


def _acl_options(f):
    f = click.option("-i", "--source-ips", help="addresses or CIDR ranges, comma-separated (absent: anywhere)")(f)
    f = click.option("-d", "--decision", type=click.Choice(["Allow", "Deny"]), default="Allow", show_default=True)(f)
    f = click.option("-a", "--actions", required=True, help="Pub,Sub,Create,Update,Delete,Get,List or All")(f)
    f = click.option(
        "-r", "--resources", required=True, help="Topic:NAME, Group:NAME, Topic:PREFIX*, Topic:*, *; comma-separated"
    )(f)
    f = click.option("-s", "--subject", required=True, help="User:NAME or NAME")(f)
    return click.option("-c", "--cluster", required=True)(f)


def _username(subject: str) -> str:
    return subject.removeprefix("User:")


@command("createAcl")
@_acl_options
@change_options
def create_acl(api: Api, cluster, subject, resources, actions, decision, source_ips, yes, dry_run) -> None:
    """Give a user a policy, or add to it (mqadmin createAcl): one entry per resource."""
    body = {"subject": subject, "entries": [_entry(resources, actions, decision, source_ips)]}
    changed(api, "POST", _policies(cluster), body, yes=yes, dry_run=dry_run, show=_show_policy)


@command("updateAcl")
@_acl_options
@change_options
def update_acl(api: Api, cluster, subject, resources, actions, decision, source_ips, yes, dry_run) -> None:
    """Replace (same resource) or add entries of a user's policy (mqadmin updateAcl)."""
    body = {"entries": [_entry(resources, actions, decision, source_ips)]}
    changed(api, "PATCH", _policies(cluster, _username(subject)), body, yes=yes, dry_run=dry_run, show=_show_policy)


@command("deleteAcl")
@click.option("-c", "--cluster", required=True)
@click.option("-s", "--subject", required=True, help="User:NAME or NAME")
@click.option("-r", "--resources", help="only these resources' entries, comma-separated (absent: the whole policy)")
@change_options
def delete_acl(api: Api, cluster, subject, resources, yes, dry_run) -> None:
    """Delete a user's policy, or its entries for some resources (mqadmin deleteAcl)."""
    body = {"resources": names([resources])} if resources else {}
    changed(api, "POST", _policies(cluster, _username(subject)) + "/delete", body, yes=yes, dry_run=dry_run, show=_show_policy)


@command("listAcl")
@click.option("-c", "--cluster", required=True)
@click.option("-s", "--subject", default="", help="subjects containing this")
@click.option("-r", "--resource", default="", help="resources containing this")
def list_acl(api: Api, cluster, subject, resource) -> None:
    """The cluster's policies (mqadmin listAcl), one line per entry."""
    params = {k: v for k, v in (("subject", subject), ("resource", resource)) if v}
    emit(api, api.call("GET", _policies(cluster), params=params or None), lambda a: _show_entries(a["policies"]))
