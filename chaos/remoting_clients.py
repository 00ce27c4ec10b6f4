"""Two real RocketMQ *remoting* clients (issue 36 item 4) as loads in processes of their own, each
installed by ``make doctor``:

- the C++ client: PyPI ``rocketmq`` (rocketmq-client-cpp 1.2.x, librocketmq inside the wheel), in the
  virtualenv clients/remoting-py/.venv, driven by clients/remoting-py/client.py;
- ali-ons (npm, pure JavaScript), in clients/remoting-node/node_modules, driven by
  clients/remoting-node/client.js.

Both find brokers through a nameserver remoting address (``--namesrv``) and write the JSON-lines events
of chaos/official_client.py (``ack``, ``fail``, ``delivery``, ``started``, ``stopped``, ...), so
:class:`chaos.official_client.EventLog` reads them back; each driver's header lists its events and
options. What they send on the wire is in docs/remoting-clients.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.procs import ROOT, Process

from .node_client import node_binary
from .official_client import EventLog

CLIENTS = ROOT / "clients"
PY_CLIENT_DIR = CLIENTS / "remoting-py"
PY_PYTHON = PY_CLIENT_DIR / ".venv" / "bin" / "python"
PY_SCRIPT = PY_CLIENT_DIR / "client.py"
NODE_CLIENT_DIR = CLIENTS / "remoting-node"
NODE_SCRIPT = NODE_CLIENT_DIR / "client.js"
NODE_PACKAGE = NODE_CLIENT_DIR / "node_modules" / "ali-ons" / "package.json"


class RemotingClientMissing(RuntimeError):
    """A remoting test client (or what runs it) is not installed here."""


def remoting_py_python() -> Path:
    """The C++ client's interpreter, or RemotingClientMissing with the one line that says what to do."""
    if not PY_PYTHON.exists() or not any(PY_CLIENT_DIR.glob(".venv/lib/python*/site-packages/rocketmq/librocketmq.so")):
        raise RemotingClientMissing(f"the rocketmq C++ client is not installed in {PY_PYTHON.parent.parent}: run make doctor")
    return PY_PYTHON


def remoting_node_binary() -> str:
    """The ``node`` that runs ali-ons, or RemotingClientMissing with the one line that says what to do."""
    return node_binary(NODE_PACKAGE, RemotingClientMissing)


def remoting_py_process(role: str, name: str, log_dir: Path, *options: str) -> Process:
    """A Process running ``client.py <role> <options>`` with the C++ client's virtualenv; its output in
    ``log_dir/<name>.log``. The C++ library logs to ``$HOME/logs/rocketmq-cpp/`` whatever it is told,
    so HOME is ``log_dir/<name>-home`` (the library's log ends up under it)."""
    home = log_dir / f"{name}-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # nothing of the project's virtualenv: its rocketmq package is another
    argv = [str(remoting_py_python()), str(PY_SCRIPT), role, *options]
    return Process(name, argv, log_dir / f"{name}.log", env, cwd=PY_CLIENT_DIR)


def remoting_node_process(role: str, name: str, log_dir: Path, *options: str) -> Process:
    """A Process running ``node client.js <role> <options>``; its output in ``log_dir/<name>.log`` and
    ali-ons' own log in ``log_dir/<name>-ali-ons.log``."""
    argv = [remoting_node_binary(), str(NODE_SCRIPT), role, *options, "--client-log", str(log_dir / f"{name}-ali-ons.log")]
    return Process(name, argv, log_dir / f"{name}.log", cwd=NODE_CLIENT_DIR)


@contextmanager
def remoting_client(
    kind: str, role: str, name: str, log_dir: Path, namesrv: str, topic: str, *options: str
) -> Iterator[tuple[Process, EventLog]]:
    """One driver process of ``kind`` (``cpp``: PyPI rocketmq, ``node``: ali-ons) running ``role`` on
    ``topic``, its events in ``log_dir/<name>.jsonl``; stopped on the way out."""
    out = log_dir / f"{name}.jsonl"
    build = remoting_py_process if kind == "cpp" else remoting_node_process
    proc = build(role, name, log_dir, "--namesrv", namesrv, "--topic", topic, "--out", str(out), *options)
    proc.start()
    try:
        yield proc, EventLog(out)
    finally:
        proc.stop()
