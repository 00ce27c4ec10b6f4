"""``python -m chaos.soak`` end to end: every fault kind once (kill -9 and SIGSTOP of the master, a
slave killed, the HA link cut, the master killed with the web server, the web server, worker and
beat each killed, Redis restarted with its data lost, PostgreSQL restarted fast or crashed, the
control plane's connections terminated, one broker's disk filled) against the official client's
load on its own Redis and PostgreSQL, then the soak's checks as its JSON line reports them (also the
sends given up while a replica could write, and the cuts of the commit logs the brokers logged). The
soak's partition kinds are chaos/partition.py's faults, which tests/e2e/test_partitions.py runs with
more checks of their own; they are left out here to keep CI short.

The same command with ``--faults 100`` is the issue's soak (bench/soak.py); this run keeps CI short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from chaos.soak import KINDS, NEEDS_ROOT, PARTITIONS, Outcome
from tests.procs import ARTIFACTS, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_every_fault_kind_once_loses_nothing_and_elects_only_for_the_master():
    run_dir = ARTIFACTS / "soak" / f"test-{time.strftime('%Y%m%d-%H%M%S')}"
    kinds = [k for k in KINDS if k not in PARTITIONS]
    done = subprocess.run(
        [sys.executable, "-m", "chaos.soak", "--faults", str(len(kinds)), "--kinds", ",".join(kinds), "--seed", "2"]
        + ["--settle-s", "0.5", "--quiet", "--run-dir", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(done.stderr[-4000:])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    expected = [k for k in kinds if os.geteuid() == 0 or k not in NEEDS_ROOT]
    assert sorted(out["faults_by_kind"]) == sorted(expected), out["notes"]
    # no send given up while an in-sync replica could have taken it (the sends and faults named first)
    assert out["failed_sends_while_writable"] == 0, out["first_failed_sends_while_writable"]
    assert out["failures"] == [] and out["ok"], out["failures"]
    assert done.returncode == 0
    assert out["faults"] == len(expected)
    assert out["acked"] > 1000 and out["acked_lost"] == 0 and out["acked_undelivered"] == 0
    # no cut that acknowledged data stopped
    assert (out["refused_cuts"], out["guard_errors"], out["unreadable_cut_lines"]) == (0, 0, 0), out["truncations"]
    assert sum(out["truncations_by_cause"].values()) == len(out["truncations"])
    assert out["masters_per_epoch_max"] == 1
    assert out["logs_identical"] is True and out["logs_compared_bytes"] > 0
    assert out["spurious_elections"] == 0 and out["control_plane_outage_depositions"] == 0 and out["burnt_epochs"] == 0
    # one election for each fault of the master, none for anything else
    assert out["expected_elections"] >= 3 and out["unexpected_elections"] == 0
    assert out["elections"] == 1 + out["expected_elections"]  # the first master's, then one per fault of the master
    assert out["invariants_ok"] is True
    assert out["rto_median_s"] is not None and out["rto_p99_s"] >= out["rto_median_s"]
    faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in faults] and all(f["rto_s"] is not None and f["problems"] == [] for f in faults)
    for f in faults:  # the master's faults one election each, the others none (chaos/soak.py Outcome)
        assert f["elections"] == f["new_masters"] == Outcome(**f).expected_elections, f
    assert "plotly" in (run_dir / "rto.html").read_text()[:200_000].lower()
    assert json.loads((run_dir / "report.json").read_text())["faults"] == out["faults"]
