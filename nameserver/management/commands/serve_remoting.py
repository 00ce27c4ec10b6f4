"""``manage.py serve_remoting``: the nameserver's remoting endpoint (RocketMQ's TCP protocol, read-only;
docs/remoting.md). ``--reuse-port`` lets several of these processes listen on one address, the kernel
spreading connections over them. SIGTERM or SIGINT stops it: the socket closes, open connections drop."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from django.core.management.base import BaseCommand

from mqrules.remoting.decoder import MAX_FRAME_LENGTH
from nameserver.remoting import DEFAULT_PORT, EndpointConfig, serve_until


class Command(BaseCommand):
    help = "Serve the nameserver's read-only remoting endpoint (RocketMQ namesrvAddr)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)
        parser.add_argument("--reuse-port", action="store_true", help="SO_REUSEPORT: share the port with other processes")
        parser.add_argument("--max-frame-bytes", type=int, default=MAX_FRAME_LENGTH)
        parser.add_argument("--workers", type=int, default=4, help="threads answering requests")

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config = EndpointConfig(
            host=options["host"],
            port=options["port"],
            reuse_port=options["reuse_port"],
            max_frame_length=options["max_frame_bytes"],
            workers=options["workers"],
        )
        asyncio.run(_run(config))


async def _run(config: EndpointConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve_until(config, stop)
