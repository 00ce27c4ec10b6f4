"""The control plane's REST API as the chaos run reads it (docs/api.md): topics, routes, replica
info, water levels, the controller's history and config."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ReplicaInfo:
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: tuple[int, ...]
    members: dict[int, str]  # broker id -> broker address (listenPort)


class ControlPlaneApi:
    def __init__(self, base_url: str, admin_token: str):
        self.base_url = base_url
        self._client = httpx.Client(base_url=base_url, timeout=TIMEOUT_S, headers={"Authorization": f"Bearer {admin_token}"})

    def close(self) -> None:
        self._client.close()

    def _get(self, path: str, **params) -> httpx.Response:
        return self._client.get(path, params=params or None)

    def create_topic(self, topic: str, broker_name: str, queues: int) -> None:
        r = self._client.post(
            "/api/v1/nameserver/topics",
            json={"topicName": topic, "brokerNames": [broker_name], "readQueueNums": queues, "writeQueueNums": queues},
        )
        r.raise_for_status()

    def route(self, topic: str) -> dict | None:
        r = self._get(f"/api/v1/nameserver/routes/{topic}")
        return r.json() if r.status_code == 200 else None

    def master_grpc_addr_from_route(self, topic: str, broker_name: str) -> str | None:
        route = self.route(topic)
        for bd in (route or {}).get("brokerDatas", []):
            if bd["brokerName"] == broker_name:
                return bd.get("brokerGrpcAddrs", {}).get("0")
        return None

    def replica_info(self, broker_name: str) -> ReplicaInfo | None:
        r = self._get(f"/api/v1/controller/groups/{broker_name}/replica-info")
        if r.status_code != 200:
            return None
        body = r.json()
        return ReplicaInfo(
            body.get("masterBrokerId"),
            body.get("masterAddress"),
            body.get("masterEpoch", 0),
            body.get("syncStateSetEpoch", 0),
            tuple(body.get("syncStateSet", ())),
            {int(k): v for k, v in body.get("brokerMemberGroup", {}).items()},
        )

    def water_levels(self, cluster: str, broker_name: str | None = None) -> list[dict]:
        params = {"clusterName": cluster} | ({"brokerName": broker_name} if broker_name else {})
        r = self._get("/api/v1/nameserver/water-levels", **params)
        r.raise_for_status()
        return r.json()["waterLevels"]

    def cluster_members(self, cluster: str, broker_name: str) -> dict[str, str]:
        """brokerId (as a string) -> address, as the nameserver has them registered."""
        r = self._get("/api/v1/nameserver/cluster-info")
        r.raise_for_status()
        return r.json()["brokerAddrTable"].get(broker_name, {}).get("brokerAddrs", {})

    def history(self, broker_name: str, limit: int = 1000) -> list[dict]:
        """Committed transitions, oldest first."""
        r = self._get("/api/v1/controller/history", brokerName=broker_name, limit=limit)
        r.raise_for_status()
        return list(reversed(r.json()["transitions"]))

    def update_controller_config(self, changes: dict) -> dict:
        r = self._client.patch("/api/v1/controller/config", json=changes)
        r.raise_for_status()
        return r.json()

    def update_nameserver_config(self, changes: dict) -> dict:
        r = self._client.patch("/api/v1/nameserver/config", json=changes)
        r.raise_for_status()
        return r.json()
