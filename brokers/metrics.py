"""The broker's Prometheus metrics (issue 38; docs/metrics.md): RocketMQ 5's names and labels where the
figure exists (BrokerMetricsConstant, DefaultStoreMetricsConstant, RemotingMetricsConstant, as
OpenTelemetry's Prometheus exporter shows them: unit suffixes ``_milliseconds`` / ``_bytes``), and the
HA state no exporter shows (``rmqha_*``).

Switched and placed by RocketMQ's keys: ``metricsExporterType`` (PROM, our brokers' default; DISABLE
turns them off), ``metricsPromExporterHost`` (empty: brokerIP1) and ``metricsPromExporterPort`` (5557;
0 picks a free port, reported as ``status.metricsAddr`` in the broker_status report).

Three parts:

- ``Traffic``: what the protocol edges count as they serve (messages and bytes in and out, message
  sizes, request latencies, escapes and forwards). Plain integers owned by the event loop: a count on
  the send path costs a dict lookup, no lock.
- ``BrokerMetrics``: a prometheus_client collector. A scrape first ``refresh``es what needs the store
  (the consumer backlog's oldest message times, the disk), then renders every family from the parts'
  current values, on the event loop, so nothing is read while it changes.
- ``MetricsEndpoint``: ``GET /metrics`` on its own listener, answered on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from mqrules import textformat
from mqrules.remoting.codes import RequestCode, ResponseCode

from .config import BrokerConfig
from .core.lag import is_retry_topic, is_system, queue_backlog
from .core.roles import WriteReason
from .pop import now_ms
from .tasks import cancel_and_wait

log = logging.getLogger("brokers.metrics")

# RocketMQ's views (BrokerMetricsManager.registerMetricsView, RemotingMetricsManager.getMetricsView)
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)

COMMON_LABELS = ("cluster", "node_type", "node_id")
STORAGE_LABELS = ("storage_type", "storage_medium")
CONSUMER_LABELS = (*COMMON_LABELS, "topic", "consumer_group", "is_retry", "is_system")
# rocketmq_consumer_* (BrokerMetricsManager.initLagAndDlqMetrics), in the order of a backlog's values
CONSUMER_FAMILIES = (
    ("rocketmq_consumer_lag_messages", "Consumer lag messages"),
    ("rocketmq_consumer_lag_latency_milliseconds", "Consumer lag time"),
    ("rocketmq_consumer_inflight_messages", "Consumer inflight messages"),
    ("rocketmq_consumer_queueing_latency_milliseconds", "Consumer queueing time"),
    ("rocketmq_consumer_ready_messages", "Consumer ready messages"),
)
RPC_LABELS = ("protocol_type", "request_code", "response_code", "is_long_polling", "result")

READ, WRITE = 4, 2  # RocketMQ's PermName bits
PULL_SUSPEND = 0x2  # PullSysFlag: the pull may wait for messages
SLICE = 1024  # queues looked at between two turns of the event loop
READ_BATCH = 512  # store times read per job (the store's I/O thread also writes: keep its jobs short)


def _bool(value: bool) -> str:
    return "true" if value else "false"


class _Histogram:
    """Counts per bucket (not cumulative; the last one above every bound) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int):
        self.counts = [0] * (buckets + 1)
        self.total = 0.0

    def cumulative(self, bounds: tuple[float, ...]) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*map(str, bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


def _retry_or_dlq(topic: str) -> bool:
    """RocketMQ counts neither retry nor dead-letter topics as messages in or out."""
    return topic.startswith(("%RETRY%", "%DLQ%"))


class Traffic:
    """The counters the edges add to (one instance per broker, on its event loop)."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], list[int]] = {}  # (topic, message_type) -> [messages, bytes]
        self.sizes: dict[tuple[str, str], _Histogram] = {}
        self.handed_out: dict[tuple[str, str], list[int]] = {}  # (topic, consumer_group) -> [messages, bytes]
        self.rpc: dict[tuple[str, str, str, str, str], _Histogram] = {}
        self.escaped = 0  # messages an acting master stored on another broker set (RIP-32 escape)
        self.forwarded = 0  # sends handed to the set's serving broker or a static queue's owner

    def messages_stored(self, topic: str, message_type: str, sizes: Iterable[int]) -> None:
        """Messages of one send stored (``message_type``: normal, fifo, delay or transaction)."""
        if _retry_or_dlq(topic):
            return
        key = (topic, message_type)
        totals = self.stored.get(key)
        if totals is None:
            totals = self.stored[key] = [0, 0]
            self.sizes[key] = _Histogram(len(MESSAGE_SIZE_BUCKETS))
        histogram = self.sizes[key]
        counts = histogram.counts
        n = size_sum = 0
        for size in sizes:
            counts[bisect_left(MESSAGE_SIZE_BUCKETS, size)] += 1
            n += 1
            size_sum += size
        histogram.total += size_sum
        totals[0] += n
        totals[1] += size_sum

    def messages_handed_out(self, topic: str, group: str, count: int, size_sum: int) -> None:
        if count <= 0 or _retry_or_dlq(topic):
            return
        totals = self.handed_out.get((topic, group))
        if totals is None:
            totals = self.handed_out[(topic, group)] = [0, 0]
        totals[0] += count
        totals[1] += size_sum

    def answered(
        self,
        protocol: str,
        request_code: str,
        response_code: str,
        ms: float,
        *,
        long_polling: bool = False,
        result: str = "success",
    ) -> None:
        key = (protocol, request_code, response_code, _bool(long_polling), result)
        histogram = self.rpc.get(key)
        if histogram is None:
            histogram = self.rpc[key] = _Histogram(len(RPC_LATENCY_BUCKETS_MS))
        histogram.counts[bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1
        histogram.total += ms

    def remoting_answered(self, request, reply, ms: float) -> None:
        """A remoting request answered (RemotingServer's ``answered``), labelled as RocketMQ's
        NettyRemotingAbstract does: codes by their lower-case names (RemotingHelper), a pull that may
        wait for messages (PullSysFlag's suspend bit) as long polling."""
        try:
            long_polling = request.code == RequestCode.PULL_MESSAGE and bool(
                int(request.ext_fields.get("sysFlag") or 0) & PULL_SUSPEND
            )
        except (TypeError, ValueError, AttributeError):
            long_polling = False
        code = _code_name(RequestCode, request.code)
        if request.is_oneway:
            self.answered("remoting", code, "", ms, long_polling=long_polling, result="oneway")
        else:
            response = _code_name(ResponseCode, reply.code) if reply is not None else ""
            self.answered("remoting", code, response, ms, long_polling=long_polling)


@functools.cache
def _code_name(codes: type[IntEnum], code: int) -> str:
    try:
        return codes(code).name.lower()
    except ValueError:
        return str(code)


# --- what the collector reads ---------------------------------------------------------------------


class _Store(Protocol):
    min_offset: int
    max_offset: int
    confirm_offset: int
    flushed_offset: int
    valid_end: int

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def store_timestamps(self, wanted: list[tuple[str, int, int]]) -> list[int | None]: ...


@dataclass(frozen=True)
class DiskUse:
    used_ratio: float  # 0-1
    warning_ratio: float  # diskSpaceWarningLevelRatio as 0-1


@dataclass(frozen=True)
class HAView:
    """What the HA state looks like now (from the HA service's water levels and the gate)."""

    role: str
    master_epoch: int
    sync_state_set: frozenset[int]
    slaves: tuple[dict, ...]  # the master's water levels, one per slave connection


@dataclass(frozen=True)
class Sources:
    """Everything the collector reads, as callables and objects the composition root hands in."""

    config: BrokerConfig
    store: _Store
    topic_count: Callable[[], int]
    group_count: Callable[[], int]
    committed: Callable[[], dict[str, int]]  # "group@topic@queueId" -> committed offset
    popped: Callable[[], dict[tuple[str, str, int], int]]  # (group, topic, queueId) -> next offset never popped
    ha: Callable[[], HAView]
    gate: Callable[[], WriteReason]
    acting: Callable[[], bool]
    disk: Callable[[], Awaitable[DiskUse]]


def _age(now: int, keys: list, times: dict, used: dict) -> int:
    """Milliseconds since the oldest message at ``keys`` was stored (0 when none is known); the times
    read are kept in ``used`` for the next scrape."""
    oldest = None
    for key in keys:
        t = times.get(key)
        if t is not None:
            used[key] = t
            if oldest is None or t < oldest:
                oldest = t
    return max(0, now - oldest) if oldest is not None else 0


class BrokerMetrics(Collector):
    def __init__(self, sources: Sources, traffic: Traffic):
        self.sources, self.traffic = sources, traffic
        c = sources.config
        self.common = [c.brokerClusterName, "broker", c.brokerName]
        self.addr = c.broker_addr
        # (group, topic) -> (lag, lag ms, in flight, queueing ms, ready): CONSUMER_FAMILIES' values
        self._backlogs: dict[tuple[str, str], tuple[int, int, int, int, int]] = {}
        self._parsed: dict[str, tuple[str, str, int]] = {}  # "group@topic@queueId" -> its parts
        self._stored_at: dict[tuple[str, int, int], int] = {}  # (topic, queueId, offset) -> store time
        self._disk = DiskUse(0.0, c.diskSpaceWarningLevelRatio / 100)
        self.consumer_text = b""  # CONSUMER_FAMILIES as of the last refresh

    # --- between scrapes (may await the store) ---------------------------------------------------------

    async def refresh(self) -> None:
        """Take the consumer backlogs (with their oldest messages' store times), render their series,
        and look at the disk. Runs once per (group, topic, queue) committed, in slices between which
        the event loop serves others (a broker with 1,000 topics x 8 queues x 10 groups has 80,000)."""
        src = self.sources
        store = src.store
        queue_range = store.queue_range
        popped = src.popped()
        parsed = self._parsed
        items = list(src.committed().items())
        if len(parsed) > 2 * len(items) + 1024:  # keys gone (groups or topics deleted)
            parsed.clear()
        known = self._stored_at
        missing: set[tuple[str, int, int]] = set()
        totals: dict[tuple[str, str], list] = {}  # (group, topic) -> [lag, in flight, ready, unconsumed, unpulled]
        for start in range(0, len(items), SLICE):
            if start:
                await asyncio.sleep(0)
            for key, offset in items[start : start + SLICE]:
                k = parsed.get(key)
                if k is None:
                    group, topic, qid = key.rsplit("@", 2)
                    k = parsed[key] = (group, topic, int(qid))
                group, topic, queue_id = k
                low, high = queue_range(topic, queue_id)
                lag, in_flight, ready, consumed, handed_out = queue_backlog(
                    high, low, offset, popped.get(k, offset) if popped else offset
                )
                t = totals.get((group, topic))
                if t is None:
                    t = totals[(group, topic)] = [0, 0, 0, [], []]
                t[0] += lag
                t[1] += in_flight
                t[2] += ready
                if lag:
                    at = (topic, queue_id, consumed)
                    t[3].append(at)
                    if at not in known:
                        missing.add(at)
                if ready:
                    at = (topic, queue_id, handed_out)
                    t[4].append(at)
                    if at not in known:
                        missing.add(at)
        # a message's store time never changes: those known are not read again
        wanted = sorted(missing)
        for start in range(0, len(wanted), READ_BATCH):
            batch = wanted[start : start + READ_BATCH]
            known.update((k, t) for k, t in zip(batch, await store.store_timestamps(batch), strict=True) if t is not None)
        now = now_ms()
        used: dict[tuple[str, int, int], int] = {}
        backlogs = {}
        for pair, (lag, in_flight, ready, unconsumed, unpulled) in totals.items():
            backlogs[pair] = (lag, _age(now, unconsumed, known, used), in_flight, _age(now, unpulled, known, used), ready)
        self._backlogs, self._stored_at = backlogs, used
        self.consumer_text = await self._render_consumers()
        self._disk = await src.disk()

    async def _render_consumers(self) -> bytes:
        """CONSUMER_FAMILIES, one series per (group, topic), written by mqrules.textformat (as
        prometheus_client writes them): at 10,000 series each, the library's per-sample formatting alone
        takes longer than a scrape may, so the families are rendered here, between scrapes, each series'
        label text formatted once."""
        common = self.common
        rows = []
        for (group, topic), values in self._backlogs.items():
            labels = (*common, topic, group, _bool(is_retry_topic(topic)), _bool(is_system(topic, group)))
            rows.append((textformat.label_text(CONSUMER_LABELS, labels), values))
        out = []
        for i, (name, doc) in enumerate(CONSUMER_FAMILIES):
            await asyncio.sleep(0)
            out.append(textformat.gauge_text(name, doc, ((text, values[i]) for text, values in rows)))
        return "".join(out).encode()

    # --- the scrape ---------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield from self._rocketmq()
        yield from self._traffic()
        yield from self._ha()

    def _gauge(self, name: str, doc: str, value: float, unit: str = "") -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=COMMON_LABELS, unit=unit)
        g.add_metric(self.common, value)
        return g

    def _rocketmq(self) -> Iterator[Metric]:
        src, store = self.sources, self.sources.store
        gate = src.gate()
        yield self._gauge(
            "rocketmq_broker_permission", "Broker permission", READ | (0 if gate is WriteReason.DISK_FULL else WRITE)
        )
        yield self._gauge("rocketmq_topic_number", "Active topic number", src.topic_count())
        yield self._gauge("rocketmq_consumer_group_number", "Active subscription group number", src.group_count())
        labels = (*COMMON_LABELS, *STORAGE_LABELS)
        values = [*self.common, "local", "disk"]
        for name, doc, value in (
            ("rocketmq_storage_size", "Broker storage size", store.max_offset - store.min_offset),
            ("rocketmq_storage_flush_behind", "Broker flush behind bytes", max(0, store.max_offset - store.flushed_offset)),
            ("rocketmq_storage_dispatch_behind", "Broker dispatch behind bytes", max(0, store.max_offset - store.valid_end)),
        ):
            g = GaugeMetricFamily(name, doc, labels=labels, unit="bytes")
            g.add_metric(values, value)
            yield g

    def _traffic(self) -> Iterator[Metric]:
        t, common = self.traffic, self.common
        in_labels = (*COMMON_LABELS, "topic", "message_type", "is_system")
        messages_in = CounterMetricFamily("rocketmq_messages_in", "Total number of incoming messages", labels=in_labels)
        bytes_in = CounterMetricFamily("rocketmq_throughput_in", "Total traffic of incoming messages", labels=in_labels)
        sizes = HistogramMetricFamily(
            "rocketmq_message_size", "Incoming messages size", labels=(*COMMON_LABELS, "topic", "message_type")
        )
        for (topic, message_type), (count, size_sum) in t.stored.items():
            values = [*common, topic, message_type, _bool(is_system(topic))]
            messages_in.add_metric(values, count)
            bytes_in.add_metric(values, size_sum)
            h = t.sizes[(topic, message_type)]
            sizes.add_metric([*common, topic, message_type], h.cumulative(MESSAGE_SIZE_BUCKETS), h.total)
        out_labels = (*COMMON_LABELS, "topic", "consumer_group", "is_system")
        messages_out = CounterMetricFamily("rocketmq_messages_out", "Total number of outgoing messages", labels=out_labels)
        bytes_out = CounterMetricFamily("rocketmq_throughput_out", "Total traffic of outgoing messages", labels=out_labels)
        for (topic, group), (count, size_sum) in t.handed_out.items():
            values = [*common, topic, group, _bool(is_system(topic, group))]
            messages_out.add_metric(values, count)
            bytes_out.add_metric(values, size_sum)
        rpc = HistogramMetricFamily(
            "rocketmq_rpc_latency", "Rpc latency", labels=(*COMMON_LABELS, *RPC_LABELS), unit="milliseconds"
        )
        for key, h in t.rpc.items():
            rpc.add_metric([*common, *key], h.cumulative(RPC_LATENCY_BUCKETS_MS), h.total)
        yield from (messages_in, bytes_in, sizes, messages_out, bytes_out, rpc)
        labels = (*COMMON_LABELS, "broker_addr")
        for name, doc, value in (
            ("rmqha_escaped_messages", "Messages an acting master stored on another broker set (RIP-32 escape)", t.escaped),
            ("rmqha_forwarded_sends", "Sends handed on to the set's serving broker or a static queue's owner", t.forwarded),
        ):
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric([*common, self.addr], value)
            yield c

    def _ha(self) -> Iterator[Metric]:
        src, store, common, addr = self.sources, self.sources.store, self.common, self.addr
        labels = (*COMMON_LABELS, "broker_addr")
        values = [*common, addr]
        view = src.ha()
        gate = src.gate()

        def gauge(name: str, doc: str, value: float, unit: str = "") -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels, unit=unit)
            g.add_metric(values, value)
            return g

        role = GaugeMetricFamily("rmqha_broker_role", "The broker's role (1 for the one it has)", labels=(*labels, "role"))
        role.add_metric([*values, "slave" if view.role == "SLAVE" else "master"], 1)
        yield role
        yield gauge("rmqha_broker_master_epoch", "The last epoch of the broker's epoch file", view.master_epoch)
        yield gauge(
            "rmqha_broker_sync_state_set_size", "The SyncStateSet's size as this broker knows it", len(view.sync_state_set)
        )
        members = GaugeMetricFamily(
            "rmqha_broker_sync_state_set_member", "A member of the SyncStateSet", labels=(*labels, "member_broker_id")
        )
        for member in sorted(view.sync_state_set):
            members.add_metric([*values, str(member)], 1)
        yield members
        lag_labels = (*labels, "replica_broker_id", "replica_addr")
        lag_bytes = GaugeMetricFamily(
            "rmqha_replica_lag", "A slave's distance behind this master", labels=lag_labels, unit="bytes"
        )
        lag_ms = GaugeMetricFamily(
            "rmqha_replica_lag", "Since a lagging slave was last caught up", labels=lag_labels, unit="milliseconds"
        )
        now = now_ms()
        for s in view.slaves:
            row = [*values, str(s["brokerId"]), str(s["addr"])]
            lag_bytes.add_metric(row, s["lagBytes"])
            caught_up = s.get("lastCaughtUpMs")
            lag_ms.add_metric(row, 0 if not s["lagBytes"] else max(0, now - caught_up) if caught_up else 0)
        yield lag_bytes
        yield lag_ms
        yield gauge("rmqha_broker_max_offset", "The commit log's max offset", store.max_offset)
        yield gauge("rmqha_broker_confirm_offset", "The confirm offset (what every in-sync replica holds)", store.confirm_offset)
        yield gauge("rmqha_broker_writable", "1 while the broker takes sends", 1 if gate is WriteReason.WRITABLE else 0)
        write_gate = GaugeMetricFamily(
            "rmqha_broker_write_gate", "Why the broker takes sends or not (1 for the reason now)", labels=(*labels, "reason")
        )
        write_gate.add_metric([*values, "writable" if gate is WriteReason.WRITABLE else gate.value.lower()], 1)
        yield write_gate
        yield gauge(
            "rmqha_broker_acting_master", "1 while this slave acts for its dead master (RIP-32)", 1 if src.acting() else 0
        )
        yield gauge(
            "rmqha_broker_pre_online",
            "1 while a returning master takes back its state (RIP-32 pre-online)",
            1 if gate is WriteReason.PRE_ONLINE else 0,
        )
        yield gauge("rmqha_store_disk_used_ratio", "The store's disk use (0-1)", self._disk.used_ratio)
        yield gauge(
            "rmqha_store_disk_warning_ratio",
            "diskSpaceWarningLevelRatio (0-1): sends are refused past it",
            self._disk.warning_ratio,
        )


# --- the listener -----------------------------------------------------------------------------------

READ_TIMEOUT_S = 5.0
IDLE_S = 120.0  # not scraped for this long: the backlogs are no longer taken
REFRESH_SHARE = 10  # the backlogs are taken at most every REFRESH_SHARE x the time it took last


class MetricsEndpoint:
    """``GET /metrics`` (and ``/``) on ``host:port``; anything else is a 404. Each connection answers
    one request and closes. Uncompressed: a scrape's gzip would run on the broker's event loop.

    The consumer backlogs (brokers/core/lag.py, once per group's queue) are taken between scrapes by
    a task of this endpoint, every ``interval()`` seconds (the broker passes brokerStatusReportInterval:
    the metrics agree with the REST API within one report) but never for more than a tenth of the
    loop's time (a broker with 80,000 group queues takes them less often), and only while Prometheus
    scrapes (not for IDLE_S: it stops; the next scrape waits for a fresh one). A scrape renders the
    rest from the parts' current values."""

    def __init__(self, host: str, port: int, metrics: BrokerMetrics, interval: Callable[[], float]):
        self.host, self.port = host, port
        self.metrics = metrics
        self.interval = interval
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        self._server: asyncio.Server | None = None
        self._refresher: asyncio.Task | None = None
        self._wanted = asyncio.Event()  # scraped lately: keep the backlogs fresh
        self._fresh = asyncio.Event()  # the backlogs were taken since the scrapes began
        self._scraped_at = 0.0
        self.scrapes = 0
        self.refreshes = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_forever(), name="metrics-refresh")
        log.info("metrics on http://%s/metrics", self.address)

    async def stop(self) -> None:
        await cancel_and_wait(self._refresher)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _refresh_forever(self) -> None:
        while True:
            await self._wanted.wait()
            started = time.monotonic()
            try:
                await self.metrics.refresh()
                self.refreshes += 1
            except Exception:  # the next refresh tries again; a scrape meanwhile shows the last one
                log.exception("taking the consumer backlogs for the metrics failed")
            took = time.monotonic() - started
            self._fresh.set()
            if time.monotonic() - self._scraped_at > IDLE_S:
                self._wanted.clear()
                self._fresh.clear()
                continue
            await asyncio.sleep(max(self.interval(), REFRESH_SHARE * took))

    async def render(self) -> bytes:
        """One scrape's text: Prometheus' text format 0.0.4 (which every Prometheus takes; OpenMetrics
        is not offered, so the consumer families' text joins the library's output as it is)."""
        self._scraped_at = time.monotonic()
        self._wanted.set()
        await self._fresh.wait()
        return generate_latest(self.registry) + self.metrics.consumer_text

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = (lines[0].split(" ") + ["", ""])[:3]
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD") or path not in ("/metrics", "/"):
                status, body, content_type = "404 Not Found", b"not found: GET /metrics\n", "text/plain"
            else:
                started = time.perf_counter()
                body, content_type = await self.render(), CONTENT_TYPE_LATEST
                self.scrapes += 1
                log.debug("scrape: %d bytes in %.1f ms", len(body), (time.perf_counter() - started) * 1000)
                status = "200 OK"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode("latin-1")
            )
            if method != "HEAD":
                writer.write(body)
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except Exception:  # a bug here costs this scrape, never the broker
            log.exception("metrics scrape failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2)
