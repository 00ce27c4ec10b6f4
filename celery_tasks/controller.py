"""Controller triggers: thin calls into ``controlplane.controller.services``."""

from celery import shared_task

from controlplane.controller import services


@shared_task(name="controller.on_broker_inactive", ignore_result=True)
def on_broker_inactive(cluster_name: str, broker_name: str, broker_id: int | None) -> int | None:
    """A broker's channel closed or its heartbeat expired: elect if it was the master."""
    outcome = services.on_broker_inactive(cluster_name, broker_name, broker_id)
    return None if outcome is None else outcome.code


@shared_task(name="controller.scan_inactive_brokers", ignore_result=True)
def scan_inactive_brokers() -> int:
    """scanNotActiveBrokerInterval: expired heartbeat entries (reference §1.10)."""
    return len(services.scan_inactive_brokers())


@shared_task(name="controller.scan_inactive_masters", ignore_result=True)
def scan_inactive_masters() -> int:
    """scanInactiveMasterInterval: sets whose master is dead while a replica lives (reference §1.9)."""
    return len(services.scan_inactive_masters())
