"""What every part of the launcher shares: the data folder, messages, signal handling, and children
(testkit's process harness, with the launcher's stop policy)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from testkit.procs import Process, stop_all

BASE_DIR = Path(__file__).resolve().parent.parent.parent
# Same rule as controlplane/settings.py, so the launcher and Django agree on the data folder.
DATA_DIR = Path(os.environ.get("CONTROLPLANE_DATA_DIR", BASE_DIR / ".data")).resolve()
LOG_DIR = DATA_DIR / "logs"
STOP_TIMEOUT = 15.0  # Celery warm shutdown waits for running tasks; don't wait forever


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


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    env["PYTHONUNBUFFERED"] = "1"  # child logs reach .data/logs as they happen
    return env


# --- signals -----------------------------------------------------------------------------------------

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


def enter_stopping() -> None:
    """From here on, signals must not interrupt the cleanup itself."""
    global _stopping
    _stopping = True
    install_signal_handlers()


# --- children and what must stay up --------------------------------------------------------------------


def start_child(name: str, argv: list[str], env: dict[str, str] | None = None, log_path: Path | None = None) -> Process:
    """A long-running child in its own process group, logging to .data/logs/<name>.log.

    SIGTERM goes to the leader only (Celery then does its warm shutdown of its pool); the child dies
    with the launcher even when the launcher is killed with SIGKILL (PR_SET_PDEATHSIG).
    """
    child = Process(
        name, argv, log_path or LOG_DIR / f"{name}.log", env, cwd=BASE_DIR, term_leader_only=True, die_with_parent=True
    )
    try:
        return child.start()
    except OSError as exc:
        raise LauncherError(f"cannot start {name} ({argv[0]}): {exc}") from None


def stop_children(children: Sequence[Process], timeout: float = STOP_TIMEOUT, quiet: bool = False) -> None:
    """Graceful stop: SIGTERM each leader, wait, then SIGKILL every remaining process group member."""
    running = [c for c in children if c.alive()]
    if running and not quiet:
        log("stopping " + ", ".join(c.name for c in running) + " ...")
    stop_all(children, timeout)
    late = [c.name for c in running if c.returncode == -signal.SIGKILL]
    if late and not quiet:
        log(f"{', '.join(late)} did not stop within {timeout:.0f}s; killed")


def ensure_port_free(port: int, host: str = "127.0.0.1", variable: str = "PORT") -> None:
    """Fail before migrating anything if a port (the web's, the remoting endpoint's) is taken, with a
    hint how to pick another (``variable``: the environment variable that chooses it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does; ignores TIME_WAIT
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LauncherError(
                f"port {port} on {host} is not available ({exc.strerror}). Another demo may be running;"
                f" stop it or choose another port, e.g. `{variable}={port + 1} make demo`."
            ) from None


@dataclass
class Watched:
    """Something that must stay up while we run (embedded service or child)."""

    name: str
    alive: Callable[[], bool]
    log_path: Path
    returncode: Callable[[], int | None] = lambda: None


def watch(child: Process) -> Watched:
    return Watched(child.name, child.alive, child.log_path, lambda: child.returncode)


def first_dead(watched: Sequence[Watched]) -> Watched | None:
    return next((w for w in watched if not w.alive()), None)


def report_death(dead: Watched) -> None:
    code = dead.returncode()
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


def run_until_death(watched: Sequence[Watched], *, interval_s: float, consequence: str) -> None:
    """Block until one watched process dies (Ctrl-C ends the wait through the signal handlers); then
    show its log tail and raise LauncherError("<name> died<consequence>")."""
    while True:
        dead = first_dead(watched)
        if dead is not None:
            report_death(dead)
            raise LauncherError(f"{dead.name} died{consequence}")
        time.sleep(interval_s)


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
