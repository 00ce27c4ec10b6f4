"""The process harness shared by tests, chaos runs, benchmarks and the launcher.

A child runs in a session (process group) of its own with its output in a log file, so a signal
reaches it and its children only (a terminal's Ctrl-C reaches only whoever started it), and it is
stopped by its own id: SIGTERM, a grace period, then SIGKILL of whatever is left in its group.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
STOP_TIMEOUT_S = 20.0
LEFTOVER_GRACE_S = 2.0  # after the leader exits: SIGTERM to the rest of its group, then SIGKILL


class ProcessDied(RuntimeError):
    """A child exited while we waited for it to become ready."""


def python(*args: str) -> list[str]:
    """argv for a Python child with this interpreter (the project's virtualenv)."""
    return [sys.executable, *args]


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (httpx.HTTPError, OSError, ValueError, KeyError),
) -> float:
    """Poll ``predicate`` until truthy; return the seconds it took, or raise TimeoutError naming ``what``.

    Exceptions of the ``tolerate`` types count as "not yet" (a component restarting); others, such as
    ProcessDied from :meth:`Process.check_alive`, end the wait at once.
    """
    start = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except tolerate:
            pass
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{what} not seen within {timeout_s:g} s")
        time.sleep(interval_s)


def http_ok(url: str, timeout_s: float = 1.0, ca: Path | None = None) -> bool:
    """The URL answers 200 (False on any connection error); https checked against ``ca`` (a PEM CA
    file; None: the system's roots)."""
    verify = ssl.create_default_context(cafile=str(ca)) if ca is not None else True
    try:
        return httpx.get(url, timeout=timeout_s, verify=verify).status_code == 200
    except httpx.HTTPError:
        return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on the port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _load_prctl() -> Callable[[int, int], int] | None:
    """libc ``prctl`` on Linux (loaded before any fork, so the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> Callable[[], None]:
    """Runs in the forked child: SIGTERM when the parent dies, even by SIGKILL (Linux only)."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:  # the parent died between fork and prctl
                os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class Process:
    """One child process; restartable (same name, argv and log file).

    ``term_leader_only``: SIGTERM goes to the leader only, so that e.g. Celery does its warm
    shutdown of its pool; otherwise to the whole group. ``die_with_parent``: the child gets
    PR_SET_PDEATHSIG (for long-lived parents such as the launcher; a multi-threaded parent should not
    use it, since it runs code between fork and exec).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        cwd: Path = ROOT,
        term_leader_only: bool = False,
        die_with_parent: bool = False,
    ):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.term_leader_only = term_leader_only
        self.die_with_parent = die_with_parent
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._terminated = False

    def __repr__(self) -> str:
        return f"Process({self.name!r}, pid={self.popen.pid if self.popen else None})"

    def start(self) -> Process:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n===== {self.name} start #{self.starts + 1} at {stamp}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()) if self.die_with_parent else None,
            )
        self.starts += 1
        self._terminated = False
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def group_alive(self) -> bool:
        if self.popen is None:
            return False
        try:
            os.killpg(self.popen.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def signal(self, sig: int) -> None:
        """Signal the whole process group (a no-op once it is gone)."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def check_alive(self) -> bool:
        """True, or ProcessDied with the end of the log (for use inside a wait_until predicate)."""
        if not self.alive():
            code = self.returncode
            raise ProcessDied(f"{self.name} exited early (exit code {code}):\n{self.log_tail()}")
        return True

    def kill9(self) -> None:
        """kill -9 of the whole process group; returns once the process is reaped."""
        if self.alive():
            self.signal(signal.SIGKILL)
            assert self.popen is not None
            self.popen.wait(timeout=10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def terminate(self) -> None:
        """SIGCONT (in case it is stopped), then SIGTERM once; does not wait."""
        if not self.alive() or self._terminated:
            return
        self._terminated = True
        self.signal(signal.SIGCONT)
        if self.term_leader_only:
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
        else:
            self.signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; then the group's leftovers. Returns the exit code."""
        if self.popen is None:
            return None
        self.terminate()
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait(timeout=10)
        if self.group_alive():  # e.g. a pool process or a grandchild: ask, then insist
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + LEFTOVER_GRACE_S
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.signal(signal.SIGKILL)
        return self.popen.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def wait_http(self, url: str, timeout_s: float = 60.0, ca: Path | None = None) -> float:
        """Wait until ``url`` answers 200 while the process lives (https: checked against ``ca``); the
        seconds that took."""
        return wait_until(
            lambda: self.check_alive() and http_ok(url, ca=ca), timeout_s, f"{self.name} answering {url}", interval_s=0.2
        )

    def wait_port(self, port: int, timeout_s: float = 60.0, host: str = "127.0.0.1") -> float:
        """Wait until the port accepts connections while the process lives; the seconds that took."""
        return wait_until(
            lambda: self.check_alive() and port_open(port, host), timeout_s, f"{self.name} listening on {host}:{port}"
        )

    def wait_log(self, text: str, timeout_s: float = 60.0, lines: int = 400) -> float:
        """Wait until ``text`` appears in the end of the log while the process lives."""
        return wait_until(
            lambda: self.check_alive() and text in self.log_tail(lines),
            timeout_s,
            f"{text!r} in the log of {self.name}",
            interval_s=0.2,
        )


def stop_all(processes: Iterable[Process], timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int | None]:
    """Stop several at once: SIGTERM to all first, then wait for each within one shared deadline."""
    procs = list(processes)
    for p in procs:
        p.terminate()
    deadline = time.monotonic() + timeout_s
    return {p.name: p.stop(max(0.1, deadline - time.monotonic())) for p in procs}
