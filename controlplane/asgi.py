"""ASGI entry point: Django for HTTP, Channels for the broker and dashboard websockets."""

import asyncio
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from controlplane.hearing import stamp_web_forever  # noqa: E402
from controlplane.ws import BrokerConsumer  # noqa: E402
from dashboards.live import DashboardConsumer  # noqa: E402
from nameserver.fast_routes import FastRoutes  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": FastRoutes(django_asgi_app),  # routes answered from this process's cache (nameserver/fast_routes.py)
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(
                URLRouter(
                    [
                        path("ws/broker/", BrokerConsumer.as_asgi()),
                        path("ws/dashboard/", DashboardConsumer.as_asgi()),  # session login; live page updates
                    ]
                )
            )
        ),
    }
)


async def application(scope, receive, send):
    """The router, and the ASGI lifespan: while the server runs, this process stamps the hearing record
    (controlplane.hearing.stamp_web_forever), so that the blindness guard knows when the web tier was
    down whatever the brokers' heartbeat patterns."""
    if scope["type"] != "lifespan":
        return await router(scope, receive, send)
    stamping = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            stamping = asyncio.get_running_loop().create_task(stamp_web_forever(), name="web-stamp")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if stamping is not None:
                stamping.cancel()
            await send({"type": "lifespan.shutdown.complete"})
            return
