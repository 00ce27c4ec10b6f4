# One image for every control-plane process (web, Celery worker, Celery beat); docker-compose.yml
# picks the process with `command:`. PostgreSQL and Redis come from their official images there, so
# the embedded ones (pulled in as dependencies) are installed but unused in containers.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CONTROLPLANE_DATA_DIR=/data

WORKDIR /app

# Dependencies first, from pyproject.toml alone ([tool.setuptools] packages = [] installs nothing
# else), so code changes do not invalidate this layer.
COPY pyproject.toml ./
RUN pip install . && rm -rf build *.egg-info

COPY . .

# Don't run as root; /data holds the generated secret key, static files and the beat schedule.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin controlplane \
    && mkdir -p /data && chown controlplane:controlplane /data
USER controlplane

EXPOSE 8000
CMD ["uvicorn", "controlplane.asgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--ws", "websockets-sansio", "--ws-per-message-deflate", "false", "--loop", "uvloop", "--http", "httptools", "--no-access-log"]
