"""Builders for controller API calls."""

from __future__ import annotations

CTL = "/api/v1/controller"


def addr(broker_id: int) -> str:
    return f"127.0.0.1:{10900 + 10 * broker_id}"


def apply_body(broker_id: int, name: str = "g1", cluster: str = "c1", millis: int = 1) -> dict:
    return {
        "clusterName": cluster,
        "brokerName": name,
        "appliedBrokerId": broker_id,
        "registerCheckCode": f"{addr(broker_id)};{millis}",
    }


def heartbeat_body(
    broker_id: int,
    name: str = "g1",
    cluster: str = "c1",
    *,
    epoch: int = 0,
    max_offset: int = 0,
    timeout: int = 60_000,
    priority: int | None = None,
) -> dict:
    body = {
        "clusterName": cluster,
        "brokerName": name,
        "brokerAddr": addr(broker_id),
        "brokerId": broker_id,
        "epoch": epoch,
        "maxOffset": max_offset,
        "confirmOffset": max_offset,
        "heartbeatTimeoutMillis": timeout,
    }
    if priority is not None:
        body["electionPriority"] = priority
    return body
