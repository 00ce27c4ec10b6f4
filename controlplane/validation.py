"""The input rules of the control plane, in one place: REST serializers, the broker websocket's frame
handlers and the audits' offset-event intake all call them.

Pure (floor 0): the standard library only. A check takes a JSON value and answers ``None`` (valid) or
the message to show; several checks together raise ``Invalid``, which carries field errors shaped like
DRF's (``{"field": ["message"]}``, nested for objects and lists). DRF serializers reach these rules
through ``controlplane.validation_drf``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

Check = Callable[[object], "str | None"]
FieldErrors = dict[str, object]

MAX_ID = 2**63 - 1  # Java's Long.MAX_VALUE: ids, offsets, epochs and timestamps
INT_MAX = 2**31 - 1
NAME_MAX_LENGTH = 127
ADDR_MAX_LENGTH = 255

# Cluster, broker set, topic and group names: TopicValidator's character set. '/' is refused
# everywhere because liveness keys use it as a separator.
_NAME = re.compile(r"^[%|a-zA-Z0-9_.-]+$")
_ADDR = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
NAME_MESSAGE = "only letters, digits and %|_.- are allowed"
ADDR_MESSAGE = "must be host:port"
NAME_PATTERN, ADDR_PATTERN = _NAME.pattern, _ADDR.pattern  # for OpenAPI schemas
REQUIRED_MESSAGE = "This field is required."


class Invalid(ValueError):
    """Input that breaks one or more rules. ``fields``: field name -> messages (or nested errors), or
    a list of messages when the value as a whole is wrong."""

    def __init__(self, fields: FieldErrors | list[str]):
        super().__init__(fields)
        self.fields = fields


# --- single values ---------------------------------------------------------------------------------


def is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= NAME_MAX_LENGTH and _NAME.match(value) is not None


def is_addr(value: object) -> bool:
    return isinstance(value, str) and len(value) <= ADDR_MAX_LENGTH and _ADDR.match(value) is not None


def name(value: object) -> str | None:
    """A cluster, broker set, topic or group name (1 to 127 characters)."""
    if isinstance(value, str) and len(value) > NAME_MAX_LENGTH:
        return f"at most {NAME_MAX_LENGTH} characters"
    return None if is_name(value) else NAME_MESSAGE


def addr(value: object) -> str | None:
    """A ``host:port`` address."""
    if isinstance(value, str) and len(value) > ADDR_MAX_LENGTH:
        return f"at most {ADDR_MAX_LENGTH} characters"
    return None if is_addr(value) else ADDR_MESSAGE


def integer(minimum: int = 0, maximum: int = MAX_ID) -> Check:
    """A JSON integer in [minimum, maximum], strictly typed (no "12", no true): values are stored as sent."""

    def check(value: object) -> str | None:
        return None if type(value) is int and minimum <= value <= maximum else f"must be an integer from {minimum} to {maximum}"

    return check


def rate(value: object) -> str | None:
    """A finite, non-negative number (Python's json accepts NaN and Infinity; answers cannot carry them)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return None if ok else "must be a non-negative number"


def boolean(value: object) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def one_of(choices: Iterable[str]) -> Check:
    allowed = tuple(choices)
    message = "must be one of " + ", ".join(allowed)

    def check(value: object) -> str | None:
        return None if isinstance(value, str) and value in allowed else message

    return check


# --- objects ---------------------------------------------------------------------------------------


def json_object(
    value: Mapping, required: Mapping[str, Check], optional: Mapping[str, Check] | None = None
) -> tuple[dict, FieldErrors]:
    """The known fields of a JSON object (unknown ones are dropped; an optional one that is absent or
    null is left out) and the errors per field."""
    out: dict = {}
    errors: FieldErrors = {}
    for key, check in required.items():
        if key not in value:
            errors[key] = [REQUIRED_MESSAGE]
        elif (message := check(value[key])) is not None:
            errors[key] = [message]
        else:
            out[key] = value[key]
    for key, check in (optional or {}).items():
        if value.get(key) is None:
            continue
        if (message := check(value[key])) is not None:
            errors[key] = [message]
        else:
            out[key] = value[key]
    return out, errors


def checked(value: object, required: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> dict:
    """``json_object`` for a value that must be a JSON object; raises ``Invalid`` on any error."""
    if not isinstance(value, dict):
        raise Invalid(["must be a JSON object"])
    out, errors = json_object(value, required, optional)
    if errors:
        raise Invalid(errors)
    return out
