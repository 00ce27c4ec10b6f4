"""A replica group's health on the dashboard takes the broker's own verdict on its slaves (``inSync``,
judged by its haMaxGapNotInSync) instead of a threshold of its own."""

from __future__ import annotations

import pytest

from dashboards.selectors import _health

pytestmark = pytest.mark.unit

GROUP = {"masterBrokerId": 0, "actingMaster": None, "controllerManaged": False, "syncStateSet": []}
MEMBERS = [{"brokerId": 0, "alive": True, "isolated": False}, {"brokerId": 1, "alive": True, "isolated": False}]


def report(lag: int, **slave) -> dict:
    return {"brokerName": "b1", "brokerId": 0, "role": "SYNC_MASTER", "slaves": [{"brokerId": 1, "lagBytes": lag, **slave}]}


@pytest.mark.parametrize(
    "reports, level, reasons",
    [
        pytest.param([report(10 * 2**30, inSync=True)], "ok", [], id="a-large-gap-the-broker-calls-in-sync"),
        pytest.param(
            [{**report(4096, inSync=False), "haMaxGapNotInSync": 1024}],
            "warn",
            ["slave 1 lag above haMaxGapNotInSync of 1024 bytes (4096 bytes)"],
            id="the-brokers-verdict-and-threshold",
        ),
        pytest.param(
            [report(4096, inSync=False)],
            "warn",
            ["slave 1 lag above haMaxGapNotInSync (4096 bytes)"],
            id="a-verdict-without-threshold",
        ),
        pytest.param([report(10 * 2**30)], "ok", [], id="an-older-broker-without-a-verdict"),
    ],
)
def test_slave_lag_warnings_follow_the_brokers_in_sync_verdict(reports, level, reasons):
    assert _health(GROUP, MEMBERS, reports) == (level, reasons)
