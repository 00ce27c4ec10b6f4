"""The issue's soak: ``python -m chaos.soak`` with at least 100 faults (every kind in chaos/soak.py,
in a seeded random order) against the official client's load, and its figures against the goals.

    .venv/bin/python bench/soak.py [--faults 100] [--seed 7]

Runs as root for the disk-full faults (a tmpfs per broker); otherwise they are left out and the
report says so. Everything else (its own Redis and PostgreSQL, the control plane, three brokers, the
client processes) is started and stopped by the run. Report, RTO plot and logs in
test-artifacts/soak/<time>/. The last line printed is one JSON object: the soak's figures plus
``goals``: faults >= 100, and every check of chaos.soak.goals (0 acked_lost, acked_undelivered,
failed_faults, failed_sends_while_writable, refused_cuts, guard_errors, unreadable_cut_lines,
spurious, burnt or unexpected elections, control_plane_outage_depositions; one master per epoch;
identical logs; check_controller_invariants clean). Exit code 0 when no check failed, 1 otherwise:
chaos.soak's own rule (its ``failures``), the same as ``python -m chaos.soak``; a run shorter than
100 faults misses that goal but is not failed for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaos import soak  # noqa: E402


def goals(s: dict) -> dict[str, bool]:
    return {"faults_at_least_100": s["faults"] >= 100} | {g.name: g.met for g in soak.goals(s)}


def main(argv: list[str] | None = None) -> int:
    args = soak.parse_args(argv)
    print(f"soak: {args.faults} faults, seed {args.seed}", file=sys.stderr)
    out = soak.run(args)
    out["goals"] = goals(out)
    return soak.finish(out)


if __name__ == "__main__":
    sys.exit(main())
