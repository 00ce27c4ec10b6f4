"""Broker processes as tests, chaos runs, benchmarks and the demo start them: reserved ports, a
``broker.conf`` written by the brokers' own renderer (RocketMQ's camelCase keys), ``python -m brokers``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from brokers.config import render_conf
from brokers.store.cuts import MARKER

from .ports import free_port
from .procs import Process, python


@dataclass(frozen=True)
class BrokerPorts:
    """The ports a broker listens on, reserved for this process (testkit.ports): its metrics' too, so
    brokers on one machine do not all ask for RocketMQ's 5557."""

    listen: int
    ha: int
    grpc: int
    metrics: int = 0  # 0: the broker picks a free one (reported as status.metricsAddr)

    @classmethod
    def reserve(cls) -> BrokerPorts:
        return cls(free_port(), free_port(), free_port(), free_port())

    def keys(self) -> dict[str, int]:
        return {
            "listenPort": self.listen,
            "haListenPort": self.ha,
            "grpcServerPort": self.grpc,
            "metricsPromExporterPort": self.metrics,
        }


def broker_keys(
    name: str,
    root: Path,
    ports: BrokerPorts,
    control_plane_url: str,
    *,
    cluster: str = "DefaultCluster",
    token: str | None = None,
    token_file: Path | None = None,
    **more: object,
) -> dict[str, object]:
    """The keys every broker needs, then ``more`` (RocketMQ's names, e.g. ``brokerId=1``), in that order."""
    keys: dict[str, object] = {
        "brokerClusterName": cluster,
        "brokerName": name,
        **ports.keys(),
        "storePathRootDir": root,
        "controlPlaneUrl": control_plane_url,
    }
    if token_file is not None:
        keys["controlPlaneTokenFile"] = token_file
    else:
        keys["controlPlaneToken"] = token if token is not None else "unused"
    return keys | more


def write_broker_conf(path: Path, keys: Mapping[str, object], extra_lines: Sequence[str] = ()) -> Path:
    """Write ``keys`` (plus verbatim ``key=value`` lines, e.g. from a command line) as a broker.conf."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_conf(keys) + "".join(f"{line}\n" for line in extra_lines))
    return path


def unreachable_control_plane() -> str:
    """A control-plane URL nobody answers (a reserved port nobody listens on): for brokers that only
    serve clients or replicate in classic mode."""
    return f"http://127.0.0.1:{free_port()}"


def broker_argv(conf: Path, log_level: str | None = None) -> list[str]:
    """``python -m brokers -c <conf>``."""
    return python("-m", "brokers", "-c", str(conf)) + (["--log-level", log_level] if log_level else [])


def broker_process(
    name: str, conf: Path, log_path: Path, env: dict[str, str] | None = None, *, log_level: str | None = None
) -> Process:
    """A broker as a (not yet started) :class:`Process`; its log is watched for the guard's marker."""
    return Process(name, broker_argv(conf, log_level), watch_broker_log(log_path), env)


# --- the acknowledged-data guard (brokers/store/cuts.py) -------------------------------------------------
# A broker logs MARKER when it refused to cut acknowledged data or copied bytes that are no record: a
# test or a chaos run whose brokers logged it fails, whatever else it checked.

_broker_logs: set[Path] = set()


def watch_broker_log(log_path: Path) -> Path:
    """Remember ``log_path`` as a broker's log (broker_process does; so must any other way of starting one)."""
    _broker_logs.add(Path(log_path))
    return log_path


def broker_log_ends() -> dict[Path, int]:
    """Where each watched log ends now: ``guard_errors(since=...)`` reads only what came after."""
    return {p: p.stat().st_size if p.exists() else 0 for p in _broker_logs}


def guard_errors(since: Mapping[Path, int] | None = None, logs: Iterable[Path] | None = None) -> list[str]:
    """The lines carrying the guard's marker in the watched broker logs (or ``logs``), past ``since``."""
    found = []
    for path in sorted(_broker_logs if logs is None else logs):
        if not path.exists():
            continue
        with open(path, "rb") as f:
            f.seek((since or {}).get(path, 0))
            found += [f"{path.name}: {line.strip()}" for line in f.read().decode(errors="replace").splitlines() if MARKER in line]
    return found
