"""Pure controller rules (RIP-44, reference §1): values in, decisions out, no I/O."""
