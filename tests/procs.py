"""Start real control-plane processes (uvicorn, Celery worker, Celery beat) for a test.

They run against the test database that pytest-django created (so tests that use them need
``transaction=True``) and the test Redis key prefix, bind to 127.0.0.1, and are stopped by the
fixture that started them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import dj_database_url
import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    db = dict(dj_database_url.parse(settings.DATABASE_URL))
    db_url = settings.DATABASE_URL.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    if "?" in settings.DATABASE_URL.rsplit("/", 1)[1]:
        db_url += "?" + settings.DATABASE_URL.rsplit("?", 1)[1]
    assert db["NAME"] != connection.settings_dict["NAME"] or "test" in db["NAME"]
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        REDIS_URL=settings.REDIS_URL,
        DJANGO_SETTINGS_MODULE="controlplane.settings_test",
        TEST_REDIS_KEY_PREFIX=settings.REDIS_KEY_PREFIX,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class Proc:
    def __init__(self, name: str, args: list[str], env: dict[str, str]):
        ARTIFACTS.mkdir(exist_ok=True)
        self.name = name
        self.log_path = ARTIFACTS / f"{name}-{os.getpid()}-{time.time_ns()}.log"
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        self._log.close()


@contextmanager
def uvicorn_server(**env_extra: str):
    """A real ASGI server (uvicorn + Channels) on a free port; yields its base URL."""
    port = free_port()
    proc = Proc(
        "uvicorn",
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--ws", "websockets-sansio", "--ws-per-message-deflate", "false", "--no-access-log"],
        child_env(**env_extra),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"uvicorn exited early:\n{proc.log_tail()}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not answer within 60 s:\n{proc.log_tail()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.stop()


@contextmanager
def celery_worker_and_beat():
    """A real Celery worker and a real Celery beat running the project's schedule."""
    env = child_env()
    schedule = ARTIFACTS / f"beat-schedule-{os.getpid()}-{time.time_ns()}"
    worker = Proc(
        "celery-worker",
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-l", "INFO", "--concurrency", "1",
         "--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env,
    )
    beat = Proc(
        "celery-beat",
        [sys.executable, "-m", "celery", "-A", "controlplane", "beat", "-l", "INFO", "--schedule", str(schedule)],
        env,
    )
    try:
        deadline = time.monotonic() + 60
        while "ready" not in worker.log_tail(200):
            for p in (worker, beat):
                if p.popen.poll() is not None:
                    raise RuntimeError(f"{p.name} exited early:\n{p.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery worker not ready within 60 s:\n{worker.log_tail()}")
            time.sleep(0.2)
        yield worker, beat
    finally:
        beat.stop()
        worker.stop()
        for suffix in ("", ".db", ".dat", ".dir", ".bak"):
            Path(str(schedule) + suffix).unlink(missing_ok=True)
