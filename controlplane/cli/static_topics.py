"""Static topics (docs/static-topics.md): updateStaticTopic (create, or more queues), staticTopicList,
staticTopic, remappingStaticTopic, deleteStaticTopic, convertToStaticTopic."""

from __future__ import annotations

import click

from controlplane.cli.client import API, NS, Api, seg
from controlplane.cli.output import table
from controlplane.cli.root import command, confirm_options, emit, names, previewed


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
@click.option(
    "-b", "--brokers", help="broker sets, comma-separated: queue i goes on the (i mod n)th (new queues: the least loaded)"
)
@confirm_options
def update_static_topic(api: Api, topic: str, queue_nums: int, brokers: str | None, preview_only: bool, yes: bool) -> None:
    """Create a static topic, or give an existing one more logical queues (mqadmin updateStaticTopic;
    the count never goes down). More queues: previewed first, applied after a confirmation or --yes."""
    if topic not in {m["topic"] for m in api.call("GET", API)["staticTopics"]}:
        if not brokers:
            raise click.UsageError("a new static topic needs -b/--brokers")
        answer = api.call("POST", API, {"topicName": topic, "queueNums": queue_nums, "brokerNames": names([brokers])})
        emit(api, answer, lambda a: _show_mapping(a["mapping"]))
        return
    body: dict = {"queueNums": queue_nums, **({"brokerNames": names([brokers])} if brokers else {})}
    previewed(api, f"{API}/{seg(topic)}/queue-count", body, preview_only=preview_only, yes=yes, show=_show_change)


def _show_change(answer: dict, preview: bool) -> bool:
    before, after = answer["before"], answer["after"]
    verb = "would be" if preview else "is"
    if after is None:
        click.echo(f"{before['topic']} {verb} deleted, with its topic on {', '.join(_sets(before))}")
    else:
        click.echo(f"{after['topic']} {verb} at epoch {after['epoch']}:")
        _show_mapping(after)
    return True


def _sets(m: dict) -> list[str]:
    return sorted({s["brokerName"] for q in m["queues"] for s in q["segments"]})


@command("deleteStaticTopic")
@click.option("-t", "--topic", required=True)
@confirm_options
def delete_static_topic(api: Api, topic: str, preview_only: bool, yes: bool) -> None:
    """Delete a static topic and its topic on every broker set (its messages with it): previewed
    first, applied after a confirmation or --yes."""
    previewed(api, f"{API}/{seg(topic)}", {}, preview_only=preview_only, yes=yes, show=_show_change, method="DELETE")


@command("convertToStaticTopic")
@click.option("-t", "--topic", required=True)
@confirm_options
def convert_to_static_topic(api: Api, topic: str, preview_only: bool, yes: bool) -> None:
    """Turn an existing topic static: its queues become logical queues, offsets unchanged (ours)."""
    path = f"{NS}/topics/{seg(topic)}/make-static"
    previewed(api, path, {}, preview_only=preview_only, yes=yes, show=_show_change)


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
