"""Django settings for the control plane (nameserver + controller + dashboards).

Everything that differs between a laptop demo, CI and production comes from the environment:
DATABASE_URL, REDIS_URL, DJANGO_SECRET_KEY, DJANGO_DEBUG, DJANGO_ALLOWED_HOSTS, CONTROLPLANE_ROLES.
The launcher (``python -m controlplane.launcher``) sets DATABASE_URL / REDIS_URL to embedded
services when they are not given.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("CONTROLPLANE_DATA_DIR", BASE_DIR / ".data"))


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    # A per-installation key kept in the data folder, so sessions survive restarts of the demo.
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        path.write_text(key)
        path.chmod(0o600)
        return key


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# Which halves of the control plane this process serves: "nameserver", "controller" or both.
CONTROLPLANE_ROLES = frozenset(
    r.strip() for r in os.environ.get("CONTROLPLANE_ROLES", "nameserver,controller").split(",") if r.strip()
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "controlplane",
    "controlplane.controller",
    "nameserver",
    "controlplane.operations",
    "dashboards",
    "axes",  # login lockout after repeated failures (docs/acl.md "Threat model")
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controlplane.audit.AuditMiddleware",  # operators' REST actions (admin tokens) into the audit log
    "axes.middleware.AxesMiddleware",  # answers a locked-out login with 429
]

# Login lockout (django-axes): after AXES_FAILURE_LIMIT failed logins for one username from one address,
# that pair is locked out for AXES_COOLOFF_TIME; a success resets the count.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = int(os.environ.get("RMQHA_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("RMQHA_LOGIN_COOLOFF_MINUTES", "15")) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# The security headers `manage.py check --deploy` asks for. Those that only make sense over TLS (HSTS,
# secure cookies, the https redirect) follow DJANGO_HTTPS=1, which the launcher sets when it serves the
# control plane over https; plaintext stays for local development.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
HTTPS = os.environ.get("DJANGO_HTTPS", "0") == "1"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rocketmq_ha")
# A psycopg 3 connection pool per process (Django 5.1+). Persistent per-thread connections leak under
# ASGI, where each request runs in a thread of its own: 1,000 brokers exhausted Postgres's 100 slots.
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
    "min_size": 1,
    "max_size": int(os.environ.get("DATABASE_POOL_SIZE", "10")),
    "timeout": 10,
}
DATABASES["default"].setdefault("TEST", {})
if os.environ.get("DATABASE_TEST_NAME"):
    DATABASES["default"]["TEST"]["NAME"] = os.environ["DATABASE_TEST_NAME"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# Every Redis key this control plane writes starts with this prefix, so several deployments
# (or a test run beside a demo) can share one Redis.
REDIS_KEY_PREFIX = os.environ.get("REDIS_KEY_PREFIX", "rmqha:")
# The blindness guard (controlplane/blindness.py, docs/failover.md): time after the moment by which more
# than half of the brokers due were expected, plus the grace, is not counted toward any broker's
# heartbeat timeout (expectations older than the stale bound count for nothing); nor is time after the
# web tier's last stamp plus its grace, nor time in which no scan looked for longer than the gap.
HEARING_GRACE_MILLIS = int(os.environ.get("HEARING_GRACE_MILLIS", "500"))
HEARING_WEB_GRACE_MILLIS = int(os.environ.get("HEARING_WEB_GRACE_MILLIS", "1000"))
HEARING_STALE_MILLIS = int(os.environ.get("HEARING_STALE_MILLIS", "60000"))
HEARING_MAX_GAP_MILLIS = int(os.environ.get("HEARING_MAX_GAP_MILLIS", "5000"))

# After a Redis restart every pooled connection is dead. redis-py retries a command that meets one on
# a fresh connection only in the clients it builds itself; the asyncio pools built by hand (ours in
# controlplane.redis, the channel layer's) get this policy, or each dead connection fails one command:
# a broker's heartbeat refused, a push lost. Connection errors only: a timeout is not retried.
REDIS_ASYNC_RETRY = Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.01), 3, (RedisConnectionError,))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "controlplane.channel_layer.OneTripRedisChannelLayer",  # channels-redis's, one round trip a send
        "CONFIG": {
            # redis-py 8 defaults to a 5 s socket timeout, which equals channels-redis's 5 s BRPOP:
            # any latency then kills the consumer's receive loop. Give reads room beyond the BRPOP.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30, "socket_connect_timeout": 5, "retry": REDIS_ASYNC_RETRY}],
            "prefix": REDIS_KEY_PREFIX + "asgi",
            "capacity": 1000,
            "expiry": 30,
        },
    }
}

# What one peer of a websocket may cost (docs/websocket.md "Limits", docs/dashboard.md): a broker
# socket's largest frame (the REST body limit below; the server itself, uvicorn's --ws-max-size, closes
# the socket with 1009 beyond 16 MiB) and its frame budget (a token bucket: the burst, then the rate;
# a broker sends a few frames a second); a dashboard socket whose page reads nothing for this long is
# closed with 1013 (its pending updates are dropped; the page reconnects).
BROKER_WS_MAX_FRAME_BYTES = int(os.environ.get("BROKER_WS_MAX_FRAME_BYTES", "2621440"))
BROKER_WS_FRAMES_PER_SECOND = float(os.environ.get("BROKER_WS_FRAMES_PER_SECOND", "100"))
BROKER_WS_FRAME_BURST = int(os.environ.get("BROKER_WS_FRAME_BURST", "200"))
DASHBOARD_WS_STALL_SECONDS = float(os.environ.get("DASHBOARD_WS_STALL_SECONDS", "10"))
# How long an operator's request to a broker (updateBrokerConfig, an offset reset) waits for its answer
# (controlplane/broker_rpc.py): past it the operator is told the broker did not answer.
BROKER_RPC_TIMEOUT_SECONDS = float(os.environ.get("BROKER_RPC_TIMEOUT_SECONDS", "10"))

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": REDIS_KEY_PREFIX + "celery:"}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Dashboard water-level history (dashboards/sampling.py): one sample per broker this often, kept this long.
WATER_LEVEL_SAMPLE_SECONDS = float(os.environ.get("WATER_LEVEL_SAMPLE_SECONDS", "5"))
WATER_LEVEL_RETENTION_HOURS = float(os.environ.get("WATER_LEVEL_RETENTION_HOURS", "24"))

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request without it
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "dashboards.staticfinders.PlotlyJsFinder",  # js/plotly.min.js from the installed plotly package
]
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.auth.HasReadAccess"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.errors.exception_handler",
    # The API takes JSON bodies only (docs/api.md "Input rules"): a form or multipart body gets 415.
    "DEFAULT_PARSER_CLASSES": ["controlplane.validation_drf.JsonParser"],
    "UNAUTHENTICATED_USER": None,
    # Doors shut to guessing and flooding (controlplane/throttling.py; broker calls are exempt).
    "DEFAULT_THROTTLE_CLASSES": [
        "controlplane.throttling.TokenThrottle",
        "controlplane.throttling.OperatorThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        scope: os.environ.get(f"RMQHA_THROTTLE_{scope.upper()}", default)
        for scope, default in {
            "anon": "120/min",
            "token": "6000/min",
            "operator": "1200/min",
            "auth_failure": "30/min",
        }.items()
    },
}
# ACL users' secret keys are stored encrypted with these Fernet keys (controlplane/secretbox.py): the first
# encrypts, all decrypt (rotation: a new key first, then `manage.py rotate_acl_keys`). None: users cannot be created.
ACL_SECRET_KEYS = [k.strip() for k in os.environ.get("RMQHA_ACL_KEYS", "").split(",") if k.strip()]
# A request body of more than this many bytes is refused with 413 (a broker's batch of 10,000 offset
# events is about 1.5 MB); forms (the dashboard's and the admin's) of more fields with 400.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000

SPECTACULAR_SETTINGS = {
    "TITLE": "RocketMQ HA control plane API",
    "DESCRIPTION": (
        "Nameserver (broker registry, lightweight heartbeats, topic routes with slave-acting-master) "
        "and controller. Errors are JSON {code, name, detail} with RocketMQ response codes."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        # what every operation may answer beyond its view's declaration (controlplane/openapi.py)
        "controlplane.openapi.complete_responses",
        # a body whose schema requires properties is a required body (controlplane/validation_drf.py)
        "controlplane.validation_drf.require_bodies",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

# --- audits (issue #8): offset event store, Spark audit job, schedule; docs/audits.md -------------
INSTALLED_APPS += ["audits"]
# Where offset events are appended (Parquet, partitioned by date): a folder, or any URI pyarrow and
# Spark both understand (s3://..., hdfs://...).
# Test runs (controlplane.settings_test, which imports this module) keep theirs apart from the demo's.
_TESTING = os.environ.get("DJANGO_SETTINGS_MODULE", "").endswith("settings_test")
AUDIT_EVENTS_URI = os.environ.get("AUDIT_EVENTS_URI", str(DATA_DIR / ("test-offset-events" if _TESTING else "offset-events")))
AUDIT_EVENTS_FLUSH_SECONDS = float(os.environ.get("AUDIT_EVENTS_FLUSH_SECONDS", "10"))
AUDIT_EVENTS_BUFFER_MAX_BATCHES = int(os.environ.get("AUDIT_EVENTS_BUFFER_MAX_BATCHES", "200000"))
AUDIT_INTERVAL_SECONDS = float(os.environ.get("AUDIT_INTERVAL_SECONDS", "3600"))  # Celery beat: hourly
AUDIT_SPARK_MASTER = os.environ.get("AUDIT_SPARK_MASTER", "local[*]")
AUDIT_SPARK_CONF = [c for c in os.environ.get("AUDIT_SPARK_CONF", "").split(",") if c]  # "k=v,k=v"
# A resident Spark (python -m spark_jobs.server) the audits run on, sc://localhost:PORT; empty: each
# run starts its own. The launcher's demo starts one and sets both.
AUDIT_SPARK_REMOTE = os.environ.get("AUDIT_SPARK_REMOTE", "")
AUDIT_SPARK_TOKEN_FILE = os.environ.get("AUDIT_SPARK_TOKEN_FILE", str(DATA_DIR / "audit-spark.token"))
AUDIT_LOOKBACK_DAYS = int(os.environ.get("AUDIT_LOOKBACK_DAYS", "7"))
AUDIT_RUN_TIMEOUT_SECONDS = float(os.environ.get("AUDIT_RUN_TIMEOUT_SECONDS", "3600"))
AUDIT_STALE_RUN_SECONDS = float(os.environ.get("AUDIT_STALE_RUN_SECONDS", "180"))
# The results page's plotly.min.js comes from dashboards.staticfinders.PlotlyJsFinder (above).
# --- end audits ----------------------------------------------------------------------------------
