"""The request id: the client's ``X-Request-Id`` when it is a short token, else ``req_<hex>``.

The id of the request being served is also held in a context variable (``current``), bound by
each door: ``RequestIdMiddleware`` for HTTP, the WebSocket consumers per message, the batch
runner per line. Tasks started while serving inherit it, so a 500 logged deep in the serving
path (``apps.core.errors.server_error``) names the id the client was told, and every log record
carries it (``RequestIdFilter``, in the ``LOGGING`` setting).
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

from django.http import HttpRequest

HEADER = "X-Request-Id"
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_current: ContextVar[str | None] = ContextVar("laser_request_id", default=None)


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def bind(rid: str) -> str:
    """Make ``rid`` the current request id of this context (and the tasks it starts)."""
    _current.set(rid)
    return rid


def current() -> str:
    """The current request id; a fresh one (bound) where no door bound any."""
    rid = _current.get()
    return rid if rid is not None else bind(new_request_id())


def request_id_for(request: HttpRequest) -> str:
    """The request's id, assigned (and bound) on first use."""
    rid = getattr(request, "request_id", None)
    if rid is None:
        given = request.headers.get(HEADER, "")
        rid = given if _CLIENT_ID.match(given) else new_request_id()
        request.request_id = rid  # type: ignore[attr-defined]
        bind(rid)
    return rid


def request_id_set(request: HttpRequest, rid: str) -> None:
    """From now on ``request`` answers as ``rid`` (the gateway's completion id, once served):
    its ``X-Request-Id`` header, its errors and its log records."""
    request.request_id = rid  # type: ignore[attr-defined]
    bind(rid)


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id``: the current request's id, or ``-`` outside any request."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _current.get() or "-"
        return True
