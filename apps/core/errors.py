"""The one place that builds OpenAI-shaped error bodies.

Every API error leaves Laser as ``{"error": {"message", "type", "param", "code"}}`` with a 4xx
status for a client's mistake (5xx only for our own faults). Business code raises ``APIError``
(or a subclass); DRF views get it mapped by ``exception_handler``; plain async (streaming) views
and Channels code call ``json_error_response`` / ``error_body`` directly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.settings import api_settings

from apps.core.request_id import HEADER, current, request_id_for

logger = logging.getLogger(__name__)
fault_logger = logging.getLogger("laser.errors")  # every 500, with its traceback and request id

API_PATH_PREFIXES = ("/v1/", "/api/")
MISSING_KEY = (
    "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' "
    "or in the 'X-API-Key' header."
)


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """Return the OpenAI error body for ``message``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class APIError(Exception):
    """An error to show the API client. Subclasses fix ``status``, ``type`` and ``code``."""

    status: int = 400
    type: str = "invalid_request_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else self.status
        self.type = type if type is not None else self.type
        self.code = code if code is not None else self.code
        self.param = param
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.message!r}, code={self.code!r})"


class BadRequestError(APIError):
    status, type = 400, "invalid_request_error"


class AuthenticationError(APIError):
    status, type, code = 401, "authentication_error", "invalid_api_key"


class PermissionDeniedError(APIError):
    status, type = 403, "permission_error"


class NotFoundError(APIError):
    status, type = 404, "not_found_error"


class MethodNotAllowedError(APIError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class RequestTooLargeError(APIError):
    status, type, code = 413, "invalid_request_error", "request_too_large"


class UnsupportedMediaTypeError(APIError):
    status, type, code = 415, "invalid_request_error", "unsupported_media_type"


def _retry_headers(retry_after: float | None) -> dict[str, str]:
    return {} if retry_after is None else {"Retry-After": str(max(1, math.ceil(retry_after)))}


class RateLimitError(APIError):
    """429. ``RateLimitError(msg, retry_after=s)`` for a rate limit, ``.quota(msg)`` for quota."""

    status, type, code = 429, "rate_limit_error", "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        kwargs["headers"] = {**_retry_headers(retry_after), **(kwargs.get("headers") or {})}
        super().__init__(message, **kwargs)

    @classmethod
    def quota(cls, message: str, *, retry_after: float | None = None) -> RateLimitError:
        return cls(
            message, retry_after=retry_after, type="insufficient_quota", code="insufficient_quota"
        )


class ServerError(APIError):
    status, type = 500, "server_error"


def server_error_message(rid: str) -> str:
    return ("The server had an error processing your request. If it persists, report the "
            f"request ID {rid}.")


def server_error(exc: BaseException, *, where: str, message: str | None = None,
                 code: str | None = None) -> ServerError:
    """The 500 for a fault of ours (``exc``), logged once here with its traceback and the
    current request id (``apps.core.request_id``), which the client's message names too."""
    rid = current()
    fault_logger.error("unhandled %s in %s (request %s)", type(exc).__name__, where, rid,
                       exc_info=exc)
    text = f"{message} (request ID {rid})." if message else server_error_message(rid)
    return ServerError(text, code=code, headers={HEADER: rid})


class EngineOverloadedError(APIError):
    """503: the engine cannot take the request now (queue full, draining); retry later."""

    status, type, code = 503, "server_error", "engine_overloaded"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        kwargs["headers"] = {**_retry_headers(retry_after), **(kwargs.get("headers") or {})}
        super().__init__(message, **kwargs)


def json_error_response(exc: APIError) -> JsonResponse:
    """A Django ``JsonResponse`` for ``exc``, for plain (async) views outside DRF."""
    response = JsonResponse(exc.body(), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


# --- DRF ------------------------------------------------------------------------------------


def _first_error(detail: Any, path: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """Walk a DRF ValidationError detail to its first message and the field path leading there."""
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if key in ("non_field_errors", api_settings.NON_FIELD_ERRORS_KEY):
                return _first_error(value, path)
            return _first_error(value, (*path, str(key)))
    if isinstance(detail, (list, tuple)):
        for index, value in enumerate(detail):
            if value in ({}, [], None):
                continue  # DRF pads list errors with empty entries for valid items
            sub = path if not isinstance(value, (Mapping, list, tuple)) else (*path, str(index))
            return _first_error(value, sub)
    return (".".join(path) or None), str(detail)


def _from_validation_error(exc: drf.ValidationError) -> APIError:
    param, message = _first_error(exc.detail)
    if param and param not in message:
        message = f"Invalid value for '{param}': {message}"
    return BadRequestError(message, param=param)


def to_api_error(exc: BaseException) -> APIError | None:
    """Map DRF / Django exceptions to ``APIError``; ``None`` for anything unexpected."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, drf.ValidationError):
        return _from_validation_error(exc)
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLargeError("The request body is too large.")
    if isinstance(exc, SuspiciousOperation):
        return BadRequestError("The request was rejected as malformed.")
    if isinstance(exc, drf.NotAuthenticated):
        return AuthenticationError(MISSING_KEY)
    if isinstance(exc, drf.AuthenticationFailed):
        return AuthenticationError(str(exc.detail))
    if isinstance(exc, (drf.PermissionDenied, DjangoPermissionDenied)):
        return PermissionDeniedError(str(getattr(exc, "detail", "")) or "Permission denied.")
    if isinstance(exc, (drf.NotFound, Http404)):
        return NotFoundError(str(getattr(exc, "detail", "")) or "Not found.")
    if isinstance(exc, drf.MethodNotAllowed):
        return MethodNotAllowedError(str(exc.detail))
    if isinstance(exc, drf.UnsupportedMediaType):
        return UnsupportedMediaTypeError(str(exc.detail))
    if isinstance(exc, drf.Throttled):
        return RateLimitError(str(exc.detail), retry_after=exc.wait)
    if isinstance(exc, drf.APIException):
        status = exc.status_code
        kind = "invalid_request_error" if status < 500 else "server_error"
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else None
        return APIError(str(exc.detail), status=status, type=kind, code=code)
    return None


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response | None:
    """DRF ``EXCEPTION_HANDLER``: every known error becomes the OpenAI shape.

    Unexpected exceptions return ``None`` so Django logs them and ``handler500`` answers.
    """
    api_error = to_api_error(exc)
    if api_error is None:
        return None
    headers = dict(api_error.headers)
    auth_header = getattr(exc, "auth_header", None)
    if auth_header and api_error.status == 401:
        headers.setdefault("WWW-Authenticate", auth_header)
    return Response(api_error.body(), status=api_error.status, headers=headers)


# --- Django handler404 / handler500 ----------------------------------------------------------


def _is_api_request(request: HttpRequest) -> bool:
    return request.path.startswith(API_PATH_PREFIXES)


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api_request(request):
        message = f"Unknown request URL: {request.method} {request.path}."
        return json_error_response(NotFoundError(message, code="unknown_url"))
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django answers SuspiciousOperation (e.g. an oversized body) here, outside DRF."""
    if _is_api_request(request):
        api_error = to_api_error(exception) if exception is not None else None
        return json_error_response(api_error or BadRequestError("Bad request."))
    from django.views.defaults import bad_request

    return bad_request(request, exception)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api_request(request):
        return json_error_response(PermissionDeniedError("Permission denied."))
    from django.views.defaults import permission_denied

    return permission_denied(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if _is_api_request(request):
        rid = request_id_for(request)
        return json_error_response(ServerError(server_error_message(rid), headers={HEADER: rid}))
    from django.views.defaults import server_error

    return server_error(request)
