"""REST + SSE framing, errors and bookkeeping against a scripted engine (Django AsyncClient).

The same behaviours are shown against the real engine through a live server in
``test_live_sdk.py`` and ``test_live_http.py``; here every branch is reachable deterministically.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from apps.gateway import engine_client
from inference.errors import EngineOverloaded, PromptTooLong
from tests.apps.gateway.fakes import FakeEngine

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m-instruct"


@pytest.fixture
def fake():
    fake = FakeEngine()
    old = engine_client.set_engine_client(fake)
    yield fake
    engine_client.set_engine_client(old)


@pytest.fixture
def key(contracted):
    _, _, plaintext = contracted()
    return plaintext


def _post(client, path, body, key, **headers):
    return client.post(path, json.dumps(body) if not isinstance(body, (bytes, str)) else body,
                       content_type=headers.pop("content_type", "application/json"),
                       headers={"Authorization": f"Bearer {key}", **headers})


def _chat(**extra):
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


async def _records():
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    await sync_to_async(flush_reports)()
    return await sync_to_async(list)(RequestRecord.objects.order_by("arrival"))


async def _sse(response) -> list[str]:
    raw = b"".join([part async for part in response.streaming_content]).decode()
    return [block for block in raw.split("\n\n") if block]


async def test_non_streamed_chat_completion_shape(fake, key):
    response = await _post(AsyncClient(), "/v1/chat/completions", _chat(n=2), key)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert [c["message"]["content"] for c in body["choices"]] == ["Hello world!"] * 2
    assert body["service_tier"] == "priority" and response["X-Laser-Tier"] == "hot"
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    [record] = await _records()
    assert (record.outcome, record.tier_asked, record.completion_tokens) == ("ok", "hot", 6)


async def test_sse_frames_usage_chunk_and_done(fake, key):
    body = _chat(stream=True, stream_options={"include_usage": True}, service_tier="warm")
    response = await _post(AsyncClient(), "/v1/chat/completions", body, key)
    assert response["Content-Type"].startswith("text/event-stream")
    blocks = await _sse(response)
    assert blocks[-1] == "data: [DONE]"
    chunks = [json.loads(b[len("data: "):]) for b in blocks[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"content": "Hello", "role": "assistant"}
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks[:-1]) == "Hello world!"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3
    assert {c["service_tier"] for c in chunks} == {"default"}
    [record] = await _records()
    assert record.streamed and record.outcome == "ok" and record.tier_served == "warm"


async def test_demotion_mid_stream_is_a_comment_and_a_tier_change(key):
    old = engine_client.set_engine_client(FakeEngine(demote_at=1))
    try:
        response = await _post(AsyncClient(), "/v1/chat/completions", _chat(stream=True), key)
        blocks = await _sse(response)
    finally:
        engine_client.set_engine_client(old)
    assert blocks[1].startswith(": tier_changed from=hot to=warm reason=hot pressure")
    tiers = [json.loads(b[6:])["service_tier"] for b in blocks if b.startswith("data: {")]
    assert tiers == ["priority", "default", "default"]
    [record] = await _records()
    assert record.demoted and record.tier_served == "warm"


@pytest.mark.parametrize("demote_at, header", [(0, "warm"), (1, "hot"), (None, "hot")])
async def test_a_hot_streams_header_is_the_tier_of_its_first_delta(key, demote_at, header):
    old = engine_client.set_engine_client(FakeEngine(demote_at=demote_at))
    try:
        response = await _post(AsyncClient(), "/v1/chat/completions", _chat(stream=True), key)
        blocks = await _sse(response)
    finally:
        engine_client.set_engine_client(old)
    assert response["X-Laser-Tier"] == header and blocks[-1] == "data: [DONE]"
    assert any(b.startswith(": tier_changed") for b in blocks) == (demote_at is not None)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_demoted_request_the_engine_refuses_is_a_503_not_an_interruption(key, stream):
    """Demoted, then refused before its first token (warm's bound): a 503 with Retry-After
    where the status is not sent yet, else an error frame; booked as a refusal."""
    old = engine_client.set_engine_client(FakeEngine(demote_at=0, refuse_at=0))
    try:
        response = await _post(AsyncClient(), "/v1/chat/completions", _chat(stream=stream), key)
        if stream:
            blocks = await _sse(response)
            assert response.status_code == 200 and response["X-Laser-Tier"] == "warm"
            assert blocks[0].startswith(": tier_changed") and blocks[-1] == "data: [DONE]"
            error = json.loads(blocks[-2][6:])["error"]
        else:
            assert response.status_code == 503 and int(response["Retry-After"]) >= 1
            error = response.json()["error"]
    finally:
        engine_client.set_engine_client(old)
    assert error["code"] == "engine_overloaded" and "warm's bound" in error["message"]
    [record] = await _records()
    assert (record.outcome, record.error_code, record.demoted) == (
        "rejected_503", "engine_overloaded", True)


async def test_a_hot_stream_failing_before_its_first_delta_is_a_status(key):
    old = engine_client.set_engine_client(FakeEngine(fail_at=0))
    try:
        response = await _post(AsyncClient(), "/v1/chat/completions", _chat(stream=True), key)
    finally:
        engine_client.set_engine_client(old)
    # the engine's error as a whole response gets it (an overload would be 503 + Retry-After)
    assert (response.status_code, response.json()["error"]["code"]) == (500, "engine_error")
    [record] = await _records()
    assert record.outcome != "ok"


async def test_error_after_stream_started_is_error_frame_then_done(key):
    old = engine_client.set_engine_client(FakeEngine(fail_at=2))
    try:
        response = await _post(AsyncClient(), "/v1/completions",
                               {"model": MODEL, "prompt": "x", "stream": True}, key)
        blocks = await _sse(response)
    finally:
        engine_client.set_engine_client(old)
    assert response.status_code == 200 and blocks[-1] == "data: [DONE]"
    error = json.loads(blocks[-2][6:])["error"]
    assert error["type"] == "server_error" and error["message"]
    assert json.loads(blocks[0][6:])["object"] == "text_completion"
    [record] = await _records()
    assert record.outcome == "interrupted"


async def test_engine_refusals_map_to_503_and_400(key):
    client = AsyncClient()
    old = engine_client.set_engine_client(FakeEngine(
        fail_before=EngineOverloaded("full", tier="hot", retry_after_s=3)))
    try:
        r503 = await _post(client, "/v1/chat/completions", _chat(), key)
        too_long = PromptTooLong("messages", 3000, 10, 2048)
        engine_client.set_engine_client(FakeEngine(fail_before=too_long))
        r400 = await _post(client, "/v1/chat/completions", _chat(max_tokens=10), key)
    finally:
        engine_client.set_engine_client(old)
    assert r503.status_code == 503 and r503["Retry-After"] == "3"
    assert r400.status_code == 400 and r400.json()["error"]["param"] == "messages"
    assert r400.json()["error"]["code"] == "context_length_exceeded"
    assert [r.outcome for r in await _records()] == ["rejected_503", "rejected_400"]


async def test_saturated_engine_is_503_before_the_engine_sees_it(fake, key, settings):
    settings.LASER_GATEWAY_MAX_QUEUED = 0
    from apps.gateway import serving

    serving._stats_cache["stats"] = None
    response = await _post(AsyncClient(), "/v1/chat/completions", _chat(), key)
    assert response.status_code == 503 and "Retry-After" in response
    assert fake.requests == []


@pytest.mark.parametrize("body, content_type, status, code", [
    (b"{not json", "application/json", 400, "invalid_json"),
    (b"[1, 2]", "application/json", 400, "invalid_json"),
    (b"model=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    (b"{}", "text/plain", 415, "unsupported_media_type"),
])
async def test_malformed_bodies_are_4xx_in_openai_shape(fake, key, body, content_type, status,
                                                        code):
    response = await _post(AsyncClient(), "/v1/chat/completions", body, key,
                           content_type=content_type)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


async def test_oversize_body_is_413(fake, key, settings):
    settings.LASER_MAX_REQUEST_BYTES = 1000
    big = _chat(messages=[{"role": "user", "content": "x" * 2000}])
    response = await _post(AsyncClient(), "/v1/chat/completions", big, key)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


@pytest.fixture
def limited_key(contracted):
    return contracted(requests_per_min=1)[2]


async def test_auth_method_and_rate_limit(fake, limited_key):
    plaintext = limited_key
    client = AsyncClient()
    r401 = await client.post("/v1/chat/completions", _chat(), content_type="application/json")
    auth = {"Authorization": f"Bearer {plaintext}"}
    r405 = await client.get("/v1/chat/completions", headers=auth)
    ok = await _post(client, "/v1/chat/completions", _chat(), plaintext)
    excess = await _post(client, "/v1/chat/completions", _chat(), plaintext)  # rpm 1, burst 2
    r429 = await _post(client, "/v1/chat/completions", _chat(), plaintext)
    assert (r401.status_code, r405.status_code, ok.status_code) == (401, 405, 200)
    assert excess.status_code == 200
    # the engine request says which: the first in contract, the second excess
    assert [r.in_contract for r in fake.requests] == [True, False]
    # and so does the SLO record
    assert [r.in_contract for r in await _records() if r.outcome == "ok"] == [True, False]
    assert r401.json()["error"]["type"] == "authentication_error"
    assert r429.status_code == 429 and int(r429["Retry-After"]) >= 1
    assert r429.json()["error"]["code"] == "rate_limit_exceeded"


async def test_models_list(key):
    response = await AsyncClient().get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [MODEL]
    missing = await AsyncClient().get("/v1/models/gpt-4",
                                      headers={"Authorization": f"Bearer {key}"})
    assert missing.status_code == 404
