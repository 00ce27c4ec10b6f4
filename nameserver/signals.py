"""What the nameserver announces, for the floors above it to hear (they subscribe; it never calls them)."""

from django.dispatch import Signal

# Water levels arrived with a heartbeat and were stored (``api.store_water_levels``): over the broker
# websocket, sent with ``asend`` from the socket's event loop once per coalesced batch; over REST, sent
# with ``send`` once per heartbeat (async receivers run through ``async_to_sync``). ``reports`` is a list
# of reports in the wire form of GET /water-levels (each with its clusterName, brokerAddr and
# reportedAtMs). Receivers must be cheap.
water_levels_reported = Signal()
