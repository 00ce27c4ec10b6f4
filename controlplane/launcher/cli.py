"""Argument parsing and the exit codes of ``python -m controlplane.launcher``."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from .common import LauncherError, Shutdown, install_signal_handlers, log
from .demo import DEFAULT_PORT, DEFAULT_REMOTING_PORT, cmd_demo
from .run_tests import cmd_test
from .services import cmd_services


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: python -m controlplane.launcher {demo [--port N] [--namesrv-port N] | test [pytest args...] | services}\n"
        "  demo      migrate, bootstrap the operator, run web + nameserver remoting + Celery worker + beat until Ctrl-C\n"
        "  test      run pytest (all arguments are passed on) with controlplane.settings_test\n"
        "  services  start/resolve PostgreSQL + Redis and print export lines until Ctrl-C\n"
        "DATABASE_URL / REDIS_URL select existing services; unset ones are embedded under .data/."
    )
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    install_signal_handlers()
    try:
        if command == "demo":
            parser = argparse.ArgumentParser(prog="python -m controlplane.launcher demo")
            # A string default goes through type=int too, so PORT=abc is a clean usage error.
            parser.add_argument(
                "--port",
                type=int,
                default=os.environ.get("PORT") or str(DEFAULT_PORT),
                help="HTTP port on 127.0.0.1 (default: $PORT or 8000)",
            )
            parser.add_argument(
                "--namesrv-port",
                type=int,
                default=os.environ.get("NAMESRV_PORT") or str(DEFAULT_REMOTING_PORT),
                help="the nameserver's remoting port on 127.0.0.1, clients' namesrvAddr (default: $NAMESRV_PORT or 9876)",
            )
            parser.add_argument(
                "--plaintext",
                action="store_true",
                help="no TLS (local development): http, plaintext gRPC, the HA link and peer channel with the peer token",
            )
            parsed = parser.parse_args(rest)
            return cmd_demo(parsed.port, parsed.namesrv_port, plaintext=parsed.plaintext)
        if command == "services":
            if rest:
                print(usage, file=sys.stderr)
                return 2
            return cmd_services()
        if command == "test":
            return cmd_test(rest)
        print(usage, file=sys.stderr)
        return 2
    except Shutdown as stop:
        log(f"stopped ({signal.Signals(stop.signum).name})")
        # Stopping the demo/services is their normal end; an interrupted test run is not a pass.
        return 128 + stop.signum if command == "test" else 0
    except LauncherError as exc:
        log(f"error: {exc}")
        return 1
