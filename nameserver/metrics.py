"""The nameserver's process metrics (docs/metrics.md): its heartbeats, counted where REST and the
websocket handle them."""

from __future__ import annotations

from controlplane.metrics import heartbeats_received

HEARTBEATS = heartbeats_received.labels(kind="nameserver")
