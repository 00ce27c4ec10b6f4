"""Cluster and topics, as the nameserver keeps them: clusterList, topicRoute, topicList, topicStatus,
updateTopic, deleteTopic."""

from __future__ import annotations

import time
from collections.abc import Iterable

import click

from controlplane.cli.client import NS, Api, seg
from controlplane.cli.output import local_time, report_state, table
from controlplane.cli.root import command, emit, names


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
        rows = [[q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"], report_state(q)] for q in queues]
        click.echo(table(["brokerName", "QID", "min offset", "max offset", "report"], rows))
        click.echo(f"messages held: {sum(q['maxOffset'] - q['minOffset'] for q in queues)}")

    emit(api, api.call("GET", f"{NS}/topics/{seg(topic)}/offsets"), show)


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
