"""``rmqha``: the operator's command line (``python -m controlplane.cli``). It speaks the REST API only,
as any client would, with a token from ``--token-file`` or ``RMQHA_TOKEN`` (an admin's, or an
operator's) and the control plane's URL from ``--url`` or ``RMQHA_URL``. Verbs keep mqadmin's names
where mqadmin has one. Tables for people by default, ``--json`` for scripts. Imports no Django.

Static topics (docs/static-topics.md):

    rmqha updateStaticTopic -t Orders -qn 8 -b broker-a,broker-b
    rmqha staticTopicList
    rmqha staticTopic -t Orders
    rmqha remappingStaticTopic -t Orders --move 0=broker-c --move 1=broker-c   # preview, then asks
    rmqha remappingStaticTopic -t Orders --drain broker-a [--to broker-b] --yes
    rmqha remappingStaticTopic -t Orders --scale-out broker-c --preview
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
API = "/api/v1/nameserver/static-topics"


class Api:
    def __init__(self, url: str, token: str, as_json: bool):
        self.url, self.as_json = url.rstrip("/"), as_json
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            r = self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach the control plane at {self.url}: {exc}") from None
        try:
            answer = r.json()
        except ValueError:
            raise click.ClickException(f"HTTP {r.status_code} from {self.url}{path}: {r.text[:200]}") from None
        if r.status_code >= 400:
            if self.as_json:
                click.echo(json.dumps(answer))
                sys.exit(1)
            detail = answer.get("detail", answer) if isinstance(answer, dict) else answer
            fields = answer.get("fields") if isinstance(answer, dict) else None
            name = f" {answer.get('code')} {answer.get('name')}" if isinstance(answer, dict) and "code" in answer else ""
            raise click.ClickException(f"refused (HTTP {r.status_code}{name}): {detail}" + (f" {fields}" if fields else ""))
        return answer


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        return token_file.read_text().strip()
    token = os.environ.get("RMQHA_TOKEN", "").strip()
    if not token:
        raise click.UsageError("no token: give --token-file or set RMQHA_TOKEN (an admin's or an operator's API token)")
    return token


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="RMQHA_URL", default=DEFAULT_URL, show_default=True, help="the control plane (or RMQHA_URL)")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="a file holding the API token")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer (for scripts)")
@click.pass_context
def main(ctx: click.Context, url: str, token_file: Path | None, as_json: bool) -> None:
    """Operate a RocketMQ-HA control plane over its REST API."""
    ctx.obj = Api(url, _token(token_file), as_json)


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


@main.command("updateStaticTopic")
@click.option("-t", "--topic", required=True)
@click.option("-qn", "--queue-nums", type=click.IntRange(1), required=True, help="logical queues")
@click.option("-b", "--brokers", required=True, help="broker sets, comma-separated: queue i goes on the (i mod n)th")
@click.pass_obj
def update_static_topic(api: Api, topic: str, queue_nums: int, brokers: str) -> None:
    """Create a static topic (mqadmin updateStaticTopic)."""
    names = [b.strip() for b in brokers.split(",") if b.strip()]
    answer = api.call("POST", API, {"topicName": topic, "queueNums": queue_nums, "brokerNames": names})
    if api.as_json:
        click.echo(json.dumps(answer))
    else:
        _show_mapping(answer["mapping"])


@main.command("staticTopicList")
@click.pass_obj
def static_topic_list(api: Api) -> None:
    """Every static topic: its epoch and who takes each queue's writes."""
    answer = api.call("GET", API)
    if api.as_json:
        click.echo(json.dumps(answer))
        return
    rows = [
        [m["topic"], m["epoch"], len(m["queues"]), ", ".join(sorted({q["segments"][-1]["brokerName"] for q in m["queues"]}))]
        for m in answer["staticTopics"]
    ]
    click.echo(table(["topic", "epoch", "queues", "writing on"], rows))


@main.command("staticTopic")
@click.option("-t", "--topic", required=True)
@click.pass_obj
def static_topic(api: Api, topic: str) -> None:
    """One static topic: each logical queue's segments, and the history of changes."""
    answer = api.call("GET", f"{API}/{topic}")
    if api.as_json:
        click.echo(json.dumps(answer))
        return
    _show_mapping(answer)
    click.echo("")
    click.echo(table(["epoch", "change", "by", "at"], [[c["epoch"], c["kind"], c["actor"], c["at"]] for c in answer["history"]]))


@main.command("remappingStaticTopic")
@click.option("-t", "--topic", required=True)
@click.option("--move", "moves", multiple=True, metavar="QUEUE=BROKER", help="move a logical queue (repeatable)")
@click.option("--drain", metavar="BROKER", help="move every queue off this broker set")
@click.option("--to", "targets", metavar="BROKERS", help="with --drain: the sets that take them (comma-separated)")
@click.option("--scale-out", metavar="BROKER", help="give a new broker set its share of the queues")
@click.option("--epoch", type=click.IntRange(1), help="refuse (2100) if the mapping moved past this epoch")
@click.option("--preview", "preview_only", is_flag=True, help="show what would move, change nothing")
@click.option("-y", "--yes", is_flag=True, help="apply without asking (scripts)")
@click.pass_obj
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
        body["drain"] = {
            "brokerName": drain,
            **({"targets": [t.strip() for t in targets.split(",") if t.strip()]} if targets else {}),
        }
    else:
        body["scaleOut"] = scale_out
    if epoch is not None:
        body["epoch"] = epoch
    path = f"{API}/{topic}/migrations"
    preview = api.call("POST", path, {**body, "preview": True})
    if preview_only or not yes:
        if api.as_json and preview_only:
            click.echo(json.dumps(preview))
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
    if api.as_json:
        click.echo(json.dumps(answer))
        return
    click.echo(f"{topic}: epoch {answer['epochBefore']} -> {answer['mapping']['epoch']}; moved:")
    _show_moves(answer)


if __name__ == "__main__":
    main()
