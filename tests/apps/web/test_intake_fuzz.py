"""Hypothesis fuzz of ``/ws/app/chat/`` (issue 41, item 6): frames with arbitrary Unicode, deep
and wide nesting and huge numbers, whole or in one field, through the project's ASGI app with
a member's session. Every frame gets an ``error`` message in the OpenAI shape or a turn, never
a ``server_error`` or a close; nothing is logged as a fault; every stored conversation is text
PostgreSQL can hold (no NUL, no lone surrogate)."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from hypothesis import given
from hypothesis import strategies as st

from laser_platform.asgi import application  # imported before caplog: it configures logging
from tests.apps.core.intake_fuzz import documents, drive, fuzz, storable
from tests.apps.gateway.fakes import TokenizingEngine, installed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CHAT = {"type": "chat", "content": "hi", "max_tokens": 2, "system": "be brief",
        "temperature": 0.5}
FIELDS = ["type", "content", "tier", "max_tokens", "temperature", "top_p", "system", "model",
          "*"]


@pytest.fixture
def engine():
    with installed(TokenizingEngine()) as fake:
        yield fake


@fuzz(120)
@given(frames=st.lists(documents(CHAT, FIELDS), min_size=1, max_size=3))
def test_web_chat_never_answers_server_error(frames, world_sync, engine, caplog, settings):
    from apps.web.models import Conversation

    settings.LASER_WS_MAX_MESSAGE_BYTES = 1024 * 1024
    drive(WebsocketCommunicator(application, "/ws/app/chat/", headers=[
        (b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
        (b"cookie", world_sync.member_cookie)]), frames, caplog)
    for system, messages in Conversation.objects.values_list("system", "messages"):
        assert storable(system) and storable(messages)
