"""A broker's batch of consumer-offset commits (docs/websocket.md ``offset_events``, docs/api.md): the
checks, shared by REST and the websocket, and the batch as rows of the event store.

Checked with the pure rules of ``mqrules.validation``, like the heartbeat's water levels: a
broker sends a batch every second, and DRF serializers cost ~100x more per event. Errors are
``validation.Invalid`` with DRF-shaped field errors, e.g. ``{"events": {"3": {"offset": ["must be ..."]}}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mqrules import validation as v
from nameserver.core.water_levels import BrokerRole
from spark_jobs.schema import Source

MAX_EVENTS_PER_BATCH = 10_000

_HEADER = {
    "clusterName": v.name,
    "brokerName": v.name,
    "brokerId": v.integer(),
    "role": v.one_of(BrokerRole),
    "masterEpoch": v.integer(-1),  # -1: none yet
}
_DATA_VERSION = {"stateVersion": v.integer(), "counter": v.integer(), "timestamp": v.integer()}
_EVENT = {
    "consumerGroup": v.name,
    "topic": v.name,
    "queueId": v.integer(0, 65535),
    "offset": v.integer(),
    "source": v.one_of(s.value for s in Source),
    "timestampMs": v.integer(),
}
_OPTIONAL_EVENT = {"queueMaxOffset": v.integer()}


@dataclass(frozen=True)
class OffsetEvent:
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    source: str
    ts_ms: int
    queue_max_offset: int | None


@dataclass(frozen=True)
class OffsetEventBatch:
    cluster_name: str
    broker_name: str
    broker_id: int
    role: str
    master_epoch: int
    data_version: tuple[int, int, int]  # stateVersion, counter, timestamp
    events: tuple[OffsetEvent, ...]

    def to_json(self) -> str:
        """Compact form for the Redis buffer (audits.event_store)."""
        return json.dumps(
            [
                self.cluster_name,
                self.broker_name,
                self.broker_id,
                self.role,
                self.master_epoch,
                list(self.data_version),
                [list(e.__dict__.values()) for e in self.events],
            ],
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> OffsetEventBatch:
        c, b, i, r, e, dv, events = json.loads(raw)
        return cls(c, b, i, r, e, tuple(dv), tuple(OffsetEvent(*ev) for ev in events))


def parse_offset_events(value: object) -> OffsetEventBatch:
    """A reported batch checked and reduced to the known fields; raises ``validation.Invalid`` with
    DRF-shaped field errors (unknown fields are dropped)."""
    if not isinstance(value, dict):
        raise v.Invalid(["must be a JSON object"])
    header, errors = v.json_object(value, _HEADER)
    dv = value.get("dataVersion", {"stateVersion": 0, "counter": 0, "timestamp": 0})
    data_version, dv_errors = v.json_object(dv, _DATA_VERSION) if isinstance(dv, dict) else ({}, ["must be a JSON object"])
    if dv_errors:
        errors["dataVersion"] = dv_errors
    raw_events = value.get("events")
    events: list[OffsetEvent] = []
    if not isinstance(raw_events, list) or not raw_events:
        errors["events"] = ["must be a non-empty list"]
    elif len(raw_events) > MAX_EVENTS_PER_BATCH:
        errors["events"] = [f"at most {MAX_EVENTS_PER_BATCH} events per batch"]
    else:
        event_errors: dict[str, object] = {}
        for n, raw in enumerate(raw_events):
            if not isinstance(raw, dict):
                event_errors[str(n)] = ["must be a JSON object"]
                continue
            ev, ev_errors = v.json_object(raw, _EVENT, _OPTIONAL_EVENT)
            if ev_errors:
                event_errors[str(n)] = ev_errors
                continue
            qmax = ev.get("queueMaxOffset")
            events.append(
                OffsetEvent(ev["consumerGroup"], ev["topic"], ev["queueId"], ev["offset"], ev["source"], ev["timestampMs"], qmax)
            )
        if event_errors:
            errors["events"] = event_errors
    if errors:
        raise v.Invalid(errors)
    return OffsetEventBatch(
        header["clusterName"],
        header["brokerName"],
        header["brokerId"],
        header["role"],
        header["masterEpoch"],
        (data_version["stateVersion"], data_version["counter"], data_version["timestamp"]),
        tuple(events),
    )


_LONG = {"type": "integer", "format": "int64", "minimum": 0, "maximum": v.MAX_ID}
OFFSET_EVENTS_SCHEMA = {
    "type": "object",
    "required": ["clusterName", "brokerName", "brokerId", "role", "masterEpoch", "events"],
    "properties": {
        "clusterName": v.NAME_SCHEMA,
        "brokerName": v.NAME_SCHEMA,
        "brokerId": _LONG,
        "role": {"type": "string", "enum": list(BrokerRole)},
        "masterEpoch": {**_LONG, "minimum": -1},
        "dataVersion": {
            "type": "object",
            "description": "the offset table's DataVersion; default 0s",
            "required": list(_DATA_VERSION),
            "properties": {k: _LONG for k in _DATA_VERSION},
        },
        "events": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_EVENTS_PER_BATCH,
            "items": {
                "type": "object",
                "required": list(_EVENT),
                "properties": {
                    "consumerGroup": v.NAME_SCHEMA,
                    "topic": v.NAME_SCHEMA,
                    "queueId": {"type": "integer", "minimum": 0, "maximum": 65535},
                    "offset": _LONG,
                    "source": {"type": "string", "enum": [s.value for s in Source]},
                    "timestampMs": {
                        **_LONG,
                        "description": "the broker's clock at the commit, epoch ms",
                    },
                    "queueMaxOffset": {
                        **_LONG,
                        "nullable": True,
                        "description": "the queue's max offset on the reporting broker, if known",
                    },
                },
            },
        },
    },
}
