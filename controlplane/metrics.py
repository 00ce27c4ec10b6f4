"""The control plane's process metrics that more than one app counts (Prometheus, docs/metrics.md):
defined once here, on the ground floor, because a metric name may be registered only once per process
and the nameserver and the controller never import each other. Each app binds its own label
(``nameserver/metrics.py``, ``controlplane/controller/metrics.py``).

With ``PROMETHEUS_MULTIPROC_DIR`` set before the process starts (the launcher sets it), prometheus_client
keeps these values in files of that folder, and ``/metrics`` sums every web process's and Celery
worker's (``controlplane/operations/metrics.py``)."""

from __future__ import annotations

from prometheus_client import Counter, disable_created_metrics

# The catalogue's names only: no ``*_created`` series beside each counter and histogram.
disable_created_metrics()

heartbeats_received = Counter(
    "rmqha_heartbeats_received",
    "Broker heartbeats received, by the table they refresh (nameserver or controller)",
    ["kind"],
)
