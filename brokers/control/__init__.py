"""How a broker talks to the control plane (REST and the broker websocket)."""
