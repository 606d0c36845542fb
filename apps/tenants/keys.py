"""Key material: generation, parsing and hashing of ``lsr_<prefix>.<secret>`` keys.

Hashing is HMAC-SHA256 keyed with ``LASER_API_KEY_PEPPER`` (defaults to SECRET_KEY). A slow KDF
(bcrypt, PBKDF2) exists to protect low-entropy passwords; these secrets are 256 random bits, so
brute force is out of reach anyway, and a fast hash keeps per-request authentication cheap. The
key also means a leaked table alone cannot even be used to check a guessed key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string

from django.conf import settings

KEY_SCHEME = "lsr_"
PREFIX_LENGTH = 8
SECRET_BYTES = 32  # token_urlsafe(32) gives 43 characters
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_SECRET_CHARS = frozenset(string.ascii_letters + string.digits + "-_")


def new_prefix() -> str:
    return "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def format_key(prefix: str, secret: str) -> str:
    return f"{KEY_SCHEME}{prefix}.{secret}"


def parse_key(raw: str) -> tuple[str, str] | None:
    """Split a raw key into (prefix, secret); ``None`` when it is not a well-formed Laser key."""
    if not raw.startswith(KEY_SCHEME):
        return None
    prefix, dot, secret = raw[len(KEY_SCHEME) :].partition(".")
    if not dot or len(prefix) != PREFIX_LENGTH or len(secret) < 32:
        return None
    if not set(prefix) <= set(_PREFIX_ALPHABET) or not set(secret) <= _SECRET_CHARS:
        return None
    return prefix, secret


def hash_key(prefix: str, secret: str) -> str:
    """Hex HMAC-SHA256 of the whole key; binding the prefix stops a hash matching another row."""
    message = format_key(prefix, secret).encode()
    return hmac.new(settings.LASER_API_KEY_PEPPER.encode(), message, hashlib.sha256).hexdigest()
