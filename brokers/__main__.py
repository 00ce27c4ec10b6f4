"""``python -m brokers -c broker.conf``: run one broker until SIGINT/SIGTERM.

Exit codes: 0 after a clean stop, 2 for an invalid configuration (one line per problem).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from .broker import Broker
from .config import ConfigInvalid, load
from .runtime import tune_gc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m brokers", description="Run a broker.")
    parser.add_argument("-c", "--config", required=True, help="broker.conf (RocketMQ key names)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigInvalid as exc:
        print(f"invalid broker configuration {args.config}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    tune_gc()
    asyncio.run(Broker(config, Path(args.config)).run_until_signalled())
    return 0


if __name__ == "__main__":
    sys.exit(main())
