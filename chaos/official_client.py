"""The official RocketMQ Python client (PyPI ``rocketmq-python-client``) as a chaos load, in processes
of its own: a producer that sends one message at a time and a SimpleConsumer that receives and acks,
both given an access point (e.g. every replica's gRPC address joined with ";"). Each appends one JSON
line per event to a file, stamped with ``time.time()``, and stops cleanly on SIGTERM:

    python -m chaos.official_client produce --access "127.0.0.1:1;127.0.0.1:2" --topic T --out producer.jsonl
    python -m chaos.official_client consume --access "127.0.0.1:1;127.0.0.1:2" --topic T --group G --out consumer.jsonl

Events (every line also has ``t`` and ``kind``):
  producer  ``ack``  {id, sent, msg_id}    a send the client answered with a receipt
            ``fail`` {id, sent, error}     a send whose final answer, after the client's own retries,
                                           was an exception
  consumer  ``delivery``     {id, msg_id, attempt}   a message returned by ``receive``
            ``ack_fail``     {id, error}             its ack raised
            ``receive_fail`` {error}                 a ``receive`` raised
  both      ``started``, ``stopped`` (and ``start_fail`` {error} while ``startup`` fails)

``id`` is the message body the producer chose (``<prefix><sequence>``, padded with ``.`` to
``--body-bytes``), ``msg_id`` the client's own message id. The client library's log goes to
``--client-log`` instead of ~/logs/rocketmq_python.

The SimpleConsumer of rocketmq-python-client 5.1.2 picks a queue at random for each receive (it builds
a new queue selector, with a random start, on every call and keeps the first one unused), and a
receive of an empty queue long-polls ``--await-s`` (our brokers answer 0.5 s before): with little
traffic a message may wait several such polls. Hence ``--await-s`` 2, not the client's default 20.

The parent's side: :func:`client_process` (a testkit Process running one of the two) and
:class:`EventLog` (the events read back, incrementally while the child runs), whose
``first_ack_after`` lets chaos/faults.py wait for a write acknowledged after a fault.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from testkit.procs import Process, python

from .events import EventWriter
from .workload import Ack

CLIENT_NODE = "official-client"  # an Ack's node: the client does not say which broker answered
STARTUP_RETRY_S = 0.5
PAD = b"."  # --body-bytes pads a body with it (ids never end with it)

# --- the child processes ------------------------------------------------------------------------------


def padded(message_id: str, body_bytes: int) -> bytes:
    """The body of a message: its id, padded with PAD to ``body_bytes``."""
    head = message_id.encode()
    return head + PAD * max(0, body_bytes - len(head))


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _client_log_to(path: str | None) -> None:
    """The client library logs to ~/logs/rocketmq_python/ by itself; this run's folder instead."""
    if not path:
        return
    from rocketmq.v5.log import logger

    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    logger.addHandler(handler)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _start(client, events: EventWriter, stop: threading.Event) -> bool:
    """``client.startup()`` until it works (the route may not be there yet) or we are told to stop."""
    while not stop.is_set():
        try:
            client.startup()
            events.write("started")
            return True
        except Exception as exc:
            events.write("start_fail", error=describe(exc))
            stop.wait(STARTUP_RETRY_S)
    return False


def produce(args: argparse.Namespace) -> int:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    stop = _stop_on_signals()
    events = EventWriter(Path(args.out))
    producer = Producer(ClientConfiguration(args.access, Credentials(), request_timeout=args.request_timeout), (args.topic,))
    try:
        if not _start(producer, events, stop):
            return 0
        seq = 0
        while not stop.is_set():
            message_id = f"{args.id_prefix}{seq:09d}"
            seq += 1
            msg = Message()
            msg.topic, msg.body = args.topic, padded(message_id, args.body_bytes)
            sent = time.time()
            try:
                receipt = producer.send(msg)
            except Exception as exc:  # the client's own retries are spent
                events.write("fail", id=message_id, sent=sent, error=describe(exc))
            else:
                events.write("ack", id=message_id, sent=sent, msg_id=receipt.message_id)
            stop.wait(args.interval_ms / 1000)
        producer.shutdown()
        events.write("stopped", sent=seq)
        return 0
    finally:
        events.close()


def consume(args: argparse.Namespace) -> int:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    stop = _stop_on_signals()
    events = EventWriter(Path(args.out))
    consumer = SimpleConsumer(
        ClientConfiguration(args.access, Credentials(), request_timeout=args.request_timeout),
        args.group,
        {args.topic: FilterExpression()},
        await_duration=args.await_s,
    )
    try:
        if not _start(consumer, events, stop):
            return 0
        received = 0
        while not stop.is_set():
            try:
                messages = consumer.receive(args.batch, args.invisible_s)
            except Exception as exc:
                events.write("receive_fail", error=describe(exc))
                stop.wait(args.failure_pause_s)
                continue
            for m in messages:
                message_id = m.body.rstrip(PAD).decode(errors="replace")
                received += 1
                events.write("delivery", id=message_id, msg_id=m.message_id, attempt=m.delivery_attempt)
                try:
                    consumer.ack(m)
                except Exception as exc:
                    events.write("ack_fail", id=message_id, error=describe(exc))
        consumer.shutdown()
        events.write("stopped", received=received)
        return 0
    finally:
        events.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    for role in ("produce", "consume"):
        s = sub.add_parser(role)
        s.add_argument("--access", required=True, help='access point: "host:port;host:port;..."')
        s.add_argument("--topic", required=True)
        s.add_argument("--out", required=True, help="the JSON-lines event file (appended to)")
        s.add_argument("--client-log", help="the client library's log file")
        s.add_argument("--request-timeout", type=int, default=3, help="ClientConfiguration.request_timeout, whole seconds")
    produce_args, consume_args = sub.choices["produce"], sub.choices["consume"]
    produce_args.add_argument("--interval-ms", type=float, default=5.0, help="pause after each send")
    produce_args.add_argument("--id-prefix", default="m-")
    produce_args.add_argument("--body-bytes", type=int, default=0, help="pad each body to this size")
    consume_args.add_argument("--group", required=True)
    consume_args.add_argument("--batch", type=int, default=32)
    consume_args.add_argument("--invisible-s", type=int, default=30)
    consume_args.add_argument("--await-s", type=int, default=2, help="long polling time of a receive")
    consume_args.add_argument("--failure-pause-s", type=float, default=0.05, help="after a failed receive")
    args = p.parse_args(argv)
    _client_log_to(args.client_log)
    return produce(args) if args.role == "produce" else consume(args)


# --- the parent's side --------------------------------------------------------------------------------


def client_process(role: str, name: str, log_dir: Path, env: dict[str, str], *options: str) -> Process:
    """A Process running ``python -m chaos.official_client <role> <options>``; its output in
    ``log_dir/<name>.log`` and the client library's log in ``log_dir/<name>-rocketmq.log``."""
    argv = python("-m", "chaos.official_client", role, *options, "--client-log", str(log_dir / f"{name}-rocketmq.log"))
    return Process(name, argv, log_dir / f"{name}.log", env)


class EventLog:
    """The events of one child's file, read incrementally (``refresh``) while the child writes it."""

    def __init__(self, path: Path):
        self.path = path
        self.events: list[dict] = []
        self._offset = 0
        self._ack_times: list[float] = []  # time.time() of each "ack", in file order (= time order)
        self._lock = threading.Lock()
        # chaos/faults.py speaks time.monotonic(); the children stamp time.time()
        self._wall_minus_monotonic = time.time() - time.monotonic()

    def refresh(self) -> None:
        with self._lock:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return
            complete = chunk.rfind(b"\n") + 1  # a line still being written waits for the next call
            self._offset += complete
            for line in chunk[:complete].splitlines():
                event = json.loads(line)
                self.events.append(event)
                if event["kind"] == "ack":
                    self._ack_times.append(event["t"])

    def of(self, *kinds: str) -> list[dict]:
        self.refresh()
        with self._lock:
            return [e for e in self.events if e["kind"] in kinds]

    def acks_snapshot(self) -> dict[str, Ack]:
        """chaos.workload.Producer's other question (chaos/faults.py's CutHaLink counts the acks of
        a window): every acknowledged id, stamped in time.monotonic()."""
        return {e["id"]: Ack(CLIENT_NODE, -1, e["t"] - self._wall_minus_monotonic) for e in self.of("ack")}

    def first_ack_after(self, t: float, exclude_node: str | None = None) -> Ack | None:
        """chaos.workload.Producer's question for chaos/faults.py: the first send acknowledged after
        ``t`` (time.monotonic()). The client does not say which broker answered, so ``exclude_node``
        cannot be honoured: after a kill -9 or during a SIGSTOP the broker hit answers nothing itself."""
        self.refresh()
        wall = t + self._wall_minus_monotonic
        with self._lock:
            i = bisect.bisect_right(self._ack_times, wall)
            if i == len(self._ack_times):
                return None
            return Ack(CLIENT_NODE, -1, self._ack_times[i] - self._wall_minus_monotonic)


if __name__ == "__main__":
    sys.exit(main())
