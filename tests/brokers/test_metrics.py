"""The broker's metrics (brokers/metrics.py) in process: the counters the edges add to, and the
consumer families' text, which must be what prometheus_client itself writes for the same values."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from brokers.config import BrokerConfig
from brokers.core.roles import WriteReason
from brokers.metrics import CONSUMER_FAMILIES, CONSUMER_LABELS, BrokerMetrics, DiskUse, HAView, Sources, Traffic
from brokers.store.message import Message
from brokers.store.store import MessageStore, StoreConfig

pytestmark = pytest.mark.unit


async def real_store(root, messages: dict[tuple[str, int], int]) -> MessageStore:
    """A started store holding ``messages[(topic, queueId)]`` messages per queue."""
    store = MessageStore(StoreConfig(root, mapped_file_size_commit_log=1 << 20))
    await store.start()
    batch = [Message(t, q, b"x" * 10, {}) for (t, q), n in messages.items() for _ in range(n)]
    if batch:
        await store.put_messages(batch)
    return store


def metrics(store: MessageStore, committed: dict[str, int], popped=None, traffic=None, **config) -> BrokerMetrics:
    async def disk() -> DiskUse:
        return DiskUse(0.5, 0.9)

    sources = Sources(
        config=BrokerConfig(brokerName="b", brokerClusterName="c", **config),
        store=store,
        topic_count=lambda: 3,
        group_count=lambda: 2,
        committed=lambda: committed,
        popped=lambda: popped or {},
        ha=lambda: HAView(
            "SYNC_MASTER", 7, frozenset({1, 2}), ({"brokerId": 2, "addr": "h:2", "lagBytes": 10, "lastCaughtUpMs": 1},)
        ),
        gate=lambda: WriteReason.WRITABLE,
        acting=lambda: False,
        disk=disk,
    )
    return BrokerMetrics(sources, traffic or Traffic())


def families(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_backlogs_sum_a_groups_queues_and_its_oldest_unconsumed_message_sets_the_lag_latency(tmp_path):
    async def run():
        store = await real_store(tmp_path, {("T", 0): 10, ("T", 1): 5})
        try:
            m = metrics(store, {"G@T@0": 4, "G@T@1": 5}, popped={("G", "T", 0): 7})
            await asyncio.sleep(0.01)
            await m.refresh()
            first = families(m.consumer_text.decode())
            read = dict(m._stored_at)
            await m.refresh()
            return first, read, m._stored_at
        finally:
            await store.shutdown()

    got, read, kept = asyncio.run(run())
    key = tuple(
        sorted(
            {
                "cluster": "c",
                "consumer_group": "G",
                "is_retry": "false",
                "is_system": "false",
                "node_id": "b",
                "node_type": "broker",
                "topic": "T",
            }.items()
        )
    )
    assert got["rocketmq_consumer_lag_messages"][key] == 6  # 10-4 + 5-5
    assert got["rocketmq_consumer_inflight_messages"][key] == 3  # popped 4..6
    assert got["rocketmq_consumer_ready_messages"][key] == 3  # 7..9
    assert got["rocketmq_consumer_lag_latency_milliseconds"][key] >= 10
    assert got["rocketmq_consumer_queueing_latency_milliseconds"][key] <= got["rocketmq_consumer_lag_latency_milliseconds"][key]
    assert set(read) == {("T", 0, 4), ("T", 0, 7)} and kept == read  # the store times known are kept, not read again


def test_counters_and_histograms_of_traffic(tmp_path):
    t = Traffic()
    t.messages_stored("T", "normal", [100, 5000, 100])
    t.messages_stored("%RETRY%G", "normal", [10])  # RocketMQ counts no retry or DLQ topic
    t.messages_handed_out("T", "G", 2, 200)
    t.answered("grpc", "SendMessage", "20000", 2.5)
    t.answered("grpc", "SendMessage", "20000", 150)

    async def run():
        store = await real_store(tmp_path, {("T", 0): 3})
        try:
            m = metrics(store, {}, traffic=t)
            await m.refresh()
            registry = CollectorRegistry(auto_describe=False)
            registry.register(m)
            return families(generate_latest(registry).decode()), store.max_offset
        finally:
            await store.shutdown()

    got, end = asyncio.run(run())
    common = (("cluster", "c"), ("node_id", "b"), ("node_type", "broker"))
    assert got["rocketmq_messages_in_total"] == {
        (*common[:1], ("is_system", "false"), ("message_type", "normal"), *common[1:], ("topic", "T")): 3
    }
    assert sum(got["rocketmq_throughput_in_total"].values()) == 5200
    buckets = {dict(k)["le"]: v for k, v in got["rocketmq_message_size_bucket"].items()}
    assert (buckets["1024.0"], buckets["4096.0"], buckets["524288.0"], buckets["+Inf"]) == (2, 2, 3, 3)
    assert sum(got["rocketmq_messages_out_total"].values()) == 2
    rpc = {dict(k)["le"]: v for k, v in got["rocketmq_rpc_latency_milliseconds_bucket"].items()}
    assert (rpc["3.0"], rpc["100.0"], rpc["1000.0"]) == (1, 1, 2)
    assert sum(got["rmqha_broker_role"].values()) == 1 and dict(next(iter(got["rmqha_broker_role"])))["role"] == "master"
    assert sum(got["rmqha_broker_sync_state_set_member"].values()) == 2
    assert list(got["rmqha_replica_lag_bytes"].values()) == [10]
    assert list(got["rmqha_broker_master_epoch"].values()) == [7]
    assert list(got["rmqha_broker_max_offset"].values()) == [end]
    assert list(got["rocketmq_storage_size_bytes"].values()) == [end]


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.tuples(names, names), st.tuples(*[st.integers(0, 10**12)] * 5), max_size=6))
def test_the_consumer_families_text_is_what_prometheus_client_writes(backlogs):
    m = metrics(None, {})  # type: ignore[arg-type]  (rendering reads no store)
    m._backlogs = backlogs
    ours = asyncio.run(m._render_consumers())
    from brokers.core.lag import is_retry_topic, is_system

    fams = [GaugeMetricFamily(name, doc, labels=CONSUMER_LABELS) for name, doc in CONSUMER_FAMILIES]
    for (group, topic), values in backlogs.items():
        labels = ["c", "broker", "b", topic, group, str(is_retry_topic(topic)).lower(), str(is_system(topic, group)).lower()]
        for f, v in zip(fams, values, strict=True):
            f.add_metric(labels, v)

    class Library:
        def collect(self):
            yield from fams

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Library())
    assert ours == generate_latest(registry)
