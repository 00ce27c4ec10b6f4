"""What an operator sees of a running broker and changes on it (issue 20; docs/websocket.md, "Broker
status and requests"): the ``broker_status`` report every brokerStatusReportInterval (status,
configuration, the topics' queue offsets, the consumer offsets), and the control plane's requests
``update_broker_config`` (mqadmin updateBrokerConfig) and ``reset_offset`` (resetOffsetByTime).

The checks of a configuration change are brokers/config.py's (the same as broker.conf's); a reset
is carried out by brokers/grpc/consumer.py (``reset_queue``: the queue's lock, a ``reset`` record that
replicates like every consumer-metadata record, the offset report as ``operator_reset``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from mqrules import validation
from mqrules.codes import ResponseCode

from .config import (
    DYNAMIC_KEYS,
    BrokerConfig,
    ConfigInvalid,
    apply_update,
    persist_changes,
    plan_update,
    reported_values,
)
from .control.nameserver import ControlPlane, ControlPlaneError, RequestRefused
from .grpc.consumer import NotStored
from .ha.gate import WritePermission
from .ha.service import HAService
from .meta import MAX_NAME, ConsumerMeta
from .metalog import MetaLog, MetaMode
from .pop import now_ms
from .retention import Retention
from .store import codec
from .store.store import MessageStore
from .topics import TopicConfig, TopicConfigManager, queue_ids, reported_topic

log = logging.getLogger("brokers.admin")

OPERATOR_RESET = "operator_reset"  # the offset report's source: the offset audit never counts it


def problem_fields(problems: list[str]) -> dict[str, list[str]]:
    """``"key: message"`` problems as a REST error's ``fields``."""
    fields: dict[str, list[str]] = {}
    for problem in problems:
        key, _, message = problem.partition(":")
        fields.setdefault(key.strip(), []).append(message.strip() or problem)
    return fields


def _invalid(fields: dict[str, list[str]]) -> RequestRefused:
    detail = "; ".join(f"{key}: {' '.join(messages)}" for key, messages in fields.items())
    return RequestRefused.of(ResponseCode.INVALID_PARAMETER, detail, fields)


def parse_reset(payload: dict) -> tuple[str, str, int | None, int | None, bool]:
    """(group, topic, timestampMs, offset, preview) of a ``reset_offset`` request; RequestRefused
    (INVALID_PARAMETER, one message per field) when malformed."""
    fields: dict[str, list[str]] = {}
    for key in ("group", "topic"):
        v = payload.get(key)
        if not isinstance(v, str) or not 0 < len(v) <= MAX_NAME or "\x00" in v:
            fields[key] = [f"must be a name of 1-{MAX_NAME} characters"]
    timestamp, offset = payload.get("timestampMs"), payload.get("offset")
    if (timestamp is None) == (offset is None):
        fields["timestampMs"] = ["give exactly one of timestampMs and offset"]
    elif timestamp is not None and (type(timestamp) is not int or not 0 <= timestamp < 2**63):
        fields["timestampMs"] = ["must be an integer >= 0 (ms since the epoch)"]
    elif offset is not None and (type(offset) is not int or not -1 <= offset < 2**63):
        fields["offset"] = ["must be an integer >= -1 (-1: each queue's max offset)"]
    preview = payload.get("preview", False)
    if not isinstance(preview, bool):
        fields["preview"] = ["must be true or false"]
    if fields:
        raise _invalid(fields)
    return payload["group"], payload["topic"], timestamp, offset, preview


class StaticMappings(Protocol):
    def get(self, topic: str) -> object | None:
        """The static topic's mapping on this broker (None: not a static topic)."""


class ConsumerQueues(Protocol):
    """What an operator's view and resets need of the client endpoint's consumer side."""

    static: StaticMappings

    async def first_offset(self, topic: str, queue_id: int, end: int) -> int: ...

    async def search_offset(self, topic: str, queue_id: int, wanted: int) -> int: ...

    async def reset_queue(self, group: str, topic: str, queue_id: int, offset: int, source: str) -> None: ...


class BrokerAdmin:
    def __init__(
        self,
        config: BrokerConfig,
        config_path: Path | None,
        *,
        link: ControlPlane,
        store: MessageStore,
        topics: TopicConfigManager,
        meta: ConsumerMeta,
        metalog: MetaLog,
        ha: HAService,
        permission: WritePermission,
        retention: Retention,
        consumers: Callable[[], ConsumerQueues | None],
        config_changed: Callable[[], None],
        metrics_addr: Callable[[], str | None] = lambda: None,
        clients: Callable[[], list[dict]] = list,
    ):
        """``config_path``: the broker.conf the broker was started from, where changes are kept (None:
        they last until the process stops). ``consumers()``: the client endpoint's consumer side (None
        until it serves). ``config_changed()``: an operator's change was applied to ``config`` (the
        parts that derived values from it at startup take them again)."""
        self.config = config
        self.config_path = config_path
        self.link, self.store, self.topics, self.meta, self.metalog = link, store, topics, meta, metalog
        self.ha, self.permission, self.retention = ha, permission, retention
        self.consumers = consumers
        self.config_changed = config_changed
        self.metrics_addr = metrics_addr  # where Prometheus scrapes this broker (None: metrics off)
        self.clients = clients  # the clients connected now (brokers/clients_report.py; docs/messages.md §4)
        self.started_at_ms = now_ms()
        # (topic, queueId) -> ((the store's truncation and deletion counts), the queue's first offset, its
        # first message's store time): a queue's first message moves only when the log is cut, restarted
        # or its oldest file deleted, so the report reads it once.
        self._first_offsets: dict[tuple[str, int], tuple[tuple[int, int], int, int | None]] = {}
        self._updating = asyncio.Lock()  # one configuration change at a time, each from the last one's result
        # A change an operator made is reported at once: what the pages and rmqha show next is the change.
        self._report_now = asyncio.Event()

    # --- the report -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Report every brokerStatusReportInterval (read each time: an operator may change it) while
        the control plane is connected; a report that fails is simply the next one's to make."""
        link = self.link
        while True:
            try:
                await asyncio.wait_for(self._report_now.wait(), self.config.brokerStatusReportInterval / 1000)
            except TimeoutError:
                pass
            self._report_now.clear()
            if not link.connected.is_set():
                continue
            try:
                await link.call("broker_status", await self.status_report())
            except (ControlPlaneError, TimeoutError) as exc:
                log.debug("broker status report failed: %s", exc)
            except Exception:  # never let the reports stop
                log.exception("broker status report failed")

    async def status_report(self) -> dict:
        c, store, permission = self.config, self.store, self.permission
        now = now_ms()
        topics = {name: tc for name, tc in self.topics.topics.items() if reported_topic(name)}
        offsets = []
        for key, offset in self.meta.offsets.offsets.items():
            group, topic, queue_id = key.rsplit("@", 2)
            if reported_topic(topic) and validation.is_name(group):
                offsets.append([group, topic, int(queue_id), offset])
        return {
            "clusterName": c.brokerClusterName,
            "brokerName": c.brokerName,
            "brokerId": self.link.broker_id,  # the id it registers with (controller mode: its role's)
            "brokerAddr": c.broker_addr,
            "status": {
                "role": self.ha.role.value,
                "metaMode": self.metalog.mode.value,
                "masterEpoch": self.ha.epochs.last_epoch(),
                "writable": permission.writable,
                "writeRefusal": permission.refusal(),
                "isolated": permission.facts.isolated,
                "commitLogMinOffset": store.min_offset,
                "commitLogMaxOffset": store.max_offset,
                "confirmOffset": store.confirm_offset,
                "startedAtMs": self.started_at_ms,
                "uptimeMs": now - self.started_at_ms,
                "storeCodec": codec.IMPLEMENTATION,
                "pid": os.getpid(),
                "topics": len(topics),
                "consumerGroups": len(self.meta.groups),
                "store": await self.retention.report(),
                "metricsAddr": self.metrics_addr(),
            },
            "config": reported_values(c),
            "dynamicKeys": sorted(DYNAMIC_KEYS),
            "queues": await self._queues(topics),
            "offsets": offsets,
            "clients": self.clients(),
            "reportedAtMs": now,
        }

    async def _queues(self, topics: dict[str, TopicConfig]) -> list[list]:
        """``[topic, queueId, minOffset, maxOffset, oldestMessageMs]`` per queue (the last: when its first
        message kept was stored, the queue's retention horizon; None for an empty queue)."""
        store, seen, out = self.store, {}, []
        version = (store.truncations, store.deletions)
        for name, tc in sorted(topics.items()):
            for queue_id in queue_ids(tc):
                end = store.max_queue_offset(name, queue_id)
                known = self._first_offsets.get((name, queue_id))
                if known is not None and known[0] == version:
                    _, first, oldest = known
                else:
                    first = await self._first_offset(name, queue_id, end)
                    oldest = await store.oldest_store_timestamp(name, queue_id) if first < end else None
                if first < end:  # found a message (an empty queue is looked at again next time)
                    seen[(name, queue_id)] = (version, first, oldest)
                out.append([name, queue_id, first, end, oldest])
        self._first_offsets = seen
        return out

    async def _first_offset(self, topic: str, queue_id: int, end: int) -> int:
        if end == 0:
            return 0
        consumers = self.consumers()
        if consumers is None:  # (the reports start once the client endpoint serves)
            raise RuntimeError("the client endpoint does not serve yet")
        return await consumers.first_offset(topic, queue_id, end)

    # --- update_broker_config ---------------------------------------------------------------------

    async def update_broker_config(self, payload: dict) -> dict:
        """``{"updates": {key: text}, "preview"}`` -> ``{"changed": {key: [old, new]}, "config",
        "persisted"}``: checked as broker.conf is, applied at once and kept in broker.conf (RocketMQ
        persists updateBrokerConfig) unless ``preview``; ``persisted`` says whether broker.conf got it."""
        updates, preview = payload.get("updates"), payload.get("preview", False)
        fields = {}
        if not isinstance(updates, dict) or not updates:
            fields["updates"] = ["must be an object of at least one key and its value"]
        if not isinstance(preview, bool):
            fields["preview"] = ["must be true or false"]
        if fields:
            raise _invalid(fields)
        config = self.config
        async with self._updating:
            try:
                update = plan_update(config, updates)
            except ConfigInvalid as exc:
                raise _invalid(problem_fields(exc.problems)) from None
            persisted = False
            if not preview and update.changed:
                apply_update(config, update)
                self.config_changed()
                log.warning(
                    "configuration changed by an operator: %s",
                    ", ".join(f"{key} {old} -> {new}" for key, (old, new) in update.changed.items()),
                )
                persisted = await self._persist({key: new for key, (_, new) in update.changed.items()})
                self._report_now.set()
        return {
            "changed": {key: [old, new] for key, (old, new) in update.changed.items()},
            "config": reported_values(update.config if preview else config),
            "persisted": persisted,
        }

    async def _persist(self, changes: dict[str, str]) -> bool:
        if self.config_path is None:
            log.warning("the configuration change is not kept: this broker was not started from a broker.conf")
            return False
        try:
            await asyncio.to_thread(persist_changes, self.config_path, changes)
        except OSError as exc:
            log.warning("the configuration change is applied but not kept in %s: %s", self.config_path, exc)
            return False
        return True

    # --- reset_offset -----------------------------------------------------------------------------

    async def reset_offset(self, payload: dict) -> dict:
        """``{"group", "topic", "timestampMs" | "offset", "preview"}`` -> ``{"applied", "queues":
        [{"queueId", "committedOffset", "newOffset", "minOffset", "maxOffset"}]}``. By time: RocketMQ's
        searchOffset (the first message stored at or after it, else the queue's max offset); by
        offset: clamped into [minOffset, maxOffset], -1 for maxOffset. Only the serving master
        (metalog WRITER) answers; a preview computes the same and changes nothing."""
        group, topic, timestamp, offset, preview = parse_reset(payload)
        name, metalog = self.config.brokerName, self.metalog
        grpc = self.consumers()
        if metalog.mode is not MetaMode.WRITER or grpc is None:
            raise RequestRefused.of(
                ResponseCode.SYSTEM_ERROR,
                f"not the master of {name} (consumer metadata {metalog.mode.value}): offsets are reset by the serving master",
            )
        tc = self.topics.topics.get(topic)
        if tc is None or not reported_topic(topic):
            raise RequestRefused.of(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on {name}")
        if grpc.static.get(topic) is not None:
            raise RequestRefused.of(
                ResponseCode.INVALID_PARAMETER, f"{topic} is a static topic: its logical queues' offsets are not reset here"
            )
        queues = []
        for queue_id in queue_ids(tc):
            end = self.store.max_queue_offset(topic, queue_id)
            first = await self._first_offset(topic, queue_id, end)
            if timestamp is not None:
                new = await grpc.search_offset(topic, queue_id, timestamp)
            else:
                new = end if offset == -1 else min(max(offset, first), end)
            queues.append(
                {
                    "queueId": queue_id,
                    "committedOffset": self.meta.consumed_below(group, topic, queue_id),
                    "newOffset": new,
                    "minOffset": first,
                    "maxOffset": end,
                }
            )
        if not preview:
            for q in queues:
                if metalog.mode is not MetaMode.WRITER:  # deposed meanwhile: its records would not be written
                    raise RequestRefused.of(ResponseCode.SYSTEM_ERROR, f"{name} stopped serving as master during the reset")
                try:
                    await grpc.reset_queue(group, topic, q["queueId"], q["newOffset"], OPERATOR_RESET)
                except NotStored as exc:
                    raise RequestRefused.of(
                        ResponseCode.SYSTEM_ERROR,
                        f"the reset of {topic} queue {q['queueId']} was not recorded ({exc.detail or exc.status}); "
                        "the queues before it were reset",
                    ) from None
            log.warning(
                "consumer offsets of group %s on %s reset by an operator: %s",
                group,
                topic,
                ", ".join(f"{q['queueId']}: {q['committedOffset']} -> {q['newOffset']}" for q in queues),
            )
        if not preview:
            self._report_now.set()
        return {"applied": not preview, "queues": queues}
