"""WebSocket chat at ``/ws/chat/`` (Channels).

Authentication never puts the key in the URL: either subprotocols ``["laser.v1",
"key.<api key>"]`` (only ``laser.v1`` is echoed back) or a first message
``{"type": "auth", "api_key": ...}`` within ``LASER_WS_AUTH_TIMEOUT``; anything else closes the
socket with 4401, as does a turn that finds the key revoked or expired since. Past the key's
open-socket cap (``LASER_KEY_MAX_SOCKETS``) the socket gets a 429 error and closes with 4429.
A binary, empty, malformed or too deeply nested frame gets an ``error`` message
(``invalid_json``); one past ``LASER_WS_MAX_MESSAGE_BYTES`` an ``error`` and the close code 1009
(``apps/core/ws_frames.py``); a fault of ours is logged and closes with 1011.
The origin is checked by ``AllowedHostsOriginValidator`` in ``asgi.py``.

In: ``{"type": "chat", "session_id", "messages" | "content", "params"}``, ``{"type":
"cancel", "session_id"}``, ``{"type": "ping"}``. Out: ``delta``, ``done`` (usage, TTFT, TBT),
``tier_changed`` (from, to, reason), ``error``, ``pong``.

Backpressure: outgoing messages go through a bounded queue drained by one writer task; when a
slow reader lets it fill up (``LASER_WS_SEND_QUEUE``), the socket is closed with 4008 and its
running turns are cancelled, which aborts their engine requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from apps.core.errors import APIError, BadRequestError, server_error
from apps.core.ws_faults import FaultsLogged
from apps.core.ws_frames import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_TOO_BIG,
    MessageTooBig,
    decode_frame,
)
from apps.gateway.slots import Caller, slots
from apps.gateway.turns import Session, apply_turn_messages, run_turn
from apps.tenants.selectors import aapi_key_resolve

logger = logging.getLogger(__name__)

SUBPROTOCOL = "laser.v1"
KEY_PREFIX = "key."
CLOSE_UNAUTHENTICATED = 4401
CLOSE_SLOW_READER = 4008
CLOSE_TOO_MANY = 4429  # past the key's open-socket cap (LASER_KEY_MAX_SOCKETS)
MAX_SESSION_ID = 128


class ChatConsumer(FaultsLogged, AsyncJsonWebsocketConsumer):
    door = "/ws/chat/"

    async def connect(self) -> None:
        self.caller: Caller | None = None
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.outbox: asyncio.Queue = asyncio.Queue(maxsize=settings.LASER_WS_SEND_QUEUE)
        self.closing = False
        self.closer: asyncio.Future | None = None  # the slow-reader close, referenced till done
        protocols = self.scope.get("subprotocols") or []
        await self.accept(SUBPROTOCOL if SUBPROTOCOL in protocols else None)
        self.writer = asyncio.create_task(self._write())
        key = next((p[len(KEY_PREFIX):] for p in protocols if p.startswith(KEY_PREFIX)), None)
        if key is not None:
            await self._authenticate(key)
        else:
            self.auth_timer = asyncio.create_task(self._auth_deadline())

    async def _authenticate(self, raw: Any) -> bool:
        try:
            caller = Caller.for_key(await aapi_key_resolve(raw if isinstance(raw, str) else None))
        except APIError as exc:
            await self._shut(CLOSE_UNAUTHENTICATED, {"type": "error", **exc.body()})
            return False
        try:
            slots.open_socket(caller)
        except APIError as exc:
            await self._shut(CLOSE_TOO_MANY, {"type": "error", **exc.body()})
            return False
        self.caller = caller
        self.emit({"type": "ready", "tenant": caller.tenant.slug})
        return True

    async def _auth_deadline(self) -> None:
        await asyncio.sleep(settings.LASER_WS_AUTH_TIMEOUT)
        if self.caller is None:
            await self._shut(CLOSE_UNAUTHENTICATED)

    # ---- in -----------------------------------------------------------------------------
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        try:
            content = decode_frame(text_data, bytes_data)
        except MessageTooBig as exc:
            await self._shut(CLOSE_TOO_BIG, {"type": "error", **exc.body()})
            return
        except APIError as exc:
            if self.caller is None:
                await self._shut(CLOSE_UNAUTHENTICATED)
            else:
                self._error(None, exc)
            return
        try:
            await self.receive_json(content)
        except Exception as exc:  # logged there; the socket closes with 1011
            error = server_error(exc, where="a /ws/chat/ message")
            await self._shut(CLOSE_INTERNAL_ERROR, {"type": "error", **error.body()})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if self.caller is None:
            if kind == "auth":
                await self._authenticate(content.get("api_key"))
            else:
                await self._shut(CLOSE_UNAUTHENTICATED)
            return
        if kind == "chat":
            await self._chat(content)
        elif kind == "cancel":
            session_id = content.get("session_id")
            session = self.sessions.get(session_id) if isinstance(session_id, str) else None
            if session is not None and session.task is not None:
                session.task.cancel()
        elif kind == "ping":
            self.emit({"type": "pong"})
        else:
            self._error(None, BadRequestError(f"Unknown message type {kind!r}.", param="type"))

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            if len(self.sessions) >= settings.LASER_WS_MAX_SESSIONS:
                idle = next((k for k, s in self.sessions.items() if s.task is None), None)
                if idle is None:
                    raise BadRequestError("Too many sessions running on this socket.",
                                          param="session_id")
                del self.sessions[idle]
            session = self.sessions[session_id] = Session(session_id)
        self.sessions.move_to_end(session_id)
        return session

    async def _chat(self, content: dict) -> None:
        session_id = content.get("session_id") or "default"
        params = content.get("params") or {}
        try:
            if not isinstance(session_id, str) or len(session_id) > MAX_SESSION_ID:
                session_id = None
                raise BadRequestError(f"'session_id' must be a string of at most "
                                      f"{MAX_SESSION_ID} characters.", param="session_id")
            if not isinstance(params, dict):
                raise BadRequestError("'params' must be an object.", param="params")
            session = self._session(session_id)
            if session.task is not None:
                raise BadRequestError("This session already has a turn running.",
                                      param="session_id", code="session_busy")
            before = list(session.history)
            apply_turn_messages(session, content, settings.LASER_WS_MAX_HISTORY)
        except APIError as exc:
            self._error(session_id, exc)
            return
        session.task = asyncio.create_task(self._turn(session, params, before))

    async def _turn(self, session: Session, params: dict, before: list[dict]) -> None:
        assert self.caller is not None
        try:
            error = await run_turn(session, params, caller=self.caller, emit=self.emit)
        except Exception as exc:  # a fault of ours: logged there, answered as this turn's error
            error = server_error(exc, where="a /ws/chat/ turn")
        finally:
            session.task = None
        if error is None:
            return
        session.history = before  # a failed turn leaves the session as it was
        message = {"type": "error", "session_id": session.session_id, **error.body()}
        if error.status == 401:  # the key was revoked or expired since the last turn
            await self._shut(CLOSE_UNAUTHENTICATED, message)
        else:
            self.emit(message)

    # ---- out ----------------------------------------------------------------------------
    def emit(self, message: dict[str, Any]) -> None:
        """Queue ``message``; a full queue means the reader is too slow: close with 4008."""
        if self.closing:
            return
        try:
            self.outbox.put_nowait(message)
        except asyncio.QueueFull:
            logger.warning("websocket reader too slow; closing with %d", CLOSE_SLOW_READER)
            self.closer = asyncio.ensure_future(self._shut(CLOSE_SLOW_READER))

    def _error(self, session_id: str | None, exc: APIError) -> None:
        self.emit({"type": "error", "session_id": session_id, **exc.body()})

    async def _write(self) -> None:
        while True:
            message = await self.outbox.get()
            await self.send_json(message)

    async def _shut(self, code: int, last: dict | None = None) -> None:
        if self.closing:
            return
        self.closing = True
        self._cancel_turns()
        self.writer.cancel()
        if last is not None:
            await self.send_json(last)
        await self.close(code)

    def _cancel_turns(self) -> None:
        for session in self.sessions.values():
            if session.task is not None:
                session.task.cancel()

    async def disconnect(self, code: int) -> None:
        self.closing = True
        caller, self.caller = getattr(self, "caller", None), None
        if caller is not None:
            slots.close_socket(caller)
        self._cancel_turns()
        for task in (getattr(self, "writer", None), getattr(self, "auth_timer", None)):
            if task is not None:
                task.cancel()
