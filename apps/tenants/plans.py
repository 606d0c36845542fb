"""Plans: the default plan's values, and the reads the rest of the platform uses.

- ``tenant_limits(tenant)`` -> ``TenantLimits``: tenant-wide caps for the request path
  (requests in flight per key and per tenant, WebSocket sockets per key, burst factor, file
  storage).
- ``tier_bounds(tenant, tier)`` -> ``TierBounds``: what the tenant may sign for a tier
  (``apps.slo.validation`` checks contracts against it).
- ``plan_default_terms(tenant, tier)``: the plan's default contract terms (overrides of the
  design's table, which ``apps.slo`` owns).

A tenant without a plan is on the default plan; with no default plan at all, the model's field
defaults apply and no tier is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.tenants.models import Plan, PlanTier, Tenant

TenantRef = Tenant | int

DEFAULT_PLAN_NAME = "Standard"
# The default plan's bounds, the same for every tier. A contract outside them is what the
# issue found: a 1e-6 s TTFT target jumps every queue, a weight of 1e6 starves everyone else.
DEFAULT_BOUNDS: dict[str, float | int | None] = {
    "min_ttft_p99_s": 0.1,
    "min_tbt_p99_s": 0.05,
    "min_warm_mean_ttft_s": 0.5,
    "min_cold_deadline_s": None,  # the platform minimum, LASER_COLD_MIN_DEADLINE_S
    "max_priority_weight": 4.0,
    "max_warm_rate_tps": 100.0,
    "max_requests_per_min": 6000,
    "max_tokens_per_min": 1_000_000,
    "max_daily_token_budget": 50_000_000,
}
# Overrides of the design's table in the default plan's default contracts: the table's
# unlimited daily budget is outside the plan's bound.
DEFAULT_PLAN_TERMS: dict[str, object] = {"daily_token_budget": 10_000_000}
BOUND_FIELDS = tuple(DEFAULT_BOUNDS)
# The default plan's tenant-wide caps start from the settings the gateway and the batches app
# used before plans (and LASER_FILE_STORAGE_MB, in MiB, for the storage).
LIMIT_SETTINGS = {"max_inflight_per_key": "LASER_KEY_MAX_INFLIGHT",
                  "max_inflight_per_tenant": "LASER_TENANT_MAX_INFLIGHT",
                  "max_sockets_per_key": "LASER_KEY_MAX_SOCKETS"}


def default_plan_limits() -> dict[str, int]:
    """The default plan's caps from those settings, else the model's defaults."""
    fields = {f.name: f.get_default() for f in Plan._meta.fields}
    limits = {name: int(getattr(settings, setting, fields[name]))
              for name, setting in LIMIT_SETTINGS.items()}
    storage_mb = getattr(settings, "LASER_FILE_STORAGE_MB", None)
    limits["max_storage_bytes"] = (fields["max_storage_bytes"] if storage_mb is None
                                   else int(storage_mb) * 1024 * 1024)
    return limits


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """Tenant-wide caps of a tenant's plan, as plain values for the request path."""

    plan: str
    burst_factor: float
    max_inflight_per_key: int
    max_inflight_per_tenant: int
    max_sockets_per_key: int
    max_storage_bytes: int


@dataclass(frozen=True, slots=True)
class TierBounds:
    """What a tenant may sign for one tier; ``None`` = no bound from the plan."""

    plan: str
    tier: str
    min_ttft_p99_s: float | None = None
    min_tbt_p99_s: float | None = None
    min_warm_mean_ttft_s: float | None = None
    min_cold_deadline_s: float | None = None
    max_priority_weight: float | None = None
    max_warm_rate_tps: float | None = None
    max_requests_per_min: int | None = None
    max_tokens_per_min: int | None = None
    max_daily_token_budget: int | None = None


def default_plan() -> Plan | None:
    return Plan.objects.filter(is_default=True).first()


def plan_of(tenant: TenantRef) -> Plan | None:
    """The plan ``tenant`` is on: its own, else the default plan."""
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else int(tenant)
    plan = Plan.objects.filter(tenants__pk=tenant_id).first()
    return plan or default_plan()


def plan_loaded(tenant: TenantRef) -> bool:
    """Whether ``tenant`` carries its plan, so ``tenant_limits`` reads it without a query."""
    return isinstance(tenant, Tenant) and tenant.plan_id is not None and \
        Tenant.plan.is_cached(tenant)


def tenant_limits(tenant: TenantRef) -> TenantLimits:
    """Tenant-wide caps of ``tenant``'s plan.

    No query when ``tenant`` is a Tenant whose plan is loaded (``api_key_resolve``,
    ``tenant_for_user`` and ``membership_for_user`` load it); else 1-2 queries, so async code
    without a loaded plan calls ``atenant_limits``.
    """
    if plan_loaded(tenant):
        assert isinstance(tenant, Tenant)
        plan = tenant.plan
    else:
        plan = plan_of(tenant) or Plan(name="")  # no plan at all: the model's defaults
    return TenantLimits(
        plan=plan.name,
        burst_factor=plan.burst_factor,
        max_inflight_per_key=plan.max_inflight_per_key,
        max_inflight_per_tenant=plan.max_inflight_per_tenant,
        max_sockets_per_key=plan.max_sockets_per_key,
        max_storage_bytes=plan.max_storage_bytes,
    )


async def atenant_limits(tenant: TenantRef) -> TenantLimits:
    """``tenant_limits`` for async callers (the ORM runs on a worker thread)."""
    return await sync_to_async(tenant_limits, thread_sensitive=True)(tenant)


def _plan_tier(tenant: TenantRef, tier: str) -> PlanTier | None:
    plan = plan_of(tenant)
    return None if plan is None else plan.tiers.filter(tier=str(tier)).first()


def tier_bounds(tenant: TenantRef, tier: str) -> TierBounds | None:
    """The bounds ``tenant``'s plan sets on ``tier`` contracts, or None when unbounded."""
    row = _plan_tier(tenant, tier)
    if row is None:
        return None
    return TierBounds(plan=row.plan.name, tier=row.tier,
                      **{name: getattr(row, name) for name in BOUND_FIELDS})


def plan_default_terms(tenant: TenantRef, tier: str) -> dict[str, object]:
    """The plan's overrides of the design's table for a new ``tier`` contract."""
    row = _plan_tier(tenant, tier)
    return dict(row.default_terms) if row is not None else {}
