"""Imported by Celery's autodiscovery: every task module of the control plane."""

from celery_tasks.audits import flush_offset_events, run_offset_audit, run_scheduled_audit
from celery_tasks.controller import on_broker_inactive, scan_inactive_brokers, scan_inactive_masters
from celery_tasks.dashboards import sample_water_levels
from celery_tasks.nameserver import scan_not_active_brokers

__all__ = [
    "flush_offset_events",
    "run_offset_audit",
    "run_scheduled_audit",
    "on_broker_inactive",
    "sample_water_levels",
    "scan_inactive_brokers",
    "scan_inactive_masters",
    "scan_not_active_brokers",
]
