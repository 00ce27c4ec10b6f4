"""Isolation survives a broker restart and a missed push: a real broker process learns that an operator
isolated it from its registration answers (the nameserver's ``isolated``), refuses sends through the
official gRPC SendMessage while isolated, keeps refusing after a restart once it has registered, and
takes sends again once the isolation is lifted."""

from __future__ import annotations

import json
import os
import signal

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

from controlplane.models import ApiToken, Isolation
from testkit.brokers import BrokerPorts, broker_keys, write_broker_conf
from tests.e2e.test_broker_membership import start_broker, wait_for
from tests.procs import create_topic, uvicorn_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

CLUSTER, NAME = "iso", "broker-iso"


def send_one(port: int, n: int) -> tuple[int, str]:
    """One SendMessage straight to the broker (no route: an isolated broker is not in the routes, but
    a client with a stale route may still call it); its (code, message)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = rpc.MessagingServiceStub(channel)
        resp = stub.SendMessage(
            spb.SendMessageRequest(
                messages=[
                    pb.Message(
                        topic=pb.Resource(name="Orders"),
                        body=b"order %d" % n,
                        system_properties=pb.SystemProperties(
                            message_id=f"{n:032X}", body_encoding=pb.Encoding.IDENTITY, message_type=pb.MessageType.NORMAL
                        ),
                    )
                ]
            ),
            timeout=10,
        )
    return resp.status.code, resp.status.message


def test_an_isolated_broker_still_refuses_sends_after_a_restart_and_a_missed_push(tmp_path):
    broker_token = ApiToken.issue("iso-broker", "broker")[1]
    admin = {"Authorization": f"Bearer {ApiToken.issue('iso-admin', 'admin')[1]}"}
    ports = BrokerPorts.reserve()
    addr = f"127.0.0.1:{ports.listen}"
    sent = iter(range(10**6))
    with uvicorn_server() as base:
        conf = write_broker_conf(
            tmp_path / "broker.conf",
            broker_keys(
                NAME,
                tmp_path / "store",
                ports,
                base,
                cluster=CLUSTER,
                token=broker_token,
                brokerId=0,
                mappedFileSizeCommitLog=65536,
                brokerHeartbeatInterval=200,
                registerNameServerPeriod=1000,
            ),
        )

        def registered() -> bool:
            info = httpx.get(f"{base}/api/v1/nameserver/cluster-info", headers=admin, timeout=5).json()
            return info["brokerAddrTable"].get(NAME, {}).get("brokerAddrs", {}) == {"0": addr}

        def refused() -> bool:
            code, message = send_one(ports.grpc, next(sent))
            return code != pb.Code.OK and "isolated by an operator" in message

        def accepted() -> bool:
            return send_one(ports.grpc, next(sent))[0] == pb.Code.OK

        proc = start_broker(conf, "iso")
        try:
            wait_for(registered, 30, "the broker's registration")
            create_topic(base, admin, "Orders", 1, clusterName=CLUSTER)
            topics = tmp_path / "store" / "config" / "topics.json"
            wait_for(
                lambda: topics.exists() and "Orders" in json.loads(topics.read_text())["topicConfigTable"],
                10,
                "the topic on the broker",
            )
            assert accepted()

            # Isolated while its push is lost (the row is written, nobody tells the broker): the next
            # registration answer carries it.
            Isolation.objects.create(cluster_name=CLUSTER, broker_name=NAME, broker_addr=addr, by="e2e")
            took = wait_for(refused, 10, "a refusal after the next registration answer")
            print(f"isolation learned from a registration answer {took:.2f} s after the missed push")

            # A restart: the process starts knowing nothing; once registered it refuses again.
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            wait_for(lambda: not registered(), 10, "the stopped broker's removal")
            proc = start_broker(conf, "iso-restarted")
            wait_for(registered, 30, "the restarted broker's registration")
            wait_for(refused, 3, "a refusal right after the restarted broker registered")
            for _ in range(5):  # and it stays refused (periodic registrations say the same)
                assert refused()

            # Lifted, again without a push: the next registration answer lets sends in.
            Isolation.objects.filter(cluster_name=CLUSTER, broker_addr=addr).delete()
            wait_for(accepted, 10, "sends taken again after the isolation was lifted")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
