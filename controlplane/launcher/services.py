"""PostgreSQL and Redis: from DATABASE_URL / REDIS_URL when set, embedded otherwise; and the
``services`` command that only holds them."""

from __future__ import annotations

import os

from .common import Services, enter_stopping, log, redact, run_until_death
from .postgres import ensure_database, start_embedded_postgres
from .redis_server import check_redis, start_embedded_redis


def resolve_services() -> Services:
    """Environment first, embedded otherwise; exports the result into os.environ for children."""
    services = Services()
    try:
        env_db = os.environ.get("DATABASE_URL", "").strip()
        env_redis = os.environ.get("REDIS_URL", "").strip()
        if env_db:
            services.database_url = env_db
            log(f"using PostgreSQL from DATABASE_URL: {redact(env_db)}")
        else:
            start_embedded_postgres(services)
        ensure_database(services.database_url)
        if env_redis:
            services.redis_url = env_redis
            log(f"using Redis from REDIS_URL: {redact(env_redis)}")
            check_redis(env_redis)
        else:
            start_embedded_redis(services)
    except BaseException:
        services.stop()
        raise
    os.environ["DATABASE_URL"] = services.database_url
    os.environ["REDIS_URL"] = services.redis_url
    return services


def cmd_services() -> int:
    """Start/resolve Postgres + Redis, print exports, hold them until Ctrl-C."""
    services = resolve_services()
    try:
        print(f"export DATABASE_URL='{services.database_url}'", flush=True)
        print(f"export REDIS_URL='{services.redis_url}'", flush=True)
        log("services are ready; press Ctrl-C to stop them")
        run_until_death(services.watched, interval_s=1.0, consequence="")
    finally:
        enter_stopping()
        services.stop()
