"""Controller frames on the broker websocket (Channels + real Redis layer + real Postgres)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from controlplane.controller import liveness
from tests.nameserver.test_websocket import call, connected

from .helpers import addr, apply_body, heartbeat_body

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_controller_frames_and_their_errors(broker_token):
    async def scenario():
        ws = await connected(broker_token)
        reply = await call(ws, "controller_heartbeat", {"clusterName": "c1", "brokerName": "g1", "brokerAddr": addr(1)})
        assert reply["type"] == "error" and reply["payload"]["code"] == 29 and "brokerId" in reply["payload"]["fields"]
        reply = await call(ws, "get_replica_info", {"brokerName": "g1"})
        assert reply["type"] == "error" and reply["payload"]["code"] == 2008
        assert (await call(ws, "apply_broker_id", apply_body(1)))["payload"]["code"] == 0
        assert (await call(ws, "controller_heartbeat", heartbeat_body(1)))["payload"] == {"code": 0, "name": "SUCCESS"}
        reply = await call(ws, "elect_master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1, "designateElect": True})
        assert reply["type"] == "error" and reply["payload"]["code"] == 16  # brokers do not designate
        reply = await call(ws, "elect_master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1})
        assert reply["type"] == "elect_master_result" and reply["payload"]["masterEpoch"] == 1
        push = await ws.receive_json_from(timeout=10)  # the role change reaches the new master itself
        assert push["type"] == "notify_broker_role_changed" and push["payload"]["masterBrokerId"] == 1
        reply = await call(
            ws,
            "alter_sync_state_set",
            {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": 0, "syncStateSet": [1], "syncStateSetEpoch": 1},
        )
        assert reply["type"] == "error" and reply["payload"]["code"] in (2000, 2013)
        await ws.disconnect()

    async_to_sync(scenario)()
    # The closed socket dropped the broker's heartbeat entry at once (BrokerHousekeepingService).
    assert liveness.live_infos("c1", "g1", [1])[1].alive is False
