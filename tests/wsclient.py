"""A minimal broker-side websocket client for end-to-end tests (real sockets)."""

from __future__ import annotations

import json
from contextlib import ExitStack

from websockets.sync.client import connect


class BrokerSocket:
    def __init__(self, stack: ExitStack, base_url: str, token: str):
        ws_url = base_url.replace("http://", "ws://") + "/ws/broker/"
        headers = {"Authorization": f"Bearer {token}", "Origin": base_url}
        self.ws = stack.enter_context(connect(ws_url, additional_headers=headers, open_timeout=10))
        self.seq = 0
        self.pushes: list[dict] = []

    def call(self, kind: str, payload: dict) -> dict:
        """Send a request frame and return its reply; pushes that arrive meanwhile are kept."""
        self.seq += 1
        self.ws.send(json.dumps({"type": kind, "seq": self.seq, "payload": payload}))
        while True:
            frame = json.loads(self.ws.recv(timeout=10))
            if frame.get("seq") == self.seq and frame["type"] in (f"{kind}_result", "error"):
                return frame
            self.pushes.append(frame)

    def next_push(self, frame_type: str, timeout: float) -> dict:
        for i, frame in enumerate(self.pushes):
            if frame["type"] == frame_type:
                return self.pushes.pop(i)
        while True:
            frame = json.loads(self.ws.recv(timeout=timeout))
            if frame["type"] == frame_type:
                return frame
            self.pushes.append(frame)
