"""complete()/complete_sync() fold deltas; closing early aborts the engine request."""

from __future__ import annotations

import asyncio

import pytest

from apps.gateway import engine
from inference.errors import EngineOverloaded
from inference.request import EngineRequest, SamplingParams, Tier
from tests.apps.gateway.fakes import FakeEngine


def _req(**sampling) -> EngineRequest:
    return EngineRequest("r1", SamplingParams(**sampling), prompt="x", tier=Tier.HOT,
                         tenant_id="1")


def test_complete_sync_collects_choices_usage_and_tier_changes():
    fake = FakeEngine(demote_at=1)
    result = engine.complete_sync(_req(n=2, logprobs=True), fake)
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
    task = asyncio.create_task(engine.complete(_req(), fake))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.aborted == ["r1"]


@pytest.mark.asyncio
async def test_errors_before_work_raise_from_open_stream():
    fake = FakeEngine(fail_before=EngineOverloaded("full", tier="hot", retry_after_s=2))
    with pytest.raises(EngineOverloaded):
        await engine.open_stream(_req(), fake)


def test_set_engine_client_swaps_the_singleton():
    fake = FakeEngine()
    old = engine.set_engine_client(fake)
    try:
        assert engine.get_engine_client() is fake
    finally:
        engine.set_engine_client(old)
