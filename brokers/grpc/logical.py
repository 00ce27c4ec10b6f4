"""Static topics' logical queues for the official clients (docs/static-topics.md; the mappings and
sealing in brokers/static.py, the rules in brokers/core/static.py): what the gRPC handlers hand on to
another broker set of a logical queue, and how (``StaticHops``).

A route names, for each logical queue, the broker set of its writable segment (the *owner*). Clients
see ordinary queues and logical offsets; a broker set hands on what another one holds:

- **Sends** to a broker set that does not own the message's logical queue (a client's route is up to
  30 s old) go to the owner, once (``x-static-hop``); a send to a segment whose start is not decided
  yet waits for the decision (it follows the seal within a round trip).
- **Receives** walk the logical queue's segments, oldest first. A group reads a sealed segment to
  its end, and every message of it acknowledged, before the next one is read: its messages keep
  their order, and a retry of one of them (from that broker set's retry topic) still reaches the
  group. A segment held by another broker set is read there (the receive is handed on with
  ``x-static-segment`` naming it); that broker answers MESSAGE_NOT_FOUND with SEGMENT_DONE once
  the group is done with it, and the answer is remembered (a sealed segment takes no more messages).
- **Acks and invisible-time changes** carry the broker set in their receipt handle and are handed on
  to it.
- **Offset queries**: END from the owner, BEGINNING from the oldest segment still held.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from functools import partial

import httpx
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from mqrules.logical_queues import Segment, TopicMapping, min_logical_offset

from ..consuming import ConsumeService
from ..core.pop import ReceiptHandle
from ..core.static import live
from ..static import StaticQueues
from .codes import status as _status
from .forward import Forwarder, NoServingBroker

SEGMENT_KEY = "x-static-segment"
HOP_KEY = "x-static-hop"
SEGMENT_DONE = "SEGMENT_DONE"  # the status message of a segment the group is done with
DECIDE_WAIT_S = 2.0


def segment_key(s: Segment) -> str:
    return f"{s.broker_name}/{s.queue_id}/{s.phys_start}"


def _find(m: TopicMapping, lid: int, key: str) -> Segment | None:
    if not 0 <= lid < len(m.queues):
        return None
    return next((s for s in m.queues[lid].segments if segment_key(s) == key), None)


def foreign(handle: ReceiptHandle | None, here: str) -> str | None:
    """The broker set a receipt handle must go to, when that is not this one (``here``)."""
    if handle is None or not handle.broker or handle.broker == here:
        return None
    return handle.broker


def _metadata(context) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class StaticHops:
    """Hands a static topic's sends, receives, acks and offset queries on to the broker set that holds
    what they need (another set's serving broker, over its client endpoint); serves what is held here
    with the consuming service."""

    def __init__(self, own_grpc_addr: str, http: httpx.AsyncClient, static: StaticQueues, consuming: ConsumeService):
        self.own, self.http, self.static, self.consuming = own_grpc_addr, http, static, consuming
        self._set_forwarders: dict[str, Forwarder] = {}
        self._done_segments: set[tuple[str, str, int, str]] = set()  # (group, topic, lid, segment key)

    def to_set(self, broker_name: str) -> Forwarder:
        """Calls to another broker set's serving broker."""
        fwd = self._set_forwarders.get(broker_name)
        if fwd is None:
            fwd = self._set_forwarders[broker_name] = Forwarder(broker_name, self.own, self.http)
        return fwd

    async def close(self) -> None:
        for fwd in self._set_forwarders.values():
            await fwd.close()

    # --- sends ------------------------------------------------------------------------------------

    async def send_elsewhere(self, owner: str, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        """A send for a logical queue another broker set owns: handed on once."""
        if HOP_KEY in _metadata(context):
            status = _status(pb.Code.INTERNAL_SERVER_ERROR, f"the logical queue moved again (to {owner}); retry")
            return spb.SendMessageResponse(status=status)
        try:
            return await self.to_set(owner).unary("SendMessage", request, context, metadata=((HOP_KEY, "1"),))
        except NoServingBroker as exc:
            return spb.SendMessageResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))

    # --- receives ---------------------------------------------------------------------------------

    async def receive_static(
        self, request: spb.ReceiveMessageRequest, context, m: TopicMapping, every_queue: bool, pop, deadline: float
    ):
        """A receive of a static topic. An official client (``every_queue``, as for plain topics:
        brokers/core/pop.py ``receive_order``) gets the logical queue it named, or else the other logical
        queues this broker set owns, so that a client that only asks queue 0 (the Node.js
        SimpleConsumer) reads every queue; all of them are looked at again as messages arrive, until
        ``deadline`` (the long poll). A request naming no language (a tool) reads the queue named.
        ``pop(deadline, lid, segment, long_poll)`` pops a segment held here."""
        lid = request.message_queue.id
        if not every_queue or SEGMENT_KEY in _metadata(context) or not 0 <= lid < len(m.queues):
            async for answer in self.receive_logical(request, context, m, partial(pop, deadline)):
                yield answer
            return
        loop = asyncio.get_running_loop()
        trouble = None  # the last answer that was neither messages nor "nothing new"
        while True:
            m = self.static.get(m.topic) or m
            for other in [lid, *(q for q in m.owned_by(self.static.broker) if q != lid)]:
                quick = spb.ReceiveMessageRequest()
                quick.CopyFrom(request)
                quick.message_queue.id = other
                quick.ClearField("long_polling_timeout")  # a segment held elsewhere is not long-polled there either
                answers = [a async for a in self.receive_logical(quick, context, m, partial(pop, 0.0))]
                if any(a.HasField("message") for a in answers):
                    for answer in answers:
                        yield answer
                    return
                if answers and answers[0].status.code not in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND):
                    trouble = answers[0]
            if loop.time() >= deadline or not self.consuming.serving:
                break
            await self.consuming.until_new(request.group.name, m.topic)
        yield trouble or spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))

    async def receive_logical(self, request: spb.ReceiveMessageRequest, context, m: TopicMapping, pop_segment):
        """The answers to a receive of a static topic's logical queue (see the module docstring).
        ``pop_segment(lid, segment, long_poll)`` pops a segment of this broker set: an async generator
        of answers."""
        group, lid = request.group.name, request.message_queue.id
        if not 0 <= lid < len(m.queues):
            yield spb.ReceiveMessageResponse(status=_status(pb.Code.BAD_REQUEST, f"{m.topic} has no queue {lid}"))
            return
        asked = _metadata(context).get(SEGMENT_KEY)
        if asked is not None:  # handed on by another broker set: this segment only
            s = _find(m, lid, asked)
            if s is None or s.broker_name != self.static.broker:  # not (yet) known here: never taken for done
                yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, f"segment {asked} is not known here"))
                return
            if self.consuming.segment_done(group, m.topic, s):
                yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, SEGMENT_DONE))
                return
            async for answer in pop_segment(lid, s, s.phys_end is None and s is m.queues[lid].writable):
                yield answer
            return
        q = m.queues[lid]
        for s in live(q):
            done_key = (group, m.topic, lid, segment_key(s))
            if done_key in self._done_segments:
                continue
            last = s is q.writable
            if s.broker_name == self.static.broker:
                if not last and self.consuming.segment_done(group, m.topic, s):
                    self._done_segments.add(done_key)
                    continue
                if last and s.logic_start is None:  # the old segment is being sealed: its end decides
                    await self.static.decided(m.topic, lid, DECIDE_WAIT_S)
                    yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
                    return
                async for answer in pop_segment(lid, s, last):
                    yield answer
                return
            answers = self.to_set(s.broker_name).stream(
                "ReceiveMessage", request, context, metadata=((SEGMENT_KEY, segment_key(s)),)
            )
            try:
                first = await anext(answers)
            except StopAsyncIteration:
                return
            except NoServingBroker as exc:
                yield spb.ReceiveMessageResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
                return
            if first.HasField("status") and first.status.message == SEGMENT_DONE:
                if not last:
                    self._done_segments.add(done_key)
                    continue
                yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
                return
            yield first
            try:
                async for answer in answers:
                    yield answer
            except NoServingBroker:
                return  # the client gets what came; the rest is redelivered after its invisible time
            return
        yield spb.ReceiveMessageResponse(status=_status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))

    # --- acks -------------------------------------------------------------------------------------

    async def ack_elsewhere(self, request: spb.AckMessageRequest, context, entries: dict[str, list[int]]):
        """Hand acks on to the broker sets that handed the messages out; per entry index, its status."""
        out: dict[int, pb.Status] = {}

        async def one(broker: str, indexes: list[int]) -> None:
            sub = spb.AckMessageRequest(group=request.group, topic=request.topic, entries=[request.entries[i] for i in indexes])
            try:
                answer = await self.to_set(broker).unary("AckMessage", sub, context)
                statuses = [e.status for e in answer.entries] or [answer.status] * len(indexes)
            except NoServingBroker as exc:
                statuses = [_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc))] * len(indexes)
            for i, status in zip(indexes, statuses, strict=False):
                out[i] = status

        await asyncio.gather(*(one(b, ix) for b, ix in entries.items()))
        return out

    async def invisible_elsewhere(self, broker: str, request, context) -> spb.ChangeInvisibleDurationResponse:
        try:
            return await self.to_set(broker).unary("ChangeInvisibleDuration", request, context)
        except NoServingBroker as exc:
            return spb.ChangeInvisibleDurationResponse(
                status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)), receipt_handle=request.receipt_handle
            )

    # --- offsets ----------------------------------------------------------------------------------

    async def query_offset_logical(self, request: spb.QueryOffsetRequest, context, m: TopicMapping) -> spb.QueryOffsetResponse:
        """BEGINNING: the oldest segment still held; END: the owner's (handed on when another broker
        set owns the queue); a time: the first segment (oldest first) whose messages reach it, each
        searched by the broker set holding it (handed on with ``x-static-segment``), else the end."""
        lid = request.message_queue.id
        if not 0 <= lid < len(m.queues):
            return spb.QueryOffsetResponse(status=_status(pb.Code.BAD_REQUEST, f"{m.topic} has no queue {lid}"))
        q = m.queues[lid]
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=min_logical_offset(q))
        if policy == pb.QueryOffsetPolicy.TIMESTAMP:
            found = await self._offset_by_time(request, context, m, lid)
            if found is not None:
                return found
        w = q.writable
        if w.broker_name != self.static.broker:
            if HOP_KEY in _metadata(context):
                return spb.QueryOffsetResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, "the logical queue moved again"))
            try:
                end_request = spb.QueryOffsetRequest()
                end_request.CopyFrom(request)
                end_request.query_offset_policy = pb.QueryOffsetPolicy.END
                return await self.to_set(w.broker_name).unary("QueryOffset", end_request, context, metadata=((HOP_KEY, "1"),))
            except NoServingBroker as exc:
                return spb.QueryOffsetResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
        if w.logic_start is None:
            await self.static.decided(m.topic, lid, DECIDE_WAIT_S)
            m = self.static.get(m.topic) or m
            w = m.queues[lid].writable
            if w.logic_start is None or w.broker_name != self.static.broker:
                undecided = _status(pb.Code.INTERNAL_SERVER_ERROR, "the queue's move is not decided yet")
                return spb.QueryOffsetResponse(status=undecided)
        end = w.logic_start + (self.consuming.store.max_queue_offset(m.topic, w.queue_id) - w.phys_start)
        return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=end)

    async def _offset_by_time(self, request, context, m: TopicMapping, lid: int) -> spb.QueryOffsetResponse | None:
        """The logical offset of the first message stored at the asked time or later, searching the
        segments oldest first; None when every segment's messages are older (the caller answers END).
        Asked for one segment (``x-static-segment``): the answer of that segment, held here."""
        wanted = request.timestamp.seconds * 1000 + request.timestamp.nanos // 10**6
        asked = _metadata(context).get(SEGMENT_KEY)
        segments = live(m.queues[lid])
        if asked is not None:
            segments = [s for s in segments if segment_key(s) == asked]
            if not segments or segments[0].broker_name != self.static.broker or segments[0].logic_start is None:
                return spb.QueryOffsetResponse(status=_status(pb.Code.BAD_REQUEST, f"segment {asked} is not held here"))
        for s in segments:
            if s.logic_start is None:
                continue
            if s.broker_name == self.static.broker:
                phys_end = self.consuming.store.max_queue_offset(m.topic, s.queue_id) if s.phys_end is None else s.phys_end
                found = await self.consuming.offset_by_time(m.topic, s.queue_id, s.phys_start, phys_end, wanted)
                offset, end = s.logic_start + (found - s.phys_start), s.logic_start + (phys_end - s.phys_start)
            else:
                try:
                    answer = await self.to_set(s.broker_name).unary(
                        "QueryOffset", request, context, metadata=((SEGMENT_KEY, segment_key(s)),)
                    )
                except NoServingBroker as exc:
                    return spb.QueryOffsetResponse(status=_status(pb.Code.INTERNAL_SERVER_ERROR, str(exc)))
                if answer.status.code != pb.Code.OK:
                    return answer
                offset, end = answer.offset, s.logic_end
            if asked is not None or end is None or offset < end:
                return spb.QueryOffsetResponse(status=_status(pb.Code.OK), offset=offset)
        return None


def by_broker(indexes: dict[int, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, broker in indexes.items():
        out[broker].append(i)
    return dict(out)
