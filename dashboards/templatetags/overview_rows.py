"""The overview's group rows, rendered in Python: the page must render 1,000 replica groups in well under
300 ms, and Django's template engine spends ~100 µs a row on this markup where string building spends
~15 µs. The markup is the one static/js/overview.js updates in place (``data-field`` cells)."""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .dashboard_format import id_set

register = template.Library()


def acting_badge(acting: dict | None) -> str:
    """The acting-master state (dashboards/acting_master.py), as static/js/live.js ``actingBadge``
    builds it; "" when there is none."""
    if acting is None:
        return ""
    broker_id = "" if acting["brokerId"] is None else int(acting["brokerId"])
    return (
        f'<span class="warn acting" data-agreement="{escape(acting["agreement"])}" data-broker-id="{broker_id}">'
        f"{escape(acting['text'])}</span>"
    )


def _master(group: dict) -> str:
    acting = group.get("actingMaster")
    badge = acting_badge(acting)
    if group["masterBrokerId"] is not None:
        master = f'<b>{int(group["masterBrokerId"])}</b> <span class="addr">{escape(group["masterAddress"] or "")}</span>'
        return f"{master} {badge}" if badge else master
    if acting is not None and acting["brokerId"] is not None:
        return badge
    return '<span class="bad">no master</span>' + (f" {badge}" if badge else "")


def group_row(group: dict) -> str:
    name, health = escape(group["brokerName"]), escape(group["health"])
    managed = group.get("controllerManaged", True)
    reasons = "".join(f"<li>{escape(reason)}</li>" for reason in group["reasons"])
    epoch = "—" if group["masterEpoch"] is None else int(group["masterEpoch"])
    sync_state_set = escape(id_set(group["syncStateSet"])) if managed else '<span class="muted">not controller-managed</span>'
    return (
        f'<tr data-broker-name="{name}" data-health="{health}"{" data-controller-managed" if managed else ""}>'
        f'<td><a href="{escape(group["url"])}">{name}</a></td>'
        f'<td><span class="badge h-{health}" data-field="health">{health}</span><ul class="reasons">{reasons}</ul></td>'
        f'<td data-field="master">{_master(group)}</td>'
        f'<td data-field="masterEpoch">{epoch}</td>'
        f'<td data-field="syncStateSet">{sync_state_set}</td>'
        f'<td data-field="replicas">{len(group["members"])}</td></tr>\n'
    )


@register.simple_tag
def master_cell(group: dict) -> SafeString:
    """A group's master, acting master or "no master", as the overview's master cell shows it."""
    return mark_safe(_master(group))  # every value in it went through escape()


@register.simple_tag
def group_rows(groups: list[dict]) -> SafeString:
    """One ``<tr>`` per replica group: every value escaped, numbers formatted as ints."""
    return mark_safe("".join(group_row(g) for g in groups))  # every value in it went through escape()
