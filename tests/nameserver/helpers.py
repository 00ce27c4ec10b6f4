"""Builders for nameserver API payloads."""

from __future__ import annotations

import httpx

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


def register_over_rest(base: str, broker_token: str, sets: dict[str, str], cluster: str) -> None:
    """Register one master per broker set (name -> address, no topics) with a live control plane at
    ``base``: broker sets to act on, with no broker process behind them."""
    for name, addr in sets.items():
        r = httpx.post(
            f"{base}{NS}/brokers/register",
            headers={"Authorization": f"Bearer {broker_token}"},
            json=register_body(0, addr, name=name, cluster=cluster, topics={}),
            timeout=10,
        )
        assert r.status_code == 200, r.text
