"""Operations of ours: isolate, unisolate, headroom, drill, drills."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click

from controlplane.cli.client import OPS, Api, seg
from controlplane.cli.output import table
from controlplane.cli.root import command, confirm_options, emit, previewed


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
