"""The dashboard hears of water levels from the nameserver (``nameserver.signals.water_levels_reported``,
connected in ``DashboardsConfig.ready``) and offers them to open pages, throttled per replica group."""

from __future__ import annotations

from . import live


async def on_water_levels_reported(sender, reports: list[dict], **kwargs) -> None:
    by_group: dict[str, list[dict]] = {}
    for r in reports:
        by_group.setdefault(r["brokerName"], []).append(r)
    for broker_name, group in by_group.items():
        await live.publish_async("water_levels", broker_name, {"reports": group})
