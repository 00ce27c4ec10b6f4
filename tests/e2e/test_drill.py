"""The failover drill with real broker processes (controlplane/operations/drill.py): two controller-mode
replicas in sync, the headroom the master's own report gives, a preview, then the drill over REST:
the slave takes over, and the RTO is the time until it registered as id 0 at the new epoch, which is
when it takes writes (its own status report says so, and a send to it is acknowledged)."""

from __future__ import annotations

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import group_views, start_in_sync, two_replicas
from tests.e2e.test_replication import send, stop_all
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_a_drill_switches_to_the_in_sync_slave_and_measures_the_rto_from_the_brokers_reports(tmp_path):
    token = ApiToken.issue("drill-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('drill-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        ops = f"{base}/api/v1/operations"
        replicas = two_replicas(tmp_path, base, token, brokerStatusReportInterval=300)
        info, master_of = group_views(base, admin, replicas)
        try:
            before, master, slave = start_in_sync(replicas, info, master_of)
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            assert send(master.grpc_port, 300, first=1) == {pb.Code.OK: 300}
            wait_for(lambda: slave.log_size() == master.log_size(), 30, "the slave caught up")
            slave_id = next(int(i) for i, a in before["brokerMemberGroup"].items() if a.endswith(f":{slave.listen_port}"))

            def headroom() -> dict:
                return httpx.get(f"{ops}/groups/group-a/headroom", headers=admin, timeout=5).json()

            wait_for(lambda: headroom()["configKnown"], 30, "the master's status report")
            h = headroom()
            assert (h["losses"], h["writes"], h["config"]["minInSyncReplicas"], h["syncStateSet"]) == (
                1,
                "taken",
                1,
                sorted(int(i) for i in before["brokerMemberGroup"]),
            )

            def preview() -> dict:
                r = httpx.post(f"{ops}/groups/group-a/drill", headers=admin, json={"preview": True}, timeout=10)
                assert r.status_code == 200, r.text
                return r.json()["plan"]

            wait_for(lambda: preview()["dataAtRiskBytes"] == 0, 30, "water levels showing the slave caught up")
            assert preview()["toBrokerId"] == slave_id

            r = httpx.post(f"{ops}/groups/group-a/drill", headers=admin, json={"preview": False}, timeout=30)
            assert r.status_code == 200, r.text
            drill = r.json()["drill"]
            print(f"drill RTO: {drill['rtoMs']} ms")
            assert drill["outcome"] == "ok", drill
            assert (drill["toBrokerId"], drill["newEpoch"]) == (slave_id, before["masterEpoch"] + 1)
            assert 0 < drill["rtoMs"] < 5_000
            assert (drill["dataAtRiskBytes"], drill["dataLostBytes"]) == (0, 0)
            assert master_of(info()) is slave
            route = httpx.get(f"{base}/api/v1/nameserver/routes/Replicated", headers=admin, timeout=5).json()
            assert route["brokerDatas"][0]["brokerAddrs"]["0"] == f"127.0.0.1:{slave.listen_port}"
            # Serving means what the broker itself says: writable, writing its metadata, at the new epoch.
            assert send(slave.grpc_port, 1, first=10_000) == {pb.Code.OK: 1}

            def own_report() -> dict:
                rows = httpx.get(
                    f"{base}/api/v1/nameserver/brokers/status",
                    params={"brokerName": "group-a", "brokerId": 0},
                    headers=admin,
                    timeout=5,
                ).json()["brokers"]
                mine = [x for x in rows if x["brokerAddr"].endswith(f":{slave.listen_port}")]
                return mine[0]["status"] if mine else {}

            wait_for(lambda: own_report().get("masterEpoch") == drill["newEpoch"], 30, "the new master's status report")
            assert (own_report()["writable"], own_report()["metaMode"]) == (True, "WRITER")
            listed = httpx.get(f"{ops}/drills", params={"brokerName": "group-a"}, headers=admin, timeout=5).json()
            assert [d["id"] for d in listed["drills"]] == [drill["id"]]
        finally:
            stop_all(*replicas)
