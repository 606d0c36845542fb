"""Hostile JSON at the gateway's doors (issue 41): REST and SSE bodies and ``/ws/chat/`` frames
nested 1,000 deep or carrying a lone surrogate are a 400 (an ``error`` message on the socket)
naming the field, never a 500; a NUL in chat text, which nothing stores, is served."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from apps.gateway.consumers import ChatConsumer

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m-instruct"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _bodies(stream: bool) -> list[tuple[str, str, int, str | None, str]]:
    """(path, raw body, status, param, code)."""
    head = f'{{"model": "{MODEL}", "stream": {json.dumps(stream)}, '
    return [
        (CHAT, head + f'"messages": {_nested(1_000)}}}', 400, None, "invalid_json"),
        (COMPLETIONS, head + f'"prompt": {_nested(1_000)}}}', 400, None, "invalid_json"),
        (CHAT, head + f'"messages": {_nested(100_000)}}}', 400, None, "invalid_json"),
        (CHAT, head + '"messages": [{"role": "user", "content": "\\ud800"}]}', 400,
         "messages[0].content", "invalid_value"),
        (COMPLETIONS, head + '"prompt": "a\\udfff"}', 400, "prompt", "invalid_value"),
        (CHAT, head + '"user": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}',
         400, "user", "invalid_value"),
        (COMPLETIONS, head + '"prompt": "x", "\\ud800": 1}', 400, "\\ud800", "invalid_value"),
        (CHAT, head + '"temperature": 1e999, "messages": []}', 400, None, "invalid_json"),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_deep_json_and_lone_surrogates_are_a_400_naming_the_field(fake, key, settings,
                                                                        stream):
    settings.LASER_MAX_REQUEST_BYTES = 1_000_000
    client = AsyncClient(raise_request_exception=False)
    wrong = []
    for path, raw, status, param, code in _bodies(stream):
        response = await client.post(path, raw.encode(), content_type="application/json",
                                     headers={"Authorization": f"Bearer {key}"})
        error = response.json().get("error", {})
        if (response.status_code, error.get("param"), error.get("code")) != (status, param, code):
            wrong.append((path, raw[:80], response.status_code, response.content[:200]))
    assert wrong == []
    assert fake.requests == []


async def test_a_nul_in_chat_text_is_served(fake, key):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "a\x00b"}]}
    response = await AsyncClient().post(CHAT, json.dumps(body), content_type="application/json",
                                        headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.content
    assert fake.requests[0].messages[0]["content"] == "a\x00b"


async def _socket(key: str) -> WebsocketCommunicator:
    ws = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/",
                               subprotocols=["laser.v1", f"key.{key}"])
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from())["type"] == "ready"
    return ws


@pytest.mark.parametrize("frame, param, code", [
    ('{"type": "chat", "session_id": "s", "content": "\\ud800"}', "content", "invalid_value"),
    ('{"type": "chat", "session_id": "s", "messages": [{"role": "user", "content": "\\udc00"}]}',
     "messages[0].content", "invalid_value"),
    ('{"type": "chat", "session_id": "\\ud800", "content": "hi"}', "session_id",
     "invalid_value"),
    ('{"type": "chat", "session_id": {"a": 1}, "content": "hi"}', "session_id", None),
    ('{"type": "chat", "session_id": ["s"], "content": "hi"}', "session_id", None),
    ('{"type": "chat", "session_id": "' + "s" * 129 + '", "content": "hi"}', "session_id", None),
    ('{"type": "chat", "content": ' + _nested(1_000) + "}", None, "invalid_json"),
])
async def test_ws_chat_answers_bad_frames_with_an_error_and_stays_open(fake, key, frame, param,
                                                                       code):
    ws = await _socket(key)
    await ws.send_to(text_data=frame)
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["error"]["param"], error["error"]["code"]) == (
        "error", param, code), error
    assert error["error"]["type"] == "invalid_request_error"
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=5))["type"] == "pong"
    await ws.disconnect()
    assert fake.requests == []
