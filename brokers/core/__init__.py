"""The broker's pure deciders (docs/architecture.md §2, "Inside brokers/"): values in, values out; no
asyncio, no I/O, no protocol. The standard library, ``mqrules`` and each other only (checked by
import-linter, typed with mypy). Every protocol edge (gRPC today, remoting next) turns wire messages
into these values, and the broker's parts (the store, the pop state, the transaction index, the
timer wheel) carry the decisions out.

- ``codes``: the answer codes a decision carries (RocketMQ 5's ``Code`` numbers) and ``Status``;
- ``admission``: whether a send is taken, and how (message and topic type, delivery time and delay
  level, transaction and FIFO properties, static-topic ownership, the write gate's reason);
- ``pop``, ``fifo``: receipt handles, queue states, which queues a receive pops, the orderly pop;
- ``transaction``: which EndTransaction is carried out, what a check run does, who relays a check;
- ``timer``, ``delay_levels``: due times, the wheel, its checkpoint;
- ``static``: where a static topic's message is written, logical offsets;
- ``escape``: which master takes an acting master's escaped messages.
"""
