"""The offset-rollback audits (docs/audits.md): auditRuns, auditRun."""

from __future__ import annotations

import click

from controlplane.cli.client import AUDITS, Api
from controlplane.cli.output import table
from controlplane.cli.root import command, emit


@command("auditRuns")
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="newest first")
def audit_runs(api: Api, limit: int) -> None:
    """The offset-rollback audit runs, newest first (ours; docs/audits.md)."""

    def show(answer: dict) -> None:
        rows = [
            [
                r["id"],
                r["status"],
                r.get("stage") or "",
                "" if r.get("progress") is None else f"{r['progress']:.0%}",
                r["trigger"],
                r["requestedBy"],
                r["createdAt"],
                r.get("rollbacks"),
                r.get("messagesAgain"),
                r.get("error") or "",
            ]
            for r in answer["runs"]
        ]
        click.echo(table(["run", "status", "stage", "progress", "trigger", "by", "created", "rollbacks", "again", "error"], rows))
        if answer.get("activeRunId") is not None:
            click.echo(f"\nactive run: {answer['activeRunId']}")

    emit(api, api.call("GET", f"{AUDITS}/runs", params={"limit": limit}), show)


@command("auditRun")
def audit_run(api: Api) -> None:
    """Start an offset-rollback audit now (ours); refused (2 SYSTEM_BUSY) while one is queued or running."""
    emit(
        api,
        api.call("POST", f"{AUDITS}/runs"),
        lambda r: click.echo(f"audit run {r['id']} {r['status']} (rmqha auditRuns follows it)"),
    )
