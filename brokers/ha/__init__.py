"""RIP-44 replication (AutoSwitch HA): the wire format and the epoch file, as pure, dependency-free code."""
