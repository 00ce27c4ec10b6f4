"""The controller: getSyncStateSet, electMaster, cleanBrokerMetadata, getControllerMetaData."""

from __future__ import annotations

import click

from controlplane.cli.client import CTL, NS, Api
from controlplane.cli.output import pairs, table, yes_no
from controlplane.cli.root import command, emit, names


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
