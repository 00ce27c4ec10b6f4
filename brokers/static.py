"""Static topics on a broker (seed 003, RIP-21; docs/static-topics.md): the logical-queue mappings of
the topics this broker set holds segments of, and what a broker does with them.

The control plane pushes a mapping whenever it changes, and every registration answer repeats the
mappings naming this broker set (a lost push only delays). Each one adopted is persisted
(``config/staticTopics.json``, as RocketMQ keeps ``topicQueueMapping.json``) before anything acts on it,
so a restarted broker never takes a static topic for a plain one, nor writes a segment it sealed. The
rules are mqrules/logical_queues.py's.

- **Writes** of logical queue *L* go to the physical queue of *L*'s writable segment, on the broker
  set that holds it; a broker set that does not hold it hands the send on (brokers/grpc/logical.py).
- **Sealing.** When a move leaves this broker set's segment of *L* behind, the master stops writing
  it (sends check the mapping before they are stored, without a pause in between), waits for the
  sends already on their way to the store, and reports where the segment ends
  (``static_topic_sealed``); the control plane then decides where the new segment starts. The report
  is repeated with every mapping this broker receives until the decision comes back.
- **Offsets** clients see are logical: a physical offset of a segment translates to
  ``logic_start + (offset - phys_start)``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from mqrules.logical_queues import LogicalQueue, Segment, TopicMapping

from .core import static as rules
from .store.files import write_json_atomically

log = logging.getLogger("brokers.static")

SEAL_WAIT_STEP_S = 0.002


Report = Callable[[dict], Awaitable[object]]


class StaticQueues:
    """``report``: sends the static_topic_sealed frame; ``may_seal()``: whether this broker seals (only
    the master does)."""

    def __init__(
        self,
        broker_name: str,
        max_queue_offset: Callable[[str, int], int],
        path: Path | None = None,
        *,
        report: Report | None = None,
        may_seal: Callable[[], bool] = lambda: False,
    ):
        self.broker = broker_name
        self._max_offset = max_queue_offset
        self.path = path
        self.mappings: dict[str, TopicMapping] = {}
        if path is not None and path.exists():
            for raw in json.loads(path.read_text()).values():
                m = TopicMapping.from_wire(raw)
                self.mappings[m.topic] = m
        self._changed = asyncio.Event()
        self.turns = itertools.count()  # the owned logical queues a send without a group takes in turn
        self.writing: Counter[tuple[str, int]] = Counter()  # sends on their way to the store, per physical queue
        self.report = report
        self.may_seal = may_seal
        self._sealing: set[tuple[str, int, int]] = set()
        self._background: set[asyncio.Task] = set()

    def get(self, topic: str) -> TopicMapping | None:
        return self.mappings.get(topic)

    def update(self, raw: dict) -> bool:
        """Adopt a mapping (wire form) newer than the one known; True if adopted."""
        try:
            m = TopicMapping.from_wire(raw)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("ignored a malformed static-topic mapping (%s)", exc)
            return False
        known = self.mappings.get(m.topic)
        if known is not None and known.epoch >= m.epoch:
            return False
        self.mappings[m.topic] = m
        if self.path is not None:
            write_json_atomically(self.path, {t: known.to_wire() for t, known in sorted(self.mappings.items())})
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        self.seal_due()
        return True

    async def changed(self, timeout: float) -> None:
        """Returns when a mapping changes, or after ``timeout``."""
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def decided(self, topic: str, lid: int, timeout: float) -> None:
        """Returns once logical queue ``lid``'s writable segment has its logical start (a move's seal
        was decided), or after ``timeout``."""
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while (left := until - loop.time()) > 0:
            m = self.mappings.get(topic)
            if m is None or not 0 <= lid < len(m.queues) or m.queues[lid].writable.logic_start is not None:
                return
            await self.changed(left)

    # --- writes -----------------------------------------------------------------------------------

    def write_target(self, m: TopicMapping, lid: int | None) -> tuple[int, Segment] | None:
        """Where a message goes (brokers/core/static.py ``write_target``): logical queue ``lid`` (a FIFO
        message's, by its group) or, for any other, the logical queues this broker set takes writes of
        in turn; None when the queue's writes go to another broker set."""
        return rules.write_target(m, self.broker, lid, self.turns)

    # --- reading ----------------------------------------------------------------------------------

    def logical(self, topic: str, queue_id: int, offset: int) -> tuple[int, int] | None:
        """(logical queue, logical offset) of this broker set's physical ``queue_id`` at ``offset``."""
        return rules.logical_position(self.mappings.get(topic), self.broker, queue_id, offset)

    @staticmethod
    def live(q: LogicalQueue) -> list[Segment]:
        return rules.live(q)

    # --- sealing ----------------------------------------------------------------------------------

    def seal_due(self) -> None:
        """Report every segment of this broker set a move left behind (in the background)."""
        if not self.may_seal() or self.report is None:
            return
        for m in self.mappings.values():
            for q in m.queues:
                s = q.sealing
                key = (m.topic, q.queue_id, s.queue_id) if s is not None else None
                if s is None or s.broker_name != self.broker or key in self._sealing:
                    continue
                self._sealing.add(key)  # type: ignore[arg-type]
                task = asyncio.get_running_loop().create_task(self._seal(m.topic, q.queue_id, s.queue_id), name="static-seal")
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _seal(self, topic: str, lid: int, queue_id: int) -> None:
        try:
            while self.writing[(topic, queue_id)]:  # sends that passed the check before the mapping changed
                await asyncio.sleep(SEAL_WAIT_STEP_S)
            end = self._max_offset(topic, queue_id)
            assert self.report is not None
            await self.report(
                {"topic": topic, "queueId": lid, "brokerName": self.broker, "physicalQueueId": queue_id, "sealedEnd": end}
            )
            log.info("sealed %s logical queue %d (physical queue %d) at %d", topic, lid, queue_id, end)
        except Exception as exc:  # the next mapping this broker receives (a registration answer) retries
            log.warning("reporting the sealed end of %s/%d failed (%s); retried with the next mapping", topic, lid, exc)
        finally:
            self._sealing.discard((topic, lid, queue_id))

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
