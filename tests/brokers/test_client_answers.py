"""What official clients get from a broker besides messages: Telemetry settings as RocketMQ's proxy
answers them (brokers/grpc/settings.py; every field a client reads is there, with the proxy's
defaults, and what the client sent is kept), and route endpoints that name the live replicas of a
group for the clients whose channels fail over between addresses, or one replica per queue for the
client that retries on the next queue (brokers/grpc/routes.py)."""

from __future__ import annotations

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from brokers.grpc.clients import MULTI_ADDRESS_CLIENTS, client_language
from brokers.grpc.routes import queue_addrs, replica_addrs
from brokers.grpc.settings import client_settings

pytestmark = pytest.mark.unit


def test_a_producer_gets_an_exponential_backoff_the_body_limit_and_its_own_fields_back():
    asked = pb.Settings(
        client_type=pb.ClientType.PRODUCER,
        access_point=pb.Endpoints(scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host="127.0.0.1", port=8081)]),
        publishing=pb.Publishing(topics=[pb.Resource(name="Orders")]),
    )
    got = client_settings(asked, retry_max_times=16)
    policy = got.backoff_policy
    assert policy.WhichOneof("strategy") == "exponential_backoff" and policy.max_attempts == 3
    assert (policy.exponential_backoff.initial.ToMilliseconds(), policy.exponential_backoff.max.ToMilliseconds()) == (10, 1000)
    assert policy.exponential_backoff.multiplier == 2
    assert got.publishing.max_body_size == 4 * 1024 * 1024 and got.publishing.validate_message_type
    assert [t.name for t in got.publishing.topics] == ["Orders"] and got.access_point == asked.access_point
    assert not asked.HasField("backoff_policy")  # the client's settings are not changed


@pytest.mark.parametrize("client_type", [pb.ClientType.SIMPLE_CONSUMER, pb.ClientType.PUSH_CONSUMER])
def test_a_consumer_gets_batch_size_long_polling_and_the_groups_retry_policy(client_type):
    asked = pb.Settings(client_type=client_type, subscription=pb.Subscription(group=pb.Resource(name="billing")))
    got = client_settings(asked, retry_max_times=16)
    sub = got.subscription
    assert (sub.group.name, sub.receive_batch_size, sub.long_polling_timeout.seconds, sub.fifo) == ("billing", 32, 20, False)
    policy = got.backoff_policy
    assert policy.WhichOneof("strategy") == "customized_backoff" and policy.max_attempts == 17
    delays = [d.seconds for d in policy.customized_backoff.next]
    assert delays[:3] == [1, 5, 10] and delays[-1] == 7200 and len(delays) == 18


@pytest.mark.parametrize(
    "addrs, want",
    [
        ({"0": "h:1", "1": "h:2", "2": "h:3"}, ["h:1", "h:2", "h:3"]),
        ({"2": "h:3", "1": "h:2"}, ["h:2", "h:3"]),  # no master: the live replicas (they hold requests)
        ({"10": "h:9", "2": "h:3", "0": "h:5"}, ["h:5", "h:3", "h:9"]),  # ids compare as numbers
        ({}, []),
    ],
)
def test_route_endpoints_name_the_master_first_then_every_live_replica(addrs, want):
    assert replica_addrs(addrs) == want


@pytest.mark.parametrize(
    "language, replicas, want",
    [
        # one address for clients that cannot fail over (the Node.js client), every queue
        ("HTTP", ["h:5", "h:3", "h:9"], [["h:5"]] * 4),
        # Java connects in the order given: every queue names the master first, then every replica
        ("JAVA", ["h:5", "h:3", "h:9"], [["h:5", "h:3", "h:9"]] * 4),
        # Python: one replica per queue; with two slaves or more, the slaves in turn (never the master)
        ("PYTHON", ["h:5", "h:3", "h:9"], [["h:3"], ["h:9"], ["h:3"], ["h:9"]]),
        ("PYTHON", ["h:5", "h:3", "h:9", "h:7"], [["h:3"], ["h:9"], ["h:7"], ["h:3"]]),
        # with one slave, the master and the slave in turn
        ("PYTHON", ["h:1", "h:2"], [["h:1"], ["h:2"], ["h:1"], ["h:2"]]),
        ("PYTHON", ["h:1"], [["h:1"]] * 4),  # a lone replica serves every queue
    ],
)
def test_each_queue_names_the_addresses_its_client_connects_to(language, replicas, want):
    assert [queue_addrs(replicas, qid, language) for qid in range(4)] == want


@pytest.mark.parametrize("replicas", [["h:5", "h:3", "h:9"], ["h:5", "h:3"]])
@pytest.mark.parametrize("queues", [1, 2, 4, 8, 16])
def test_a_python_producer_retrying_on_the_next_queue_reaches_another_replica(queues, replicas):
    at = [queue_addrs(replicas, qid, "PYTHON")[0] for qid in range(queues)]
    if queues > 1:
        for qid in range(queues):  # a send and its retry go to two queues in a row (round robin)
            assert at[qid] != at[(qid + 1) % queues]
    if len(replicas) > 2:
        # a master that stops answering holds a request for its client's whole deadline; a slave
        # forwarding to it gives it up for the new master as soon as there is one
        assert "h:5" not in at
    else:
        assert at.count("h:5") == (queues + 1) // 2


def test_the_clients_language_comes_from_its_metadata():
    class Context:
        def __init__(self, metadata):
            self.metadata = metadata

        def invocation_metadata(self):
            return self.metadata

    assert client_language(Context((("x-mq-language", "PYTHON"), ("x-mq-client-id", "c")))) == "PYTHON"
    assert client_language(Context((("x-mq-language", "HTTP"),))) not in MULTI_ADDRESS_CLIENTS  # the Node.js client
    assert client_language(Context(())) == "" and client_language(None) == ""
