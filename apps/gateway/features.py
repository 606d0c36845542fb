"""OpenAI features Laser knows about but does not implement: refused with 400 naming them.

A field is refused when it is present with a value that asks for the feature; the neutral value
(``None``, ``modalities: ["text"]``, an empty
``logit_bias``, ``store: false``...) is accepted, because SDKs and proxies send those by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apps.core.errors import BadRequestError


def _absent(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def _text_only(value: Any) -> bool:
    return value is None or value == ["text"]


def _false(value: Any) -> bool:
    return value is None or value is False


def _one(value: Any) -> bool:
    return value is None or value == 1


_COMMON: dict[str, Callable[[Any], bool]] = {
    "logit_bias": _empty,
}

_CHAT: dict[str, Callable[[Any], bool]] = {
    **_COMMON,
    "functions": _empty,
    "function_call": lambda v: v is None or v == "none",
    "audio": _absent,
    "modalities": _text_only,
    "prediction": _absent,
    "web_search_options": _absent,
    "reasoning_effort": _absent,
    "verbosity": _absent,
    "store": _false,
}

_COMPLETIONS: dict[str, Callable[[Any], bool]] = {
    **_COMMON,
    "echo": _false,
    "suffix": _absent,
    # best_of is checked against n by the parser's caller; only best_of == n (or 1) is plain.
    "best_of": _one,
}

_TABLES = {"chat.completions": _CHAT, "completions": _COMPLETIONS}


def refuse_unsupported(body: dict, endpoint: str) -> None:
    """Raise 400 ``unsupported_parameter`` for the first unsupported feature ``body`` asks for."""
    for name, neutral in _TABLES[endpoint].items():
        if name in body and not neutral(body[name]):
            if name == "best_of" and body.get("best_of") == body.get("n"):
                continue
            raise BadRequestError(
                f"'{name}' is not supported by this server.", param=name,
                code="unsupported_parameter",
            )
