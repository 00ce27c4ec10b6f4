"""Race-free TCP ports for servers that tests, chaos runs, benchmarks and the demo start.

Binding port 0 and closing the socket again ("bind then release") is a race: between the picker's
close and the server's bind, the kernel may hand the same port to any outgoing connection on the
machine (it picks those from the ephemeral range), or another picker may return it too. Both have
failed CI runs. Here a port is taken

- outside the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), so the kernel
  never gives it to an outgoing connection;
- reserved across processes: an exclusive ``flock`` on one lock file per port in a shared folder,
  held until :func:`release_port` or until the process exits (the kernel drops the lock then, even
  after a SIGKILL), so two pickers never return the same port;
- and only if it is bindable right now (nobody outside this scheme listens on it).

The reservation is held by the process that picked the port, not by the server it hands the port
to: a test that starts a broker keeps the broker's ports for as long as the test process lives.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

LOCK_DIR = Path(os.environ.get("TESTKIT_PORT_DIR") or Path(tempfile.gettempdir()) / "rmqha-ports")
FLOOR = 10000  # below: well-known services (Postgres 5432, Redis 6379, the demo's 8000, ...)
CEILING = 65535
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, for systems without the proc file

_held: dict[int, int] = {}  # port -> fd of its lock file
_mutex = threading.Lock()


class NoFreePort(RuntimeError):
    """Every candidate port is reserved or bound."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (inclusive)."""
    try:
        low, high = (int(v) for v in EPHEMERAL_RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def candidate_ports() -> list[int]:
    """Every port this module may hand out: above FLOOR and outside the ephemeral range."""
    low, high = ephemeral_range()
    return [p for p in range(FLOOR, CEILING + 1) if not low <= p <= high]


def _lock_dir() -> Path:
    if not LOCK_DIR.is_dir():
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # shared by every user of the machine
            LOCK_DIR.chmod(0o1777)
    return LOCK_DIR


def _try_lock(port: int) -> int | None:
    """The fd of the port's lock file, locked by us; None when another holder has it."""
    path = _lock_dir() / f"{port}.lock"
    # Read-only is enough for flock, and works on a file another user created.
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def _bindable(port: int, host: str) -> bool:
    """Nobody listens on or holds the port (the wildcard address also catches 127.0.0.1 users)."""
    for address in {host, "0.0.0.0"}:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is bindable now and reserved for this process until :func:`release_port`."""
    candidates = candidate_ports()
    start = random.randrange(len(candidates))  # spread concurrent pickers over the range
    with _mutex:
        for i in range(len(candidates)):
            port = candidates[(start + i) % len(candidates)]
            if port in _held:
                continue
            fd = _try_lock(port)
            if fd is None:
                continue
            if not _bindable(port, host):
                os.close(fd)
                continue
            _held[port] = fd
            return port
    raise NoFreePort(f"no free port in {FLOOR}-{CEILING} outside the ephemeral range {ephemeral_range()}")


def release_port(port: int) -> None:
    """Give a reservation back (a no-op for a port this process does not hold)."""
    with _mutex:
        fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)  # closing the only fd drops the flock


def held_ports() -> set[int]:
    """The ports this process holds now."""
    with _mutex:
        return set(_held)


@contextlib.contextmanager
def reserved_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port for the duration of a ``with`` block."""
    port = free_port(host)
    try:
        yield port
    finally:
        release_port(port)
