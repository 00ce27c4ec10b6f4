"""Consumer groups and their offsets: consumerProgress, resetOffsetByTime, skipAccumulatedMessage."""

from __future__ import annotations

import time

import click

from controlplane.cli.client import NS, OPS, Api, seg
from controlplane.cli.output import local_time, report_state, table
from controlplane.cli.root import command, confirm_options, emit, previewed


def render_consumer_groups(answer: dict) -> str:
    """consumerProgress without -g: one row per group, its offsets summed over its queues."""
    rows = [
        [g["group"], ", ".join(g["topics"]), g["queues"], g["committedOffset"], g["maxOffset"], g["lag"], report_state(g)]
        for g in answer["groups"]
    ]
    return table(["group", "topics", "queues", "committed", "max offset", "lag", "report"], rows)


def render_consumer_progress(answer: dict, topic: str | None = None) -> str:
    """consumerProgress -g: one row per queue (of ``topic`` only, if given), then mqadmin's total."""
    queues = [q for q in answer["queues"] if topic is None or q["topic"] == topic]
    rows = [
        [q["topic"], q["brokerName"], q["queueId"], q["committedOffset"], q["maxOffset"], q["lag"], report_state(q)]
        for q in queues
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
