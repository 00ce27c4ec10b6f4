"""The remoting test clients against real brokers (issue 36 item 4): PyPI ``rocketmq`` 0.4.4 (the C++
client) and ali-ons 3.12.0 produce and push-consume through a three-replica controller-mode group
(tests/e2e/test_failover.py ``three_replicas``), finding it through our nameserver's remoting
endpoint. A broker's remoting address is ``127.0.0.1:<listenPort>``, the address it registers.

What these tests need of the broker's remoting edge (brokers/remoting/), beyond the codes each client
sends (docs/remoting-clients.md):
- SEND_MESSAGE 10 (C++) and SEND_MESSAGE_V2 310 (ali-ons) stored like a gRPC send (all-ack here),
  answered SUCCESS with ``msgId`` (the offset message id), ``queueId``, ``queueOffset``; a message
  without UNIQ_KEY (ali-ons) gets one; BOOL extFields read as Java does (C++ sends ``"0"``).
- HEART_BEAT 34 (enums as ordinals from C++, as names from ali-ons) registers the group, creates its
  ``%RETRY%<group>`` topic and registers it with the control plane (both clients route it);
  GET_CONSUMER_LIST_BY_GROUP 38 names the group's live clients; UNREGISTER_CLIENT 35.
- QUERY_CONSUMER_OFFSET 14 for a group with no offset: SUCCESS offset 0 while the queue's min offset
  is 0 (Java's ConsumerManageProcessor answers so while the first message is in memory), so that a
  new group started after the sends receives them; GET_MAX_OFFSET 30; UPDATE_CONSUMER_OFFSET 15
  (two-way from both; a negative commitOffset from ali-ons is not stored) into the offsets the
  dashboard reads (``dashboards.selectors.consumer_group``).
- PULL_MESSAGE 11 with long polling (both suspend 15 s), FOUND bodies in MessageExt layout (the
  clients decode V1 magic records), sysFlag 7 carrying commitOffset.
- LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42 from the C++ orderly consumer (one queue per lock request).
- The DELAY property (level 2 = 5 s) delays delivery by RocketMQ's default levels.
- After kill -9 of the master the elected master registers as id 0 at the new epoch; the C++ client
  finds it at its next route poll (30 s).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from chaos.official_client import EventLog
from chaos.remoting_clients import remoting_client
from controlplane.models import ApiToken
from dashboards.selectors import consumer_group
from mqrules.remoting.codes import RequestCode
from testkit.remoting import RemotingClient
from tests.e2e.test_acting_master import acting_pair
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import three_replicas
from tests.e2e.test_remoting_clients import alive_and, remoting_nameserver
from tests.e2e.test_replication import send, stop_all
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Replicated"  # testkit's topic, 4 queues
CLIENTS = ("cpp", "node")
ROUTE_POLL_S = 30  # both clients' nameserver poll interval


def client(kind: str, role: str, name: str, tmp_path: Path, namesrv: str, *options: str):
    return remoting_client(kind, role, name, tmp_path, namesrv, TOPIC, *options)


def ids(log: EventLog, kind: str) -> set[str]:
    return {e["id"] for e in log.of(kind)}


@pytest.mark.parametrize("kind", CLIENTS)
def test_produce_then_push_consume(tmp_path, kind):
    with three_replicas(tmp_path, f"rm-{kind}") as _, remoting_nameserver() as namesrv:
        with client(kind, "produce", f"{kind}-producer", tmp_path, namesrv, "--count", "300", "--body-bytes", "1024") as (
            p,
            sent,
        ):
            wait_for(lambda: alive_and(p, lambda: len(sent.of("ack", "fail")) == 300), 90, "300 sends answered")
        assert sent.of("fail") == [], sent.of("fail")[:3]
        assert {e["msg_id"] for e in sent.of("ack")} and len(ids(sent, "ack")) == 300
        group = f"{kind}-remoting"
        with client(kind, "consume", f"{kind}-consumer", tmp_path, namesrv, "--group", group) as (c, got):
            wait_for(lambda: alive_and(c, lambda: ids(sent, "ack") <= ids(got, "delivery")), 90, "every acknowledged message")
            # the client's own message ids survive the trip (C++: UNIQ_KEY; ali-ons: offset message id)
            assert {e["msg_id"] for e in sent.of("ack")} <= {e["msg_id"] for e in got.of("delivery")}
            # its offsets are the ones the dashboard shows: the group's lag drains to 0
            wait_for(lambda: (consumer_group(group) or {}).get("topics", [{}])[0].get("lag") == 0, 60, "the group's lag at 0")
        # A new group's retry topic is created by its first heartbeat: a client that asks its route
        # before (ali-ons, as Java's clients do) is told 17 once, and routes it at its next poll.
        failed = [e for e in got.of("route_fail", "client_error") if f"%RETRY%{group}" not in e["error"]]
        assert failed == []
        assert [e["kind"] for e in got.of("started", "stopped")] == ["started", "stopped"]


def test_the_cpp_orderly_consumer_gets_one_keys_messages_in_order(tmp_path):
    """send_orderly with one key puts every message in one queue; the orderly push consumer (which
    locks its queues with LOCK_BATCH_MQ first) delivers them in send order."""
    with three_replicas(tmp_path, "rm-orderly") as _, remoting_nameserver() as namesrv:
        opts = ("--count", "200", "--orderly-key", "order-42", "--interval-ms", "1")
        with client("cpp", "produce", "cpp-orderly-producer", tmp_path, namesrv, *opts) as (p, sent):
            wait_for(lambda: alive_and(p, lambda: len(sent.of("ack", "fail")) == 200), 90, "200 orderly sends answered")
        assert sent.of("fail") == []
        with client("cpp", "consume", "cpp-orderly", tmp_path, namesrv, "--group", "cpp-orderly", "--orderly") as (c, got):
            wait_for(lambda: alive_and(c, lambda: ids(sent, "ack") <= ids(got, "delivery")), 90, "every orderly message")
        acked = ids(sent, "ack")  # (the test kit's warm-up message waits in queue 0: not this producer's)
        deliveries = [d for d in got.of("delivery") if d["id"] in acked]
        assert len({d["queue_id"] for d in deliveries}) == 1
        first = [d["id"] for d in deliveries if d["attempt"] == 1]
        assert first == sorted(first), "orderly deliveries out of send order"


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_delay_level_delays_delivery(tmp_path, kind):
    """DELAY=2 is RocketMQ's second default level, 5 s: no message arrives before it. (A 4.x
    application's topics carry no message type: its delayed messages go to a NORMAL topic, which
    takes them once the type check is off.)"""
    untyped = {"enableTopicMessageTypeCheck": "false"}
    with three_replicas(tmp_path, f"rm-delay-{kind}", **untyped) as _, remoting_nameserver() as namesrv:
        group = f"{kind}-delay"
        with client(kind, "consume", f"{kind}-delay-consumer", tmp_path, namesrv, "--group", group) as (c, got):
            wait_for(lambda: alive_and(c, lambda: got.of("started")), 30, "the consumer started")
            time.sleep(5)  # its rebalance and first pulls
            opts = ("--count", "5", "--delay-level", "2", "--id-prefix", "late-")
            with client(kind, "produce", f"{kind}-delay-producer", tmp_path, namesrv, *opts) as (p, sent):
                wait_for(lambda: alive_and(p, lambda: len(sent.of("ack", "fail")) == 5), 60, "5 delayed sends answered")
            assert sent.of("fail") == []
            wait_for(lambda: alive_and(c, lambda: ids(sent, "ack") <= ids(got, "delivery")), 60, "the delayed messages")
        acked = {e["id"]: e["sent"] for e in sent.of("ack")}
        early = [d for d in got.of("delivery") if d["id"] in acked and d["t"] - acked[d["id"]] < 4.5]
        assert early == [], f"delivered before the 5 s delay: {early[:3]}"


def test_kill_9_of_the_master_under_the_cpp_producer_loses_nothing_acknowledged(tmp_path):
    """Controller mode: the elected master registers as id 0 at the new epoch; the C++ producer's sends
    fail until its next route poll names it, then succeed; every acknowledged message is received."""
    with three_replicas(tmp_path, "rm-kill") as (_, master, info, master_of), remoting_nameserver() as namesrv:
        with client("cpp", "produce", "cpp-kill-producer", tmp_path, namesrv, "--interval-ms", "10") as (p, sent):
            wait_for(lambda: alive_and(p, lambda: len(sent.of("ack")) >= 100), 60, "sends before the fault")
            master.stop(signal.SIGKILL)
            killed = time.time()
            wait_for(lambda: master_of(info()) not in (None, master), 30, "the election")
            wait_for(lambda: any(e["sent"] > killed for e in sent.of("ack")), ROUTE_POLL_S + 30, "an ack after the failover")
            resumed = len(sent.of("ack"))
            wait_for(lambda: alive_and(p, lambda: len(sent.of("ack")) >= resumed + 100), 60, "sends after the failover")
        with client("cpp", "consume", "cpp-kill-consumer", tmp_path, namesrv, "--group", "cpp-kill") as (c, got):
            wait_for(lambda: alive_and(c, lambda: ids(sent, "ack") <= ids(got, "delivery")), 120, "every acknowledged message")


def test_classic_acting_master_serves_the_cpp_consumer_and_the_master_takes_its_offsets_back(tmp_path):
    """RIP-32 for remoting clients (classic mode, enableSlaveActingMaster). The C++ push consumer of a
    group consumes the first 100 messages from the master (its offsets committed there, and so on the
    slave). After kill -9 of the master the route names the slave as id 0: the consumer, started
    again, takes the group's offsets from it, pulls the other 200 from it and commits there; the
    returning master takes those offsets back at pre-online and registers as id 0 again, and a
    consumer of the group started then finds nothing left: no message delivered twice."""
    token = ApiToken.issue("rm-acting-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('rm-acting-admin', 'admin')[1]}"}
    with uvicorn_server() as base, remoting_nameserver() as namesrv:
        r = httpx.patch(f"{base}/api/v1/nameserver/config", headers=admin, timeout=5, json={"supportActingMaster": True})
        assert r.status_code == 200, r.text
        master, slave = acting_pair(tmp_path, base, token)

        def id0() -> str | None:
            with RemotingClient(namesrv) as ns:
                answer = ns.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            return json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"].get("0") if answer.code == 0 else None

        def committed(replica) -> int:
            query = {"consumerGroup": "acting-g", "topic": TOPIC}
            with RemotingClient(f"127.0.0.1:{replica.listen_port}") as c:
                answers = [c.request(RequestCode.QUERY_CONSUMER_OFFSET, {**query, "queueId": q}) for q in range(4)]
            return sum(int(a.ext_fields["offset"]) for a in answers)

        def consumed(name: str, want: int) -> list[tuple[int, int]]:
            """Run the group's consumer until ``want`` messages arrived and it committed them."""
            with client("cpp", "consume", name, tmp_path, namesrv, "--group", "acting-g") as (c, got):
                wait_for(lambda: alive_and(c, lambda: len(got.of("delivery")) >= want), 90, f"{want} deliveries")
                time.sleep(6)  # its offsets go to the broker every 5 s (and at shutdown)
            return [(d["queue_id"], d["queue_offset"]) for d in got.of("delivery")]

        try:
            master.start()
            slave.start()
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 60, "the master taking writes with its slave")
            assert send(master.grpc_port, 99, first=1) == {pb.Code.OK: 99}
            first = consumed("acting-consumer-1", 100)
            wait_for(lambda: committed(slave) == 100, 30, "the group's offsets on the slave")
            assert send(master.grpc_port, 200, first=100) == {pb.Code.OK: 200}

            master.stop(signal.SIGKILL)
            wait_for(lambda: id0() == f"127.0.0.1:{slave.listen_port}", 60, "the slave routed as id 0")
            second = consumed("acting-consumer-2", 200)
            assert committed(slave) == 300, "the consumer's offsets were not committed to the acting slave"

            master.start()
            wait_for(lambda: id0() == f"127.0.0.1:{master.listen_port}", 90, "the master back as id 0")
            assert committed(master) == 300, "the returning master did not take the acting slave's offsets back"
            with client("cpp", "consume", "acting-consumer-3", tmp_path, namesrv, "--group", "acting-g") as (c, got):
                wait_for(lambda: alive_and(c, lambda: bool(got.of("route_ok"))), 60, "the third consumer running")
                time.sleep(8)  # its rebalance and first pulls
                third = [(d["queue_id"], d["queue_offset"]) for d in got.of("delivery")]
        finally:
            stop_all(master, slave)
        delivered = first + second + third
        assert len(set(delivered)) == 300, "a message was never delivered"
        assert len(delivered) == 300, f"{len(delivered) - 300} messages delivered twice"
