"""Secrets kept at rest encrypted (issue 39: ACL users' secret keys), with keys the operator provides.

``settings.ACL_SECRET_KEYS`` (env ``RMQHA_ACL_KEYS``: Fernet keys, comma-separated) is a key ring as
``cryptography.fernet.MultiFernet`` reads it: the first key encrypts, every key decrypts. Rotation is
therefore: put a new key first, keep the old ones after it, run ``manage.py rotate_acl_keys`` (every
secret re-encrypted with the first key), then drop the old keys. Without keys nothing is encrypted:
``SecretsUnavailable``, whose message names the variable and never a key. Nothing here logs.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

KEYS_ENV = "RMQHA_ACL_KEYS"


class SecretsUnavailable(Exception):
    """No key (or no usable key) to encrypt or decrypt with; nothing was changed."""


def check() -> None:
    """SecretsUnavailable unless the key ring can encrypt (keys given, each a Fernet key)."""
    _box()


def _keys() -> tuple[str, ...]:
    return tuple(k.strip() for k in getattr(settings, "ACL_SECRET_KEYS", ()) or () if k and k.strip())


@lru_cache(maxsize=4)
def _ring(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(k) for k in keys])
    except (ValueError, TypeError):
        raise SecretsUnavailable(
            f"{KEYS_ENV} holds a value that is not a Fernet key (32 url-safe base64-encoded bytes; "
            "make one with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
        ) from None


def _box() -> MultiFernet:
    keys = _keys()
    if not keys:
        raise SecretsUnavailable(
            f"no key to encrypt secret keys with: set {KEYS_ENV} (settings.ACL_SECRET_KEYS) to one or more "
            "comma-separated Fernet keys, the first one encrypting"
        )
    return _ring(keys)


def encrypt(plain: str) -> str:
    """``plain`` encrypted with the first key, as text for a column."""
    return _box().encrypt(plain.encode()).decode()


def decrypt(token: str) -> str:
    """A column's text decrypted with whichever key of the ring encrypted it."""
    try:
        return _box().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretsUnavailable(f"a stored secret was encrypted with a key {KEYS_ENV} no longer holds") from None


def rotate(token: str) -> str:
    """A column's text encrypted again with the first key (``MultiFernet.rotate``)."""
    try:
        return _box().rotate(token.encode()).decode()
    except InvalidToken:
        raise SecretsUnavailable(f"a stored secret was encrypted with a key {KEYS_ENV} no longer holds") from None
