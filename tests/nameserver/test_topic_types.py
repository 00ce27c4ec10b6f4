"""Topic message types over the nameserver REST API (real Postgres and Redis): an operator sets a
topic's ``message.type`` through ``attributes`` (plain or RocketMQ's ``+`` key) when creating or
updating it, per broker set; a bad type or an unknown attribute is a 400 with field errors and
changes nothing; the type is changeable, as in RocketMQ; brokers register theirs; the topic list and
the route show it; the database refuses a type it does not know."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from nameserver.models import BrokerGroup, TopicQueue

from .helpers import NS, register_body
from .test_api import err, ok

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

M, S1 = "127.0.0.1:10911", "127.0.0.1:10921"
DELAY = {"message.type": "DELAY"}
TYPE_ERROR = ["must be one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"]


@pytest.fixture
def two_sets(api):
    ok(api.post(f"{NS}/brokers/register", register_body(0, M), format="json"))
    ok(api.post(f"{NS}/brokers/register", register_body(0, S1, name="b2"), format="json"))
    return api


def topic(api, **body):
    return api.post(f"{NS}/topics", {"topicName": "Delayed", "clusterName": "c1", **body}, format="json")


def stored() -> dict[str, dict]:
    return {q.group.broker_name: q.attributes for q in TopicQueue.objects.filter(topic="Delayed").select_related("group")}


def listed(api) -> dict[str, dict]:
    return {q["brokerName"]: q["attributes"] for q in ok(api.get(f"{NS}/topics"))["topicList"]["Delayed"]}


def test_a_topic_created_with_a_type_has_it_in_the_store_the_list_and_the_route(two_sets):
    ok(topic(two_sets, attributes=DELAY))
    assert stored() == listed(two_sets) == {"b1": DELAY, "b2": DELAY}
    route = ok(two_sets.get(f"{NS}/routes/Delayed"))
    assert [q["attributes"] for q in route["queueDatas"]] == [DELAY, DELAY]


def test_a_topic_created_without_a_type_has_no_attribute_and_is_normal(two_sets):
    ok(topic(two_sets))
    assert listed(two_sets) == {"b1": {}, "b2": {}}


def test_rocketmqs_plus_key_sets_the_type_too(two_sets):
    ok(topic(two_sets, attributes={"+message.type": "FIFO"}))
    assert stored() == {"b1": {"message.type": "FIFO"}, "b2": {"message.type": "FIFO"}}


@pytest.mark.parametrize(
    "attributes, fields",
    [
        pytest.param({"message.type": "SOON"}, {"message.type": TYPE_ERROR}, id="unknown-type"),
        pytest.param({"message.type": "UNSPECIFIED"}, {"message.type": TYPE_ERROR}, id="UNSPECIFIED"),
        pytest.param({"message.type": None}, {"message.type": TYPE_ERROR}, id="null-type"),
        pytest.param(
            {"message.type": "DELAY", "queue.type": "BatchCQ"},
            {"queue.type": ["unsupported attribute; supported: message.type"]},
            id="unknown-attribute",
        ),
        pytest.param(
            {"message.type": "DELAY", "+message.type": "FIFO"}, {"+message.type": ["message.type is given twice"]}, id="twice"
        ),
        pytest.param("DELAY", ["must be a JSON object"], id="not-an-object"),
    ],
)
def test_a_bad_type_or_attribute_is_400_with_field_errors_and_nothing_is_stored(two_sets, attributes, fields):
    body = err(topic(two_sets, attributes=attributes), 400, 29, "INVALID_PARAMETER")
    assert body["fields"] == {"attributes": fields}
    assert not TopicQueue.objects.filter(topic="Delayed").exists()
    # nor changed on an existing topic
    ok(topic(two_sets, attributes=DELAY, writeQueueNums=4))
    err(topic(two_sets, attributes=attributes, writeQueueNums=2), 400, 29)
    assert stored() == {"b1": DELAY, "b2": DELAY}
    assert set(TopicQueue.objects.filter(topic="Delayed").values_list("write_queue_nums", flat=True)) == {4}


def test_an_update_naming_no_attribute_keeps_the_type_and_one_naming_it_changes_it(two_sets):
    ok(topic(two_sets, attributes=DELAY))
    ok(topic(two_sets, writeQueueNums=2))  # message.type is kept
    assert stored() == {"b1": DELAY, "b2": DELAY}
    # changeable (TopicAttributes: EnumAttribute("message.type", changeable=true, ...)), per broker set
    mixed = {"topicName": "Delayed", "brokerNames": ["b2"], "attributes": {"message.type": "MIXED"}}
    ok(two_sets.post(f"{NS}/topics", mixed, format="json"))
    assert listed(two_sets) == {"b1": DELAY, "b2": {"message.type": "MIXED"}}


def test_a_broker_registers_its_topics_attributes(two_sets):
    topics = {"Delayed": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "attributes": DELAY}}
    ok(two_sets.post(f"{NS}/brokers/register", register_body(0, M, counter=2, topics=topics), format="json"))
    assert stored() == {"b1": DELAY}
    bad = {"Delayed": {**topics["Delayed"], "attributes": {"message.type": "delay"}}}
    body = err(two_sets.post(f"{NS}/brokers/register", register_body(0, M, counter=3, topics=bad), format="json"), 400, 29)
    assert "topicConfigWrapper" in body["fields"]
    assert stored() == {"b1": DELAY}


def test_the_database_refuses_a_type_it_does_not_know(two_sets):
    group = BrokerGroup.objects.get(broker_name="b1")
    TopicQueue.objects.create(topic="Delayed", group=group, read_queue_nums=1, write_queue_nums=1, perm=6, attributes=DELAY)
    with pytest.raises(IntegrityError), transaction.atomic():
        TopicQueue.objects.filter(topic="Delayed").update(attributes={"message.type": "SOON"})
