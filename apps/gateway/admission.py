"""Admission decisions of the serving path: tier and contract, capacity, limits and quota.

Order matters and is cheap-first (``apps.gateway.serving`` calls these in order): draining, the
tier resolved against the tenant's contracts (400 when it holds none for it), the process's
in-flight cap and the engine's saturation (503) before anything is tokenised; then, with the
prompt's real token count, the contract's requests/min, tokens/min and daily budget: up to the
contract's rates a request is in contract, above them excess (still admitted, marked so for the
scheduler), above the burst ceiling (the plan's ``burst_factor`` × the rates) or the budget 429.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.errors import BadRequestError, EngineOverloadedError, RateLimitError
from apps.core.lifecycle import is_draining
from apps.gateway import params, ratelimit

if TYPE_CHECKING:
    from apps.slo.selectors import ContractSnapshot
    from inference.engine.stats import EngineStats

# The rate limiter's clock: its windows are the clock's minutes and days (a test pins it, so
# that two requests it expects in one window cannot straddle a minute's end).
clock = time.time

def _asked_tier(asked: Any, default_tier: str) -> str:
    tier = params.service_tier(asked)
    return str(tier) if tier is not None else default_tier


def _no_contract(tier: str) -> BadRequestError:
    return BadRequestError(
        f"Your tenant has no SLO contract for the '{tier}' tier; ask your tenant admin, or use "
        "a tier you hold a contract for.", param="service_tier", code="tier_not_contracted")


def resolve_tier(service_tier: Any, default_tier: str, tenant: Any) -> tuple[str, Any]:
    """Map a request's ``service_tier`` to (tier name, ``ContractSnapshot``) or raise 400.

    ``priority`` = hot, ``flex`` = cold, or the tier names; absent/``auto``/``default`` = the
    caller's default tier. A tier the tenant holds no contract for is a 400 on ``service_tier``.
    """
    from apps.slo.selectors import contract_for

    tier = _asked_tier(service_tier, default_tier)
    contract = contract_for(tenant=tenant, tier=tier)
    if contract is None:
        raise _no_contract(tier)
    return tier, contract


async def aresolve_tier(service_tier: Any, default_tier: str, tenant: Any) -> tuple[str, Any]:
    """``resolve_tier`` for async callers (the ORM runs in a thread)."""
    return await sync_to_async(resolve_tier)(service_tier, default_tier, tenant)


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


inflight = _Inflight()


def check_accepting() -> None:
    """503 while the process drains (SIGTERM): new work goes elsewhere, in-flight finishes."""
    if is_draining():
        raise EngineOverloadedError("The server is shutting down; retry on another replica.",
                                    retry_after=1.0, code="draining")


def overload_decision(stats: EngineStats, tier: str) -> EngineOverloadedError | None:
    """The gateway's one saturation/overload decision, from the engine's stats and before the
    request is tokenised or queued: refuse (503) when the engine's queue holds
    ``LASER_GATEWAY_MAX_QUEUED`` requests already. ``tier`` is the tier the request asks."""
    waiting = sum(stats.waiting.values())
    if waiting >= settings.LASER_GATEWAY_MAX_QUEUED:
        return EngineOverloadedError(
            f"The engine is saturated ({waiting} requests queued); retry shortly.",
            retry_after=1.0)
    return None


# ---- rate limits and quota ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """An admitted request's reservation; ``asettle`` it with the real token count at the end.
    ``output`` is the output tokens per choice granted (lower than asked when clipped);
    ``in_contract`` False: admitted as excess, above the contract's rates, under its ceiling."""

    ticket: ratelimit.Ticket | None
    output: int
    in_contract: bool = True

    async def asettle(self, actual_tokens: int) -> None:
        if self.ticket is None:
            return
        limiter = ratelimit.get_limiter()
        if isinstance(limiter, ratelimit.RedisLimiter):
            await limiter.asettle(self.ticket, actual_tokens, clock())
        else:
            limiter.settle(self.ticket, actual_tokens, clock())


def contract_limits(contract: ContractSnapshot, burst_factor: float = 1.0) -> ratelimit.Limits:
    return ratelimit.Limits(requests_per_min=contract.requests_per_min,
                            tokens_per_min=contract.tokens_per_min,
                            daily_token_budget=contract.daily_token_budget,
                            burst_factor=burst_factor)


async def aburst_factor(tenant: Any) -> float:
    """The tenant's plan's burst factor (no query when its plan is loaded, as the key's and
    the user's tenant have it)."""
    from apps.tenants.plans import atenant_limits, plan_loaded, tenant_limits

    if plan_loaded(tenant):
        return tenant_limits(tenant).burst_factor
    return (await atenant_limits(tenant)).burst_factor


def _raise_for(verdict: ratelimit.Verdict, tier: str, ask: ratelimit.Ask) -> None:
    if verdict.status == ratelimit.QUOTA:
        detail = ("is spent" if ask.clip else
                  f"has less left than this request's prompt plus max_tokens ({ask.prompt} + "
                  f"{ask.output} x {ask.choices})")
        raise RateLimitError.quota(
            f"Your tenant's daily token budget for the '{tier}' tier {detail}. It resets at "
            "00:00 UTC; ask your tenant admin to raise it.")
    if verdict.status == ratelimit.LIMITED:
        raise RateLimitError(
            f"Rate limit reached for {verdict.which} per minute on the '{tier}' tier (the "
            "contract's rate times its plan's burst factor); retry after "
            f"{max(1, round(verdict.retry_after_s))} s.", retry_after=verdict.retry_after_s)


async def aadmit(*, tenant: Any, tier: str, contract: ContractSnapshot, ask: ratelimit.Ask,
                 burst_factor: float = 1.0) -> Admission:
    """Check and reserve the contract's limits for one request; raise 429 over the burst
    ceiling (``burst_factor`` × the contract's rates) or the daily budget. Between the
    contract's rates and the ceiling the request is admitted as excess (``in_contract`` False)."""
    limiter = ratelimit.get_limiter()
    args = (str(tenant.pk), tier, contract_limits(contract, burst_factor), ask, clock())
    if isinstance(limiter, ratelimit.RedisLimiter):
        verdict = await limiter.acheck(*args)
    else:
        verdict = limiter.check(*args)
    _raise_for(verdict, tier, ask)
    return Admission(verdict.ticket, verdict.output, verdict.in_contract)
