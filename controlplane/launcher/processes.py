"""The control plane's own processes: ``manage.py`` commands, and the long-running web server (uvicorn),
Celery worker, Celery beat and the audits' resident Spark."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from testkit.certs import CertFiles
from testkit.controlplane import celery_beat_argv, celery_worker_argv, remoting_argv, uvicorn_argv
from testkit.procs import Process, http_ok, python, wait_until

from .common import (
    BASE_DIR,
    DATA_DIR,
    LOG_DIR,
    LauncherError,
    Watched,
    child_env,
    display_path,
    first_dead,
    log,
    report_death,
    start_child,
    tail,
)

HEALTH_TIMEOUT = 120.0  # first start on a 2-core box: migrations + Celery imports take a while


def manage(args: list[str], *, log_path: Path | None = None, allow_unknown: bool = False) -> bool:
    """Run ``manage.py <args>``; output to the terminal, or to ``log_path`` (shown on failure).

    Returns False only when ``allow_unknown`` and Django says the command does not exist.
    """
    argv = [sys.executable, str(BASE_DIR / "manage.py"), *args]
    if log_path is None:
        result = subprocess.run(argv, cwd=BASE_DIR, env=child_env(), stderr=subprocess.PIPE, text=True)
        output = result.stderr
        sys.stderr.write(output)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as fh:
            fh.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} manage.py {' '.join(args)}\n")
            fh.flush()
            result = subprocess.run(argv, cwd=BASE_DIR, env=child_env(), stdout=fh, stderr=subprocess.STDOUT)
        output = tail(log_path, 30)
    if result.returncode == 0:
        return True
    if allow_unknown and f"Unknown command: '{args[0]}'" in output:
        return False
    shown = "" if log_path is None else f"; last lines of {display_path(log_path)}:\n{output}"
    raise LauncherError(f"`manage.py {' '.join(args)}` failed (exit code {result.returncode}){shown}")


def start_control_plane(
    port: int, remoting_port: int, env: dict[str, str], audit_spark_port: int | None, tls: CertFiles | None = None
) -> list[Process]:
    """web (uvicorn; https / wss with ``tls``), the nameserver's remoting endpoint (RocketMQ clients'
    namesrvAddr), a Celery worker (two processes) and beat; the audits' resident Spark
    (spark_jobs/server.py) when ``audit_spark_port`` is given."""
    specs = [
        ("web", uvicorn_argv(port, fast=True, tls=tls)),
        ("namesrv-remoting", remoting_argv(remoting_port)),
        ("worker", celery_worker_argv(concurrency=2)),
        ("beat", celery_beat_argv(DATA_DIR / "celerybeat-schedule")),
    ]
    if audit_spark_port is not None:
        server = python("-m", "spark_jobs.server", "--port", str(audit_spark_port), "--token-file", env["AUDIT_SPARK_TOKEN_FILE"])
        specs.append(("audit-spark", server))
    children = []
    for name, argv in specs:
        child = start_child(name, argv, env)
        children.append(child)
        log(f"started {name} (pid {child.pid}, log {display_path(child.log_path)})")
    return children


def wait_healthy(url: str, watched: Sequence[Watched], ca: Path | None = None) -> None:
    """Poll /healthz until 200 (https: its certificate checked against ``ca``), bailing out early if a
    child or service dies meanwhile."""

    def healthy() -> bool:
        dead = first_dead(watched)
        if dead is not None:
            report_death(dead)
            raise LauncherError(f"{dead.name} died during startup")
        return http_ok(url, timeout_s=3, ca=ca)

    try:
        wait_until(healthy, HEALTH_TIMEOUT, url, interval_s=0.5)
    except TimeoutError:
        raise LauncherError(
            f"{url} did not answer 200 within {HEALTH_TIMEOUT:.0f}s; last lines of the web log:\n" + tail(LOG_DIR / "web.log")
        ) from None


def ready_banner(
    base: str,
    namesrv_addr: str,
    token_path: Path,
    admin_token_path: Path | None = None,
    prometheus_url: str | None = None,
    ca: Path | None = None,
) -> str:
    """The block a demo user needs: where to click (the dashboard, the demo's Prometheus when it runs),
    who to log in as, where the broker token is, how to run the command line; with ``ca`` (TLS), the
    CA to trust and how the official clients take it."""
    password_file = DATA_DIR / "operator-password"
    login = "operator"
    if password_file.exists():
        login += f"  (initial password in {display_path(password_file)})"
    token = display_path(token_path) if token_path.exists() else "not created (see the messages above)"
    rows = [
        ("Dashboard", f"{base}/"),
        *([("Prometheus", f"{prometheus_url}/  (alerts: {prometheus_url}/alerts; docs/metrics.md)")] if prometheus_url else []),
        ("namesrvAddr", f"{namesrv_addr}  (RocketMQ remoting, read-only; docs/remoting.md)"),
        ("API docs", f"{base}/api/docs/"),
        ("Login", login),
        ("Broker token", token),
        ("Logs", f"{display_path(LOG_DIR)}/"),
    ]
    trust = ""
    if ca is not None:
        trust = f"SSL_CERT_FILE={display_path(ca)} "
        rows.append(("TLS CA", f"{display_path(ca)}  (trust it in the browser, or: curl --cacert; docs/acl.md)"))
        rows.append(("gRPC clients", f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={display_path(ca)} and tls_enable=True"))
    if admin_token_path is not None and admin_token_path.exists():
        rmqha = f"{trust}RMQHA_URL={base} .venv/bin/rmqha --token-file {display_path(admin_token_path)}"
        rows.append(("Command line", f"{rmqha} clusterList"))
    rule = "=" * 72
    body = "\n".join(f"  {label:<13} {value}" for label, value in rows)
    title = "RocketMQ HA control plane demo is running"
    return f"\n{rule}\n  {title}\n\n{body}\n\n  Ctrl-C stops everything.\n{rule}\n"
