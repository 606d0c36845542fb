"""Incoming WebSocket frames, bounded, for the chat consumers (``/ws/chat/``, ``/ws/app/chat/``).

Channels' JSON consumer raises on a binary or empty frame, and ``json.loads`` on a message nested
thousands deep raises ``RecursionError``: either escaped the consumer, the socket closed without
a close frame (1006) and its tasks were destroyed pending. ``decode_frame`` turns every frame into
a JSON value or an ``APIError`` the consumer answers with an ``error`` message, and a message past
``LASER_WS_MAX_MESSAGE_BYTES`` into ``MessageTooBig``, answered with an ``error`` message and the
close code 1009 (RFC 6455 "message too big"). ``manage.py serve`` also caps frames in uvicorn
(``ws_max_size``) at that size, so a bigger frame is refused (1009) before it is assembled.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from apps.core.errors import BadRequestError, RequestTooLargeError
from apps.core.jsonbody import parse_json

CLOSE_TOO_BIG = 1009  # RFC 6455: a message too big to process
CLOSE_INTERNAL_ERROR = 1011  # RFC 6455: the server's own fault (logged with its traceback)


class MessageTooBig(RequestTooLargeError):
    """A message past ``LASER_WS_MAX_MESSAGE_BYTES``: error message, then close 1009."""


def _too_big(text: str, limit: int) -> bool:
    return len(text) > limit or (len(text) * 4 > limit and len(text.encode()) > limit)


def decode_frame(text_data: str | None, bytes_data: bytes | None, *,
                 nul_ok: bool = True) -> Any:
    """The JSON value of one incoming frame. Raises ``MessageTooBig`` past the size limit and
    ``BadRequestError`` (``invalid_json``) for a binary frame, an empty one, malformed JSON or
    JSON nested deeper than ``LASER_MAX_JSON_DEPTH``, (``invalid_value``) for a string that is
    not Unicode text (or holds a NUL, unless ``nul_ok``: for a socket whose text is stored)."""
    limit = settings.LASER_WS_MAX_MESSAGE_BYTES
    if text_data is None:
        if bytes_data is not None and len(bytes_data) > limit:
            raise MessageTooBig(f"The message exceeds the limit of {limit} bytes.")
        raise BadRequestError("Binary frames are not supported; send JSON as a text frame.",
                              code="invalid_json")
    if _too_big(text_data, limit):
        raise MessageTooBig(f"The message exceeds the limit of {limit} bytes.")
    return parse_json(text_data, what="The message", nul_ok=nul_ok)

