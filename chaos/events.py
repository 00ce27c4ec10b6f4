"""The JSON-lines event file a client driver writes while its parent reads it (``EventLog`` in
chaos/official_client.py). The standard library only: the remoting C++ client's driver imports it from
a virtualenv of its own (clients/remoting-py/client.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class EventWriter:
    """One JSON line per event, flushed at once (the parent reads the file while the child runs). A
    client library's callbacks run on its own threads, hence the lock."""

    def __init__(self, path: Path):
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()

    def write(self, kind: str, **fields: object) -> None:
        line = json.dumps({"t": time.time(), "kind": kind, **fields}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
