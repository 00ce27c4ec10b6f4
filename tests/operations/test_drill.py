"""Headroom and the failover drill against real Postgres and Redis, with a controller-managed group
and no broker process: the tests make the brokers' calls themselves (apply, heartbeat, elect, alter,
register with the nameserver, water levels, status reports), and a thread plays the new master that
registers as id 0 once it hears it was elected (controlplane/operations/headroom.py, drill.py)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.controller import liveness as ctl_liveness
from controlplane.controller.models import ReplicaGroup, Transition
from controlplane.models import ApiToken, Drill, OperatorAction
from controlplane.operations import drill
from controlplane.operations.headroom import headroom
from controlplane.operations.isolation import isolate
from nameserver import broker_status, water_levels
from nameserver.core.broker_status import parse_report
from tests.controller.helpers import CTL, addr, apply_body, heartbeat_body
from tests.nameserver.helpers import NS, register_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OPS = "/api/v1/operations"


def client(scope: str, name: str = "") -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(name or f'{scope}-tool', scope)[1]}")
    return c


def beat(b: APIClient, i: int, max_offset: int) -> None:
    body = heartbeat_body(i, "g1", epoch=1, max_offset=max_offset)
    assert b.post(f"{CTL}/brokers/heartbeat", body, format="json").status_code == 200


@pytest.fixture
def broker() -> APIClient:
    """Group g1 of cluster c1: replicas 1 (master, epoch 1), 2 and 3, all alive and in the SyncStateSet,
    registered with the nameserver (the master as id 0, the slaves under their controller ids). 3 is
    the best informed slave (largest maxOffset). Returns the broker-token client."""
    b = client("broker")
    for i in (1, 2, 3):
        assert b.post(f"{CTL}/brokers/apply-broker-id", apply_body(i), format="json").status_code == 200
        beat(b, i, {1: 10_000, 2: 9_000, 3: 10_000}[i])
    elected = b.post(f"{CTL}/elect-master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1}, format="json").json()
    assert elected["masterBrokerId"] == 1 and elected["masterEpoch"] == 1
    altered = b.post(
        f"{CTL}/alter-sync-state-set",
        {
            "brokerName": "g1",
            "masterBrokerId": 1,
            "masterEpoch": 1,
            "syncStateSet": [1, 2, 3],
            "syncStateSetEpoch": elected["syncStateSetEpoch"],
        },
        format="json",
    )
    assert altered.status_code == 200, altered.content
    for i in (1, 2, 3):
        r = b.post(f"{NS}/brokers/register", register_body(0 if i == 1 else i, addr(i), name="g1", state=1), format="json")
        assert r.status_code == 200
    return b


def master_levels(confirm: int, acks: dict[int, int], *, max_offset: int = 10_000, role: str = "SYNC_MASTER") -> None:
    """The water levels broker 1 reports with its nameserver heartbeat."""
    slaves = [
        {
            "brokerId": i,
            "addr": addr(i),
            "ackOffset": ack,
            "lagBytes": max_offset - ack,
            "lastCaughtUpMs": 1,
            "transferBytesPerS": 0,
            "inSyncStateSet": True,
        }
        for i, ack in acks.items()
    ]
    levels = {
        "brokerName": "g1",
        "brokerId": 1,
        "role": role,
        "masterEpoch": 1,
        "maxOffset": max_offset,
        "confirmOffset": confirm,
        "minOffset": 0,
        "slaves": slaves,
    }
    water_levels.store([water_levels.WaterLevelReport("c1", addr(1), levels)])


def status_report(broker_id: int, addr_: str, **config: str) -> None:
    broker_status.store(
        parse_report(
            {
                "clusterName": "c1",
                "brokerName": "g1",
                "brokerId": broker_id,
                "brokerAddr": addr_,
                "status": {"role": "SYNC_MASTER", "metaMode": "WRITER", "masterEpoch": 1, "writable": True},
                "config": config,
                "dynamicKeys": [],
                "queues": [],
                "offsets": [],
            }
        )
    )


# --- headroom --------------------------------------------------------------------------------------------


def test_headroom_from_the_sync_state_set_liveness_and_the_masters_own_config(broker):
    # No status report yet: RocketMQ's defaults, and the answer says it guessed.
    h = headroom("g1")
    assert (h["losses"], h["writes"], h["configKnown"], h["config"]["minInSyncReplicas"]) == (2, "taken", False, 1)
    assert h["syncStateSet"] == [1, 2, 3] and h["aliveBrokerIds"] == [1, 2, 3] and h["ackLosses"] is None

    status_report(0, addr(1), inSyncReplicas="2", minInSyncReplicas="2", allAckInSyncStateSet="false")
    status_report(2, addr(2), minInSyncReplicas="3")  # a slave's config is not the one the master applies
    h = headroom("g1")
    assert (h["losses"], h["ackLosses"], h["configKnown"]) == (1, 1, True)
    assert h["config"] == {
        "inSyncReplicas": 2,
        "minInSyncReplicas": 2,
        "allAckInSyncStateSet": False,
        "known": True,
        "fromBrokerId": 0,
        "fromBrokerAddr": addr(1),
        "stale": False,
    }
    assert h["reason"] == (
        "writes stop when fewer than minInSyncReplicas=2 replicas are in the SyncStateSet; 3 are in it and alive"
    )

    # Replica 3 stops beating: it still is in the set, but the master is about to drop it.
    ctl_liveness.forget([ctl_liveness.member("c1", "g1", 3)])
    h = headroom("g1")
    assert (h["losses"], h["aliveInSync"], h["deadInSync"], h["ackLosses"]) == (0, 2, 1, 0)
    # An isolated replica counts as lost too (never elected, refuses writes).
    isolate("g1", 2, True, by="test")
    h = headroom("g1")
    assert h["isolatedBrokerIds"] == [2] and h["aliveInSync"] == 1 and "drops the 2 that are not alive" in h["reason"]

    reader = client("read")
    r = reader.get(f"{OPS}/groups/g1/headroom")
    assert r.status_code == 200 and r.json()["losses"] == 0
    missing = reader.get(f"{OPS}/groups/nope/headroom")
    assert missing.status_code == 404 and missing.json()["code"] == 2008
    assert headroom("nope") is None


# --- drill: preview and refusals ----------------------------------------------------------------------------


def test_drill_preview_picks_the_best_in_sync_slave_and_tells_its_lag(broker):
    master_levels(10_000, {2: 9_000, 3: 10_000})
    p = drill.preview("g1")
    assert (p["fromBrokerId"], p["toBrokerId"], p["toBrokerAddr"]) == (1, 3, addr(3))
    assert (p["masterMaxOffset"], p["targetAckOffset"], p["dataAtRiskBytes"], p["figuresFrom"]) == (
        10_000,
        10_000,
        0,
        "waterLevels",
    )
    assert [(c["brokerId"], c["lagBytes"]) for c in p["candidates"]] == [(3, 0), (2, 1_000)]
    named = drill.preview("g1", 2)
    assert (named["toBrokerId"], named["dataAtRiskBytes"], named["lagBytes"]) == (2, 1_000, 1_000)

    # Over REST, with a preview nothing changes.
    admin = client("admin")
    r = admin.post(f"{OPS}/groups/g1/drill", {"brokerId": 2, "preview": True}, format="json")
    assert r.status_code == 200 and r.json()["preview"] is True and r.json()["plan"]["toBrokerId"] == 2
    assert ReplicaGroup.objects.get().master_broker_id == 1 and not Drill.objects.exists()


def test_drill_without_water_levels_uses_the_controllers_heartbeats(broker):
    p = drill.preview("g1", 2)
    assert p["figuresFrom"] == "heartbeats"
    assert (p["masterMaxOffset"], p["targetAckOffset"], p["dataAtRiskBytes"]) == (10_000, 9_000, 1_000)


@pytest.mark.parametrize(
    "setup, broker_id, status, code, phrase",
    [
        pytest.param(None, 1, 400, 29, "already the master", id="target-is-the-master"),
        pytest.param(None, 7, 400, 29, "no replica 7", id="target-is-no-replica"),
        pytest.param("shrink", 3, 409, 2012, "not in the SyncStateSet", id="target-outside-the-sync-state-set"),
        pytest.param("isolate", 3, 409, 2012, "isolated", id="target-isolated"),
        pytest.param("target-dead", 3, 409, 2006, "not alive", id="target-not-alive"),
        pytest.param("slaves-dead", None, 409, 2012, "nothing to switch over to", id="no-in-sync-slave-alive"),
        pytest.param("master-dead", None, 409, 2004, "use electMaster", id="master-not-alive-use-elect-master"),
        pytest.param("unregistered", 3, 409, 14, "not registered with the nameserver", id="target-not-registered"),
    ],
)
def test_drill_refusals_change_nothing(broker, setup, broker_id, status, code, phrase):
    if setup == "shrink":
        body = {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 2}
        assert broker.post(f"{CTL}/alter-sync-state-set", body, format="json").status_code == 200
    elif setup == "isolate":
        isolate("g1", 3, True, by="test")
    elif setup in ("target-dead", "slaves-dead", "master-dead"):
        dead = {"target-dead": [3], "slaves-dead": [2, 3], "master-dead": [1]}[setup]
        ctl_liveness.forget([ctl_liveness.member("c1", "g1", i) for i in dead])
    elif setup == "unregistered":
        body = {"clusterName": "c1", "brokerName": "g1", "brokerAddr": addr(3), "brokerId": 3}
        assert broker.post(f"{NS}/brokers/unregister", body, format="json").status_code == 200
    admin = client("admin")
    body = {"preview": False} | ({"brokerId": broker_id} if broker_id is not None else {})
    r = admin.post(f"{OPS}/groups/g1/drill", body, format="json")
    assert (r.status_code, r.json()["code"]) == (status, code), r.content
    assert phrase in r.json()["detail"]
    assert ReplicaGroup.objects.get().master_epoch == 1 and not Drill.objects.exists() and not OperatorAction.objects.exists()


# --- drill: the run -----------------------------------------------------------------------------------------


class NewMaster(threading.Thread):
    """Plays broker ``broker_id``: once the controller made it master, it waits ``delay_s``, reports
    the old master's last water levels (it kept acknowledging ``old_confirm`` until it heard), and
    registers with the nameserver as id 0 at the new epoch, as a broker that took over does."""

    def __init__(self, broker_id: int, delay_s: float, old_confirm: int):
        super().__init__(daemon=True)
        self.broker_id, self.delay_s, self.old_confirm = broker_id, delay_s, old_confirm
        self.elected_seen: float | None = None
        self.client = client("broker", "new-master")

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                group = ReplicaGroup.objects.get(broker_name="g1")
                if group.master_broker_id == self.broker_id:
                    self.elected_seen = time.monotonic()
                    break
                time.sleep(0.005)
            else:
                return
            master_levels(self.old_confirm, {2: 9_000, 3: 10_000}, max_offset=self.old_confirm)
            time.sleep(self.delay_s)
            body = register_body(0, addr(self.broker_id), name="g1", state=group.master_epoch)
            assert self.client.post(f"{NS}/brokers/register", body, format="json").status_code == 200
        finally:
            connection.close()


def test_drill_switches_over_waits_for_the_new_master_and_records_what_it_cost(broker):
    master_levels(10_000, {2: 9_000, 3: 10_000})
    new_master = NewMaster(3, 0.2, old_confirm=10_500)  # the old master took 500 bytes more before it heard
    new_master.start()
    admin = client("admin")
    r = admin.post(f"{OPS}/groups/g1/drill", {"preview": False}, format="json")
    new_master.join(5)
    assert r.status_code == 200, r.content
    d = r.json()["drill"]
    assert (d["outcome"], d["fromBrokerId"], d["toBrokerId"], d["oldEpoch"], d["newEpoch"]) == ("ok", 1, 3, 1, 2)
    # The election committed before the wait (the new master heard it), and the RTO runs from there.
    assert new_master.elected_seen is not None
    assert 200 <= d["rtoMs"] < 2_000 and d["decidedAt"] < d["servingAt"]
    assert (d["dataAtRiskBytes"], d["dataLostBytes"]) == (0, 500)
    assert d["figures"]["atSwitch"] == {"oldMasterAckedOffset": 10_500, "newMasterHeldOffset": 10_000, "from": "waterLevels"}
    assert d["actor"] == "token:admin-tool" and "after" in d["detail"]

    group = ReplicaGroup.objects.get()
    assert (group.master_broker_id, group.master_epoch) == (3, 2)
    t = Transition.objects.filter(kind="elect").latest("id")
    assert (t.trigger, t.requested_by, t.requested_broker_id, t.new_master_broker_id) == ("operator", "token:admin-tool", 3, 3)
    # One audit record, the drill's own (the middleware left the view to itself), completed.
    actions = list(OperatorAction.objects.values_list("action", "broker_name", "broker_id", "result"))
    assert actions == [("failover_drill", "g1", 3, "ok")]
    record = OperatorAction.objects.get()
    assert record.before["dataAtRiskBytes"] == 0
    assert record.after == {"newEpoch": 2, "rtoMs": d["rtoMs"], "dataLostBytes": 500}

    listed = client("read").get(f"{OPS}/drills", {"brokerName": "g1"}).json()["drills"]
    assert [x["id"] for x in listed] == [d["id"]] and listed[0]["rtoMs"] == d["rtoMs"]
    assert drill.recent("other") == [] and drill.recent()[0]["outcome"] == "ok"


def test_a_running_drill_blocks_another_until_it_is_abandoned(broker, monkeypatch):
    running = Drill.objects.create(cluster_name="c1", broker_name="g1", actor="x", from_broker_id=1, to_broker_id=2, old_epoch=1)
    with pytest.raises(drill.DrillError) as refused:
        drill.run("user:op", "g1", 3)
    assert (refused.value.status, refused.value.code) == (409, 2) and "running" in refused.value.detail
    assert ReplicaGroup.objects.get().master_epoch == 1 and not OperatorAction.objects.exists()

    # Its process died long ago: the next drill marks it abandoned and goes ahead. This one's new master
    # never registers: the switch happened, the drill failed, and both the row and the record say so.
    Drill.objects.filter(pk=running.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    monkeypatch.setattr(drill, "WAIT_S", 0.3)
    out = drill.run("user:op", "g1", 2)
    assert out["outcome"] == "failed" and "did not register with the nameserver" in out["detail"]
    assert out["rtoMs"] is None and out["newEpoch"] == 2 and out["decidedAt"] is not None
    assert ReplicaGroup.objects.get().master_broker_id == 2
    assert OperatorAction.objects.get().result == "failed"
    running.refresh_from_db()
    assert running.outcome == "failed" and "abandoned" in running.detail
