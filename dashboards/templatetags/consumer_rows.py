"""The consumers page's rows, rendered in Python: the page must render 1,000 consumer groups in well
under 300 ms (bench/dashboard.py), and Django's template engine spends ~100 µs a row where string
building spends a few (as ``overview_rows``)."""

from __future__ import annotations

from urllib.parse import quote

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .dashboard_format import grouped

register = template.Library()


def consumer_row(group: dict, url: str) -> str:
    name = escape(group["group"])
    stale = ' <span class="warn">stale</span>' if group["stale"] else ""
    if group.get("behindHorizon"):
        title = "its committed offset is below a queue's min offset: retention deleted messages it never got"
        stale += f' <span class="badge behind-horizon" title="{title}">behind the retention horizon</span>'
    return (
        f'<tr data-group="{name}"><td><a href="{escape(url)}">{name}</a>{stale}</td>'
        f"<td>{escape(', '.join(group['topics']))}</td>"
        f'<td class="num">{int(group["queues"])}</td>'
        f'<td class="num">{grouped(group["committedOffset"])}</td>'
        f'<td class="num">{grouped(group["maxOffset"])}</td>'
        f'<td class="num" data-field="lag">{grouped(group["lag"])}</td></tr>\n'
    )


@register.simple_tag
def consumer_rows(groups: list[dict], prefix: str) -> SafeString:
    """One ``<tr>`` per consumer group, linked to ``prefix`` + its name + "/": every value escaped,
    numbers grouped."""
    return mark_safe(  # every value went through escape()
        "".join(consumer_row(g, f"{prefix}{quote(g['group'], safe='')}/") for g in groups)
    )
