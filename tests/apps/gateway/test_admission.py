"""Tier resolution against contracts, and the per-tenant per-tier limits (memory and Redis):
reservations at admission, settled at the end, counted against the daily budget while they run."""

from __future__ import annotations

import os
import time

import pytest

from apps.core.errors import APIError
from apps.gateway import admission, ratelimit
from apps.gateway.admission import aadmit, aresolve_tier, resolve_tier
from apps.gateway.ratelimit import ADMITTED, LIMITED, QUOTA, Ask, Limits
from inference.engine.stats import EngineStats

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("asked, tier", [
    (None, "warm"), ("auto", "warm"), ("default", "warm"), ("priority", "hot"), ("flex", "cold"),
    ("hot", "hot"), ("warm", "warm"), ("cold", "cold"),
])
def test_service_tier_maps_to_a_contracted_tier(contracted, asked, tier):
    tenant, key, _ = contracted(default_tier="warm")
    resolved, contract = resolve_tier(asked, str(key.default_tier), tenant)
    assert resolved == tier and contract.tier == tier and contract.tenant_id == tenant.pk


def test_a_tier_without_contract_is_400_on_service_tier(contracted):
    tenant, key, _ = contracted(tiers=("hot",))
    with pytest.raises(APIError) as info:
        resolve_tier("flex", "hot", tenant)
    assert (info.value.status, info.value.param) == (400, "service_tier")
    for asked in ("nonsense", "scale", 3, ["hot"]):  # the one check of the parameter
        with pytest.raises(APIError) as info:
            resolve_tier(asked, "hot", tenant)
        assert (info.value.status, info.value.param, info.value.code) == (
            400, "service_tier", "invalid_value")


@pytest.fixture(params=["memory", "redis"])
def limiter(request, settings):
    if request.param == "memory":
        yield ratelimit.MemoryLimiter()
        return
    request.getfixturevalue("require_redis")
    import redis

    url = os.environ["REDIS_URL"].rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    yield ratelimit.RedisLimiter(url)
    redis.Redis.from_url(url).flushdb()


def _check(limiter, limits: Limits, ask: Ask, tenant: str = "t1", tier: str = "hot"):
    return limiter.check(tenant, tier, limits, ask, time.time())


def test_requests_per_minute_per_tenant_and_tier(limiter):
    limits = Limits(2, None, None)
    assert [_check(limiter, limits, Ask(5, 5)).status for _ in range(3)] == [
        ADMITTED, ADMITTED, LIMITED]
    verdict = _check(limiter, limits, Ask(5, 5))
    assert verdict.which == "requests" and 0 < verdict.retry_after_s <= 60
    # another tier of the same tenant, and another tenant, have their own windows
    assert _check(limiter, limits, Ask(5, 5), tier="warm").status == ADMITTED
    assert _check(limiter, limits, Ask(5, 5), tenant="t2").status == ADMITTED


def test_tokens_per_minute_reserve_and_settle(limiter):
    limits = Limits(None, 100, None)
    first = _check(limiter, limits, Ask(30, 50))
    assert first.status == ADMITTED and first.ticket.reserved_tokens == 80
    assert _check(limiter, limits, Ask(10, 20)).which == "tokens"
    limiter.settle(first.ticket, 20, time.time())  # used far fewer: the window frees up
    assert _check(limiter, limits, Ask(10, 20)).status == ADMITTED


def _marks(limiter, limits: Limits, asks: list[Ask], tenant: str = "t1") -> list[str]:
    out = []
    for ask in asks:
        verdict = _check(limiter, limits, ask, tenant=tenant)
        out.append(verdict.which if verdict.status == LIMITED else
                   "in" if verdict.in_contract else "excess")
    return out


def test_requests_per_minute_in_contract_excess_and_ceiling(limiter):
    # rpm 2, burst 2: requests 1-2 in contract, 3-4 excess (admitted), the 5th over the ceiling
    assert _marks(limiter, Limits(2, None, None, burst_factor=2.0), [Ask(1, 1)] * 5) == [
        "in", "in", "excess", "excess", "requests"]
    # burst 1 (batch lines): no excess, the contract's rate is the ceiling
    marks = _marks(limiter, Limits(2, None, None), [Ask(1, 1)] * 3, tenant="t2")
    assert marks == ["in", "in", "requests"]
    # a fractional ceiling rounds down: 3 x 1.5 = 4.5 -> 4 requests
    marks = _marks(limiter, Limits(3, None, None, burst_factor=1.5), [Ask(1, 1)] * 5,
                   tenant="t3")
    assert marks == ["in"] * 3 + ["excess", "requests"]


def test_tokens_per_minute_in_contract_excess_and_ceiling(limiter):
    limits = Limits(None, 100, None, burst_factor=2.0)  # contract 100 tokens, ceiling 200
    # 60 + 40 = 100: in contract (exactly at the rate); +1 -> 101: excess; 101 + 99 = 200:
    # excess at the ceiling; +1 -> 201: over the ceiling
    asks = [Ask(30, 30), Ask(20, 20), Ask(0, 1), Ask(49, 50), Ask(0, 1)]
    assert _marks(limiter, limits, asks) == ["in", "in", "excess", "excess", "tokens"]


def test_in_flight_reservations_count_against_the_daily_budget(limiter):
    limits = Limits(None, None, 100)
    first = _check(limiter, limits, Ask(10, 50))  # 60 reserved, still running
    assert first.status == ADMITTED
    # a set max_tokens over what is left (40) is refused; an open one is clipped to it
    assert _check(limiter, limits, Ask(10, 50)).status == QUOTA
    clipped = _check(limiter, limits, Ask(10, 50, clip=True))
    assert (clipped.status, clipped.output, clipped.ticket.reserved_tokens) == (ADMITTED, 30, 40)
    assert _check(limiter, limits, Ask(1, 1, clip=True)).status == QUOTA  # nothing left
    limiter.settle(first.ticket, 15, time.time())  # the first one used 15 of its 60
    freed = _check(limiter, limits, Ask(5, 100, choices=2, clip=True))
    assert (freed.status, freed.output) == (ADMITTED, 20)  # 45 left: 5 + 2 x 20


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_async_admission_raises_the_openai_errors(contracted, settings):
    from asgiref.sync import sync_to_async

    tenant, key, _ = await sync_to_async(contracted)(requests_per_min=1, daily_token_budget=50)
    _, contract = await aresolve_tier("hot", "hot", tenant)
    with pytest.raises(APIError) as info:
        await aadmit(tenant=tenant, tier="hot", contract=contract, ask=Ask(10, 100))
    assert (info.value.status, info.value.code) == (429, "insufficient_quota")
    admitted = await aadmit(tenant=tenant, tier="hot", contract=contract,
                            ask=Ask(10, 100, clip=True))
    assert admitted.output == 40
    await admitted.asettle(12)
    with pytest.raises(APIError) as info:
        await aadmit(tenant=tenant, tier="hot", contract=contract, ask=Ask(1, 1))
    assert info.value.code == "rate_limit_exceeded" and "Retry-After" in info.value.headers


def test_draining_and_inflight_cap_are_503(settings):
    from apps.core.lifecycle import lifecycle

    settings.LASER_GATEWAY_MAX_INFLIGHT = 1
    admission.inflight.acquire()
    try:
        with pytest.raises(APIError) as info:
            admission.inflight.acquire()
        assert info.value.status == 503 and "Retry-After" in info.value.headers
    finally:
        admission.inflight.release()
    lifecycle.begin_drain()
    try:
        with pytest.raises(APIError) as info:
            admission.check_accepting()
        assert info.value.code == "draining"
    finally:
        lifecycle._draining.clear()


def test_the_overload_decision_is_the_engine_queue_bound(settings):
    settings.LASER_GATEWAY_MAX_QUEUED = 4
    assert admission.overload_decision(EngineStats(waiting={"hot": 1, "cold": 2}), "hot") is None
    refusal = admission.overload_decision(EngineStats(waiting={"hot": 2, "cold": 2}), "cold")
    assert refusal is not None and refusal.status == 503
