"""8 OS processes, each on its own Postgres connection, racing mixed elect / alter calls.

(a) all on one hot broker set, (b) spread over 100 sets. The row lock must serialize the transitions of
each set: afterwards the history passes the invariant checker, every successful election moved
masterEpoch by exactly one (children's count = epoch increments = elect rows), every successful alter
left exactly one row, and every set's state row agrees with its last transition.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter

import pytest
from django.db.models import Max, Sum

from controlplane.controller import liveness, services
from controlplane.controller.invariants import check_history
from controlplane.controller.models import Replica, ReplicaGroup, Transition, TransitionKind
from tests.procs import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROCESSES = 8
CALLS = 200
REPLICAS = 3
CLUSTER = "c1"
FENCED = {"2000", "2001", "2002"}


def make_groups(names: list[str]) -> None:
    """Each set: replicas 1..3 alive (heartbeats), master 1 at epoch 1."""
    for name in names:
        for broker_id in range(1, REPLICAS + 1):
            addr = f"10.0.{broker_id}.1:10911"
            assert services.apply_broker_id(CLUSTER, name, broker_id, f"{addr};{broker_id}").ok
        heartbeats([name])
        assert services.elect_master(name, broker_id=1).ok


def heartbeats(names: list[str]) -> None:
    """One heartbeat of every replica, alive for 60 s from now: given again just before the race, so
    workers that were slow to start (a loaded machine) do not race over replicas already expired."""
    for name in names:
        for broker_id in range(1, REPLICAS + 1):
            addr = f"10.0.{broker_id}.1:10911"
            services.heartbeat(
                liveness.Beat(
                    CLUSTER, name, broker_id, addr, epoch=1, max_offset=100 * broker_id, heartbeat_timeout_millis=60_000
                )
            )


def race(names: list[str]) -> Counter:
    """Start the children, release them together, and add up their counts."""
    env = child_env(LOG_LEVEL="WARNING")
    procs = []
    try:
        for i in range(PROCESSES):
            stderr = tempfile.TemporaryFile()
            p = subprocess.Popen(
                [sys.executable, "-m", "tests.controller.concurrency_worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            p.stdin.write(json.dumps({"seed": 1000 + i, "calls": CALLS, "groups": names}) + "\n")
            p.stdin.flush()
            procs.append((p, stderr))
        for p, stderr in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                stderr.seek(0)
                pytest.fail(f"worker did not start: {line!r}\n{stderr.read().decode(errors='replace')[-3000:]}")
        heartbeats(names)
        for p, _ in procs:  # as close to simultaneous as a loop gets
            p.stdin.write("go\n")
            p.stdin.flush()
        total: Counter = Counter()
        deadline = time.monotonic() + 90
        for p, stderr in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            stderr.seek(0)
            assert p.returncode == 0, stderr.read().decode(errors="replace")[-3000:]
            result = json.loads(out.strip().splitlines()[-1])
            assert result["error_count"] == 0, result["errors"]
            total.update(result["counts"])
        return total
    finally:
        for p, stderr in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            stderr.close()


@pytest.mark.parametrize("groups", [1, 100], ids=["one-hot-group", "spread-over-100-groups"])
def test_eight_processes_racing_elections_and_alters(groups):
    names = ["hot"] if groups == 1 else [f"b{i:03d}" for i in range(groups)]
    make_groups(names)
    base_epochs = ReplicaGroup.objects.aggregate(Sum("master_epoch"))["master_epoch__sum"]
    base_id = Transition.objects.aggregate(Max("id"))["id__max"]

    counts = race(names)

    assert sum(counts.values()) == PROCESSES * CALLS, counts
    elect_ok, alter_ok = counts["elect:0"], counts["alter:0"]
    refused = sum(n for k, n in counts.items() if not k.endswith(":0"))
    # The mix really raced: many calls went through and many were turned away.
    assert elect_ok >= 50 and alter_ok >= 50 and refused >= 300, counts
    assert sum(counts[f"alter:{c}"] for c in FENCED) >= 50, counts  # stale epochs / masters were fenced
    assert counts["elect:2011"] > 0 and counts["elect:2012"] > 0, counts
    assert counts["elect:2004"] == 0, counts  # every master stayed alive

    assert check_history() == []
    new = Transition.objects.filter(id__gt=base_id)
    epochs = ReplicaGroup.objects.aggregate(Sum("master_epoch"))["master_epoch__sum"]
    assert epochs - base_epochs == elect_ok == new.filter(kind=TransitionKind.ELECT, response_code=0).count()
    assert new.filter(kind=TransitionKind.ELECT).exclude(response_code=0).count() == 0
    assert new.filter(kind=TransitionKind.ALTER, response_code=0).count() == alter_ok == new.filter(kind="alter").count()
    assert new.exclude(kind__in=[TransitionKind.ELECT, TransitionKind.ALTER]).count() == 0

    for row in ReplicaGroup.objects.all():
        last = Transition.objects.filter(broker_name=row.broker_name).latest("id")
        in_set = sorted(Replica.objects.filter(group=row, in_sync_state_set=True).values_list("broker_id", flat=True))
        assert (row.master_broker_id, row.master_epoch, row.sync_state_set_epoch, in_set) == (
            last.new_master_broker_id,
            last.new_master_epoch,
            last.new_sync_state_set_epoch,
            sorted(last.new_sync_state_set),
        ), row.broker_name
        assert row.master_broker_id in in_set
