"""Hypothesis fuzz of the gateway's doors (issue 41, item 6): ``/v1/chat/completions`` and
``/v1/completions`` (whole and SSE) and ``/ws/chat/`` get JSON with arbitrary Unicode, deep and
wide nesting and huge numbers, whole or in one field. Every answer is a 4xx in the OpenAI shape
(an ``error`` message on the socket) or a success, never a 500 or a 1011, and nothing is logged
as a fault; the engine is ``TokenizingEngine``, which needs UTF-8 text as the real tokeniser
does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient
from hypothesis import given
from hypothesis import strategies as st

from apps.gateway.consumers import ChatConsumer
from tests.apps.core.intake_fuzz import MODEL, assert_openai_error, documents, drive, fuzz
from tests.apps.gateway.fakes import TokenizingEngine, installed

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

HI = [{"role": "user", "content": "hi"}]
REST = {
    "/v1/chat/completions": ({"model": MODEL, "messages": HI, "max_tokens": 3, "stream": False},
                             ["model", "messages", "messages.0", "messages.0.content",
                              "messages.0.role", "messages.0.*", "max_tokens", "temperature",
                              "top_p", "n", "stop", "user", "seed", "logprobs", "stream",
                              "stream_options", "service_tier", "*"]),
    "/v1/completions": ({"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True},
                        ["model", "prompt", "max_tokens", "stop", "echo", "suffix", "stream",
                         "best_of", "logit_bias", "*"]),
}
WS_CHAT = {"type": "chat", "session_id": "s", "content": "hi", "params": {"max_tokens": 2}}
WS_FIELDS = ["type", "session_id", "content", "messages", "params", "params.max_tokens",
             "params.temperature", "params.stop", "params.*", "*"]


@pytest.fixture
def engine():
    with installed(TokenizingEngine()) as fake:
        yield fake


@pytest.fixture
def roomy_key(contracted) -> str:
    """A key whose contracts no fuzz run exhausts (refusals come from the intake)."""
    return contracted(requests_per_min=6000, tokens_per_min=1_000_000)[2]


def _no_fault_logged(caplog: Any) -> None:
    faults = [r.getMessage() for r in caplog.records if r.name == "laser.errors"]
    assert faults == []


async def _rest(path: str, raw: str, key: str) -> None:
    response = await AsyncClient(raise_request_exception=False).post(
        path, raw.encode("utf-8", "surrogatepass"), content_type="application/json",
        headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, (raw[:200], response.status_code)
    if response.status_code >= 400:
        assert_openai_error(response.json())
    elif response.streaming:
        text = b"".join([part async for part in response.streaming_content]).decode()
        for block in text.split("\n\n"):
            if block.startswith("data: {"):
                chunk = json.loads(block[6:])
                assert "error" not in chunk, chunk
    else:
        assert response.json()["object"] in ("chat.completion", "text_completion")


REST_DOCS = st.sampled_from(sorted(REST)).flatmap(
    lambda path: st.tuples(st.just(path), documents(*REST[path])))


@fuzz(300)
@given(case=REST_DOCS)
def test_rest_and_sse_never_answer_500(case, roomy_key, engine, caplog):
    caplog.clear()
    path, raw = case
    async_to_sync(_rest)(path, raw, roomy_key)
    _no_fault_logged(caplog)


@fuzz(150)
@given(frames=st.lists(documents(WS_CHAT, WS_FIELDS), min_size=1, max_size=3))
def test_ws_chat_never_answers_server_error(frames, roomy_key, engine, caplog, settings):
    settings.LASER_WS_MAX_MESSAGE_BYTES = 1024 * 1024
    drive(WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/",
                                subprotocols=["laser.v1", f"key.{roomy_key}"]), frames, caplog)
