"""A Prometheus for the demo and the end-to-end tests (docs/metrics.md): its configuration, starting it,
and the shipped monitoring files it loads (``docs/monitoring/``).

- ``write_config``: the two jobs of docs/metrics.md, ``rocketmq-ha-controlplane`` (the web process's
  ``/metrics``) and ``rocketmq-broker`` (found through the control plane's HTTP service discovery, or a
  static list), the shipped alert rules, one scrape interval.
- ``start`` / ``wait_ready`` / ``reload``: Debian's ``prometheus`` binary in a process group of its own.
- ``fresh_multiproc_dir``: the folder prometheus_client's multiprocess mode shares between the web
  processes and Celery workers of one host, emptied before they start.
- ``dashboard_expressions``: every query of the shipped Grafana dashboard, runnable as plain PromQL.

Nothing here needs Django.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from testkit.ports import free_port
from testkit.procs import Process, http_ok, wait_until

MONITORING_DIR = Path(__file__).resolve().parent.parent.parent / "docs" / "monitoring"
RULES_PATH = MONITORING_DIR / "rocketmq-ha.rules.yml"
DASHBOARD_PATH = MONITORING_DIR / "grafana-dashboard.json"
# Debian's package (make doctor installs it); another one on PATH is used first.
DEBIAN_BINARY = Path("/usr/bin/prometheus")
INSTALL_HINT = "apt-get install prometheus (Debian's package, as root), or make doctor"
CONTROLPLANE_JOB = "rocketmq-ha-controlplane"
BROKER_JOB = "rocketmq-broker"
TARGETS_PATH = "/api/v1/operations/metrics/targets"
READY_TIMEOUT_S = 30.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's multiprocess mode


def find_binary() -> str | None:
    """The prometheus executable: on PATH, else Debian's ``/usr/bin/prometheus``; None when neither."""
    found = shutil.which("prometheus")
    if found:
        return found
    return str(DEBIAN_BINARY) if DEBIAN_BINARY.exists() else None


def _authorization(token: str | None, token_file: Path | None) -> dict[str, str]:
    if (token is None) == (token_file is None):
        raise ValueError("give exactly one of token and token_file")
    if token_file is not None:
        return {"type": "Bearer", "credentials_file": str(Path(token_file).resolve())}
    return {"type": "Bearer", "credentials": str(token)}


def config(
    web_url: str,
    token: str | None,
    rules_path: Path | None = RULES_PATH,
    scrape_interval: str = "5s",
    *,
    token_file: Path | None = None,
    broker_targets: list[str] | None = None,
    ca_file: Path | None = None,
) -> dict:
    """The configuration ``write_config`` writes, as a dict (see there)."""
    web = urllib.parse.urlsplit(web_url.rstrip("/"))
    if web.scheme not in ("http", "https") or not web.netloc:
        raise ValueError(f"web_url must be http(s)://host:port, not {web_url!r}")
    authorization = _authorization(token, token_file)
    controlplane = {
        "job_name": CONTROLPLANE_JOB,
        "scheme": web.scheme,
        "metrics_path": f"{web.path}/metrics",
        "authorization": authorization,
        "static_configs": [{"targets": [web.netloc]}],
    }
    tls = {"tls_config": {"ca_file": str(Path(ca_file).resolve())}} if ca_file is not None else {}
    controlplane.update(tls)
    # honor_labels: the broker's own cluster / broker_addr labels stay as they are (not exported_*); the
    # discovery's broker_name / broker_id are added. The brokers' /metrics take no token: only the
    # discovery request carries it.
    brokers: dict = {"job_name": BROKER_JOB, "honor_labels": True}
    if broker_targets is not None:
        brokers["static_configs"] = [{"targets": list(broker_targets)}]
    else:
        discovery = {
            "url": f"{web_url.rstrip('/')}{TARGETS_PATH}",
            "refresh_interval": scrape_interval,
            "authorization": dict(authorization),
            **tls,
        }
        brokers["http_sd_configs"] = [discovery]
    return {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(Path(rules_path).resolve())] if rules_path is not None else [],
        "scrape_configs": [controlplane, brokers],
    }


def write_config(
    path: Path, web_url: str, token: str | None, rules_path: Path | None = RULES_PATH, scrape_interval: str = "5s", **options
) -> None:
    """Write a Prometheus configuration to ``path`` (mode 600: it may hold the token).

    - ``web_url``: a web process of the control plane, ``http://host:port``; job
      ``rocketmq-ha-controlplane`` scrapes its ``/metrics``.
    - ``token``: an API token of scope read or admin bound to no cluster, sent as ``Authorization:
      Bearer`` to ``/metrics`` and to the discovery; or ``token=None, token_file=...``: Prometheus
      reads it from that file (``credentials_file``), so the secret stays in one place.
    - ``rules_path``: the rule file to load (default: the shipped ``docs/monitoring/rocketmq-ha.rules.yml``,
      or a shortened copy of it); None for none.
    - ``scrape_interval``: also the rules' evaluation interval and the discovery's refresh interval.
    - ``broker_targets``: the brokers' ``host:metricsPort`` as static targets of job ``rocketmq-broker``;
      None (default) discovers them at ``<web_url>/api/v1/operations/metrics/targets`` (HTTP SD).
    - ``ca_file``: the CA that signed an https control plane's certificate (the demo's own).

    ``options``, keyword-only, are ``config``'s: ``token_file``, ``broker_targets``, ``ca_file``.
    """
    body = config(web_url, token, rules_path, scrape_interval, **options)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(
        "# Written by controlplane/launcher/prometheus.py (docs/metrics.md).\n" + yaml.safe_dump(body, sort_keys=False)
    )


@dataclass(frozen=True)
class Prometheus:
    """A started Prometheus: its process (testkit's harness: ``stop()``, ``alive()``, ``log_path``) and its
    base URL, ``http://127.0.0.1:<port>``."""

    process: Process
    url: str


def start(
    config_path: Path,
    storage_path: Path,
    log_path: Path,
    *,
    port: int | None = None,
    binary: str | None = None,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
    name: str = "prometheus",
) -> Prometheus:
    """Start ``prometheus --config.file=config_path --storage.tsdb.path=storage_path`` on 127.0.0.1:``port``
    (None: a reserved free port) with ``--web.enable-lifecycle`` (``reload``), logging to ``log_path``,
    in a process group of its own. Returns at once: ``wait_ready`` waits for it to serve.

    ``binary``: None for ``find_binary()``; FileNotFoundError (with how to install it) when there is none.
    ``die_with_parent``: PR_SET_PDEATHSIG, for a long-lived single-threaded parent such as the launcher.
    """
    binary = binary or find_binary()
    if binary is None:
        raise FileNotFoundError(f"prometheus is not installed: {INSTALL_HINT}")
    port = port or free_port()
    Path(storage_path).mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        f"--config.file={Path(config_path).resolve()}",
        f"--storage.tsdb.path={Path(storage_path).resolve()}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--storage.tsdb.retention.time=2d",
    ]
    process = Process(name, argv, Path(log_path), env, die_with_parent=die_with_parent).start()
    return Prometheus(process, f"http://127.0.0.1:{port}")


def wait_ready(prometheus: Prometheus, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Until ``/-/ready`` answers 200; testkit's ProcessDied (with its log's tail) if it exits first,
    TimeoutError if it is not ready in time."""
    url = f"{prometheus.url}/-/ready"
    wait_until(lambda: prometheus.process.check_alive() and http_ok(url, timeout_s=2), timeout_s, url, interval_s=0.25)


def reload(prometheus: Prometheus, timeout_s: float = 10.0) -> None:
    """Re-read the configuration and the rule files (``POST /-/reload``); raises on an error answer."""
    request = urllib.request.Request(f"{prometheus.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        answer.read()


def fresh_multiproc_dir(path: Path) -> Path:
    """``path`` emptied (created when missing), for ``PROMETHEUS_MULTIPROC_DIR``: files left by the
    processes of an earlier run would be summed with the new ones."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# --- the dashboard's queries -------------------------------------------------------------------------------

_VARIABLE_MATCHER = re.compile(r'(\w+)\s*=~?\s*"\$\{?(\w+)\}?"')


def dashboard_expressions(path: Path = DASHBOARD_PATH, rate_interval: str = "1m") -> list[str]:
    """Every ``targets[].expr`` of the Grafana dashboard at ``path``, in panel order, as plain PromQL: a
    matcher on a template variable (``cluster=~"$cluster"``) matches everything (``cluster=~".*"``), and
    Grafana's ``$__rate_interval`` / ``$__interval`` become ``rate_interval``."""
    dashboard = json.loads(Path(path).read_text())
    expressions = []
    for panel in flat_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if expr:
                expr = _VARIABLE_MATCHER.sub(r'\1=~".*"', expr)
                expressions.append(expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval))
    return expressions


def flat_panels(panels: list[dict]) -> list[dict]:
    """A dashboard's panels in order, a collapsed row's own panels included."""
    flat = []
    for panel in panels:
        flat.append(panel)
        flat.extend(flat_panels(panel.get("panels", [])))
    return flat
