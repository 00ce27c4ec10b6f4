"""The control plane's processes (uvicorn, Celery worker, Celery beat) as tests, chaos runs, benchmarks
and the launcher start them, and a database plus Redis key prefix of a run's own.

Only command lines, sockets and files: nothing here imports Django.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .ports import free_port
from .procs import ROOT, Process, python, stop_all, wait_until

CELERY_APP = "controlplane.celery"
START_TIMEOUT_S = 60.0


def uvicorn_argv(
    port: int, *, workers: int = 1, ws: str = "websockets-sansio", fast: bool = False, log_level: str | None = None
) -> list[str]:
    """uvicorn serving the ASGI app on 127.0.0.1; ``fast``: uvloop + httptools (the demo, benchmarks)."""
    argv = python(
        "-m",
        "uvicorn",
        "controlplane.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ws",
        ws,
        "--ws-per-message-deflate",
        "false",
        "--no-access-log",
    )
    if workers != 1:
        argv += ["--workers", str(workers)]
    if fast:
        argv += ["--loop", "uvloop", "--http", "httptools"]
    if log_level:
        argv += ["--log-level", log_level]
    return argv


def celery_worker_argv(concurrency: int = 1) -> list[str]:
    """A Celery worker on the default queue; one process (solo pool, no gossip) unless ``concurrency`` > 1."""
    argv = python("-m", "celery", "-A", CELERY_APP, "worker", "-l", "INFO", "--concurrency", str(concurrency), "-Q", "celery")
    if concurrency == 1:
        argv += ["--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    return argv


def celery_beat_argv(schedule: Path) -> list[str]:
    return python("-m", "celery", "-A", CELERY_APP, "beat", "-l", "INFO", "--schedule", str(schedule))


class ControlPlane:
    """uvicorn + a Celery worker + Celery beat against ``env``'s database and Redis, logs under
    ``log_dir``. The web server keeps its port across restarts, so brokers reconnect to the same URL."""

    def __init__(self, env: dict[str, str], log_dir: Path, port: int | None = None, *, tag: str = ""):
        """``tag``: appended to the log and beat-schedule file names (several control planes, one folder)."""
        self.env = env
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.beat_schedule = log_dir / f"celerybeat-schedule{tag}"
        self.web = Process("uvicorn", uvicorn_argv(self.port), log_dir / f"uvicorn{tag}.log", env)
        self.worker = Process(
            "celery-worker", celery_worker_argv(), log_dir / f"celery-worker{tag}.log", env, term_leader_only=True
        )
        self.beat = Process("celery-beat", celery_beat_argv(self.beat_schedule), log_dir / f"celery-beat{tag}.log", env)

    @property
    def processes(self) -> list[Process]:
        return [self.web, self.worker, self.beat]

    def start(self) -> None:
        self.start_web()
        self.start_celery()

    def start_web(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Start uvicorn and wait until /healthz answers; returns the seconds that took."""
        self.web.start()
        return self.web.wait_http(self.url + "/healthz", timeout_s)

    def start_celery(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.worker.start()
        self.beat.start()
        wait_until(
            lambda: self.beat.check_alive() and self.worker.check_alive() and "ready" in self.worker.log_tail(400),
            timeout_s,
            "the Celery worker ready",
            interval_s=0.2,
        )

    def stop(self) -> None:
        stop_all([self.beat, self.worker, self.web])
        for suffix in ("", ".db", ".dat", ".dir", ".bak"):
            Path(str(self.beat_schedule) + suffix).unlink(missing_ok=True)

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``manage.py`` against the control plane's database."""
        return subprocess.run(
            python("manage.py", *args), cwd=ROOT, env=self.env, capture_output=True, text=True, check=check, timeout=120
        )

    def issue_token(self, name: str, scope: str) -> str:
        return self.manage("create_api_token", "--name", name, "--scope", scope).stdout.strip().splitlines()[-1]


@contextmanager
def running_web(
    env: dict[str, str], log_dir: Path, *, port: int | None = None, timeout_s: float = START_TIMEOUT_S, **uvicorn_options
) -> Iterator[str]:
    """uvicorn on a reserved port until the block ends; yields its base URL. ``uvicorn_options``: see uvicorn_argv."""
    port = port or free_port()
    web = Process("uvicorn", uvicorn_argv(port, **uvicorn_options), log_dir / f"uvicorn-{port}-{os.getpid()}.log", env)
    url = f"http://127.0.0.1:{port}"
    try:
        web.start().wait_http(url + "/healthz", timeout_s)
        yield url
    finally:
        web.stop()


# --- a database and Redis key prefix of a run's own ---------------------------------------------------


def standalone_env(name: str, settings_module: str = "controlplane.settings") -> dict[str, str]:
    """Environment for a benchmark or a chaos run: DATABASE_URL / REDIS_URL as given (the launcher sets
    them), but a database ``rocketmq_ha_bench_<name>`` and a Redis key prefix ``rmqha-bench-<name>:`` of
    its own, so a demo's data is never touched. Call :func:`fresh_database` and :func:`clear_redis_prefix`
    to start from nothing."""
    base_db = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rocketmq_ha")
    stem, _, query = base_db.partition("?")
    db_url = stem.rsplit("/", 1)[0] + f"/rocketmq_ha_bench_{name}" + (f"?{query}" if query else "")
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        REDIS_KEY_PREFIX=f"rmqha-bench-{name}:",
        DJANGO_SETTINGS_MODULE=settings_module,
        PYTHONUNBUFFERED="1",
    )
    return env


def fresh_database(env: dict[str, str]) -> None:
    """Create ``env``'s database afresh and migrate it."""
    import psycopg

    url = env["DATABASE_URL"]
    name = url.partition("?")[0].rsplit("/", 1)[1]
    admin_url = url.partition("?")[0].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(python("manage.py", "migrate", "--noinput", "-v0"), cwd=ROOT, env=env, check=True)


def clear_redis_prefix(env: dict[str, str]) -> None:
    """Delete every Redis key under ``env``'s REDIS_KEY_PREFIX."""
    import redis

    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        keys = list(client.scan_iter(env["REDIS_KEY_PREFIX"] + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def fresh_standalone_env(name: str) -> dict[str, str]:
    """:func:`standalone_env`, with the database created and migrated and the key prefix emptied."""
    env = standalone_env(name)
    fresh_database(env)
    clear_redis_prefix(env)
    return env
