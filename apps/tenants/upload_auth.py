"""API keys and sessions checked before an upload's body is read (issue 41).

Django's ASGI handler reads the whole body before any view runs, so ``POST /v1/files`` without a
valid key used to receive up to ``LASER_BATCH_MAX_FILE_BYTES`` (50 MB) before DRF answered 401.
``UploadAuth`` wraps the HTTP app (inside ``apps.core.body_limit.BodyLimit``): on the upload
route it resolves the key from the headers first and answers a missing, unknown, revoked or
expired one with the same 401 DRF would give (OpenAI shape, ``WWW-Authenticate``) and
``Connection: close``, the body unread. A valid key goes on, and the view authenticates as usual.
The web app's upload (``POST /batches/start``) is checked the same way for its session: without
a signed-in user (no cookie, an expired or forged session, a changed password) it gets the
redirect to the login page ``login_required`` would give, the body unread.
"""

from __future__ import annotations

import json
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.views import redirect_to_login
from django.db import connections
from django.http import parse_cookie

from apps.core.body_limit import ASGIApp, Receive, Scope, Send
from apps.core.errors import APIError
from apps.tenants.selectors import api_key_resolve, key_from_headers

GUARDED = frozenset({("POST", "/v1/files")})
SESSION_GUARDED = frozenset({("POST", "/batches/start")})


def _refusal(raw: str | None) -> APIError | None:
    """The 401 for ``raw``, or None for a valid key. Runs in a worker thread of its own (outside
    any request), so it closes the connections it opened."""
    try:
        api_key_resolve(raw, touch=False)
    except APIError as exc:
        return exc
    finally:
        connections.close_all()
    return None


def _signed_in(cookies: str) -> bool:
    """Whether the session in ``cookies`` (a ``Cookie`` header) has a signed-in user, as
    ``AuthenticationMiddleware`` would find it. In a worker thread of its own, like
    ``_refusal``."""
    key = parse_cookie(cookies).get(settings.SESSION_COOKIE_NAME)
    if not key:
        return False
    try:
        session = import_module(settings.SESSION_ENGINE).SessionStore(key)
        return bool(get_user(SimpleNamespace(session=session)).is_authenticated)
    finally:
        connections.close_all()


async def send_to_login(send: Send, path: str) -> None:
    location = redirect_to_login(path).url.encode("latin-1")
    await send({"type": "http.response.start", "status": 302, "headers": [
        (b"location", location), (b"content-length", b"0"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b""})


async def send_unauthorized(send: Send, error: APIError) -> None:
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="laser"'), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class UploadAuth:
    """ASGI middleware for the ``http`` scope: 401 on the upload route before reading a byte."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (scope.get("method"), scope.get("path", "").rstrip("/") or "/")
        if scope["type"] == "http" and route in GUARDED | SESSION_GUARDED:
            if await _refused(route, scope, send):
                return
        await self.app(scope, receive, send)


async def _refused(route: tuple[Any, str], scope: Scope, send: Send) -> bool:
    """Answer (and return True) when the caller of a guarded route is not authenticated."""
    headers: dict[str, Any] = {}
    for name, value in scope.get("headers") or ():
        headers.setdefault(name.decode("latin-1").lower(), value)
    if route in SESSION_GUARDED:
        cookies = headers.get("cookie", b"").decode("latin-1")
        if await sync_to_async(_signed_in, thread_sensitive=False)(cookies):
            return False
        await send_to_login(send, scope["path"])
        return True
    refusal = await sync_to_async(_refusal, thread_sensitive=False)(key_from_headers(headers))
    if refusal is None:
        return False
    await send_unauthorized(send, refusal)
    return True
