"""Finding messages and following them (docs/messages.md): queryMsgById, queryMsgByKey,
queryMsgByUniqueKey, queryMsgByOffset, printMsg and queryMsgTraceById as mqadmin names them; the dead
letters of a group (dlqList, dlqExport, dlqResend: a dry run shown first, then a confirmation unless
--yes); the clients connected now (consumerConnection -g, producerConnection -g -t). Every verb names
its cluster (-c): the brokers asked are that cluster's."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click

from controlplane.cli.client import Api, seg
from controlplane.cli.consumers import parse_timestamp
from controlplane.cli.output import local_time, pairs, table
from controlplane.cli.root import command, emit

CLUSTERS = "/api/v1/clusters"
VIEW_FIELDS = (
    "msgId",
    "uniqKey",
    "topic",
    "tags",
    "keys",
    "queueId",
    "queueOffset",
    "commitLogOffset",
    "brokerName",
    "brokerAddr",
    "storeHost",
    "bornHost",
    "messageType",
    "reconsumeTimes",
    "bodySize",
    "bodyCrc",
)


def _at(cluster: str, path: str) -> str:
    return f"{CLUSTERS}/{seg(cluster)}/{path}"


def _cluster(f):
    return click.option("-c", "--clusterName", "cluster", required=True, help="the cluster whose brokers are asked")(f)


def render_messages(answer: dict) -> str:
    """A query's messages: one row each, newest first (printMsg: oldest first)."""
    rows = [
        [
            m["msgId"],
            m.get("uniqKey") or "",
            m["topic"],
            m.get("tags") or "",
            " ".join(m.get("keys") or []),
            m["brokerName"],
            m["queueId"],
            m["queueOffset"],
            local_time(m["storeTimestamp"]),
            m["bodySize"],
        ]
        for m in answer["messages"]
    ]
    head = ["msgId", "uniqKey", "topic", "tags", "keys", "brokerName", "QID", "offset", "stored", "body bytes"]
    lines = [
        table(head, rows),
        f"\n{len(rows)} message(s)" + (" (more matched: raise -m or narrow the range)" if answer.get("truncated") else ""),
    ]
    for f in answer.get("failed", []):
        lines.append(f"broker set {f['brokerName']} did not answer: {f['error']}")
    return "\n".join(lines)


def render_message(view: dict) -> str:
    """One message as mqadmin's queryMsgById prints it: its fields, its times, its properties, its body."""
    fields = {k: view.get(k) for k in VIEW_FIELDS}
    fields["keys"] = " ".join(view.get("keys") or [])
    fields["bornTimestamp"] = local_time(view.get("bornTimestamp"))
    fields["storeTimestamp"] = local_time(view.get("storeTimestamp"))
    if view.get("deliveryTimestamp") is not None:
        fields["deliveryTimestamp"] = local_time(view["deliveryTimestamp"])
    if view.get("transactionState"):
        fields["transactionState"] = view["transactionState"]
    out = [pairs(fields), "", "properties:", pairs(view.get("properties") or {}, "  ")]
    body = view.get("body")
    if isinstance(body, dict):
        cut = ", first 4 KiB shown (queryMsgById --body-file to save it all)" if body["truncated"] else ""
        out += ["", f"body ({body['format']}, {body['size']} bytes{cut}):", body["text"]]
    return "\n".join(out)


def _message(api: Api, cluster: str, msg_id: str, body_file: Path | None, topic: str | None = None) -> None:
    answer = api.call("GET", _at(cluster, f"messages/{seg(msg_id)}"), params={"topic": topic} if topic else None)
    emit(api, answer, lambda a: click.echo(render_message(a)))
    if body_file is not None:  # the message found: its offset id names it whatever id was asked
        _download(api, cluster, answer["msgId"], body_file)


def _download(api: Api, cluster: str, msg_id: str, target: Path) -> None:
    data = api.fetch(_at(cluster, f"messages/{seg(msg_id)}/body"))
    target.write_bytes(data)
    click.echo(f"body ({len(data)} bytes) written to {target}", err=api.as_json)


@command("queryMsgById")
@_cluster
@click.option("-i", "--msgId", "msg_id", required=True, help="the offset message id (store host + commit-log offset)")
@click.option("-t", "--topic", help="with a topic, the id may also be the client's message id (its unique key)")
@click.option("--body-file", type=click.Path(dir_okay=False, path_type=Path), help="also save the whole body to this file")
def query_by_id(api: Api, cluster: str, msg_id: str, topic: str | None, body_file: Path | None) -> None:
    """A message by its offset id (mqadmin queryMsgById): its fields, properties and body (previewed as
    JSON, text or hex); a replica answers when the broker that stored it is gone. With --topic, an id that
    is no offset id is looked up as the client's message id, as RocketMQ's admin does."""
    _message(api, cluster, msg_id, body_file, topic)


@command("queryMsgByOffset")
@_cluster
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-o", "--offset", "offset", type=click.IntRange(0), required=True, help="the commit-log offset")
def query_by_offset(api: Api, cluster: str, broker_name: str, offset: int) -> None:
    """The message whose record starts at a commit-log offset of a broker set (mqadmin queryMsgByOffset)."""
    params = {"brokerName": broker_name, "commitLogOffset": offset}
    answer = api.call("GET", _at(cluster, "messages/by-offset"), params=params)
    emit(api, answer, lambda a: click.echo(render_message(a)))


def _range(begin: str | None, end: str | None) -> dict:
    out = {}
    if begin is not None:
        out["begin"] = parse_timestamp(begin)
    if end is not None:
        out["end"] = parse_timestamp(end)
    return out


_TIME_HELP = "epoch ms, now, or yyyy-MM-dd#HH:mm:ss:SSS (local time)"


@command("queryMsgByKey")
@_cluster
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True, help="one of the message's KEYS")
@click.option("-b", "--beginTimestamp", "begin", help=f"stored at or after ({_TIME_HELP}); default: 7 days before the end")
@click.option("-e", "--endTimestamp", "end", help=f"stored at or before ({_TIME_HELP}); default: now")
@click.option("-m", "--maxNum", "max_num", type=click.IntRange(1, 1000), default=64, show_default=True)
def query_by_key(api: Api, cluster: str, topic: str, key: str, begin: str | None, end: str | None, max_num: int) -> None:
    """Messages of a topic by key (mqadmin queryMsgByKey), over every broker set, newest first; a range is at most 7 days."""
    params = {"topic": topic, "key": key, "max": max_num, **_range(begin, end)}
    emit(api, api.call("GET", _at(cluster, "messages"), params=params), lambda a: click.echo(render_messages(a)))


@command("queryMsgByUniqueKey")
@_cluster
@click.option("-t", "--topic", required=True)
@click.option("-i", "--msgId", "unique_key", required=True, help="the client's message id (UNIQ_KEY)")
def query_by_unique_key(api: Api, cluster: str, topic: str, unique_key: str) -> None:
    """A message by the id its client gave it (mqadmin queryMsgByUniqueKey): each copy found, in full when one."""
    answer = api.call("GET", _at(cluster, "messages"), params={"topic": topic, "uniqueKey": unique_key})
    if api.as_json or len(answer["messages"]) != 1:
        emit(api, answer, lambda a: click.echo(render_messages(a)))
    else:
        _message(api, cluster, answer["messages"][0]["msgId"], None)


@command("printMsg")
@_cluster
@click.option("-t", "--topic", required=True)
@click.option("-b", "--beginTimestamp", "begin", help=f"{_TIME_HELP}; default: 7 days before the end")
@click.option("-e", "--endTimestamp", "end", help=f"{_TIME_HELP}; default: now")
@click.option("-m", "--maxNum", "max_num", type=click.IntRange(1, 1000), default=64, show_default=True)
def print_msg(api: Api, cluster: str, topic: str, begin: str | None, end: str | None, max_num: int) -> None:
    """A topic's messages stored in a time range (mqadmin printMsg), oldest first; at most 7 days."""
    params = {"topic": topic, "max": max_num, **_range(begin, end)}
    emit(api, api.call("GET", _at(cluster, "messages"), params=params), lambda a: click.echo(render_messages(a)))


def render_trace(answer: dict) -> str:
    m = answer["message"]
    where = f"{m['topic']} {m['brokerName']}[{m['queueId']}]@{m['queueOffset']}"
    lines = [f"message {m['msgId']} ({m.get('uniqKey') or 'no unique key'}) on {where}, stored {local_time(m['storeTimestamp'])}"]
    if not answer["groups"]:
        lines.append("no consumer group is subscribed to its topic")
    for group, t in sorted(answer["groups"].items()):
        extra = []
        if t.get("retry"):
            extra.append(f"{len(t['retry'])} in retry")
        if t.get("dlq"):
            extra.append(f"in the DLQ as {t['dlq']['msgId']}")
        if t.get("recordsGone"):
            extra.append("older records gone (retention)")
        lines += ["", f"group {group}: {t['consumed']}" + (f" ({', '.join(extra)})" if extra else "")]
        rows = [
            [
                d["attempt"],
                local_time(d.get("popTimeMs")),
                d.get("clientId") or "",
                local_time(d.get("ackTimeMs")) or "-",
                f"{d['topic']}[{d['queueId']}]@{d['queueOffset']}",
            ]
            for d in t.get("deliveries", [])
        ]
        if rows:
            lines.append(table(["attempt", "delivered", "client", "acked", "position"], rows))
    return "\n".join(lines)


@command("queryMsgTraceById")
@_cluster
@click.option("-i", "--msgId", "msg_id", required=True, help="the offset message id")
@click.option("-t", "--topic", help="with a topic, the id may also be the client's message id (its unique key)")
@click.option("-g", "--group", "groups", multiple=True, help="only this group (repeatable; default: every group subscribed)")
def query_trace(api: Api, cluster: str, msg_id: str, topic: str | None, groups: tuple[str, ...]) -> None:
    """What each consumer group did with a message (mqadmin queryMsgTraceById): its deliveries, acks,
    retries and dead letter."""
    params: dict = {"group": list(groups)} if groups else {}
    if topic:
        params["topic"] = topic
    answer = api.call("GET", _at(cluster, f"messages/{seg(msg_id)}/trace"), params=params)
    emit(api, answer, lambda a: click.echo(render_trace(a)))


# --- dead letters ------------------------------------------------------------------------------------


def render_dead(answer: dict) -> str:
    rows = [
        [
            m["msgId"],
            m.get("originTopic") or "",
            m.get("originMsgId") or "",
            m["reason"],
            m["attempts"],
            m["brokerName"],
            local_time(m["storeTimestamp"]),
        ]
        for m in answer["messages"]
    ]
    out = [table(["msgId", "origin topic", "origin msgId", "reason", "attempts", "brokerName", "stored"], rows)]
    out += [f"{s['brokerName']}: DLQ offsets {s['minOffset']}..{s['maxOffset']}" for s in answer.get("sets", [])]
    out += [f"broker set {f['brokerName']} did not answer: {f['error']}" for f in answer.get("failed", [])]
    return "\n".join(out)


@command("dlqList")
@_cluster
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="from this DLQ queue offset")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True, help="per broker set")
def dlq_list(api: Api, cluster: str, group: str, offset: int, limit: int) -> None:
    """A consumer group's dead letters: original topic and id, why, after how many attempts."""
    answer = api.call("GET", _at(cluster, f"dlq/{seg(group)}"), params={"offset": offset, "limit": limit})
    emit(api, answer, lambda a: click.echo(render_dead(a)))


@command("dlqExport")
@_cluster
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-f", "--file", "target", type=click.Path(dir_okay=False, path_type=Path), help="write here (default: stdout)")
def dlq_export(api: Api, cluster: str, group: str, target: Path | None) -> None:
    """Every dead letter of a group as JSON lines (one message view a line)."""
    data = api.fetch(_at(cluster, f"dlq/{seg(group)}/export"))
    if target is None:
        sys.stdout.write(data.decode())
    else:
        target.write_bytes(data)
        lines = data.count(b"\n")
        click.echo(f"{lines} dead letter(s) written to {target}")


def render_resent(answer: dict) -> str:
    rows = [
        [r.get("msgId") or "", r["brokerName"], r["originTopic"], r.get("newMsgId") or "", "yes" if r["already"] else "no"]
        for r in answer["resent"]
    ]
    head = "would resend" if answer["dryRun"] else ("resent" if answer["applied"] else "resent in part")
    out = [
        f"{head} {len(rows)} message(s) (request {answer['requestId']})",
        table(["msgId", "brokerName", "to topic", "new msgId", "already resent"], rows),
    ]
    out += [f"broker set {f['brokerName']} did not resend: {f['error']}" for f in answer.get("failed", [])]
    return "\n".join(out)


@command("dlqResend")
@_cluster
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-i", "--msgId", "msg_ids", multiple=True, help="a dead letter's msgId (repeatable)")
@click.option("--all", "every", is_flag=True, help="every dead letter of the group")
@click.option("--request-id", help="32 hex digits: repeat a resend without resending twice (default: a new one)")
@click.option("--dry-run", "--preview", "dry_run", is_flag=True, help="show what would be resent, send nothing")
@click.option("-y", "--yes", is_flag=True, help="resend without asking")
def dlq_resend(
    api: Api, cluster: str, group: str, msg_ids: tuple[str, ...], every: bool, request_id: str | None, dry_run: bool, yes: bool
) -> None:
    """Resend dead letters to their original topics (new ids, the original kept in ORIGIN_MESSAGE_ID).
    The dry run is shown first, then applied after a confirmation; --yes applies at once. Audited."""
    if every == bool(msg_ids):
        raise click.UsageError("give -i msgId (one or more) or --all")
    if api.as_json and not (dry_run or yes):
        raise click.UsageError("with --json, give --dry-run or --yes: a script cannot answer the confirmation")
    body: dict = {"requestId": request_id or uuid.uuid4().hex, **({"all": True} if every else {"msgIds": list(msg_ids)})}
    path = _at(cluster, f"dlq/{seg(group)}/resend")
    if dry_run or not yes:
        preview = api.call("POST", path, {**body, "dryRun": True})
        if api.as_json:
            click.echo(preview.raw)
            return
        click.echo(render_resent(preview))
        if dry_run or not preview["resent"]:
            return
        if not click.confirm("Resend?", default=False):
            click.echo("nothing resent")
            return
    emit(api, api.call("POST", path, {**body, "dryRun": False}), lambda a: click.echo(render_resent(a)))


# --- connected clients -------------------------------------------------------------------------------


def render_clients(rows: list[dict], consumers: bool) -> str:
    head = ["group", "clientId", "protocol", "language", "version", "address", "last seen", "brokers"]
    body = [
        [
            r["group"],
            r["clientId"],
            r["protocol"],
            r["language"],
            r["version"],
            r["address"],
            local_time(r["lastSeenMs"]),
            ",".join(r["brokerNames"]),
        ]
        for r in rows
    ]
    out = [table(head, body)]
    if consumers:
        for r in rows:
            subs = ", ".join(f"{s['topic']} {s['type']} {s['expression'] or '*'}" for s in r.get("subscriptions", []))
            queues = ", ".join(f"{b}/{t}[{q}]" for b, t, q in r.get("queues", []))
            out.append(f"{r['group']} {r['clientId']}: subscribes {subs or '-'}; holds {queues or '-'}")
    if not rows:
        out.append("no client connected")
    return "\n".join(out)


@command("consumerConnection")
@_cluster
@click.option("-g", "--consumerGroup", "group", required=True)
def consumer_connection(api: Api, cluster: str, group: str) -> None:
    """The consumers of a group connected now (mqadmin consumerConnection): client, protocol, language,
    version, address, subscriptions and the queues each holds."""
    answer = api.call("GET", _at(cluster, "clients"), params={"group": group})
    emit(api, answer, lambda a: click.echo(render_clients(a["consumers"], True)))


@command("producerConnection")
@_cluster
@click.option("-g", "--producerGroup", "group", help="a producer group (a gRPC producer's are its topics)")
@click.option("-t", "--topic", help="producers publishing to this topic")
def producer_connection(api: Api, cluster: str, group: str | None, topic: str | None) -> None:
    """The producers connected now (mqadmin producerConnection -g -t)."""
    if group is None and topic is None:
        raise click.UsageError("give -g, -t or both")
    params = {k: val for k, val in (("group", group), ("topic", topic)) if val is not None}
    answer = api.call("GET", _at(cluster, "clients"), params=params)
    emit(api, answer, lambda a: click.echo(render_clients(a["producers"], False)))
