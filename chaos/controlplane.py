"""The control plane of a chaos run: uvicorn (nameserver + controller + the broker websocket), a
Celery worker and Celery beat, against a database and a Redis key prefix of the run's own. The web
server keeps its port across restarts, so brokers reconnect to the same URL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from bench.common import bench_env, clear_redis_prefix, prepare_database
from tests.procs import ROOT, free_port

from .procs import Process, python, wait_until

START_TIMEOUT_S = 60.0


def standalone_env(name: str) -> dict[str, str]:
    """A fresh, migrated database and an empty Redis key prefix named after ``name`` (bench/common.py's
    scheme: ``rocketmq_ha_bench_<name>``, ``rmqha-bench-<name>:``); DATABASE_URL / REDIS_URL as given."""
    env = bench_env(name)
    prepare_database(env)
    clear_redis_prefix(env)
    return env


class ControlPlane:
    def __init__(self, env: dict[str, str], run_dir: Path, port: int | None = None):
        self.env = env
        self.run_dir = run_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        logs = run_dir / "logs"
        self.web = Process("uvicorn", python(
            "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1", "--port", str(self.port),
            "--ws", "websockets-sansio", "--ws-per-message-deflate", "false", "--no-access-log"), env, logs / "uvicorn.log")
        self.worker = Process("celery-worker", python(
            "-m", "celery", "-A", "controlplane", "worker", "-l", "INFO", "--concurrency", "1", "--pool", "solo",
            "--without-gossip", "--without-mingle", "--without-heartbeat"), env, logs / "celery-worker.log")
        self.beat = Process("celery-beat", python(
            "-m", "celery", "-A", "controlplane", "beat", "-l", "INFO", "--schedule", str(run_dir / "celerybeat-schedule")),
            env, logs / "celery-beat.log")

    @property
    def processes(self) -> list[Process]:
        return [self.web, self.worker, self.beat]

    def start(self) -> None:
        self.start_web()
        self.worker.start()
        self.beat.start()
        wait_until(lambda: self._check_alive(self.worker, self.beat) and "ready" in self.worker.log_tail(400),
                   START_TIMEOUT_S, "the Celery worker ready")

    def start_web(self) -> float:
        """Start uvicorn and wait until /healthz answers; returns the seconds that took."""
        self.web.start()
        return wait_until(lambda: self._check_alive(self.web) and
                          httpx.get(self.url + "/healthz", timeout=1).status_code == 200, START_TIMEOUT_S, "uvicorn /healthz")

    @staticmethod
    def _check_alive(*procs: Process) -> bool:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited early (exit code {p.popen.returncode}):\n{p.log_tail()}")
        return True

    def stop(self) -> None:
        for p in (self.beat, self.worker, self.web):
            p.stop()

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``manage.py`` against the run's database."""
        return subprocess.run(python("manage.py", *args), cwd=ROOT, env=self.env, capture_output=True, text=True,
                              check=check, timeout=120)

    def issue_token(self, name: str, scope: str) -> str:
        return self.manage("create_api_token", "--name", name, "--scope", scope).stdout.strip().splitlines()[-1]
