"""An operator's mqadmin work on real brokers, seen by the official client (issue 20): a classic master
and slave (slave acting master on), the official Producer and SimpleConsumer, and the control plane's
REST API (the command line and the dashboard call the same services).

- consumerProgress and topicStatus come from the brokers' own reports: committed offsets after the
  client's acks, max offsets after its sends, lag;
- brokerStatus shows each broker's status and config; updateBrokerConfig changes a dynamic key on the
  running master and writes it to its broker.conf; a key that needs a restart is refused untouched;
- resetOffsetByTime, previewed then applied by the master: the client receives every message again;
  the reset replicates: after the master is killed, the slave acting for it serves the reset offsets
  (consumerProgress now from its report) and the client receives them again from it; the brokers
  reported the reset as operator_reset, which the offset audit never counts as a rollback.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq import Message as ClientMessage

from audits import event_store
from controlplane.models import ApiToken, OperatorAction
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_replication import Replica
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC, GROUP, MESSAGES = "Replicated", "billing", 24  # Replica's topic: 4 queues
ACTING = {"enableSlaveActingMaster": "true", "skipPreOnline": "true", "brokerStatusReportInterval": 300}


def receive_all(grpc_port: int, expected: int, timeout_s: float = 60) -> list[str]:
    """The official SimpleConsumer receives and acks until ``expected`` messages came (ids in order)."""
    consumer = SimpleConsumer(
        ClientConfiguration(f"127.0.0.1:{grpc_port}", Credentials()), GROUP, {TOPIC: FilterExpression()}, await_duration=1
    )
    consumer.startup()
    got: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.receive(32, 30):
                got.append(m.message_id)
                consumer.ack(m)
    finally:
        consumer.shutdown()
    return got


def test_progress_config_and_a_replicated_offset_reset_on_real_brokers(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_FLUSH_SECONDS", "3600")  # the test reads the audit's buffer
    token = ApiToken.issue("adm-e2e-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('adm-e2e-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        api = httpx.Client(base_url=f"{base}/api/v1", headers=admin, timeout=30)
        master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", base, token, **ACTING)
        slave = Replica(tmp_path, "slave", 1, "SLAVE", base, token, **ACTING)
        try:
            master.start()
            slave.start()

            def reported(broker_id: int) -> dict | None:
                r = api.get("/nameserver/brokers/status", params={"brokerName": "group-a", "brokerId": broker_id})
                return r.json()["brokers"][0] if r.status_code == 200 else None

            wait_for(lambda: (reported(0) or {}).get("status", {}).get("metaMode") == "WRITER", 30, "the master's report")
            wait_for(lambda: reported(1) is not None, 30, "the slave's report")
            status = reported(0)
            assert status["alive"] and status["config"]["brokerRole"] == "ASYNC_MASTER"
            assert "controlPlaneToken" not in status["config"] and "retryMaxTimes" in status["dynamicKeys"]

            # The official client sends and consumes everything.
            before_sends = int(time.time() * 1000) - 1
            producer = Producer(ClientConfiguration(f"127.0.0.1:{master.grpc_port}", Credentials()), (TOPIC,))
            producer.startup()
            try:
                for i in range(MESSAGES):
                    msg = ClientMessage()
                    msg.topic, msg.body = TOPIC, f"bill-{i}".encode()
                    producer.send(msg)
            finally:
                producer.shutdown()
            first = receive_all(master.grpc_port, MESSAGES)
            assert len(set(first)) == MESSAGES

            def progress() -> dict:
                r = api.get(f"/nameserver/consumer-groups/{GROUP}")
                return r.json() if r.status_code == 200 else {"lag": None, "queues": []}

            wait_for(lambda: sum(q["committedOffset"] for q in progress()["queues"]) == MESSAGES, 30, "the acks in progress")
            assert progress()["lag"] == 0
            topic_status = api.get(f"/nameserver/topics/{TOPIC}/offsets").json()["queues"]
            assert sum(q["maxOffset"] - q["minOffset"] for q in topic_status) == MESSAGES
            groups = {g["group"]: g for g in api.get("/nameserver/consumer-groups").json()["groups"]}
            assert groups[GROUP]["maxOffset"] == MESSAGES and groups[GROUP]["lag"] == 0

            # A dynamic key changes on the running master and in its broker.conf; a restart-only key does not.
            body = {"brokerName": "group-a", "brokerId": 0, "updates": {"retryMaxTimes": 3}}
            changed = api.post("/operations/brokers/config", json=body)
            assert changed.status_code == 200 and changed.json()["applied"], changed.text
            assert changed.json()["brokers"][0]["changed"] == {"retryMaxTimes": ["16", "3"]}
            assert "retryMaxTimes=3" in master.conf.read_text().splitlines()
            wait_for(lambda: reported(0)["config"]["retryMaxTimes"] == "3", 10, "the new value in the master's report")
            refused = api.post("/operations/brokers/config", json={**body, "updates": {"listenPort": 1}})
            assert refused.status_code == 400 and "listenPort" in refused.json()["fields"]["updates"]
            assert "listenPort=1" not in master.conf.read_text().splitlines()

            # Reset to before the sends: previewed (nothing changes), then applied by the master.
            reset = {"topic": TOPIC, "timestampMs": before_sends}
            preview = api.post(f"/operations/consumer-groups/{GROUP}/reset-offset", json={**reset, "preview": True}).json()
            assert sum(q["reconsumed"] for q in preview["queues"]) == MESSAGES and not preview["applied"]
            assert progress()["lag"] == 0
            applied = api.post(f"/operations/consumer-groups/{GROUP}/reset-offset", json=reset)
            assert applied.status_code == 200 and applied.json()["applied"], applied.text
            assert OperatorAction.objects.get(action="reset_offset").result == "ok"
            wait_for(lambda: progress()["lag"] == MESSAGES, 10, "the reset in consumer progress")

            # The master reported the reset to the audit's event store as operator_reset (never counted
            # as a rollback), within its one-second report interval.
            def resets() -> set[int]:
                return {
                    e.offset
                    for _, batch in event_store.pending_batches()
                    for e in batch.events
                    if e.source == "operator_reset" and e.consumer_group == GROUP
                }

            wait_for(lambda: resets() == {0}, 10, "the reset reported as operator_reset")

            # The slave follows the reset record; the master dies; the slave acting for it serves the
            # reset offsets: consumer progress now comes from its report, and the client gets all again.
            wait_for(lambda: slave.log_size() == master.log_size(), 30, "the slave caught up")
            master.stop(signal.SIGKILL)
            wait_for(
                lambda: (reported(1) or {}).get("status", {}).get("metaMode") == "ACTING", 30, "the slave acting for its master"
            )
            wait_for(lambda: {q["servedBy"] for q in progress()["queues"]} == {1}, 10, "progress from the acting slave's report")
            assert progress()["lag"] == MESSAGES
            again = receive_all(slave.grpc_port, MESSAGES)
            assert set(again) == set(first)

        finally:
            master.stop()
            slave.stop()
