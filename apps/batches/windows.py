"""``completion_window``: which windows a tenant's cold contract can promise.

A window is ``<n>s``, ``<n>m``, ``<n>h`` or ``<n>d``. It is accepted when it is no shorter than
the cold contract's deadline (the contract promises jobs finish within that time, so a shorter
window is a promise it does not make) and no longer than ``LASER_BATCH_MAX_WINDOW_S`` (24h, as
OpenAI). The accepted window becomes the batch's deadline.
"""

from __future__ import annotations

import re

from django.conf import settings

from apps.core.errors import BadRequestError

_WINDOW = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0 and seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_window(value: object) -> int:
    """The window in seconds; 400 naming ``completion_window`` when it does not parse."""
    match = _WINDOW.match(value) if isinstance(value, str) else None
    if match is None or int(match.group(1)) <= 0:
        raise BadRequestError(
            "'completion_window' must be a duration such as '24h' or '4h'.",
            param="completion_window", code="invalid_value")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def window_deadline_s(value: object, *, contract: object | None) -> int:
    """Seconds from creation to the batch's deadline, checked against the cold contract.

    ``contract`` is the tenant's cold ``ContractSnapshot`` (``None``: no cold contract, 400).
    """
    if contract is None:
        raise BadRequestError(
            "This tenant has no cold-tier contract, so no completion window can be promised.",
            param="completion_window", code="no_cold_contract")
    window = parse_window(value)
    longest = settings.LASER_BATCH_MAX_WINDOW_S
    shortest = float(contract.targets.cold_deadline_s)
    if window > longest:
        raise BadRequestError(
            f"'completion_window' {value} is longer than the longest window, {_fmt(longest)}.",
            param="completion_window", code="invalid_value")
    if window < shortest:
        raise BadRequestError(
            f"'completion_window' {value} is shorter than your cold contract can promise; "
            f"the shortest window it allows is {_fmt(shortest)}.",
            param="completion_window", code="window_not_allowed")
    return window
