"""The rules of finding messages (docs/messages.md §5), pure: what a query asks (which lookup, its time
range and cap), an offset message id decoded, the brokers' answers merged, a body shown as text, JSON
or hex, and which consumer groups a trace asks about. The services (messages.py, dlq.py) load and ask;
these decide."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from mqrules import validation as v
from mqrules.remoting.message_id import OffsetMessageId, decode_offset_message_id

DEFAULT_MAX = 64
MAX_CAP = 1000
RANGE_MAX_MS = 7 * 24 * 3600 * 1000
KEY_MAX = 255
PREVIEW_BYTES = 4096  # of a body, shown; /body downloads the whole
BODY_MAX_BYTES = 4 * 1024 * 1024  # a broker's view_message gives at most this much
PRETTY_MAX_CHARS = 4 * PREVIEW_BYTES  # a pretty-printed JSON preview longer than this is shown as sent
MSG_ID_PATTERN = r"^(?:[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$"
KEY_PATTERN = r"^[^ ]+$"
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


class By(StrEnum):
    KEY = "key"  # queryMsgByKey
    UNIQUE_KEY = "uniqueKey"  # queryMsgByUniqueKey
    TIME = "time"  # printMsg


@dataclass(frozen=True)
class Query:
    by: By
    topic: str
    key: str | None
    begin_ms: int
    end_ms: int
    max_num: int

    def payload(self) -> dict:
        """The broker request (§3): ``query_message`` or ``print_messages``."""
        common = {"topic": self.topic, "beginMs": self.begin_ms, "endMs": self.end_ms, "maxNum": self.max_num}
        if self.by is By.TIME:
            return common
        return {"by": self.by.value, "key": self.key, **common}

    @property
    def kind(self) -> str:
        return "print_messages" if self.by is By.TIME else "query_message"


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str) or not key:
        return "a key is 1 or more characters"
    if len(key) > KEY_MAX:
        return f"at most {KEY_MAX} characters"
    if " " in key:
        return "a key has no space (KEYS are split on spaces)"
    return v.storable(key)


def plan_query(
    topic: str,
    key: str | None,
    unique_key: str | None,
    begin_ms: int | None,
    end_ms: int | None,
    max_num: int | None,
    now_ms: int,
) -> Query:
    """The lookup a ``GET messages`` asks for: by key, by unique key, or every message stored in the range
    (printMsg). A range is at most 7 days (by default the last 7 days up to now; by unique key: any time
    unless given); ``max`` at most 1000 (64 by default). Raises ``v.Invalid`` with each field's problem."""
    errors: dict[str, list[str]] = {}
    if (bad := v.name(topic)) is not None:
        errors["topic"] = [bad]
    if key is not None and unique_key is not None:
        errors["uniqueKey"] = ["give key or uniqueKey, not both"]
    for field, value in (("key", key), ("uniqueKey", unique_key)):
        if value is not None and (bad := _key_problem(value)) is not None:
            errors[field] = [bad]
    for field, value in (("begin", begin_ms), ("end", end_ms)):
        if value is not None and not 0 <= value <= v.LONG_MAX:
            errors[field] = [f"epoch milliseconds from 0 to {v.LONG_MAX}"]
    if max_num is not None and not 1 <= max_num <= MAX_CAP:
        errors["max"] = [f"from 1 to {MAX_CAP} (the cap)"]
    by = By.UNIQUE_KEY if unique_key is not None else By.KEY if key is not None else By.TIME
    if not errors:
        begin_ms, end_ms = _range(by, begin_ms, end_ms, now_ms, errors)
    if errors:
        raise v.Invalid(errors)
    return Query(by, topic, unique_key if by is By.UNIQUE_KEY else key, begin_ms, end_ms, max_num or DEFAULT_MAX)  # type: ignore[arg-type]


def _range(by: By, begin: int | None, end: int | None, now_ms: int, errors: dict) -> tuple[int, int]:
    if by is By.UNIQUE_KEY and begin is None and end is None:
        return 0, v.LONG_MAX  # a unique key names one message: no window needed
    if end is None:
        end = now_ms if begin is None else min(v.LONG_MAX, begin + RANGE_MAX_MS)
    if begin is None:
        begin = max(0, end - RANGE_MAX_MS)
    if begin > end:
        errors["end"] = ["must not be before begin"]
    elif end - begin > RANGE_MAX_MS and by is not By.UNIQUE_KEY:
        errors["end"] = [f"a range is at most 7 days ({RANGE_MAX_MS} ms)"]
    return begin, end


def decode_msg_id(msg_id: object, field: str = "msgId") -> OffsetMessageId:
    """An offset message id (store host + commit-log offset); ``v.Invalid`` at ``field`` otherwise."""
    if not isinstance(msg_id, str):
        raise v.Invalid({field: ["an offset message id: 32 or 56 hex digits"]})
    try:
        decoded = decode_offset_message_id(msg_id)
    except ValueError as exc:
        raise v.Invalid({field: [v.escaped(str(exc))[:300]]}) from None
    if decoded.commit_log_offset < 0:
        raise v.Invalid({field: ["its commit-log offset is negative: not an offset message id"]})
    return decoded


def store_addr(decoded: OffsetMessageId) -> str:
    """The ``host:port`` a view's storeHost shows for the decoded id."""
    host = f"[{decoded.host}]" if ":" in decoded.host else decoded.host
    return f"{host}:{decoded.port}"


def merge(answers: Iterable[list[dict]], max_num: int, *, newest_first: bool = True) -> tuple[list[dict], bool]:
    """The views several broker sets answered, each message once (by brokerName and commitLogOffset), by
    store time (newest first; printMsg oldest first), at most ``max_num``; and whether some were cut."""
    seen: dict[tuple[str, int], dict] = {}
    for views in answers:
        for view in views:
            seen.setdefault((view["brokerName"], view["commitLogOffset"]), view)
    ordered = sorted(
        seen.values(), key=lambda m: (m["storeTimestamp"], m["brokerName"], m["commitLogOffset"]), reverse=newest_first
    )
    return ordered[:max_num], len(ordered) > max_num


class BodyFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    HEX = "hex"


def _utf8(raw: bytes, truncated: bool) -> str | None:
    """``raw`` as UTF-8, allowing a character cut at the end of a truncated preview."""
    for cut in range(4 if truncated else 1):
        try:
            text = raw[: len(raw) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if v.storable(text) is None and _printable(text) else None
    return None


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\r\n" for c in text)


def body_preview(raw: bytes, size: int, truncated: bool) -> dict:
    """How a body is shown (§5): JSON pretty-printed when the whole parses as JSON, else text when it is
    UTF-8, else hex; of at most PREVIEW_BYTES of it (``raw``: what the broker gave, its first bytes)."""
    shown = raw[:PREVIEW_BYTES]
    truncated = truncated or len(raw) > PREVIEW_BYTES
    text = _utf8(shown, truncated)
    if text is None:
        return {"format": BodyFormat.HEX.value, "text": shown.hex(), "size": size, "truncated": truncated}
    if not truncated:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict | list):
            pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
            if len(pretty) <= PRETTY_MAX_CHARS:
                return {"format": BodyFormat.JSON.value, "text": pretty, "size": size, "truncated": False}
    return {"format": BodyFormat.TEXT.value, "text": text, "size": size, "truncated": truncated}


def retry_group(topic_name: str, topic: str) -> str | None:
    """The group of a pop consumer's retry topic of ``topic`` (``%RETRY%<group>_<topic>``), else None."""
    suffix = "_" + topic
    if topic_name.startswith(RETRY_PREFIX) and topic_name.endswith(suffix):
        group = topic_name[len(RETRY_PREFIX) : -len(suffix)]
        return group or None
    return None


def trace_groups(topic: str, readers: Iterable[str], topic_names: Iterable[str], subscribers: Iterable[str]) -> list[str]:
    """The consumer groups a message of ``topic`` is traced for: those with committed offsets on the topic
    (``readers``), those with a retry topic of it among ``topic_names``, and those whose clients subscribe
    to it now; sorted, each once."""
    groups = set(readers) | set(subscribers)
    groups |= {g for name in topic_names if (g := retry_group(name, topic)) is not None}
    return sorted(g for g in groups if v.is_name(g))


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
