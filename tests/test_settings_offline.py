"""Settings and app loading reach no service: the unit tier (and `manage.py check`) run with Postgres
and Redis out of reach. Both URLs point at a socket this test listens on; nobody may connect to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
LOAD = """
import django
django.setup()
from django.conf import settings
from django.urls import get_resolver
get_resolver().url_patterns  # every app's urls and views
import controlplane.asgi  # the websocket routing and consumers
print(settings.DATABASES["default"]["PORT"], settings.REDIS_URL)
"""


def test_settings_and_every_app_load_without_connecting_to_postgres_or_redis():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="controlplane.settings_test",
            DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/none",
            REDIS_URL=f"redis://127.0.0.1:{port}/0",
        )
        run = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == [str(port), f"redis://127.0.0.1:{port}/0"]
        with pytest.raises(TimeoutError):
            conn, _ = listener.accept()
            conn.close()
