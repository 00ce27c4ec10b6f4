"""Consumer offsets with a DataVersion (reference §5.4): every ``consumerOffsetUpdateVersionStep``-th
commit (500) advances the table's DataVersion (stateVersion = the store's state-machine version,
i.e. the master epoch in controller mode). Persisted atomically (temp file, fsync, rename)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from .files import write_json_atomically

CONSUMER_OFFSET_UPDATE_VERSION_STEP = 500


@dataclass(frozen=True, order=True)
class DataVersion:
    state_version: int = 0
    counter: int = 0
    timestamp: int = 0

    def next(self, state_version: int) -> DataVersion:
        """``DataVersion.nextVersion(stateVersion)``."""
        return DataVersion(state_version, self.counter + 1, int(time.time() * 1000))


class ConsumerOffsets:
    def __init__(self, path: Path, step: int = CONSUMER_OFFSET_UPDATE_VERSION_STEP):
        self.path = Path(path)
        self.step = step
        self.offsets: dict[str, int] = {}  # "group@topic@queueId" -> next offset to consume
        self.data_version = DataVersion()
        self.state_version = 0
        self._commits = 0
        if self.path.exists():
            raw = json.loads(self.path.read_text())
            self.offsets = {k: int(v) for k, v in raw["offsetTable"].items()}
            dv = raw.get("dataVersion", {})
            self.data_version = DataVersion(dv.get("stateVersion", 0), dv.get("counter", 0), dv.get("timestamp", 0))

    @staticmethod
    def key(group: str, topic: str, queue_id: int) -> str:
        return f"{group}@{topic}@{queue_id}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int, bump: bool = True) -> None:
        """``bump=False``: a replica applying its master's records, whose DataVersion it adopts instead."""
        self.offsets[self.key(group, topic, queue_id)] = offset
        if not bump:
            return
        self._commits += 1
        if self._commits % self.step == 0:
            self.data_version = self.data_version.next(self.state_version)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get(self.key(group, topic, queue_id))

    def persist(self, **more: object) -> None:
        """``more``: further top-level keys stored with the table (brokers/meta.py)."""
        body = {
            "offsetTable": self.offsets,
            "dataVersion": {
                "stateVersion": self.data_version.state_version,
                "counter": self.data_version.counter,
                "timestamp": self.data_version.timestamp,
            },
        }
        write_json_atomically(self.path, body | more)
