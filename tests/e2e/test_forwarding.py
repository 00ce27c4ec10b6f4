"""Any live replica answers for its group (issue 16): a request sent to a slave is served through its
master (sends stored there, pops and acks on the master's state), a bad request gets the master's
own error and stores nothing, and a slave whose group has no reachable master answers a code the
official clients retry on, before the client's deadline. Real broker processes and control plane."""

from __future__ import annotations

import time
from contextlib import ExitStack

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from controlplane.models import ApiToken
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import group_views, start_in_sync, two_replicas
from tests.e2e.test_replication import Replica, send, stop_all
from tests.procs import celery_worker_and_beat, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def one(port: int, topic: str = "Replicated", body: bytes = b"x", timeout: float = 10) -> spb.SendMessageResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        msg = pb.Message(
            topic=pb.Resource(name=topic),
            body=body,
            system_properties=pb.SystemProperties(message_id="F" * 32, message_type=pb.MessageType.NORMAL),
        )
        return rpc.MessagingServiceStub(channel).SendMessage(spb.SendMessageRequest(messages=[msg]), timeout=timeout)


def receive(port: int, queue: int, count: int) -> list[pb.Message]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name="fwd"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Replicated"), id=queue),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            batch_size=count,
            invisible_duration=Duration(seconds=60),
            long_polling_timeout=Duration(seconds=1),
        )
        return [r.message for r in rpc.MessagingServiceStub(channel).ReceiveMessage(req, timeout=10) if r.HasField("message")]


def ack(port: int, messages: list[pb.Message]) -> spb.AckMessageResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return rpc.MessagingServiceStub(channel).AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name="fwd"),
                topic=pb.Resource(name="Replicated"),
                entries=[
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
                    )
                    for m in messages
                ],
            ),
            timeout=10,
        )


def test_a_slave_serves_its_groups_clients_through_the_master(tmp_path):
    token = ApiToken.issue("fwd-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('fwd-admin', 'admin')[1]}"}
    with uvicorn_server() as base, celery_worker_and_beat():
        replicas = two_replicas(tmp_path, base, token, allAckInSyncStateSet="true", controllerHeartBeatTimeoutMills=3000)
        info, master_of = group_views(base, admin, replicas)
        try:
            _, master, slave = start_in_sync(replicas, info, master_of)
            wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
            stored = master.log_size()
            assert send(slave.grpc_port, 64, first=100) == {pb.Code.OK: 64}  # through the master
            assert master.log_size() > stored
            # A bad send gets the master's own answer and stores nothing.
            stored = master.log_size()
            assert one(slave.grpc_port, topic="NoSuchTopic").status.code == pb.Code.TOPIC_NOT_FOUND
            assert one(slave.grpc_port, body=b"").status.code == pb.Code.MESSAGE_BODY_EMPTY
            assert master.log_size() == stored
            # Pops and acks on the slave are the master's: what the slave hands out, the master does not again.
            got = receive(slave.grpc_port, 0, 8)
            assert got and ack(slave.grpc_port, got).status.code == pb.Code.OK
            again = {m.system_properties.queue_offset for m in receive(master.grpc_port, 0, 64)}
            assert again.isdisjoint({m.system_properties.queue_offset for m in got})
        finally:
            stop_all(*replicas)


def classic_pair(tmp_path, base: str, token: str) -> tuple[Replica, Replica]:
    """A classic master and slave, started, the slave forwarding sends to the master."""
    master = Replica(tmp_path, "master", 0, "ASYNC_MASTER", base, token)
    slave = Replica(tmp_path, "slave", 1, "SLAVE", base, token)
    try:
        master.start()
        slave.start()
        wait_for(lambda: send(master.grpc_port, 1) == {pb.Code.OK: 1}, 30, "the master taking writes")
        wait_for(lambda: one(slave.grpc_port).status.code == pb.Code.OK, 30, "a send through the slave")
    except BaseException:
        stop_all(master, slave)
        raise
    return master, slave


def test_a_slave_without_a_reachable_master_answers_a_retryable_code_before_the_deadline(tmp_path):
    token = ApiToken.issue("fwd-alone", "broker")[1]
    with uvicorn_server() as base:
        master, slave = classic_pair(tmp_path, base, token)
        try:
            master.stop()  # classic mode without acting master: nobody serves the group now
            started = time.monotonic()
            answer = one(slave.grpc_port, timeout=2)
            took = time.monotonic() - started
            assert answer.status.code == pb.Code.INTERNAL_SERVER_ERROR, answer.status  # clients retry it at once
            assert took < 2
        finally:
            stop_all(master, slave)


def test_a_slave_keeps_forwarding_to_its_master_while_the_control_plane_is_down(tmp_path):
    """The route only caches the controller's decision: with the control plane gone (killed web tier,
    partition), a slave still forwards to the master it knows instead of holding every send until the
    control plane is back (the soak measured a 2.2 s write stall for a 2.2 s web outage)."""
    token = ApiToken.issue("fwd-cp-down", "broker")[1]
    web = ExitStack()
    base = web.enter_context(uvicorn_server())
    master, slave = classic_pair(tmp_path, base, token)
    try:
        web.close()  # the control plane's web server stops: no route can be asked
        stored = master.log_size()
        for _ in range(4):  # over several route cache periods
            assert one(slave.grpc_port, timeout=3).status.code == pb.Code.OK
            time.sleep(0.3)
        assert master.log_size() > stored
    finally:
        web.close()
        stop_all(master, slave)
