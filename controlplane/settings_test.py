"""Settings for the test suite: the same services, but Redis keys of their own."""

import os

from controlplane.settings import *  # noqa: F403
from controlplane.settings import CHANNEL_LAYERS, DATA_DIR

# Under pytest-xdist each worker (gw0, gw1, ...) has keys of its own, as it has a database of its own
# (pytest-django suffixes the test database's name): the workers never see each other's state.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
REDIS_KEY_PREFIX = os.environ.get("TEST_REDIS_KEY_PREFIX", f"rmqha-test-{_WORKER}:" if _WORKER else "rmqha-test:")
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = REDIS_KEY_PREFIX + "asgi"
CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": REDIS_KEY_PREFIX + "celery:"}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / f"test-celerybeat-schedule{_WORKER}")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The suite calls the API far faster than any operator: throttles stay on, at rates it never reaches;
# tests/test_doors.py sets low rates to see them refuse.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {s: "100000/min" for s in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]}}  # noqa: F405
# A fixed key for ACL users' secret keys (controlplane/secretbox.py), unless the environment gives one.
ACL_SECRET_KEYS = ACL_SECRET_KEYS or ["NjBrc59IKOthoOOoSfUZatsuUFbeHJ9ckFp7kACylK8="]  # noqa: F405
