"""The daily budget is never overshot: N concurrent requests against a budget of B tokens
deliver at most B tokens in total, whatever N, B and max_tokens (set or left open), through
the serving path and the real engine (the tiny model: greedy never stops early, so every
admitted request uses its whole reservation unless clipped)."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.core.errors import APIError
from apps.gateway import ratelimit
from apps.gateway.serving import CHAT, Caller, serve

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]


async def _one(caller: Caller, max_tokens: int | None, i: int) -> int:
    body = {"model": "smollm2-135m-instruct", "temperature": 0,
            "messages": [{"role": "user", "content": f"count to {i}"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    try:
        served = await serve(caller=caller, kind=CHAT, body=body, endpoint=f"/{CHAT}")
    except APIError as exc:
        assert exc.code == "insufficient_quota", exc.body()
        return 0
    result = await served.complete()
    return result.total_tokens


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(n=st.integers(1, 10), budget=st.integers(1, 500), max_tokens=st.integers(1, 80),
       set_by_client=st.booleans())
def test_concurrent_requests_never_overshoot_the_daily_budget(
        tiny_engine, contracted, n, budget, max_tokens, set_by_client):
    tenant, key, _ = contracted(daily_token_budget=budget)
    caller = Caller.for_key(key)
    asked = max_tokens if set_by_client else None

    async def burst() -> list[int]:
        return list(await asyncio.gather(*(_one(caller, asked, i) for i in range(n))))

    delivered = async_to_sync(burst)()
    assert sum(delivered) <= budget
    # every reservation settled to what was delivered: the day's counter is exactly that
    limiter = ratelimit.get_limiter()
    assert isinstance(limiter, ratelimit.MemoryLimiter)
    day = [v for k, (v, _) in limiter._counts.items() if k.startswith(f"laser:rl:{tenant.pk}:")
           and ":d:" in k]
    assert sum(day) == sum(delivered)
    if not set_by_client and budget >= 100:  # an open max_tokens is clipped, not refused
        assert delivered[0] or any(delivered)
