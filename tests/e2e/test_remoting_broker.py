"""The broker's remoting edge (brokers/remoting/, issue 36) on a three-replica group in controller mode,
spoken to with frames built from the field tables transcribed from apache/rocketmq's header classes
(mqrules/remoting/headers.py, testkit/remoting.py): sends (10, 310, 320), pulls with long polling
(11), offsets (14, 15), queue queries (29-33), heartbeats and the consumer list (34, 38), send-back
to the retry topic and the DLQ (36), transactions (37 and the broker's 39), queue locks (41, 42) and
what a slave answers. The real 4.x clients' tests are tests/e2e/test_remoting_clients.py."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import SerializeType
from mqrules.remoting.headers import (
    CONSUMER_SEND_MSG_BACK_REQUEST,
    END_TRANSACTION_REQUEST,
    GET_CONSUMER_LIST_BY_GROUP_REQUEST,
    GET_MAX_OFFSET_REQUEST,
    GET_MIN_OFFSET_REQUEST,
    PULL_MESSAGE_REQUEST,
    QUERY_CONSUMER_OFFSET_REQUEST,
    SEARCH_OFFSET_REQUEST,
    SEND_MESSAGE_REQUEST,
    SEND_MESSAGE_REQUEST_V2,
    UPDATE_CONSUMER_OFFSET_REQUEST,
    VIEW_MESSAGE_REQUEST,
)
from mqrules.remoting.message_id import decode_offset_message_id
from testkit.fuzz import remoting_frames
from testkit.remoting import RemotingClient, decode_records, heartbeat_body, properties
from tests.e2e.test_broker_membership import wait_for
from tests.e2e.test_failover import three_replicas

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

TOPIC = "Replicated"  # the test kit's topic: 4 queues
FLAG_COMMIT, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4


def send(client: RemotingClient, queue_id: int, n: int, tags: str = "a", code: int = RequestCode.SEND_MESSAGE_V2, **props):
    header = {
        "producerGroup": "pg",
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000),
        "flag": 0,
        "properties": properties(UNIQ_KEY=f"U{queue_id:02d}{n:030d}", TAGS=tags, KEYS=f"k{n}", **props),
    }
    table = SEND_MESSAGE_REQUEST if code == RequestCode.SEND_MESSAGE else SEND_MESSAGE_REQUEST_V2
    return client.request(code, header, table, body=f"body-{queue_id}-{n}".encode())


def pull(client, queue_id, offset, *, topic=TOPIC, group="cg", flags=FLAG_SUBSCRIPTION, expression="*", suspend_ms=0, commit=0):
    header = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": flags | (FLAG_SUSPEND if suspend_ms else 0),
        "commitOffset": commit,
        "suspendTimeoutMillis": suspend_ms,
        "subscription": expression,
        "subVersion": 1,
        "expressionType": "TAG",
    }
    return client.request(RequestCode.PULL_MESSAGE, header, PULL_MESSAGE_REQUEST, timeout=30)


def queue_header(queue_id: int, **more) -> dict:
    return {"topic": TOPIC, "queueId": queue_id, **more}


def test_sends_pulls_offsets_and_queries_over_remoting(tmp_path):
    with three_replicas(tmp_path, "rm-a") as (replicas, master, _, _):
        slave = next(r for r in replicas if r is not master)
        addr = f"127.0.0.1:{master.listen_port}"
        with RemotingClient(addr) as c, RemotingClient(addr, serialize_type=SerializeType.ROCKETMQ) as binary:
            beat = c.request(RequestCode.HEART_BEAT, body=heartbeat_body("client-1", ["pg"], {"cg": {TOPIC: "*"}}))
            assert beat.code == ResponseCode.SUCCESS, beat.remark

            # sends: V1 and V2 headers, both serializations; the client's queue; offset message ids
            answers = [send(c if n % 2 else binary, 1, n, tags="a" if n % 2 else "b") for n in range(20)]
            answers.append(send(c, 1, 20, code=RequestCode.SEND_MESSAGE))
            assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 21, [a.remark for a in answers]
            assert {a.serialize_type for a in answers[:2]} == {SerializeType.JSON, SerializeType.ROCKETMQ}
            offsets = [int(a.ext_fields["queueOffset"]) for a in answers]
            assert offsets == list(range(21)) and {a.ext_fields["queueId"] for a in answers} == {"1"}
            ids = [decode_offset_message_id(a.ext_fields["msgId"]) for a in answers]
            assert {(i.host, i.port) for i in ids} == {("127.0.0.1", master.listen_port)}

            # pulls: tags filtered by the consume queue's hashes, the next offset past what was read
            got = pull(c, 1, 0, expression="a")
            assert got.code == ResponseCode.SUCCESS, got.remark
            records = decode_records(got.body)
            assert [r["queueOffset"] for r in records] == [n for n in range(20) if n % 2] + [20]
            assert records[0]["body"] == b"body-1-1" and records[0]["properties"]["UNIQ_KEY"] == f"U01{1:030d}"
            assert got.ext_fields["nextBeginOffset"] == "21" and got.ext_fields["maxOffset"] == "21"
            assert pull(c, 1, 21).code == ResponseCode.PULL_NOT_FOUND
            moved = pull(c, 1, 99)
            assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "21")
            assert pull(c, 1, 0, expression="zzz").code == ResponseCode.PULL_RETRY_IMMEDIATELY

            # long polling: a pull held at the end answers once a message arrives
            later = threading.Timer(0.5, lambda: send(RemotingClient(addr), 1, 21))
            later.start()
            started = time.monotonic()
            held = pull(c, 1, 21, suspend_ms=15000)
            assert held.code == ResponseCode.SUCCESS and time.monotonic() - started < 10
            assert [r["queueOffset"] for r in decode_records(held.body)] == [21]
            later.join()

            # offsets: never committed is 0 (this store keeps every message); a commit, on the slaves too
            query = {"consumerGroup": "cg", "topic": TOPIC, "queueId": 1}
            assert c.request(RequestCode.QUERY_CONSUMER_OFFSET, query, QUERY_CONSUMER_OFFSET_REQUEST).ext_fields["offset"] == "0"
            update = c.request(RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": 17}, UPDATE_CONSUMER_OFFSET_REQUEST)
            assert update.code == ResponseCode.SUCCESS, update.remark
            assert c.request(RequestCode.QUERY_CONSUMER_OFFSET, query, QUERY_CONSUMER_OFFSET_REQUEST).ext_fields["offset"] == "17"
            assert pull(c, 1, 22, flags=FLAG_SUBSCRIPTION | FLAG_COMMIT, commit=19).code == ResponseCode.PULL_NOT_FOUND
            with RemotingClient(f"127.0.0.1:{slave.listen_port}") as s:

                def on_slave() -> str:
                    return s.request(RequestCode.QUERY_CONSUMER_OFFSET, query, QUERY_CONSUMER_OFFSET_REQUEST).ext_fields.get(
                        "offset"
                    )

                wait_for(lambda: on_slave() == "19", 30, "the commit on the slave")
                refused = s.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": 3}, UPDATE_CONSUMER_OFFSET_REQUEST
                )
                assert refused.code == ResponseCode.SYSTEM_ERROR and "slave" in refused.remark
                slave_send = send(s, 0, 0)
                assert slave_send.code == ResponseCode.SERVICE_NOT_AVAILABLE, slave_send.remark
                assert decode_records(pull(s, 1, 0).body)[0]["body"] == b"body-1-0"  # a slave serves pulls

            # queue queries
            assert c.request(RequestCode.GET_MAX_OFFSET, queue_header(1), GET_MAX_OFFSET_REQUEST).ext_fields["offset"] == "22"
            assert c.request(RequestCode.GET_MIN_OFFSET, queue_header(1), GET_MIN_OFFSET_REQUEST).ext_fields["offset"] == "0"
            search = c.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, queue_header(1, timestamp=0), SEARCH_OFFSET_REQUEST)
            assert search.ext_fields["offset"] == "0"
            earliest = c.request(RequestCode.GET_EARLIEST_MSG_STORETIME, queue_header(1))
            assert int(earliest.ext_fields["timestamp"]) > 1_600_000_000_000
            view = c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": ids[3].commit_log_offset}, VIEW_MESSAGE_REQUEST)
            assert decode_records(view.body)[0]["body"] == b"body-1-3"
            assert (
                c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": ids[3].commit_log_offset + 1}).code
                == ResponseCode.SYSTEM_ERROR
            )
            listed = c.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}, GET_CONSUMER_LIST_BY_GROUP_REQUEST
            )
            assert listed.code == ResponseCode.SUCCESS and b"client-1" in listed.body

            # what is refused: an unknown topic, a queue beyond the topic's, a missing field, an unknown code
            assert pull(c, 0, 0, topic="NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST
            bad_queue = send(c, 9, 0)
            assert bad_queue.code == ResponseCode.MESSAGE_ILLEGAL and "write queues" in bad_queue.remark
            missing = c.request(RequestCode.PULL_MESSAGE, {"topic": TOPIC})
            assert missing.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in missing.remark
            assert c.request(4242).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert pull(c, 1, 0).code == ResponseCode.SUCCESS  # the connection serves on

        # fuzzed and truncated frames at every code it serves: no crash, nothing stored, others served
        ends = [
            int(RemotingClient(addr).request(RequestCode.GET_MAX_OFFSET, queue_header(q)).ext_fields["offset"]) for q in range(4)
        ]
        fuzz(addr)
        with RemotingClient(addr) as c:
            assert [int(c.request(RequestCode.GET_MAX_OFFSET, queue_header(q)).ext_fields["offset"]) for q in range(4)] == ends
            assert send(c, 0, 99).code == ResponseCode.SUCCESS


SERVED = [10, 11, 12, 14, 15, 21, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 41, 42, 201, 202, 203, 208, 310, 320, 906, 9999]
_FRAMES = remoting_frames(
    SERVED,
    ["topic", "b", "queueId", "e", "consumerGroup", "offset", "commitOffset", "sysFlag", "properties", "x"],
    st.one_of(st.text(max_size=12), st.sampled_from(["NoSuchTopic", "-1", "0", "99999999999999999999", "true"])),
    st.one_of(st.binary(max_size=48), st.sampled_from([b"{}", b"[]", b'{"clientID": 1}', b'{"mqSet": 5}'])),
    6,
)


def fuzz(addr: str, seconds: float = 8.0) -> None:
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + seconds

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_FRAMES, min_size=1, max_size=3))
    def one_connection(frames):
        if time.monotonic() > deadline:
            return
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"".join(frames))
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            try:
                while sock.recv(65536):  # replies, then the broker's close
                    pass
            except TimeoutError:
                pass  # a held pull the fuzz never ends: the broker answers it when it times out

    one_connection()


def test_send_back_goes_to_the_retry_topic_after_its_delay_and_to_the_dlq(tmp_path):
    with three_replicas(tmp_path, "rm-b", messageDelayLevel="1s 2s") as (_, master, _, _):
        addr = f"127.0.0.1:{master.listen_port}"
        with RemotingClient(addr) as c:
            assert c.request(RequestCode.HEART_BEAT, body=heartbeat_body("client-1", [], {"cg": {TOPIC: "*"}})).code == 0
            first, second = send(c, 2, 0), send(c, 2, 1)
            offsets = [decode_offset_message_id(a.ext_fields["msgId"]).commit_log_offset for a in (first, second)]
            back = {"group": "cg", "delayLevel": 1, "originMsgId": first.ext_fields["msgId"], "maxReconsumeTimes": 16}
            answer = c.request(RequestCode.CONSUMER_SEND_MSG_BACK, {**back, "offset": offsets[0]}, CONSUMER_SEND_MSG_BACK_REQUEST)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            retried = pull(c, 0, 0, topic="%RETRY%cg", suspend_ms=15000)
            assert retried.code == ResponseCode.SUCCESS, retried.remark
            [record] = decode_records(retried.body)
            assert record["body"] == b"body-2-0" and record["reconsumeTimes"] == 1
            assert record["properties"]["RETRY_TOPIC"] == TOPIC

            dead = {**back, "offset": offsets[1], "delayLevel": -1}
            assert (
                c.request(RequestCode.CONSUMER_SEND_MSG_BACK, dead, CONSUMER_SEND_MSG_BACK_REQUEST).code == ResponseCode.SUCCESS
            )
            [dlq] = decode_records(pull(c, 0, 0, topic="%DLQ%cg", suspend_ms=15000).body)  # entries publish just after the ack
            assert dlq["body"] == b"body-2-1"


def test_a_transaction_commits_by_end_transaction_and_the_broker_asks_a_producer_that_stays_silent(tmp_path):
    # a 4.x application's topics carry no type: its transactional messages go to a NORMAL topic
    settings = {"transactionTimeOut": 1000, "transactionCheckInterval": 500, "enableTopicMessageTypeCheck": "false"}
    with three_replicas(tmp_path, "rm-c", **settings) as (_, master, _, _):
        addr = f"127.0.0.1:{master.listen_port}"
        with RemotingClient(addr) as c:
            assert c.request(RequestCode.HEART_BEAT, body=heartbeat_body("txn-producer", ["tpg"])).code == 0
            committed = send(c, 3, 0, TRAN_MSG="true", PGROUP="tpg")
            silent = send(c, 3, 1, TRAN_MSG="true", PGROUP="tpg")
            assert committed.code == silent.code == ResponseCode.SUCCESS
            assert committed.ext_fields["transactionId"] == f"U03{0:030d}"
            assert pull(c, 3, 0).code == ResponseCode.PULL_NOT_FOUND  # half messages are not delivered
            end = {
                "producerGroup": "tpg",
                "tranStateTableOffset": 0,
                "commitLogOffset": decode_offset_message_id(committed.ext_fields["msgId"]).commit_log_offset,
                "commitOrRollback": 8,
                "fromTransactionCheck": False,
                "msgId": committed.ext_fields["msgId"],
                "transactionId": committed.ext_fields["transactionId"],
            }
            assert c.request(RequestCode.END_TRANSACTION, end, END_TRANSACTION_REQUEST).code == ResponseCode.SUCCESS
            got = pull(c, 3, 0, suspend_ms=10000)
            assert [r["body"] for r in decode_records(got.body)] == [b"body-3-0"]

            # the other one is checked: CHECK_TRANSACTION_STATE (39) comes to this connection
            def asked() -> bool:
                c.sock.settimeout(0.5)
                try:
                    c.answer(-1)
                except (TimeoutError, OSError):
                    pass
                return any(p.code == RequestCode.CHECK_TRANSACTION_STATE for p in c.pushed)

            wait_for(asked, 30, "a transaction check")
            check = next(p for p in c.pushed if p.code == RequestCode.CHECK_TRANSACTION_STATE)
            assert check.ext_fields["transactionId"] == f"U03{1:030d}"
            [shown] = decode_records(check.body)
            assert (shown["topic"], shown["body"]) == (TOPIC, b"body-3-1")
            c.sock.settimeout(10)
            rollback = {
                **end,
                "transactionId": check.ext_fields["transactionId"],
                "commitOrRollback": 12,
                "fromTransactionCheck": True,
            }
            rollback["commitLogOffset"] = int(check.ext_fields["commitLogOffset"])
            assert c.request(RequestCode.END_TRANSACTION, rollback, END_TRANSACTION_REQUEST).code == ResponseCode.SUCCESS
            assert pull(c, 3, 1, suspend_ms=1000).code == ResponseCode.PULL_NOT_FOUND  # rolled back: never delivered


def test_queue_locks_take_the_lock_quorum_in_strict_mode(tmp_path):
    with three_replicas(tmp_path, "rm-d", lockInStrictMode="true", totalReplicas=3) as (replicas, master, _, _):
        mqs = [{"topic": TOPIC, "brokerName": "group-a", "queueId": q} for q in range(4)]

        def lock(addr: str, client: str, only_here: bool = False, code: int = RequestCode.LOCK_BATCH_MQ) -> list[int]:
            body = {"consumerGroup": "og", "clientId": client, "onlyThisBroker": only_here, "mqSet": mqs}
            with RemotingClient(addr) as c:
                answer = c.request(code, body=json.dumps(body).encode())
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            return sorted(m["queueId"] for m in json.loads(answer.body)["lockOKMQSet"]) if answer.body else []

        at = {r: f"127.0.0.1:{r.listen_port}" for r in replicas}
        slaves = [r for r in replicas if r is not master]
        assert lock(at[master], "c1") == [0, 1, 2, 3]
        for s in slaves:  # taken on the other replicas too
            assert lock(at[s], "c2", only_here=True) == []
        assert lock(at[master], "c2") == []
        # a minority holding another client's lock does not stop the quorum: c1 renews everywhere
        lock(at[slaves[0]], "c1", only_here=True, code=RequestCode.UNLOCK_BATCH_MQ)
        assert lock(at[slaves[0]], "c3", only_here=True) == [0, 1, 2, 3]
        assert lock(at[master], "c1") == [0, 1, 2, 3]
        # an unlock asked of the master is passed on: c2 then takes the quorum
        lock(at[master], "c1", code=RequestCode.UNLOCK_BATCH_MQ)
        assert lock(at[master], "c2") == [0, 1, 2, 3]
