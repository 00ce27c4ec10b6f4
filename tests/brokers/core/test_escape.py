"""Which master takes an acting master's escaped messages (brokers/core/escape.py): another broker
set's live master that the topic's route names writable, the same one for a topic."""

from __future__ import annotations

import zlib

import pytest

from brokers.core.escape import escape_target

pytestmark = pytest.mark.unit


def route(*sets, perm=6, writes=4):
    return {
        "queueDatas": [{"brokerName": name, "writeQueueNums": writes, "perm": perm} for name, _ in sets],
        "brokerDatas": [{"brokerName": name, "brokerGrpcAddrs": addrs} for name, addrs in sets],
    }


def chosen(topic: str, own: str, masters: list[str]) -> str:
    return sorted(masters)[zlib.crc32(f"{topic}{own}".encode()) % len(masters)]


@pytest.mark.parametrize(
    "r, want",
    [
        pytest.param(route(("a", {"0": "a:1"}), ("b", {"0": "b:1"})), "b:1", id="the-other-sets-master"),
        pytest.param(route(("a", {"0": "a:1"})), None, id="no-other-set"),
        pytest.param(route(("a", {"0": "a:1"}), ("b", {"1": "b:2"})), None, id="the-other-set-has-no-master"),
        pytest.param(route(("a", {"0": "a:1"}), ("b", {"0": "b:1"}), perm=4), None, id="not-writable"),
        pytest.param(route(("a", {"0": "a:1"}), ("b", {"0": "b:1"}), writes=0), None, id="no-write-queue"),
        pytest.param(
            route(("a", {"0": "a:1"}), ("b", {"0": "b:1"}), ("c", {"0": "c:1"})),
            chosen("T", "a", ["b:1", "c:1"]),
            id="by-a-hash-of-topic-and-set",
        ),
        pytest.param({}, None, id="an-empty-route"),
    ],
)
def test_the_escape_target(r, want):
    assert escape_target(r, "T", "a") == want
