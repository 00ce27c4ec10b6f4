"""The official RocketMQ 5 Python client (rocketmq-python-client) with a user's credentials, in a process
of its own, for tests/e2e/test_acl.py: one operation, one JSON line on stdout.

    python -m tests.e2e.acl_client send --access 127.0.0.1:8081 --ak alice --sk s --topic T [--count N]
    python -m tests.e2e.acl_client receive --access 127.0.0.1:8081 --ak alice --sk s --topic T --group G [--want N]

``send`` answers ``{"sent": n, "code": c, "error": e}``: how many sends were acknowledged before the first
refusal, and its code (the client's exception's, e.g. 40300) or null. ``receive`` answers
``{"received": n, "acked": n, "code": c, "error": e}``: the messages received and acked until ``--want``
or a refusal. The client stamps x-mq-date-time with its local time: the test runs it with TZ=UTC.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time


def _quiet(path: str | None) -> None:
    from rocketmq.v5.log import logger

    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(logging.FileHandler(path) if path else logging.NullHandler())


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return int(code) if isinstance(code, int) else None


def send(args) -> dict:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(args.access, Credentials(args.ak, args.sk), request_timeout=5), (args.topic,))
    sent = 0
    try:
        producer.startup()
        for i in range(args.count):
            msg = Message()
            msg.topic, msg.body = args.topic, f"{args.ak}-{i}".encode()
            producer.send(msg)
            sent += 1
    except Exception as exc:  # the refusal under test: reported, not raised
        return {"sent": sent, "code": _code(exc), "error": str(exc)[:300]}
    finally:
        producer.shutdown()
    return {"sent": sent, "code": None, "error": None}


def receive(args) -> dict:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(args.access, Credentials(args.ak, args.sk), request_timeout=5)
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression()}, await_duration=2)
    received = acked = 0
    try:
        consumer.startup()
        deadline = time.monotonic() + args.timeout_s
        while received < args.want and time.monotonic() < deadline:
            for message in consumer.receive(16, 15) or ():
                received += 1
                consumer.ack(message)
                acked += 1
    except Exception as exc:
        return {"received": received, "acked": acked, "code": _code(exc), "error": str(exc)[:300]}
    finally:
        consumer.shutdown()
    return {"received": received, "acked": acked, "code": None, "error": None}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("op", choices=("send", "receive"))
    parser.add_argument("--access", required=True)
    parser.add_argument("--ak", required=True)
    parser.add_argument("--sk", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--want", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=20)
    parser.add_argument("--client-log")
    args = parser.parse_args(argv)
    _quiet(args.client_log)
    answer = send(args) if args.op == "send" else receive(args)
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
