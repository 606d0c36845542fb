"""The OpenAI error shape: builder, APIError family, DRF mapping, Django 404/500 for /v1/."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.test import APIClient, APIRequestFactory

from apps.core import errors

SHAPE = {"message", "type", "param", "code"}


def _handle(exc: Exception):
    response = errors.exception_handler(exc, {})
    assert response is not None
    assert set(response.data) == {"error"} and set(response.data["error"]) == SHAPE
    return response


def test_error_body_shape() -> None:
    assert errors.error_body("bad", param="temperature", code="x") == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "x",
        }
    }


def test_rate_limit_and_overload_carry_retry_after() -> None:
    limited = errors.RateLimitError("slow down", retry_after=1.2)
    assert (limited.status, limited.code, limited.headers["Retry-After"]) == (
        429,
        "rate_limit_exceeded",
        "2",
    )
    quota = errors.RateLimitError.quota("out of tokens")
    assert (quota.status, quota.type, quota.code) == (
        429,
        "insufficient_quota",
        "insufficient_quota",
    )
    overloaded = errors.EngineOverloadedError("busy", retry_after=3)
    response = errors.json_error_response(overloaded)
    assert response.status_code == 503 and response["Retry-After"] == "3"
    assert b'"engine_overloaded"' in response.content


def test_validation_error_names_the_first_bad_field() -> None:
    exc = drf.ValidationError({"messages": [{}, {"content": ["This field is required."]}]})
    error = _handle(exc).data["error"]
    assert error["param"] == "messages.1.content"
    assert "required" in error["message"] and error["type"] == "invalid_request_error"
    non_field = _handle(drf.ValidationError({"non_field_errors": ["nope"]})).data["error"]
    assert non_field["param"] is None and non_field["message"] == "nope"


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (drf.ParseError("JSON parse error"), 400, "invalid_request_error"),
        (drf.NotAuthenticated(), 401, "authentication_error"),
        (drf.AuthenticationFailed("bad key"), 401, "authentication_error"),
        (drf.PermissionDenied(), 403, "permission_error"),
        (drf.NotFound(), 404, "not_found_error"),
        (Http404(), 404, "not_found_error"),
        (drf.MethodNotAllowed("DELETE"), 405, "invalid_request_error"),
        (drf.UnsupportedMediaType("text/plain"), 415, "invalid_request_error"),
        (drf.Throttled(wait=7), 429, "rate_limit_error"),
        (errors.RequestTooLargeError("too big"), 413, "invalid_request_error"),
    ],
)
def test_drf_exceptions_map_to_the_openai_shape(exc, status, kind) -> None:
    response = _handle(exc)
    assert response.status_code == status and response.data["error"]["type"] == kind
    if status == 429:
        assert response["Retry-After"] == "7"


def test_unexpected_exceptions_are_left_to_django() -> None:
    assert errors.exception_handler(RuntimeError("boom"), {}) is None


@pytest.mark.django_db
def test_method_not_allowed_through_a_real_request(api_key_factory) -> None:
    _, plaintext = api_key_factory()
    response = APIClient().post("/api/keys", {}, format="json", HTTP_X_API_KEY=plaintext)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_handler500_is_json_for_api_paths_only() -> None:
    factory = APIRequestFactory()
    api = errors.handler500(factory.get("/v1/chat/completions"))
    assert api.status_code == 500 and api["Content-Type"] == "application/json"
    page = errors.handler500(factory.get("/admin/"))
    assert page.status_code == 500 and "json" not in page["Content-Type"]


def test_oversized_bodies_are_413_and_other_suspicious_requests_400() -> None:
    from django.core.exceptions import RequestDataTooBig, SuspiciousOperation

    assert _handle(RequestDataTooBig("big")).status_code == 413
    assert _handle(SuspiciousOperation("odd")).status_code == 400
    factory = APIRequestFactory()
    response = errors.handler400(factory.post("/v1/chat/completions"), RequestDataTooBig("big"))
    assert response.status_code == 413 and b'"request_too_large"' in response.content
    forbidden = errors.handler403(factory.get("/api/keys"))
    assert forbidden.status_code == 403 and b'"permission_error"' in forbidden.content
