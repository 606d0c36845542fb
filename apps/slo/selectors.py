"""Reads of SLO contracts for the request path (gateway, batches) and the API, and of the
request records behind a window (the dashboard).

Contracts leave this module as plain frozen values (``ContractSnapshot`` holding the engine's
``ContractTargets``), so no Django object ever crosses into ``inference/``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from asgiref.sync import sync_to_async
from django.db.models import F

from apps.core.tiers import Tier
from apps.slo.models import AggregationMark, ContractTerms, RequestRecord, SLOContract
from apps.tenants.models import Tenant
from inference.request import ContractTargets

TenantRef = Tenant | int | str


@dataclass(frozen=True, slots=True)
class ContractSnapshot:
    """A contract's terms in force, as plain values.

    ``version_id`` is what a request record stores (``RequestReport.contract_version_id``);
    ``targets`` is what the engine request carries. ``daily_token_budget`` None = unlimited.
    """

    contract_id: int
    version_id: int | None
    version: int
    tenant_id: int
    tier: str
    targets: ContractTargets
    requests_per_min: int
    tokens_per_min: int
    daily_token_budget: int | None
    cold_deadline_s: float
    demotion_budget: float

    def as_dict(self) -> dict:
        data = asdict(self)
        data["targets"] = asdict(self.targets)
        return data


def targets_from_terms(terms: ContractTerms, *, version: int | None = None) -> ContractTargets:
    """The engine's ``ContractTargets`` for a contract or version row."""
    return ContractTargets(
        ttft_p99_s=terms.ttft_p99_s,
        tbt_p99_s=terms.tbt_p99_s,
        interruption_budget=terms.interruption_budget,
        demotable=terms.demotable,
        priority_weight=terms.priority_weight,
        warm_rate_tps=terms.warm_rate_tps,
        warm_band=terms.warm_band,
        warm_mean_ttft_s=terms.warm_mean_ttft_s,
        cold_deadline_s=terms.cold_deadline_s,
        cold_percentile=terms.cold_percentile,
        version=version,
    )


def snapshot_of(contract: SLOContract) -> ContractSnapshot:
    version = contract.current_version
    terms: ContractTerms = version or contract  # the version is the truth once it exists
    number = version.number if version else 0
    return ContractSnapshot(
        contract_id=contract.pk,
        version_id=version.pk if version else None,
        version=number,
        tenant_id=contract.tenant_id,
        tier=contract.tier,
        targets=targets_from_terms(terms, version=number),
        requests_per_min=terms.requests_per_min,
        tokens_per_min=terms.tokens_per_min,
        daily_token_budget=terms.daily_token_budget,
        cold_deadline_s=terms.cold_deadline_s,
        demotion_budget=terms.demotion_budget,
    )


def _tenant_id(tenant: TenantRef) -> int:
    return tenant.pk if isinstance(tenant, Tenant) else int(tenant)


def contract_for(*, tenant: TenantRef, tier: str) -> ContractSnapshot | None:
    """The contract ``tenant`` holds for ``tier`` (``hot``/``warm``/``cold``), or None."""
    contract = (
        SLOContract.objects.select_related("current_version")
        .filter(tenant_id=_tenant_id(tenant), tier=str(tier))
        .first()
    )
    return snapshot_of(contract) if contract else None


async def acontract_for(*, tenant: TenantRef, tier: str) -> ContractSnapshot | None:
    """``contract_for`` for async callers (runs the query on a worker thread)."""
    return await sync_to_async(contract_for, thread_sensitive=True)(tenant=tenant, tier=tier)


def contracts_for_tenant(*, tenant: TenantRef) -> list[ContractSnapshot]:
    """Every contract of ``tenant``, in tier order hot, warm, cold."""
    contracts = SLOContract.objects.select_related("current_version").filter(
        tenant_id=_tenant_id(tenant)
    )
    return sorted((snapshot_of(c) for c in contracts), key=lambda s: Tier(s.tier).rank)


def aggregated_through(window: str) -> dt.datetime | None:
    """Where the materialised ``window`` aggregates end (``None`` before the first run)."""
    return AggregationMark.objects.filter(window=window).values_list("through", flat=True).first()


def records_in_window(*, tenant: TenantRef, tier: str, start: dt.datetime, end: dt.datetime,
                      limit: int = 500) -> list[RequestRecord]:
    """The request records of ``tenant`` asked at ``tier`` that finished in ``[start, end)``
    (the requests a window's verdict was computed from), slowest first token first."""
    qs = RequestRecord.objects.filter(tenant_id=_tenant_id(tenant), tier_asked=str(tier),
                                      finished_at__gte=start, finished_at__lt=end)
    return list(qs.select_related("api_key", "user").order_by(
        F("ttft_s").desc(nulls_first=True), "finished_at")[:limit])
