"""What the nameserver announces, for the floors above it to hear (they subscribe; it never calls them)."""

from django.dispatch import Signal

# Water levels arrived over the broker websocket and were stored. Sent with ``asend`` from the
# socket's event loop, once per coalesced batch: ``reports`` is a list of reports in the wire form of
# GET /water-levels (each with its clusterName, brokerAddr and reportedAtMs). Receivers must be cheap.
water_levels_reported = Signal()
