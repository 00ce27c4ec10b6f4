"""A broker keeps each topic's attributes (message.type) on every path a topic config travels: the
control plane's push, config/topics.json (an older file without attributes is NORMAL topics), the
registration wrapper the nameserver reads, and the records and snapshots slaves replay."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict

import pytest

from brokers.config import BrokerConfig
from brokers.control.nameserver import NameserverLink
from brokers.meta import ConsumerMeta, MetaRejected
from brokers.topics import TopicConfig, TopicConfigManager
from mqrules.topic_attributes import TopicMessageType

pytestmark = pytest.mark.unit

DELAY = {"message.type": "DELAY"}


def meta_at(root) -> ConsumerMeta:
    return ConsumerMeta(root / "consumerOffset.json", TopicConfigManager(root / "topics.json"))


def test_a_topic_without_attributes_is_normal_and_one_with_them_has_their_type():
    assert TopicConfig("T").message_type is TopicMessageType.NORMAL
    assert TopicConfig("T", attributes=DELAY).message_type is TopicMessageType.DELAY
    assert TopicConfig("T", attributes=DELAY) != TopicConfig("T")  # a type change is a change


def test_topics_json_keeps_attributes_and_an_older_file_loads_as_normal_topics(tmp_path):
    path = tmp_path / "topics.json"
    old = {
        "topicConfigTable": {"Old": {"topicName": "Old", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0}},
        "dataVersion": {"stateVersion": 0, "counter": 3, "timestamp": 1},
    }
    path.write_text(json.dumps(old))
    topics = TopicConfigManager(path)
    assert topics.topics["Old"] == TopicConfig("Old", 2, 2) and topics.topics["Old"].message_type is TopicMessageType.NORMAL

    assert topics.update(TopicConfig("Delayed", 4, 4, attributes=DELAY))
    assert json.loads(path.read_text())["topicConfigTable"]["Delayed"]["attributes"] == DELAY
    again = TopicConfigManager(path)
    assert again.topics == topics.topics and again.topics["Delayed"].message_type is TopicMessageType.DELAY
    # what the nameserver reads at registration carries them too
    assert again.wrapper()["topicConfigTable"]["Delayed"]["attributes"] == DELAY


def test_topics_json_with_a_bad_type_stops_the_broker(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps({"topicConfigTable": {"T": {"topicName": "T", "attributes": {"message.type": "SOON"}}}}))
    with pytest.raises(ValueError):
        TopicConfigManager(path)


def test_a_slave_replaying_the_masters_topic_record_and_snapshot_gets_the_type(tmp_path):
    master, slave, late = meta_at(tmp_path / "m"), meta_at(tmp_path / "s"), meta_at(tmp_path / "l")
    tc = TopicConfig("Delayed", 4, 4, attributes=DELAY)
    master.topics.update(tc)
    assert slave.apply(master.record("topic", topicConfig=asdict(tc)))  # as brokers/broker.py records a change
    assert slave.topics.topics["Delayed"].message_type is TopicMessageType.DELAY
    assert late.apply(master.snapshot())
    assert late.topics.topics["Delayed"] == tc


def test_a_topic_record_of_an_older_broker_is_a_normal_topic(tmp_path):
    master, slave = meta_at(tmp_path / "m"), meta_at(tmp_path / "s")
    record = master.record("topic", topicConfig={"topicName": "T", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
    assert slave.apply(record) and slave.topics.topics["T"].attributes == {}


def test_a_topic_record_with_a_bad_type_is_refused_and_changes_nothing(tmp_path):
    master, slave = meta_at(tmp_path / "m"), meta_at(tmp_path / "s")
    bad = {**asdict(TopicConfig("T")), "attributes": {"message.type": "delay"}}
    with pytest.raises(MetaRejected, match="attributes"):
        slave.apply(master.record("topic", topicConfig=bad))
    assert "T" not in slave.topics.topics


def test_the_control_planes_push_stores_the_topics_attributes(tmp_path):
    topics = TopicConfigManager(tmp_path / "topics.json")
    link = NameserverLink(BrokerConfig(), topics)
    registered = []

    async def register():
        registered.append(True)

    link.register = register  # type: ignore[method-assign]
    payload = {"topicName": "Delayed", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0, "brokerName": "b"}
    asyncio.run(link._handle_push("update_topic", {**payload, "attributes": DELAY}))
    assert topics.topics["Delayed"] == TopicConfig("Delayed", 4, 4, attributes=DELAY) and registered == [True]
    asyncio.run(link._handle_push("update_topic", {**payload, "attributes": {"message.type": "MIXED"}}))
    assert topics.topics["Delayed"].message_type is TopicMessageType.MIXED and len(registered) == 2
    # a push with a type this broker does not know is logged and dropped
    asyncio.run(link._handle_push("update_topic", {**payload, "attributes": {"message.type": "SOON"}}))
    assert topics.topics["Delayed"].message_type is TopicMessageType.MIXED and len(registered) == 2
