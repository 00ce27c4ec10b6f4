"""Durable small files: write to a temporary file, fsync it, rename over the old one, fsync the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomically(path: Path, body: object) -> None:
    write_text_atomically(path, json.dumps(body))


def write_text_atomically(path: Path, text: str, encoding: str | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding=encoding) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
