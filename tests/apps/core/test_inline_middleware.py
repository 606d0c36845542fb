"""The header-only stock middlewares run their hooks on the event loop (apps.core.handler)."""

from __future__ import annotations

import asyncio

import django.utils.deprecation
import pytest
from asgiref.testing import ApplicationCommunicator
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler

from apps.core.handler import ASGIHandler

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
         "scheme": "http", "path": "/v1/models", "raw_path": b"/v1/models", "root_path": "",
         "query_string": b"", "headers": [(b"host", b"testserver")],
         "client": ("127.0.0.1", 40000), "server": ("testserver", 80)}


def serve_once(handler) -> tuple[int, dict[bytes, bytes], int]:
    """One GET /v1/models (no key: the API's 401) through ``handler``: its status, headers
    and the thread hops the middlewares made (``sync_to_async`` calls)."""
    hops = []
    real = django.utils.deprecation.sync_to_async

    def counting(fn, *args, **kwargs):
        hops.append(getattr(fn, "__qualname__", fn))
        return real(fn, *args, **kwargs)

    async def run():
        comm = ApplicationCommunicator(handler, SCOPE)
        await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await comm.receive_output(10)
        await comm.receive_output(10)
        await comm.wait(10)
        return start

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(django.utils.deprecation, "sync_to_async", counting)
        start = asyncio.run(run())
    return start["status"], {k.lower(): v for k, v in start["headers"]}, len(hops)


def test_the_header_middlewares_add_their_headers_without_a_thread_hop():
    status, headers, hops = serve_once(ASGIHandler())
    django_status, django_headers, django_hops = serve_once(DjangoASGIHandler())
    assert status == django_status == 401
    for name in (b"x-content-type-options", b"x-frame-options", b"referrer-policy",
                 b"cross-origin-opener-policy"):
        assert headers[name] == django_headers[name]
    # Security (request, response), Common (request, response), XFrame (response)
    assert django_hops - hops == 5


def test_settings_keep_djangos_names_for_check_deploy():
    ASGIHandler()
    assert "django.middleware.security.SecurityMiddleware" in settings.MIDDLEWARE
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" in settings.MIDDLEWARE
