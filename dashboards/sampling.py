"""Water-level history for the charts: one sample per broker every WATER_LEVEL_SAMPLE_SECONDS (a
Celery beat task), from the latest reports in Redis; samples older than
WATER_LEVEL_RETENTION_HOURS are deleted as it goes."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.controller import liveness as ctl_liveness
from controlplane.controller.models import ReplicaGroup
from nameserver import water_levels
from nameserver.models import BrokerGroup

from .models import WaterLevelSample


def sample() -> int:
    """One round of samples; 0 when another beat or worker took this interval's slot."""
    interval_ms = int(settings.WATER_LEVEL_SAMPLE_SECONDS * 1000)
    if not ctl_liveness.acquire_slot("water-level-sample", interval_ms):
        return 0
    now = timezone.now()
    clusters = set(BrokerGroup.objects.values_list("cluster_name", flat=True)) | set(
        ReplicaGroup.objects.values_list("cluster_name", flat=True)
    )
    rows = []
    for cluster in sorted(clusters):
        reports = water_levels.latest_reports(cluster)
        acks = {(r["brokerName"], s["brokerId"]): s for r in reports for s in r.get("slaves", [])}
        for r in reports:
            slave = acks.get((r["brokerName"], r["brokerId"])) if r["role"] == "SLAVE" else None
            rows.append(
                WaterLevelSample(
                    at=now,
                    cluster_name=cluster,
                    broker_name=r["brokerName"],
                    broker_id=r["brokerId"],
                    role=r["role"],
                    master_epoch=r.get("masterEpoch", -1),
                    max_offset=r["maxOffset"],
                    confirm_offset=r["confirmOffset"],
                    ack_offset=slave["ackOffset"] if slave else None,
                    lag_bytes=slave["lagBytes"] if slave else None,
                )
            )
    WaterLevelSample.objects.bulk_create(rows, batch_size=1000)
    WaterLevelSample.objects.filter(at__lt=now - timedelta(hours=settings.WATER_LEVEL_RETENTION_HOURS)).delete()
    return len(rows)
