"""Admission: API key -> tenant -> tier and contract -> capacity -> rate limits and quota.

Order matters and is cheap-first: draining and engine saturation are refused (503) before any
parsing or tokenising; the tier is resolved against the tenant's contracts (400 when the tenant
has no contract for it); then the contract's requests/min, tokens/min and daily budget (429).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.lifecycle import is_draining
from apps.gateway import ratelimit
from apps.gateway.params import SERVICE_TIERS
from laser_platform.errors import BadRequestError, EngineOverloadedError, RateLimitError

TIER_NAMES = ("hot", "warm", "cold")


def _asked_tier(service_tier: Any, api_key: Any) -> str:
    if service_tier is not None and (not isinstance(service_tier, str)
                                     or service_tier not in SERVICE_TIERS):
        raise BadRequestError(f"'service_tier' must be one of {sorted(SERVICE_TIERS)}.",
                              param="service_tier", code="invalid_value")
    tier = SERVICE_TIERS.get(service_tier) if service_tier is not None else None
    return str(tier) if tier is not None else str(api_key.default_tier)


def _no_contract(tier: str) -> BadRequestError:
    return BadRequestError(
        f"Your tenant has no SLO contract for the '{tier}' tier; ask your tenant admin, or use "
        "a tier you hold a contract for.", param="service_tier", code="tier_not_contracted")


def resolve_tier(service_tier: Any, api_key: Any, tenant: Any) -> tuple[str, Any]:
    """Map a request's ``service_tier`` to (tier name, ``ContractSnapshot``) or raise 400.

    ``priority`` = hot, ``flex`` = cold, or the tier names; absent/``auto``/``default`` = the
    key's default tier. A tier the tenant holds no contract for is a 400 on ``service_tier``.
    """
    from apps.slo.selectors import contract_for

    tier = _asked_tier(service_tier, api_key)
    contract = contract_for(tenant=tenant, tier=tier)
    if contract is None:
        raise _no_contract(tier)
    return tier, contract


async def aresolve_tier(service_tier: Any, api_key: Any, tenant: Any) -> tuple[str, Any]:
    """``resolve_tier`` for async callers (the ORM runs in a thread)."""
    from apps.slo import selectors

    tier = _asked_tier(service_tier, api_key)
    acontract_for = getattr(selectors, "acontract_for", None)
    if acontract_for is not None:
        contract = await acontract_for(tenant=tenant, tier=tier)
    else:
        contract = await sync_to_async(selectors.contract_for)(tenant=tenant, tier=tier)
    if contract is None:
        raise _no_contract(tier)
    return tier, contract


# ---- capacity ------------------------------------------------------------------------------


class _Inflight:
    """Requests this process is serving now; past the cap new ones get 503 before any work."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    def acquire(self) -> None:
        """Count one more request, or raise 503 when the process is at its cap."""
        with self._lock:
            if self._count >= settings.LASER_GATEWAY_MAX_INFLIGHT:
                raise EngineOverloadedError(
                    "The server is at capacity; retry shortly.", retry_after=1.0)
            self._count += 1

    def release(self) -> None:
        with self._lock:
            self._count -= 1

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()


inflight = _Inflight()


def check_accepting() -> None:
    """503 while the process drains (SIGTERM): new work goes elsewhere, in-flight finishes."""
    if is_draining():
        raise EngineOverloadedError("The server is shutting down; retry on another replica.",
                                    retry_after=1.0, code="draining")


def check_engine_capacity(stats: Any) -> None:
    """503 when the engine's queue is already at ``LASER_GATEWAY_MAX_QUEUED`` (from its stats,
    before the request is tokenised or queued)."""
    waiting = _stat(stats, "waiting")
    if isinstance(waiting, dict):
        waiting = sum(waiting.values())
    bound = settings.LASER_GATEWAY_MAX_QUEUED
    if isinstance(waiting, int) and waiting >= bound:
        raise EngineOverloadedError(
            f"The engine is saturated ({waiting} requests queued); retry shortly.",
            retry_after=1.0)


def _stat(stats: Any, name: str) -> Any:
    if isinstance(stats, dict):
        return stats.get(name)
    return getattr(stats, name, None)


# ---- rate limits and quota ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``admit`` hands back: settle it with the real token count when the request ends."""

    ticket: ratelimit.Ticket | None

    def settle(self, actual_tokens: int) -> None:
        if self.ticket is not None:
            ratelimit.get_limiter().settle(self.ticket, actual_tokens, time.time())

    async def asettle(self, actual_tokens: int) -> None:
        if self.ticket is None:
            return
        limiter = ratelimit.get_limiter()
        if isinstance(limiter, ratelimit.RedisLimiter):
            await limiter.asettle(self.ticket, actual_tokens, time.time())
        else:
            limiter.settle(self.ticket, actual_tokens, time.time())


def contract_limits(contract: Any) -> ratelimit.Limits:
    return ratelimit.Limits(
        requests_per_min=getattr(contract, "requests_per_min", None),
        tokens_per_min=getattr(contract, "tokens_per_min", None),
        daily_token_budget=getattr(contract, "daily_token_budget", None),
    )


def estimate_tokens(request: Any) -> int:
    """Tokens a request may cost, before tokenising: ~4 characters a token, plus its output."""
    if request.prompt_token_ids is not None:
        prompt = len(request.prompt_token_ids)
    else:
        text = request.prompt or "".join(str(m.get("content", "")) for m in request.messages)
        prompt = len(text) // 4 + 1
    return prompt + request.sampling.max_tokens * request.sampling.n


def _raise_for(verdict: ratelimit.Verdict, tier: str) -> None:
    if verdict.status == ratelimit.QUOTA:
        raise RateLimitError.quota(
            f"Your tenant's daily token budget for the '{tier}' tier is spent. It resets at "
            "00:00 UTC; ask your tenant admin to raise it.")
    if verdict.status == ratelimit.LIMITED:
        raise RateLimitError(
            f"Rate limit reached for {verdict.which} per minute on the '{tier}' tier; retry "
            f"after {max(1, round(verdict.retry_after_s))} s.", retry_after=verdict.retry_after_s)


def admit(*, tenant: Any, tier: str, contract: Any, estimated_tokens: int) -> Admission:
    """Check and reserve the contract's limits for one request; raise 429 when over."""
    verdict = ratelimit.get_limiter().check(str(tenant.pk), tier, contract_limits(contract),
                                            estimated_tokens, time.time())
    _raise_for(verdict, tier)
    return Admission(verdict.ticket)


async def aadmit(*, tenant: Any, tier: str, contract: Any, estimated_tokens: int) -> Admission:
    """``admit`` for async callers."""
    limiter = ratelimit.get_limiter()
    args = (str(tenant.pk), tier, contract_limits(contract), estimated_tokens, time.time())
    if isinstance(limiter, ratelimit.RedisLimiter):
        verdict = await limiter.acheck(*args)
    else:
        verdict = limiter.check(*args)
    _raise_for(verdict, tier)
    return Admission(verdict.ticket)
