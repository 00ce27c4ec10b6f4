"""rmqha's message verbs (controlplane/cli/messages.py) against a real control plane (uvicorn) whose brokers
are websocket clients speaking the frames (tests/operations/test_messages_api.py): queryMsgByKey's table,
queryMsgById's fields and body, queryMsgByOffset, bad input refused in one line with its field, dlqResend's
dry run shown and confirmed (declined: nothing resent; --yes: resent, audited), consumerConnection."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controlplane.cli import main
from controlplane.models import OperatorAction
from tests.operations import test_messages_api
from tests.operations.test_broker_admin import Answering
from tests.operations.test_messages_api import CLUSTER, answers_of, view

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

plane = test_messages_api.plane  # the control plane and its two broker sockets


def rmqha(api, token: str, *args: str, stdin: str | None = None):
    base = str(api.base_url).split("/api/v1/")[0]
    return CliRunner().invoke(main, ["--url", base, *args], input=stdin, env={"RMQHA_TOKEN": token}, catch_exceptions=False)


def _token(headers: dict) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def test_message_verbs_from_the_command_line(plane, tmp_path):
    api, socks, admin, reader = plane
    answering = [Answering(s, answers_of(n)) for n, s in socks.items()]
    try:
        found = rmqha(api, _token(reader), "queryMsgByKey", "-c", CLUSTER, "-t", "Orders", "-k", "order-1")
        assert found.exit_code == 0, found.output
        assert "4 message(s)" in found.output and view("msg-a", 200, 0)["msgId"] in found.output

        one = rmqha(api, _token(reader), "queryMsgById", "-c", CLUSTER, "-i", view("msg-b", 100, 0)["msgId"])
        assert one.exit_code == 0, one.output
        assert "brokerName       msg-b" in one.output and "body (text, 13 bytes):\norder 42 paid" in one.output
        body_file = tmp_path / "body.bin"
        saved = rmqha(
            api,
            _token(reader),
            "queryMsgById",
            "-c",
            CLUSTER,
            "-i",
            view("msg-b", 100, 0)["msgId"],
            "--body-file",
            str(body_file),
        )
        assert saved.exit_code == 0 and body_file.read_bytes() == b"order 42 paid", saved.output
        as_json = rmqha(api, _token(reader), "--json", "queryMsgByOffset", "-c", CLUSTER, "-b", "msg-a", "-o", "100")
        assert json.loads(as_json.output)["body"]["text"] == "order 42 paid"

        bad = rmqha(api, _token(reader), "queryMsgByKey", "-c", CLUSTER, "-t", "Orders", "-k", "k" * 256)
        assert bad.exit_code == 1 and "HTTP 400" in bad.output and "'key'" in bad.output
        gone = rmqha(api, _token(reader), "queryMsgById", "-c", CLUSTER, "-i", view("msg-a", 900, 0)["msgId"])
        assert gone.exit_code == 1 and "17 TOPIC_NOT_EXIST" in gone.output

        dead = view("msg-a", 500, 0)["msgId"]
        declined = rmqha(api, _token(admin), "dlqResend", "-c", CLUSTER, "-g", "g1", "-i", dead, stdin="n\n")
        assert declined.exit_code == 0 and "would resend 1 message(s)" in declined.output and "nothing resent" in declined.output
        assert not OperatorAction.objects.filter(action="dlq_resend").exists()
        done = rmqha(api, _token(admin), "dlqResend", "-c", CLUSTER, "-g", "g1", "-i", dead, "--yes")
        assert done.exit_code == 0 and "resent 1 message(s)" in done.output and "N1" in done.output
        assert OperatorAction.objects.get(action="dlq_resend").result == "ok"
        usage = rmqha(api, _token(admin), "dlqResend", "-c", CLUSTER, "-g", "g1")
        assert usage.exit_code == 2 and "--all" in usage.output
        forbidden = rmqha(api, _token(reader), "dlqResend", "-c", CLUSTER, "-g", "g1", "-i", dead, "--yes")
        assert forbidden.exit_code == 1 and "HTTP 403" in forbidden.output
    finally:
        for a in answering:
            a.close()

    nobody = rmqha(api, _token(reader), "consumerConnection", "-c", CLUSTER, "-g", "g1")
    assert nobody.exit_code == 0 and "no client connected" in nobody.output
