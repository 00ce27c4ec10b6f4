"""The ``test`` command: pytest against the resolved services, with the test settings."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys

from .common import BASE_DIR, child_env, enter_stopping, log
from .services import resolve_services

TEST_SETTINGS = "controlplane.settings_test"


def cmd_test(pytest_args: list[str]) -> int:
    """Run pytest against resolved services; return pytest's exit code."""
    services = resolve_services()
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = TEST_SETTINGS
        if importlib.util.find_spec(TEST_SETTINGS) is None:
            log(f"warning: {TEST_SETTINGS} does not exist (yet); pytest will fail to configure Django")
        argv = [sys.executable, "-m", "pytest", *pytest_args]
        log("running: " + " ".join(["python", "-m", "pytest", *pytest_args]))
        # pytest stays in our process group so a terminal Ctrl-C reaches it directly (it then
        # prints its summary); we only forward SIGTERM, which a terminal does not send.
        env = child_env() | {"DJANGO_SETTINGS_MODULE": TEST_SETTINGS}
        proc = subprocess.Popen(argv, cwd=BASE_DIR, env=env)
        signal.signal(signal.SIGINT, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
        code = proc.wait()
        if code < 0:  # killed by a signal: report it the way a shell would (128 + signum)
            log(f"pytest was killed by {signal.Signals(-code).name}")
            return 128 - code
        log(f"pytest exited with code {code}")
        return code
    finally:
        enter_stopping()
        services.stop()
