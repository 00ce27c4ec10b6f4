"""A broker that dies while its frame is handled (kill -9 between a heartbeat and its answer) is
unregistered at once, as any closed socket is: the answer that cannot be sent any more does not end
the socket's consumer before the server's disconnect event runs the close hooks (issue 16's bench
found one such kill per ten, whose election then waited for the liveness scan). Real uvicorn, a raw
socket aborted right after its frame; no Celery beat, so no scan can stand in."""

from __future__ import annotations

import json
import socket
import time
from contextlib import ExitStack

import httpx
import pytest

from controlplane.models import ApiToken
from testkit.procs import ARTIFACTS
from tests.e2e.test_broker_membership import wait_for
from tests.procs import uvicorn_server
from tests.wsclient import BrokerSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def register_frame(n: int) -> str:
    return json.dumps(
        {
            "type": "register",
            "seq": 1,
            "payload": {
                "clusterName": "gone",
                "brokerName": f"gone-{n}",
                "brokerAddr": f"127.0.0.1:{20000 + n}",
                "haServerAddr": f"127.0.0.1:{21000 + n}",
                "brokerId": 0,
                "topicConfigWrapper": {"dataVersion": {"stateVersion": 0, "counter": 1, "timestamp": 1}, "topicConfigTable": {}},
            },
        }
    )


def test_a_broker_whose_socket_dies_during_its_frame_is_unregistered_at_once(tmp_path):
    token = ApiToken.issue("gone-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('gone-admin', 'admin')[1]}"}
    with uvicorn_server() as base:

        def registered() -> set[str]:
            info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
            return set(info["brokerAddrTable"])

        names = set()
        for n in range(5):
            with ExitStack() as stack:
                sock = BrokerSocket(stack, base, token)
                sock.ws.send(register_frame(n))
                raw = sock.ws.socket
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                raw.close()  # RST at once: the process died with its frame in flight
                names.add(f"gone-{n}")
            time.sleep(0.05)
        # Each is gone with its socket, also those whose registration was handled after it died.
        wait_for(lambda: not (registered() & names), 15, "every broker whose socket died unregistered")
        port = base.rsplit(":", 1)[1]
        logs = "".join(p.read_text() for p in ARTIFACTS.glob(f"uvicorn-{port}-*.log"))
        assert "a broker closed its socket before its register_result answer" in logs  # the race did happen
