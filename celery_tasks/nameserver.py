"""Nameserver housekeeping tasks: thin calls into ``nameserver.services``."""

from celery import shared_task

from nameserver import services


@shared_task(name="nameserver.scan_not_active_brokers", ignore_result=True)
def scan_not_active_brokers() -> int:
    """Unregister brokers silent past their heartbeat timeout (reference §3.4)."""
    return len(services.scan_not_active_brokers())
