"""The schema pieces both halves of the published spec use: a component reference, a nullable
field, and the OpenAI error body as a response (``openapi.py`` and ``openapi_drf.py``)."""

from __future__ import annotations

from typing import Any

REF = "#/components/schemas/"


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or JSON ``null`` (the parsers treat a null field as absent)."""
    return {"anyOf": [schema, {"type": "null"}]}


def error_responses(*codes: int) -> dict[str, Any]:
    """OpenAPI responses for ``codes``, each the OpenAI error body."""
    return {str(code): {"description": _STATUS.get(code, "error"),
                        "content": {"application/json": {"schema": ref("Error")}}}
            for code in codes}


_STATUS = {400: "invalid request (the param names the field)", 401: "missing or bad API key",
           403: "not allowed", 404: "no such object, or an unknown model",
           405: "method not allowed", 413: "body over the size limit",
           415: "not application/json", 429: "rate limit or quota; see Retry-After",
           500: "the platform's fault, logged with the request id",
           503: "the engine is saturated, draining or unavailable; see Retry-After"}
