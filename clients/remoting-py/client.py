"""The RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4: rocketmq-client-cpp 1.2.x, librocketmq inside the
wheel), a *remoting* client, as a load in a process of its own: a producer that sends one message at a
time, or a push consumer (concurrent or orderly). It finds brokers through a nameserver's remoting
endpoint (``--namesrv``) and writes the same JSON-lines events as chaos/official_client.py, so that
``chaos.official_client.EventLog`` reads them back (chaos/remoting_clients.py starts this script).

Run by clients/remoting-py/.venv/bin/python (``make doctor`` makes it): the wheel's top-level package
``rocketmq`` would shadow the project's ``rocketmq-python-client``. Standard library + ``rocketmq`` only.

    client.py produce --namesrv 127.0.0.1:9876 --topic T --out producer.jsonl [--count N] [--orderly-key K]
    client.py consume --namesrv 127.0.0.1:9876 --topic T --group G --out consumer.jsonl [--orderly]

Events (every line has ``t``, seconds since the epoch, and ``kind``):
  producer  ``ack``  {id, sent, msg_id, offset}   send_sync / send_orderly answered SEND_OK
            ``fail`` {id, sent, error}            it raised (the client's own retries spent), or
                                                  answered another status (``error`` names it; the
                                                  message may be stored but is not acknowledged)
  consumer  ``delivery`` {id, msg_id, attempt, queue_id, queue_offset, tags}   the listener was called
            ``progress`` {received, distinct, first, last}   instead of ``delivery``, every ``--progress-ms``:
                                                  deliveries so far, distinct (queue id, queue offset)
                                                  among them, the first and the latest one's time
            ``route_ok`` {topic, queues} | ``route_fail`` {topic, error}   see ``wait_for_route``
  both      ``started`` | ``start_fail`` {error} | ``stopped`` | ``crash`` {error}

``id`` is ``<prefix><sequence>``: the message's user property ``HA_ID`` and the start of its body (the
body is padded with ``.`` to ``--body-bytes``); ``msg_id`` is what the client calls the message id
(``SendResult.msg_id``, the message's UNIQ_KEY, which names no broker; ``RecvMessage.id`` on delivery);
``attempt`` is the message's reconsume times + 1.

The C++ client logs to ``$HOME/logs/rocketmq-cpp/`` (its log path setters do nothing in 1.2.x):
chaos/remoting_clients.py sets HOME to a folder of the run. SIGTERM / SIGINT stop the loop, the client
is shut down, then ``stopped`` is written.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: chaos/events.py (standard library only)
from chaos.events import EventWriter  # noqa: E402

ID_PROPERTY = "HA_ID"
PAD = b"."


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def body_of(message_id: str, body_bytes: int) -> bytes:
    head = message_id.encode()
    return head + PAD * max(0, body_bytes - len(head))


def id_of(message) -> str:
    """The sender's id: the user property, else the body up to its padding."""
    value = message.get_property(ID_PROPERTY)
    if value:
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return message.body.split(PAD, 1)[0].decode(errors="replace")


def key_selector(mq_size: int, _message, arg) -> int:
    """send_orderly's queue selector: the ``--orderly-key``'s hash (passed as the int argument)."""
    import ctypes

    return ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0] % mq_size


def stable_hash(key: str) -> int:
    """A non-negative 31-bit hash that does not change between runs (Python's str hash does)."""
    h = 0
    for byte in key.encode():
        h = (h * 31 + byte) & 0x7FFFFFFF
    return h


def produce(args: argparse.Namespace, events: EventWriter, stop: threading.Event) -> None:
    from rocketmq.client import Message, Producer, SendStatus

    producer = Producer(args.group, timeout=args.timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    try:
        producer.start()
    except Exception as exc:
        events.write("start_fail", error=describe(exc))
        return
    events.write("started")
    seq = 0
    while not stop.is_set() and (args.count == 0 or seq < args.count):
        message_id = f"{args.id_prefix}{seq:09d}"
        seq += 1
        msg = Message(args.topic)
        msg.set_body(body_of(message_id, args.body_bytes))
        msg.set_property(ID_PROPERTY, message_id)
        msg.set_keys(message_id)
        if args.tags:
            msg.set_tags(args.tags)
        if args.delay_level:
            msg.set_delay_time_level(args.delay_level)
        sent = time.time()
        try:
            if args.orderly_key is not None:
                result = producer.send_orderly(msg, stable_hash(args.orderly_key), queue_selector=key_selector)
            else:
                result = producer.send_sync(msg)
        except Exception as exc:  # the client's own retries are spent
            events.write("fail", id=message_id, sent=sent, error=describe(exc))
        else:
            if result.status is SendStatus.OK:
                events.write("ack", id=message_id, sent=sent, msg_id=result.msg_id, offset=result.offset)
            else:
                events.write("fail", id=message_id, sent=sent, error=f"send status {result.status.name}", msg_id=result.msg_id)
        if args.interval_ms:
            stop.wait(args.interval_ms / 1000)
    if args.count and not stop.is_set():
        stop.wait()  # --count reached: stay until told, so the parent sees one "stopped" in either case
    producer.shutdown()
    events.write("stopped", sent=seq)


def consume(args: argparse.Namespace, events: EventWriter, stop: threading.Event) -> None:
    from rocketmq.client import PushConsumer

    consumer = PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_thread_count(args.thread_count)
    received = 0
    counter = threading.Lock()
    seen: set[tuple[int, int]] = set()  # --progress-ms: (queue id, queue offset) of each delivery
    span: list[float] = []  # --progress-ms: the first and the latest delivery's time

    def on_message(message) -> None:
        nonlocal received
        if args.progress_ms:
            at, key = time.time(), (message.queue_id, message.queue_offset)
            with counter:
                received += 1
                seen.add(key)
                span[1:] = [at] if span else [at, at]
            return
        with counter:
            received += 1
        events.write(
            "delivery",
            id=id_of(message),
            msg_id=message.id,
            attempt=message.reconsume_times + 1,
            queue_id=message.queue_id,
            queue_offset=message.queue_offset,
            tags=(message.tags or b"").decode(errors="replace"),
        )
        if args.consume_ms:
            time.sleep(args.consume_ms / 1000)  # a slow consumer: messages wait in the queue

    try:
        consumer.subscribe(args.topic, on_message, args.tags or "*")
        consumer.start()
    except Exception as exc:
        events.write("start_fail", error=describe(exc))
        return
    events.write("started")
    wait_for_route(args, events, stop)
    while not stop.wait(args.progress_ms / 1000 if args.progress_ms else None):
        with counter:
            if span:
                events.write("progress", received=received, distinct=len(seen), first=span[0], last=span[1])
    consumer.shutdown()
    events.write("stopped", received=received)


def route_queues(probe, topic: str) -> int:
    """How many queues the client library finds in the topic's route (0: the nameserver has none)."""
    import ctypes

    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import _CMessageQueue, dll

    queues, size = ctypes.POINTER(_CMessageQueue)(), ctypes.c_int()
    ffi_check(dll.FetchSubscriptionMessageQueues(probe._handle, topic.encode(), ctypes.pointer(queues), ctypes.pointer(size)))
    dll.ReleaseSubscriptionMessageQueue(queues)
    return size.value


def wait_for_route(args: argparse.Namespace, events: EventWriter, stop: threading.Event) -> None:
    """The push consumer says nothing when its topic has no route (it polls the nameserver every 30 s
    and pulls nothing): ask the library's own route lookup, through a pull consumer of a group of its
    own, until the route is there (``route_ok`` {topic, queues}) or we are stopped, writing
    ``route_fail`` {topic, error} every ``--route-check-ms``. The probe heartbeats its group to the
    brokers of the route once found, then unregisters it."""
    from rocketmq.client import PullConsumer

    probe = PullConsumer(f"{args.group}-route-probe")
    probe.set_namesrv_addr(args.namesrv)
    probe.start()
    try:
        while not stop.is_set():
            try:
                queues = route_queues(probe, args.topic)
            except Exception as exc:
                events.write("route_fail", topic=args.topic, error=describe(exc))
            else:
                if queues:
                    events.write("route_ok", topic=args.topic, queues=queues)
                    return
                events.write("route_fail", topic=args.topic, error="the nameserver has no route for the topic")
            stop.wait(args.route_check_ms / 1000)
    finally:
        probe.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    for role in ("produce", "consume"):
        s = sub.add_parser(role)
        s.add_argument("--namesrv", required=True, help='the nameserver\'s remoting address(es): "host:port;host:port"')
        s.add_argument("--topic", required=True)
        s.add_argument("--out", required=True, help="the JSON-lines event file (appended to)")
        s.add_argument("--tags", default="", help="producer: the messages' tag; consumer: the subscription expression")
    produce_args, consume_args = sub.choices["produce"], sub.choices["consume"]
    produce_args.add_argument("--group", default="remoting-py-producer", help="the producer group")
    produce_args.add_argument("--count", type=int, default=0, help="messages to send, then wait for SIGTERM (0: until SIGTERM)")
    produce_args.add_argument("--interval-ms", type=float, default=5.0, help="pause after each send")
    produce_args.add_argument("--id-prefix", default="m-")
    produce_args.add_argument("--body-bytes", type=int, default=0, help="pad each body to this size")
    produce_args.add_argument("--delay-level", type=int, default=0, help="the DELAY property (1 = 1 s, 2 = 5 s, ...)")
    produce_args.add_argument("--orderly-key", help="send_orderly: every message to the queue this key hashes to")
    produce_args.add_argument("--timeout-ms", type=int, default=3000, help="the producer's send timeout")
    consume_args.add_argument("--group", required=True, help="the consumer group")
    consume_args.add_argument("--orderly", action="store_true", help="an orderly push consumer (it locks its queues)")
    consume_args.add_argument("--thread-count", type=int, default=2)
    consume_args.add_argument("--consume-ms", type=float, default=0.0, help="time each message takes to consume")
    consume_args.add_argument("--route-check-ms", type=int, default=2000, help="while the topic has no route")
    consume_args.add_argument(
        "--progress-ms", type=int, default=0, help="no delivery events: a progress event this often (a load of many messages)"
    )
    args = p.parse_args(argv)

    stop = stop_on_signals()
    events = EventWriter(Path(args.out))
    try:
        (produce if args.role == "produce" else consume)(args, events, stop)
    except Exception as exc:
        events.write("crash", error=describe(exc))
        return 1
    finally:
        events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
