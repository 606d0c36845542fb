"""The request id: the client's ``X-Request-Id`` when it is a short token, else ``req_<hex>``."""

from __future__ import annotations

import re
import uuid

from django.http import HttpRequest

HEADER = "X-Request-Id"
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_for(request: HttpRequest) -> str:
    """The request's id, assigned on first use."""
    rid = getattr(request, "request_id", None)
    if rid is None:
        given = request.headers.get(HEADER, "")
        rid = given if _CLIENT_ID.match(given) else f"req_{uuid.uuid4().hex}"
        request.request_id = rid  # type: ignore[attr-defined]
    return rid
