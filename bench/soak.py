"""The issue's soak: ``python -m chaos.soak`` with at least 100 faults (every kind in chaos/soak.py,
in a seeded random order) against the official client's load, and its figures against the goals.

    .venv/bin/python bench/soak.py [--faults 100] [--seed 7]

Runs as root for the disk-full faults (a tmpfs per broker); otherwise they are left out and the
report says so. Everything else (its own Redis and PostgreSQL, the control plane, three brokers, the
client processes) is started and stopped by the run. Report, RTO plot and logs in
test-artifacts/soak/<time>/. The last line printed is one JSON object: the soak's figures plus
``goals`` (faults >= 100, acked_lost 0, masters_per_epoch_max 1, logs_identical, spurious_elections
0, control_plane_outage_depositions 0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos.soak import parse_args, run  # noqa: E402


def goals(s: dict) -> dict[str, bool]:
    return {
        "faults_at_least_100": s["faults"] >= 100,
        "acked_lost_zero": s["acked_lost"] == 0,
        "one_master_per_epoch": s["masters_per_epoch_max"] == 1,
        "logs_identical": s["logs_identical"] is True,
        "no_spurious_elections": s["spurious_elections"] == 0,
        "no_control_plane_outage_depositions": s["control_plane_outage_depositions"] == 0,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"soak: {args.faults} faults, seed {args.seed}", file=sys.stderr)
    out = run(args)
    out["goals"] = goals(out)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
