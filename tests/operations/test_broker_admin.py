"""The control plane's side of the brokers' admin requests, over real sockets (real uvicorn, real
Redis, real Postgres): a broker's ``broker_status`` report feeds brokerStatus, consumerProgress and
topicStatus; updateBrokerConfig and resetOffset go to the broker as requests with an answer
(controlplane/broker_rpc.py), also from a web process that does not hold the broker's socket, and
are audited (a record committed before the broker is asked, completed with what it did). The broker
here is a websocket client that speaks the frames: the broker's own side (brokers/admin.py) is
tested against a real broker process in tests/e2e/test_admin_ops.py."""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack

import httpx
import pytest

from controlplane.models import ApiToken, OperatorAction
from tests.nameserver.helpers import register_body
from tests.procs import uvicorn_server
from tests.wsclient import BrokerSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CLUSTER, SET, ADDR = "adm", "adm-a", "127.0.0.1:30911"


def register(sock: BrokerSocket) -> None:
    topics = {t: {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6} for t in ("Orders", "Audit")}
    reply = sock.call("register", register_body(0, ADDR, cluster=CLUSTER, name=SET, topics=topics))
    assert reply["type"] == "register_result", reply


def report(committed: int = 40) -> dict:
    return {
        "clusterName": CLUSTER,
        "brokerName": SET,
        "brokerId": 0,
        "brokerAddr": ADDR,
        "status": {"role": "SYNC_MASTER", "metaMode": "WRITER", "masterEpoch": 3, "writable": True, "commitLogMaxOffset": 9000},
        "config": {"brokerName": SET, "retryMaxTimes": "16", "listenPort": "30911", "controlPlaneToken": "s3cret"},
        "dynamicKeys": ["retryMaxTimes"],
        "queues": [["Orders", 0, 0, 100], ["Orders", 1, 5, 60]],
        "offsets": [["g1", "Orders", 0, committed], ["g1", "Orders", 1, 60], ["g2", "Orders", 0, 100]],
        "reportedAtMs": int(time.time() * 1000),
    }


class Answering:
    """Answers the control plane's requests on ``sock`` as ``answer(kind, payload)`` says, in a thread
    (the test's main thread makes the REST calls that cause them). ``answer`` returning None: silence."""

    def __init__(self, sock: BrokerSocket, answer):
        self.sock, self.answer, self.asked = sock, answer, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                frame = json.loads(self.sock.ws.recv(timeout=0.1))
            except TimeoutError:
                continue
            payload = frame.get("payload") or {}
            if "requestId" not in payload:
                continue
            self.asked.append((frame["type"], payload))
            reply = self.answer(frame["type"], payload)
            if reply is not None:
                self.sock.seq += 1
                body = {"requestId": payload["requestId"], **reply}
                self.sock.ws.send(json.dumps({"type": "rpc_reply", "seq": self.sock.seq, "payload": body}))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def broker_answers(kind: str, payload: dict) -> dict | None:
    if kind == "update_broker_config":
        value = payload["updates"].get("retryMaxTimes")
        if value == "-3":
            return {"ok": False, "error": {"code": 29, "name": "INVALID_PARAMETER", "detail": "retryMaxTimes: must be >= 0"}}
        return {"ok": True, "result": {"changed": {"retryMaxTimes": ["16", value]}, "persisted": not payload["preview"]}}
    if kind == "reset_offset":
        queues = [
            {"queueId": 0, "committedOffset": 40, "newOffset": 10, "minOffset": 0, "maxOffset": 100},
            {"queueId": 1, "committedOffset": 60, "newOffset": 60, "minOffset": 5, "maxOffset": 60},
        ]
        return {"ok": True, "result": {"applied": not payload["preview"], "queues": queues}}
    return None


def test_reports_feed_the_reads_and_requests_reach_the_broker_audited():
    token = ApiToken.issue("adm-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('adm-admin', 'admin')[1]}"}
    reader = {"Authorization": f"Bearer {ApiToken.issue('adm-reader', 'read')[1]}"}
    with uvicorn_server(BROKER_RPC_TIMEOUT_SECONDS="2") as base, ExitStack() as stack:
        api = httpx.Client(base_url=f"{base}/api/v1", timeout=20)
        sock = BrokerSocket(stack, base, token)
        register(sock)
        assert sock.call("broker_status", report())["type"] == "broker_status_result"
        bad = sock.call("broker_status", {**report(), "offsets": [["g1", "Orders", -1, 5]]})
        assert bad["type"] == "error" and bad["payload"]["code"] == 29 and "offsets" in bad["payload"]["fields"]

        # brokerStatus: the secret is never stored; the broker is alive (it registered).
        status = api.get("/nameserver/brokers/status", params={"brokerName": SET}, headers=reader)
        assert status.status_code == 200, status.text
        (row,) = status.json()["brokers"]
        assert row["alive"] and not row["stale"] and row["status"]["masterEpoch"] == 3
        assert "controlPlaneToken" not in row["config"] and row["dynamicKeys"] == ["retryMaxTimes"]
        assert api.get("/nameserver/brokers/status", params={"brokerName": "nope"}, headers=reader).status_code == 404
        assert (
            api.get("/nameserver/brokers/status", params={"brokerName": SET, "brokerId": "x"}, headers=reader).status_code == 400
        )

        # consumerProgress and topicStatus, from the serving broker's report.
        groups = api.get("/nameserver/consumer-groups", headers=reader).json()["groups"]
        assert [(g["group"], g["queues"], g["lag"]) for g in groups] == [("g1", 2, 60), ("g2", 1, 0)]
        g1 = api.get("/nameserver/consumer-groups/g1", headers=reader).json()
        assert [(q["queueId"], q["committedOffset"], q["maxOffset"], q["lag"]) for q in g1["queues"]] == [
            (0, 40, 100, 60),
            (1, 60, 60, 0),
        ]
        assert api.get("/nameserver/consumer-groups/ghost", headers=reader).json()["code"] == 26
        offsets = api.get("/nameserver/topics/Orders/offsets", headers=reader).json()["queues"]
        assert [(q["queueId"], q["minOffset"], q["maxOffset"]) for q in offsets] == [(0, 0, 100), (1, 5, 60)]

        # A read token may not change anything; a key the broker cannot change at runtime is refused
        # before the broker is asked.
        body = {"brokerName": SET, "updates": {"retryMaxTimes": 5}}
        assert api.post("/operations/brokers/config", json=body, headers=reader).status_code == 403
        answering = Answering(sock, broker_answers)
        try:
            refused = api.post("/operations/brokers/config", json={**body, "updates": {"listenPort": 1}}, headers=admin)
            assert refused.status_code == 400 and "restart" in refused.json()["fields"]["updates"]["listenPort"][0]
            assert not answering.asked

            preview = api.post("/operations/brokers/config", json={**body, "preview": True}, headers=admin)
            assert preview.status_code == 200, preview.text
            assert preview.json()["brokers"][0]["changed"] == {"retryMaxTimes": ["16", "5"]}
            assert not OperatorAction.objects.filter(action="update_broker_config").exists()

            applied = api.post("/operations/brokers/config", json=body, headers=admin)
            assert applied.status_code == 200 and applied.json()["applied"], applied.text
            (record,) = OperatorAction.objects.filter(action="update_broker_config")
            assert (
                record.result == "ok"
                and record.actor == "token:adm-admin"
                and record.params == {"updates": {"retryMaxTimes": "5"}}
            )
            assert record.after["brokers"][0]["persisted"] is True
            assert [kind for kind, p in answering.asked] == ["update_broker_config"] * 3  # 2 previews, 1 apply

            refused = api.post("/operations/brokers/config", json={**body, "updates": {"retryMaxTimes": "-3"}}, headers=admin)
            assert refused.status_code == 400 and "must be >= 0" in refused.json()["detail"]
            assert OperatorAction.objects.filter(action="update_broker_config").count() == 1  # nothing changed, nothing recorded

            # A reset: preview, then applied and recorded as the offset audit reads resets. Asked of
            # another web process than the one holding the broker's socket: the request crosses the
            # channel layer, the answer comes back through Redis.
            other = httpx.Client(base_url=f"{stack.enter_context(uvicorn_server())}/api/v1", timeout=20)
            reset = {"topic": "Orders", "timestampMs": 1_700_000_000_000}
            seen = other.post(
                "/operations/consumer-groups/g1/reset-offset", json={**reset, "preview": True}, headers=admin
            ).json()
            assert [(q["queueId"], q["reconsumed"], q["skipped"]) for q in seen["queues"]] == [(0, 30, 0), (1, 0, 0)]
            assert seen["preview"] and not seen["applied"]
            done = other.post("/operations/consumer-groups/g1/reset-offset", json=reset, headers=admin)
            assert done.status_code == 200 and done.json()["applied"], done.text
            (record,) = OperatorAction.objects.filter(action="reset_offset")
            assert record.result == "ok" and record.broker_name == "" and record.params["consumerGroup"] == "g1"
            both = api.post("/operations/consumer-groups/g1/reset-offset", json={**reset, "offset": 3}, headers=admin)
            assert both.status_code == 400 and "timestampMs" in both.json()["fields"]
        finally:
            answering.close()

        # A broker that does not answer: the operator hears it, nothing is recorded as done.
        silent = Answering(sock, lambda kind, payload: None)
        try:
            started = time.monotonic()
            r = api.post("/operations/brokers/config", json=body, headers=admin)
            assert r.status_code == 503 and "did not answer" in r.json()["detail"], r.text
            assert time.monotonic() - started < 10  # the configured 2 s, not the default 10 s
            assert OperatorAction.objects.filter(action="update_broker_config").count() == 1
        finally:
            silent.close()

        # Another socket cannot answer a request that was not sent to it.
        other = BrokerSocket(stack, base, token)
        forged = other.call("rpc_reply", {"requestId": "0" * 32, "ok": True, "result": {}})
        assert forged["type"] == "error" and forged["payload"]["code"] == 16
