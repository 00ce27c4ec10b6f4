"""``rmqha``: the operator's command line (``python -m controlplane.cli``). It speaks the REST API only,
as any client would, with a token from ``--token-file`` or ``RMQHA_TOKEN`` (an admin's, or an
operator's; a ``read`` token for the reads) and the control plane's URL from ``--url`` or
``RMQHA_URL``. Verbs and option letters are mqadmin's where mqadmin has them. Tables for people by
default, ``--json`` (before or after the verb) for scripts: the API's answer as it came. Imports no
Django, and nothing heavy before it is needed: it starts as a fresh process per command
(bench/dashboard.py measures ``clusterList``). Every verb with an example: docs/cli.md.

    rmqha clusterList                                  rmqha topicRoute -t Orders
    rmqha updateTopic -t Orders -c DefaultCluster -r 8 -w 8 -a +message.type=FIFO
    rmqha consumerProgress [-g group]                  rmqha resetOffsetByTime -g G -t T -s now
    rmqha getSyncStateSet -b broker-a                  rmqha electMaster -bn broker-a -b 2
    rmqha updateBrokerConfig -b broker-a -k k -v v     rmqha isolate -b broker-a -i 2
    rmqha remappingStaticTopic -t Orders --drain broker-a [--to broker-b] [--preview | --yes]

Changes that put data at risk (updateBrokerConfig, resetOffsetByTime, skipAccumulatedMessage, drill,
remappingStaticTopic) show their preview first and apply after a confirmation; ``--yes`` applies
without asking, ``--preview`` changes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

DEFAULT_URL = "http://127.0.0.1:8000"
API = "/api/v1/nameserver/static-topics"
NS = "/api/v1/nameserver"
CTL = "/api/v1/controller"
OPS = "/api/v1/operations"
AUDITS = "/api/v1/audits"


class Answer(dict):
    """An API answer, with its JSON text as it came (``--json`` prints that, not a re-encoding)."""

    raw = ""


class Api:
    """The control plane's REST API over the standard library's HTTP client: a command starts as a fresh
    process, and httpx with its TLS context costs one more process start (bench/dashboard.py's
    ``cli_cold_start_ms``). The token is read at the first call: help and usage errors need none. One
    connection per call: a confirmation may outwait the server's keep-alive."""

    def __init__(self, url: str, token_file: Path | None, as_json: bool):
        self.url, self.token_file, self.as_json = url.rstrip("/"), token_file, as_json
        self._token: str | None = None

    def _connection(self):
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise click.UsageError(f"--url {self.url!r}: give http://host:port or https://host:port")
        if parts.scheme == "https":
            import ssl

            return http.client.HTTPSConnection(parts.hostname, port, timeout=30, context=ssl.create_default_context())
        return http.client.HTTPConnection(parts.hostname, port, timeout=30)

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> Answer:
        import http.client
        from urllib.parse import urlencode, urlsplit

        if self._token is None:
            self._token = _token(self.token_file)
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        target = urlsplit(self.url).path + path + (f"?{urlencode(params, doseq=True)}" if params else "")
        conn = self._connection()
        try:
            conn.request(method, target, body=data, headers=headers)
            r = conn.getresponse()
            status, raw = r.status, r.read()
        except (OSError, http.client.HTTPException) as exc:
            raise click.ClickException(f"cannot reach the control plane at {self.url}: {exc}") from None
        finally:
            conn.close()
        try:
            answer = json.loads(raw)
        except ValueError:
            text = raw[:200].decode(errors="replace")
            raise click.ClickException(f"HTTP {status} from {self.url}{path}: {text}") from None
        if status >= 400:
            if self.as_json:
                click.echo(raw.decode())
                sys.exit(1)
            detail = answer.get("detail", answer) if isinstance(answer, dict) else answer
            fields = answer.get("fields") if isinstance(answer, dict) else None
            name = f" {answer.get('code')} {answer.get('name')}" if isinstance(answer, dict) and "code" in answer else ""
            raise click.ClickException(f"refused (HTTP {status}{name}): {detail}" + (f" {fields}" if fields else ""))
        if not isinstance(answer, dict):
            raise click.ClickException(f"HTTP {status} from {self.url}{path}: not a JSON object")
        out = Answer(answer)
        out.raw = raw.decode()
        return out


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


class NoToken(click.ClickException):
    """One line, and a usage error's exit status (2): nothing was sent."""

    exit_code = 2


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        return token_file.read_text().strip()
    token = os.environ.get("RMQHA_TOKEN", "").strip()
    if not token:
        raise NoToken("no token: give --token-file or set RMQHA_TOKEN (an admin's or an operator's API token)")
    return token


def seg(name: str) -> str:
    """A name as one path segment: names may hold ``%`` and ``|``."""
    return quote(name, safe="")


def names(values: Iterable[str]) -> list[str]:
    """Repeated and comma-separated names, in order, each once."""
    out: list[str] = []
    for value in values:
        for name in (n.strip() for n in value.split(",")):
            if name and name not in out:
                out.append(name)
    return out


def local_time(ms: int | None) -> str:
    if ms is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def seconds(ms: int | None) -> str:
    return "" if ms is None else f"{ms / 1000:.1f} s"


def yes_no(flag: object) -> str:
    return "" if flag is None else ("yes" if flag else "no")


def pairs(d: dict, indent: str = "") -> str:
    """One ``key  value`` line per field (mqadmin's listing); nested objects as compact JSON."""
    width = max((len(str(k)) for k in d), default=0)
    return "\n".join(
        f"{indent}{str(k).ljust(width)}  {json.dumps(v) if isinstance(v, dict | list) else ('' if v is None else v)}".rstrip()
        for k, v in d.items()
    )


def emit(api: Api, answer: dict, show: Callable[[dict], None]) -> None:
    """``--json``: the API's answer as it came; else the table ``show`` prints."""
    if api.as_json:
        click.echo(answer.raw if isinstance(answer, Answer) else json.dumps(answer))
    else:
        show(answer)


def previewed(api: Api, path: str, body: dict, *, preview_only: bool, yes: bool, show: Callable[[dict, bool], bool]) -> None:
    """The flow of a change that puts data at risk: the same request with ``"preview": true`` (changes
    nothing) shown first, then applied after a confirmation. ``--yes`` applies at once, ``--preview``
    stops after showing (also with ``--yes``). ``show(answer, preview)`` prints a table and says whether
    there is anything to apply."""
    if api.as_json and not (preview_only or yes):
        raise click.UsageError("with --json, give --preview or --yes: a script cannot answer the confirmation")
    if preview_only or not yes:
        preview = api.call("POST", path, {**body, "preview": True})
        if api.as_json:
            click.echo(preview.raw)
            return
        if not show(preview, True) or preview_only:
            return
        if not click.confirm("Apply?", default=False):
            click.echo("nothing changed")
            return
    emit(api, api.call("POST", path, {**body, "preview": False}), lambda a: show(a, False) and None)


def _json_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(Api).as_json = True


def command(name: str, **kw: Any) -> Callable:
    """A verb of ``main`` that also takes ``--json`` after its name (``rmqha clusterList --json``)."""

    def wrap(f: Callable) -> click.Command:
        f = click.option("--json", is_flag=True, expose_value=False, callback=_json_flag, help="print the API's JSON answer")(f)
        return main.command(name, **kw)(click.pass_obj(f))

    return wrap


def confirm_options(f: Callable) -> Callable:
    f = click.option("-y", "--yes", is_flag=True, help="apply without asking (scripts)")(f)
    return click.option("--preview", "preview_only", is_flag=True, help="show what would change, change nothing")(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="RMQHA_URL", default=DEFAULT_URL, show_default=True, help="the control plane (or RMQHA_URL)")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="a file holding the API token")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer (for scripts)")
@click.pass_context
def main(ctx: click.Context, url: str, token_file: Path | None, as_json: bool) -> None:
    """Operate a RocketMQ-HA control plane over its REST API (mqadmin's verbs; docs/cli.md)."""
    ctx.obj = Api(url, token_file, as_json)


# --- cluster and topics (the nameserver) ----------------------------------------------------------


@command("clusterList")
@click.option("-c", "--clusterName", "cluster", help="this cluster only")
def cluster_list(api: Api, cluster: str | None) -> None:
    """Every broker set and its members, with each member's last heartbeat (mqadmin clusterList)."""

    def live(m: dict, now_ms: int) -> str:
        """In the liveness table until its deadline (by this machine's clock); past it until the scan
        of inactive brokers drops it."""
        if m.get("expiresAt") is None:
            return "no"
        return "yes" if m["expiresAt"] >= now_ms else "expired"

    def show(answer: dict) -> None:
        rows, now_ms = [], int(time.time() * 1000)
        for name, group in sorted(answer["brokerAddrTable"].items()):
            if cluster and group["cluster"] != cluster:
                continue
            for m in sorted(group["members"], key=lambda m: m["brokerId"]):
                rows.append(
                    [
                        group["cluster"],
                        name,
                        m["brokerId"],
                        m["brokerAddr"],
                        m.get("haServerAddr"),
                        group.get("zoneName"),
                        m["dataVersion"]["stateVersion"],
                        live(m, now_ms),
                        local_time(m.get("lastUpdateTimestamp")),
                    ]
                )
        click.echo(
            table(["cluster", "brokerName", "BID", "addr", "haAddr", "zone", "stateVersion", "live", "last heartbeat"], rows)
        )

    emit(api, api.call("GET", f"{NS}/cluster-info"), show)


@command("topicRoute")
@click.option("-t", "--topic", required=True)
def topic_route(api: Api, topic: str) -> None:
    """A topic's route: each broker set's queues and permission, and where its brokers are (mqadmin topicRoute)."""

    def show(route: dict) -> None:
        rows = [
            [
                q["brokerName"],
                q["readQueueNums"],
                q["writeQueueNums"],
                _perm(q["perm"]),
                q.get("topicSysFlag"),
                (q.get("attributes") or {}).get("message.type", ""),
            ]
            for q in route["queueDatas"]
        ]
        click.echo(table(["brokerName", "read", "write", "perm", "sysFlag", "message.type"], rows))
        click.echo("")
        brokers = [
            [b["cluster"], b["brokerName"], int(bid), addr, b.get("zoneName")]
            for b in route["brokerDatas"]
            for bid, addr in sorted(b["brokerAddrs"].items(), key=lambda kv: int(kv[0]))
        ]
        click.echo(table(["cluster", "brokerName", "BID", "addr", "zone"], brokers))
        if route.get("logicQueueMapping"):
            click.echo("\nstatic topic: rmqha staticTopic -t " + topic)

    emit(api, api.call("GET", f"{NS}/routes/{seg(topic)}"), show)


def _perm(perm: int) -> str:
    """``PermName.perm2String``: 6 is RW-, 4 R--, 2 -W-."""
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-") + f" ({perm})"


@command("topicList")
@click.option("-c", "--clusterName", "cluster", help="this cluster's topics only")
def topic_list(api: Api, cluster: str | None) -> None:
    """Every topic: the broker sets holding it, its queues and message type (mqadmin topicList; -c here
    names a cluster to filter on)."""

    def show(answer: dict) -> None:
        rows = [
            [
                topic,
                ", ".join(q["brokerName"] for q in qs),
                sum(q["writeQueueNums"] for q in qs),
                ", ".join(sorted({(q.get("attributes") or {}).get("message.type", "NORMAL") for q in qs})),
            ]
            for topic, qs in sorted(answer["topicList"].items())
        ]
        click.echo(table(["topic", "broker sets", "write queues", "message.type"], rows))

    emit(api, api.call("GET", f"{NS}/topics", params={"clusterName": cluster} if cluster else None), show)


@command("topicStatus")
@click.option("-t", "--topic", required=True)
def topic_status(api: Api, topic: str) -> None:
    """Each queue's min and max offset as its broker last reported them (mqadmin topicStatus)."""

    def show(answer: dict) -> None:
        queues = answer["queues"]
        rows = [[q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"], _stale(q)] for q in queues]
        click.echo(table(["brokerName", "QID", "min offset", "max offset", "report"], rows))
        click.echo(f"messages held: {sum(q['maxOffset'] - q['minOffset'] for q in queues)}")

    emit(api, api.call("GET", f"{NS}/topics/{seg(topic)}/offsets"), show)


def _stale(row: dict) -> str:
    return "stale" if row.get("stale") else "live"


def parse_attributes(values: Iterable[str]) -> dict[str, str]:
    """mqadmin's ``-a +message.type=FIFO[,+k=v]``: the attributes to set, with or without the ``+``.
    Removing one (``-k``) is not something the control plane does: refused here."""
    out: dict[str, str] = {}
    for part in (p.strip() for v in values for p in v.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if key.startswith("-"):
            raise click.BadParameter(f"{part!r}: removing an attribute is not supported", param_hint="-a")
        if not sep or not key.lstrip("+") or not value:
            raise click.BadParameter(f"{part!r}: write +key=value, e.g. +message.type=FIFO", param_hint="-a")
        out[key] = value
    return out


@command("updateTopic")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--clusterName", "cluster", help="on every broker set of this cluster")
@click.option("-b", "--brokerName", "brokers", multiple=True, help="on these broker sets (repeat, or comma-separated)")
@click.option("-r", "--readQueueNums", "read_queues", type=click.IntRange(1, 65535), help="read queues (default 8)")
@click.option("-w", "--writeQueueNums", "write_queues", type=click.IntRange(1, 65535), help="write queues (default 8)")
@click.option("-p", "--perm", type=click.IntRange(0, 7), help="2 W, 4 R, 6 RW (default 6)")
@click.option("-a", "--attributes", "attributes", multiple=True, help="+message.type=NORMAL|FIFO|DELAY|TRANSACTION|MIXED")
def update_topic(api: Api, topic: str, cluster, brokers, read_queues, write_queues, perm, attributes) -> None:
    """Create or update a topic on a cluster or on chosen broker sets (mqadmin updateTopic; -b names
    broker sets here). Queue counts and permission not given take the defaults, as in mqadmin."""
    targets = names(brokers)
    if bool(cluster) == bool(targets):
        raise click.UsageError("give exactly one of -c (a cluster) or -b (broker sets)")
    body: dict = {"topicName": topic, **({"clusterName": cluster} if cluster else {"brokerNames": targets})}
    for key, value in (("readQueueNums", read_queues), ("writeQueueNums", write_queues), ("perm", perm)):
        if value is not None:
            body[key] = value
    if attributes:
        body["attributes"] = parse_attributes(attributes)

    def show(answer: dict) -> None:
        click.echo(f"create or update topic {answer['topicName']}: OK on {', '.join(answer['brokerNames'])}")

    emit(api, api.call("POST", f"{NS}/topics", body), show)


@command("deleteTopic")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--clusterName", "cluster", help="from this cluster only")
@click.option("-b", "--brokerName", "brokers", multiple=True, help="from these broker sets only (repeat, or comma-separated)")
def delete_topic(api: Api, topic: str, cluster: str | None, brokers: tuple[str, ...]) -> None:
    """Delete a topic from the routes: everywhere, from a cluster, or from chosen broker sets (mqadmin
    deleteTopic)."""
    params: dict = {}
    if cluster:
        params["clusterName"] = cluster
    if brokers:
        params["brokerName"] = names(brokers)

    def show(answer: dict) -> None:
        click.echo(f"delete topic {topic}: OK, {answer['deletedQueueDatas']} broker set(s)")

    emit(api, api.call("DELETE", f"{NS}/topics/{seg(topic)}", params=params or None), show)


# --- brokers: status and config -------------------------------------------------------------------


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


# --- consumers and offsets ------------------------------------------------------------------------


def render_consumer_groups(answer: dict) -> str:
    """consumerProgress without -g: one row per group, its offsets summed over its queues."""
    rows = [
        [g["group"], ", ".join(g["topics"]), g["queues"], g["committedOffset"], g["maxOffset"], g["lag"], _stale(g)]
        for g in answer["groups"]
    ]
    return table(["group", "topics", "queues", "committed", "max offset", "lag", "report"], rows)


def render_consumer_progress(answer: dict, topic: str | None = None) -> str:
    """consumerProgress -g: one row per queue (of ``topic`` only, if given), then mqadmin's total."""
    queues = [q for q in answer["queues"] if topic is None or q["topic"] == topic]
    rows = [
        [q["topic"], q["brokerName"], q["queueId"], q["committedOffset"], q["maxOffset"], q["lag"], _stale(q)] for q in queues
    ]
    total = sum(q["lag"] for q in queues) if topic else answer["lag"]
    return (
        table(["topic", "brokerName", "QID", "committed", "max offset", "lag", "report"], rows)
        + f"\n\nConsume Diff Total: {total}"
    )


@command("consumerProgress")
@click.option("-g", "--groupName", "group", help="one group: each queue's committed and max offset")
@click.option("-t", "--topicName", "topic", help="with -g: this topic's queues only")
def consumer_progress(api: Api, group: str | None, topic: str | None) -> None:
    """Consumer lag: every group (committed offset, max offset, lag), or one group's queues (mqadmin
    consumerProgress). Offsets as the brokers last reported them; 'stale' marks an old report."""
    if group is None:
        if topic:
            raise click.UsageError("-t needs -g")
        emit(api, api.call("GET", f"{NS}/consumer-groups"), lambda a: click.echo(render_consumer_groups(a)))
    else:
        answer = api.call("GET", f"{NS}/consumer-groups/{seg(group)}")
        emit(api, answer, lambda a: click.echo(render_consumer_progress(a, topic)))


TIME_FORMAT = "yyyy-MM-dd#HH:mm:ss:SSS"


def parse_timestamp(text: str, now_ms: int | None = None) -> int:
    """mqadmin's ``-s``: ``now``, epoch milliseconds, or ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time
    (``UtilAll.parseDate``). Raises ``click.BadParameter``."""
    from datetime import datetime

    text = text.strip()
    if text == "now":
        return int(time.time() * 1000) if now_ms is None else now_ms
    if text.isdigit():
        return int(text)
    stamp, sep, millis = text.rpartition(":")
    try:
        if not sep or not millis.isdigit() or len(millis) > 3:
            raise ValueError(text)
        return int(datetime.strptime(stamp, "%Y-%m-%d#%H:%M:%S").timestamp()) * 1000 + int(millis)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give now, epoch milliseconds or {TIME_FORMAT}", param_hint="-s") from None


def render_reset(answer: dict, preview: bool, what: str) -> tuple[str, bool]:
    """resetOffsetByTime's answer (or preview): each queue's committed offset, where it goes, and the
    messages consumed again (a move back) or skipped (forward). Also whether any queue moves."""
    queues = answer["queues"]
    rows = [
        [
            q["brokerName"],
            q["queueId"],
            q.get("committedOffset"),
            q["newOffset"],
            q.get("maxOffset"),
            q.get("reconsumed"),
            q.get("skipped"),
        ]
        for q in queues
    ]
    verb = "would reset" if preview else "reset"  # the queues of a set that failed are not listed, but named below
    again, skipped = sum(q.get("reconsumed") or 0 for q in queues), sum(q.get("skipped") or 0 for q in queues)
    return "\n".join(
        [
            f"{answer.get('group')} on {answer.get('topic')}: {verb} {len(queues)} queue(s) to {what}",
            table(["brokerName", "QID", "committed", "new offset", "max offset", "reconsumed", "skipped"], rows),
            f"messages consumed again: {again}, skipped: {skipped}",
            *(f"not reset on {f['brokerName']}: {f['error']}" for f in answer.get("failed") or ()),
        ]
    ), bool(queues)


def _reset(api: Api, group: str, topic: str, target: dict, *, preview_only: bool, yes: bool, what: str) -> None:
    def show(answer: dict, preview: bool) -> bool:
        text, moves = render_reset(answer, preview, what)
        click.echo(text)
        return moves

    path = f"{OPS}/consumer-groups/{seg(group)}/reset-offset"
    previewed(api, path, {"topic": topic, **target}, preview_only=preview_only, yes=yes, show=show)


@command("resetOffsetByTime")
@click.option("-g", "--group", required=True, help="the consumer group")
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", help=f"now, epoch milliseconds or {TIME_FORMAT} (local time)")
@click.option("-o", "--offset", type=click.IntRange(-1), help="this offset on every queue instead (-1: each queue's max)")
@confirm_options
def reset_offset_by_time(api: Api, group, topic, timestamp, offset, preview_only, yes) -> None:
    """Move a group's committed offsets on a topic to the first message stored at or after a time (or to
    an offset): carried out by each queue's master, replicated, and recorded as an operator reset, so
    the offset audit does not count it (mqadmin resetOffsetByTime). Shows each queue's move first."""
    if (timestamp is None) == (offset is None):
        raise click.UsageError("give exactly one of -s (a time) or -o (an offset)")
    if timestamp is not None:
        ms = parse_timestamp(timestamp)  # once: what is shown is what is applied
        target, what = {"timestampMs": ms}, f"{local_time(ms)} ({ms})"
    else:
        target, what = {"offset": offset}, "each queue's max offset" if offset == -1 else f"offset {offset}"
    _reset(api, group, topic, target, preview_only=preview_only, yes=yes, what=what)


@command("skipAccumulatedMessage")
@click.option("-g", "--group", required=True, help="the consumer group")
@click.option("-t", "--topic", required=True)
@confirm_options
def skip_accumulated(api: Api, group, topic, preview_only, yes) -> None:
    """Skip every message the group has not consumed yet: its offsets go to each queue's max (mqadmin
    skipAccumulatedMessage; resetOffsetByTime -o -1)."""
    _reset(api, group, topic, {"offset": -1}, preview_only=preview_only, yes=yes, what="each queue's max offset")


# --- the controller: SyncStateSets, elections, metadata ---------------------------------------------


def _state_line(s: dict) -> str:
    master = "no master" if s.get("masterBrokerId") is None else f"master {s['masterBrokerId']} at {s.get('masterAddress')}"
    return (
        f"{s.get('brokerName')}: {master}, master epoch {s.get('masterEpoch')}, "
        f"SyncStateSet {{{', '.join(str(i) for i in s.get('syncStateSet', []))}}} (epoch {s.get('syncStateSetEpoch')})"
    )


@command("getSyncStateSet")
@click.option("-b", "--brokerName", "brokers", multiple=True, help="broker sets (repeat, or comma-separated)")
@click.option("-c", "--clusterName", "cluster", help="every broker set of this cluster")
def get_sync_state_set(api: Api, brokers: tuple[str, ...], cluster: str | None) -> None:
    """Each replica group's master, epochs and SyncStateSet, replica by replica (mqadmin getSyncStateSet)."""
    wanted = names(brokers)
    if bool(wanted) == bool(cluster):
        raise click.UsageError("give -b (broker sets) or -c (a cluster)")
    if cluster:
        table_ = api.call("GET", f"{NS}/cluster-info")["brokerAddrTable"]
        wanted = sorted(n for n, g in table_.items() if g["cluster"] == cluster)
        if not wanted:
            raise click.ClickException(f"no broker set in cluster {cluster}")

    def show(answer: dict) -> None:
        sets = answer["brokerReplicasInfo"]
        for n, (name, s) in enumerate(sets.items()):
            click.echo(
                ("\n" if n else "") + f"#brokerName {name}  #MasterBrokerId {s['masterBrokerId']}  #MasterAddr "
                f"{s['masterAddress']}  #MasterEpoch {s['masterEpoch']}  #SyncStateSetEpoch {s['syncStateSetEpoch']}"
            )
            rows = [
                [
                    r["brokerId"],
                    r["brokerAddress"],
                    "master" if r["brokerId"] == s["masterBrokerId"] else "",
                    in_sync,
                    yes_no(r.get("alive")),
                ]
                for key, in_sync in (("inSyncReplicas", "yes"), ("notInSyncReplicas", "no"))
                for r in s[key]
            ]
            click.echo(table(["BID", "addr", "role", "in SyncStateSet", "alive"], sorted(rows, key=lambda r: r[0])))
        missing = [n for n in wanted if n not in sets]
        if missing:
            click.echo(("\n" if sets else "") + "not managed by the controller: " + ", ".join(missing))

    emit(api, api.call("GET", f"{CTL}/sync-state-data", params={"brokerName": wanted}), show)


@command("electMaster")
@click.option("-bn", "--brokerName", "broker", required=True, help="the broker set")
@click.option(
    "-b", "--brokerId", "broker_id", type=click.IntRange(1), help="the replica to make master (none: an automatic election)"
)
@click.option("-c", "--clusterName", "cluster", help="the set's cluster")
def elect_master(api: Api, broker: str, broker_id: int | None, cluster: str | None) -> None:
    """Make a replica the master of its set, or run an automatic election (mqadmin electMaster: -bn the
    set, -b the replica's controller id)."""
    body: dict = {"brokerName": broker, "designateElect": broker_id is not None}
    if broker_id is not None:
        body["brokerId"] = broker_id
    if cluster:
        body["clusterName"] = cluster

    def show(answer: dict) -> None:
        click.echo(
            _state_line(answer) + (f" ({answer['code']} {answer['name']}: {answer['detail']})" if answer.get("detail") else "")
        )

    emit(api, api.call("POST", f"{CTL}/elect-master", body), show)


@command("cleanBrokerMetadata")
@click.option("-bn", "--brokerName", "broker", required=True, help="the broker set")
@click.option("-b", "--brokerControllerIdsToClean", "ids", help="the replicas' controller ids, e.g. 1;2;3 (none: the whole set)")
@click.option("-c", "--clusterName", "cluster", help="the set's cluster")
@click.option("-l", "--cleanLivingBroker", "living", is_flag=True, help="clean them even if alive")
def clean_broker_metadata(api: Api, broker: str, ids: str | None, cluster: str | None, living: bool) -> None:
    """Remove replicas (or a whole set) from the controller's metadata (mqadmin cleanBrokerMetadata)."""
    body: dict = {"brokerName": broker, "isCleanLivingBroker": living}
    if ids:
        body["brokerControllerIdsToClean"] = ids
    if cluster:
        body["clusterName"] = cluster

    def show(answer: dict) -> None:
        left = f"; now {_state_line(answer)}" if "masterEpoch" in answer else ""
        click.echo(f"clear broker {broker} metadata from controller: OK{left}")

    emit(api, api.call("POST", f"{CTL}/clean-broker-data", body), show)


@command("getControllerMetaData")
def get_controller_metadata(api: Api) -> None:
    """Who answers as the controller (mqadmin getControllerMetaData): Postgres is the consensus point,
    so every control-plane process leads."""

    def show(m: dict) -> None:
        click.echo(
            pairs(
                {
                    "#ControllerGroup": m.get("group"),
                    "#ControllerLeaderId": m.get("controllerLeaderId"),
                    "#ControllerLeaderAddress": m.get("controllerLeaderAddress"),
                    "#IsLeader": m.get("isLeader"),
                    "#Peers": m.get("peers"),
                }
            )
        )

    emit(api, api.call("GET", f"{CTL}/metadata"), show)


# --- operations of ours: isolation, headroom, drills -------------------------------------------------


def _isolation(api: Api, broker: str, broker_id: int, isolated: bool) -> None:
    def show(a: dict) -> None:
        state = "isolated" if a["isolated"] else "not isolated"
        click.echo(f"{a['brokerName']}/{a['brokerId']} at {a['brokerAddr']}: {state}" + ("" if a["changed"] else " (already)"))

    emit(
        api,
        api.call(
            "POST", f"{OPS}/brokers/{'isolate' if isolated else 'unisolate'}", {"brokerName": broker, "brokerId": broker_id}
        ),
        show,
    )


def isolation_options(f: Callable) -> Callable:
    f = click.option("-i", "--brokerId", "broker_id", type=click.IntRange(0), required=True, help="the broker's id in its set")(f)
    return click.option("-b", "--brokerName", "broker", required=True, help="the broker set")(f)


@command("isolate")
@isolation_options
def isolate(api: Api, broker: str, broker_id: int) -> None:
    """Take one broker out of routes and elections and stop its writes, until unisolate (ours)."""
    _isolation(api, broker, broker_id, True)


@command("unisolate")
@isolation_options
def unisolate(api: Api, broker: str, broker_id: int) -> None:
    """Lift an isolation: the broker is back in routes and elections and takes writes (ours)."""
    _isolation(api, broker, broker_id, False)


def _ids(ids: Iterable[int]) -> str:
    return "{" + ", ".join(str(i) for i in ids) + "}"


def render_headroom(h: dict) -> str:
    """headroom: the losses the set can take before writes stop, why, and what the figure rests on."""
    c = h["config"]
    losses = f"{h['losses']} more replica loss{'' if h['losses'] == 1 else 'es'} before writes stop"
    source = (
        f"from broker {c['fromBrokerId']}'s report" + (" (stale)" if c.get("stale") else "")
        if h.get("configKnown")
        else "RocketMQ's defaults: no report from the master"
    )
    lines = [
        f"{h['brokerName']} (cluster {h['clusterName']}): {losses}; writes {h['writes']}",
        f"  {h['reason']}",
        f"  master {h['masterBrokerId']}, master epoch {h['masterEpoch']}, SyncStateSet {_ids(h['syncStateSet'])}, "
        f"alive {_ids(h['aliveBrokerIds'])}, isolated {_ids(h['isolatedBrokerIds'])}",
        f"  inSyncReplicas {c['inSyncReplicas']}, minInSyncReplicas {c['minInSyncReplicas']}, "
        f"allAckInSyncStateSet {str(c['allAckInSyncStateSet']).lower()} ({source})",
    ]
    if h.get("ackLosses") is not None:
        lines.append(
            f"  count mode: {h['ackLosses']} more before sends are not acknowledged by enough replicas: {h['ackReason']}"
        )
    return "\n".join(lines)


@command("headroom")
@click.option("-b", "--brokerName", "broker", required=True, help="the replica group")
def headroom(api: Api, broker: str) -> None:
    """How many more replica losses before the group's writes stop, and why (ours)."""
    emit(api, api.call("GET", f"{OPS}/groups/{seg(broker)}/headroom"), lambda a: click.echo(render_headroom(a)))


def render_drill_plan(p: dict) -> str:
    """drill --preview: who takes over and the data at risk (the target's lag behind the master)."""
    at_risk = "unknown" if p.get("dataAtRiskBytes") is None else f"{p['dataAtRiskBytes']} bytes"
    rows = [[c["brokerId"], c["brokerAddr"], c.get("ackOffset"), c.get("lagBytes")] for c in p.get("candidates", ())]
    return "\n".join(
        [
            f"{p['brokerName']}: master {p['fromBrokerId']} ({p['fromBrokerAddr']}) -> {p['toBrokerId']} ({p['toBrokerAddr']}) "
            f"at master epoch {p['masterEpoch']}, SyncStateSet {_ids(p['syncStateSet'])}",
            f"data at risk: {at_risk} (master max offset {p.get('masterMaxOffset')}, target acked {p.get('targetAckOffset')}; "
            f"figures from {p.get('figuresFrom')})",
            "in-sync slaves, best first:",
            table(["BID", "addr", "ack offset", "lag bytes"], rows),
        ]
    )


def render_drill(d: dict) -> str:
    """A drill as it ended: outcome, RTO, data at risk and lost."""

    def size(n: int | None) -> str:
        return "unknown" if n is None else f"{n} bytes"

    rto = "none (not serving)" if d.get("rtoMs") is None else f"{d['rtoMs']} ms"
    epoch = f"{d['oldEpoch']}, no new one" if d.get("newEpoch") is None else f"{d['oldEpoch']} -> {d['newEpoch']}"
    switch = f"master {d['fromBrokerId']} -> {d['toBrokerId']}, epoch {epoch}"
    return "\n".join(
        [
            f"drill {d['id']} of {d['brokerName']}: {d['outcome']}; {switch}",
            f"RTO {rto}; data at risk before {size(d.get('dataAtRiskBytes'))}, lost at the switch {size(d.get('dataLostBytes'))}",
            *([f"  {d['detail']}"] if d.get("detail") else []),
        ]
    )


@command("drill")
@click.option("-b", "--brokerName", "broker", required=True, help="the replica group")
@click.option(
    "-i", "--brokerId", "broker_id", type=click.IntRange(1), help="the replica to switch to (default: the best in-sync one)"
)
@confirm_options
def drill(api: Api, broker: str, broker_id: int | None, preview_only: bool, yes: bool) -> None:
    """A failover drill: a controlled switch-over of one group through the controller's election, then
    its measured RTO and the data at risk and lost (ours). Shows the plan first, then asks."""
    body = {} if broker_id is None else {"brokerId": broker_id}

    def show(answer: dict, preview: bool) -> bool:
        click.echo(render_drill_plan(answer["plan"]) if preview else render_drill(answer["drill"]))
        return True

    previewed(api, f"{OPS}/groups/{seg(broker)}/drill", body, preview_only=preview_only, yes=yes, show=show)


def render_drills(answer: dict) -> str:
    rows = [
        [
            d["id"],
            d["brokerName"],
            f"{d['fromBrokerId']} -> {d['toBrokerId']}",
            f"{d['oldEpoch']} -> {'' if d.get('newEpoch') is None else d['newEpoch']}",
            d.get("rtoMs"),
            d.get("dataAtRiskBytes"),
            d.get("dataLostBytes"),
            d["outcome"],
            d["startedAt"],
            d["actor"],
        ]
        for d in answer["drills"]
    ]
    return table(["drill", "brokerName", "master", "epoch", "RTO ms", "at risk", "lost", "outcome", "started", "by"], rows)


@command("drills")
@click.option("-b", "--brokerName", "broker", help="this replica group's only")
@click.option("-n", "--limit", type=click.IntRange(1, 200), default=20, show_default=True, help="newest first")
def drills(api: Api, broker: str | None, limit: int) -> None:
    """The latest failover drills with their measured RTO and data at risk and lost (ours)."""
    params: dict = {"limit": limit, **({"brokerName": broker} if broker else {})}
    emit(api, api.call("GET", f"{OPS}/drills", params=params), lambda a: click.echo(render_drills(a)))


# --- offset-rollback audits ----------------------------------------------------------------------------


@command("auditRuns")
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="newest first")
def audit_runs(api: Api, limit: int) -> None:
    """The offset-rollback audit runs, newest first (ours; docs/audits.md)."""

    def show(answer: dict) -> None:
        rows = [
            [
                r["id"],
                r["status"],
                r.get("stage") or "",
                "" if r.get("progress") is None else f"{r['progress']:.0%}",
                r["trigger"],
                r["requestedBy"],
                r["createdAt"],
                r.get("rollbacks"),
                r.get("messagesAgain"),
                r.get("error") or "",
            ]
            for r in answer["runs"]
        ]
        click.echo(table(["run", "status", "stage", "progress", "trigger", "by", "created", "rollbacks", "again", "error"], rows))
        if answer.get("activeRunId") is not None:
            click.echo(f"\nactive run: {answer['activeRunId']}")

    emit(api, api.call("GET", f"{AUDITS}/runs", params={"limit": limit}), show)


@command("auditRun")
def audit_run(api: Api) -> None:
    """Start an offset-rollback audit now (ours); refused (2 SYSTEM_BUSY) while one is queued or running."""
    emit(
        api,
        api.call("POST", f"{AUDITS}/runs"),
        lambda r: click.echo(f"audit run {r['id']} {r['status']} (rmqha auditRuns follows it)"),
    )


# --- static topics (docs/static-topics.md) ---------------------------------------------------------


def _segments(q: dict) -> str:
    def one(s: dict) -> str:
        end = "" if s["physEnd"] is None else s["logicStart"] + s["physEnd"] - s["physStart"]
        start = "?" if s["logicStart"] is None else s["logicStart"]
        return f"{s['brokerName']}/q{s['queueId']} [{start}..{end}) {s['state']}"

    return " -> ".join(one(s) for s in q["segments"])


def _show_mapping(m: dict) -> None:
    click.echo(f"{m['topic']}  epoch {m['epoch']}")
    click.echo(
        table(
            ["queue", "segments (oldest first: broker/physical queue [logical offsets) state)"],
            [[q["queueId"], _segments(q)] for q in m["queues"]],
        )
    )


def _show_moves(answer: dict) -> None:
    rows = [
        [
            m["queueId"],
            f"{m['source']['brokerName']}/q{m['source']['queueId']}",
            f"{m['target']['brokerName']}/q{m['target']['queueId']}" + (" (reused)" if m["reused"] else ""),
        ]
        for m in answer["moves"]
    ]
    click.echo(table(["queue", "consumers read to its end (sealed)", "writes now, read next"], rows))
    click.echo(f"old segments stay readable {answer['oldSegmentsKeptHours']} h after their last message")


@command("updateStaticTopic")
@click.option("-t", "--topic", required=True)
@click.option("-qn", "--queue-nums", type=click.IntRange(1), required=True, help="logical queues")
@click.option("-b", "--brokers", required=True, help="broker sets, comma-separated: queue i goes on the (i mod n)th")
def update_static_topic(api: Api, topic: str, queue_nums: int, brokers: str) -> None:
    """Create a static topic (mqadmin updateStaticTopic)."""
    answer = api.call("POST", API, {"topicName": topic, "queueNums": queue_nums, "brokerNames": names([brokers])})
    emit(api, answer, lambda a: _show_mapping(a["mapping"]))


@command("staticTopicList")
def static_topic_list(api: Api) -> None:
    """Every static topic: its epoch and who takes each queue's writes."""

    def show(answer: dict) -> None:
        rows = [
            [m["topic"], m["epoch"], len(m["queues"]), ", ".join(sorted({q["segments"][-1]["brokerName"] for q in m["queues"]}))]
            for m in answer["staticTopics"]
        ]
        click.echo(table(["topic", "epoch", "queues", "writing on"], rows))

    emit(api, api.call("GET", API), show)


@command("staticTopic")
@click.option("-t", "--topic", required=True)
def static_topic(api: Api, topic: str) -> None:
    """One static topic: each logical queue's segments, and the history of changes."""

    def show(answer: dict) -> None:
        _show_mapping(answer)
        click.echo("")
        click.echo(
            table(["epoch", "change", "by", "at"], [[c["epoch"], c["kind"], c["actor"], c["at"]] for c in answer["history"]])
        )

    emit(api, api.call("GET", f"{API}/{seg(topic)}"), show)


@command("remappingStaticTopic")
@click.option("-t", "--topic", required=True)
@click.option("--move", "moves", multiple=True, metavar="QUEUE=BROKER", help="move a logical queue (repeatable)")
@click.option("--drain", metavar="BROKER", help="move every queue off this broker set")
@click.option("--to", "targets", metavar="BROKERS", help="with --drain: the sets that take them (comma-separated)")
@click.option("--scale-out", metavar="BROKER", help="give a new broker set its share of the queues")
@click.option("--epoch", type=click.IntRange(1), help="refuse (2100) if the mapping moved past this epoch")
@confirm_options
def remapping_static_topic(api: Api, topic, moves, drain, targets, scale_out, epoch, preview_only, yes) -> None:
    """Move logical queues between broker sets: only the mapping changes, no data moves (mqadmin
    remappingStaticTopic). Shows the preview first; applies after a confirmation, or with --yes."""
    if sum(bool(x) for x in (moves, drain, scale_out)) != 1:
        raise click.UsageError("give exactly one of --move, --drain, --scale-out")
    body: dict = {}
    if moves:
        parsed = []
        for m in moves:
            queue, sep, broker = m.partition("=")
            if not sep or not queue.strip().isdigit() or not broker.strip():
                raise click.BadParameter(f"{m!r}: write QUEUE=BROKER, e.g. 0=broker-c", param_hint="--move")
            parsed.append({"queueId": int(queue), "brokerName": broker.strip()})
        body["moves"] = parsed
    elif drain:
        body["drain"] = {"brokerName": drain, **({"targets": names([targets])} if targets else {})}
    else:
        body["scaleOut"] = scale_out
    if epoch is not None:
        body["epoch"] = epoch
    path = f"{API}/{seg(topic)}/migrations"
    preview = api.call("POST", path, {**body, "preview": True})
    if preview_only or not yes:
        if api.as_json and preview_only:
            click.echo(preview.raw)
            return
        if not api.as_json:
            click.echo(f"{topic}: at epoch {preview['epochBefore']}, this would move:")
            _show_moves(preview)
        if preview_only:
            return
        if not click.confirm("Apply?", default=False):
            click.echo("nothing changed")
            return
        body.setdefault("epoch", preview["epochBefore"])  # what was shown is what is applied, or refused
    answer = api.call("POST", path, body)

    def show(a: dict) -> None:
        click.echo(f"{topic}: epoch {a['epochBefore']} -> {a['mapping']['epoch']}; moved:")
        _show_moves(a)

    emit(api, answer, show)


if __name__ == "__main__":
    main()
