"""testkit.ports across processes: pickers in different processes, all scanning from the same first
candidate at once, never get the same port; a reservation ends with its process."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from testkit import ports
from testkit.procs import ROOT

pytestmark = pytest.mark.e2e

PICKER = """
import json, random, sys
random.randrange = lambda n: 0
from testkit.ports import free_port
print(json.dumps([free_port() for _ in range({count})]), flush=True)
sys.stdin.read()  # hold the reservations until the test closes stdin
"""


def start_picker(count: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PICKER.format(count=count)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_reservations_in_several_processes_never_overlap(monkeypatch):
    monkeypatch.setattr(random, "randrange", lambda n: 0)
    pickers = [start_picker(40) for _ in range(3)]
    mine = [ports.free_port() for _ in range(40)]
    try:
        theirs = [json.loads(p.stdout.readline()) for p in pickers]
        everything = mine + [port for picked in theirs for port in picked]
        assert len(everything) == 160 and len(set(everything)) == 160
        low, high = ports.ephemeral_range()
        assert not any(low <= port <= high for port in everything)
        assert all(ports._try_lock(port) is None for port in theirs[0])  # held by a live process
    finally:
        for p in pickers:
            p.stdin.close()
            p.wait(timeout=30)
        for port in mine:
            ports.release_port(port)
    fd = ports._try_lock(theirs[0][0])  # the picker exited: its reservations went with it
    assert fd is not None
    ports.os.close(fd)
