"""What the official clients say about themselves (gRPC metadata) and what follows for the answers
they are given: which clients can use several addresses per Endpoints, which get one replica per
queue (service.queue_addrs), which receive from every queue of a topic (consumer.ReceiveMessage)."""

from __future__ import annotations

# Clients whose channel for an Endpoints with several addresses moves to another address when one
# dies (gRPC pick_first over an ``ipv4:a,b,c`` target). The Node.js client cannot use such a target
# (it names it without a scheme: "Name resolution failed"), so every other client gets one address.
MULTI_ADDRESS_CLIENTS = frozenset({"PYTHON", "JAVA"})
# The Python client retries a send on the next queue of its route, and a channel of its stays where
# gRPC's pick_first put it: on the first address that answered, until that connection breaks. It has
# no keepalive, so a master that is frozen (SIGSTOP, a stalled VM) keeps its connections open and every
# request on them waits for its deadline; and a channel that moved to a slave when a master died stays
# on that slave when it becomes master in turn. So its queues each name one replica (service.queue_addrs):
# a retry always goes to another replica, which forwards (forward.py) to the master, or holds the
# request until there is one.
ONE_REPLICA_PER_QUEUE_CLIENTS = frozenset({"PYTHON"})


def client_language(context) -> str:
    for key, value in (context.invocation_metadata() or ()) if context is not None else ():
        if key == "x-mq-language":
            return str(value).upper()
    return ""
