"""Reading a REST request safely: the API key, the content type, the size, the JSON body.

Every refusal is an ``APIError`` (OpenAI shape, 4xx): a client's malformed input never becomes
a 500.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from apps.core.errors import (
    BadRequestError,
    MethodNotAllowedError,
    RequestTooLargeError,
    UnsupportedMediaTypeError,
)
from apps.core.jsonbody import parse_json
from apps.tenants.selectors import aapi_key_resolve, key_from_headers


async def authenticate(request: HttpRequest) -> Any:
    """The ``ApiKey`` (tenant loaded) for ``Authorization: Bearer``/``X-API-Key``, or 401."""
    return await aapi_key_resolve(key_from_headers(request.headers))


def require_post(request: HttpRequest) -> None:
    if request.method != "POST":
        raise MethodNotAllowedError(f"Method {request.method} is not allowed; use POST.")


def read_json_object(request: HttpRequest, *, nul_ok: bool = True) -> dict[str, Any]:
    """The body as a JSON object; 415 for another content type, 413 past the size limit, 400
    for malformed, too deep or non-object JSON and for a string that is not Unicode text
    (``apps.core.jsonbody``), or that holds a NUL where the body is stored (``nul_ok=False``)."""
    content_type = request.content_type or ""
    if content_type != "application/json":
        raise UnsupportedMediaTypeError(
            f"Unsupported Content-Type '{content_type or 'none'}'; send application/json.")
    limit = settings.LASER_MAX_REQUEST_BYTES
    declared = request.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(f"The request body exceeds {limit} bytes.")
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise RequestTooLargeError(f"The request body exceeds {limit} bytes.")
    body = parse_json(raw, nul_ok=nul_ok)  # a lone surrogate never passes
    if not isinstance(body, dict):
        raise BadRequestError("The request body must be a JSON object.", code="invalid_json")
    return body
