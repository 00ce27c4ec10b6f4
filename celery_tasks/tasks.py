"""Imported by Celery's autodiscovery: every task module of the control plane."""

from celery_tasks.nameserver import scan_not_active_brokers

__all__ = ["scan_not_active_brokers"]
