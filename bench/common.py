"""What every benchmark needs: its own database and Redis prefix, migrated, and a real server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent


def bench_env(name: str) -> dict[str, str]:
    """Environment for a benchmark: DATABASE_URL / REDIS_URL as given (the launcher sets them), but a
    database and Redis key prefix of the benchmark's own, so a demo's data is never touched."""
    base_db = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rocketmq_ha")
    stem, _, query = base_db.partition("?")
    db_url = stem.rsplit("/", 1)[0] + f"/rocketmq_ha_bench_{name}" + (f"?{query}" if query else "")
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        REDIS_KEY_PREFIX=f"rmqha-bench-{name}:",
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        PYTHONUNBUFFERED="1",
    )
    return env


def prepare_database(env: dict[str, str]) -> None:
    """Create the benchmark database afresh and migrate it."""
    url = env["DATABASE_URL"]
    name = url.partition("?")[0].rsplit("/", 1)[1]
    admin_url = url.partition("?")[0].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)


def setup_django(env: dict[str, str]) -> None:
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "REDIS_KEY_PREFIX", "DJANGO_SETTINGS_MODULE")})
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def clear_redis_prefix(env: dict[str, str]) -> None:
    import redis

    client = redis.Redis.from_url(env["REDIS_URL"])
    keys = list(client.scan_iter(env["REDIS_KEY_PREFIX"] + "*", count=1000))
    if keys:
        client.delete(*keys)


@contextmanager
def server(env: dict[str, str], port: int, workers: int = 1, ws_impl: str = "websockets-sansio"):
    log = open(ROOT / ".data" / f"bench-uvicorn-{port}.log", "wb") if (ROOT / ".data").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers), "--ws", ws_impl, "--ws-per-message-deflate", "false", "--loop", "uvloop",
         "--http", "httptools", "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the control plane did not start; see .data/bench-uvicorn-*.log")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        # The whole process group: with --workers > 1, uvicorn's workers are its children.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def paced(call, start_wall: float, stop_wall: float, rate: float) -> list[float]:
    """Open loop: ``call(k)`` at ``rate`` per second from one wall-clock instant to another (a slow
    call does not lower the offered rate); returns each call's latency in ms."""
    latencies: list[float] = []
    k, next_at = 0, start_wall
    while next_at < stop_wall:
        delay = next_at - time.time()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        call(k)
        latencies.append((time.perf_counter() - t0) * 1000)
        k += 1
        next_at += 1 / rate
    return latencies


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]
