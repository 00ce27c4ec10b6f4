"""The small kit that tests, chaos and bench share: processes, ports, broker configs. No Django."""
