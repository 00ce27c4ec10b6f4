# One image for every process of the demo: web, Celery worker, Celery beat and the brokers;
# docker-compose.yml picks the process with `command:`. PostgreSQL and Redis come from their official
# images there, so the embedded ones (pulled in as dependencies) are installed but unused in containers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CONTROLPLANE_DATA_DIR=/data

# A C compiler for the store's codec (brokers/store/_codec.c); the image's Python ships its headers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies first, read from pyproject.toml alone, so code changes do not invalidate this layer.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY . .

# The editable install (as `make venv` does) compiles brokers/store/_codec.c in place. pyproject.toml
# marks the extension optional, so a failed compile would pass silently and the brokers would run on
# the Python codec, ten times slower per message: the second command fails the build instead.
RUN pip install --no-deps -e . && rm -rf build *.egg-info \
    && python -c 'import brokers.store._codec; from brokers.store import codec; assert codec.IMPLEMENTATION == "native", codec.IMPLEMENTATION'

# Don't run as root. /data: the generated secret key, static files, the beat schedule; /demo: the demo
# brokers' token; /events: the offset events of the audits; /store: a broker's store. Volumes mounted
# there start with this ownership.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin controlplane \
    && mkdir -p /data /demo /events /store && chown controlplane:controlplane /data /demo /events /store
USER controlplane

EXPOSE 8000
CMD ["uvicorn", "controlplane.asgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--ws", "websockets-sansio", "--ws-per-message-deflate", "false", "--loop", "uvloop", "--http", "httptools", "--no-access-log"]
