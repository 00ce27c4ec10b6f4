"""``manage.py serve_remoting``: the nameserver's remoting endpoint (RocketMQ's TCP protocol, read-only;
docs/remoting.md), with the embedded controller's reads (1005, 1006) when this process serves the
controller role, as RocketMQ's namesrv serves its controller with ``enableControllerInNamesrv``. It
lives on the operations floor because it brings the two siblings together: the nameserver's endpoint
takes the controller's handlers from here and never imports them. ``--reuse-port`` lets several of
these processes listen on one address, the kernel spreading connections over them. SIGTERM or SIGINT
stops it: the socket closes, open connections drop."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane.controller import remoting as controller_remoting
from mqrules.remoting.decoder import MAX_FRAME_LENGTH
from nameserver.remoting import DEFAULT_PORT, EndpointConfig, Handler, serve_until

WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def advertised_address(host: str, port: int) -> str:
    """Where clients reach this endpoint, for the controller's metadata answer (mqadmin sends its next
    request there): the bound host, or this machine's address when bound to every interface."""
    if host in WILDCARD_HOSTS:
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    return f"{host}:{port}"


def extra_handlers(address: str) -> dict[int, Handler]:
    """The handlers the nameserver's endpoint serves besides its own, by this process's roles."""
    if "controller" not in settings.CONTROLPLANE_ROLES:
        return {}
    return controller_remoting.handlers(address)


class Command(BaseCommand):
    help = "Serve the nameserver's read-only remoting endpoint (RocketMQ namesrvAddr), with the embedded controller's reads."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)
        parser.add_argument("--reuse-port", action="store_true", help="SO_REUSEPORT: share the port with other processes")
        parser.add_argument("--max-frame-bytes", type=int, default=MAX_FRAME_LENGTH)
        parser.add_argument("--workers", type=int, default=4, help="threads answering requests")
        parser.add_argument(
            "--advertise",
            default=None,
            help="host:port clients reach this endpoint at (the controller's leader address); default: --host:--port",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config = EndpointConfig(
            host=options["host"],
            port=options["port"],
            reuse_port=options["reuse_port"],
            max_frame_length=options["max_frame_bytes"],
            workers=options["workers"],
        )
        address = options["advertise"] or advertised_address(options["host"], options["port"])
        asyncio.run(_run(config, extra_handlers(address)))


async def _run(config: EndpointConfig, handlers: dict[int, Handler]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve_until(config, stop, handlers)
