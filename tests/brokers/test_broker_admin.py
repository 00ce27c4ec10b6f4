"""An operator's view of a broker and its changes, broker side (brokers/admin.py): a real broker in this
process, linked to a real control plane (uvicorn, Redis, Postgres). The broker's status report is read
back from the control plane's store (brokerStatus, consumerProgress, topicStatus); each request goes
the real way (controlplane/broker_rpc.py: a push, one ``rpc_reply``). The broker changes a dynamic
key at once and in its broker.conf, and resets a group's offsets as the master: by time as RocketMQ's
searchOffset, by offset clamped into the queue, replicated as ``reset`` records, reported as
``operator_reset``; a pop in flight before the reset can no longer be acked."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from audits import event_store
from brokers.broker import Broker
from brokers.config import load
from brokers.meta import META_TOPIC
from brokers.store.message import Message
from brokers.topics import TopicConfig
from controlplane import broker_rpc
from controlplane.models import ApiToken
from mqrules.codes import ResponseCode
from nameserver import broker_status, liveness
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CLUSTER, NAME, GROUP, TOPIC = "brkadm", "broker-a", "billing", "Orders"


async def until(check, timeout: float = 15.0):
    """``check()`` (sync: most read Redis) in a thread, so the broker's loop runs meanwhile."""
    deadline = time.monotonic() + timeout
    while not (found := await asyncio.to_thread(check)):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


def reset_reported() -> bool:
    return any(
        e.source == "operator_reset" and e.consumer_group == GROUP and e.queue_id == 0 and e.offset == 0
        for _, batch in event_store.pending_batches()
        for e in batch.events
    )


def committed(queue_id: int) -> int | None:
    progress = broker_status.consumer_progress(GROUP, CLUSTER) or {"queues": []}
    return next((q["committedOffset"] for q in progress["queues"] if q["topic"] == TOPIC and q["queueId"] == queue_id), None)


def test_a_broker_reports_its_status_changes_its_config_and_resets_offsets(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_EVENTS_FLUSH_SECONDS", "3600")  # the test reads the buffer
    token = ApiToken.issue("brkadm-broker", "broker")[1]
    with uvicorn_server() as base:
        keys = broker_keys(NAME, tmp_path / "store", BrokerPorts.reserve(), base, cluster=CLUSTER, token=token)
        conf = write_broker_conf(
            tmp_path / "broker.conf", {**keys, "mappedFileSizeCommitLog": 1 << 20, "brokerStatusReportInterval": 100}
        )
        asyncio.run(scenario(conf))


async def scenario(conf) -> None:
    broker = Broker(load(conf), conf)
    await broker.start()
    try:
        await exercise(broker, conf)
    finally:
        await broker.stop()


async def exercise(broker: Broker, conf) -> None:
    store, services = broker.store, broker.services
    member = liveness.member(CLUSTER, broker.config.broker_addr)
    channel = await until(lambda: liveness.connections([member]).get(member))

    async def ask(kind: str, payload: dict) -> dict:
        return await asyncio.to_thread(broker_rpc.call, channel, kind, payload, 10.0)

    async def refused(kind: str, payload: dict) -> broker_rpc.BrokerRefused:
        with pytest.raises(broker_rpc.BrokerRefused) as caught:
            await ask(kind, payload)
        return caught.value

    broker.topics.update(TopicConfig(TOPIC, 2, 2))
    await store.put_messages([Message(TOPIC, 0, b"early %d" % i) for i in range(2)])
    await asyncio.sleep(0.02)
    mark = int(time.time() * 1000)
    await asyncio.sleep(0.02)
    await store.put_messages([Message(TOPIC, 0, b"late %d" % i) for i in range(2)])
    await until(lambda: store.max_queue_offset(TOPIC, 0) == 4)

    # The report, as the control plane keeps it: taken by its parser, the broker's own topics left out.
    def orders_offsets() -> list[dict] | None:
        rows = broker_status.topic_offsets(TOPIC, CLUSTER)
        return rows if rows and rows[0]["maxOffset"] == 4 else None

    offsets = await until(orders_offsets)
    rows = [(q["brokerName"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in offsets]
    assert rows == [(NAME, 0, 0, 4), (NAME, 1, 0, 0)]
    assert await asyncio.to_thread(broker_status.topic_offsets, META_TOPIC, CLUSTER) == []
    (report,) = await asyncio.to_thread(broker_status.reports, NAME, None, CLUSTER)
    assert (report["brokerName"], report["brokerId"], report["brokerAddr"]) == (NAME, 0, broker.config.broker_addr)
    assert report["alive"] and not report["stale"]
    status = report["status"]
    assert (status["role"], status["metaMode"], status["writable"]) == ("ASYNC_MASTER", "WRITER", True)
    assert status["isolated"] is False and status["writeRefusal"] is None
    assert status["commitLogMaxOffset"] == store.max_offset
    assert "controlPlaneToken" not in report["config"] and report["config"]["brokerStatusReportInterval"] == "100"
    assert "inSyncReplicas" in report["dynamicKeys"] and "listenPort" not in report["dynamicKeys"]

    # A pop in flight (offsets 0 and 1), offset 0 acked: the group has committed 1.
    popped = await services.consuming.pop_from(GROUP, TOPIC, 0, 2, 60_000, lambda tags: True)
    handles = [h for _, h, _ in popped]
    assert [h.offset for h in handles] == [0, 1]
    await services.consuming.ack_queue((GROUP, TOPIC, 0), handles[:1])
    await until(lambda: committed(0) == 1)

    # A preview: searchOffset by time (queue 1 is empty: its max offset), nothing changes.
    result = await ask("reset_offset", {"group": GROUP, "topic": TOPIC, "timestampMs": mark, "preview": True})
    assert result == {
        "applied": False,
        "queues": [
            {"queueId": 0, "committedOffset": 1, "newOffset": 2, "minOffset": 0, "maxOffset": 4},
            {"queueId": 1, "committedOffset": None, "newOffset": 0, "minOffset": 0, "maxOffset": 0},
        ],
    }
    assert (
        services.consuming.pop.peek(GROUP, TOPIC, 0).acked_below == 1
        and 1 in services.consuming.pop.peek(GROUP, TOPIC, 0).in_flight
    )
    for offset, new in ((-1, 4), (99, 4), (3, 3)):  # -1: the max; beyond it: clamped
        result = await ask("reset_offset", {"group": GROUP, "topic": TOPIC, "offset": offset, "preview": True})
        assert result["queues"][0]["newOffset"] == new

    # Applied: back to offset 0, as a replicated record per queue, reported as operator_reset.
    records_before = store.max_queue_offset(META_TOPIC, 0)
    result = await ask("reset_offset", {"group": GROUP, "topic": TOPIC, "offset": 0})
    assert result["applied"] is True
    assert [(q["committedOffset"], q["newOffset"]) for q in result["queues"]] == [(1, 0), (None, 0)]
    state = services.consuming.pop.peek(GROUP, TOPIC, 0)
    assert (state.pop_offset, state.acked_below, state.in_flight) == (0, 0, {})
    assert not services.consuming.pop.ack(handles[1]), "a delivery in flight before the reset cannot be acked after it"
    assert broker.consumer_meta.offsets.get(GROUP, TOPIC, 0) == 0
    records = await store.get_messages(META_TOPIC, 0, records_before, 10)
    resets = [json.loads(m.body) for m in records if json.loads(m.body)["kind"] == "reset"]
    assert [(r["group"], r["queueId"], r["offset"]) for r in resets] == [(GROUP, 0, 0), (GROUP, 1, 0)]
    await until(reset_reported)
    await until(lambda: committed(0) == 0)
    again = await services.consuming.pop_from(GROUP, TOPIC, 0, 1, 60_000, lambda tags: True)
    assert [h.offset for _, h, _ in again] == [0]

    # Refusals: each with its code, nothing changed.
    assert (await refused("reset_offset", {"group": GROUP, "topic": "Nope", "offset": 0})).code == ResponseCode.TOPIC_NOT_EXIST
    bad = await refused("reset_offset", {"group": GROUP, "topic": TOPIC, "offset": 0, "timestampMs": 1})
    assert bad.code == ResponseCode.INVALID_PARAMETER and "timestampMs" in bad.fields
    assert (await refused("drop_everything", {})).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    async def explode(payload: dict) -> dict:
        raise RuntimeError("disk on fire")

    broker.nameserver.on_request["explode"] = explode  # an unexpected failure: a short SYSTEM_ERROR
    failed = await refused("explode", {})
    assert (failed.code, failed.detail) == (ResponseCode.SYSTEM_ERROR, "explode failed: RuntimeError: disk on fire")

    # A dynamic key: checked as broker.conf is, applied at once (the HA service's quorum settings
    # too) and kept in broker.conf; a preview changes nothing. The reports slow down to one a minute
    # (a dynamic key too), yet the change is reported at once.
    await ask("update_broker_config", {"updates": {"brokerStatusReportInterval": "60000"}})
    await until(lambda: broker_status.reports(NAME, None, CLUSTER)[0]["config"]["brokerStatusReportInterval"] == "60000")
    preview = await ask("update_broker_config", {"updates": {"retryMaxTimes": "5"}, "preview": True})
    assert preview["changed"] == {"retryMaxTimes": ["16", "5"]} and broker.config.retryMaxTimes == 16
    result = await ask("update_broker_config", {"updates": {"retryMaxTimes": "5", "slaveTimeout": "4000"}})
    assert result["changed"] == {"retryMaxTimes": ["16", "5"], "slaveTimeout": ["3000", "4000"]}
    assert result["persisted"] is True and result["config"]["slaveTimeout"] == "4000"
    assert broker.grpc_service.config is broker.config and broker.config.retryMaxTimes == 5
    assert broker.ha.quorum.slave_timeout_ms == 4000
    assert (load(conf).retryMaxTimes, load(conf).slaveTimeout) == (5, 4000)
    await until(lambda: broker_status.reports(NAME, None, CLUSTER)[0]["config"]["retryMaxTimes"] == "5", timeout=5)
    wrong = await refused("update_broker_config", {"updates": {"listenPort": "1", "retryMaxTimes": "x"}})
    assert wrong.code == ResponseCode.INVALID_PARAMETER and list(wrong.fields) == ["listenPort"]

    # Only the serving master resets.
    broker.metalog.become_follower()
    follower = await refused("reset_offset", {"group": GROUP, "topic": TOPIC, "offset": 0, "preview": True})
    assert follower.code == ResponseCode.SYSTEM_ERROR and "not the master" in follower.detail
