"""One caller process of ``test_concurrency``: mixed elect / alter calls through the controller services.

Run as ``python -m tests.controller.concurrency_worker`` with the environment of ``tests.procs.child_env``
(test database, ``controlplane.settings_test``, the test Redis prefix). Protocol on stdin/stdout:

1. the parent writes one JSON line: ``{"seed": int, "calls": int, "groups": [brokerName, ...]}``;
2. the child sets Django up, warms its Postgres and Redis connections and prints ``ready``;
3. the parent writes ``go`` (to every child at once);
4. the child makes its calls and prints one JSON line: counts per (kind, response code), and errors.

Each call decides from the state this process last saw of the group (the ``Outcome.state`` of its
previous call there, or a read before its first call), so under contention many requests carry stale
epochs or name a replica that is no longer electable, and the services must refuse them.
"""

from __future__ import annotations

import json
import random
import sys
import traceback
from collections import Counter


def choose(rng: random.Random, state):
    """(kind, kwargs) of the next call on a group, from a possibly stale view of its state."""
    master = state.master_broker_id
    others = sorted(state.replica_ids - {master})
    in_set_others = sorted(state.sync_state_set - {master})
    r = rng.random()
    if r < 0.08 or master is None:
        # A broker-triggered election while the master is alive: 2011 (no change).
        return "elect", {"broker_id": rng.choice(sorted(state.replica_ids)), "requested_by": "worker-broker"}
    if r < 0.45 or not in_set_others:
        # The master widens (or reshapes) its SyncStateSet, fenced by the epochs it believes current.
        extra = rng.sample(others, rng.randint(1, len(others)))
        return "alter", {
            "master_broker_id": master,
            "master_epoch": state.master_epoch,
            "new_sync_state_set": {master, *extra},
            "sync_state_set_epoch": state.sync_state_set_epoch,
            "requested_by": "worker",
        }
    # An operator switchover to a replica believed to be in the SyncStateSet.
    from controlplane.controller.core.state import Trigger

    return "elect", {
        "broker_id": rng.choice(in_set_others),
        "designate": True,
        "trigger": Trigger.OPERATOR,
        "requested_by": "worker-operator",
    }


def run(job: dict) -> dict:
    from controlplane.controller import selectors, services

    rng = random.Random(job["seed"])
    groups: list[str] = job["groups"]
    seen = {}
    counts: Counter[str] = Counter()
    errors: list[str] = []
    for _ in range(job["calls"]):
        name = rng.choice(groups)
        state = seen.get(name)
        if state is None:
            state = seen[name] = selectors.replica_info(name)
        kind, kwargs = choose(rng, state)
        try:
            if kind == "elect":
                outcome = services.elect_master(name, **kwargs)
            else:
                outcome = services.alter_sync_state_set(name, **kwargs)
        except Exception:
            errors.append(traceback.format_exc(limit=5))
            seen.pop(name, None)
            continue
        counts[f"{kind}:{int(outcome.code)}"] += 1
        if outcome.state is not None:
            seen[name] = outcome.state
    return {"counts": dict(counts), "errors": errors[:5], "error_count": len(errors)}


def main() -> None:
    job = json.loads(sys.stdin.readline())
    import django

    django.setup()
    from django.db import connection

    from controlplane.controller import liveness
    from controlplane.controller.config_store import current_config
    from controlplane.redis import sync_client

    current_config()  # the config cache, the DB connection and the Redis client are warm before "go"
    sync_client().ping()
    liveness.live_infos("warm-up", "warm-up", [1])
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    try:
        result = run(job)
    finally:
        connection.close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
