"""The official RocketMQ Node.js client (npm ``rocketmq-client-nodejs``, pinned in
clients/nodejs/package.json and installed by ``make doctor``) as a load in a process of its own:
clients/nodejs/client.mjs runs a Producer or a SimpleConsumer and writes the same JSON-lines events
as chaos/official_client.py, so :class:`chaos.official_client.EventLog` reads them back.

The access point is one address (the Node client cannot use several: it joins them into one gRPC
target that grpc-js cannot resolve). What the client does on failover is in docs/failover.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from testkit.procs import ROOT, Process

CLIENT_DIR = ROOT / "clients" / "nodejs"
SCRIPT = CLIENT_DIR / "client.mjs"
PACKAGE = CLIENT_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json"


class NodeClientMissing(RuntimeError):
    """Node.js or the npm package is not installed here."""


def node_binary(package: Path = PACKAGE, missing: type[RuntimeError] = NodeClientMissing) -> str:
    """The ``node`` to run a client whose npm ``package`` (its package.json) is installed, or
    ``missing`` with the one line that says what to do."""
    node = shutil.which("node")
    if node is None:
        raise missing("node is not installed: run make doctor (it says what to install)")
    if not package.is_file():
        client = package.parent.parent.parent  # <client>/node_modules/<package>/package.json
        raise missing(f"{package.parent} is missing: run make doctor (it installs {client.name} with npm ci)")
    return node


def node_client_process(role: str, name: str, log_dir: Path, *options: str) -> Process:
    """A Process running ``node clients/nodejs/client.mjs <role> <options>``; its output in
    ``log_dir/<name>.log`` and the client library's log in ``log_dir/<name>-rocketmq.log``."""
    argv = [node_binary(), str(SCRIPT), role, *options, "--client-log", str(log_dir / f"{name}-rocketmq.log")]
    return Process(name, argv, log_dir / f"{name}.log", cwd=CLIENT_DIR)
