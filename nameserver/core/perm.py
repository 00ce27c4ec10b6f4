"""Topic permission bits (reference §3.2, ``PermName``)."""

from enum import IntFlag


class Perm(IntFlag):
    INHERIT = 1
    WRITE = 2
    READ = 4
    PRIORITY = 8


PERM_RW = Perm.READ | Perm.WRITE  # 6
PERM_READ_ONLY = Perm.READ  # 4


def is_valid(perm: int) -> bool:
    """RocketMQ accepts perm values in [0, 8)."""
    return 0 <= perm < Perm.PRIORITY


def is_writeable(perm: int) -> bool:
    return bool(perm & Perm.WRITE)


def without_write(perm: int) -> int:
    return perm & ~Perm.WRITE


def with_write(perm: int) -> int:
    return perm | Perm.WRITE
