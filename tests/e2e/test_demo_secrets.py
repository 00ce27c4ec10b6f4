"""The demo, run as a user runs it (``python -m controlplane.launcher demo``), prints no secret: not on
its stdout, not in any log of any process it starts (web, worker, beat, Spark, brokers, load). The
secrets are the broker token, the operator's initial password, the audit Spark token, the key of ACL
users' secret keys at rest, and the secret key of an ACL user created through the demo's REST API (which
reaches every broker); the banner names the files that hold the demo's own."""

from __future__ import annotations

import os
import ssl
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from testkit.ports import free_port
from testkit.procs import Process, python, wait_until

pytestmark = pytest.mark.e2e


def _admin_url() -> str:
    return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"


@pytest.fixture
def database():
    name = f"demo_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_admin_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(_admin_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_demo_prints_no_secret_on_stdout_or_in_any_log(tmp_path, database):
    data = tmp_path / "data"
    out = tmp_path / "demo.out"
    env = {
        **os.environ,
        "CONTROLPLANE_DATA_DIR": str(data),
        "DATABASE_URL": database,
        "REDIS_URL": os.environ["REDIS_URL"],
        "REDIS_KEY_PREFIX": f"demo-{uuid.uuid4().hex[:6]}:",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    port = free_port()
    demo_argv = python("-m", "controlplane.launcher", "demo", "--port", str(port), "--namesrv-port", str(free_port()))
    demo = Process("demo", demo_argv, out, env)
    demo.start()
    try:
        wait_until(lambda: demo.check_alive() and "Ctrl-C stops everything" in out.read_text(), 240, "the demo's banner", 0.5)
        # The brokers register and the load runs a while: every process has written its log.
        wait_until(lambda: "Replica group" in out.read_text(), 60, "the demo's broker lines", 0.5)
        admin = {"Authorization": f"Bearer {(data / 'demo-admin.token').read_text().strip()}"}
        created = httpx.post(
            f"https://127.0.0.1:{port}/api/v1/clusters/DemoCluster/acl/users",
            json={"username": "demo-app"},
            headers=admin,
            verify=ssl.create_default_context(cafile=data / "tls" / "ca.pem"),
            timeout=30,
        )
        assert created.status_code == 200, created.text
        secrets = {
            "broker token": (data / "demo-broker.token").read_text().strip(),
            "operator password": (data / "operator-password").read_text().strip(),
            "ACL key": (data / "acl.keys").read_text().strip(),
            "ACL user's secret key": created.json()["password"],
        }
        spark_token = data / "audit-spark.token"
        if spark_token.exists():
            secrets["audit Spark token"] = spark_token.read_text().strip()
        assert all(len(s) >= 16 for s in secrets.values()), "a secret file is empty or short"
        for path in (data / "demo-broker.token", data / "operator-password", data / "acl.keys"):
            assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
        written = {out: out.read_text(errors="replace")}
        for path in Path(data / "logs").rglob("*"):
            if path.is_file():
                written[path] = path.read_text(errors="replace")
        assert len(written) >= 4, sorted(map(str, written))  # stdout, web, worker, beat at least
        leaks = [f"{what} in {path}" for path, text in written.items() for what, secret in secrets.items() if secret in text]
        assert leaks == []
        assert "demo-broker.token" in written[out]  # the banner names the file instead
        # over TLS with the demo's own CA (docs/acl.md "TLS"): its key and the brokers' kept private
        assert "https://127.0.0.1:" in written[out] and "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH" in written[out]
        for key in (data / "tls").glob("*-key.pem"):
            assert key.stat().st_mode & 0o077 == 0, f"{key} is readable by others"
    finally:
        demo.stop()
