"""Static topics over REST on real PostgreSQL (issue 18; nameserver/static_topics.py): creating one,
previewing and applying a migration (one epoch, one history row and one audit record per change),
drain and scale-out, concurrent migrations of one topic taking turns (the second refused with the new
epoch's code), and bad input answered with a clear code while nothing changes."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from controlplane.models import ApiToken, OperatorAction, TokenScope
from mqrules.codes import ResponseCode as C
from nameserver import static_topics
from nameserver.models import StaticTopic, StaticTopicChange
from tests.nameserver.helpers import NS, register_body
from tests.nameserver.test_member_group_frame import frame

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

B1, B2, B3 = "lq-b1", "lq-b2", "lq-b3"
ADDRS = {B1: "127.0.0.1:10911", B2: "127.0.0.1:10921", B3: "127.0.0.1:10931"}


@pytest.fixture
def sets(api):
    for name, addr in ADDRS.items():
        r = api.post(f"{NS}/brokers/register", register_body(0, addr, name=name, topics={}), format="json")
        assert r.status_code == 200, r.content
    return api


def create(api, topic="Orders", queues=8, brokers=(B1, B2)):
    return api.post(f"{NS}/static-topics", {"topicName": topic, "queueNums": queues, "brokerNames": list(brokers)}, format="json")


def migrate(api, body, topic="Orders"):
    return api.post(f"{NS}/static-topics/{topic}/migrations", body, format="json")


def owners(api, topic="Orders") -> dict[int, tuple[str, int]]:
    detail = api.get(f"{NS}/static-topics/{topic}").json()
    return {q["queueId"]: (q["segments"][-1]["brokerName"], q["segments"][-1]["queueId"]) for q in detail["queues"]}


def stored_epoch(topic="Orders") -> int:
    return StaticTopic.objects.get(topic=topic).epoch


def test_a_static_topic_is_created_spread_over_its_broker_sets_and_recorded(sets):
    r = create(sets)
    assert r.status_code == 200, r.content
    mapping = r.json()["mapping"]
    assert mapping["epoch"] == 1 and len(mapping["queues"]) == 8
    assert owners(sets) == {i: ((B1, B2)[i % 2], i // 2) for i in range(8)}
    assert mapping["queues"][0]["segments"] == [
        {"brokerName": B1, "queueId": 0, "logicStart": 0, "physStart": 0, "physEnd": None, "expired": False, "state": "writable"}
    ]
    assert [(c.epoch, c.kind) for c in StaticTopicChange.objects.all()] == [(1, "create")]
    assert OperatorAction.objects.filter(action=f"POST {NS}/static-topics").count() == 1
    again = create(sets)
    assert again.status_code == 409 and again.json()["code"] == C.INVALID_PARAMETER


def test_a_preview_changes_nothing_and_the_migration_then_moves_only_the_mapping(sets):
    create(sets)
    moves = [{"queueId": i, "brokerName": B3} for i in (0, 1, 2, 3)]
    preview = migrate(sets, {"moves": moves, "preview": True, "epoch": 1})
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert (body["applied"], body["epochBefore"], body["epoch"]) == (False, 1, 2)
    assert [(m["queueId"], m["source"]["brokerName"], m["target"]) for m in body["moves"]] == [
        (i, (B1, B2)[i % 2], {"brokerName": B3, "queueId": i}) for i in range(4)
    ]
    assert body["oldSegmentsKeptHours"] == 72
    assert stored_epoch() == 1 and StaticTopicChange.objects.count() == 1  # nothing written

    applied = migrate(sets, {"moves": moves, "epoch": 1})
    assert applied.status_code == 200 and applied.json()["applied"] is True
    assert stored_epoch() == 2
    assert {i: o for i, o in owners(sets).items() if i < 4} == {i: (B3, i) for i in range(4)}
    detail = sets.get(f"{NS}/static-topics/Orders").json()
    q0 = detail["queues"][0]["segments"]
    assert [s["state"] for s in q0] == ["sealing", "writable"] and q0[1]["logicStart"] is None
    assert [(h["epoch"], h["kind"]) for h in detail["history"]] == [(1, "create"), (2, "move")]
    assert detail["history"][1]["params"]["moves"] == {str(i): B3 for i in range(4)}
    assert OperatorAction.objects.filter(action=f"POST {NS}/static-topics/Orders/migrations").count() == 2


def test_drain_takes_every_queue_off_a_broker_set_and_scale_out_gives_a_new_one_its_share(sets):
    create(sets)
    r = migrate(sets, {"scaleOut": B3})
    assert r.status_code == 200, r.content
    assert sorted(m["queueId"] for m in r.json()["moves"]) == [6, 7]  # 8 // 3 = 2, one from each
    # queues 6, 7 are still moving (undecided): draining them is refused, the rest may go
    refused = migrate(sets, {"drain": {"brokerName": B3}})
    assert refused.status_code == 409 and refused.json()["code"] == C.LOGIC_QUEUE_MIGRATING
    r = migrate(sets, {"drain": {"brokerName": B1}})  # to the others writing the topic (B2, B3)
    assert r.status_code == 200, r.content
    assert B1 not in {b for b, _ in owners(sets).values()}
    assert stored_epoch() == 3


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"moves": [{"queueId": 8, "brokerName": B3}]}, 400, C.INVALID_PARAMETER),  # out of range
        ({"moves": [{"queueId": 0, "brokerName": B1}]}, 400, C.INVALID_PARAMETER),  # already there
        ({"moves": [{"queueId": 0, "brokerName": "no-such-set"}]}, 404, C.BROKER_NOT_EXIST),
        ({"moves": [{"queueId": 0, "brokerName": B3}], "epoch": 7}, 409, C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH),
        ({"moves": [{"queueId": 0, "brokerName": B3}], "scaleOut": B3}, 400, C.INVALID_PARAMETER),
        ({"moves": [{"queueId": 0, "brokerName": B3}, {"queueId": 0, "brokerName": B2}]}, 400, C.INVALID_PARAMETER),
        ({"moves": [{"queueId": -1, "brokerName": B3}]}, 400, C.INVALID_PARAMETER),
        ({"drain": {"brokerName": B1, "targets": [B1]}}, 400, C.INVALID_PARAMETER),  # into itself
        ({}, 400, C.INVALID_PARAMETER),
    ],
)
def test_a_bad_migration_is_refused_with_its_code_and_changes_nothing(sets, body, status, code):
    create(sets)
    r = migrate(sets, body)
    assert r.status_code == status, r.content
    assert r.json()["code"] == code
    assert stored_epoch() == 1 and StaticTopicChange.objects.count() == 1


def test_a_migration_to_an_isolated_set_or_of_an_unknown_topic_is_refused(sets):
    create(sets)
    r = sets.post("/api/v1/operations/brokers/isolate", {"brokerName": B3, "brokerId": 0}, format="json")
    assert r.status_code == 200, r.content
    r = migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]})
    assert r.status_code == 409 and r.json()["code"] == C.NO_PERMISSION
    r = migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]}, topic="NoSuchTopic")
    assert r.status_code == 404 and r.json()["code"] == C.TOPIC_NOT_EXIST
    assert stored_epoch() == 1
    bad = create(sets, topic="Other", brokers=(B1, "no-such-set"))
    assert bad.status_code == 404 and bad.json()["code"] == C.BROKER_NOT_EXIST
    assert not StaticTopic.objects.filter(topic="Other").exists()


def test_concurrent_migrations_of_one_topic_take_turns_and_the_second_sees_the_new_epoch(sets):
    create(sets)
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def one(moves: dict[int, str]) -> None:
        try:
            barrier.wait()
            outcomes.append(static_topics.migrate("Orders", moves=moves, expected_epoch=1, actor="t"))
        except static_topics.StaticTopicRefused as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(m,)) for m in ({0: B3}, {1: B3})]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(str(o) for o in outcomes if isinstance(o, C)) == [str(C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH)]
    assert len([o for o in outcomes if isinstance(o, static_topics.Migration)]) == 1
    assert stored_epoch() == 2
    assert [c.epoch for c in StaticTopicChange.objects.order_by("epoch")] == [1, 2]


def test_a_viewer_cannot_migrate(sets, read_token):
    create(sets)
    sets.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    r = migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]})
    assert r.status_code == 403
    assert stored_epoch() == 1


def test_a_token_bound_to_another_cluster_neither_sees_nor_moves_the_topic(sets):
    create(sets)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('lq-other', TokenScope.ADMIN, 'c2')[1]}")
    assert other.get(f"{NS}/static-topics").json() == {"staticTopics": []}
    assert other.get(f"{NS}/static-topics/Orders").status_code == 403
    r = migrate(other, {"drain": {"brokerName": B1}})
    assert r.status_code == 403 and r.json()["code"] == C.NO_PERMISSION
    assert stored_epoch() == 1
    own = APIClient()
    own.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue('lq-own', TokenScope.ADMIN, 'c1')[1]}")
    assert [m["topic"] for m in own.get(f"{NS}/static-topics").json()["staticTopics"]] == ["Orders"]


# --- what brokers see: topic configs, routes, the seal report ----------------------------------------


def test_each_broker_set_gets_the_topic_with_its_physical_queues_and_the_route_carries_the_mapping(sets):
    assert create(sets).status_code == 200
    route = sets.get(f"{NS}/routes/Orders").json()
    assert {qd["brokerName"]: qd["writeQueueNums"] for qd in route["queueDatas"]} == {B1: 4, B2: 4}
    assert route["logicQueueMapping"]["epoch"] == 1 and len(route["logicQueueMapping"]["queues"]) == 8
    assert migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]}).status_code == 200
    route = sets.get(f"{NS}/routes/Orders").json()  # the route follows the change at once
    assert {qd["brokerName"]: qd["writeQueueNums"] for qd in route["queueDatas"]} == {B1: 4, B2: 4, B3: 1}
    assert route["logicQueueMapping"]["epoch"] == 2
    assert [m["epoch"] for m in static_topics.mappings_for(B3)] == [2] and static_topics.mappings_for("elsewhere") == []


def test_the_sealed_end_decides_the_new_segment_once_and_a_repeat_or_stale_report_changes_nothing(sets):
    create(sets)
    migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]})
    assert static_topics.seal("Orders", 0, B2, 0, 17).epoch == 2  # not the segment sealing: nothing
    m = static_topics.seal("Orders", 0, B1, 0, 120)
    assert m.epoch == 3
    old, new = m.queues[0].segments
    assert (old.phys_end, old.logic_end, new.broker_name, new.logic_start) == (120, 120, B3, 120)
    assert static_topics.seal("Orders", 0, B1, 0, 121).epoch == 3  # repeated after the decision: nothing
    change = StaticTopicChange.objects.get(topic_id="Orders", epoch=3)
    assert (change.kind, change.actor, change.params["sealedEnd"]) == ("decide", f"broker:{B1}", 120)
    with pytest.raises(static_topics.StaticTopicRefused) as refused:
        static_topics.seal("Orders", 8, B1, 0, 1)
    assert refused.value.code == C.INVALID_PARAMETER and stored_epoch() == 3
    with pytest.raises(static_topics.StaticTopicRefused) as unknown:
        static_topics.seal("Nope", 0, B1, 0, 1)
    assert unknown.value.code == C.TOPIC_NOT_EXIST


def test_the_seal_frame_decides_and_a_malformed_one_is_answered_with_field_errors(sets, broker_token):
    create(sets)
    migrate(sets, {"moves": [{"queueId": 1, "brokerName": B3}]})
    sealed = {"topic": "Orders", "queueId": 1, "brokerName": B2, "physicalQueueId": 0, "sealedEnd": 55}
    bad = {**sealed, "queueId": "one", "sealedEnd": -1}
    ok, refused, unknown = frame(
        broker_token,
        ("static_topic_sealed", sealed),
        ("static_topic_sealed", bad),
        ("static_topic_sealed", {**sealed, "topic": "Nope"}),
    )
    assert ok["type"] == "static_topic_sealed_result" and ok["payload"] == {"epoch": 3}
    assert refused["type"] == "error" and refused["payload"]["code"] == C.INVALID_PARAMETER
    assert set(refused["payload"]["fields"]) == {"queueId", "sealedEnd"}
    assert unknown["type"] == "error" and unknown["payload"]["code"] == C.TOPIC_NOT_EXIST
    assert static_topics.mapping_of("Orders").queues[1].writable.logic_start == 55 and stored_epoch() == 3


def status_report(broker_name: str, meta_mode: str, queues: list) -> dict:
    """A broker_status frame's payload (docs/websocket.md) with the given queue rows."""
    return {
        "clusterName": "DefaultCluster",
        "brokerName": broker_name,
        "brokerId": 0,
        "brokerAddr": ADDRS[broker_name],
        "status": {"metaMode": meta_mode},
        "config": {},
        "dynamicKeys": [],
        "queues": queues,
        "offsets": [],
    }


def test_a_read_only_segment_expires_once_its_data_is_deleted_and_a_move_back_reuses_its_queue(sets, broker_token):
    """Seed 003 tables 3 and 4: queue 0 moves B1 -> B3 (sealed at 120); B1's serving master reports
    the queue's min offset; once retention deleted everything below 120 the segment is Expired (a
    follower's report, or a min below the end, changes nothing); moving the queue back to B1 reuses
    B1's physical queue 0 instead of adding a queue."""
    create(sets, queues=2)
    migrate(sets, {"moves": [{"queueId": 0, "brokerName": B3}]})
    static_topics.seal("Orders", 0, B1, 0, 120)
    follower, early, deleted = frame(
        broker_token,
        ("broker_status", status_report(B1, "FOLLOWER", [["Orders", 0, 120, 120]])),
        ("broker_status", status_report(B1, "WRITER", [["Orders", 0, 100, 120, 1_700_000_000_000]])),
        ("broker_status", status_report(B1, "WRITER", [["Orders", 0, 120, 120, None]])),
    )
    assert follower["type"] == early["type"] == deleted["type"] == "broker_status_result"
    m = static_topics.mapping_of("Orders")
    old, new = m.queues[0].segments
    assert old.expired and (old.broker_name, old.queue_id) == (B1, 0) and m.epoch == 4
    change = StaticTopicChange.objects.get(topic_id="Orders", epoch=4)
    assert (change.kind, change.actor, change.params["minOffsets"]) == ("expire", f"broker:{B1}", {"0": 120})
    assert static_topics.expire_reported(B1, [["Orders", 0, 130, 130]]) == []  # already expired: nothing
    back = migrate(sets, {"moves": [{"queueId": 0, "brokerName": B1}]})
    assert back.status_code == 200, back.content
    segments = static_topics.mapping_of("Orders").queues[0].segments
    assert [(s.broker_name, s.queue_id) for s in segments] == [(B3, 0), (B1, 0)]  # the expired one reused


def test_more_logical_queues_are_previewed_then_placed_on_the_least_loaded_sets_and_never_fewer(sets):
    create(sets, queues=3, brokers=(B1, B2))  # B1: 0, 2; B2: 1
    path = f"{NS}/static-topics/Orders/queue-count"
    preview = sets.post(path, {"queueNums": 5, "preview": True}, format="json")
    assert preview.status_code == 200 and not preview.json()["applied"], preview.content
    assert len(preview.json()["after"]["queues"]) == 5 and stored_epoch() == 1
    grown = sets.post(path, {"queueNums": 5, "brokerNames": [B2, B3], "epoch": 1}, format="json")
    assert grown.status_code == 200, grown.content
    assert owners(sets) == {0: (B1, 0), 1: (B2, 0), 2: (B1, 1), 3: (B3, 0), 4: (B2, 1)}
    change = StaticTopicChange.objects.get(topic_id="Orders", epoch=2)
    assert (change.kind, change.params["queueNums"]) == ("resize", 5)
    assert OperatorAction.objects.filter(action=f"POST {path}").count() == 2  # the preview, then the change
    fewer = sets.post(path, {"queueNums": 4}, format="json")
    assert fewer.status_code == 409 and "never goes down" in fewer.json()["detail"] and stored_epoch() == 2
    stale = sets.post(path, {"queueNums": 6, "epoch": 1}, format="json")
    assert stale.status_code == 409 and stale.json()["code"] == C.LOGIC_QUEUE_MAPPING_FENCED_EPOCH
    bad = sets.post(path, {"queueNums": "many", "brokerNames": []}, format="json")
    assert bad.status_code == 400 and set(bad.json()["fields"]) == {"queueNums", "brokerNames"}
    assert sets.post(f"{NS}/static-topics/Nope/queue-count", {"queueNums": 2}, format="json").status_code == 404


def test_a_static_topic_is_deleted_after_a_preview_with_its_topic_on_every_set(sets):
    create(sets, queues=2, brokers=(B1, B2))
    preview = sets.delete(f"{NS}/static-topics/Orders?preview=true")
    assert preview.status_code == 200 and preview.json()["after"] is None and not preview.json()["applied"]
    assert StaticTopic.objects.filter(topic="Orders").exists()
    assert sets.delete(f"{NS}/static-topics/Orders?epoch=7").status_code == 409
    gone = sets.delete(f"{NS}/static-topics/Orders")
    assert gone.status_code == 200 and gone.json()["applied"] and gone.json()["before"]["epoch"] == 1
    assert not StaticTopic.objects.filter(topic="Orders").exists()
    assert sets.get(f"{NS}/routes/Orders").status_code == 404  # no queue data left on any set
    assert OperatorAction.objects.filter(action=f"DELETE {NS}/static-topics/Orders", result="ok").count() == 2
    assert sets.delete(f"{NS}/static-topics/Orders").status_code == 404
    assert sets.delete(f"{NS}/static-topics/Orders?preview=maybe").status_code == 400


def test_an_existing_topic_turns_static_with_its_queues_keeping_their_offsets(sets):
    topics = {"Plain": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}
    for name in (B2, B1):
        r = sets.post(f"{NS}/brokers/register", register_body(0, ADDRS[name], name=name, topics=topics, counter=2), format="json")
        assert r.status_code == 200, r.content
    path = f"{NS}/topics/Plain/make-static"
    preview = sets.post(path, {"preview": True}, format="json")
    assert preview.status_code == 200 and not StaticTopic.objects.filter(topic="Plain").exists(), preview.content
    made = sets.post(path, {}, format="json")
    assert made.status_code == 200 and made.json()["before"] is None, made.content
    assert owners(sets, "Plain") == {0: (B1, 0), 1: (B1, 1), 2: (B2, 0), 3: (B2, 1)}
    segment = static_topics.mapping_of("Plain").queues[3].segments[0]
    assert (segment.logic_start, segment.phys_start) == (0, 0)  # logical offset = physical offset
    assert [(c.epoch, c.kind) for c in StaticTopicChange.objects.filter(topic_id="Plain")] == [(1, "adopt")]
    again = sets.post(path, {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == C.INVALID_PARAMETER
    assert sets.post(f"{NS}/topics/Nowhere/make-static", {}, format="json").status_code == 404


def test_a_topic_whose_expired_segments_name_a_set_that_left_still_changes(sets, broker_token):
    """A drained set whose segments expired is unregistered (its brokers stopped): the topic still
    grows and moves; topic configs go to the sets holding segments that have not expired only."""
    create(sets, queues=2, brokers=(B1, B2))
    assert migrate(sets, {"drain": {"brokerName": B1}}).status_code == 200
    static_topics.seal("Orders", 0, B1, 0, 120)
    frame(broker_token, ("broker_status", status_report(B1, "WRITER", [["Orders", 0, 120, 120]])))
    broker = APIClient()
    broker.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    gone = broker.post(
        f"{NS}/brokers/unregister", {"clusterName": "c1", "brokerAddr": ADDRS[B1], "brokerName": B1}, format="json"
    )
    assert gone.status_code == 200 and gone.json()["unregistered"], gone.content
    grown = sets.post(f"{NS}/static-topics/Orders/queue-count", {"queueNums": 3, "brokerNames": [B3]}, format="json")
    assert grown.status_code == 200, grown.content
    moved = migrate(sets, {"moves": [{"queueId": 1, "brokerName": B3}]})
    assert moved.status_code == 200, moved.content
    route = sets.get(f"{NS}/routes/Orders").json()
    assert {qd["brokerName"]: qd["writeQueueNums"] for qd in route["queueDatas"]} == {B2: 2, B3: 2}
    assert static_topics.mapping_of("Orders").queues[0].segments[0].expired  # kept: a move back reuses it
