"""The input rules of the control plane, in one place: REST serializers, the broker websocket's frame
handlers and the audits' offset-event intake all call them.

Pure (floor 0): the standard library only. A check takes a JSON value and answers ``None`` (valid) or
the message to show; several checks together raise ``Invalid``, which carries field errors shaped like
DRF's (``{"field": ["message"]}``, nested for objects and lists). DRF serializers reach these rules
through ``controlplane.validation_drf``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping

Check = Callable[[object], "str | None"]
FieldErrors = dict[str, object]

MAX_ID = 2**63 - 1  # Java's Long.MAX_VALUE: ids, offsets, epochs and timestamps
LONG_MAX = MAX_ID
INT_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE
NAME_MAX_LENGTH = 127
ADDR_MAX_LENGTH = 255
TEXT_MAX_LENGTH = 4096
NON_FIELD = "non_field_errors"  # DRF's key for an error of the value as a whole


def decimal_pattern(minimum: int, maximum: int) -> str:
    """A regular expression (Python and ECMA alike, to embed in a larger one) of exactly the ASCII
    decimals from ``minimum`` to ``maximum`` (0 <= minimum <= maximum), without leading zeros: how a
    schema says "a port" or "an id that fits a Java long" of a number written as text."""
    below = f"(?!(?:{_at_most(minimum - 1)})(?![0-9]))" if minimum > 0 else ""
    return f"{below}(?:{_at_most(maximum)})(?![0-9])"


def _at_most(n: int) -> str:
    """0..n: every shorter length, then n's own length digit by digit."""

    def digit_range(low: int, high: int) -> str:
        return str(low) if low == high else f"[{low}-{high}]"

    def any_digits(count: int) -> str:
        return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"

    digits = str(n)
    alternatives = ["0"]
    if len(digits) > 2:
        alternatives.append(f"[1-9][0-9]{{0,{len(digits) - 2}}}")
    elif len(digits) == 2:
        alternatives.append("[1-9]")
    for i, d in enumerate(digits):
        low = 1 if i == 0 and len(digits) > 1 else 0
        if int(d) > low:
            alternatives.append(digits[:i] + digit_range(low, int(d) - 1) + any_digits(len(digits) - i - 1))
    alternatives.append(digits)
    return "|".join(dict.fromkeys(alternatives))


# Cluster, broker set, topic and group names: TopicValidator's character set. '/' is refused
# everywhere because liveness keys use it as a separator. Patterns are matched whole (fullmatch: a
# trailing newline does not pass "$") and use ASCII classes only (Python's \d takes any digit, "١٢٣").
_HOST = r"[A-Za-z0-9_.\-\[\]:]+"
_PORT = decimal_pattern(1, 65535)
_NAME = re.compile(r"^[%|a-zA-Z0-9_.-]+$")
_ADDR = re.compile(rf"^{_HOST}:{_PORT}$")
# RocketMQ's "<brokerAddr>;<millis>": the address part is the replica's address, an address by its rule.
_CHECK_CODE = re.compile(rf"^(?=[^;]{{1,{ADDR_MAX_LENGTH}}};){_HOST}:{_PORT};[0-9]{{1,19}}$")
_ID = decimal_pattern(1, MAX_ID)
_IDS = re.compile(rf"^ *(?:{_ID} *(?:; *{_ID} *)*)?;?$")  # brokerControllerIdsToClean: "1;2", blank for none
_QUERY_INTEGER = re.compile(r"-?[0-9]{1,19}")
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")  # Postgres stores neither NUL nor a lone UTF-16 surrogate
NAME_MESSAGE = "only letters, digits and %|_.- are allowed"
ADDR_MESSAGE = "must be host:port, the port from 1 to 65535"
CHECK_CODE_MESSAGE = "must be '<brokerAddr>;<millis>'"
IDS_MESSAGE = f"ids from 1 to {MAX_ID} separated by ';', e.g. 1;2"
NUL_MESSAGE = "must not contain NUL characters"
SURROGATE_MESSAGE = "must not contain unpaired UTF-16 surrogates"
# For OpenAPI schemas: the same expressions. Text fields state only the NUL rule (a regex cannot
# say "no lone surrogate" the same way in Python and ECMA).
NAME_PATTERN, ADDR_PATTERN, CHECK_CODE_PATTERN, IDS_PATTERN = _NAME.pattern, _ADDR.pattern, _CHECK_CODE.pattern, _IDS.pattern
TEXT_PATTERN = r"^[^\x00]*$"
NAME_SCHEMA = {"type": "string", "minLength": 1, "maxLength": NAME_MAX_LENGTH, "pattern": NAME_PATTERN}
ADDR_SCHEMA = {"type": "string", "minLength": 1, "maxLength": ADDR_MAX_LENGTH, "pattern": ADDR_PATTERN}
REQUIRED_MESSAGE = "This field is required."


class Invalid(ValueError):
    """Input that breaks one or more rules. ``fields``: field name -> messages (or nested errors), or
    a list of messages when the value as a whole is wrong."""

    def __init__(self, fields: FieldErrors | list[str]):
        super().__init__(fields)
        self.fields = fields


# --- single values ---------------------------------------------------------------------------------


def storable(text: str) -> str | None:
    """What keeps a string out of Postgres (NUL, a lone surrogate), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return NUL_MESSAGE if found.group() == "\x00" else SURROGATE_MESSAGE


def escaped(text: str) -> str:
    """``text`` with what ``storable`` refuses written as escapes (``\\x00``, ``\\ud800``): a faithful
    rendering of what a client sent, for the audit log and for error bodies that quote it."""
    if _UNSTORABLE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= NAME_MAX_LENGTH and _NAME.fullmatch(value) is not None


def is_addr(value: object) -> bool:
    return isinstance(value, str) and len(value) <= ADDR_MAX_LENGTH and _ADDR.fullmatch(value) is not None


def name(value: object) -> str | None:
    """A cluster, broker set, topic or group name (1 to 127 characters)."""
    if isinstance(value, str) and len(value) > NAME_MAX_LENGTH:
        return f"at most {NAME_MAX_LENGTH} characters"
    return None if is_name(value) else NAME_MESSAGE


def addr(value: object) -> str | None:
    """A ``host:port`` address, the port an ASCII decimal from 1 to 65535."""
    if isinstance(value, str) and len(value) > ADDR_MAX_LENGTH:
        return f"at most {ADDR_MAX_LENGTH} characters"
    return None if is_addr(value) else ADDR_MESSAGE


def text(max_length: int = TEXT_MAX_LENGTH) -> Check:
    """Free text (a zone name, a config value): a string Postgres can store, of at most ``max_length``."""

    def check(value: object) -> str | None:
        if not isinstance(value, str):
            return "must be a string"
        if len(value) > max_length:
            return f"at most {max_length} characters"
        return storable(value)

    return check


def matching(pattern: str, message: str, max_length: int) -> Check:
    """A string that matches ``pattern`` as a whole (``pattern`` as written for the schema)."""
    compiled = re.compile(pattern)

    def check(value: object) -> str | None:
        if isinstance(value, str) and len(value) <= max_length and compiled.fullmatch(value) is not None:
            return None
        return message

    return check


CHECK_CODE_MAX_LENGTH = 300
register_check_code = matching(CHECK_CODE_PATTERN, CHECK_CODE_MESSAGE, CHECK_CODE_MAX_LENGTH)
IDS_MAX_LENGTH = 4096
broker_ids_text = matching(IDS_PATTERN, IDS_MESSAGE, IDS_MAX_LENGTH)


def broker_ids(raw: str) -> frozenset[int]:
    """The ids of a ``brokerControllerIdsToClean`` that passed ``broker_ids_text`` (every one fits a
    Java long: RocketMQ's Long.valueOf refuses the others with 2009)."""
    return frozenset(int(p) for p in raw.replace(" ", "").split(";") if p)


def query_integer(text: str) -> int | None:
    """An integer written as a query parameter ("-1", "200"; not "1.0", " 2" or "١٢"), or None."""
    return int(text) if _QUERY_INTEGER.fullmatch(text) else None


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


# --- JSON text -------------------------------------------------------------------------------------


def parse_json(raw: str | bytes | bytearray) -> object:
    """A request body or websocket frame as a JSON value, refused (``Invalid``) rather than crashing
    on anything Python's json takes that JSON cannot be: text that is not UTF-8, nesting beyond the
    parser's recursion limit, integers of more than 4,300 digits; and, with where they are
    (``RefusedValues``), NaN, Infinity and numbers beyond a double. Strings are the fields' business:
    every field that keeps one refuses what Postgres cannot store (``storable``); unknown fields are
    dropped, whatever they hold."""
    if isinstance(raw, bytes | bytearray):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid({NON_FIELD: [f"not UTF-8 text (byte {exc.start})"]}) from None
    non_finite: list[str] = []

    def constant(text: str) -> float:  # NaN, Infinity, -Infinity: not JSON, but Python's json takes them
        non_finite.append(text)
        return float(text)

    def number(text: str) -> float:  # 1e400 parses as inf
        value = float(text)
        if not math.isfinite(value):
            non_finite.append(text)
        return value

    try:
        value = json.loads(raw, parse_constant=constant, parse_float=number)
    except RecursionError:
        raise Invalid({NON_FIELD: ["JSON nested too deeply"]}) from None
    except json.JSONDecodeError as exc:
        raise Invalid({NON_FIELD: [f"not valid JSON: {exc}"]}) from None
    except ValueError:  # an integer beyond int()'s digit limit
        raise Invalid({NON_FIELD: ["not valid JSON: an integer of too many digits"]}) from None
    if non_finite:
        raise RefusedValues(non_finite_numbers(value), value)
    return value


class RefusedValues(Invalid):
    """Valid JSON to Python, not to anyone else (NaN, Infinity); ``value`` is what was parsed (a
    websocket frame's ``seq`` is still answered)."""

    def __init__(self, fields: FieldErrors, value: object):
        super().__init__(fields)
        self.value = value


NON_FINITE_MESSAGE = "must be a finite number (NaN and Infinity are not JSON)"


def non_finite_numbers(value: object) -> FieldErrors:
    """DRF-shaped errors for every NaN or infinite number in a JSON value, at the field that holds it.
    Iterative: deep values are fine."""
    errors: FieldErrors = {}
    stack: list[tuple[object, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            _put(errors, path, NON_FINITE_MESSAGE)
        elif isinstance(item, dict):
            stack.extend((inner, (*path, str(key))) for key, inner in item.items())
        elif isinstance(item, list):
            stack.extend((inner, (*path, str(i))) for i, inner in enumerate(item))
    return errors


def _put(errors: FieldErrors, path: tuple[str, ...], message: str) -> None:
    node: dict = errors
    for key in path[:-1]:
        inner = node.setdefault(key, {})
        if not isinstance(inner, dict):  # a message already stands at this level
            return
        node = inner
    messages = node.setdefault(path[-1] if path else NON_FIELD, [])
    if isinstance(messages, list) and message not in messages:
        messages.append(message)


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
