"""A message's properties as one string: ``name \\x01 value \\x02`` per property, the form of the send
header's ``properties`` field and of the commit-log record (apache/rocketmq common/.../message/
MessageDecoder.java ``messageProperties2String``/``string2messageProperties``)."""

from __future__ import annotations

from collections.abc import Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


def property_problem(name: str, value: str) -> str | None:
    """Why a property cannot be written as one, or None: an empty name, or a separator in its name or
    value (Java writes them and its reader then splits them wrong: a value holding ``\\x02`` would
    smuggle in a property of the sender's choosing)."""
    if not name or any(sep in name or sep in value for sep in _SEPARATORS):
        return f"property {name!r:.40}: names are non-empty and neither names nor values hold \\x01 or \\x02"
    return None


def properties_problem(properties: Mapping[str, str]) -> str | None:
    """``property_problem`` of the first property that has one, or None: one scan of every name and
    value at C speed (a send's every message is checked)."""
    if "" not in properties:
        text = "".join(properties) + "".join(properties.values())
        if NAME_VALUE_SEPARATOR not in text and PROPERTY_SEPARATOR not in text:
            return None
    for name, value in properties.items():
        problem = property_problem(name, value)
        if problem is not None:
            return problem
    return None


def encode_properties(properties: Mapping[str, str | None]) -> str:
    """A property whose value is ``None`` is left out, as Java leaves out a null. Raises ``ValueError``
    for a property that cannot be written as one (``property_problem``)."""
    parts = []
    for name, value in properties.items():
        if value is None:
            continue
        problem = property_problem(name, value)
        if problem is not None:
            raise ValueError(problem)
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts)


def decode_properties(text: str) -> dict[str, str]:
    """Java's reading: a pair without a name or without a value is skipped, the value runs to the next
    ``\\x02`` (a second ``\\x01`` is part of it), the last of a repeated name wins."""
    properties = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        separator = pair.find(NAME_VALUE_SEPARATOR)
        if 0 < separator < len(pair) - 1:
            properties[pair[:separator]] = pair[separator + 1 :]
    return properties
