"""Pure nameserver rules (RIP-32, reference §3): values in, values out, no I/O."""
