"""Chaos runs against a real replica group in controller mode: start a control plane and brokers,
inject one fault (kill -9, SIGSTOP, kill -9 with the control plane, a cut HA link), heal, drain, and
check what an operator would: no acknowledged message lost, duplicates, one master per epoch,
byte-identical commit logs, recovery time. See docs/chaos.md; run ``python -m chaos.runner``."""
