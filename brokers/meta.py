"""Consumer metadata that survives failover (seed 000, reference §5.3-5.4): what consumer groups have
consumed, what is in flight, the subscription groups and the topic configs, as records a master writes
to its own commit log and every replica replays.

RocketMQ keeps pop state as CK/ACK records in its revive topic so that it replicates, but syncs
consumer offsets to slaves only every 10 s (SlaveSynchronize): a failover rolls consumers back. Here
every change is a record in the system topic ``rmq_sys_CONSUMER_META`` (one queue, never routed to
clients), so it reaches slaves with the HA link as fast as the messages do, an acknowledged ack is
on every in-sync replica before its answer (the record goes through the same quorum write as a
send), and a new master holds exactly what the old one had committed.

Records are JSON objects ``{"kind", "dataVersion", ...}``; each carries its writer's DataVersion
(stateVersion = the master epoch in controller mode). A replica refuses, with one log line and no
change, a record whose DataVersion is malformed, a snapshot older than its own state, a change
record of an older epoch (a deposed master's), or one that names a consumer group it does not know
(a group record always comes first). ``snapshot`` records replace the whole
state: a master writes one when it takes over and when a replica without a base asks for one, so a
replica that joins late, or whose log was cut, starts from one.

This module decides and holds state; brokers/metalog.py writes and follows the records.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from mqrules.topic_attributes import parse_attributes
from mqrules.validation import Invalid

from .pop import PopState, wire_nonce, wire_offset
from .store.offsets import ConsumerOffsets, DataVersion
from .topics import TopicConfig, TopicConfigManager

log = logging.getLogger("brokers.meta")

META_TOPIC = "rmq_sys_CONSUMER_META"
MAX_NAME = 255  # RocketMQ's topic and group name limit

KINDS = ("group", "pop", "finish", "invisible", "reset", "topic", "snapshot")
SNAPSHOT = "snapshot"


class MetaRejected(ValueError):
    """A record (or a pulled snapshot) that must not be applied; the message says why."""


def dv_wire(dv: DataVersion) -> dict:
    return {"stateVersion": dv.state_version, "counter": dv.counter, "timestamp": dv.timestamp}


def parse_dv(raw: object) -> DataVersion:
    if not isinstance(raw, dict):
        raise MetaRejected(f"bad DataVersion {raw!r}: must be an object")
    values = []
    for key in ("stateVersion", "counter", "timestamp"):
        v = raw.get(key)
        if type(v) is not int or not 0 <= v < 2**63:
            raise MetaRejected(f"bad DataVersion {raw!r}: {key} must be an integer in [0, 2**63)")
        values.append(v)
    return DataVersion(*values)


def _name(body: dict, key: str) -> str:
    return _valid_name(body.get(key), key)


def _valid_name(v: object, what: str) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= MAX_NAME or "\x00" in v:
        raise MetaRejected(f"{what} must be a name of 1-{MAX_NAME} characters, got {v!r}")
    return v


def _queue_id(body: dict) -> int:
    v = body.get("queueId")
    if type(v) is not int or not 0 <= v <= 65535:
        raise MetaRejected(f"queueId must be an integer in [0, 65535], got {v!r}")
    return v


def _checked(what: str, parse, *args):
    try:
        return parse(*args)
    except MetaRejected:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MetaRejected(f"bad {what}: {exc}") from None


def _topic_config(raw: object) -> TopicConfig:
    if not isinstance(raw, dict):
        raise MetaRejected(f"bad topic config {raw!r}")
    name = _name(raw, "topicName")
    ints = {}
    for key in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
        v = raw.get(key, 0)
        if type(v) is not int or not 0 <= v < 2**31:
            raise MetaRejected(f"bad topic config for {name}: {key} must be an integer in [0, 2**31)")
        ints[key] = v
    try:
        attributes = parse_attributes(raw.get("attributes", {}))  # a record of an older broker has none: NORMAL
    except Invalid as exc:
        raise MetaRejected(f"bad topic config for {name}: attributes {exc.fields}") from None
    return TopicConfig(name, **ints, attributes=attributes)


class ConsumerMeta:
    """The replicated consumer state of one broker, persisted in ``config/consumerOffset.json``
    (RocketMQ's offsetTable and dataVersion, plus the pop table, the subscription groups and the
    position in the record queue it reflects)."""

    def __init__(self, path: Path, topics: TopicConfigManager):
        self.path = Path(path)
        self.topics = topics
        self.offsets = ConsumerOffsets(self.path)
        raw = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.cursor: int | None = raw.get("metaQueueOffset")  # records below this one are reflected
        self.groups: set[str] = set(raw.get("subscriptionGroups", ()))
        self.groups |= {key.rsplit("@", 2)[0] for key in self.offsets.offsets}
        self.pop = PopState.from_wire(raw.get("popTable", {}), self._committed())

    def _committed(self) -> dict[tuple[str, str, int], int]:
        out = {}
        for key, value in self.offsets.offsets.items():
            group, topic, qid = key.rsplit("@", 2)
            out[(group, topic, int(qid))] = value
        return out

    @property
    def data_version(self) -> DataVersion:
        return self.offsets.data_version

    def consumed_below(self, group: str, topic: str, queue_id: int) -> int | None:
        """What the group consumes next on the queue (None: it never consumed it here): its pop
        state's, which the offset table follows within a revive round, else the offset table's."""
        state = self.pop.queues.get((group, topic, queue_id))
        if state is not None:
            return state.acked_below
        return self.offsets.get(group, topic, queue_id)

    # --- records a master writes ------------------------------------------------------------------

    def record(self, kind: str, **fields: object) -> dict:
        return {"kind": kind, "dataVersion": dv_wire(self.data_version), **fields}

    def snapshot(self) -> dict:
        """The whole state, as a ``snapshot`` record (also what pre-online pulls, reference §5.3)."""
        return self.record(
            SNAPSHOT,
            offsetTable=dict(self.offsets.offsets),
            popTable=self.pop.to_wire(),
            subscriptionGroups=sorted(self.groups),
            topicConfigTable={n: asdict(tc) for n, tc in sorted(self.topics.topics.items())},
        )

    # --- applying records ---------------------------------------------------------------------------

    def apply(self, record: object) -> bool:
        """Apply one record; True if the topic configs changed. Raises MetaRejected (nothing changed)."""
        if not isinstance(record, dict):
            raise MetaRejected(f"a record must be a JSON object, got {type(record).__name__}")
        kind = record.get("kind")
        if kind not in KINDS:
            raise MetaRejected(f"unknown record kind {kind!r}")
        dv = parse_dv(record.get("dataVersion"))
        ours = self.data_version
        # A snapshot replaces everything: it must not be older. A change record is fenced by its
        # writer's epoch (stateVersion): a deposed master's never applies; within an epoch changes
        # commute, and an acting master's own count moves on past its master's late records.
        stale = (not self._takes(dv)) if kind == SNAPSHOT else dv.state_version < ours.state_version
        if stale:
            raise MetaRejected(f"stale {kind} record: DataVersion {dv_wire(dv)} is older than this replica's {dv_wire(ours)}")
        dv = max(dv, ours)
        if kind == SNAPSHOT:
            return self._adopt(record, dv)
        if kind == "topic":
            return self._apply_topic(record, dv)
        if kind == "group":
            self.groups.add(_name(record, "group"))
            self.offsets.data_version = dv
            return False
        group, topic, queue_id = _name(record, "group"), _name(record, "topic"), _queue_id(record)
        if group not in self.groups:
            raise MetaRejected(f"{kind} record for unknown consumer group {group!r}")
        change = _checked(f"{kind} record", self._parse_queue_change, kind, record)
        change(group, topic, queue_id)
        self.offsets.data_version = dv
        return False

    def _parse_queue_change(self, kind: str, record: dict):
        """Validate first, then return the change: a rejected record changes nothing."""
        pop = self.pop
        if kind == "pop":
            entries = [(wire_offset(o), wire_offset(d), wire_offset(a), wire_nonce(n)) for o, d, a, n in record["entries"]]
            skipped = [wire_offset(o) for o in record.get("skipped", ())]

            def change(g, t, q):
                pop.apply_pop(g, t, q, entries)
                pop.finish(g, t, q, skipped)

            return change
        if kind == "finish":
            offsets = [wire_offset(o) for o in record["offsets"]]
            return lambda g, t, q: pop.finish(g, t, q, offsets)
        if kind == "invisible":
            offset, deadline = wire_offset(record["offset"]), wire_offset(record["deadlineMs"])
            nonce = wire_nonce(record["nonce"])
            return lambda g, t, q: pop.apply_invisible(g, t, q, offset, deadline, nonce)
        offset = wire_offset(record["offset"])  # reset
        return lambda g, t, q: pop.queue(g, t, q).reset(offset)

    def _apply_topic(self, record: dict, dv: DataVersion) -> bool:
        if "delete" in record:
            name = _name(record, "delete")
            changed = self.topics.delete(name)
        else:
            changed = self.topics.update(_topic_config(record.get("topicConfig")))
        self.offsets.data_version = dv
        return changed

    def _adopt(self, snap: dict, dv: DataVersion) -> bool:
        """Replace everything with ``snap`` (validated whole first)."""

        def parse():
            offsets, committed = {}, {}
            for key, value in snap["offsetTable"].items():
                group, topic, qid = key.rsplit("@", 2)
                offsets[key] = committed[(group, topic, int(qid))] = wire_offset(value)
            groups = {_valid_name(g, "subscription group") for g in snap["subscriptionGroups"]}
            pop = PopState.from_wire(snap["popTable"], committed)
            topics = [_topic_config(tc) for tc in snap.get("topicConfigTable", {}).values()]
            return offsets, groups, pop, topics

        offsets, groups, pop, topics = _checked("snapshot", parse)
        self.offsets.offsets = offsets
        self.offsets.data_version = dv
        self.groups, self.pop = groups, pop
        changed = False
        for tc in topics:
            changed |= self.topics.update(tc)
        return changed

    def _takes(self, snapshot_dv: DataVersion) -> bool:
        """A whole copy replaces ours iff it is not older (``DataVersion.compare(local, remote) <= 0``)."""
        return snapshot_dv >= self.data_version

    def adopt_if_newer(self, snap: object) -> bool:
        """Pre-online (reference §5.3 step 3c): adopt a peer's state iff ours is not newer
        (``DataVersion.compare(local, remote) <= 0``). Raises MetaRejected for a malformed one."""
        if not isinstance(snap, dict) or snap.get("kind") != SNAPSHOT:
            raise MetaRejected("not a snapshot")
        dv = parse_dv(snap.get("dataVersion"))
        if not self._takes(dv):
            log.info(
                "kept this broker's consumer state: DataVersion %s is newer than the peer's %s",
                dv_wire(self.data_version),
                dv_wire(dv),
            )
            return False
        self._adopt(snap, dv)
        return True

    # --- local changes of an acting master (no log to write to) -----------------------------------

    def bump(self, state_version: int | None = None) -> None:
        sv = self.data_version.state_version if state_version is None else state_version
        self.offsets.data_version = self.data_version.next(sv)

    def persist(self) -> None:
        self.offsets.persist(popTable=self.pop.to_wire(), subscriptionGroups=sorted(self.groups), metaQueueOffset=self.cursor)
