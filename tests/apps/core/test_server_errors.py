"""Every 500 is logged once with its traceback and the request id, and the client gets the
OpenAI error shape naming that id (issue 18); sync DRF views and async views alike."""

from __future__ import annotations

import logging

import pytest
from django.test import AsyncClient, Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(api_key_factory) -> str:
    return api_key_factory()[1]


@pytest.fixture
def broken(monkeypatch):
    from apps.gateway import pipeline, views

    def boom(*args, **kwargs):
        raise RuntimeError("the platform's own bug")

    async def aboom(*args, **kwargs):
        boom()

    monkeypatch.setattr(views.ModelListApi, "get", boom)
    monkeypatch.setattr(pipeline, "handle", aboom)


def _check(response, caplog) -> str:
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], set(error)) == ("server_error", {"message", "type", "param", "code"})
    rid = response["X-Request-Id"]
    assert rid in error["message"]
    records = [r for r in caplog.records if r.name == "laser.errors"]
    assert len(records) == 1 and rid in records[0].getMessage()
    assert records[0].exc_info and "the platform's own bug" in str(records[0].exc_info[1])
    return rid


def test_a_sync_view_crash_is_logged_with_traceback_and_request_id(key, broken, caplog):
    caplog.set_level(logging.ERROR, logger="laser.errors")
    client = Client(raise_request_exception=False)
    rid = _check(client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {key}"), caplog)
    assert rid.startswith("req_")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_async_view_crash_is_logged_too_and_keeps_the_clients_id(key, broken, caplog):
    caplog.set_level(logging.ERROR, logger="laser.errors")
    client = AsyncClient(raise_request_exception=False)
    response = await client.post("/v1/chat/completions", {}, content_type="application/json",
                                 headers={"X-Request-Id": "client-trace-42"})
    assert _check(response, caplog) == "client-trace-42"


def test_every_response_carries_a_request_id_and_junk_ids_are_replaced(key):
    client = Client()
    ok = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {key}",
                    HTTP_X_REQUEST_ID="bad id\twith spaces")
    assert ok.status_code == 200 and ok["X-Request-Id"].startswith("req_")
    assert client.get("/v1/nothing-here")["X-Request-Id"].startswith("req_")


@pytest.mark.parametrize("exception", ["Http404", "PermissionDenied", "SuspiciousOperation"])
def test_exceptions_django_answers_with_a_4xx_are_left_to_it(exception):
    from django.core import exceptions
    from django.http import Http404
    from django.test import RequestFactory

    from apps.core.middleware import RequestIdMiddleware

    exc = Http404() if exception == "Http404" else getattr(exceptions, exception)()
    middleware = RequestIdMiddleware(lambda request: None)
    assert middleware.process_exception(RequestFactory().get("/admin/"), exc) is None
