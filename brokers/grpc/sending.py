"""SendMessage for the official RocketMQ 5 clients: each message read into an ``Outgoing`` (its system
properties under RocketMQ's property names), the send admitted and stored by the sending service
(brokers/sending.py; the rules: brokers/core/admission.py), and the Admission answered: one entry per
stored message, or the refusal, or the answer of the broker the send was handed to (the group's master,
forward.py; the broker set that owns a static topic's logical queue, logical.py)."""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..core.admission import Admission, Outgoing, Verdict
from ..core.fifo import SHARDING_KEY
from ..sending import SendService
from ..static import StaticQueues
from ..store.results import PutResult
from ..store.store import PutMessageStatus
from .codes import OK, send_code, status, status_of
from .forward import Forwarder
from .logical import DECIDE_WAIT_S, StaticHops


def outgoing(m: pb.Message) -> Outgoing:
    """A sent message as the broker keeps it (RocketMQ's proxy converts it so)."""
    sp = m.system_properties
    user = m.user_properties
    props = dict(user) if user else {}
    props["UNIQ_KEY"] = sp.message_id
    if sp.HasField("tag"):
        props["TAGS"] = sp.tag
    if sp.keys:
        props["KEYS"] = " ".join(sp.keys)
    props["BORN_HOST"] = sp.born_host
    group = sp.message_group
    if group:
        props[SHARDING_KEY] = group
    born = sp.born_timestamp
    if sp.HasField("delivery_timestamp"):
        at = sp.delivery_timestamp
        deliver_ms: int | None = at.seconds * 1000 + at.nanos // 1_000_000
    else:
        deliver_ms = None
    born_ms = born.seconds * 1000 + born.nanos // 1_000_000
    return Outgoing(m.topic.name, m.body, sp.message_type, group, deliver_ms, props, born_ms)


def stored_answer(admission: Admission, results: list[PutResult]) -> spb.SendMessageResponse:
    """One entry per message: OK with its id and offset (a half message's transaction id is its
    message id), or the store's refusal; the first refusal is the answer's status."""
    response = spb.SendMessageResponse()
    add = response.entries.add
    first_bad = None
    for a, result in zip(admission.messages, results, strict=True):
        message_id = a.properties["UNIQ_KEY"]
        if result.status is PutMessageStatus.PUT_OK:
            if a.half:
                add(status=OK, message_id=message_id, transaction_id=message_id, offset=result.queue_offset)
            else:
                add(status=OK, message_id=message_id, offset=result.queue_offset)
            continue
        refused = status(send_code(result.status), result.detail)  # never OK: only PUT_OK maps to OK
        add(status=refused, message_id=message_id, offset=max(0, result.queue_offset))
        if first_bad is None:
            first_bad = refused
    response.status.CopyFrom(OK if first_bad is None else first_bad)
    return response


class SendingHandler:
    def __init__(self, sending: SendService, to_master: Forwarder, hops: StaticHops, static: StaticQueues):
        self.sending, self.to_master, self.hops, self.static = sending, to_master, hops, static

    async def SendMessage(self, request: spb.SendMessageRequest, context, waited: bool = False) -> spb.SendMessageResponse:
        """Runs once per message sent: a batch's messages are read once, and OK entries share one
        status. ``waited``: for a static queue's decision, once."""
        messages = [outgoing(m) for m in request.messages]
        sending = self.sending
        admission = sending.admit(messages, waited=waited)
        if admission.verdict is Verdict.TO_MASTER:
            answer = await self.to_master.forward("SendMessage", request, context, spb.SendMessageResponse, sending.forwards)
            if answer is not None:
                sending.traffic.forwarded += len(messages)
                return answer
            admission = sending.admit(messages, may_forward=False, waited=waited)  # elected while it waited: stored here
        verdict = admission.verdict
        if verdict is Verdict.STORE:
            return stored_answer(admission, await sending.append(admission, messages))
        if verdict is Verdict.REFUSE:
            assert admission.status is not None
            return spb.SendMessageResponse(status=status_of(admission.status))
        if verdict is Verdict.TO_OWNER:
            sending.traffic.forwarded += len(messages)
            return await self.hops.send_elsewhere(admission.owner, request, context)
        await self.static.decided(admission.topic, admission.logical_queue, DECIDE_WAIT_S)  # AWAIT_DECISION
        return await self.SendMessage(request, context, waited=True)
