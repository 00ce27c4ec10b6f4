"""Processes of a chaos run: each in its own process group, logging to a file in the run's folder,
stoppable by its own id only (SIGTERM, then SIGKILL), and faultable (kill -9, SIGSTOP / SIGCONT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.procs import ROOT


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05) -> float:
    """Poll ``predicate`` until truthy; return the seconds it took, or raise TimeoutError naming ``what``."""
    start = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass  # a component restarting: keep polling until the deadline
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{what} not seen within {timeout_s:g} s")
        time.sleep(interval_s)


class Process:
    """One child process in a session of its own, so a signal reaches it and its children only."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_path
        self.popen: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> Process:
        if self.alive():
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {self.name} start #{self.starts + 1} at {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.popen = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.killpg(self.pid, sig)

    def kill9(self) -> None:
        """kill -9 of the whole process group; returns once the process is reaped."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 20) -> int | None:
        """SIGTERM (after a SIGCONT, in case it is stopped), then SIGKILL; returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGCONT)
                os.killpg(self.pid, signal.SIGTERM)
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
            except ProcessLookupError:
                pass
        return self.popen.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
