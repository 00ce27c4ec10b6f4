"""Liveness end to end: real uvicorn + Channels, real Celery worker and beat, real websocket clients.

* a broker whose socket stays open but which stops heartbeating is removed by the beat-scheduled
  scan within heartbeatTimeoutMillis + scanNotActiveBrokerInterval (plus the worker's latency);
* a broker whose socket closes is removed at once (long before its heartbeat timeout).
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

from nameserver.models import BrokerMember
from nameserver.settings_store import update_config
from tests.nameserver.helpers import register_body
from tests.procs import celery_worker_and_beat, uvicorn_server
from tests.wsclient import BrokerSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

SILENT, BEATING, CLOSING = "127.0.0.1:30911", "127.0.0.1:30921", "127.0.0.1:30931"
TIMEOUT_MS, SCAN_MS = 3000, 1000
# Beat ticks every second and the worker needs a moment: generous slack, no tight timing.
SLACK_S = 6.0


class Broker(BrokerSocket):
    def heartbeat(self, addr: str) -> bool:
        return self.call("heartbeat", {"clusterName": "c1", "brokerAddr": addr})["payload"]["registered"]


def registered(addr: str) -> bool:
    return BrokerMember.objects.filter(broker_addr=addr).exists()


def wait_until(predicate, timeout_s: float, tick=None) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"condition not met within {timeout_s} s")
        if tick:
            tick()
        time.sleep(0.1)
    return time.monotonic() - start


def test_silent_broker_is_removed_by_the_beat_scan_and_a_closed_socket_at_once(broker_token):
    update_config({"scanNotActiveBrokerInterval": SCAN_MS})
    with uvicorn_server() as base_url, celery_worker_and_beat(), ExitStack() as stack:
        silent, beating, closing = (Broker(stack, base_url, broker_token) for _ in range(3))
        assert silent.call("register", register_body(1, SILENT, timeout=TIMEOUT_MS))["payload"]["code"] == 0
        assert beating.call("register", register_body(2, BEATING, timeout=TIMEOUT_MS))["payload"]["code"] == 0
        assert closing.call("register", register_body(3, CLOSING, timeout=120_000))["payload"]["code"] == 0

        def others_beat() -> None:
            # BEATING and CLOSING go on beating, as live brokers do: the nameserver hears two of its
            # three brokers, so SILENT's silence is its own, not the nameserver's (the blindness guard).
            assert beating.heartbeat(BEATING) and closing.heartbeat(CLOSING)

        for _ in range(3):
            time.sleep(0.3)
            others_beat()
            before = time.monotonic()
            assert silent.heartbeat(SILENT)

        # SILENT stops heartbeating but keeps its socket open; the others go on.
        stopped = before
        for _ in range(int(TIMEOUT_MS / 2000 / 0.25)):
            time.sleep(0.25)
            others_beat()
        assert registered(SILENT), "removed before its heartbeat timeout"
        waited = wait_until(lambda: not registered(SILENT), TIMEOUT_MS / 1000 + SCAN_MS / 1000 + SLACK_S, tick=others_beat)
        elapsed = time.monotonic() - stopped
        assert elapsed >= TIMEOUT_MS / 1000, f"removed after {elapsed:.1f} s, before its timeout"
        assert registered(BEATING) and beating.heartbeat(BEATING)
        assert silent.heartbeat(SILENT) is False  # the nameserver forgot it; it must register again
        print(f"silent broker removed {elapsed:.2f} s after its last heartbeat (waited {waited:.2f} s)")

        # CLOSING has a 120 s timeout: only the close path can remove it within seconds.
        closing.ws.close()
        took = wait_until(lambda: not registered(CLOSING), 10)
        print(f"closed broker removed {took:.2f} s after its socket closed")
        assert registered(BEATING)
