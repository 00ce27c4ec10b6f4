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

from .balancer import Balancer
from .certs import CertFiles
from .ports import free_port
from .procs import ROOT, Process, http_ok, python, stop_all, wait_until

CELERY_APP = "controlplane.celery"
START_TIMEOUT_S = 60.0


def uvicorn_argv(
    port: int,
    *,
    host: str = "127.0.0.1",
    workers: int = 1,
    ws: str = "websockets-sansio",
    fast: bool = False,
    log_level: str | None = None,
    tls: CertFiles | None = None,
) -> list[str]:
    """uvicorn serving the ASGI app on ``host`` (e.g. a test network's address, testkit.netns);
    ``fast``: uvloop + httptools (the demo, benchmarks); ``tls``: https / wss with this certificate
    (testkit/certs.py)."""
    argv = python(
        "-m",
        "uvicorn",
        "controlplane.asgi:application",
        "--host",
        host,
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
    if tls is not None:
        argv += ["--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    return argv


def remoting_argv(port: int, *, host: str = "127.0.0.1", reuse_port: bool = False) -> list[str]:
    """The nameserver's remoting endpoint (RocketMQ's namesrvAddr, docs/remoting.md); ``reuse_port``:
    one of several processes sharing the port."""
    argv = python(str(ROOT / "manage.py"), "serve_remoting", "--host", host, "--port", str(port))
    return argv + ["--reuse-port"] if reuse_port else argv


@contextmanager
def remoting_nameserver(env: dict[str, str], log_dir: Path, port: int | None = None) -> Iterator[str]:
    """``manage.py serve_remoting`` on ``env``'s database and Redis prefix until the block ends (what a
    remoting client calls namesrvAddr); yields its address. ``port``: None for a reserved one."""
    port = port or free_port()
    proc = Process(f"ns-remoting-{port}", remoting_argv(port), log_dir / f"ns-remoting-{port}-{os.getpid()}.log", env)
    try:
        proc.start().wait_port(port, START_TIMEOUT_S)
        yield f"127.0.0.1:{port}"
    finally:
        proc.stop()


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

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        port: int | None = None,
        *,
        tag: str = "",
        host: str = "127.0.0.1",
        fast: bool = False,
    ):
        """``tag``: appended to the process names and to the log and beat-schedule file names (several
        control planes, one folder). ``host``: the address uvicorn binds and ``url`` names (it must be
        in ``env``'s DJANGO_ALLOWED_HOSTS). ``fast``: uvloop + httptools, as the demo serves."""
        self.env = env
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self.beat_schedule = log_dir / f"celerybeat-schedule{tag}"
        argv = uvicorn_argv(self.port, host=host, fast=fast)
        self.web = Process(f"uvicorn{tag}", argv, log_dir / f"uvicorn{tag}.log", env)
        self.worker = Process(
            f"celery-worker{tag}", celery_worker_argv(), log_dir / f"celery-worker{tag}.log", env, term_leader_only=True
        )
        self.beat = Process(f"celery-beat{tag}", celery_beat_argv(self.beat_schedule), log_dir / f"celery-beat{tag}.log", env)

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
        wait_until(self.celery_ready, timeout_s, "the Celery worker ready", interval_s=0.2)

    def celery_ready(self) -> bool:
        """Beat alive and the worker ready (ProcessDied when either exited)."""
        return self.beat.check_alive() and self.worker_ready()

    def worker_ready(self) -> bool:
        """The worker alive (ProcessDied otherwise) and ready since its latest start: its log is
        appended across restarts, so an earlier start's "ready" does not count."""
        since_start = self.worker.log_tail(400).rpartition(f"===== {self.worker.name} start #")[2]
        return self.worker.check_alive() and "ready" in since_start

    def stop(self) -> None:
        stop_all([self.beat, self.worker, self.web])
        self.forget_beat_schedule()

    def forget_beat_schedule(self) -> None:
        for suffix in ("", ".db", ".dat", ".dir", ".bak"):
            Path(str(self.beat_schedule) + suffix).unlink(missing_ok=True)

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``manage.py`` against the control plane's database."""
        return subprocess.run(
            python("manage.py", *args), cwd=ROOT, env=self.env, capture_output=True, text=True, check=check, timeout=120
        )

    def issue_token(self, name: str, scope: str) -> str:
        return self.manage("create_api_token", "--name", name, "--scope", scope).stdout.strip().splitlines()[-1]


class ScaledControlPlane:
    """``size`` web processes behind one address (a :class:`~testkit.balancer.Balancer`), ``size``
    Celery workers and ``size`` beats against one database and Redis: the production topology of
    docs/operations.md ("Production topology") on one machine. ``url`` is the balancer's, the one
    address brokers and tools know; each web process keeps its own port across restarts, so the
    balancer finds it again. Member ``i`` (from 1) logs to ``uvicorn-i.log``, ``celery-worker-i.log``
    and ``celery-beat-i.log``."""

    def __init__(self, env: dict[str, str], log_dir: Path, size: int = 2):
        self.env = env
        self.members = [ControlPlane(env, log_dir, tag=f"-{i}") for i in range(1, size + 1)]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.balancer = Balancer([("127.0.0.1", m.port) for m in self.members], port=self.port)

    @property
    def webs(self) -> list[Process]:
        return [m.web for m in self.members]

    @property
    def workers(self) -> list[Process]:
        return [m.worker for m in self.members]

    @property
    def beats(self) -> list[Process]:
        return [m.beat for m in self.members]

    @property
    def processes(self) -> list[Process]:
        return self.webs + self.workers + self.beats

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Every process at once, then wait until each web answers and each worker is ready."""
        self.balancer.start()
        for p in self.processes:
            p.start()
        for m in self.members:
            m.web.wait_http(m.url + "/healthz", timeout_s)
        wait_until(lambda: all(m.celery_ready() for m in self.members), timeout_s, "every Celery worker ready", interval_s=0.2)

    def serving(self, process: Process) -> bool:
        """One of the processes serves (e.g. restarted after a kill -9): a web process answers, a
        worker is ready, a beat is alive (ProcessDied when it exited)."""
        member = next(m for m in self.members if process in m.processes)
        if process is member.web:
            return process.check_alive() and http_ok(member.url + "/healthz")
        return member.worker_ready() if process is member.worker else process.check_alive()

    def stop(self) -> None:
        stop_all(self.beats + self.workers + self.webs)
        self.balancer.stop()
        for m in self.members:
            m.forget_beat_schedule()

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.members[0].manage(*args, check=check)

    def issue_token(self, name: str, scope: str) -> str:
        return self.members[0].issue_token(name, scope)


@contextmanager
def running_web(
    env: dict[str, str],
    log_dir: Path,
    *,
    port: int | None = None,
    timeout_s: float = START_TIMEOUT_S,
    ca: Path | None = None,
    **uvicorn_options,
) -> Iterator[str]:
    """uvicorn on a reserved port until the block ends; yields its base URL. ``uvicorn_options``: see
    uvicorn_argv (with ``tls``, the URL is https and its readiness is checked against ``ca``)."""
    port = port or free_port()
    web = Process("uvicorn", uvicorn_argv(port, **uvicorn_options), log_dir / f"uvicorn-{port}-{os.getpid()}.log", env)
    url = f"{'https' if uvicorn_options.get('tls') else 'http'}://127.0.0.1:{port}"
    try:
        web.start().wait_http(url + "/healthz", timeout_s, ca=ca)
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
