"""Tier resolution against contracts, and the per-tenant per-tier limits (memory and Redis)."""

from __future__ import annotations

import os

import pytest

from apps.gateway import admission, ratelimit
from apps.gateway.admission import aadmit, admit, aresolve_tier, resolve_tier
from laser_platform.errors import APIError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("asked, tier", [
    (None, "warm"), ("auto", "warm"), ("default", "warm"), ("priority", "hot"), ("flex", "cold"),
    ("hot", "hot"), ("warm", "warm"), ("cold", "cold"),
])
def test_service_tier_maps_to_a_contracted_tier(contracted, asked, tier):
    tenant, key, _ = contracted(default_tier="warm")
    resolved, contract = resolve_tier(asked, key, tenant)
    assert resolved == tier and contract.tier == tier and contract.tenant_id == tenant.pk


def test_a_tier_without_contract_is_400_on_service_tier(contracted):
    tenant, key, _ = contracted(tiers=("hot",))
    with pytest.raises(APIError) as info:
        resolve_tier("flex", key, tenant)
    assert (info.value.status, info.value.param) == (400, "service_tier")
    with pytest.raises(APIError):
        resolve_tier("nonsense", key, tenant)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_async_resolution_matches(contracted):
    from asgiref.sync import sync_to_async

    tenant, key, _ = await sync_to_async(contracted)(default_tier="cold")
    tier, contract = await aresolve_tier(None, key, tenant)
    assert tier == "cold" and contract.tier == "cold"


def _limit_hit(call) -> APIError:
    with pytest.raises(APIError) as info:
        call()
    return info.value


def test_requests_per_minute_then_429_with_retry_after(contracted):
    tenant, key, _ = contracted(requests_per_min=2)
    _, contract = resolve_tier("hot", key, tenant)
    for _ in range(2):
        admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=10)
    err = _limit_hit(lambda: admit(tenant=tenant, tier="hot", contract=contract,
                                   estimated_tokens=10))
    assert (err.status, err.code) == (429, "rate_limit_exceeded")
    assert 1 <= int(err.headers["Retry-After"]) <= 60
    # Another tier of the same tenant, and another tenant, have their own windows.
    _, warm = resolve_tier("warm", key, tenant)
    admit(tenant=tenant, tier="warm", contract=warm, estimated_tokens=10)
    other, other_key, _ = contracted(requests_per_min=2)
    _, other_contract = resolve_tier("hot", other_key, other)
    admit(tenant=other, tier="hot", contract=other_contract, estimated_tokens=10)


def test_tokens_per_minute_reserve_and_settle(contracted):
    tenant, key, _ = contracted(tokens_per_min=100)
    _, contract = resolve_tier("hot", key, tenant)
    first = admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=80)
    err = _limit_hit(lambda: admit(tenant=tenant, tier="hot", contract=contract,
                                   estimated_tokens=30))
    assert err.code == "rate_limit_exceeded" and "tokens" in err.message
    first.settle(20)  # it used far fewer than reserved: the window frees up
    admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=30)


def test_daily_budget_spent_is_insufficient_quota(contracted):
    tenant, key, _ = contracted(daily_token_budget=50)
    _, contract = resolve_tier("hot", key, tenant)
    admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=10).settle(60)
    err = _limit_hit(lambda: admit(tenant=tenant, tier="hot", contract=contract,
                                   estimated_tokens=1))
    assert (err.status, err.code, err.type) == (429, "insufficient_quota", "insufficient_quota")


def test_draining_and_inflight_cap_are_503(settings):
    from apps.core.lifecycle import lifecycle

    settings.LASER_GATEWAY_MAX_INFLIGHT = 1
    with admission.inflight.hold():
        err = _limit_hit(lambda: admission.inflight.hold().__enter__())
        assert err.status == 503 and "Retry-After" in err.headers
    with admission.inflight.hold():
        pass  # released again
    lifecycle.begin_drain()
    try:
        assert _limit_hit(admission.check_accepting).code == "draining"
    finally:
        lifecycle._draining.clear()


def test_engine_queue_at_bound_is_503(settings):
    settings.LASER_GATEWAY_MAX_QUEUED = 4
    admission.check_engine_capacity({"waiting": {"hot": 1, "cold": 2}})
    err = _limit_hit(lambda: admission.check_engine_capacity({"waiting": {"hot": 2, "cold": 2}}))
    assert err.status == 503


@pytest.fixture
def redis_limiter(require_redis, settings):
    import redis

    url = os.environ["REDIS_URL"].rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    settings.LASER_RATELIMIT_REDIS_URL = url
    ratelimit.get_limiter.cache_clear()
    yield ratelimit.get_limiter()
    redis.Redis.from_url(url).flushdb()


@pytest.mark.redis
def test_redis_limits_are_shared_between_limiters(contracted, redis_limiter, settings):
    tenant, key, _ = contracted(requests_per_min=3, daily_token_budget=100)
    _, contract = resolve_tier("hot", key, tenant)
    assert isinstance(redis_limiter, ratelimit.RedisLimiter)
    admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=5)
    # A second process's limiter (a new client on the same Redis) sees the same window.
    ratelimit.get_limiter.cache_clear()
    admit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=5).settle(120)
    err = _limit_hit(lambda: admit(tenant=tenant, tier="hot", contract=contract,
                                   estimated_tokens=5))
    assert err.code == "insufficient_quota"


@pytest.mark.redis
@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_redis_async_path(contracted, redis_limiter):
    from asgiref.sync import sync_to_async

    tenant, key, _ = await sync_to_async(contracted)(requests_per_min=1)
    _, contract = await aresolve_tier("hot", key, tenant)
    ticket = await aadmit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=5)
    await ticket.asettle(3)
    with pytest.raises(APIError) as info:
        await aadmit(tenant=tenant, tier="hot", contract=contract, estimated_tokens=5)
    assert info.value.code == "rate_limit_exceeded"
