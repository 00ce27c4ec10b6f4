"""The broker's topic configs (``TopicConfigManager``): persisted in ``config/topics.json`` with a
DataVersion that moves on every change, so the nameserver re-reads queue data when it changed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from mqrules import validation
from mqrules.topic_attributes import TopicMessageType, message_type_of, parse_attributes

from .store.files import write_json_atomically
from .store.offsets import DataVersion

PERM_INHERIT, PERM_READ, PERM_WRITE = 1, 4, 2  # RocketMQ's PermName bits
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # the broker's own topics (consumer metadata, timers): never reported


@dataclass(frozen=True)
class TopicConfig:
    topicName: str
    readQueueNums: int = 8
    writeQueueNums: int = 8
    perm: int = 6
    topicSysFlag: int = 0
    # RocketMQ's TopicConfig.attributes ({"message.type": "DELAY"}), as parse_attributes passed them.
    # Never mutated: a change is a new TopicConfig.
    attributes: dict[str, str] = field(default_factory=dict)

    @cached_property
    def message_type(self) -> TopicMessageType:
        """The topic's message type (NORMAL without the attribute)."""
        return message_type_of(self.attributes)

    @classmethod
    def from_json(cls, name: str, raw: dict) -> TopicConfig:
        """One entry of a ``topicConfigTable`` (``topics.json`` of any version, a snapshot): an entry
        without attributes is a NORMAL topic; bad attributes raise ``ValueError``."""
        fields = {k: v for k, v in raw.items() if k != "topicName"}
        fields["attributes"] = parse_attributes(raw.get("attributes", {}))
        return cls(name, **fields)


class TopicConfigManager:
    def __init__(self, path: Path, on_changed: Callable[[TopicConfig | str], None] | None = None):
        """``on_changed``: told of every change after ``seed`` (the topic, or its name when deleted):
        a master records it for its slaves."""
        self.path = Path(path)
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.write_masked = False  # registered read-only (mask_write)
        self.state_version = 0
        self._on_changed = on_changed
        if self.path.exists():
            raw = json.loads(self.path.read_text())
            self.topics = {name: TopicConfig.from_json(name, tc) for name, tc in raw["topicConfigTable"].items()}
            dv = raw.get("dataVersion", {})
            self.data_version = DataVersion(dv.get("stateVersion", 0), dv.get("counter", 0), dv.get("timestamp", 0))

    def seed(self, topics: Iterable[TopicConfig]) -> None:
        """At start-up, the topics every broker has (the system topics) where missing: stored, not told
        (nothing records them for the slaves, who seed their own)."""
        missing = [tc for tc in topics if tc.topicName not in self.topics]
        for tc in missing:
            self.topics[tc.topicName] = tc
            self._changed()

    def update(self, tc: TopicConfig) -> bool:
        """Create or update a topic; True if something changed (then the version moved and it is stored)."""
        if self.topics.get(tc.topicName) == tc:
            return False
        self.topics[tc.topicName] = tc
        self._changed()
        if self._on_changed is not None:
            self._on_changed(tc)
        return True

    def delete(self, name: str) -> bool:
        if self.topics.pop(name, None) is None:
            return False
        self._changed()
        if self._on_changed is not None:
            self._on_changed(name)
        return True

    def mask_write(self, masked: bool) -> bool:
        """RocketMQ's brokerPermission without PERM_WRITE (the write gate refuses sends for a full
        disk): registration shows every topic read-only (``registerBrokerAll`` masks each topic's
        perm), so routes send elsewhere; the version moves so the nameserver takes the change. True
        if it changed."""
        if masked == self.write_masked:
            return False
        self.write_masked = masked
        self._changed()
        return True

    def bump_state_version(self, epoch: int) -> None:
        """DataVersion.nextVersion(masterEpoch): the nameserver orders registrations by it (§3.3 step 5)."""
        self.state_version = epoch
        self._changed()

    def _changed(self) -> None:
        self.data_version = self.data_version.next(self.state_version)
        self.persist()

    def persist(self) -> None:
        body = {"topicConfigTable": {n: asdict(tc) for n, tc in sorted(self.topics.items())}, "dataVersion": self.wire_version()}
        write_json_atomically(self.path, body)

    def _registered(self, tc: TopicConfig) -> dict:
        body = {k: v for k, v in asdict(tc).items() if k != "topicName"}
        if self.write_masked:
            body["perm"] = tc.perm & ~PERM_WRITE
        return body

    def wire_version(self) -> dict:
        dv = self.data_version
        return {"stateVersion": dv.state_version, "counter": dv.counter, "timestamp": dv.timestamp}

    def wrapper(self) -> dict:
        """``TopicConfigSerializeWrapper`` for registration."""
        return {
            "dataVersion": self.wire_version(),
            "topicConfigTable": {n: self._registered(tc) for n, tc in self.topics.items()},
        }


def system_topics(cluster_name: str, broker_name: str) -> list[TopicConfig]:
    """The topics every RocketMQ broker creates for itself (``TopicConfigManager``'s constructor):
    a self-test topic, and topics named after its cluster and its broker set."""
    return [
        TopicConfig("SELF_TEST_TOPIC", 1, 1, 6),
        TopicConfig(cluster_name, 16, 16, 7, topicSysFlag=2),
        TopicConfig(broker_name, 1, 1, 7, topicSysFlag=1),
    ]


def broker_own(name: str) -> bool:
    """One of the broker's own topics (consumer metadata, timers): neither the status report nor
    mqadmin's requests (brokers/remoting/admin.py) show them."""
    return name.lower().startswith(SYSTEM_TOPIC_PREFIX)


def reported_topic(name: str) -> bool:
    """Not the broker's own, and a name the control plane takes (a retry topic of a long group and
    topic name may be longer): one row it refuses would refuse the whole report (brokers/admin.py)."""
    return not broker_own(name) and validation.is_name(name)


def queue_ids(tc: TopicConfig) -> range:
    """The queues a topic has on this broker (RocketMQ's resetOffset and getTopicStatsInfo walk them all)."""
    return range(max(tc.readQueueNums, tc.writeQueueNums))
