"""The controller's process metrics (docs/metrics.md): elections and their duration, counted by
``services.elect_master`` after its decision (no I/O: a counter and a histogram in memory, or in the
multiprocess folder's mmap files), and its heartbeats."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from controlplane.metrics import heartbeats_received
from mqrules.codes import ResponseCode

from .core.state import Trigger

HEARTBEATS = heartbeats_received.labels(kind="controller")

elections = Counter(
    "rmqha_elections",
    "Elections attempted (elect_master calls), by trigger and result (the RocketMQ code name)",
    ["trigger", "result"],
)
election_duration = Histogram(
    "rmqha_election_duration_seconds",
    "elect_master, from taking the replica group's row lock to the commit (with the role-change pushes run on it)",
    ["trigger"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def code_name(code: int) -> str:
    """RocketMQ's name of a response code (its number when it has none)."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(int(code))


def election_observed(trigger: Trigger, code: int, seconds: float) -> None:
    elections.labels(trigger=trigger.value, result=code_name(code)).inc()
    election_duration.labels(trigger=trigger.value).observe(seconds)
