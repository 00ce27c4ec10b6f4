"""``rmqha`` itself: the root command and its options, the ``command`` decorator every verb is made
with, and the flows they share (``--json`` or a table; a change previewed, confirmed, applied)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from controlplane.cli.client import DEFAULT_URL, Answer, Api


def names(values: Iterable[str]) -> list[str]:
    """Repeated and comma-separated names, in order, each once."""
    out: list[str] = []
    for value in values:
        for name in (n.strip() for n in value.split(",")):
            if name and name not in out:
                out.append(name)
    return out


def emit(api: Api, answer: dict, show: Callable[[dict], None]) -> None:
    """``--json``: the API's answer as it came; else the table ``show`` prints."""
    if api.as_json:
        click.echo(answer.raw if isinstance(answer, Answer) else json.dumps(answer))
    else:
        show(answer)


def previewed(
    api: Api,
    path: str,
    body: dict,
    *,
    preview_only: bool,
    yes: bool,
    show: Callable[[dict, bool], bool],
    method: str = "POST",
) -> None:
    """The flow of a change that puts data at risk: the same request with ``"preview": true`` (changes
    nothing) shown first, then applied after a confirmation. ``--yes`` applies at once, ``--preview``
    stops after showing (also with ``--yes``). ``show(answer, preview)`` prints a table and says whether
    there is anything to apply. ``method`` DELETE: ``body`` and the preview flag go as query parameters."""

    def send(preview: bool) -> Answer:
        if method == "DELETE":
            return api.call("DELETE", path, params={**body, "preview": "true" if preview else "false"})
        return api.call(method, path, {**body, "preview": preview})

    if api.as_json and not (preview_only or yes):
        raise click.UsageError("with --json, give --preview or --yes: a script cannot answer the confirmation")
    if preview_only or not yes:
        preview = send(True)
        if api.as_json:
            click.echo(preview.raw)
            return
        if not show(preview, True) or preview_only:
            return
        if not click.confirm("Apply?", default=False):
            click.echo("nothing changed")
            return
    emit(api, send(False), lambda a: show(a, False) and None)


def _json_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(Api).as_json = True


def command(name: str, **kw: Any) -> Callable:
    """A verb of ``main`` that also takes ``--json`` after its name (``rmqha clusterList --json``)."""

    def wrap(f: Callable) -> click.Command:
        f = click.option("--json", is_flag=True, expose_value=False, callback=_json_flag, help="print the API's JSON answer")(f)
        return main.command(name, **kw)(click.pass_obj(f))

    return wrap


def confirm_options(f: Callable) -> Callable:
    f = click.option("-y", "--yes", is_flag=True, help="apply without asking (scripts)")(f)
    return click.option("--preview", "preview_only", is_flag=True, help="show what would change, change nothing")(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="RMQHA_URL", default=DEFAULT_URL, show_default=True, help="the control plane (or RMQHA_URL)")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="a file holding the API token")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer (for scripts)")
@click.pass_context
def main(ctx: click.Context, url: str, token_file: Path | None, as_json: bool) -> None:
    """Operate a RocketMQ-HA control plane over its REST API (mqadmin's verbs; docs/cli.md)."""
    ctx.obj = Api(url, token_file, as_json)
