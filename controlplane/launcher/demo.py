"""The ``demo`` command: migrate, bootstrap the operator, then the control plane, a replica group of
brokers and a Prometheus watching them (when installed) until Ctrl-C."""

from __future__ import annotations

from pathlib import Path

from testkit.ports import free_port
from testkit.procs import Process, ProcessDied

from .common import (
    DATA_DIR,
    LOG_DIR,
    LauncherError,
    child_env,
    display_path,
    ensure_port_free,
    enter_stopping,
    log,
    run_until_death,
    stop_children,
    watch,
)
from .demo_brokers import demo_acl_keys, demo_certificates, start_demo_brokers
from .processes import manage, ready_banner, start_control_plane, wait_healthy
from .prometheus import INSTALL_HINT, MULTIPROC_ENV, Prometheus, find_binary, fresh_multiproc_dir, start, wait_ready, write_config
from .services import resolve_services

DEFAULT_PORT = 8000
DEFAULT_REMOTING_PORT = 9876  # RocketMQ's namesrv port


def cmd_demo(port: int, remoting_port: int = DEFAULT_REMOTING_PORT, *, plaintext: bool = False) -> int:
    """migrate + collectstatic + bootstrap, then web, the remoting endpoint, worker and beat until Ctrl-C.
    Over TLS with the demo's own CA (docs/acl.md "TLS"), unless ``plaintext`` (local development)."""
    ensure_port_free(port)
    ensure_port_free(remoting_port, variable="NAMESRV_PORT")
    services = resolve_services()
    children: list[Process] = []
    try:
        setup_log = LOG_DIR / "setup.log"
        log("applying migrations ...")
        manage(["migrate", "--noinput"], log_path=setup_log)
        log("collecting static files ...")
        manage(["collectstatic", "--noinput", "-v", "0"], log_path=setup_log)
        manage(["bootstrap_operator"])
        token_path = DATA_DIR / "demo-broker.token"
        has_token_cmd = manage(
            "create_api_token --name demo-broker --scope broker --if-missing --write-to".split() + [str(token_path)],
            allow_unknown=True,
        )
        if not has_token_cmd:
            log("manage.py create_api_token does not exist yet; no demo broker token was made")
        # An admin token for the command line (rmqha, docs/cli.md): written to its file only, never printed.
        admin_token_path = DATA_DIR / "demo-admin.token"
        manage(
            "create_api_token --name demo-admin --scope admin --if-missing --write-to".split() + [str(admin_token_path)],
            allow_unknown=True,
        )
        # Prometheus's: read-only, into its file; the generated configuration names the file (credentials_file).
        prometheus_token_path = DATA_DIR / "demo-prometheus.token"
        manage(
            "create_api_token --name demo-prometheus --scope read --if-missing --write-to".split() + [str(prometheus_token_path)],
            allow_unknown=True,
        )

        ensure_port_free(port)  # re-check: setup took a while
        ensure_port_free(remoting_port, variable="NAMESRV_PORT")
        env = child_env()
        # ACL users' secret keys are stored encrypted (docs/acl.md): the operator's key, else the demo's own.
        env.setdefault("RMQHA_ACL_KEYS", demo_acl_keys(DATA_DIR / "acl.keys"))
        # The audits' resident Spark (spark_jobs/server.py), unless one is configured: runs then skip
        # starting and warming a JVM of their own.
        audit_spark_port = None
        if not env.get("AUDIT_SPARK_REMOTE"):
            audit_spark_port = free_port()
            env["AUDIT_SPARK_REMOTE"] = f"sc://localhost:{audit_spark_port}"
            env.setdefault("AUDIT_SPARK_TOKEN_FILE", str(DATA_DIR / "audit-spark.token"))
        # prometheus_client's multiprocess mode: web, worker and beat count into one folder, emptied now
        # (docs/metrics.md); the brokers serve their own /metrics and must not write there.
        env.pop(MULTIPROC_ENV, None)
        multiproc = {**env, MULTIPROC_ENV: str(fresh_multiproc_dir(DATA_DIR / "prometheus-multiproc"))}
        tls = None if plaintext else demo_certificates(DATA_DIR / "tls")
        if tls is not None:
            multiproc["DJANGO_HTTPS"] = "1"  # secure cookies, HSTS (docs/acl.md "The control plane's doors")
        children += start_control_plane(port, remoting_port, multiproc, audit_spark_port, tls.control_plane if tls else None)
        watched = [watch(c) for c in children] + services.watched

        base = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
        log(f"waiting for {base}/healthz ...")
        wait_healthy(f"{base}/healthz", watched, ca=tls.ca.cert if tls else None)

        brokers = start_demo_brokers(base, token_path, env, tls) if token_path.exists() else []
        children += [b.process for b in brokers]
        prometheus = start_demo_prometheus(base, prometheus_token_path, tls.ca.cert if tls else None)
        if prometheus is not None:
            children.append(prometheus.process)
            watched.append(watch(prometheus.process))
        prometheus_url = prometheus.url if prometheus is not None else None
        ca = tls.ca.cert if tls else None
        print(ready_banner(base, f"127.0.0.1:{remoting_port}", token_path, admin_token_path, prometheus_url, ca), flush=True)
        if brokers:
            grpc = ", ".join(f"{b.process.name} gRPC 127.0.0.1:{b.grpc_port}" for b in brokers)
            print(
                f"  Replica group demo-a (controller mode, all-ack): {grpc}\n"
                f"  Topic DemoTopic. Kill a broker (kill -9 <pid>, logs in {display_path(LOG_DIR)}/) to watch a failover.\n",
                flush=True,
            )
        run_until_death(watched, interval_s=0.5, consequence="; stopped everything")
    finally:
        enter_stopping()
        stop_children(children)
        services.stop()


def start_demo_prometheus(base: str, token_path: Path, ca: Path | None = None) -> Prometheus | None:
    """Prometheus on a free port of 127.0.0.1 watching the demo (docs/metrics.md: the control plane's
    /metrics, the brokers through the control plane's discovery, the shipped rules, every 5 s), its data
    in .data/prometheus/; None, after one line saying how to install it, when it is not installed."""
    binary = find_binary()
    if binary is None:
        log(f"Prometheus is not installed; the demo runs without it ({INSTALL_HINT})")
        return None
    if not token_path.exists():
        log(f"no {display_path(token_path)}; the demo runs without Prometheus")
        return None
    config_path = DATA_DIR / "prometheus.yml"
    write_config(config_path, base, None, token_file=token_path, ca_file=ca)
    prometheus = start(config_path, DATA_DIR / "prometheus", LOG_DIR / "prometheus.log", binary=binary, die_with_parent=True)
    log(f"started prometheus (pid {prometheus.process.pid}, log {display_path(prometheus.process.log_path)})")
    try:
        wait_ready(prometheus)
    except (ProcessDied, TimeoutError) as exc:
        prometheus.process.stop()
        raise LauncherError(f"Prometheus did not start: {exc}") from None
    return prometheus
