"""Static topics served by real brokers (issue 18; docs/static-topics.md): three broker sets, a static
topic of 4 logical queues on two of them, the official Python Producer and SimpleConsumer in this
process under steady load. Two queues move to the third set, then the first set is drained, while the
producer sends and the consumer receives; the clients' routes stay up to 30 s old the whole time.

Checked: every message sent is received, none twice on its first attempt; each move is decided (the
old segment sealed at its end, the new one starting exactly there); each logical queue, read from
logical offset 0 by a second group with plain gRPC receives, gives offsets 0, 1, 2 ... in order with
no gap across its segments, ending at the queue's END offset, and the ENDs add up to the messages
sent; then the drained set is stopped and nothing is lost: every queue still reads, and new sends
land."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import httpx
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from controlplane.models import ApiToken
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from testkit.static_topics import ProducerLoad, create, mapping, migrate, query_offset, read_queue, routed, settled
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.e2e.test_node_client import alive_and, ids, node, running
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Ledger"
QUEUES = 4
SETS = ("broker-a", "broker-b", "broker-c")


def start_sets(tmp_path, base: str, token: str) -> tuple[dict, dict]:
    procs, ports = {}, {}
    for name in SETS:
        p = BrokerPorts.reserve()
        keys = broker_keys(
            name, tmp_path / name, p, base, cluster="static", token=token, brokerId=0, mappedFileSizeCommitLog=4194304
        )
        procs[name] = start_broker(write_broker_conf(tmp_path / f"{name}.conf", keys), name)
        ports[name] = p.grpc
    return procs, ports


def stop_sets(procs: dict) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        p.wait(30)


def registered(base: str, admin: dict) -> bool:
    info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
    return set(info["brokerAddrTable"]) == set(SETS)


@contextmanager
def static_cluster(tmp_path, tag: str) -> Iterator[tuple[str, dict, dict, dict]]:
    """A control plane, the three broker sets, and TOPIC created static on broker-a and broker-b:
    (base URL, admin headers, broker processes, gRPC ports); everything stopped after."""
    token = ApiToken.issue(f"{tag}-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue(f'{tag}-admin', 'admin')[1]}"}
    with uvicorn_server() as base:
        procs, ports = start_sets(tmp_path, base, token)
        try:
            wait_for(lambda: registered(base, admin), 30, "three broker sets")
            create(base, admin, TOPIC, QUEUES, ["broker-a", "broker-b"])
            wait_for(lambda: routed(base, admin, TOPIC, 2), 20, "the static topic's route")
            yield base, admin, procs, ports
        finally:
            stop_sets(procs)


def test_queues_move_and_a_drained_set_is_stopped_with_nothing_lost_under_the_official_clients(tmp_path):
    with static_cluster(tmp_path, "static") as (base, admin, procs, ports):
        access = f"127.0.0.1:{ports['broker-b']}"
        consumer = SimpleConsumer(
            ClientConfiguration(access, Credentials()), "ledger", {TOPIC: FilterExpression()}, await_duration=1
        )
        consumer.startup()
        received: dict[str, int] = {}
        first_twice = 0

        def consume(seconds: float) -> None:
            nonlocal first_twice
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                for m in consumer.receive(32, 30):
                    if m.message_id in received and m.delivery_attempt == 1:
                        first_twice += 1
                    received[m.message_id] = received.get(m.message_id, 0) + 1
                    consumer.ack(m)

        try:
            with ProducerLoad(access, TOPIC) as load:
                consume(3)
                moved = migrate(
                    base,
                    admin,
                    TOPIC,
                    {"moves": [{"queueId": 0, "brokerName": "broker-c"}, {"queueId": 1, "brokerName": "broker-c"}]},
                )
                assert [(m["queueId"], m["target"]["brokerName"]) for m in moved["moves"]] == [
                    (0, "broker-c"),
                    (1, "broker-c"),
                ]
                wait_for(lambda: settled(base, admin, TOPIC), 15, "the first move decided")
                first_move_decided = time.time()
                consume(3)
                drained = migrate(base, admin, TOPIC, {"drain": {"brokerName": "broker-a"}})
                assert {m["source"]["brokerName"] for m in drained["moves"]} == {"broker-a"}
                wait_for(lambda: settled(base, admin, TOPIC), 15, "the drain decided")
                consume(3)
                load.stop()
                sent = dict(load.sent)
                assert not load.errors, load.errors[:3]
            deadline = time.monotonic() + 90
            while not set(sent) <= set(received) and time.monotonic() < deadline:
                consume(1)
        finally:
            consumer.shutdown()
        missing = set(sent) - set(received)
        assert not missing, f"{len(missing)} of {len(sent)} acknowledged sends never received"
        assert first_twice == 0
        assert len(sent) > 200, "the load sent too little to exercise the moves"

        final = mapping(base, admin, TOPIC)
        assert {q["segments"][-1]["brokerName"] for q in final["queues"]} <= {"broker-b", "broker-c"}
        kinds = [c["kind"] for c in final["history"]]
        assert kinds.count("move") == 2 and kinds.count("decide") >= 3, kinds
        for q in final["queues"]:  # the chain has no gap: each segment starts where the one before ends
            segs = q["segments"]
            for before, after in zip(segs, segs[1:], strict=False):
                assert after["logicStart"] == before["logicStart"] + before["physEnd"] - before["physStart"]

        ends = [query_offset(ports["broker-b"], TOPIC, lid, pb.QueryOffsetPolicy.END) for lid in range(QUEUES)]
        assert sum(ends) == len(sent), (ends, len(sent))
        print(f"{len(sent)} sent and received across two moves; logical ends {ends}; mapping epoch {final['epoch']}")
        assert [query_offset(ports["broker-c"], TOPIC, lid, pb.QueryOffsetPolicy.BEGINNING) for lid in range(QUEUES)] == [
            0
        ] * QUEUES
        # By time, asked where queue 0 has no segment: each segment searched by the broker set holding it.
        sealed = final["queues"][0]["segments"][0]
        sealed_end = sealed["logicStart"] + sealed["physEnd"] - sealed["physStart"]
        by_time = [
            query_offset(ports["broker-b"], TOPIC, 0, pb.QueryOffsetPolicy.TIMESTAMP, at) for at in (0, first_move_decided)
        ]
        assert by_time[0] == 0 and sealed_end <= by_time[1] < ends[0], (by_time, sealed_end, ends[0])
        assert query_offset(ports["broker-b"], TOPIC, 0, pb.QueryOffsetPolicy.TIMESTAMP, time.time() + 3600) == ends[0]
        bodies = set(sent.values())
        for lid in range(QUEUES):
            got = read_queue(ports["broker-b"], TOPIC, "auditor", lid, ends[lid])
            assert [o for o, _ in got] == list(range(ends[lid])), f"queue {lid}: offsets out of order or with gaps"
            assert {b for _, b in got} <= bodies

        # A batch mixing a static topic with another topic is refused whole: nothing stored.
        mixed = spb.SendMessageRequest(
            messages=[pb.Message(topic=pb.Resource(name=t), body=b"mixed") for t in (TOPIC, "broker-b")]
        )
        for n, m in enumerate(mixed.messages):
            m.system_properties.message_id, m.system_properties.message_type = f"mixed-{n}", pb.MessageType.NORMAL
        with grpc.insecure_channel(f"127.0.0.1:{ports['broker-b']}") as channel:
            refused = rpc.MessagingServiceStub(channel).SendMessage(mixed, timeout=10)
        assert refused.status.code == pb.Code.BAD_REQUEST, refused.status
        assert [query_offset(ports["broker-b"], TOPIC, lid, pb.QueryOffsetPolicy.END) for lid in range(QUEUES)] == ends

        # The drained set, its old segments read to their end, is stopped: nothing is lost.
        procs["broker-a"].terminate()
        procs["broker-a"].wait(30)
        with ProducerLoad(access, TOPIC) as late:
            deadline = time.monotonic() + 60
            while len(late.sent) < 50 and time.monotonic() < deadline:
                time.sleep(0.1)
            late.stop()
            after_stop = dict(late.sent)
        assert len(after_stop) >= 50
        later = [query_offset(ports["broker-b"], TOPIC, lid, pb.QueryOffsetPolicy.END) for lid in range(QUEUES)]
        assert sum(later) == len(sent) + len(after_stop)


def node_round(tmp_path, access: str, phase: str, acked: set[str], delivered: set[str]) -> tuple[set[str], set[str]]:
    """The Node.js producer sends 200 messages; then a Node.js consumer of group "node" receives until
    every message acknowledged so far (``acked`` and these) was delivered (``delivered``: earlier
    rounds'). Returns both sets, grown."""
    producer, sent = node("produce", f"node-producer-{phase}", tmp_path, access, TOPIC, "--interval-ms", "5")
    with running(producer):
        wait_for(lambda: alive_and(producer, lambda: len(sent.of("ack")) >= 200), 60, "200 sends acknowledged")
    assert sent.of("fail") == [], sent.of("fail")[:3]
    acked = acked | ids(sent, "ack")
    consumer, got = node("consume", f"node-consumer-{phase}", tmp_path, access, TOPIC, "--group", "node")
    with running(consumer):
        wait_for(lambda: alive_and(consumer, lambda: acked <= delivered | ids(got, "delivery")), 90, "every acknowledged message")
    assert got.of("receive_fail", "ack_fail") == [], got.of("receive_fail", "ack_fail")[:3]
    return acked, delivered | ids(got, "delivery")


def test_the_node_client_produces_and_consumes_a_static_topic_across_a_move(tmp_path):
    """The official Node.js client (it receives from one queue of each broker only: a receive at a
    broker set also pops the other logical queues it owns) before and after a queue moves."""
    with static_cluster(tmp_path, "static-node") as (base, admin, _, ports):
        access = f"127.0.0.1:{ports['broker-b']}"
        acked, delivered = node_round(tmp_path, access, "before", set(), set())
        migrate(base, admin, TOPIC, {"moves": [{"queueId": 0, "brokerName": "broker-c"}]})
        wait_for(lambda: settled(base, admin, TOPIC), 15, "the move decided")
        node_round(tmp_path, access, "after", acked, delivered)
