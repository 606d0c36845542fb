"""The browser chat socket at ``/ws/app/chat/``.

Authenticated by the session cookie (``AuthMiddlewareStack`` in ``routing.py``; the origin is
checked by ``AllowedHostsOriginValidator`` in ``asgi.py``), never by a key in the page or URL.
The tenant is the one chosen in the web app's session, and the user must be a member of it
(else 4403). Turns run as that user (``serving.serve`` with a user caller): a user removed from
the tenant since gets a 401 error and the socket closes with 4401; past the user's open-socket
cap (``LASER_KEY_MAX_SOCKETS``) the socket gets a 429 error and closes with 4429. One
conversation per socket, kept here. Frames are bounded as on ``/ws/chat/``
(``apps/core/ws_frames.py``): a bad one gets an ``error`` message, one past
``LASER_WS_MAX_MESSAGE_BYTES`` an ``error`` and the close code 1009; a fault of ours is logged
and closes with 1011.

In: ``{"type": "chat", "content", "tier", "max_tokens", "temperature", "top_p", "system",
"json_mode"}``,
``{"type": "stop"}``, ``{"type": "reset"}`` (new conversation), ``{"type": "open",
"conversation"}`` (continue a stored one of this user), ``{"type": "ping"}``. Out: ``ready``,
then per turn ``delta``..., ``tier_changed``, ``saved`` (the turn is stored:
``apps/web/conversations.py``), then ``done`` or ``error``; ``opened``, ``reset``, ``pong``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
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
from apps.gateway.serving import slots
from apps.web.access import is_member, tenant_for_session
from apps.web.chat import ChatSetup, chat_setup, system_prompt, turn_params
from apps.web.conversations import conversation_get, conversation_save_turn
from apps.web.serving import browser_caller, serve_turn

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NO_TENANT = 4403
CLOSE_SLOW_READER = 4008
CLOSE_TOO_MANY = 4429  # past the user's open-socket cap (LASER_KEY_MAX_SOCKETS)


class WebChatConsumer(FaultsLogged, AsyncJsonWebsocketConsumer):
    door = "/ws/app/chat/"

    async def connect(self) -> None:
        self.turn: asyncio.Task | None = None
        self.history: list[dict] = []
        self.metas: list[dict | None] = []  # per message of ``history``: its ``done`` message
        self.conversation = uuid.uuid4().hex
        self.closing = False
        self.closer: asyncio.Future | None = None  # the slow-reader close, referenced till done
        self.socket_open = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(CLOSE_UNAUTHENTICATED)
            return
        self.setup: ChatSetup | None = await database_sync_to_async(self._setup)(user)
        if self.setup is None:
            await self.close(CLOSE_NO_TENANT)
            return
        self.caller = browser_caller(user=user, tenant=self.setup.tenant,
                                     default_tier=self.setup.default_tier)
        self.outbox: asyncio.Queue = asyncio.Queue(maxsize=settings.LASER_WS_SEND_QUEUE)
        await self.accept()
        self.writer = asyncio.create_task(self._write())
        try:
            slots.open_socket(self.caller)
        except APIError as exc:
            self._error(exc)
            await self._shut(CLOSE_TOO_MANY)
            return
        self.socket_open = True
        self.emit({"type": "ready", "tenant": self.setup.tenant.slug,
                   "tiers": self.setup.tiers, "default_tier": self.setup.default_tier})

    def _setup(self, user: Any) -> ChatSetup | None:
        """The chat of the session's tenant; None unless the user is a member of it (platform
        staff look at a tenant's pages but do not chat as its users)."""
        tenant = tenant_for_session(user, self.scope["session"])
        if tenant is None or not is_member(user, tenant):
            return None
        return chat_setup(tenant)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        try:
            # conversations are stored (PostgreSQL's jsonb): no NUL in this socket's text
            content = decode_frame(text_data, bytes_data, nul_ok=False)
        except MessageTooBig as exc:
            self._error(exc)
            await self._shut(CLOSE_TOO_BIG)
            return
        except APIError as exc:
            self._error(exc)
            return
        try:
            await self.receive_json(content)
        except Exception as exc:  # logged there; the socket closes with 1011
            self._error(server_error(exc, where="a /ws/app/chat/ message"))
            await self._shut(CLOSE_INTERNAL_ERROR)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "chat":
            self._chat(content)
        elif kind == "stop":
            if self.turn is not None:
                self.turn.cancel()
        elif kind == "reset":
            if self.turn is not None:
                self.turn.cancel()
            self.history, self.metas, self.conversation = [], [], uuid.uuid4().hex
            self.emit({"type": "reset"})
        elif kind == "open":
            await self._open(content.get("conversation"))
        elif kind == "ping":
            self.emit({"type": "pong"})
        else:
            self._error(BadRequestError(f"Unknown message type {kind!r}.", param="type"))

    def _chat(self, content: dict) -> None:
        try:
            if self.turn is not None:
                raise BadRequestError("An answer is still streaming; stop it first.",
                                      code="turn_running")
            params = turn_params(content, self.setup)
            system = system_prompt(content)
            text = content.get("content")
            if not isinstance(text, str) or not text.strip():
                raise BadRequestError("Type a message first.", param="content")
            if len(self.history) + 2 > settings.LASER_WS_MAX_HISTORY:
                raise BadRequestError("This conversation is full; start a new one.",
                                      param="content", code="session_too_long")
        except APIError as exc:
            self._error(exc)
            return
        history = [*self.history, {"role": "user", "content": text}]
        self.turn = asyncio.create_task(self._turn(history, params, system))

    async def _turn(self, history: list[dict], params: dict, system: str) -> None:
        conversation = self.conversation
        done: dict[str, Any] = {}

        def emit(message: dict[str, Any]) -> None:
            if message["type"] == "done":  # sent last, once the turn is stored
                done.update(message)
            else:
                self.emit(message)

        try:
            answered = await serve_turn(caller=self.caller, conversation_id=conversation,
                                        history=history, params=params, emit=emit,
                                        system=system)
            if isinstance(answered, APIError):
                self._error(answered)
                if answered.status == 401:  # no longer a member: this socket is done
                    self.turn = None
                    await self._shut(CLOSE_UNAUTHENTICATED)
            else:
                if conversation == self.conversation:
                    self.history = answered
                    try:
                        await self._save(system, params, done)
                    except Exception:  # the answer stands; only its storage failed
                        logger.exception("web chat: storing the conversation failed")
                self.emit(done)
        except asyncio.CancelledError:
            self.emit({"type": "stopped"})
        except Exception as exc:  # a fault of ours: logged there, answered as this turn's error
            self._error(server_error(exc, where="a /ws/app/chat/ turn"))
        finally:
            self.turn = None

    async def _open(self, conversation_id: Any) -> None:
        if self.turn is not None:
            self.turn.cancel()
        found = await database_sync_to_async(conversation_get)(
            tenant=self.setup.tenant, user=self.scope["user"], conversation_id=conversation_id)
        if found is None:
            self._error(BadRequestError("No such conversation.", param="conversation",
                                        code="conversation_not_found"))
            return
        self.conversation, self.metas = found.pk.hex, [m.get("meta") for m in found.messages]
        self.history = [{"role": m["role"], "content": m["content"]} for m in found.messages]
        self.emit({"type": "opened", "conversation": {
            "id": found.pk.hex, "title": found.title, "system": found.system,
            "settings": found.settings, "messages": found.messages}})

    async def _save(self, system: str, params: dict, done: dict[str, Any]) -> None:
        """Store the conversation with this turn (the answer keeps its ``done`` metrics)."""
        meta = {**done, "tier_asked": params["service_tier"],
                "json": "response_format" in params} if done else None
        self.metas = [*self.metas[:len(self.history) - 2], None, meta]
        messages = [{**m, "meta": meta} if meta else m
                    for m, meta in zip(self.history, self.metas, strict=True)]
        saved = await database_sync_to_async(conversation_save_turn)(
            tenant=self.setup.tenant, user=self.scope["user"], conversation_id=self.conversation,
            system=system, turn_settings=params, messages=messages)
        self.conversation = saved.pk.hex
        self.emit({"type": "saved", "conversation": {"id": saved.pk.hex, "title": saved.title}})

    def emit(self, message: dict[str, Any]) -> None:
        """Queue ``message``; a full queue means the reader is too slow: close with 4008."""
        if self.closing:
            return
        try:
            self.outbox.put_nowait(message)
        except asyncio.QueueFull:
            logger.warning("web chat reader too slow; closing with %d", CLOSE_SLOW_READER)
            self.closing = True
            if self.turn is not None:
                self.turn.cancel()
            self.closer = asyncio.ensure_future(self.close(CLOSE_SLOW_READER))

    async def _shut(self, code: int) -> None:
        """Send what is queued, then close with ``code``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.outbox.join(), 2.0)
        self.closing = True
        await self.close(code)

    def _error(self, exc: APIError) -> None:
        self.emit({"type": "error", **exc.body()})

    async def _write(self) -> None:
        while True:
            await self.send_json(await self.outbox.get())
            self.outbox.task_done()

    async def disconnect(self, code: int) -> None:
        self.closing = True
        if getattr(self, "socket_open", False):
            self.socket_open = False
            slots.close_socket(self.caller)
        if getattr(self, "turn", None) is not None:
            self.turn.cancel()
        if getattr(self, "writer", None) is not None:
            self.writer.cancel()
