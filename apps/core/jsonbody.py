"""The one JSON intake for every door: REST and SSE bodies, DRF bodies, WebSocket frames and
batch input lines all parse through ``loads_bounded``, and the first three answer its refusals
through ``parse_json``.

Bounds: a document nested deeper than ``LASER_MAX_JSON_DEPTH`` is refused (``JSONTooDeep``).
``json.loads`` recurses in C: 100,000 ``[`` raise ``RecursionError`` (a 500 if uncaught), and a
value a little under the interpreter's limit parses but breaks whatever walks it next, so the
parse error is caught and the depth of what parsed is measured without recursion. A number
beyond a float's range (``1e999``) is refused rather than read as infinity.

Text: JSON's ``\\ud800`` escape yields a lone surrogate, which is not a Unicode scalar value:
it has no UTF-8 form, so the tokeniser, the log and every database fail on it. Every string, keys
included, must be valid Unicode text (``BadText``, naming the field); where the value is stored
(``nul_ok=False``) it must also hold no U+0000, which PostgreSQL's ``text`` and ``jsonb`` refuse.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from apps.core.errors import BadRequestError, RequestTooLargeError


class JSONTooDeep(ValueError):
    """The document nests deeper than allowed (a ``ValueError``, like a malformed document)."""


class BadText(ValueError):
    """A string that is not Unicode text, or holds U+0000 where that is refused; ``param`` is
    the field's path (``messages[0].content``)."""

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(f"'{param}' {reason}")
        self.param, self.reason = param, reason


def printable(text: str) -> str:
    """``text`` with lone surrogates and NUL written as escapes: safe to log, send and store."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def text_problem(text: str, *, nul_ok: bool = False) -> str | None:
    """Why ``text`` cannot be taken (a phrase), or None when it can."""
    if not nul_ok and "\x00" in text:
        return "contains U+0000 (NUL), which cannot be stored"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"contains a lone surrogate (U+{ord(text[exc.start]):04X}), which is not "
                    "Unicode text")
    return None


# A path is a linked list of (parent, key) pairs, turned into text only for an error.
_Path = tuple[Any, Any] | None


def _path_text(path: _Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{printable(key)}")
    return "".join(reversed(parts)).lstrip(".") or "(the document)"


def _check_text(text: str, path: _Path, nul_ok: bool) -> None:
    reason = text_problem(text, nul_ok=nul_ok)
    if reason is not None:
        raise BadText(_path_text(path), reason)


def check_json(value: Any, *, max_depth: int, nul_ok: bool = True) -> int:
    """Walk a parsed JSON value without recursion: raise ``JSONTooDeep`` past ``max_depth`` and
    ``BadText`` for the first bad string (key or value); returns the depth (0 for a scalar,
    1 for ``[]`` / ``{}``)."""
    deepest, stack = 0, [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            _check_text(item, path, nul_ok)
            continue
        if not isinstance(item, (dict, list)):
            continue
        depth += 1
        if depth > max_depth:
            raise JSONTooDeep(f"JSON nested deeper than {max_depth} levels")
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, (path, key), nul_ok)
                if isinstance(child, (str, dict, list)):
                    stack.append((child, depth, (path, key)))
        else:
            stack.extend((child, depth, (path, index)) for index, child in enumerate(item)
                         if isinstance(child, (str, dict, list)))
    return deepest


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: 0 for a scalar, 1 for ``[]`` / ``{}``."""
    return check_json(value, max_depth=10**9)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads_bounded(raw: str | bytes, *, max_depth: int | None = None, nul_ok: bool = True,
                  **kwargs: Any) -> Any:
    """``json.loads`` with the bounds and text rules above: raises ``JSONTooDeep`` (instead of
    ``RecursionError``), ``BadText``, or ``ValueError`` for malformed input (``NaN`` and
    ``Infinity`` included, as by DRF's strict parser)."""
    limit = settings.LASER_MAX_JSON_DEPTH if max_depth is None else max_depth
    kwargs.setdefault("parse_constant", _refuse_constant)
    kwargs.setdefault("parse_float", _finite_float)
    try:
        value = json.loads(raw, **kwargs)
    except RecursionError:
        raise JSONTooDeep(f"JSON nested deeper than {limit} levels") from None
    check_json(value, max_depth=limit, nul_ok=nul_ok)
    return value


def parse_json(raw: str | bytes, *, what: str = "The request body", nul_ok: bool = True) -> Any:
    """``loads_bounded`` with its refusals as 400s in the OpenAI shape: ``invalid_json`` for
    malformed or too deeply nested input, ``invalid_value`` naming the field for bad text."""
    try:
        return loads_bounded(raw, nul_ok=nul_ok)
    except BadText as exc:
        raise BadRequestError(f"Invalid value for '{exc.param}': it {exc.reason}.",
                              param=exc.param, code="invalid_value") from exc
    except JSONTooDeep as exc:
        raise BadRequestError(f"{what} is {exc}.", code="invalid_json") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequestError(f"{what} is not valid JSON: {printable(str(exc))}.",
                              code="invalid_json") from exc


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with a size cap (413, checked on ``Content-Length`` before reading),
    the depth cap and the text rules (400). A NUL is left to the service that stores the
    field (batch ``metadata``: 400; an id: 404)."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict | None = None) -> Any:
        limit = settings.LASER_MAX_REQUEST_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH", "") if request is not None else ""
        if declared.isdigit() and int(declared) > limit:
            raise RequestTooLargeError(f"The request body exceeds {limit} bytes.")
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise RequestTooLargeError(f"The request body exceeds {limit} bytes.")
        return parse_json(raw)
