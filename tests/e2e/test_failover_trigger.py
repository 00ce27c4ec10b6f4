"""The master's websocket closing leads to a new master, and a role-change frame to the survivors,
with no further input (reference §1.10: channel close -> onBrokerInactive -> elect -> notify)."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from controlplane.controller.invariants import check_history
from controlplane.controller.models import ReplicaGroup, Transition
from tests.controller.helpers import addr, apply_body, heartbeat_body
from tests.procs import celery_worker_and_beat, uvicorn_server
from tests.wsclient import BrokerSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def join(b: BrokerSocket, broker_id: int) -> None:
    assert b.call("get_next_broker_id", {"clusterName": "c1", "brokerName": "g1"})["payload"]["nextBrokerId"] == broker_id
    assert b.call("apply_broker_id", apply_body(broker_id))["payload"]["code"] == 0
    reply = b.call(
        "register_broker_to_controller",
        {"clusterName": "c1", "brokerName": "g1", "brokerId": broker_id, "brokerAddress": addr(broker_id)},
    )
    assert reply["payload"]["code"] == 0
    assert (
        b.call("controller_heartbeat", heartbeat_body(broker_id, epoch=0, max_offset=100 * broker_id))["type"]
        == "controller_heartbeat_result"
    )


def test_master_socket_closing_elects_a_new_master_and_tells_the_survivors(broker_token):
    with uvicorn_server() as base_url, celery_worker_and_beat(), ExitStack() as stack:
        master, b2, b3 = (BrokerSocket(stack, base_url, broker_token) for _ in range(3))
        for b, i in ((master, 1), (b2, 2), (b3, 3)):
            join(b, i)
        first = master.call("elect_master", {"clusterName": "c1", "brokerName": "g1", "brokerId": 1})["payload"]
        assert (first["masterBrokerId"], first["masterEpoch"]) == (1, 1)
        for b in (master, b2, b3):  # the election was pushed to every live member
            push = b.next_push("notify_broker_role_changed", timeout=10)
            assert push["payload"]["masterBrokerId"] == 1 and push["payload"]["masterEpoch"] == 1
        expanded = master.call(
            "alter_sync_state_set",
            {"brokerName": "g1", "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1},
        )["payload"]
        assert expanded["syncStateSet"] == [1, 2, 3]

        master.ws.close()  # the master process dies: no other input from here on

        for b in (b2, b3):
            push = b.next_push("notify_broker_role_changed", timeout=30)["payload"]
            # Broker 3 reported the larger maxOffset at the same epoch: it wins (reference §1.6).
            assert (push["masterBrokerId"], push["masterEpoch"], push["syncStateSet"]) == (3, 2, [3])
            assert push["masterAddress"] == addr(3)
        group = ReplicaGroup.objects.get(broker_name="g1")
        assert (group.master_broker_id, group.master_epoch) == (3, 2)
        last = Transition.objects.filter(kind="elect").last()
        assert last.trigger == "controller" and last.old_master_broker_id == 1
        assert [c["alive"] for c in last.candidates] == [False, True, True]
    assert check_history() == []
