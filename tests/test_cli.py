"""The operator's command line (controlplane/cli/) against a real control plane (uvicorn): static
topics created, shown and remapped with mqadmin's verbs, a preview that changes nothing, a remapping
applied after its confirmation (at the epoch previewed), --json for scripts, and clear errors: no
token, a refused change with its code, a malformed --move. The entry point runs as its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from controlplane.cli import main
from controlplane.models import ApiToken
from tests.nameserver.helpers import register_over_rest
from tests.procs import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SETS = {"cli-a": "127.0.0.1:10911", "cli-b": "127.0.0.1:10921", "cli-c": "127.0.0.1:10931"}


@pytest.fixture
def plane():
    broker = ApiToken.issue("cli-broker", "broker")[1]
    admin = ApiToken.issue("cli-admin", "admin")[1]
    viewer = ApiToken.issue("cli-viewer", "read")[1]
    with uvicorn_server() as base:
        register_over_rest(base, broker, SETS, "cli")
        yield base, admin, viewer


def rmqha(base: str, token: str, *args: str, stdin: str | None = None):
    return CliRunner().invoke(main, ["--url", base, *args], input=stdin, env={"RMQHA_TOKEN": token}, catch_exceptions=False)


def test_static_topics_from_the_command_line(plane):
    base, admin, viewer = plane
    made = rmqha(base, admin, "updateStaticTopic", "-t", "Orders", "-qn", "4", "-b", "cli-a,cli-b")
    assert made.exit_code == 0, made.output
    assert "Orders  epoch 1" in made.output and "cli-a/q0 [0..) writable" in made.output

    listed = json.loads(rmqha(base, admin, "--json", "staticTopicList").output)
    assert [(m["topic"], m["epoch"]) for m in listed["staticTopics"]] == [("Orders", 1)]

    preview = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--move", "0=cli-c", "--preview")
    assert preview.exit_code == 0, preview.output
    assert "this would move" in preview.output and "cli-a/q0" in preview.output and "cli-c/q0" in preview.output
    assert json.loads(rmqha(base, admin, "--json", "staticTopic", "-t", "Orders").output)["epoch"] == 1  # nothing changed

    declined = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--drain", "cli-a", "--to", "cli-c", stdin="n\n")
    assert declined.exit_code == 0 and "nothing changed" in declined.output
    applied = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--drain", "cli-a", "--to", "cli-c", stdin="y\n")
    assert applied.exit_code == 0, applied.output
    assert "epoch 1 -> 2" in applied.output and "old segments stay readable 72 h" in applied.output

    shown = rmqha(base, admin, "staticTopic", "-t", "Orders")
    assert "cli-a/q0 [0..) sealing -> cli-c/q0 [?..) writable" in shown.output
    assert "create" in shown.output and "move" in shown.output  # the history

    fenced = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--move", "1=cli-c", "--epoch", "1", "--yes")
    assert fenced.exit_code == 1 and "2100 LOGIC_QUEUE_MAPPING_FENCED_EPOCH" in fenced.output
    scripted = rmqha(base, admin, "--json", "remappingStaticTopic", "-t", "Orders", "--move", "1=cli-c", "--yes")
    assert scripted.exit_code == 0 and json.loads(scripted.output)["epoch"] == 3

    refused = rmqha(base, viewer, "remappingStaticTopic", "-t", "Orders", "--move", "3=cli-c", "--yes")
    assert refused.exit_code == 1 and "HTTP 403" in refused.output
    bad = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--move", "three=cli-c")
    assert bad.exit_code == 2 and "write QUEUE=BROKER" in bad.output
    both = rmqha(base, admin, "remappingStaticTopic", "-t", "Orders", "--move", "3=cli-c", "--drain", "cli-b")
    assert both.exit_code == 2 and "exactly one of" in both.output
    assert json.loads(rmqha(base, admin, "--json", "staticTopic", "-t", "Orders").output)["epoch"] == 3


def test_more_queues_a_deletion_and_a_conversion_from_the_command_line(plane):
    base, admin, _ = plane
    assert rmqha(base, admin, "updateStaticTopic", "-t", "Ledger", "-qn", "2", "-b", "cli-a").exit_code == 0
    grown = rmqha(base, admin, "updateStaticTopic", "-t", "Ledger", "-qn", "3", "-b", "cli-b", stdin="y\n")
    assert grown.exit_code == 0 and "would be at epoch 2" in grown.output and "is at epoch 2" in grown.output, grown.output
    assert "cli-b/q0 [0..) writable" in grown.output
    fewer = rmqha(base, admin, "updateStaticTopic", "-t", "Ledger", "-qn", "1", "--yes")
    assert fewer.exit_code == 1 and "never goes down" in fewer.output

    preview = rmqha(base, admin, "deleteStaticTopic", "-t", "Ledger", "--preview")
    assert preview.exit_code == 0 and "Ledger would be deleted, with its topic on cli-a, cli-b" in preview.output
    assert json.loads(rmqha(base, admin, "--json", "staticTopic", "-t", "Ledger").output)["epoch"] == 2
    gone = rmqha(base, admin, "deleteStaticTopic", "-t", "Ledger", "--yes")
    assert gone.exit_code == 0 and "Ledger is deleted" in gone.output, gone.output
    assert rmqha(base, admin, "staticTopic", "-t", "Ledger").exit_code == 1

    missing = rmqha(base, admin, "convertToStaticTopic", "-t", "Nowhere", "--yes")
    assert missing.exit_code == 1 and "17 TOPIC_NOT_EXIST" in missing.output


def test_the_entry_point_runs_as_a_process_and_says_what_is_missing(plane):
    base, admin, _ = plane
    env = {k: v for k, v in os.environ.items() if k != "RMQHA_TOKEN"}
    cmd = [sys.executable, "-m", "controlplane.cli", "--url", base, "staticTopicList"]
    missing = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no token: give --token-file or set RMQHA_TOKEN" in missing.stderr
    ok = subprocess.run(cmd, env={**env, "RMQHA_TOKEN": admin}, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("topic"), ok.stderr
    down = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "--url", "http://127.0.0.1:9", "staticTopicList"],
        env={**env, "RMQHA_TOKEN": admin},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 1 and "cannot reach the control plane at http://127.0.0.1:9" in down.stderr


def test_the_console_script_runs_from_anywhere(plane, tmp_path):
    """``rmqha`` as pip installed it (pyproject's [project.scripts]), started outside the checkout."""
    base, admin, _ = plane
    script = os.path.join(os.path.dirname(sys.executable), "rmqha")
    env = {**os.environ, "RMQHA_TOKEN": admin, "PYTHONPATH": ""}
    listed = subprocess.run(
        [script, "--url", base, "clusterList"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and "cli-a" in listed.stdout, listed.stderr
