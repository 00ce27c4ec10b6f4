"""Process-wide settings of a broker process (and of anything that hosts a store in-process)."""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a message store.

    A broker allocates a few short-lived objects per message (the message, its record buffers, its
    result). With CPython's default gen-0 threshold (700) the collector runs every hundred or so
    messages and each run walks the whole batch in flight; at tens of thousands of messages a second
    that is a quarter of the CPU. Objects that exist after start-up (configuration, code, the topic
    table) are frozen out of collection, and collections happen every 50,000 net allocations: cycles
    are still collected, just in larger, rarer passes. Reference counting frees everything else at
    once, as always."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
