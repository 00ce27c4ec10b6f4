"""A tmpfs of a chosen size, for tests and benchmarks of the disk ratios (retention, a full disk):
``mount -t tmpfs`` needs root (CI and the docker image run as root); anything else fails at once
with one line saying so."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class TmpfsUnavailable(RuntimeError):
    pass


@contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """``path`` with a tmpfs of ``size_bytes`` mounted on it; unmounted (lazily, so a process still
    holding a file cannot keep it) when the block ends."""
    if os.geteuid() != 0:
        raise TmpfsUnavailable("mounting a tmpfs needs root: run the tests as root (as CI and the docker image do)")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        raise TmpfsUnavailable(f"mount -t tmpfs at {path} failed: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
