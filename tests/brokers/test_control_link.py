"""The broker's control-plane link (brokers/control/nameserver.py) when the control plane drops its
socket in the middle of a call, as uvicorn does when a consumer dies (its Redis restarting): the
call fails at once and the link reconnects and registers again, instead of waiting out the call's
10 s timeout in silence, long enough for the controller to take the broker for dead
(tests/e2e/test_controlplane_restarts.py found it). A websocket server in this process plays the
control plane."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
import websockets

from brokers.config import BrokerConfig
from brokers.control.nameserver import CALL_TIMEOUT_S, NameserverLink
from brokers.topics import TopicConfigManager
from mqrules.codes import CLOSE_BROKER_RECONNECTING

pytestmark = pytest.mark.unit


def test_a_socket_dropped_during_a_call_fails_the_call_and_the_link_registers_again(tmp_path):
    connections: list[str] = []  # what each connection did with its first frame

    async def control_plane(ws) -> None:
        frame = json.loads(await ws.recv())
        if not connections:
            connections.append(f"dropped {frame['type']}")
            ws.transport.abort()  # no answer, no close frame: the TCP connection just ends
            return
        connections.append(f"answered {frame['type']}")
        await ws.send(json.dumps({"type": f"{frame['type']}_result", "seq": frame["seq"], "payload": {}}))
        await ws.wait_closed()

    async def scenario() -> float:
        async with websockets.serve(control_plane, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            config = replace(BrokerConfig(), controlPlaneUrl=f"http://127.0.0.1:{port}", controlPlaneToken="t")
            link = NameserverLink(config, TopicConfigManager(tmp_path / "topics.json"))
            loop = asyncio.get_running_loop()
            started = loop.time()
            link.start()
            try:
                await asyncio.wait_for(link.registered_once.wait(), 3 * CALL_TIMEOUT_S)
                return loop.time() - started
            finally:
                await link.stop(unregister=False)

    took = asyncio.run(scenario())
    assert connections == ["dropped register", "answered register"]
    assert took < CALL_TIMEOUT_S, f"the dropped call was only given up at its timeout ({took:.1f} s)"


def test_a_link_that_gives_up_on_a_call_closes_as_reconnecting_and_comes_back(tmp_path, monkeypatch):
    """After a partition heals, a call may time out on a connection that is only just alive again: the
    broker resets its link. It must close with CLOSE_BROKER_RECONNECTING, or the control plane takes
    a master's close for a stop and elects another broker (tests/e2e/test_partitions.py found it)."""
    monkeypatch.setattr("brokers.control.nameserver.CALL_TIMEOUT_S", 0.5)
    closes: list[int | None] = []

    async def control_plane(ws) -> None:
        try:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "register":  # registrations are answered, heartbeats never
                    await ws.send(json.dumps({"type": "register_result", "seq": frame["seq"], "payload": {}}))
        except websockets.ConnectionClosed:
            pass
        closes.append(ws.close_code)

    async def scenario() -> None:
        async with websockets.serve(control_plane, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            config = replace(
                BrokerConfig(), controlPlaneUrl=f"http://127.0.0.1:{port}", controlPlaneToken="t", brokerHeartbeatInterval=100
            )
            link = NameserverLink(config, TopicConfigManager(tmp_path / "topics.json"))
            link.start()
            try:
                for _ in range(100):  # a heartbeat times out, the link resets and connects again
                    if len(closes) >= 1 and link.connected.is_set():
                        break
                    await asyncio.sleep(0.1)
            finally:
                await link.stop(unregister=False)

    asyncio.run(scenario())
    assert closes and closes[0] == CLOSE_BROKER_RECONNECTING, closes
