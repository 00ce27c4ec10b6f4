"""Escape (RIP-32, reference §5.2 EscapeBridge): which master takes what an acting master must deliver
but cannot write to its own log (brokers/grpc/escape.py sends it there). Pure."""

from __future__ import annotations

import zlib
from collections.abc import Mapping


def escape_target(route: Mapping, topic: str, own_broker: str) -> str | None:
    """The client endpoint of the master that takes ``topic``'s escaped messages: one of another
    broker set, writable for the topic, chosen by a hash of the topic and this broker set (as
    RocketMQ's ``floorMod(hash(topic + storeHost))``). Never a dead address: a route names only live
    masters. ``route``: the nameserver's route of the topic (its JSON)."""
    writable = {
        qd["brokerName"] for qd in route.get("queueDatas", ()) if qd.get("writeQueueNums", 0) > 0 and qd.get("perm", 0) & 2
    }
    masters = sorted(
        addr
        for bd in route.get("brokerDatas", ())
        if bd.get("brokerName") != own_broker
        and bd.get("brokerName") in writable
        and (addr := bd.get("brokerGrpcAddrs", {}).get("0"))
    )
    if not masters:
        return None
    return masters[zlib.crc32(f"{topic}{own_broker}".encode()) % len(masters)]
