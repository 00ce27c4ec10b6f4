"""The phases of bench/special_messages.py (its entry point: options, the group, the JSON line), one
module per phase over what they share:

- ``bed``: the running group and what every phase does on it (topics, a baseline, consumers);
- ``trials``: the skeleton of the failover phases (load, trials each with a kill -9, drain);
- ``sending``, ``transactions``, ``fifo``: the raw gRPC clients (sends, EndTransaction and the
  checker, FIFO groups); ``receiving``: the pop consumers and the wait for what was sent;
- ``figures``: what the phases print, from what they recorded (pure);
- the phases: ``timer``, ``timer_failover``, ``txn``, ``txn_check``, ``txn_failover``, ``fifo_failover``.
"""
