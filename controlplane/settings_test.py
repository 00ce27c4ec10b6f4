"""Settings for the test suite: the same services, but Redis keys of their own."""

import os

from controlplane.settings import *  # noqa: F403
from controlplane.settings import CHANNEL_LAYERS, DATA_DIR

REDIS_KEY_PREFIX = os.environ.get("TEST_REDIS_KEY_PREFIX", "rmqha-test:")
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = REDIS_KEY_PREFIX + "asgi"
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": REDIS_KEY_PREFIX + "celery:"}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "test-celerybeat-schedule")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
