"""Gateway fixtures: a tenant with contracts, its key, and a fresh in-process rate limiter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _fresh_limiter(settings: Any) -> Any:
    """Each test starts with empty rate-limit windows (in-process unless a test asks for Redis)."""
    from apps.gateway import ratelimit

    settings.LASER_RATELIMIT_REDIS_URL = ""
    ratelimit.get_limiter.cache_clear()
    yield
    ratelimit.get_limiter.cache_clear()


@pytest.fixture(autouse=True)
def _reports_flushed_per_test(request: Any, settings: Any) -> Any:
    """Reports are written synchronously at the end of each DB test (not by the writer thread
    after the test database is gone)."""
    settings.LASER_SLO_AUTOFLUSH = False
    yield
    if request.node.get_closest_marker("django_db"):
        from apps.slo.services import flush_reports

        flush_reports()


@pytest.fixture
def contracted(tenant_factory: Callable[..., Any], api_key_factory: Callable[..., Any]):
    """``contracted(tiers=("hot", "warm", "cold"), default_tier="hot", **terms)`` ->
    (tenant, api_key, plaintext) with a contract per tier (terms apply to every tier)."""
    from apps.slo.services import contract_create

    def make(*, tiers: tuple[str, ...] = ("hot", "warm", "cold"), default_tier: str = "hot",
             **terms: Any) -> tuple[Any, Any, str]:
        tenant = tenant_factory()
        for tier in tiers:
            contract_create(tenant=tenant, tier=tier, **terms)
        api_key, plaintext = api_key_factory(tenant=tenant, default_tier=default_tier)
        return tenant, api_key, plaintext

    return make
