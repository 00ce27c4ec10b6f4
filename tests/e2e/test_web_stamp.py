"""The web tier's own stamp (blindness rule 3, issue 34) from a real uvicorn serving the ASGI app: while
it serves, its lifespan task stamps the hearing record four times a second and the control plane is
not blind; once it is stopped, the time after its last stamp plus the web grace is blind, whatever the
brokers' heartbeat patterns, and no broker is declared dead for it."""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from controlplane import blindness
from controlplane.controller import liveness
from controlplane.redis import sync_client

from ..procs import uvicorn_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def stamp() -> int | None:
    value = sync_client().get(settings.REDIS_KEY_PREFIX + "web:stamp")
    return int(value) if value else None


def redis_now() -> int:
    seconds, micros = sync_client().time()
    return seconds * 1000 + micros // 1000


def test_a_serving_web_tier_stamps_and_a_stopped_one_makes_the_control_plane_blind():
    with uvicorn_server():
        deadline = time.monotonic() + 30
        while stamp() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        first = stamp()
        assert first is not None, "uvicorn's lifespan never stamped the hearing record"
        time.sleep(1.0)
        assert stamp() > first and redis_now() - stamp() < 1_000  # four times a second
        assert not liveness.hearing().blind_now
    # Stopped (the server has exited): nothing stamps any more; past the web grace the control plane
    # takes itself for blind.
    last = stamp()
    time.sleep((blindness.DEFAULT_WEB_GRACE_MILLIS + 2_000) / 1000)
    assert stamp() == last
    view = liveness.hearing()
    assert view.blind_now and view.blind[-1].start <= stamp() + blindness.DEFAULT_WEB_GRACE_MILLIS
    # A broker last heard just before the stop, whose 1.5 s timeout passed while nobody could reach
    # the control plane, is not dead (1.1 s of it was heard), though it is no longer electable.
    beat_at = stamp() - 100
    liveness.heartbeat(liveness.Beat("c1", "g1", 1, "127.0.0.1:1", heartbeat_timeout_millis=1_500), now_ms=beat_at)
    info = liveness.live_infos("c1", "g1", [1])[1]
    assert redis_now() - beat_at > 2_000 and info.alive and not info.within_timeout
