"""The ``demo`` command: migrate, bootstrap the operator, then the control plane and a replica group
of brokers until Ctrl-C."""

from __future__ import annotations

from testkit.ports import free_port
from testkit.procs import Process

from .common import (
    DATA_DIR,
    LOG_DIR,
    child_env,
    display_path,
    ensure_port_free,
    enter_stopping,
    log,
    run_until_death,
    stop_children,
    watch,
)
from .demo_brokers import start_demo_brokers
from .processes import manage, ready_banner, start_control_plane, wait_healthy
from .services import resolve_services

DEFAULT_PORT = 8000
DEFAULT_REMOTING_PORT = 9876  # RocketMQ's namesrv port


def cmd_demo(port: int, remoting_port: int = DEFAULT_REMOTING_PORT) -> int:
    """migrate + collectstatic + bootstrap, then web, the remoting endpoint, worker and beat until Ctrl-C."""
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

        ensure_port_free(port)  # re-check: setup took a while
        ensure_port_free(remoting_port, variable="NAMESRV_PORT")
        env = child_env()
        # The audits' resident Spark (spark_jobs/server.py), unless one is configured: runs then skip
        # starting and warming a JVM of their own.
        audit_spark_port = None
        if not env.get("AUDIT_SPARK_REMOTE"):
            audit_spark_port = free_port()
            env["AUDIT_SPARK_REMOTE"] = f"sc://localhost:{audit_spark_port}"
            env.setdefault("AUDIT_SPARK_TOKEN_FILE", str(DATA_DIR / "audit-spark.token"))
        children += start_control_plane(port, remoting_port, env, audit_spark_port)
        watched = [watch(c) for c in children] + services.watched

        base = f"http://127.0.0.1:{port}"
        log(f"waiting for {base}/healthz ...")
        wait_healthy(f"{base}/healthz", watched)

        brokers = start_demo_brokers(base, token_path, env) if token_path.exists() else []
        children += [b.process for b in brokers]
        print(ready_banner(base, f"127.0.0.1:{remoting_port}", token_path, admin_token_path), flush=True)
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
