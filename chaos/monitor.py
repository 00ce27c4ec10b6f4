"""A background observer of the control plane during a run: the controller's view of the group
(master, epochs, SyncStateSet) and every broker's own water-level report, polled a few times a
second, so that what happened between the runner's steps is on record."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx

from .api import ControlPlaneApi, ReplicaInfo

POLL_S = 0.25


@dataclass(frozen=True)
class ControllerView:
    at: float  # time.monotonic()
    info: ReplicaInfo


class Monitor(threading.Thread):
    def __init__(self, api: ControlPlaneApi, cluster: str, broker_name: str, controller_mode: bool):
        super().__init__(name="chaos-monitor", daemon=True)
        self.api = api
        self.cluster = cluster
        self.broker_name = broker_name
        self.controller_mode = controller_mode
        self.views: list[ControllerView] = []  # one per change
        self.reports: set[tuple[str, str, int]] = set()  # (brokerAddr, role, masterEpoch) ever reported
        self.latest_levels: dict[str, dict] = {}  # brokerAddr -> its latest water-level report
        self.unreachable_s = 0.0  # time the control plane did not answer
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def run(self) -> None:
        while not self._halt.is_set():
            started = time.monotonic()
            try:
                self.poll()
            except (httpx.HTTPError, ValueError, KeyError):
                self.unreachable_s += POLL_S
            self._halt.wait(max(0.0, POLL_S - (time.monotonic() - started)))

    def poll(self) -> None:
        info = self.api.replica_info(self.broker_name) if self.controller_mode else None
        levels = self.api.water_levels(self.cluster, self.broker_name)
        now = time.monotonic()
        with self._lock:
            if info is not None and (not self.views or self.views[-1].info != info):
                self.views.append(ControllerView(now, info))
            for w in levels:
                self.latest_levels[w["brokerAddr"]] = w
                self.reports.add((w["brokerAddr"], w["role"], w["masterEpoch"]))

    def levels(self) -> dict[str, dict]:
        with self._lock:
            return dict(self.latest_levels)

    def reported(self) -> set[tuple[str, str, int]]:
        with self._lock:
            return set(self.reports)
