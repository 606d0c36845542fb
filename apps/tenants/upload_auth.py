"""API keys checked before an upload's body is read (issue 41).

Django's ASGI handler reads the whole body before any view runs, so ``POST /v1/files`` without a
valid key used to receive up to ``LASER_BATCH_MAX_FILE_BYTES`` (50 MB) before DRF answered 401.
``UploadAuth`` wraps the HTTP app (inside ``apps.core.body_limit.BodyLimit``): on the upload
route it resolves the key from the headers first and answers a missing, unknown, revoked or
expired one with the same 401 DRF would give (OpenAI shape, ``WWW-Authenticate``) and
``Connection: close``, the body unread. A valid key goes on, and the view authenticates as usual.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from apps.core.body_limit import ASGIApp, Receive, Scope, Send
from apps.core.errors import APIError
from apps.tenants.selectors import api_key_resolve, key_from_headers

GUARDED = frozenset({("POST", "/v1/files")})


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
        if scope["type"] == "http" and (scope["method"],
                                        scope["path"].rstrip("/") or "/") in GUARDED:
            headers: dict[str, Any] = {}
            for name, value in scope.get("headers") or ():
                headers.setdefault(name.decode("latin-1").lower(), value)
            refusal = await sync_to_async(_refusal, thread_sensitive=False)(
                key_from_headers(headers))
            if refusal is not None:
                await send_unauthorized(send, refusal)
                return
        await self.app(scope, receive, send)
