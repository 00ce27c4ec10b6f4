"""The audits' series on the control plane's ``/metrics`` (docs/metrics.md), from the latest audit run
that succeeded: its rollbacks, the messages consumed again and when it finished. A collector the
composition root (``controlplane/urls.py``) hands to the metrics view: the operations floor below
does not import the audits."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from . import selectors


class AuditFigures:
    """rmqha_audit_rollbacks, rmqha_audit_messages_reconsumed, rmqha_audit_last_run_timestamp_seconds
    (no sample before the first audit that succeeded)."""

    def collect(self) -> Iterator[Metric]:
        run = selectors.latest_finished_run()
        rollbacks = GaugeMetricFamily("rmqha_audit_rollbacks", "Consumer-offset rollbacks the latest audit found")
        again = GaugeMetricFamily("rmqha_audit_messages_reconsumed", "Messages consumed again, by the latest audit")
        at = GaugeMetricFamily(
            "rmqha_audit_last_run_timestamp_seconds", "When the latest audit that succeeded finished, Unix time"
        )
        if run is not None:
            rollbacks.add_metric([], run.rollbacks or 0)
            again.add_metric([], run.messages_again or 0)
            if run.finished_at is not None:
                at.add_metric([], run.finished_at.timestamp())
        yield from (rollbacks, again, at)
