"""ASGI entry point: Django for HTTP, Channels for the broker and dashboard websockets."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from controlplane.ws import BrokerConsumer  # noqa: E402
from dashboards.live import DashboardConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
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
