"""The Channels layer's one-trip send (controlplane/channel_layer.py) against real Redis: what it sends,
channels-redis's own receive gets, general and process-local channels alike; a channel at capacity
refuses with ChannelFull and keeps what it held. (That it is faster is a benchmark's to say.)"""

from __future__ import annotations

import asyncio

import pytest
from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings

from controlplane.channel_layer import OneTripRedisChannelLayer

pytestmark = pytest.mark.integration


def layer(**config) -> OneTripRedisChannelLayer:
    base = dict(settings.CHANNEL_LAYERS["default"]["CONFIG"])
    return OneTripRedisChannelLayer(**{**base, **config})


def test_the_project_uses_the_one_trip_layer():
    assert isinstance(get_channel_layer(), OneTripRedisChannelLayer)


@pytest.mark.parametrize("local", [False, True], ids=["general channel", "process-local channel"])
def test_what_it_sends_channels_redis_receives_in_order(local):
    async def run() -> list[dict]:
        lay = layer()
        channel = await lay.new_channel() if local else "one-trip-general"
        try:
            for n in range(3):
                await lay.send(channel, {"type": "push", "n": n, "payload": {"text": "é" * n}})
            return [await asyncio.wait_for(lay.receive(channel), 5) for _ in range(3)]
        finally:
            await lay.flush()

    got = asyncio.run(run())
    assert [(m["type"], m["n"], m["payload"]["text"]) for m in got] == [("push", n, "é" * n) for n in range(3)]


def test_a_full_channel_refuses_and_keeps_what_it_held():
    async def run() -> tuple[bool, list[int]]:
        lay = layer(capacity=2)
        try:
            await lay.send("one-trip-full", {"type": "x", "n": 1})
            await lay.send("one-trip-full", {"type": "x", "n": 2})
            try:
                await lay.send("one-trip-full", {"type": "x", "n": 3})
                refused = False
            except ChannelFull:
                refused = True
            held = [(await asyncio.wait_for(lay.receive("one-trip-full"), 5))["n"] for _ in range(2)]
            return refused, held
        finally:
            await lay.flush()

    assert asyncio.run(run()) == (True, [1, 2])
