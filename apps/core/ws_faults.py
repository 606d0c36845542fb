"""A fault of ours in a WebSocket consumer's ``connect`` or ``receive`` (issue 41).

Channels lets such an exception escape to the ASGI server, which logs one line without the
request id and drops the socket. ``FaultsLogged``, mixed in before the consumer's base class,
binds a request id for the connection attempt and for each message, and turns an exception that
escapes either into ``apps.core.errors.server_error`` (logged once with its traceback and that
id), an ``error`` message naming the id, and the close code 1011.
"""

from __future__ import annotations

import logging
from typing import Any

from apps.core.errors import APIError, server_error
from apps.core.request_id import bind, new_request_id
from apps.core.ws_frames import CLOSE_INTERNAL_ERROR

logger = logging.getLogger(__name__)


class FaultsLogged:
    """Mixin for ``AsyncJsonWebsocketConsumer`` subclasses; ``door`` names the socket in the
    log (``/ws/chat/``)."""

    door = "a WebSocket"
    accepted = False

    async def accept(self, *args: Any, **kwargs: Any) -> None:
        await super().accept(*args, **kwargs)  # type: ignore[misc]
        self.accepted = True

    async def websocket_connect(self, message: dict) -> None:
        bind(new_request_id())  # the connection's, until its first message binds its own
        try:
            await super().websocket_connect(message)  # type: ignore[misc]
        except Exception as exc:
            await self.fault(server_error(exc, where=f"{self.door} connect"))

    async def websocket_receive(self, message: dict) -> None:
        bind(new_request_id())  # this message's, inherited by the turn it starts
        try:
            await super().websocket_receive(message)  # type: ignore[misc]
        except Exception as exc:
            await self.fault(server_error(exc, where=f"{self.door} message"))

    async def fault(self, error: APIError) -> None:
        """Tell the client ``error`` (accepting the socket first if need be) and close 1011."""
        self.closing = True
        try:
            if not self.accepted:
                await self.accept()
            await self.send_json({"type": "error", **error.body()})  # type: ignore[attr-defined]
            await self.close(CLOSE_INTERNAL_ERROR)  # type: ignore[attr-defined]
        except Exception:
            logger.exception("could not tell the client about the fault")
