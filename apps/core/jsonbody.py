"""JSON with bounds: a request body or a batch line is refused (400) when it nests deeper than
``LASER_MAX_JSON_DEPTH``, and a DRF body past ``LASER_MAX_REQUEST_BYTES`` (413) before parsing.

``json.loads`` recurses in C: 100,000 ``[`` raise ``RecursionError`` (a 500 if uncaught), and a
value a little under the interpreter's limit parses but breaks whatever walks it next. So the
parse error is caught and the depth of what parsed is measured without recursion.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.parsers import JSONParser

from apps.core.errors import BadRequestError, RequestTooLargeError


class JSONTooDeep(ValueError):
    """The document nests deeper than allowed (a ``ValueError``, like a malformed document)."""


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: 0 for a scalar, 1 for ``[]`` / ``{}``."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def loads_bounded(raw: str | bytes, *, max_depth: int | None = None, **kwargs: Any) -> Any:
    """``json.loads`` that raises ``JSONTooDeep`` past ``max_depth`` (default: the setting)
    instead of ``RecursionError``; other malformed input raises ``ValueError`` as usual."""
    import json

    limit = settings.LASER_MAX_JSON_DEPTH if max_depth is None else max_depth
    try:
        value = json.loads(raw, **kwargs)
    except RecursionError:
        raise JSONTooDeep(f"JSON nested deeper than {limit} levels") from None
    if json_depth(value) > limit:
        raise JSONTooDeep(f"JSON nested deeper than {limit} levels")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with a size cap (413, checked on ``Content-Length`` before reading)
    and a depth cap (400); NaN and Infinity are refused as by DRF's strict parser."""

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
        try:
            return loads_bounded(raw, parse_constant=_refuse_constant)
        except JSONTooDeep as exc:
            raise BadRequestError(f"The request body is {exc}.", code="invalid_json") from exc
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadRequestError(f"The request body is not valid JSON: {exc}.",
                                  code="invalid_json") from exc
