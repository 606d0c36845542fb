"""complete()/complete_sync() fold deltas; closing early aborts the engine request."""

from __future__ import annotations

import asyncio

import pytest

from apps.gateway import engine_client
from inference.errors import EngineOverloaded
from inference.request import EngineRequest, SamplingParams, Tier
from tests.apps.gateway.fakes import FakeEngine


def _req(**sampling) -> EngineRequest:
    return EngineRequest("r1", SamplingParams(**sampling), prompt="x", tier=Tier.HOT,
                         tenant_id="1")


def test_complete_sync_collects_choices_usage_and_tier_changes():
    fake = FakeEngine(demote_at=1)
    result = engine_client.complete_sync(_req(n=2, logprobs=True), fake)
    assert [c.text for c in result.choices] == ["Hello world!"] * 2
    assert result.finish_reasons == ["stop", "stop"]
    assert (result.prompt_tokens, result.completion_tokens) == (5, 6)
    assert result.tier_served is Tier.WARM and result.demoted
    assert [c.to_tier for c in result.tier_changes] == [Tier.WARM, Tier.WARM]
    assert len(result.choices[0].logprobs) == 3 and result.ttft_s >= 0
    assert fake.aborted == []


@pytest.mark.asyncio
async def test_cancelling_complete_aborts_the_request():
    fake = FakeEngine(words=["a"] * 50, delay=0.01)
    task = asyncio.create_task(engine_client.complete(_req(), fake))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.aborted == ["r1"]


@pytest.mark.asyncio
async def test_errors_before_work_raise_from_open_stream():
    fake = FakeEngine(fail_before=EngineOverloaded("full", tier="hot", retry_after_s=2))
    with pytest.raises(EngineOverloaded):
        await engine_client.open_stream(_req(), fake)


def test_set_engine_client_swaps_the_singleton():
    fake = FakeEngine()
    old = engine_client.set_engine_client(fake)
    try:
        assert engine_client.get_engine_client() is fake
    finally:
        engine_client.set_engine_client(old)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_prompts_are_tokenised_off_the_loop_after_a_byte_check(tiny_engine, contracted,
                                                                     monkeypatch):
    """The template and tokeniser run on another thread; a prompt longer than the context can
    ever hold is refused (400 on ``messages``) without being tokenised at all."""
    import threading

    from asgiref.sync import sync_to_async

    from apps.core.errors import APIError
    from apps.gateway.serving import CHAT, Caller, serve

    threads: list[int] = []
    real = tiny_engine.engine.encode

    def spy(request):
        threads.append(threading.get_ident())
        return real(request)

    monkeypatch.setattr(tiny_engine.engine, "encode", spy)
    _, key, _ = await sync_to_async(contracted)()
    caller = Caller.for_key(key)

    def body(content: str) -> dict:
        return {"model": "smollm2-135m-instruct", "max_tokens": 2,
                "messages": [{"role": "user", "content": content}]}

    served = await serve(caller=caller, kind=CHAT, body=body("hello"), endpoint="/t")
    await served.complete()
    assert threads and threading.get_ident() not in threads
    limit = (await tiny_engine.stats()).max_prompt_bytes
    assert limit > 0
    threads.clear()
    with pytest.raises(APIError) as info:
        await serve(caller=caller, kind=CHAT, body=body("x" * (limit + 1)), endpoint="/t")
    assert (info.value.status, info.value.param, info.value.code) == (
        400, "messages", "context_length_exceeded")
    assert threads == []  # refused before any tokenising
