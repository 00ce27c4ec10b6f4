"""Offset events in: REST and the broker websocket (real Channels + Redis), the Redis buffer, and the
flush into the Parquet event store partitioned by date (real Redis, real files)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from asgiref.sync import async_to_sync

from audits import event_store
from controlplane.models import ApiToken
from controlplane.redis import sync_client
from tests.nameserver.test_websocket import call, connected

from .helpers import batch, now_ms, wire

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
URL = "/api/v1/audits/offset-events"


def sample(ts: int | None = None, n: int = 3):
    ts = ts or now_ms()
    return batch(
        "broker-a",
        1,
        "SYNC_MASTER",
        2,
        [("g1", "t1", q, 10 * q + 5, "client_commit", ts, 100) for q in range(n)],
        data_version=(2, 7, ts),
    )


def stored_rows(uri: str) -> list[dict]:
    dataset = ds.dataset(uri, format="parquet", partitioning="hive")
    return sorted(dataset.to_table().to_pylist(), key=lambda r: (r["event_date"], r["queue_id"]))


def test_a_reported_batch_lands_in_the_event_store_partitioned_by_date(anon, broker_token, events_uri):
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    yesterday = now_ms() - 86_400_000
    sent = [sample(), sample(yesterday, n=1)]
    for b in sent:
        resp = anon.post(URL, wire(b), format="json")
        assert resp.status_code == 202 and resp.json() == {"accepted": len(b.events)}
    assert [b for _, b in event_store.pending_batches()] == sent
    assert not Path(events_uri).exists()  # nothing written before a flush

    report = event_store.flush()
    assert (report.batches, report.events, report.files) == (2, 4, 2)
    assert event_store.pending_batches() == []
    dates = sorted(p.name for p in Path(events_uri).iterdir())
    day = [datetime.fromtimestamp(t / 1000, tz=UTC).date().isoformat() for t in (yesterday, now_ms())]
    assert dates == [f"event_date={d}" for d in day]
    rows = stored_rows(events_uri)
    assert len(rows) == 4
    assert {
        k: rows[1][k]
        for k in (
            "cluster_name",
            "broker_name",
            "broker_id",
            "role",
            "master_epoch",
            "consumer_group",
            "topic",
            "queue_id",
            "offset",
            "queue_max_offset",
            "source",
            "dv_state_version",
            "dv_counter",
        )
    } == {
        "cluster_name": "c1",
        "broker_name": "broker-a",
        "broker_id": 1,
        "role": "SYNC_MASTER",
        "master_epoch": 2,
        "consumer_group": "g1",
        "topic": "t1",
        "queue_id": 0,
        "offset": 5,
        "queue_max_offset": 100,
        "source": "client_commit",
        "dv_state_version": 2,
        "dv_counter": 7,
    }
    assert event_store.flush().events == 0  # nothing new


def test_a_flush_that_died_midway_is_completed_by_the_next_without_duplicates(events_uri):
    event_store.append([sample()])
    client = sync_client()
    crashed = event_store._flushing_prefix() + "deadbeef"
    client.rename(event_store.buffer_key(), crashed)  # what a flush does first, before it died
    event_store.write_parquet(
        events_uri,
        "part-deadbeef-00000",
        event_store.rows_by_date(  # and one file it wrote
            [event_store._decode(i) for i in client.lrange(crashed, 0, -1)]
        ),
    )
    event_store.append([sample(n=1)])
    report = event_store.flush()
    assert report.events == 4 and not client.exists(crashed)
    assert len(stored_rows(events_uri)) == 4  # the crashed flush's file was written again, not twice


def test_bad_batches_are_refused_with_field_errors(anon, broker_token, read_token, events_uri):
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    body = wire(sample())
    body["role"] = "LEADER"
    body["events"][1]["offset"] = -1
    body["events"][2]["source"] = "magic"
    body["events"][0]["queueMaxOffset"] = "12"
    del body["clusterName"]
    resp = anon.post(URL, body, format="json")
    assert resp.status_code == 400 and resp.json()["code"] == 29
    fields = resp.json()["fields"]
    assert set(fields) == {"role", "clusterName", "events"}
    assert set(fields["events"]) == {"0", "1", "2"}
    assert "offset" in fields["events"]["1"] and "source" in fields["events"]["2"]
    assert "queueMaxOffset" in fields["events"]["0"]
    assert anon.post(URL, {**wire(sample()), "events": []}, format="json").json()["fields"] == {
        "events": ["must be a non-empty list"]
    }
    assert event_store.pending_batches() == []

    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {read_token}")
    assert anon.post(URL, wire(sample()), format="json").status_code == 403
    anon.credentials()
    assert anon.post(URL, wire(sample()), format="json").status_code == 401
    other = ApiToken.issue("other-cluster", "broker", "c2")[1]
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    resp = anon.post(URL, wire(sample()), format="json")
    assert resp.status_code == 403 and resp.json()["code"] == 16


def test_a_full_buffer_refuses_reports_until_flushed(anon, broker_token, events_uri, settings):
    settings.AUDIT_EVENTS_BUFFER_MAX_BATCHES = 2
    anon.credentials(HTTP_AUTHORIZATION=f"Bearer {broker_token}")
    assert [anon.post(URL, wire(sample()), format="json").status_code for _ in range(3)] == [202, 202, 429]
    event_store.flush()
    assert anon.post(URL, wire(sample()), format="json").status_code == 202


def test_the_offset_events_frame_on_the_broker_websocket(broker_token, events_uri):
    async def scenario():
        ws = await connected(broker_token)
        reply = await call(ws, "offset_events", wire(sample()))
        assert reply["type"] == "offset_events_result" and reply["payload"] == {"accepted": 3}
        bad = wire(sample())
        bad["events"][0]["queueId"] = 70000
        reply = await call(ws, "offset_events", bad, seq=2)
        assert reply["type"] == "error" and reply["payload"]["code"] == 29
        assert "queueId" in reply["payload"]["fields"]["events"]["0"]
        await ws.disconnect()

    async_to_sync(scenario)()
    assert [len(b.events) for _, b in event_store.pending_batches()] == [3]
