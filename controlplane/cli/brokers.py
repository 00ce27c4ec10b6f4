"""Brokers, as they last reported: brokerStatus, getBrokerConfig, updateBrokerConfig."""

from __future__ import annotations

from collections.abc import Callable

import click

from controlplane.cli.client import NS, OPS, Api
from controlplane.cli.output import local_time, pairs, seconds, table
from controlplane.cli.root import command, confirm_options, emit, previewed


def broker_option(f: Callable) -> Callable:
    f = click.option("-i", "--brokerId", "broker_id", type=click.IntRange(0), help="this broker of the set only")(f)
    return click.option("-b", "--brokerName", "broker", required=True, help="the broker set")(f)


def _brokers(api: Api, broker: str, broker_id: int | None) -> dict:
    params: dict = {"brokerName": broker}
    if broker_id is not None:
        params["brokerId"] = broker_id
    return api.call("GET", f"{NS}/brokers/status", params=params)


def _broker_title(b: dict) -> str:
    state = "alive" if b.get("alive") else "not alive"
    if b.get("stale"):
        state += ", stale"
    age = f", reported {seconds(b.get('ageMs'))} ago" if b.get("ageMs") is not None else ""
    return f"{b['brokerName']}/{b['brokerId']} at {b['brokerAddr']} (cluster {b.get('clusterName')}; {state}{age})"


def render_broker_status(answer: dict) -> str:
    """brokerStatus: each broker's latest report, field by field (mqadmin's ``key  value`` listing)."""
    blocks = []
    for b in answer["brokers"]:
        status = dict(b.get("status") or {})
        if status.get("startedAtMs") is not None:
            status["startedAtMs"] = f"{status['startedAtMs']} ({local_time(status['startedAtMs'])})"
        if status.get("uptimeMs") is not None:
            status["uptimeMs"] = f"{status['uptimeMs']} ({seconds(status['uptimeMs'])})"
        blocks.append(_broker_title(b) + "\n" + pairs(status, "  "))
    return "\n\n".join(blocks)


@command("brokerStatus")
@broker_option
def broker_status(api: Api, broker: str, broker_id: int | None) -> None:
    """What each broker of a set last reported: role, epoch, writable, offsets, uptime (mqadmin brokerStatus)."""
    emit(api, _brokers(api, broker, broker_id), lambda a: click.echo(render_broker_status(a)))


def render_broker_config(answer: dict) -> str:
    """getBrokerConfig: ``key = value`` per broker (mqadmin's listing), ``*`` on the dynamic keys."""
    lines = []
    for b in answer["brokers"]:
        lines += [f"============ {_broker_title(b)} ============"]
        dynamic, config = set(b.get("dynamicKeys") or ()), b.get("config") or {}
        width = max((len(k) for k in config), default=0) + 2
        lines += [f"{('*' if key in dynamic else ' ')}{key.ljust(width)}= {config[key]}" for key in sorted(config)]
        lines += [""]
    return "\n".join([*lines, "(*: dynamic, rmqha updateBrokerConfig -k <key> -v <value> changes it)"])


@command("getBrokerConfig")
@broker_option
def get_broker_config(api: Api, broker: str, broker_id: int | None) -> None:
    """Each broker's config as it reported it; * marks the keys updateBrokerConfig changes (mqadmin getBrokerConfig)."""
    emit(api, _brokers(api, broker, broker_id), lambda a: click.echo(render_broker_config(a)))


def render_config_change(answer: dict, preview: bool, key: str) -> tuple[str, bool]:
    """updateBrokerConfig's answer (or preview) per broker: the key's old and new value, or the broker's
    refusal. Also whether anything changes (or would)."""
    rows, changes = [], 0
    for b in answer["brokers"]:
        where = [b["brokerName"], b["brokerId"], b.get("brokerAddr")]
        if b.get("error"):
            rows.append([*where, key, "", "", f"refused: {_error_text(b['error'])}"])
        for k, (old, new) in (b.get("changed") or {}).items():
            rows.append([*where, k, old, new, ""])
            changes += 1
        if not b.get("error") and not b.get("changed"):
            rows.append([*where, key, "", "", "already so"])
    title = ("this would change:" if preview else "changed:") if changes else "nothing to change"
    return title + "\n" + table(["brokerName", "BID", "addr", "key", "old", "new", ""], rows), changes > 0


@command("updateBrokerConfig")
@broker_option
@click.option("-k", "--key", required=True, help="a dynamic config key (getBrokerConfig marks them)")
@click.option("-v", "--value", required=True, help="its new value, as broker.conf writes it")
@confirm_options
def update_broker_config(api: Api, broker, broker_id, key, value, preview_only, yes) -> None:
    """Change one dynamic config key of a broker (or of every broker of the set): applied at once and
    written to its broker.conf (mqadmin updateBrokerConfig). Shows the change first, then asks."""
    body: dict = {"brokerName": broker, "updates": {key: value}}
    if broker_id is not None:
        body["brokerId"] = broker_id

    def show(answer: dict, preview: bool) -> bool:
        text, changes = render_config_change(answer, preview, key)
        click.echo(text)
        return changes

    previewed(api, f"{OPS}/brokers/config", body, preview_only=preview_only, yes=yes, show=show)


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        return " ".join(str(error[k]) for k in ("code", "name", "detail") if error.get(k) is not None)
    return str(error)
