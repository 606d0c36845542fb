"""Request body limits at the ASGI layer, before Django reads a byte (issue 18).

Django's ASGI handler reads the whole body (into a spooled temporary file) before any middleware,
parser or view runs, so ``DATA_UPLOAD_MAX_MEMORY_SIZE``, ``LASER_MAX_REQUEST_BYTES`` checks in the
views and the upload handlers' caps all act only after a 50 MB body has been received; uvicorn
sets no body limit of its own. ``BodyLimit`` wraps the HTTP app:

- a declared ``Content-Length`` over the route's limit gets the 413 at once: the app is not
  called, the body is never read, and the connection is closed after the answer (a client that
  sent ``Expect: 100-continue`` never sends the body; uvicorn sends ``100 Continue`` only when
  the app first reads);
- a body without one (chunked) is counted while it streams in; past the limit the client gets
  the 413 and the app sees ``http.disconnect`` (Django drops the request quietly).

The guard runs before authentication: an oversized request gets 413 with or without a valid
key; one within the limit is then authenticated as usual (401 without a key).

Limits per route: POST ``/v1/files`` and the web app's ``/batches/start`` carry a batch file,
``LASER_BATCH_MAX_FILE_BYTES`` plus ``FORM_OVERHEAD_BYTES`` of multipart framing; every other
route ``LASER_MAX_REQUEST_BYTES``. The answer is OpenAI's error body on ``/v1/`` and ``/api/``,
a line of text elsewhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

from apps.core.errors import API_PATH_PREFIXES, RequestTooLargeError

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Room for the multipart framing and the small form fields around an uploaded file.
FORM_OVERHEAD_BYTES = 64 * 1024
UPLOAD_ROUTES = frozenset({("POST", "/v1/files"), ("POST", "/batches/start")})


def limit_for(method: str, path: str) -> int:
    """The largest body, in bytes, that ``method path`` may carry."""
    if (method, path.rstrip("/") or "/") in UPLOAD_ROUTES:
        return settings.LASER_BATCH_MAX_FILE_BYTES + FORM_OVERHEAD_BYTES
    return settings.LASER_MAX_REQUEST_BYTES


def declared_length(scope: Scope) -> int | None:
    """The ``Content-Length`` header as an int (None when absent; the server rejects a
    malformed one before the app is called)."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


async def send_too_large(scope: Scope, send: Send, limit: int) -> None:
    """The 413, with ``Connection: close`` so the server drops the unread rest of the body."""
    message = f"The request body exceeds the limit of {limit} bytes for {scope['path']}."
    if scope["path"].startswith(API_PATH_PREFIXES):
        body, kind = json.dumps(RequestTooLargeError(message).body()).encode(), b"application/json"
    else:
        body, kind = message.encode() + b"\n", b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", kind), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class _Metered:
    """``receive`` and ``send`` of one request, cut off once the body passes ``limit``."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        self.scope, self._receive, self._send, self.limit = scope, receive, send, limit
        self.received, self.refused, self.started = 0, False, False

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.refused = True
                logger.info("413 %s %s: body passed %d bytes while streaming in",
                            self.scope["method"], self.scope["path"], self.limit)
                if not self.started:
                    await send_too_large(self.scope, self._send, self.limit)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return  # answered already; the app is unwinding from the disconnect
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class BodyLimit:
    """ASGI middleware for the ``http`` scope: 413 past the route's body limit, unread."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"])
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            logger.info("413 %s %s: Content-Length %d over %d, body not read",
                        scope["method"], scope["path"], declared, limit)
            await send_too_large(scope, send, limit)
            return
        metered = _Metered(scope, receive, send, limit)
        await self.app(scope, metered.receive, metered.send)
