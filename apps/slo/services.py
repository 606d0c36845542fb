"""Writes for SLO contracts, and the reporting entry points every request path uses.

``report_request`` (``reporting``), ``RequestReport`` (``report_types``) and ``tbt_stats``
(``stats``) are re-exported here so callers import them from one place.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.core.tiers import TIERS
from apps.slo.models import ContractTerms, ContractVersion, SLOContract
from apps.slo.report_types import BatchReport, RequestReport  # noqa: F401 (public API)
from apps.slo.reporting import flush_reports, report_batch, report_request  # noqa: F401
from apps.slo.stats import percentile, tbt_stats  # noqa: F401
from apps.slo.validation import clamp_to_bounds, validate_contract
from apps.tenants.models import Tenant
from apps.tenants.plans import plan_default_terms, tier_bounds


def _version_differs(contract: SLOContract) -> bool:
    current = contract.current_version
    return current is None or current.terms() != contract.terms()


@transaction.atomic
def contract_save(
    *, contract: SLOContract, created_by: str = "", beyond_plan: bool = False
) -> SLOContract:
    """Validate and save ``contract``; when its terms changed, freeze them as a new version.

    Terms must be what the platform can honour and, unless ``beyond_plan`` (platform staff
    only), changed terms must lie within the tenant's plan bounds. Versions are never edited:
    history stays exactly what earlier requests were measured against. Raises
    ``ValidationError`` per field.
    """
    signed = contract.current_version.terms() if contract.current_version_id else None
    errors = validate_contract(contract.terms(), tenant_id=contract.tenant_id, tier=contract.tier,
                               beyond_plan=beyond_plan, signed=signed)
    if errors:
        raise ValidationError(errors)
    contract.save()
    if _version_differs(contract):
        _freeze_version(contract=contract, created_by=created_by)
    return contract


def _freeze_version(*, contract: SLOContract, created_by: str) -> ContractVersion:
    """Snapshot ``contract``'s terms as its next version and make it the one in force."""
    last = contract.versions.order_by("-number").values_list("number", flat=True).first()
    version = ContractVersion.objects.create(
        contract=contract, number=(last or 0) + 1, created_by=created_by[:150],
        **contract.terms(),
    )
    contract.current_version = version
    contract.save(update_fields=["current_version", "updated_at"])
    return version


def _check_names(terms: dict) -> None:
    unknown = set(terms) - set(ContractTerms.TERM_FIELDS)
    if unknown:
        raise TypeError(f"unknown contract terms: {sorted(unknown)}")


def default_terms(*, tenant: Tenant, tier: str) -> dict[str, object]:
    """A new ``tier`` contract's terms: the design's table, overridden by the tenant's plan."""
    return {**ContractTerms.defaults(), **plan_default_terms(tenant, tier)}


def contract_create(
    *, tenant: Tenant, tier: str, created_by: str = "", beyond_plan: bool = False,
    **terms: object,
) -> SLOContract:
    """A new contract for ``tenant`` and ``tier`` (unset terms: the plan's default contract)."""
    _check_names(terms)
    values = {**default_terms(tenant=tenant, tier=tier), **terms}
    return contract_save(contract=SLOContract(tenant=tenant, tier=tier, **values),
                         created_by=created_by, beyond_plan=beyond_plan)


def contract_update(
    *, contract: SLOContract, created_by: str = "", beyond_plan: bool = False, **terms: object
) -> SLOContract:
    """Change some terms of ``contract``; creates a new version when anything changed."""
    _check_names(terms)
    for name, value in terms.items():
        setattr(contract, name, value)
    return contract_save(contract=contract, created_by=created_by, beyond_plan=beyond_plan)


PLAN_DEFAULTS_AUTHOR = "plan defaults"


def contracts_ensure_defaults(*, tenant: Tenant) -> list[SLOContract]:
    """Give ``tenant`` its plan's default contract for every tier it lacks.

    Runs for every new tenant (``signals``); existing contracts are left as they are. The
    plan's defaults are signed as platform staff set them. Returns hot → cold.
    """
    existing = {c.tier: c for c in SLOContract.objects.filter(tenant=tenant)}
    for tier in TIERS:
        if tier not in existing:
            existing[tier] = contract_create(tenant=tenant, tier=tier, beyond_plan=True,
                                             created_by=PLAN_DEFAULTS_AUTHOR)
    return [existing[t] for t in TIERS]


@transaction.atomic
def contracts_clamp_to_plan(
    *, tenant: Tenant | int, created_by: str, tiers: tuple[str, ...] = TIERS
) -> list[SLOContract]:
    """Clamp ``tenant``'s contracts for ``tiers`` to its plan's bounds: the terms outside them
    move onto the bound, as a new version authored ``created_by`` (a contract within them,
    terms staff signed beyond the old plan included, gets none). Runs when the tenant moves to
    another plan or its plan's bounds change (``signals``), so no contract outlives the plan
    it was signed under. Returns the contracts that changed."""
    changed = []
    for contract in SLOContract.objects.select_for_update().filter(tenant=tenant, tier__in=tiers):
        terms = clamp_to_bounds(contract.terms(), tier_bounds(contract.tenant_id, contract.tier))
        if terms:
            changed.append(contract_update(contract=contract, created_by=created_by, **terms))
    return changed
