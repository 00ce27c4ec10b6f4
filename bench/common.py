"""What every benchmark needs: its own database and Redis prefix, migrated, and a real server."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.controlplane import clear_redis_prefix, running_web
from testkit.controlplane import fresh_database as prepare_database
from testkit.controlplane import standalone_env as bench_env
from testkit.pacing import Pace
from testkit.procs import ARTIFACTS, ROOT

__all__ = ["ROOT", "bench_env", "clear_redis_prefix", "paced", "prepare_database", "server", "server_log_dir", "setup_django"]


def setup_django(env: dict[str, str]) -> None:
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "DJANGO_SETTINGS_MODULE")})
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def server_log_dir() -> Path:
    """Where a bench's server processes log: the demo's .data/ when there is one, else test-artifacts/."""
    return ROOT / ".data" if (ROOT / ".data").is_dir() else ARTIFACTS


@contextmanager
def server(env: dict[str, str], port: int | None = None, workers: int = 1, ws_impl: str = "websockets-sansio") -> Iterator[str]:
    """The control plane's web server (uvloop + httptools, as in the demo) until the block ends; yields its URL.
    ``port``: None for a reserved one (testkit.ports)."""
    with running_web(env, server_log_dir(), port=port, workers=workers, ws=ws_impl, fast=True, log_level="warning") as url:
        yield url


def paced(call, start_wall: float, stop_wall: float, rate: float) -> list[float]:
    """Open loop: ``call(k)`` at ``rate`` per second from one wall-clock instant to another (a slow
    call does not lower the offered rate); returns each call's latency in ms."""
    latencies: list[float] = []
    k, pace = 0, Pace(1 / rate, start_wall)
    while pace.next_at < stop_wall:
        delay = pace.wait_s(time.time())
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        call(k)
        latencies.append((time.perf_counter() - t0) * 1000)
        k += 1
        pace.advance(time.time())
    return latencies


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc), None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
