"""One typed reader for environment variables, shared by every settings module.

A bad value fails at start-up with the variable's name in the message, instead of surfacing
later as a confusing error deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parents[2]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _to_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")


def _to_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


_CASTS: dict[Any, Callable[[str], Any]] = {bool: _to_bool, list: _to_list}


def env(
    name: str,
    default: Any = None,
    cast: Callable[[str], Any] = str,
    *,
    choices: Iterable[Any] | None = None,
) -> Any:
    """Read ``name`` from the environment, cast it, or return ``default`` when unset.

    ``cast`` is ``str``, ``int``, ``float``, ``bool`` (1/0, true/false, yes/no, on/off), ``list``
    (comma separated) or any callable taking the raw string. ``choices`` restricts the value.
    Raises ``ImproperlyConfigured`` naming the variable when the value does not parse.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = _CASTS.get(cast, cast)(raw)
    except (TypeError, ValueError) as exc:
        message = f"Environment variable {name}={raw!r} is invalid: {exc}"
        raise ImproperlyConfigured(message) from exc
    if choices is not None and value not in set(choices):
        raise ImproperlyConfigured(
            f"Environment variable {name}={raw!r} must be one of {sorted(choices)}"
        )
    return value


def proxy_list(raw: str) -> list[str]:
    """Comma-separated proxy addresses or networks (``10.0.0.0/8``), or ``*`` for any."""
    items = _to_list(raw)
    for item in items:
        if item != "*":
            ipaddress.ip_network(item, strict=False)  # ValueError names the bad entry
    return items


def env_required(name: str, cast: Callable[[str], Any] = str) -> Any:
    """Like ``env`` but the variable must be set (used by the production profile)."""
    value = env(name, None, cast)
    if value is None or value == "" or value == []:
        raise ImproperlyConfigured(f"Environment variable {name} is required in this profile")
    return value


VAR_DIR = Path(env("LASER_VAR_DIR", str(BASE_DIR / "var"))).resolve()
