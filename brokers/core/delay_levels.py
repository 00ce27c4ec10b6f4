"""RocketMQ 4.x delay levels (``messageDelayLevel``, reference §7), carried out by the timer wheel
(brokers/timer.py; the due time: brokers/core/timer.py) like any delivery time. Pure, standard library only.

- A message whose ``DELAY`` property is a level ``n > 0`` is due ``levels[n - 1]`` after it is stored;
  a level above the last is the last (RocketMQ clamps it); ``0`` or less is no delay.
- With ``useDelayLevel`` (RocketMQ's proxy setting) a 5.x delivery time is rounded **up** to a level:
  the first level whose delay is longer than the time left (``computeDelayLevel``), or the last.
"""

from __future__ import annotations

DELAY = "DELAY"  # MessageConst.PROPERTY_DELAY_TIME_LEVEL
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 1m"`` as each level's delay in milliseconds (level 1 first). ValueError, saying which
    item, for an empty list or an item that is not a whole number followed by s, m, h or d."""
    items = text.split()
    if not items:
        raise ValueError("must name at least one level, e.g. 1s 5s 10s")
    levels = []
    for item in items:
        number, unit = item[:-1], item[-1:]
        if unit not in _UNIT_MS or not number.isdecimal() or int(number) == 0:
            raise ValueError(f"{item!r} is not a delay: a whole number > 0 followed by s, m, h or d")
        levels.append(int(number) * _UNIT_MS[unit])
    return tuple(levels)


def level_of(text: str) -> int:
    """A ``DELAY`` property's level; ValueError for anything but a whole number."""
    stripped = text.strip()
    if not stripped.removeprefix("-").isdecimal():
        raise ValueError(f"{DELAY} must be a whole number (a delay level), got {text!r}")
    return int(stripped)


def level_delay_ms(level: int, levels: tuple[int, ...]) -> int | None:
    """How long after it is stored a message of ``level`` is due; None for no delay (level <= 0)."""
    if level <= 0:
        return None
    return levels[min(level, len(levels)) - 1]


def level_for(wait_ms: int, levels: tuple[int, ...]) -> int:
    """The level a delivery ``wait_ms`` ahead is rounded up to: the one with the shortest delay
    longer than ``wait_ms``, else the one with the longest delay."""
    by_delay = sorted(range(len(levels)), key=levels.__getitem__)
    for i in by_delay:
        if levels[i] > wait_ms:
            return i + 1
    return by_delay[-1] + 1
