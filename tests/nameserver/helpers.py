"""Builders for nameserver API payloads."""

from __future__ import annotations

NS = "/api/v1/nameserver"


def register_body(
    broker_id: int,
    addr: str,
    *,
    cluster: str = "c1",
    name: str = "b1",
    acting: bool | None = True,
    state: int = 0,
    counter: int = 1,
    topics: dict | None = None,
    timeout: int | None = 10_000,
) -> dict:
    body = {
        "clusterName": cluster,
        "brokerName": name,
        "brokerAddr": addr,
        "haServerAddr": addr.rsplit(":", 1)[0] + ":" + str(int(addr.rsplit(":", 1)[1]) + 1),
        "brokerId": broker_id,
        "heartbeatTimeoutMillis": timeout,
        "topicConfigWrapper": {
            "dataVersion": {"stateVersion": state, "counter": counter, "timestamp": 1},
            "topicConfigTable": topics
            if topics is not None
            else {
                "TopicA": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
                "TopicB": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
            },
        },
    }
    if acting is not None:
        body["enableActingMaster"] = acting
    return body
